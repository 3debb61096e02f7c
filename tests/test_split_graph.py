"""Soundness of the split graph (branchc/splitter/states.py) against CPython's own runs.

The manifest of a compiled function lists its states (0: from the call to the first yield;
k: from the resume at yield k to the next suspension), the lines each state may run, and the
transitions between states. A random program (the `programs(ENABLED, methods=False)` strategy of
tests/test_split_random.py) runs NATIVELY under a script of next / send / throw / close, and
after each step we read where `gen` waits (`suspended_at`, mapped to a label through the
manifest's suspension spans). Every observed move from state a to state b must be a manifest
transition (a, b); a generator that returns after next/send must have (a, "return"); and the
lines the step ran must be among state a's lines.

What the pass leaves out on purpose (states.py's docstring) is left out here too: a step in
which an ordinary statement raised (a TypeError from `None + 1`, an UnboundLocalError after
`del`, ...) is not checked, since the pass does not draw those exceptions; nor is a step that
ends with an exception escaping `gen`, a return right after a throw, nor `close()`. An
exception raised AT a yield (the script's throw, GeneratorExit included, or a delegate failing
under `yield from`) or by a `raise` statement is drawn, and so is checked: a thrown exception
caught by a handler that reaches a later yield must be a transition. Which kind of exception a
step saw is read with a trace function on `gen`'s frame: the instruction an 'exception' event
points at is a yield's (its position is a suspension's span), a RAISE_VARARGS, or anything else.

Gaps this test found in the pass, now fixed, keep a minimal reproducer each at the end.

The hand-written programs pin the exact transitions (and lines) of a few constructs.

BRANCHC_GRAPH_EXAMPLES sets the number of random examples of each random test (default 300).
"""

from __future__ import annotations

import builtins
import dis
import inspect
import os
import sys
import textwrap
from dataclasses import dataclass, field

import pytest
from differential import load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_split_random import ENABLED, THROWN, programs, scripts

from branchc.continuation.generator import suspended_at
from branchc.splitter.compiler import compile_module

EXAMPLES = int(os.environ.get("BRANCHC_GRAPH_EXAMPLES", "300"))

# differential.load puts this line above every program (native and compiled alike): the
# manifest's lines and spans are those of the text CPython runs only when compiled with it.
HEADER = "from branchc import resumable\n"

RAISE_VARARGS = dis.opmap["RAISE_VARARGS"]

# Generators left suspended in a `finally` that yields complain when collected.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def manifest_of(source: str, qualname: str = "gen") -> dict:
    module = compile_module(HEADER + source, "<prog>")
    (function,) = [f for f in module.functions if f.qualname == qualname]
    return function.manifest()


def transitions(manifest: dict) -> set[tuple[int, int | str, str]]:
    return {(t["source"], t["target"], t["kind"]) for t in manifest["transitions"]}


# -- running a program natively, step by step ------------------------------------------------


@dataclass
class Step:
    op: tuple
    source: int  # the state the step starts in
    target: int | str  # a label, "return", "raise" (an exception escaped) or "closed"
    raised: list[str] = field(default_factory=list)  # exceptions in gen's frame: "yield", "raise", "ordinary ..."
    lines: set[int] = field(default_factory=set)  # the lines of gen that ran ('line' events)


class _Watch:
    """A trace function on the frames of one code object: its line events, and its exception
    events, classified by the instruction they point at."""

    def __init__(self, code, sites: dict[tuple[int, int], int]) -> None:
        self.code = code
        self.sites = sites
        self.positions = list(code.co_positions())
        self.reset()

    def reset(self) -> None:
        self.raised: list[str] = []
        self.lines: set[int] = set()

    def _position(self, frame) -> tuple[int, int]:
        line, _, column, _ = self.positions[frame.f_lasti // 2]
        return line, (column or 0) + 1

    def _global(self, frame, event, arg):
        if frame.f_code is not self.code:
            return None
        return self._local(frame, event, arg)

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines.add(frame.f_lineno)
        elif event == "exception":
            opcode = self.code.co_code[frame.f_lasti]
            if self._position(frame) in self.sites:
                self.raised.append("yield")
            elif opcode == RAISE_VARARGS:
                self.raised.append("raise")
            else:
                self.raised.append(f"ordinary {dis.opname[opcode]} {arg[0].__name__}")
        return self._local

    def __enter__(self):
        self.previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self.previous)


