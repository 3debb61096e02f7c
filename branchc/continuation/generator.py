"""What compiled modules import as `_bc_rt`: the helpers a compiled body calls, and what the
rest of branchc reads off a compiled generator.

A compiled function returns a plain CPython generator: its body can be re-entered at any
label (see branchc.splitter.lower). A resume makes the generator afresh and leaves a resume
record for its prologue (`resuming`), which restores the saved variables and skips to the
label; `state` reads a suspended frame's label and live variables, which snapshots.py
encodes. `release` lets go of generators whose run goes on elsewhere.
"""

from __future__ import annotations

import builtins
import itertools
import linecache
import sys
import threading
import types
import weakref
from dataclasses import dataclass
from typing import Any

from .registry import FunctionMeta, compiled, meta_of, reregister
from .relocate import relocate_functions

__all__ = [
    "UNBOUND",
    "FunctionMeta",
    "compiled",
    "free_cells",
    "holds_no_generators",
    "is_compiled",
    "make_generator",
    "meta_of",
    "rejoin",
    "release",
    "release_reachable",
    "relocate",
    "resume_iter",
    "resuming",
    "source_location",
    "state",
    "suspended_at",
    "yf_iter",
]

# Compiled code names builtins through this module, so a program that rebinds `iter` or `str`
# changes only its own code, as it would natively.
iter = builtins.iter
str = builtins.str
BaseException = builtins.BaseException
GeneratorExit = builtins.GeneratorExit
NameError = builtins.NameError
exc_info = sys.exc_info


class _Unbound:
    """Marks a variable that had no value (compiled handlers use it when re-entered)."""

    def __repr__(self) -> str:
        return "UNBOUND"


UNBOUND = _Unbound()
_GENERATOR = types.GeneratorType


def is_compiled(value: Any) -> bool:
    """Whether `value` is a generator of a compiled function (as opposed to a native one)."""
    if type(value) is not _GENERATOR:
        return False
    try:
        meta_of(value.gi_code)
    except KeyError:
        return False
    return True


# -- resuming ----------------------------------------------------------------------------------


@dataclass
class _Resume:
    """What a prologue reads: the label to reach and the values to restore, for one code object."""

    code: types.CodeType
    label: int
    values: dict[str, Any]


class _Pending(threading.local):
    record: _Resume | None = None


_pending = _Pending()


def resuming() -> _Resume | None:
    """Called by every compiled body's prologue: the resume record left for it, if this start is a
    resume (`make_generator` leaves one and starts the generator at once), else None."""
    record = _pending.record
    if record is None or sys._getframe(1).f_code is not record.code:
        return None
    _pending.record = None
    return record


def make_generator(
    meta: FunctionMeta, state: str, label: int, values: dict[str, Any], free: dict[str, types.CellType]
) -> types.GeneratorType:
    """A compiled generator rebuilt from its raw continuation (no encoding involved): suspended
    exactly where the snapshot was taken, or not started, or finished."""
    code = meta.body_code
    freevars = code.co_freevars
    if meta.type_cells:
        free = {**free, **meta.type_cells}
    closure = tuple(free[n] if n in free else types.CellType() for n in freevars) if freevars else None
    function = types.FunctionType(code, meta.globals, code.co_name, None, closure)
    if state == "created":  # not started: call it with the arguments it had
        return _call(function, code, values, closure)
    generator = _call(function, code, {}, closure)
    if state == "done":
        generator.close()
        return generator
    _pending.record = _Resume(code, label, values)
    try:
        generator.send(None)  # runs the prologue and stops at the label: suspended exactly as snapshotted
    finally:
        _pending.record = None
    return generator


def _call(function: types.FunctionType, code: types.CodeType, values: dict[str, Any], closure: Any) -> Any:
    """Call a compiled function or body with these parameter values (absent ones: None)."""
    layout = _LAYOUTS.get(id(code))
    if layout is None or layout[0] is not code:
        layout = _LAYOUTS[id(code)] = _layout(code)
    _, nested, positional, keyword, star, starstar, nones, keyword_nones = layout
    if nested:  # a nested body takes every parameter positionally
        return function(*[values.get(n) for n in positional], closure)
    if not values:  # a resume: every parameter None, the prologue restores what was live
        return function(*nones, **keyword_nones)
    rest, named = values.get(star, ()), values.get(starstar, {})
    # what a frame holds there: a tuple, and a dict of str keys (never an iterator or mapping to run)
    if type(rest) is not tuple or type(named) is not dict or not all(type(key) is str for key in named):
        raise TypeError(f"{code.co_qualname}: *{star} must be a tuple and **{starstar} a dict with str keys")
    return function(*[values.get(n) for n in positional], *rest, **{n: values.get(n) for n in keyword}, **named)


