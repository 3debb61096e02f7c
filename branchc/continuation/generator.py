"""What compiled modules import as `_bc_rt`: the generator object and the helpers its body calls.

A compiled function's body is a native generator that can be re-entered at any
label (see branchc.splitter.lower). `ResumableGenerator` wraps it: stepping is the
native generator's own `send` / `throw` / `close` (bound once, no extra frame), and
`state()` reads the suspended frame's label and live locals, which snapshot.py encodes.
"""

from __future__ import annotations

import builtins
import itertools
import linecache
import types
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .registry import FunctionMeta, compiled, meta_of, reregister
from .relocate import relocate_functions

__all__ = [
    "UNBOUND",
    "FunctionMeta",
    "ResumableGenerator",
    "compiled",
    "make_generator",
    "rejoin",
    "relocate",
    "resume_iter",
    "suspended_at",
    "yf_iter",
    "yf_native",
]

# Compiled code names builtins through this module, so a program that rebinds `iter` or `str`
# changes only its own code, as it would natively.
iter = builtins.iter
str = builtins.str
BaseException = builtins.BaseException
NameError = builtins.NameError


class _Unbound:
    """Marks a variable that had no value (compiled handlers use it when re-entered)."""

    def __repr__(self) -> str:
        return "UNBOUND"


UNBOUND = _Unbound()


class ResumableGenerator:
    """A compiled generator: the full generator protocol, plus `snapshot()`."""

    __slots__ = ("__weakref__", "_body", "_gen", "close", "send", "throw")

    def __init__(self, gen: types.GeneratorType, body: types.FunctionType) -> None:
        self._gen = gen
        self._body = body
        self.send = gen.send
        self.throw = gen.throw
        self.close = gen.close

    def __iter__(self) -> ResumableGenerator:
        return self

    # A property: CPython binds it and calls the native __next__ directly, no Python frame.
    __next__ = property(attrgetter("_gen.__next__"))

    def __repr__(self) -> str:
        return f"<compiled generator {self._gen.__qualname__.removesuffix('.<locals>._bc_body')} at {id(self):#x}>"

    gi_frame = property(attrgetter("_gen.gi_frame"))
    gi_running = property(attrgetter("_gen.gi_running"))
    gi_code = property(attrgetter("_gen.gi_code"))
    gi_suspended = property(attrgetter("_gen.gi_suspended"))
    gi_yieldfrom = property(attrgetter("_gen.gi_yieldfrom"))

    @property
    def meta(self) -> FunctionMeta:
        code = self._gen.gi_code
        return meta_of(code)

    @property
    def source_location(self) -> str:
        """file:line of the yield this generator waits at (for error messages)."""
        frame = self._gen.gi_frame
        if frame is None:
            return "a finished generator"
        label = frame.f_locals.get("_bc_label")
        site = self.meta.sites.get(label) if label else None
        return f"{self.meta.filename}:{site[0] if site else frame.f_lineno}"

    def state(self) -> tuple[str, int, dict[str, Any]]:
        """(state, label, live locals): the raw continuation, before encoding."""
        gen = self._gen
        if gen.gi_running:
            raise ValueError("generator already executing")
        frame = gen.gi_frame
        if frame is None:
            return "done", 0, {}
        local_values = frame.f_locals
        if not gen.gi_suspended:  # not running, not finished: created
            skip = _FRAME_INTERNALS.union(gen.gi_code.co_freevars)
            return "created", 0, {k: v for k, v in local_values.items() if k not in skip}
        label = local_values["_bc_label"]
        code = gen.gi_code
        live = meta_of(code).live.get(label)
        if live is None:
            return "suspended", label, {k: v for k, v in local_values.items() if k not in _FRAME_INTERNALS}
        values = {}
        for k in live:
            if k in local_values:
                values[k] = local_values[k]
        return "suspended", label, values

    def free_values(self) -> dict[str, types.CellType]:
        """The body's closure by name: cells of captured variables, and of enclosing functions."""
        closure = self._body.__closure__
        return dict(zip(self._body.__code__.co_freevars, closure, strict=True)) if closure else {}


_FRAME_INTERNALS = frozenset({"_bc_T", "_bc_R", "_bc_L", "_bc_label"})


# -- helpers the compiled code calls ----------------------------------------------------------


def yf_iter(value: Any) -> Any:
    """What `yield from value` iterates: generators and coroutines as they are, others via iter()."""
    if isinstance(value, (types.GeneratorType, types.CoroutineType, ResumableGenerator)):
        return value
    return iter(value)