def _exception(op: tuple) -> BaseException:
    kind = getattr(builtins, op[1])
    return kind(*op[2:])


def run_native(source: str, script: list[tuple], args: tuple, manifest: dict) -> list[Step]:
    """Run `gen` natively under `script`; one Step per operation, until the generator is done."""
    spans = {tuple(site["span"][:2]): site["label"] for site in manifest["suspensions"]}
    module = load(source, compiled=False)
    module.emit = [].append
    generator = module.gen(*args)
    watch = _Watch(generator.gi_code, spans)
    state = 0
    steps: list[Step] = []
    for op in script:
        watch.reset()
        outcome: str | None = None
        with watch:
            try:
                if op[0] == "next":
                    next(generator)
                elif op[0] == "send":
                    generator.send(op[1])
                elif op[0] == "throw":
                    generator.throw(_exception(op))
                else:
                    generator.close()
            except StopIteration:
                outcome = "return"
            except BaseException:
                outcome = "raise"
        status = inspect.getgeneratorstate(generator)
        if status == inspect.GEN_CREATED:  # send(1) to a new generator: a TypeError, nothing ran
            assert outcome == "raise" and not watch.lines, (op, outcome)
            continue
        if status == inspect.GEN_CLOSED:
            target: int | str = outcome or "closed"
        else:
            where = suspended_at(generator)
            key = (where["line"], where["column"])
            assert where["function"] == "gen" and key in spans, f"gen waits at {where}, no suspension of {spans}"
            target = spans[key]
        steps.append(Step(op, state, target, watch.raised, watch.lines))
        if status == inspect.GEN_CLOSED:
            break
        state = target  # type: ignore[assignment]
    try:  # finish it here rather than in the collector (a finally may yield: RuntimeError)
        generator.close()
    except BaseException:
        pass
    return steps


# -- what the manifest must hold ---------------------------------------------------------------


def checked(step: Step) -> bool:
    """Whether the pass promises to draw this step's move (see the module's docstring)."""
    if step.op[0] == "close" or step.target in ("raise", "closed"):
        return False
    if any(kind.startswith("ordinary") for kind in step.raised):
        return False
    return step.target != "return" or step.op[0] in ("next", "send")


def violations(manifest: dict, steps: list[Step]) -> list[str]:
    """What the manifest misses of the observed steps: a move (a, b) must be a transition, and the
    lines the step ran must be among state a's."""
    drawn = {(t["source"], t["target"]) for t in manifest["transitions"]}
    lines = {state["label"]: set(state["lines"]) for state in manifest["states"]}
    # Since 3.12 an exception thrown into a `yield from` that the delegate handles gives a line event
    # for the `yield from`'s own line when control comes back to gen: the state resumes on that line.
    delegating = {
        site["label"]: set(range(site["span"][0], site["span"][2] + 1))
        for site in manifest["suspensions"]
        if site["delegates"]
    }
    missing = []
    for step in steps:
        if not checked(step):
            continue
        extra = step.lines - lines[step.source]
        if step.op[0] == "throw" and sys.version_info >= (3, 12):
            extra -= delegating.get(step.source, set())
        if (step.source, step.target) in drawn and not extra:
            continue
        what = f"lines {sorted(extra)} are not state {step.source}'s" if extra else "no such transition"
        missing.append(f"{step.source} -> {step.target} by {step.op}: {what}; {step}")
    return missing