def _layout(code: types.CodeType) -> tuple:
    """(code, nested, positional, keyword-only, *name, **name, None for each positional, for each
    keyword-only) of a compiled function or body: read off its code once, not at every resume."""
    if code.co_varnames[code.co_argcount - 1 : code.co_argcount] == ("_bc_C",):
        positional = code.co_varnames[: code.co_argcount - 1]
        return code, True, positional, (), None, None, (), {}
    positional = code.co_varnames[: code.co_argcount]
    keyword = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    index = code.co_argcount + code.co_kwonlyargcount
    star = code.co_varnames[index] if code.co_flags & 0x04 else None  # CO_VARARGS
    index += star is not None
    starstar = code.co_varnames[index] if code.co_flags & 0x08 else None  # CO_VARKEYWORDS
    return code, False, positional, keyword, star, starstar, (None,) * len(positional), dict.fromkeys(keyword)


# id(code) -> its _layout; the code is kept alive there, so its id is not reused meanwhile
_LAYOUTS: dict[int, tuple] = {}


# -- reading a suspended generator -------------------------------------------------------------

_FRAME_INTERNALS = frozenset({"_bc_T", "_bc_R", "_bc_L", "_bc_C", "_bc_label"})


def state(generator: types.GeneratorType) -> tuple[str, int, dict[str, Any]]:
    """(state, label, live variables) of a compiled generator: the raw continuation."""
    if generator.gi_running:
        raise ValueError("generator already executing")
    frame = generator.gi_frame
    if frame is None:
        return "done", 0, {}
    local_values = frame.f_locals
    code = generator.gi_code
    if not generator.gi_suspended:  # not running, not finished: created
        skip = _FRAME_INTERNALS.union(code.co_freevars)
        return "created", 0, {k: v for k, v in local_values.items() if k not in skip}
    label = local_values["_bc_label"]
    live = meta_of(code).live.get(label)
    if live is None:
        return "suspended", label, {k: v for k, v in local_values.items() if k not in _FRAME_INTERNALS}
    values = {}
    for k in live:
        if k in local_values:
            values[k] = local_values[k]
    return "suspended", label, values


def free_cells(generator: types.GeneratorType) -> dict[str, types.CellType]:
    """The cells a compiled body closes over, by name (a nested body keeps them in `_bc_C`), but for
    those of type parameters, which are the definition's."""
    freevars = generator.gi_code.co_freevars
    if not freevars:
        return {}
    frame = generator.gi_frame
    cells = frame.f_locals.get("_bc_C") if frame is not None else None
    if not cells:
        return {}
    fixed = meta_of(generator.gi_code).type_cells
    return {name: cell for name, cell in zip(freevars, cells, strict=True) if name not in fixed}


def source_location(generator: types.GeneratorType) -> str:
    """file:line of the yield a compiled generator waits at (for error messages)."""
    frame = generator.gi_frame
    meta = meta_of(generator.gi_code)
    if frame is None:
        return "a finished generator"
    label = frame.f_locals.get("_bc_label")
    site = meta.sites.get(label) if label else None
    return f"{meta.filename}:{site[0] if site else frame.f_lineno}"


def suspended_at(generator: Any) -> dict[str, Any]:
    """Where a suspended generator waits: its function and the yield's line and column (1-based),
    plus the state label when it is compiled. Traces record it; a native generator reads the
    position of its paused instruction, so traces of native and compiled runs agree."""
    code, frame = getattr(generator, "gi_code", None), getattr(generator, "gi_frame", None)
    if code is None or frame is None:
        return {}
    if is_compiled(generator):
        label = frame.f_locals.get("_bc_label")
        meta = meta_of(code)
        site = meta.sites.get(label) if label else None
        where = {"function": meta.qualname, "label": label}
        return where | ({"line": site[0], "column": site[1]} if site else {})
    line, _, column, _ = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
    column = column or 0
    text = linecache.getline(code.co_filename, line or 0)
    if not text.isascii():  # CPython counts UTF-8 bytes; spans count characters
        column = len(text.encode("utf-8")[:column].decode("utf-8", "replace"))
    return {"function": code.co_qualname, "line": line, "column": column + 1}