def yf_native(value: Any) -> Any:
    """Delegate to the native generator inside a compiled one: CPython's fast path."""
    return value._gen if type(value) is ResumableGenerator else value


def resume_iter(iterator: Any) -> Any:
    """The loop source when resuming into its body: one dummy step re-enters it, consuming nothing."""
    return itertools.chain((None,), iterator)


class _RejoinIterator:
    """Re-enters a `yield from` over a plain iterator that was in progress: the first step only
    suspends (the resume priming); later steps go to the iterator as CPython's delegation does.
    It has no `throw` or `close`, like the iterator: CPython then raises a thrown exception in the
    delegating generator itself, and closing does not touch the iterator."""

    __slots__ = ("primed", "sub")

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.primed = False

    def __iter__(self) -> _RejoinIterator:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        if not self.primed:
            self.primed = True
            return None
        if value is None:
            return next(self.sub)
        return self.sub.send(value)  # AttributeError for a plain iterator, as CPython raises it


class _RejoinGenerator(_RejoinIterator):
    """The same, for a sub-generator: throw and close are forwarded to it."""

    __slots__ = ()

    def throw(self, *args: Any) -> Any:
        return self.sub.throw(*args)

    def close(self) -> None:
        close = getattr(self.sub, "close", None)
        if close is not None:
            close()


def rejoin(sub: Any, _reset: int) -> _RejoinIterator:
    sub = yf_native(sub)
    if hasattr(sub, "throw"):
        return _RejoinGenerator(sub)
    return _RejoinIterator(sub)


# -- resuming --------------------------------------------------------------------------------


@dataclass
class _Resume:
    """What the body's prologue reads: the label to reach and the values to restore."""

    label: int
    values: dict[str, Any]


def make_generator(
    meta: FunctionMeta,
    state: str,
    label: int,
    values: dict[str, Any],
    free: dict[str, types.CellType],
    into: ResumableGenerator | None = None,
) -> ResumableGenerator:
    """Rebuild a compiled generator from its raw continuation (no encoding involved); `into` is
    an empty ResumableGenerator to fill (resume made it first, so that references to it work)."""
    code = meta.body_code
    freevars = code.co_freevars
    closure = tuple(free[n] if n in free else types.CellType() for n in freevars) if freevars else None
    body = types.FunctionType(code, meta.globals, code.co_name, None, closure)
    nargs = code.co_argcount - 1
    if state == "created":  # not started: the arguments are simply its parameters
        gen = body(*(values.get(n) for n in code.co_varnames[:nargs]), None)
    else:
        gen = body(*([None] * nargs), _Resume(label, values))
    if into is None:
        wrapper = ResumableGenerator(gen, body)
    else:
        wrapper = into
        wrapper.__init__(gen, body)
    if state == "suspended":
        gen.send(None)  # runs the prologue and stops at the label: suspended exactly as snapshotted
    elif state == "done":
        gen.close()
    return wrapper


def relocate(module_globals: dict[str, Any], lines: list[tuple[int, int, int]], source: str) -> None:
    """The last line of a compiled module: its functions take the source's file name and lines."""
    for function in relocate_functions(module_globals, lines, source):
        if getattr(function, "__branchc_compiled__", False):
            reregister(function)


def suspended_at(generator: Any) -> dict[str, Any]:
    """Where a suspended generator waits: its function and the yield's line and column (1-based),
    plus the state label when it is compiled. Traces record it; a native generator reads the
    position of its paused instruction, so traces of native and compiled runs agree."""
    if isinstance(generator, ResumableGenerator):
        frame = generator._gen.gi_frame
        label = frame.f_locals.get("_bc_label") if frame is not None else None
        meta = generator.meta
        site = meta.sites.get(label) if label else None
        where = {"function": meta.qualname, "label": label}
        return where | ({"line": site[0], "column": site[1]} if site else {})
    code, frame = getattr(generator, "gi_code", None), getattr(generator, "gi_frame", None)
    if code is None or frame is None:
        return {}
    line, _, column, _ = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
    column = column or 0
    text = linecache.getline(code.co_filename, line or 0)
    if not text.isascii():  # CPython counts UTF-8 bytes; spans count characters
        column = len(text.encode("utf-8")[:column].decode("utf-8", "replace"))
    return {"function": code.co_qualname, "line": line, "column": column + 1}