def _report(source: str, script: list[tuple], args: tuple, manifest: dict, steps, missing) -> str:
    lines = ["the split graph misses what CPython does:", *missing, "program:"]
    lines += [f"{number:3} {text}" for number, text in enumerate((HEADER + source).splitlines(), 1)]
    lines += [f"script: {script!r}", f"args: {args!r}", "steps:", *map(repr, steps)]
    lines += ["transitions:", repr(sorted(transitions(manifest), key=str))]
    lines += ["states:", repr({state["label"]: state["lines"] for state in manifest["states"]})]
    return "\n".join(lines)


def check_run(source: str, script: list[tuple], args: tuple = ()) -> list[Step]:
    manifest = manifest_of(source)
    steps = run_native(source, script, args, manifest)
    missing = violations(manifest, steps)
    assert not missing, _report(source, script, args, manifest, steps, missing)
    return steps


# -- random programs ------------------------------------------------------------------------------

RANDOM = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@RANDOM
@given(source=programs(ENABLED, methods=False), script=scripts(ENABLED), arg=st.integers(0, 2))
def test_random_program_moves_are_drawn(source, script, arg):
    check_run(source, script, (arg,))


# scripts() mostly ends a program with its first throw (few random handlers catch it): this one
# sends ints (fewer TypeErrors) and throws often, so thrown exceptions reach handlers' yields.
_thrown_scripts = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 3)),
        st.tuples(st.just("throw"), st.sampled_from(THROWN), st.just("t")),
    ),
    min_size=1,
    max_size=11,
).map(lambda ops: [("next",), *ops])


@RANDOM
@given(source=programs(ENABLED, methods=False), script=_thrown_scripts, arg=st.integers(0, 2))
def test_random_program_thrown_moves_are_drawn(source, script, arg):
    check_run(source, script, (arg,))


# -- the checker itself can fail ---------------------------------------------------------------

LOOP = """\
@resumable
def gen():
    for i in range(3):
        x = yield 1
        if x == 1:
            continue
        if x == 2:
            break
        yield 2
    yield 3
"""


def test_checker_reports_what_the_manifest_lacks():
    script = [("next",), ("send", 0), ("send", 0), ("send", 2), ("send", 0)]
    manifest = manifest_of(LOOP)
    steps = run_native(LOOP, script, (), manifest)
    assert [(s.source, s.target) for s in steps] == [(0, 1), (1, 2), (2, 1), (1, 3), (3, "return")]
    assert violations(manifest, steps) == []
    for source, target in [(2, 1), (1, 3), (3, "return")]:
        kept = [t for t in manifest["transitions"] if (t["source"], t["target"]) != (source, target)]
        missing = violations(dict(manifest, transitions=kept), steps)
        assert len(missing) == 1 and missing[0].startswith(f"{source} -> {target} "), missing
    pruned = dict(manifest, states=[dict(s, lines=[n for n in s["lines"] if n != 9]) for s in manifest["states"]])
    missing = violations(pruned, steps)  # line 9 (`break`) ran only in the step 1 -> 3
    assert [m.split(":")[0] for m in missing] == ["1 -> 3 by ('send', 2)"]


def test_exceptions_in_gen_are_classified():
    source = textwrap.dedent(
        """\
        @resumable
        def gen():
            try:
                yield 1
            except ValueError:
                pass
            try:
                x = (yield 2) + 1
            except TypeError:
                pass
            try:
                raise KeyError(3)
            except KeyError:
                yield 4
        """
    )
    manifest = manifest_of(source)
    steps = run_native(source, [("next",), ("throw", "ValueError", "t"), ("send", 0)], (), manifest)
    assert [(s.source, s.target, s.raised) for s in steps] == [
        (0, 1, []),
        (1, 2, ["yield"]),
        (2, 3, ["raise"]),
    ]
    steps = run_native(source, [("next",), ("send", 0), ("send", None)], (), manifest)
    assert [(s.source, s.target, s.raised) for s in steps] == [
        (0, 1, []),
        (1, 2, []),
        (2, 3, ["ordinary BINARY_OP TypeError", "raise"]),
    ]
    assert not checked(steps[-1]) and checked(steps[-2])