# -- letting go --------------------------------------------------------------------------------


class _Releasing(threading.local):
    frames: frozenset[int] = frozenset()  # ids of the frames this thread is releasing


_releasing = _Releasing()


def on_exit() -> int:
    """Called by a compiled yield that GeneratorExit reaches: -1 when its frame is being released
    (then the frame unwinds running none of the program's code: no label is -1), else 0 (an
    ordinary close() or throw(GeneratorExit), of this generator or of any other)."""
    return -1 if id(sys._getframe(1)) in _releasing.frames else 0


def release(*generators: types.GeneratorType) -> None:
    """Let go of compiled generators whose run goes on elsewhere (they were snapshotted, and the
    snapshot is resumed in another place): each frame is dropped as it is, and no `finally`
    block, `except` clause or context manager exit of the program runs, so a run's cleanup runs
    exactly once, where the run really ends. The compiled generators they hold (in variables,
    in containers, or delegated to by `yield from`) are released with them; a native generator
    they hold is closed, as dropping it would close it. Dropping a compiled generator without
    `release` closes it, running its finally blocks, as CPython does."""
    for generator in generators:
        if not is_compiled(generator):
            raise TypeError(
                f"release() takes generators of compiled functions, not {type(generator).__name__}: a native "
                f"generator cannot continue elsewhere, so close it (or let it go) instead"
            )
        if generator.gi_running:
            raise ValueError("generator already executing")
    held = _held_generators(generators)
    frames = [generator.gi_frame for generator in held]  # kept: cleared below, once every frame has let go
    before = _releasing.frames
    _releasing.frames = before | {id(frame) for frame in frames if frame is not None}
    try:
        for generator in held:
            generator.close()  # GeneratorExit meets `on_exit() == -1` at the yield: nothing of the program runs
    finally:
        _releasing.frames = before
    for frame in frames:
        if frame is not None:
            frame.clear()  # a frame kept alive by a cycle (a handled exception's traceback) lets go now


def release_reachable(value: Any) -> None:
    """Release every compiled generator reachable from `value` (a decoded run that is refused, say)."""
    generators = [generator for generator in _held_generators((value,)) if generator.gi_frame is not None]
    if generators:
        release(*generators)


def _held_generators(roots: tuple[Any, ...]) -> list[types.GeneratorType]:
    """The compiled generators reachable from `roots` through what a snapshot carries: variables,
    containers (keys too), objects' attributes and slots, exceptions, cells, bound methods, the
    functions defined in a compiled body, and `yield from` delegates (the roots first). Nothing of
    the program runs: attributes are read off __dict__ and slots, not through getattr.

    A run's history is most of what this walks (thousands of messages, each a model holding a few
    strings, or a dict of them), so it is walked in short: each type is classified once (`_KINDS`),
    scalars are never pushed (nor their ids kept), and a list of scalars and dicts of scalars is
    checked by the types it holds, in C (`_flat`), without visiting each item."""
    found: list[types.GeneratorType] = []
    seen: set[int] = set()
    mark = seen.add
    kinds = _KINDS
    leaves = _LEAVES
    stack: list[Any] = [value for value in reversed(roots) if type(value) not in leaves]
    push, pushall, pop = stack.append, stack.extend, stack.pop
    while stack:
        value = pop()
        kind = type(value)
        what, slots = kinds.get(kind) or _classify(kind)
        if not what:
            continue
        key = id(value)
        if key in seen:
            continue
        mark(key)
        if what == _OBJECT:
            try:
                attributes = object.__getattribute__(value, "__dict__")
            except (AttributeError, TypeError):
                attributes = None
            if type(attributes) is dict:
                for item in attributes.values():
                    if type(item) not in leaves:
                        push(item)
            elif attributes is not None:
                push(attributes)
            for member in slots:
                try:
                    item = member.__get__(value, kind)
                except AttributeError:
                    continue
                if type(item) not in leaves:
                    push(item)
        elif what == _ITEMS:
            if not _flat(value):
                for item in value:
                    if type(item) not in leaves:
                        push(item)
        elif what == _DICT:
            for item in value:
                if type(item) not in leaves:
                    push(item)
            for item in value.values():
                if type(item) not in leaves:
                    push(item)
        elif what == _GEN:
            if value.gi_frame is None or not is_compiled(value):
                continue
            found.append(value)
            for item in value.gi_frame.f_locals.values():
                if type(item) not in leaves:
                    push(item)
            if value.gi_yieldfrom is not None:
                push(value.gi_yieldfrom)
        elif what == _CELL:
            try:
                push(value.cell_contents)
            except ValueError:
                pass
        elif what == _METHOD:
            push(value.__self__)
        elif what == _FUNCTION:
            pushall([value.__defaults__, value.__kwdefaults__, value.__closure__, value.__dict__])
        elif what == _REJOIN:
            push(value.sub)
        else:  # _EXCEPTION
            pushall([value.args, value.__cause__, value.__context__, _attributes(value)])
    return found


