"""Differential testing: a compiled generator must behave exactly like CPython's own.

A program is Python source defining `gen` (decorated @resumable) that may call
`emit(value)` to record side effects. A script is a list of operations applied to
the generator: ("next",), ("send", value), ("throw", "ValueError", "message"),
("close",). The trace records, for every operation, what came out (a yielded
value, the return value, or the exception with its whole __cause__/__context__
chain), plus everything emitted. The same trace must come out of:

- the native generator,
- the compiled generator,
- the compiled generator snapshotted and resumed before every operation, either
  in process (raw state), or through JSON (`json.dumps` / `json.loads`); the original is
  then released (`branchc.release`), as a run that goes on elsewhere lets go of it, so
  none of its cleanup runs (a raw copy shares the original's objects: the originals are
  released when the trace ends).

A `with` statement whose line carries the comment CANNOT_TRAVEL uses a context manager that
cannot travel in a snapshot (one holding a lock, say). Before an operation at which the native
generator is suspended inside such a block, the JSON mode must refuse the snapshot: raise
NotSerializableError (or another TypeError) whose message names the line of that `with`
("<file>:LINE" or "line LINE"); the operation then runs on the generator as it is, and the
trace goes on. The raw mode copies values in process, so it takes them (the manager's exit
then runs once, in the resumed copy).

A generator that keeps a BaseException that is not an Exception across a yield is snapshotted
and checked like any other where the compiler's analysis says one can be there: the exception a
handler keeps, of a class its `except` clause names (`except GeneratorExit:`, `except
BaseException:`, a bare `except:`), one pending in a finally that a close() at a yield in its try
left there (GeneratorExit), or that its try raises by name. Elsewhere (a KeyboardInterrupt thrown
into a try whose finally yields, say) a snapshot is refused by design, with a NotSerializableError
that names what may be held there; the snapshot modes then go on without one at that step.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

from branchc.splitter import compile_module

_counter = itertools.count()

MODES = ("native", "compiled", "raw", "json")


# Script steps, for programs written by hand.
N = ("next",)
C = ("close",)


def S(value: Any) -> tuple:
    return ("send", value)


def T(name: str, *args: Any) -> tuple:
    """throw() of the builtin exception `name` made with `args` (by default one argument, "x")."""
    return ("throw", name, *args) if args else ("throw", name, "x")


def _exc(error: BaseException | None, depth: int = 0) -> Any:
    if error is None or depth > 4:
        return None
    return (
        type(error).__name__,
        str(error),
        _exc(error.__cause__, depth + 1),
        _exc(error.__context__, depth + 1),
        error.__suppress_context__,
    )


def _logged(value: Any) -> Any:
    """An emitted value as the trace keeps it: exceptions (which compare by identity) as their _exc,
    inside tuples, lists and dicts too; anything else as it is."""
    if isinstance(value, BaseException):
        return ("<exception>", _exc(value))
    if type(value) in (tuple, list):
        return type(value)(_logged(item) for item in value)
    if type(value) is dict:
        return {key: _logged(item) for key, item in value.items()}
    return value


def _fresh_namespace(module: types.ModuleType) -> list[Any]:
    log: list[Any] = []
    module.emit = log.append  # type: ignore[attr-defined]
    return log


_COMPILED: dict[str, Any] = {}


def load(source: str, compiled: bool) -> types.ModuleType:
    name = f"prog_{next(_counter)}_{'c' if compiled else 'n'}"
    source = "from branchc import resumable\n" + source
    if compiled:  # compile each program once; every mode gets a fresh module of its own
        if source not in _COMPILED:
            if len(_COMPILED) > 64:
                _COMPILED.clear()
            _COMPILED[source] = compile_module(source, "<prog>")
        module = types.ModuleType(name)
        module.__file__ = f"<{name}>"
        sys.modules[name] = module
        exec(_COMPILED[source].code_object(f"<{name}>"), module.__dict__)
        return module
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def _reload(generator: Any, mode: str) -> Any:
    """Snapshot the generator and resume it: in process, or through JSON."""
    from branchc.continuation import generator as rt

    if mode == "raw":
        state, label, values = rt.state(generator)
        return rt.make_generator(rt.meta_of(generator.gi_code), state, label, values, rt.free_cells(generator))
    from branchc.continuation.snapshots import resume, snapshot

    data = json.loads(json.dumps(snapshot(generator)))
    return resume(data)


#: Marks the line of a `with` whose context manager cannot travel in a snapshot (see the module docstring).
CANNOT_TRAVEL = "# cannot travel"


def _untravelable_blocks(source: str) -> list[tuple[int, int, int]]:
    """(line of the `with`, first and last line of its body) for each `with` marked CANNOT_TRAVEL,
    in the numbering of the module `load` makes (one line above the source)."""
    if CANNOT_TRAVEL not in source:
        return []
    text = "from branchc import resumable\n" + source
    lines = text.splitlines()
    blocks = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.With) and CANNOT_TRAVEL in lines[node.lineno - 1]:
            blocks.append((node.lineno, node.body[0].lineno, node.end_lineno or node.lineno))
    return blocks


def _untravelable_at(generator: Any, blocks: list[tuple[int, int, int]]) -> tuple[int, ...]:
    """The lines of the marked `with` blocks a suspended native generator is inside."""
    frame = getattr(generator, "gi_frame", None)
    if not blocks or frame is None or not getattr(generator, "gi_suspended", False):
        return ()
    line = frame.f_lineno
    return tuple(with_line for with_line, first, last in blocks if first <= line <= last)


def _refusal_problem(generator: Any, mode: str, with_lines: tuple[int, ...]) -> tuple[Any, Any]:
    """Snapshot where it must be refused: (None, generator) when it is refused as it should be,
    else (what went wrong, the generator to go on with)."""
    try:
        resumed = _reload(generator, mode)
    except TypeError as error:
        message = str(error)
        if any(re.search(rf"(?::|\bline )\s*{line}(?!\d)", message) for line in with_lines):
            return None, generator
        if BASE_EXCEPTION_REFUSED in message:
            return None, generator  # refused by design too (see the module docstring), for what it met first
        named = " or ".join(str(line) for line in with_lines)
        return ("snapshot refused without naming the with at line " + named, _exc(error)), generator
    except BaseException as error:
        return ("snapshot refused with a non-TypeError", _exc(error)), generator
    return ("snapshot not refused inside the with at line", with_lines), resumed


def apply(generator: Any, op: tuple) -> tuple:
    """One operation of a script on a generator, and what it gave: ("yield" | "closed" | "return", repr) or
    ("raise", the exception described)."""
    try:
        if op[0] == "next":
            return ("yield", repr(next(generator)))
        if op[0] == "send":
            return ("yield", repr(generator.send(op[1])))
        if op[0] == "throw":
            return ("yield", repr(generator.throw(getattr(builtins, op[1])(*op[2:]))))
        if op[0] == "close":
            return ("closed", repr(generator.close()))
        raise AssertionError(op)
    except StopIteration as stop:
        return ("return", repr(stop.value))
    except BaseException as error:
        return ("raise", _exc(error))


def trace(
    source: str,
    script: list[tuple],
    mode: str,
    args: tuple = (),
    untravelable: list[tuple[int, ...]] | None = None,
) -> list[Any]:
    """The trace of `script` in one mode. In the native mode, `untravelable` (a list to fill, if given)
    gets, before each operation, the marked `with` lines the generator is suspended inside; in the
    snapshot modes, `untravelable` (that list) says where the snapshot must be refused instead."""
    from branchc import release

    module = load(source, compiled=mode != "native")
    log = _fresh_namespace(module)
    generator = module.gen(*args)
    out: list[Any] = []
    kept: list[Any] = []
    blocks = _untravelable_blocks(source) if mode == "native" and untravelable is not None else []
    for index, op in enumerate(script):
        problem = None
        if mode == "native" and untravelable is not None:
            untravelable.append(_untravelable_at(generator, blocks))
        refuse = untravelable[index] if mode == "json" and untravelable else ()  # raw mode copies in process
        if refuse:
            problem, resumed = _refusal_problem(generator, mode, refuse)
        elif mode in ("raw", "json"):
            resumed = _reload_unless_base_exception(generator, mode)
        if mode in ("raw", "json") and resumed is not generator:
            if mode == "json":
                release(generator)  # the run goes on in the resumed copy: the original lets go, running nothing
            else:
                kept.append(generator)  # a raw copy shares the original's objects: let go of it at the end
            generator = resumed
        result = apply(generator, op)
        if problem is not None:
            result = ("snapshot", problem, result)
        out.append((op, result, [_logged(value) for value in log]))
    for old in kept:
        if old.gi_frame is not None and not old.gi_running:
            release(old)
    return out


#: What a snapshot says when it refuses a BaseException that is not an Exception where the compiler's
#: analysis finds nothing around the yield that can hold one (see the module docstring).
BASE_EXCEPTION_REFUSED = "a snapshot holds one only where an except clause or a finally around the yield can hold it"


def _reload_unless_base_exception(generator: Any, mode: str) -> Any:
    """`_reload`, except where the generator keeps a BaseException that is not an Exception across its
    yield where the analysis allows none (a KeyboardInterrupt thrown into a try whose finally yields,
    say): a snapshot refuses those by design (a resumed run must not raise what nothing could have
    caught there), so the trace goes on without one at that step. Where the analysis allows one (a
    GeneratorExit in `except GeneratorExit:`, or pending in a finally after a close()), the snapshot is
    taken and the step checked like any other."""
    from branchc.continuation.errors import NotSerializableError

    try:
        return _reload(generator, mode)
    except NotSerializableError as error:
        if BASE_EXCEPTION_REFUSED not in str(error):
            raise
        return generator


def check(source: str, script: list[tuple], args: tuple = (), modes: tuple[str, ...] = MODES[1:]) -> None:
    """Assert every mode gives the native trace, with a readable report when one does not."""
    untravelable: list[tuple[int, ...]] = []
    expected = trace(source, script, "native", args, untravelable)
    for mode in modes:
        got = trace(source, script, mode, args, untravelable)
        if got != expected:
            lines = [f"mode {mode!r} differs from CPython", "program:", source, "script:", repr(script)]
            for index, (want, have) in enumerate(zip(expected, got, strict=False)):
                mark = "  " if want == have else "!!"
                lines.append(f"{mark} step {index}: native {want!r}")
                if want != have:
                    lines.append(f"{mark}          {mode:6} {have!r}")
                if mode in ("raw", "json") and index < len(untravelable) and untravelable[index]:
                    lines.append(f"   (a snapshot here must be refused: inside the with at {untravelable[index]})")
            raise AssertionError("\n".join(lines))


# -- resumed in a fresh process -----------------------------------------------------------------

_RUNNER = textwrap.dedent(
    """
    import builtins, json, sys
    import program
    from branchc import resume
    from differential import _exc
    log = []
    program.emit = log.append
    jobs = json.loads(sys.stdin.read())
    out = []
    for data, ops in jobs:
        del log[:]
        generator = resume(data, allowed_modules={"program"})
        steps = []
        for op in ops:
            before = len(log)
            try:
                if op[0] == "next":
                    result = ["yield", repr(next(generator))]
                elif op[0] == "send":
                    result = ["yield", repr(generator.send(op[1]))]
                elif op[0] == "throw":
                    result = ["yield", repr(generator.throw(getattr(builtins, op[1])(*op[2:])))]
                else:
                    result = ["closed", repr(generator.close())]
            except StopIteration as stop:
                result = ["return", repr(stop.value)]
            except BaseException as error:
                result = ["raise", repr(_exc(error))]
            steps.append([result, [repr(item) for item in log[before:]]])
        out.append(steps)
    print(json.dumps(out))
    """
)


def _step(generator: Any, op: tuple) -> list:
    try:
        if op[0] == "next":
            return ["yield", repr(next(generator))]
        if op[0] == "send":
            return ["yield", repr(generator.send(op[1]))]
        if op[0] == "throw":
            return ["yield", repr(generator.throw(getattr(builtins, op[1])(*op[2:])))]
        return ["closed", repr(generator.close())]
    except StopIteration as stop:
        return ["return", repr(stop.value)]
    except BaseException as error:
        return ["raise", repr(_exc(error))]


def check_in_fresh_processes(
    source: str, script: list[tuple], folder: Path, args: tuple = (), python: str = sys.executable
) -> int:
    """Snapshot the compiled generator before every step of `script`, resume each snapshot in a new
    `python` process that has only the build (made here) and this folder on its path, run the rest of
    the script there, and assert every step gives what CPython's own generator gave. Returns the
    number of snapshots resumed."""
    from branchc import snapshot
    from branchc.splitter.build import build

    (folder / "src").mkdir()
    (folder / "src" / "program.py").write_text("from branchc import resumable\n" + source)
    result = build([folder / "src"], folder / "out")
    assert not result.errors, result.errors

    native_module = load(source, compiled=False)
    native_log: list = []
    native_module.emit = native_log.append  # type: ignore[attr-defined]
    native = native_module.gen(*args)
    expected = []
    for op in script:
        before = len(native_log)
        expected.append((_step(native, op), native_log[before:]))

    jobs = []
    compiled_module = load(source, compiled=True)
    compiled_module.emit = lambda value: None  # type: ignore[attr-defined]
    generator = compiled_module.gen(*args)
    for step, op in enumerate(script):
        if generator.gi_frame is None:
            break
        data = json.loads(json.dumps(snapshot(generator)).replace(compiled_module.__name__, "program"))
        jobs.append((step, data, script[step:]))
        _step(generator, op)

    done = subprocess.run(
        [python, "-c", _RUNNER],
        input=json.dumps([[data, ops] for _, data, ops in jobs]),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{folder / 'out'}{os.pathsep}{Path(__file__).parent}", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    traces = json.loads(done.stdout)
    assert len(traces) == len(jobs)
    for (step, _, _), trace in zip(jobs, traces, strict=True):
        for offset, (result, added) in enumerate(trace):
            want_result, want_added = expected[step + offset]
            where = f"resumed before step {step}, at step {step + offset}"
            assert result == want_result, f"{where}: {result} != {want_result}"
            assert added == [repr(item) for item in want_added], where
    return len(jobs)