# -- hand-written programs: the exact graph --------------------------------------------------------

N = ("next",)


def S(value):
    return ("send", value)


def T(name):
    return ("throw", name, "t")


n, loop, exc = "normal", "loop", "exception"

GRAPHS = [
    pytest.param(
        LOOP,
        {
            (0, 1, n),
            (0, 3, n),
            (1, 1, loop),
            (1, 2, n),
            (1, 3, n),
            (1, 3, loop),
            (2, 1, loop),
            (2, 3, loop),
            (3, "return", n),
        },
        {0: [4, 5, 11], 1: [4, 5, 6, 7, 8, 9, 10, 11], 2: [4, 5, 10, 11], 3: [11]},
        [[N, S(1), S(0), S(0), S(0), S(0)], [N, S(2), S(0)], [N, S(0), S(0), S(1), S(0)]],
        id="for-break-continue",
    ),
    pytest.param(
        """\
        @resumable
        def gen():
            try:
                x = yield 1
                if x:
                    raise ValueError(x)
            except ValueError:
                yield 2
            else:
                yield 3
            finally:
                yield 4
            yield 5
        """,
        {
            (0, 1, n),
            (1, 2, exc),  # raise, or thrown at yield 1
            (1, 3, n),
            (1, 4, exc),  # what no handler catches runs the finally
            (2, 4, n),
            (2, 4, exc),
            (3, 4, n),
            (3, 4, exc),
            (4, 5, n),
            (4, "raise", exc),  # the finally re-raises what it ran for
            (5, "return", n),
        },
        {0: [4, 5], 1: [5, 6, 7, 8, 9, 11, 13], 2: [9, 13], 3: [11, 13], 4: [13, 14], 5: [14]},
        [
            [N, S(0), S(0), S(0), S(0)],
            [N, S(1), S(0), S(0), S(0)],
            [N, T("ValueError"), S(0), S(0)],
            [N, T("KeyError"), S(0)],
        ],
        id="try-except-else-finally",
    ),
    pytest.param(
        """\
        @resumable
        def gen():
            x = (yield "a") or (yield "b")
            return x
        """,
        {(0, 1, n), (1, 2, n), (1, "return", n), (2, "return", n)},
        {0: [4], 1: [4, 5], 2: [4, 5]},
        [[N, S(0), S(5)], [N, S(3)]],
        id="or-of-yields",
    ),
    pytest.param(
        # (0, 2, n): as far as the pass knows, sub() may return without yielding
        """\
        @resumable
        def sub():
            yield 1
            return 2

        @resumable
        def gen():
            r = yield from sub()
            yield r
        """,
        {(0, 1, n), (0, 2, n), (1, 1, n), (1, 2, n), (2, "return", n)},
        {0: [9, 10], 1: [9, 10], 2: [10]},
        [[N, S(0), S(0)], [N, T("ValueError")]],
        id="yield-from",
    ),
    pytest.param(
        """\
        @resumable
        def gen():
            try:
                try:
                    yield 1
                except KeyError:
                    yield 2
            except ValueError:
                yield 3
            yield 4
        """,
        {(0, 1, n), (1, 2, exc), (1, 3, exc), (1, 4, n), (2, 3, exc), (2, 4, n), (3, 4, n), (4, "return", n)},
        {0: [4, 5, 6], 1: [6, 7, 8, 9, 10, 11], 2: [8, 9, 10, 11], 3: [10, 11], 4: [11]},
        [[N, T("ValueError"), S(0), S(0)], [N, T("KeyError"), T("ValueError"), S(0), S(0)], [N, S(0), S(0)]],
        id="nested-try-outer-catches",
    ),
    pytest.param(
        """\
        @resumable
        def gen():
            n = 0
            while True:
                n += yield n
                if n > 3:
                    return n
        """,
        {(0, 1, n), (1, 1, loop), (1, "return", n)},
        {0: [4, 5, 6], 1: [5, 6, 7, 8]},
        [[N, S(1), S(2), S(3)]],
        id="while-true-return",
    ),
]