def _flat(items: Any) -> bool:
    """Whether nothing in a list (tuple, set) can hold a generator, read by type, in C (map, chain):
    it holds only values of types that hold none (scalars, `holds_no_generators` classes), dicts of
    scalars, and objects of one class whose attributes and slots are scalars (a history of models).
    A history then costs a few calls, not a step of the walk per message; anything else is walked
    item by item."""
    held = set(map(type, items))
    if held <= _LEAVES:
        return True
    walked = []
    for kind in held:
        what, slots = _KINDS.get(kind) or _classify(kind)
        if what:
            walked.append((kind, what, slots))
    if not walked:
        return True
    if len(walked) != 1:
        return False
    ((kind, what, slots),) = walked
    if len(held) > 1:
        items = [item for item in items if type(item) is kind]
    leaves = _LEAVES.issuperset
    if what == _DICT:
        return leaves(map(type, _chain(items))) and leaves(map(type, _chain(map(dict.values, items))))
    if what != _OBJECT:
        return False
    try:  # what the walk reads of each: its __dict__ (a dict) and its carried slots
        attributes = list(map(object.__getattribute__, items, _repeat("__dict__")))
        if set(map(type, attributes)) != _DICT_ONLY or not leaves(map(type, _chain(map(dict.values, attributes)))):
            return False
        for member in slots:
            if not leaves(map(type, map(member.__get__, items, _repeat(kind)))):
                return False
    except (AttributeError, TypeError):
        return False  # no __dict__, or an unset slot: the walk takes each as it comes
    return True


_repeat = itertools.repeat
_DICT_ONLY = {dict}
_chain = itertools.chain.from_iterable


def _classify(kind: type) -> tuple[int, tuple[Any, ...]]:
    """What instances of `kind` hold (`_kind`) and, for an object, the slots it carries; kept in `_KINDS`."""
    if len(_KINDS) > 10_000:  # classes made on the fly (a test's, say) are not kept for ever
        _KINDS.clear()
    what = _kind(kind)
    found = _KINDS[kind] = (what, _carried_slots(kind) if what == _OBJECT else ())
    return found


# What a value of a type holds, for `_held_generators` (0: nothing it walks into).
_LEAF, _GEN, _ITEMS, _DICT, _CELL, _METHOD, _FUNCTION, _REJOIN, _EXCEPTION, _OBJECT = range(10)


def _kind(kind: type) -> int:
    if kind in _LEAVES or kind in _HOLD_NO_GENERATORS or issubclass(kind, (type, types.ModuleType)):
        return _LEAF
    if kind is _GENERATOR:
        return _GEN
    if kind in (list, tuple, set, frozenset):
        return _ITEMS
    if kind is dict:
        return _DICT
    if kind is types.CellType:
        return _CELL
    if kind in (types.MethodType, types.BuiltinMethodType):
        return _METHOD
    if kind is types.FunctionType:
        return _FUNCTION
    if issubclass(kind, _RejoinIterator):
        return _REJOIN
    if issubclass(kind, BaseException):
        return _EXCEPTION
    return _OBJECT


_SCALARS = frozenset({builtins.str, int, float, bool, bytes})
_LEAVES = _SCALARS | {type(None)}
_HOLD_NO_GENERATORS: set[type] = set()
#: type -> (what its instances hold (`_kind`), an object's carried slots): a class's kind and slots are
#: fixed when it is made, so each is read once, not at every release
_KINDS: dict[type, tuple[int, tuple[Any, ...]]] = {}


