"""A generator suspended while it handles a GeneratorExit, a KeyboardInterrupt or another BaseException
that is not an Exception, or with one pending in a finally that yields, travels in a snapshot: exactly
what the compiler's analysis allows around that yield, and nothing else (see lower.py `catches`).

- A handler keeps what its `except` clause names: GeneratorExit for `except GeneratorExit:`, any
  BaseException for `except BaseException:` or a bare `except:`, either class of a tuple.
- A finally holds, pending, what can reach it: GeneratorExit when a yield lies in its try (a close()
  there), and what its try raises by name (`raise KeyboardInterrupt`). A KeyboardInterrupt thrown
  into such a try is not kept: that snapshot is refused, naming what may be held there.

Each program runs through differential.check (CPython is the reference, in every mode: compiled,
and snapshotted and resumed before every operation, in process and through JSON), and a few are
resumed in a fresh process at every step (differential.check_in_fresh_processes).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from differential import BASE_EXCEPTION_REFUSED, C, N, S, T, check, check_in_fresh_processes, load

from branchc import release, resume, snapshot
from branchc.continuation.errors import NotSerializableError

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def T0(name: str) -> tuple:
    """throw() of an exception instance built without arguments."""
    return ("throw", name)


PROGRAMS = {
    "except-generatorexit": (
        """
        @resumable
        def gen():
            try:
                yield 1
            except GeneratorExit as error:
                emit(("caught", type(error).__name__))
                got = yield 2
                emit(("got", got))
            yield 3
        """,
        [[N, C, S("a"), N, N], [N, T0("GeneratorExit"), S("b"), N], [N, C, C], [N, C, T("ValueError", "v")]],
    ),
    "except-base-exception": (
        """
        @resumable
        def gen():
            try:
                yield 1
            except BaseException as error:
                emit(("caught", type(error).__name__, error.args))
                yield 2
                raise
        """,
        [[N, T0("KeyboardInterrupt"), N], [N, ("throw", "SystemExit", 3), N], [N, C, N], [N, T("KeyError", "k"), N]],
    ),
    "bare-except": (
        """
        @resumable
        def gen():
            while True:
                try:
                    yield "body"
                except:
                    emit("caught")
                    got = yield "handler"
                    if got == "stop":
                        return got
        """,
        [[N, T0("KeyboardInterrupt"), N, T0("SystemExit"), S("stop")], [N, C, S("stop")], [N, C, C]],
    ),
    "except-tuple": (
        """
        @resumable
        def gen():
            while True:
                try:
                    yield 1
                except (GeneratorExit, KeyError) as error:
                    emit(("caught", type(error).__name__))
                    yield 2
        """,
        [[N, C, N, C], [N, T("KeyError", "k"), N, T0("GeneratorExit"), N], [N, T("IndexError", "i")]],
    ),
    "finally-yields-while-generatorexit-is-pending": (
        """
        @resumable
        def gen():
            try:
                yield 1
            finally:
                emit("finally")
                got = yield 2
                emit(("got", got))
        """,
        [[N, C, S("x")], [N, C, C], [N, T0("GeneratorExit"), N], [N, N, N]],
    ),
    "nested": (
        """
        @resumable
        def gen():
            try:
                yield 1
            except GeneratorExit:
                try:
                    yield 2
                except GeneratorExit:
                    yield 3
                finally:
                    emit("inner finally")
                    yield 4
            try:
                yield 5
            except GeneratorExit:
                try:
                    yield 6
                except ValueError as error:
                    emit(("context", type(error.__context__).__name__))
                    yield 7
        """,
        [[N, C, C, N, N, N], [N, C, N, N, N], [N, N, N, C, T("ValueError", "v"), N, N], [N, C, N, C, C]],
    ),
    "finally-pending-a-raise-by-name": (
        """
        @resumable
        def gen():
            try:
                yield 1
                raise KeyboardInterrupt("stop")
            finally:
                yield "finally"
        """,
        [[N, N, N], [N, C, N]],
    ),
    "delegated": (
        """
        @resumable
        def sub():
            try:
                yield "sub"
            finally:
                yield "sub finally"

        @resumable
        def gen():
            try:
                got = yield from sub()
            except GeneratorExit:
                yield "outer handler"
        """,
        [[N, C, N, N], [N, T0("GeneratorExit"), N, N]],
    ),
}

CASES = [
    pytest.param(textwrap.dedent(source), script, id=f"{name}-{index}")
    for name, (source, scripts) in PROGRAMS.items()
    for index, script in enumerate(scripts)
]


@pytest.mark.parametrize(("source", "script"), CASES)
def test_against_cpython(source: str, script: list) -> None:
    check(source, script)


@pytest.mark.parametrize(
    ("name", "script"),
    [
        ("except-generatorexit", [N, C, S("a"), N]),
        ("except-base-exception", [N, T0("KeyboardInterrupt"), N]),
        ("finally-yields-while-generatorexit-is-pending", [N, C, S("x")]),
        ("nested", [N, C, C, N, N, N]),
    ],
)
def test_resumed_in_a_fresh_process(name: str, script: list, tmp_path: Path) -> None:
    source = textwrap.dedent(PROGRAMS[name][0])
    assert check_in_fresh_processes(source, script, tmp_path) >= 3


def _json(generator) -> dict:
    return json.loads(json.dumps(snapshot(generator)))


def test_each_step_that_holds_one_travels() -> None:
    """Not refused and skipped by the harness: snapshotted, and resumed as it was."""
    module = load(textwrap.dedent(PROGRAMS["nested"][0]), compiled=True)
    module.emit = lambda value: None
    generator = module.gen()
    next(generator)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="generator ignored GeneratorExit"):
            generator.close()
        data = _json(generator)
        assert "builtins:GeneratorExit" in data["graph"]["classes"], data
        resumed = resume(data)
        release(generator)
        generator = resumed
    assert next(generator) == 4  # in the inner finally, the first GeneratorExit still handled outside
    assert generator.gi_frame.f_locals["_bc_exc1"].__class__ is GeneratorExit
    resumed = resume(_json(generator))
    release(generator)
    assert next(resumed) == 5
    release(resumed)


def test_what_nothing_around_the_yield_can_hold_is_refused() -> None:
    module = load(
        textwrap.dedent(
            """
            @resumable
            def thrown():
                try:
                    yield 1
                finally:
                    yield 2

            @resumable
            def kept():
                try:
                    yield 1
                except GeneratorExit as error:
                    held = error
                yield 2
                yield held
            """
        ),
        compiled=True,
    )
    generator = module.thrown()  # a KeyboardInterrupt thrown in is not what the analysis finds can be pending
    next(generator)
    assert generator.throw(KeyboardInterrupt()) == 2
    with pytest.raises(NotSerializableError, match=BASE_EXCEPTION_REFUSED) as refused:
        snapshot(generator)
    assert "the exception pending in a finally block" in str(refused.value)
    assert "(here: GeneratorExit)" in str(refused.value)
    release(generator)
    generator = module.kept()  # held past its handler, in a variable, where nothing can hold one
    next(generator)
    assert generator.throw(GeneratorExit()) == 2
    with pytest.raises(NotSerializableError, match="variable 'held'") as refused:
        snapshot(generator)
    assert "(here: none)" in str(refused.value)
    release(generator)
