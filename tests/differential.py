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
  in process (raw state), or through JSON (`json.dumps` / `json.loads`).
"""

from __future__ import annotations

import builtins
import itertools
import json
import sys
import types
from typing import Any

from branchc.splitter import compile_module

_counter = itertools.count()

MODES = ("native", "compiled", "raw", "json")


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
        state, label, values = generator.state()
        return rt.make_generator(generator.meta, state, label, values, generator.free_values())
    from branchc.continuation.snapshots import resume, snapshot

    data = json.loads(json.dumps(snapshot(generator)))
    return resume(data)


def trace(source: str, script: list[tuple], mode: str, args: tuple = ()) -> list[Any]:
    module = load(source, compiled=mode != "native")
    log = _fresh_namespace(module)
    generator = module.gen(*args)
    out: list[Any] = []
    kept = []  # snapshotted generators stay referenced: collecting one would run its finally blocks
    for op in script:
        if mode in ("raw", "json"):
            kept.append(generator)
            generator = _reload(generator, mode)
        try:
            if op[0] == "next":
                result = ("yield", repr(next(generator)))
            elif op[0] == "send":
                result = ("yield", repr(generator.send(op[1])))
            elif op[0] == "throw":
                error = getattr(builtins, op[1])(*op[2:])
                result = ("yield", repr(generator.throw(error)))
            elif op[0] == "close":
                result = ("closed", repr(generator.close()))
            else:
                raise AssertionError(op)
        except StopIteration as stop:
            result = ("return", repr(stop.value))
        except BaseException as error:
            result = ("raise", _exc(error))
        out.append((op, result, list(log)))
    for old in kept:  # the trace is done: let the snapshotted originals finish quietly
        try:
            old.close()
        except BaseException:
            pass
    return out


def check(source: str, script: list[tuple], args: tuple = (), modes: tuple[str, ...] = MODES[1:]) -> None:
    """Assert every mode gives the native trace, with a readable report when one does not."""
    expected = trace(source, script, "native", args)
    for mode in modes:
        got = trace(source, script, mode, args)
        if got != expected:
            lines = [f"mode {mode!r} differs from CPython", "program:", source, "script:", repr(script)]
            for index, (want, have) in enumerate(zip(expected, got, strict=False)):
                mark = "  " if want == have else "!!"
                lines.append(f"{mark} step {index}: native {want!r}")
                if want != have:
                    lines.append(f"{mark}          {mode:6} {have!r}")
            raise AssertionError("\n".join(lines))