def holds_no_generators(*classes: type) -> None:
    """Declare that instances of `classes` never hold a generator (models of str fields, say: a
    history's messages), so `release` does not walk into them: a long history costs it nothing."""
    _HOLD_NO_GENERATORS.update(classes)
    _KINDS.clear()  # classified before, perhaps as objects to walk


def _carried_slots(cls: type) -> tuple[Any, ...]:
    """The slots of cls that a snapshot carries as values: all of them, but a pydantic model's
    fields_set, which it carries as names only (a set of str: nothing in it to release)."""
    members = _slots(cls)
    pydantic = sys.modules.get("pydantic.main")  # not imported: there is no model to walk
    model = getattr(pydantic, "BaseModel", None) if pydantic is not None else None
    if isinstance(model, type) and issubclass(cls, model):
        names = model.__dict__.get("__pydantic_fields_set__")
        members = tuple(member for member in members if member is not names)
    return members


def _attributes(value: Any) -> dict:
    try:
        return object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        return {}


_MEMBER = type(BaseException.__dict__["__suppress_context__"])


def _slots(cls: type) -> tuple[Any, ...]:
    """The __slots__ members of a class and its bases (their descriptors); a class's slots are fixed
    when it is made, so they are read once per class."""
    found = _SLOTS.get(cls)
    if found is None:
        found = _SLOTS[cls] = _read_slots(cls)
    return found


_SLOTS: weakref.WeakKeyDictionary[type, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _read_slots(cls: type) -> tuple[Any, ...]:
    members = []
    for klass in cls.__mro__:
        names = klass.__dict__.get("__slots__", ())
        for name in (names,) if type(names) is builtins.str else names:
            member = klass.__dict__.get(name)
            if type(member) is _MEMBER:
                members.append(member)
    return tuple(members)


# -- helpers the compiled code calls ----------------------------------------------------------


def yf_iter(value: Any) -> Any:
    """What `yield from value` iterates: generators and coroutines as they are, others via iter()."""
    if isinstance(value, (types.GeneratorType, types.CoroutineType)):
        return value
    return iter(value)


def star_kwargs(function: Any, value: Any) -> dict:
    """`**value` in a call to `function`, unpacked early: CPython's own error for what is no mapping."""
    if type(value) is dict:
        return dict(value)
    try:
        keys = value.keys
    except AttributeError:
        keys = None
    if keys is None:
        raise TypeError(f"{_function_str(function)} argument after ** must be a mapping, not {type(value).__name__}")
    return {key: value[key] for key in keys()}


def _function_str(function: Any) -> str:
    """How CPython names a callee in its errors (_PyObject_FunctionStr)."""
    try:
        qualname = function.__qualname__
    except AttributeError:
        return builtins.str(function)
    module = getattr(function, "__module__", None)
    return f"{module}.{qualname}()" if module is not None and module != "builtins" else f"{qualname}()"


def special(value: Any, name: str) -> Any:
    """`value.name` looked up as CPython looks up special methods: on the type, bound; None if missing."""
    cls = type(value)
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            bind = getattr(type(found), "__get__", None)
            return found if bind is None else bind(found, value, cls)
    return None


_MISSING = object()


def with_enter(manager: Any) -> tuple[Any, Any]:
    """The start of a `with` statement (CPython 3.11's BEFORE_WITH): (bound __exit__, what __enter__ returned)."""
    enter = special(manager, "__enter__")
    if enter is None:
        raise TypeError(f"{type(manager).__name__!r} object does not support the context manager protocol")
    exit_ = special(manager, "__exit__")
    if exit_ is None:
        raise TypeError(
            f"{type(manager).__name__!r} object does not support the context manager protocol (missed __exit__ method)"
        )
    return exit_, enter()


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
    if _defines(type(sub), "throw"):  # read off the class: nothing of a restored object runs here
        return _RejoinGenerator(sub)
    return _RejoinIterator(sub)


def _defines(cls: type, name: str) -> bool:
    return any(name in klass.__dict__ for klass in cls.__mro__)


def relocate(module_globals: dict[str, Any], lines: list[tuple[int, int, int]], source: str) -> None:
    """The last line of a compiled module: its functions take the source's file name and lines."""
    for function in relocate_functions(module_globals, lines, source):
        if getattr(function, "__branchc_compiled__", False):
            reregister(function)