@pytest.mark.parametrize(("source", "expected", "lines", "runs"), GRAPHS)
def test_exact_graph(source, expected, lines, runs):
    source = textwrap.dedent(source)
    manifest = manifest_of(source)
    assert transitions(manifest) == expected
    assert {state["label"]: state["lines"] for state in manifest["states"]} == lines
    seen = set()
    for script in runs:  # and CPython takes no move outside it
        steps = check_run(source, script)
        seen |= {(s.source, s.target) for s in steps if checked(s)}
    # the scripts exercise most of the graph: a run that went nowhere would prove nothing
    assert len(seen) >= len({(s, t) for s, t, _ in expected}) // 2, seen


# -- gaps found in states.py, fixed: minimal reproducers ------------------------------------------------------


class Precondition(Exception):
    """The run did not do what the reproducer is about (not the gap: a broken test)."""


GAPS = [
    pytest.param(
        "@resumable\ndef gen(items):\n    yield from items\n    yield 'end'\n",
        [N],
        ([],),
        (0, 2),
        id="yield-from-may-not-suspend",  # fixed: a delegate may finish without suspending
    ),
    pytest.param(
        "@resumable\ndef gen():\n    x = 1 < (yield 1) <= (yield 2)\n    yield 3\n",
        [N, S(0)],
        (),
        (1, 3),
        id="comparison-chain-short-circuits",  # fixed: a chain stops at the first false comparison
    ),
    pytest.param(
        "@resumable\ndef gen():\n    x = (yield 1) or ((yield 2) + (yield 3))\n    yield 4\n",
        [N, S(1)],
        (),
        (1, 4),
        id="optional-operand-with-two-yields",
        # fixed: a run of optional yields is skipped together
    ),
    pytest.param(
        "@resumable\ndef gen(ok):\n    assert ok, (yield 1)\n    yield 2\n",
        [N],
        (True,),
        (0, 2),
        id="assert-message",
        # fixed: an assert's message is evaluated only when the test fails
    ),
    pytest.param(
        textwrap.dedent(
            """\
            @resumable
            def gen():
                try:
                    try:
                        yield 1
                        raise ValueError
                    except Exception:
                        yield 2
                finally:
                    yield 3
            """
        ),
        [N, T("GeneratorExit")],
        (),
        (1, 3),
        id="except-Exception-lets-GeneratorExit-through",
        # fixed: `except Exception` does not catch a thrown GeneratorExit
    ),
    pytest.param(
        "@resumable\ndef gen():\n    f = lambda x=(yield 1): x\n    yield 2\n",
        [N, S(0)],
        (),
        (0, 1),
        id="yield-in-a-default",
        # fixed: the defaults (and decorators) of a nested def or lambda run in gen
    ),
    pytest.param(
        textwrap.dedent(
            """\
            @resumable
            def helper():
                try:
                    yield 1
                except KeyError:
                    return "caught"

            @resumable
            def gen():
                yield (yield from helper())
                yield 3
            """
        ),
        [N, T("KeyError")],
        (),
        (1, 2),
        id="throw-into-yield-from-handled-by-the-delegate",
        # fixed (the test): since 3.12 CPython reports a line event for the `yield from` line as the state resumes
    ),
]


@pytest.mark.parametrize(("source", "script", "args", "move"), GAPS)
def test_gap(source, script, args, move):
    manifest = manifest_of(source)
    steps = run_native(source, script, args, manifest)
    if move not in {(s.source, s.target) for s in steps if checked(s)}:
        raise Precondition(f"CPython did not move {move}: {steps}")
    missing = violations(manifest, steps)
    assert not missing, _report(source, script, args, manifest, steps, missing)
