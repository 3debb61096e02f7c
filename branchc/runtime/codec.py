"""The value codec: the live variables of a suspended generator as plain JSON data, and back.

`encode(roots)` turns a dict of named values into one object graph::

    {"roots": {name: <value>}, "objects": [<value>, ...]}

A value is written where it is used, in a vocabulary that stays close to the JSON of the
same data (so a snapshot costs little more than that JSON to write, store and read):

- None, bool, int, str and finite floats are themselves;
- a dict whose keys are all str (and not "$") is a JSON object of values;
- everything else is a JSON array whose first item is a short tag: ``["l", 1, 2]`` is a list,
  ``["u", ...]`` a tuple, ``["d", key, value, ...]`` any other dict, ``["f", "nan"]`` a float
  JSON has no literal for, ``["dt", "2024-05-01T12:00:00", tz, fold]`` a datetime, ...
  (the `_ENCODERS` / `_DECODERS` tables are the full list);
- an object met more than once (aliasing, cycles) is written once into "objects" and
  referenced by index wherever it occurs: ``[3]`` or ``{"$": 3}``. Both forms mean objects[3];
  the second exists because shared values are moved to the table after encoding, in place.

Strings never go to the table: their identity is not observable in practice.

NotSerializableError paths start at the root name: ``history[3]['when']``, ``point.tags[0]``,
``err.args[1]``, ``tags<item 2>`` (a set, in iteration order), ``counts<key 0>`` (a dict key),
``it<source>[4]`` (what an iterator runs over).

`decode(data, allowed_modules=...)` rebuilds the graph. It runs no code named by the data
except constructors of the fixed builtin types here and classes (enums, pydantic models,
dataclasses, exceptions) whose module is in `allowed_modules`; it never calls pickle,
copyreg, eval or exec, and imports nothing outside `allowed_modules` (importing "a.b" also
runs the package "a"). Anything malformed raises SnapshotDataError naming the place in the
data, e.g. ``roots['history'][3]`` (JSON positions: item 0 of a tagged array is its tag).

Extension protocol (the generator layer uses it for compiled generators, its Context handle,
compiled functions, cells):

- encode: ``extension(value, encode_child, path)`` is called for every value that is not a
  scalar and not of an exact builtin container type (list, dict, tuple, set, frozenset cannot
  be anything the extension owns; their subclasses do reach it), nor of an exact type in the
  extension's optional ``declines`` attribute (say `BUILTIN_TYPES`). `path` is like
  ``"history[3]['when']"`` once formatted: it comes as a lazy chain, `format_path(path)` gives the
  text (child paths may be chains too: ``(path, "name", ".{}")``). The value is already
  registered, so a child may refer back to it.
  The extension returns a JSON dict ``{"t": tag, ...}`` (stored as ``["@", entry]``) or None
  to let the codec handle the value; return None before encoding any child.
  ``encode_child(child, child_path)`` returns the child's JSON: put it into the entry as it is
  (no copy): if the child turns out to be shared it is turned into a reference in place.
- decode: ``extension(entry, decode_child, path)`` is called with that dict and returns the
  object, or raises SnapshotDataError. ``decode_child(json_value, child_path)`` decodes a child;
  `child_path` is a str, or a chain ``(parent_path, key, "{!r}-style format")`` that is only
  formatted (parent text + format.format(key)) if an error names it. A child may be a list,
  dict, model, ... that is still being filled (a cycle runs through the entry): do not look
  inside it. If the extension's object is mutable and may sit on a cycle, it calls
  ``decode_child.created(obj)`` before decoding children, so references back get obj.

Identity is keyed by ``id()`` for the duration of one `encode` call (values are alive through
the roots; temporaries made by the codec or handed to encode_child are kept alive meanwhile).
`encode` first tries an optimistic pass that writes lists and str-keyed dicts without its memo
and only checks, at the end, that none of them came twice; if one did (sharing, a cycle), it
encodes again with the memo. The output is the same either way (an extension may be asked
twice about the same value, so it should not count on being asked once).

Fast paths: `encode_plain(values)` / `decode_plain(values)` do what `encode` / `decode` do, for
graphs of plain data only (scalars, lists and str-keyed dicts of them, range iterators, no
sharing), in much less code; they return None for anything else, and the caller then runs the
full codec, which also reports any error.

Limits: nesting depth is bounded by Python's recursion limit; a dict or set whose hashing
needs an object that sits on a cycle through that same dict or set cannot be restored; set and
dict iterators come back as iterators over a list of the items they had left; exceptions lose
their traceback (and AttributeError its `obj`); a ZoneInfo comes back only where its zone file
is installed (or with "tzdata" allowed); itertools iterators need a Python that still lets
them be reduced (up to 3.13).
"""

from __future__ import annotations

import binascii
import dataclasses
import importlib
import io
import itertools
import math
import os
import re
import sys
import types
import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from enum import Enum, Flag
from fractions import Fraction
from functools import partial
from typing import Any, NamedTuple
from zoneinfo import TZPATH, ZoneInfo

from pydantic import BaseModel

from .errors import BranchcError

__all__ = [
    "format_path",
    "BUILTIN_TYPES",
    "NotSerializableError",
    "SnapshotDataError",
    "decode",
    "decode_plain",
    "encode",
    "encode_plain",
]


class NotSerializableError(BranchcError, TypeError):
    """A live value that cannot travel; `path` starts at the root name the codec was given."""

    def __init__(self, path: str, type_name: str, hint: str) -> None:
        self.path = path
        self.type_name = type_name
        self.hint = hint
        super().__init__(f"{path}: a {type_name} cannot travel in a snapshot; {hint}")


class SnapshotDataError(BranchcError, ValueError):
    """Malformed or tampered snapshot data; `path` is the place in the data."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


Extension = Callable[[Any, Callable[[Any, str], Any], str], "dict | None"]
DecodeExtension = Callable[[dict, Callable[[Any, str], Any], str], Any]


# Paths are built only when needed: a chain (parent, key) or (parent, key, format) down from a root name.
def format_path(path: Any) -> str:
    """The text of a path the codec hands an extension (built lazily: most are never shown)."""
    return _fmt(path)


def _fmt(path: Any) -> str:
    if type(path) is str:
        return path
    parts = []
    while type(path) is tuple:
        if len(path) == 2:
            path, key = path
            parts.append(f"[{key!r}]")
        else:
            path, key, how = path
            parts.append(how.format(key))
    parts.append(str(path))
    parts.reverse()
    return "".join(parts)


_ATTR = ".{}"


def _show(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


# Integers beyond this do not survive json.dumps (sys.int_max_str_digits); they travel as hex.
_BIG = 1 << 13_000
_NEG_BIG = -_BIG  # once: negating it in every check would build a 13000-bit int each time
_INLINE = frozenset({str, bool, type(None)})
_PLAIN = frozenset({list, dict, tuple, set, frozenset})
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

# Builtin iterator types, read through their own __reduce__ (introspection, not pickle).
_SEQ_ITERATORS = {
    type(iter(x))
    for x in ([], (), range(0), range(1 << 70), "a", "é", b"", bytearray(), {}, {}.values(), {}.items(), set())
} | {type(reversed(x)) for x in ([], (), {}, {}.values(), {}.items())}
_ITER_SOURCES = (list, tuple, str, bytes, bytearray, range)
_SEQUENCES = frozenset(_ITER_SOURCES)
# map/filter travel only with one of these functions (none of them runs code named by data).
_SAFE_FUNCS: dict[str, Any] = {
    f.__qualname__: f
    for f in (str, int, float, bool, bytes, tuple, list, abs, len, repr, ord, chr, round, sorted, str.strip)
}
_SAFE_FUNCS.update({f.__qualname__: f for f in (str.lower, str.upper, str.split, str.title, str.casefold)})
_SAFE_NAMES = {id(f): name for name, f in _SAFE_FUNCS.items()}  # by id: a callable need not be hashable

_PROCESS_MODULES = frozenset(
    "_thread threading socket _socket ssl _ssl select selectors subprocess multiprocessing asyncio _asyncio "
    "concurrent queue _queue sqlite3 _sqlite3 mmap signal contextvars _contextvars weakref _weakref".split()
)
_DATA_HINT = (
    "a snapshot holds data: None, bool, int, float, str, bytes, containers, datetime values, Decimal, UUID, "
    "Fraction, complex, enums, dataclasses, pydantic models, exceptions and builtin iterators; convert it "
    "before the yield"
)


def _why_not(x: Any) -> str:
    """The hint for a value the codec cannot carry."""
    if isinstance(x, io.IOBase):
        return "close it before the yield, or keep the path and reopen it after"
    if isinstance(x, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "make it @resumable so it compiles, or finish it before the yield"
    if isinstance(x, type):
        return "classes cannot travel; refer to the class by name after the yield"
    if isinstance(x, types.ModuleType):
        return "modules cannot travel; use a module-level import instead of a variable"
    if isinstance(x, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, partial)) or callable(x):
        return "only functions the compiler compiled can travel; refer to others by name after the yield"
    if any(c.__module__.partition(".")[0] in _PROCESS_MODULES for c in type(x).__mro__):
        return "it belongs to this process (a lock, thread, socket, ...) and cannot be moved to another process"
    return _DATA_HINT


def _lookup(obj: Any, qualname: str) -> Any:
    """Walk a qualname through __dict__ (no getattr hooks); None unless every step is a plain name."""
    for part in qualname.split("."):
        if not part.isidentifier() or part.startswith("__") or not isinstance(obj, (type, types.ModuleType)):
            return None
        obj = vars(obj).get(part)
    return obj


# ---------------------------------------------------------------------------------------------------- encode

_CLASS_REFS: dict[type, str] = {}


def _class_ref(t: type, path: Any) -> str:
    """The "module:qualname" of a class that a restore can find again by name (checked once per class)."""
    ref = _CLASS_REFS.get(t)
    if ref is None:
        if _lookup(sys.modules.get(t.__module__), t.__qualname__) is not t:
            hint = f"define {t.__qualname__} at module level so a restore can find it by name"
            raise NotSerializableError(_fmt(path), _type_name(t), hint)
        ref = _CLASS_REFS[t] = f"{t.__module__}:{t.__qualname__}"
    return ref


def _tree(seen: list[int], leaf: Callable[[Any, Any], Any], x: Any, path: Any) -> Any:
    """The JSON of x, writing lists and str-keyed dicts without a memo: their ids go to `seen`, for
    the caller to check that none came twice. Anything else goes to leaf(value, path). A dict of
    str/bool/None (a message, say) is checked and copied in one go: these are most of the data."""
    t = type(x)
    if t is list:
        mark = seen.append
        mark(id(x))
        out = ["l"]
        append = out.append
        for v in x:
            if type(v) is dict:  # the dict case below, inline, for the common dict of strings
                for k, w in v.items():
                    if type(k) is not str or (type(w) is not str and type(w) not in _INLINE):
                        break
                else:
                    if "$" not in v:
                        mark(id(v))
                        append(v.copy())
                        continue
            elif type(v) in _INLINE:
                append(v)
                continue
            append(_tree(seen, leaf, v, (path, len(out) - 1)))
        return out
    if t is dict:
        scalars = True
        for k, v in x.items():
            if type(k) is not str:
                return leaf(x, path)
            if scalars and type(v) not in _INLINE:
                t = type(v)
                scalars = (t is int and _NEG_BIG < v < _BIG) or (t is float and v - v == 0.0)
        if "$" in x:
            return leaf(x, path)
        seen.append(id(x))
        if scalars:
            return x.copy()  # a new dict; its values are immutable scalars
        fields = {}
        for k, v in x.items():  # a loop, not a comprehension, which would turn the arguments into cells
            fields[k] = v if type(v) in _INLINE else _tree(seen, leaf, v, (path, k))
        return fields
    return leaf(x, path)


class _Again(Exception):
    """The optimistic pass met a list or dict twice (shared, or on a cycle): encode again, carefully."""


class _Encoder:
    """One encoding. The optimistic pass writes lists and str-keyed dicts through `_tree`, without the
    memo; finish() checks that none came twice, else `encode` starts over with the careful pass, which
    memoizes everything. Sharing is rare; the memo is not cheap."""

    __slots__ = ("declines", "enc", "extension", "keep", "memo", "seen", "shared")

    def __init__(self, extension: Extension | None, optimistic: bool) -> None:
        self.memo: dict[int, Any] = {}  # id -> its JSON (written once, in place) or its table index
        self.shared: list[Any] = []  # the JSON of values met twice; becomes "objects"
        self.keep: list[Any] = []  # temporaries (the codec's and the extension's), so no id() is reused
        self.seen: list[int] = []  # optimistic pass: ids of the lists and dicts _tree wrote
        self.extension = extension
        self.declines = getattr(extension, "declines", ())
        # enc(x, path) is what handlers call for a child
        self.enc = partial(_tree, self.seen, self.encode) if optimistic else self.encode

    def encode(self, x: Any, path: Any) -> Any:
        """The JSON of x: itself if scalar, its tagged form the first time, a reference after."""
        t = type(x)
        if t in _INLINE:
            return x
        if t is int and _NEG_BIG < x < _BIG:
            return x
        if t is float:
            return x if x - x == 0.0 else ["f", "nan" if x != x else ("inf" if x > 0 else "-inf")]
        key = id(x)
        seen = self.memo.get(key)
        if seen is not None:
            if type(seen) is not int:  # second meeting: it moves to the table (see finish())
                self.memo[key] = len(self.shared)
                self.shared.append(seen)
                return [len(self.shared) - 1]
            return [seen]
        if t is list:  # the hot cases, inline
            out = self.memo[key] = ["l"]
            enc = self.enc
            out += [v if type(v) in _INLINE else enc(v, (path, i)) for i, v in enumerate(x)]
            return out
        if t is dict:
            for k in x:
                if type(k) is not str:
                    break
            else:
                if "$" not in x:
                    out = self.memo[key] = {}
                    enc = self.enc
                    for k, v in x.items():
                        out[k] = v if type(v) in _INLINE else enc(v, (path, k))
                    return out
        elif self.extension is not None and t not in _PLAIN and t not in self.declines:
            out = self.memo[key] = ["@"]
            entry = self.extension(x, self.child, path)  # a lazy path: format_path() it if you need the text
            if entry is not None:
                if type(entry) is not dict or type(entry.get("t")) is not str:
                    raise TypeError(f"{_fmt(path)}: the codec extension must return a dict with a str 't' tag")
                out.append(entry)
                return out
            if self.memo.pop(key) is not out:
                raise TypeError(f"{_fmt(path)}: the codec extension encoded children, then returned None")
        handler = _ENCODERS.get(t) or _encoder_for(t)
        if handler is None:
            raise NotSerializableError(_fmt(path), _type_name(t), _why_not(x))
        out = self.memo[key] = [handler.tag]
        handler.fill(self, x, path, out)
        return out

    def child(self, x: Any, path: str) -> Any:
        """encode_child for the extension; what it hands over may be a temporary, so it is kept alive."""
        t = type(x)
        if t in _INLINE or (t is int and _NEG_BIG < x < _BIG):
            return x
        self.keep.append(x)
        return self.enc(x, path)

    def items(self, values: Any, path: Any, out: list) -> None:
        enc = self.enc
        out += [v if type(v) in _INLINE else enc(v, (path, i)) for i, v in enumerate(values)]

    def fields(self, values: dict, path: Any) -> dict:
        """A str-keyed mapping of attributes (a payload, never shared, so "$" is a plain key here)."""
        enc = self.enc
        return {k: v if type(v) in _INLINE else enc(v, (path, k, _ATTR)) for k, v in values.items()}

    def finish(self) -> list:
        """Move every shared value's JSON to the table and leave a reference where it was first written."""
        if len(set(self.seen)) != len(self.seen):
            raise _Again  # only the optimistic pass fills `seen`
        objects = []
        for index, out in enumerate(self.shared):
            if type(out) is list:
                objects.append(out[:])
                out[:] = [index]
            else:
                objects.append(out.copy())
                out.clear()
                out["$"] = index
        return objects


class _Enc(NamedTuple):
    """How one type is written: ``[tag, ...]`` with the rest appended by fill(encoder, value, path, out)."""

    tag: str
    fill: Callable[[_Encoder, Any, Any, list], None]


def _b64(e: _Encoder, x: bytes | bytearray, path: Any, out: list) -> None:
    out.append(binascii.b2a_base64(x, newline=False).decode("ascii"))


def _clock(e: _Encoder, x: datetime | time, path: Any, out: list) -> None:
    """datetime and time: the naive ISO text, the tzinfo, fold."""
    out.append(x.replace(tzinfo=None, fold=0).isoformat())
    if x.tzinfo is not None or x.fold:
        out.append(e.enc(x.tzinfo, (path, "tzinfo", _ATTR)))
    if x.fold:
        out.append(1)


def _timezone(e: _Encoder, x: timezone, path: Any, out: list) -> None:
    offset, *name = x.__getinitargs__()
    out += [offset.days * 86400 + offset.seconds, offset.microseconds, *name]


def _zoneinfo(e: _Encoder, x: ZoneInfo, path: Any, out: list) -> None:
    if x.key is None:
        raise NotSerializableError(_fmt(path), "zoneinfo.ZoneInfo", "a zone read from a file cannot travel; use a key")
    out.append(x.key)


def _enum(e: _Encoder, x: Enum, path: Any, out: list) -> None:
    cls = type(x)
    out.append(_class_ref(cls, path))
    if cls.__members__.get(x._name_) is not x:
        if not isinstance(x, Flag):
            raise NotSerializableError(_fmt(path), _type_name(cls), "an enum value that is not a member cannot travel")
        out.append(None)  # a combination of flags has no member name: its value follows
        out.append(e.enc(x._value_, (path, "value", _ATTR)))
    else:
        out.append(x._name_)


_MODEL_FIELDS: dict[type, frozenset[str]] = {}


def _model_fields(cls: type[BaseModel]) -> frozenset[str]:
    names = _MODEL_FIELDS.get(cls)
    if names is None:
        names = _MODEL_FIELDS[cls] = frozenset(cls.model_fields)
    return names


def _model(e: _Encoder, x: BaseModel, path: Any, out: list) -> None:
    """The pydantic state as it is (no dump, no validation): fields, fields_set, extra, private."""
    out.append(_class_ref(type(x), path))
    names = _model_fields(type(x))
    state = x.__dict__
    if len(state) != len(names):  # other keys are cached_property values: left to recompute
        state = {k: v for k, v in state.items() if k in names}
    out.append(e.fields(state, path))
    out.append(sorted(x.__pydantic_fields_set__))
    extra, private = getattr(x, "__pydantic_extra__", None), getattr(x, "__pydantic_private__", None)
    if extra is not None or private is not None:
        out.append(None if extra is None else e.fields(extra, path))
        out.append(None if private is None else e.fields(private, path))


_DATACLASS_FIELDS: dict[type, tuple[str, ...]] = {}


def _dataclass_fields(cls: type) -> tuple[str, ...]:
    names = _DATACLASS_FIELDS.get(cls)
    if names is None:
        names = _DATACLASS_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _dataclass(e: _Encoder, x: Any, path: Any, out: list) -> None:
    """Field values (slots or __dict__), then any other instance attributes; no __init__ on restore."""
    out.append(_class_ref(type(x), path))
    state = {}
    for name in _dataclass_fields(type(x)):
        try:
            state[name] = getattr(x, name)
        except AttributeError:  # an unset slot stays unset
            pass
    e.keep.append(state)  # getattr may have made new objects
    out.append(e.fields(state, path))
    extra = {k: v for k, v in getattr(x, "__dict__", {}).items() if k not in state}
    if extra:
        out.append(e.fields(extra, path))


# Builtin exception attributes that args do not imply, restored as keywords (OSError: positional).
_EXC_KEYWORDS = ((OSError, ("filename", "filename2")), (ImportError, ("name", "path")), (NameError, ("name",)))
_EXC_KEYWORDS += ((AttributeError, ("name",)),)


def _exception(e: _Encoder, x: BaseException, path: Any, out: list) -> None:
    """[cls, [args], {attributes}, cause, context, suppress_context, {keywords}]; the traceback is dropped."""
    cls = type(x)
    out.append(_class_ref(cls, path))
    args: list = []
    e.items(x.args, (path, "args", _ATTR), args)
    keywords = {}
    if cls.__module__ == "builtins":
        for base, names in _EXC_KEYWORDS:
            if isinstance(x, base):
                keywords = {k: getattr(x, k) for k in names if getattr(x, k) is not None}
    out += [
        args,
        e.fields(x.__dict__, path),  # __notes__ is one of them
        e.enc(x.__cause__, (path, "__cause__", _ATTR)),
        e.enc(x.__context__, (path, "__context__", _ATTR)),
        x.__suppress_context__,
        e.fields(keywords, path),
    ]


def _reduce(e: _Encoder, x: Any, path: Any) -> tuple:
    """A builtin iterator's own __reduce__; refused where the type no longer has one (Python 3.14)."""
    if type(x).__reduce__ is object.__reduce__:
        hint = "this Python cannot read its position; finish it before the yield"
        raise NotSerializableError(_fmt(path), _type_name(type(x)), hint)
    reduced = x.__reduce__()
    e.keep.append(reduced)  # a dict iterator's list of what is left, a range iterator's range, ...
    return reduced


_DICT_ITERATORS = {type(iter({})): "DK", type(iter({}.values())): "DV", type(iter({}.items())): "DI"}


def _seq_iter(e: _Encoder, x: Any, path: Any, out: list) -> None:
    """[source, position]; dict and set iterators reduce to an iterator over what is left
    (a dict iterator comes back as one, over a new dict of the items left)."""
    fn, (source,), *position = _reduce(e, x, path)
    if fn is reversed:
        out[0] = "R"
    elif type(x) in _DICT_ITERATORS:
        out[0] = _DICT_ITERATORS[type(x)]
    out.append(e.enc(source, (path, "source", "<{}>")))
    out += position


def _reduced(e: _Encoder, x: Any, path: Any, out: list) -> None:
    """enumerate, count, repeat: their constructor arguments are the state."""
    e.items(_reduce(e, x, path)[1], (path, "args", "<{}>"), out)


def _zip(e: _Encoder, x: Any, path: Any, out: list) -> None:
    _, iterators, *strict = _reduce(e, x, path)
    out.append(bool(strict))
    e.items(iterators, (path, "args", "<{}>"), out)


def _chain(e: _Encoder, x: Any, path: Any, out: list) -> None:
    reduced = _reduce(e, x, path)
    e.items(reduced[2] if len(reduced) > 2 else (), (path, "state", "<{}>"), out)


def _mapped(e: _Encoder, x: Any, path: Any, out: list) -> None:
    fn, (func, *iterators) = _reduce(e, x, path)
    name = _SAFE_NAMES.get(id(func))
    if name is None and not (func is None and fn is filter):
        hint = f"{fn.__name__}() travels only with a builtin such as str or len; make a list before the yield"
        raise NotSerializableError(_fmt(path), fn.__name__, hint)
    out.append(name)
    e.items(iterators, (path, "args", "<{}>"), out)


def _parts(*getters: Callable[[Any], Any]) -> Callable[[_Encoder, Any, Any, list], None]:
    """A fixed number of parts, each written as a value (so big ints and NaN are handled)."""
    return lambda e, x, path, out: e.items([get(x) for get in getters], path, out)


def _range(e: _Encoder, x: range, path: Any, out: list) -> None:
    parts = (x.start, x.stop, x.step)
    if _NEG_BIG < min(parts) and max(parts) < _BIG:
        out += parts
    else:
        e.items(parts, path, out)


def _set_items(e: _Encoder, x: Any, path: Any, out: list) -> None:
    enc = e.enc
    out += [v if type(v) in _INLINE else enc(v, (path, i, "<item {}>")) for i, v in enumerate(x)]


def _pairs(e: _Encoder, x: dict, path: Any, out: list) -> None:
    enc = e.enc
    for i, (k, v) in enumerate(x.items()):
        out.append(k if type(k) in _INLINE else enc(k, (path, i, "<key {}>")))
        out.append(v if type(v) in _INLINE else enc(v, (path, k)))


_ENCODERS: dict[type, _Enc] = {
    dict: _Enc("d", _pairs),  # dicts with a non-str key, or a "$" key
    tuple: _Enc("u", lambda e, x, path, out: e.items(x, path, out)),
    set: _Enc("s", _set_items),
    frozenset: _Enc("fs", _set_items),
    int: _Enc("i", lambda e, x, path, out: out.append(format(x, "x"))),
    bytes: _Enc("b", _b64),
    bytearray: _Enc("ba", _b64),
    datetime: _Enc("dt", _clock),
    time: _Enc("tm", _clock),
    date: _Enc("da", lambda e, x, path, out: out.append(x.isoformat())),
    timedelta: _Enc("td", lambda e, x, path, out: out.extend((x.days, x.seconds, x.microseconds))),
    timezone: _Enc("tz", _timezone),
    ZoneInfo: _Enc("zi", _zoneinfo),
    Decimal: _Enc("dec", lambda e, x, path, out: out.append(str(x))),
    uuid.UUID: _Enc("uu", lambda e, x, path, out: out.append(x.hex)),
    Fraction: _Enc("fr", _parts(lambda x: x.numerator, lambda x: x.denominator)),
    complex: _Enc("c", _parts(lambda x: x.real, lambda x: x.imag)),
    range: _Enc("rg", _range),
    **dict.fromkeys(_SEQ_ITERATORS | {reversed}, _Enc("I", _seq_iter)),
    enumerate: _Enc("en", _reduced),
    zip: _Enc("zp", _zip),
    itertools.count: _Enc("cn", _reduced),
    itertools.repeat: _Enc("rp", _reduced),
    itertools.chain: _Enc("ch", _chain),
    map: _Enc("mp", _mapped),
    filter: _Enc("fl", _mapped),
}


#: The exact types the codec writes itself: an extension is asked about them, but never owns them.
BUILTIN_TYPES = frozenset(_ENCODERS)


def _encoder_for(t: type) -> _Enc | None:
    """Handlers for open-ended kinds (enums, exceptions, models, dataclasses), found once per class."""
    if issubclass(t, Enum):
        handler = _Enc("e", _enum)
    elif issubclass(t, BaseException):
        handler = _Enc("x", _exception)
    elif issubclass(t, BaseModel):
        handler = _Enc("m", _model)
    elif dataclasses.is_dataclass(t) and t.__new__ is object.__new__:
        handler = _Enc("dc", _dataclass)
    else:
        return None
    _ENCODERS[t] = handler
    return handler


def encode(roots: dict[str, Any], *, extension: Extension | None = None) -> dict:
    """Encode named root values as one object graph; json.dumps of the result always succeeds."""
    try:
        return _encode(roots, extension, optimistic=True)
    except _Again:
        return _encode(roots, extension, optimistic=False)


def _encode(roots: dict[str, Any], extension: Extension | None, optimistic: bool) -> dict:
    e = _Encoder(extension, optimistic)
    out = {}
    try:
        for name, value in roots.items():
            try:
                out[name] = e.enc(value, name)
            except RecursionError:
                if optimistic:  # perhaps a cycle through plain lists and dicts, which only the memo ends
                    raise _Again from None
                hint = "it is nested too deeply for a snapshot; flatten it"
                raise NotSerializableError(name, _type_name(type(value)), hint) from None
        return {"roots": out, "objects": e.finish()}
    finally:
        del e.enc  # a cycle through the encoder: broken, so it is freed now, not by the garbage collector


# ---------------------------------------------------------------------------------------------------- decode


class _Mark:
    """Table slots not built yet: TODO, BUSY (an immutable under construction), AGAIN (rebuilt in a cycle)."""


_TODO, _BUSY, _AGAIN = _Mark(), _Mark(), _Mark()
_SCALARS = frozenset({str, int, float, bool, type(None)})


class _Kind(NamedTuple):
    """What a class named in the data must be, for the tag that names it."""

    name: str
    test: Callable[[type], bool]


_ENUM = _Kind("an Enum", lambda c: issubclass(c, Enum))
_MODEL = _Kind("a pydantic model", lambda c: issubclass(c, BaseModel))
_DATACLASS = _Kind("a dataclass", lambda c: dataclasses.is_dataclass(c) and c.__new__ is object.__new__)
_EXCEPTION = _Kind("an exception", lambda c: issubclass(c, BaseException))


class _Child:
    """decode_child for the extension; `created(obj)` publishes a two-phase object for cycles."""

    __slots__ = ("dec", "node", "slot")

    def __init__(self, dec: _Decoder, node: list, slot: int | None) -> None:
        self.dec = dec
        self.node = node
        self.slot = slot

    def __call__(self, x: Any, path: str) -> Any:
        return self.dec.val(x, path)

    def created(self, obj: Any) -> None:
        self.dec.shell(self.node, self.slot, obj)


class _Decoder:
    __slots__ = ("allowed", "built", "classes", "depth", "extension", "nodes", "objects", "size", "val")

    def __init__(self, objects: list, allowed: frozenset[str], extension: DecodeExtension | None) -> None:
        self.objects = objects
        self.size = len(objects)
        self.built: list[Any] = [_TODO] * self.size
        self.allowed = allowed
        self.extension = extension
        self.classes: dict[tuple[str, _Kind], type] = {}
        self.depth = 0  # table entries under construction
        self.nodes: dict[int, Any] = {}  # id(JSON node) -> its container, while depth > 0
        self.val = self.value  # one bound method, handed to handlers

    def value(self, x: Any, path: Any, slot: int | None = None) -> Any:
        """Decode one JSON value; `slot` is its table index when it is a table entry."""
        t = type(x)
        if t in _SCALARS:
            return x
        if self.depth and id(x) in self.nodes:
            return self.nodes[id(x)]
        if t is dict:
            if "$" in x:
                return self.ref(x["$"] if len(x) == 1 else None, path, slot)
            if slot is None and not self.depth:  # nothing can refer back to it: copy a dict of scalars
                for v in x.values():
                    if type(v) not in _SCALARS:
                        break
                else:
                    return x.copy()
            out = {}
            if slot is not None or self.depth:
                self.shell(x, slot, out)
            val = self.val
            for k, v in x.items():
                out[k] = v if type(v) in _SCALARS else val(v, (path, k))
            return out
        if t is list and x:
            tag = x[0]
            if type(tag) is str:
                handler = _DECODERS.get(tag)
                if handler is None:
                    raise SnapshotDataError(_fmt((path, 0)), f"unknown tag {_show(tag)}")
                return handler(self, x, path, slot)
            if len(x) == 1:
                return self.ref(tag, path, slot)
        raise SnapshotDataError(_fmt(path), f"expected a JSON scalar, object or tagged array, got {_show(x)}")

    def ref(self, n: Any, path: Any, slot: int | None) -> Any:
        if slot is not None or type(n) is not int or not 0 <= n < self.size:
            raise SnapshotDataError(_fmt(path), f"expected a reference to one of {self.size} objects, got {_show(n)}")
        obj = self.built[n]
        if type(obj) is not _Mark:
            return obj
        if obj is _AGAIN:
            raise SnapshotDataError(f"objects[{n}]", "a cycle that runs through immutable values only")
        # An immutable met again through a cycle is built once more, inside (as pickle does); the
        # outer build then finds that object registered and returns it. The rebuild meets the same
        # JSON nodes again: containers already made for them are found in `nodes`.
        entry = self.objects[n]
        if type(entry) is not list and type(entry) is not dict:
            raise SnapshotDataError(f"objects[{n}]", f"expected a tagged array or an object, got {_show(entry)}")
        self.built[n] = _BUSY if obj is _TODO else _AGAIN
        self.depth += 1
        obj = self.val(entry, ("objects", n), n)
        self.depth -= 1
        if type(self.built[n]) is _Mark:
            self.built[n] = obj
        return self.built[n]

    def shell(self, node: Any, slot: int | None, obj: Any) -> Any:
        """Publish a container before its children are decoded, so that cycles back to it find it."""
        if slot is not None:
            self.built[slot] = obj
        elif self.depth:
            self.nodes[id(node)] = obj
        return obj

    def late(self, node: Any, slot: int | None, obj: Any) -> Any:
        """Publish an object built from some of its parts, unless a rebuild inside a cycle already did."""
        known = self.built[slot] if slot is not None else self.nodes.get(id(node), _TODO)
        return self.shell(node, slot, obj) if type(known) is _Mark else known

    def items(self, x: list, path: Any, start: int) -> list:
        out = x[start:]
        val = self.val
        for i, v in enumerate(out):
            if type(v) not in _SCALARS:
                out[i] = val(v, (path, i + start))
        return out

    def fill(self, out: dict, src: Any, path: Any, allowed: Any = None) -> dict:
        """Decode a str-keyed payload of values into `out` (registered first, so cycles see it)."""
        if type(src) is not dict:
            raise SnapshotDataError(_fmt(path), f"expected an object, got {_show(src)}")
        val = self.val
        for k, v in src.items():
            if allowed is not None and k not in allowed:
                raise SnapshotDataError(_fmt(path), f"unexpected name {k!r}")
            out[k] = v if type(v) in _SCALARS else val(v, (path, k))
        return out

    def cls(self, ref: Any, path: Any, kind: _Kind) -> type:
        """Resolve "module:qualname" to a class of `kind`, importing only allowed modules."""
        found = self.classes.get((ref, kind)) if type(ref) is str else None
        if found is not None:
            return found
        where = _fmt(path)
        if type(ref) is not str or ref.count(":") != 1:
            raise SnapshotDataError(where, f'expected "module:qualname", got {_show(ref)}')
        module, qualname = ref.split(":")
        if module == "builtins" and kind is _EXCEPTION:
            found = _lookup(sys.modules["builtins"], qualname)
        elif module in self.allowed:
            try:
                found = _lookup(sys.modules.get(module) or importlib.import_module(module), qualname)
            except Exception as error:
                raise SnapshotDataError(where, f"cannot import {module}: {error}") from None
        else:
            raise SnapshotDataError(where, f"module {module!r} is not among the allowed modules")
        if not (
            isinstance(found, type)
            and found.__module__ == module
            and found.__qualname__ == qualname
            and kind.test(found)
        ):
            raise SnapshotDataError(where, f"{ref} is not {kind.name} defined there")
        self.classes[(ref, kind)] = found
        return found


def _shape(x: list, path: Any, low: int, high: float | None = None) -> None:
    """Check the number of parts after the tag (`high` may be math.inf)."""
    high = low if high is None else high
    if not low <= len(x) - 1 <= high:
        count = str(low) if low == high else f"{low} to {high}" if high < math.inf else f"at least {low}"
        parts = "part" if count == "1" else "parts"
        raise SnapshotDataError(_fmt(path), f"expected {count} {parts} after the tag {x[0]!r}, got {len(x) - 1}")


def _want(value: Any, kind: type | tuple[type, ...], path: Any, i: int, what: str) -> Any:
    """Check one part's type (bool is not an int here)."""
    if not isinstance(value, kind) or (type(value) is bool and kind is not bool):
        raise SnapshotDataError(_fmt((path, i)), f"expected {what}, got {_show(value)}")
    return value


def _call(path: Any, fn: Callable, /, *args: Any, **kwargs: Any) -> Any:
    """Run a constructor on decoded parts; any failure is bad data at `path`."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        raise _refused(path, error) from None


def _refused(path: Any, error: Exception) -> SnapshotDataError:
    return SnapshotDataError(_fmt(path), f"cannot restore: {type(error).__name__}: {error}")


def _dec_list(d: _Decoder, x: list, path: Any, slot: int | None) -> list:
    if slot is not None or d.depth:
        out = d.shell(x, slot, [])
        out += d.items(x, path, 1)
        return out
    # Outside the table nothing can refer back to it; a dict of scalars (a message) is copied whole.
    out = x[1:]
    val = d.val
    for i, v in enumerate(out):
        t = type(v)
        if t in _SCALARS:
            continue
        if t is dict and "$" not in v:
            for w in v.values():
                if type(w) not in _SCALARS:
                    break
            else:
                out[i] = v.copy()
                continue
        out[i] = val(v, (path, i + 1))
    return out


def _dec_pairs(d: _Decoder, x: list, path: Any, slot: int | None) -> dict:
    out = d.shell(x, slot, {})
    flat = d.items(x, path, 1)
    if len(flat) % 2:
        raise SnapshotDataError(_fmt(path), "expected key, value pairs (an odd length)")
    for i in range(0, len(flat), 2):
        _call((path, i + 1), out.__setitem__, flat[i], flat[i + 1])
    return out


def _dec_set(d: _Decoder, x: list, path: Any, slot: int | None) -> set:
    out = d.shell(x, slot, set())
    _call(path, out.update, d.items(x, path, 1))
    return out


def _parts(*kinds: tuple[Any, str], optional: int = 0) -> Callable[[list, Any, _Decoder], list]:
    """Decode and type-check a fixed list of parts (the last `optional` ones may be missing)."""

    low, high = len(kinds) - optional, len(kinds)
    # Exact types that pass _want as they are (it still judges the others: subclasses, bool).
    exact = [frozenset(kind if type(kind) is tuple else (kind,)) - ({bool} - {kind}) for kind, _ in kinds]

    def parts(d: _Decoder, x: list, path: Any) -> list:
        if not low <= len(x) - 1 <= high:
            _shape(x, path, low, high)
        values = x[1:]  # d.items(x, path, 1), inline
        for i, value in enumerate(values):
            if type(value) not in _SCALARS:
                values[i] = d.val(value, (path, i + 1))
        for i, value in enumerate(values):
            if type(value) not in exact[i]:
                _want(value, kinds[i][0], path, i + 1, kinds[i][1])
        return values

    return parts


_TEXT = (str, "a string")
_INT = (int, "an integer")
_REAL = ((int, float), "a number")
_OPT_TEXT = ((str, type(None)), "a string or null")


def _simple(fn: Callable, *kinds: tuple[Any, str], optional: int = 0) -> Callable:
    """A builtin type rebuilt by calling `fn` on its checked parts."""
    parts = _parts(*kinds, optional=optional)

    def handler(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
        args = parts(d, x, path)
        try:
            return fn(*args)
        except Exception as error:
            raise _refused(path, error) from None

    return handler


def _b64decode(text: str) -> bytes:
    return binascii.a2b_base64(text, strict_mode=True)


def _dec_clock(kind: type) -> Callable:
    parts = _parts(_TEXT, ((tzinfo, type(None)), "a time zone"), ((int,), "0 or 1"), optional=2)

    def handler(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
        values = parts(d, x, path)
        text, zone, fold = values + [None, 0][len(values) - 1 :]  # the defaults of what is missing
        naive = _call((path, 1), kind.fromisoformat, text)
        if naive.tzinfo is not None:
            raise SnapshotDataError(_fmt((path, 1)), "expected ISO text without an offset (the zone comes next)")
        return _call(path, naive.replace, tzinfo=zone, fold=fold)

    return handler


_TIMEZONE_PARTS = _parts(_INT, _INT, _TEXT, optional=1)


def _dec_timezone(d: _Decoder, x: list, path: Any, slot: int | None) -> timezone:
    seconds, micros, *name = _TIMEZONE_PARTS(d, x, path)
    return _call(path, timezone, _call(path, timedelta, seconds=seconds, microseconds=micros), *name)


_TEXT_PART = _parts(_TEXT)
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")


def _dec_zoneinfo(d: _Decoder, x: list, path: Any, slot: int | None) -> ZoneInfo:
    """A zone from the system's tz files; from the tzdata package (an import) only if "tzdata" is allowed."""
    (key,) = _TEXT_PART(d, x, path)
    if not _ZONE_KEY.fullmatch(key):
        raise SnapshotDataError(_fmt((path, 1)), f"not a time zone key: {_show(key)}")
    if "tzdata" not in d.allowed and not any(os.path.isfile(os.path.join(root, key)) for root in TZPATH):
        raise SnapshotDataError(_fmt((path, 1)), f"time zone {key!r} is not installed here (allow 'tzdata'?)")
    return _call(path, ZoneInfo, key)


def _dec_enum(d: _Decoder, x: list, path: Any, slot: int | None) -> Enum:
    _shape(x, path, 2, 3)
    cls = d.cls(x[1], (path, 1), _ENUM)
    name = _want(x[2], (str, type(None)), path, 2, "a member name or null")
    if name is not None and len(x) == 3:
        member = cls.__members__.get(name)
        if member is None:
            raise SnapshotDataError(_fmt((path, 2)), f"{cls.__qualname__} has no member {name!r}")
        return member
    if name is not None or len(x) != 4 or not issubclass(cls, Flag):
        raise SnapshotDataError(_fmt(path), "expected [tag, class, name] or a Flag's [tag, class, null, value]")
    return _call(path, cls, d.val(x[3], (path, 3)))


def _dec_model(d: _Decoder, x: list, path: Any, slot: int | None) -> BaseModel:
    _shape(x, path, 3, 5)
    cls = d.cls(x[1], (path, 1), _MODEL)
    names = _model_fields(cls)
    fields_set = _want(x[3], list, path, 3, "a list of field names")
    extra, private = [*x[4:], None, None][:2]
    if not all(type(name) is str for name in fields_set):
        raise SnapshotDataError(_fmt((path, 3)), f"expected field names, got {_show(fields_set)}")
    if extra is not None and cls.model_config.get("extra") != "allow":
        raise SnapshotDataError(_fmt((path, 4)), f"{cls.__qualname__} does not allow extra fields")
    obj = d.shell(x, slot, _call(path, cls.__new__, cls))
    state: dict = {}
    setattr_ = object.__setattr__
    setattr_(obj, "__dict__", state)
    setattr_(obj, "__pydantic_fields_set__", set(fields_set))
    setattr_(obj, "__pydantic_extra__", None if extra is None else d.fill({}, extra, (path, 4)))
    setattr_(obj, "__pydantic_private__", None)
    if private is not None:
        setattr_(obj, "__pydantic_private__", d.fill({}, private, (path, 5), cls.__private_attributes__))
    d.fill(state, x[2], (path, 2), names)
    if len(state) != len(names):
        raise SnapshotDataError(_fmt((path, 2)), f"missing fields {sorted(names - state.keys())}")
    return obj


def _dec_dataclass(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 2, 3)
    cls = d.cls(x[1], (path, 1), _DATACLASS)
    obj = d.shell(x, slot, _call(path, object.__new__, cls))
    for name, value in d.fill({}, x[2], (path, 2), _dataclass_fields(cls)).items():
        object.__setattr__(obj, name, value)
    if len(x) == 4:
        if not hasattr(obj, "__dict__"):
            raise SnapshotDataError(_fmt((path, 3)), f"{cls.__qualname__} instances have no __dict__")
        d.fill(obj.__dict__, x[3], (path, 3))
    return obj


def _dec_exception(d: _Decoder, x: list, path: Any, slot: int | None) -> BaseException:
    _shape(x, path, 7)
    cls = d.cls(x[1], (path, 1), _EXCEPTION)
    args = d.items(_want(x[2], list, path, 2, "a list of args"), (path, 2), 0)
    keywords = d.fill({}, x[7], (path, 7))
    if cls.__module__ == "builtins":
        if issubclass(cls, OSError) and keywords:  # OSError(errno, strerror, filename, winerror, filename2)
            if len(args) != 2 or not keywords.keys() <= {"filename", "filename2"}:
                raise SnapshotDataError(_fmt((path, 7)), "expected filename(s) with args (errno, strerror)")
            args = [*args, keywords.get("filename"), None, keywords.get("filename2")]
            keywords = {}
        obj = _call(path, cls, *args, **keywords)
    else:  # a user class: no __init__, like dataclasses; its attributes come back through __dict__
        if keywords:
            raise SnapshotDataError(_fmt((path, 7)), "keywords are for builtin exceptions only")
        obj = _call(path, cls.__new__, cls, *args)
        obj.args = tuple(args)
    published = d.late(x, slot, obj)
    if published is not obj:
        return published  # built already, inside a cycle through its args
    d.fill(obj.__dict__, x[3], (path, 3))
    for i, attr in ((4, "__cause__"), (5, "__context__")):
        _call((path, i), setattr, obj, attr, d.val(x[i], (path, i)))
    obj.__suppress_context__ = _want(x[6], bool, path, 6, "true or false")
    return obj


_DICT_ITER_PARTS = _parts((list, "a list of what is left"))
_SEQ_ITER_PARTS = _parts((_ITER_SOURCES, "a sequence"), _INT, optional=1)


def _dec_dict_iter(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    (left,) = _DICT_ITER_PARTS(d, x, path)
    if x[0] == "DK":
        return _call(path, lambda: iter(dict.fromkeys(left)))
    if x[0] == "DV":
        return iter(dict(enumerate(left)).values())
    if not all(type(item) is tuple and len(item) == 2 for item in left):
        raise SnapshotDataError(_fmt((path, 1)), "expected (key, value) pairs")
    return _call(path, lambda: iter(dict(left).items()))


def _dec_seq_iter(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    reverse = x[0] == "R"
    source, *position = _SEQ_ITER_PARTS(d, x, path)
    if reverse and type(source) is range:
        raise SnapshotDataError(_fmt((path, 1)), "a reversed range is a forward iterator over another range")
    start = reversed if reverse else iter
    it = start(source) if type(source) in _SEQUENCES else _call(path, start, source)  # these cannot refuse
    if position:
        try:
            it.__setstate__(position[0])
        except Exception as error:
            raise _refused((path, 2), error) from None
    return it


def _dec_call(fn: Callable, low: int, high: int) -> Callable:
    """enumerate, count, repeat: call the builtin with the decoded arguments."""

    def handler(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
        _shape(x, path, low, high)
        return _call(path, fn, *d.items(x, path, 1))

    return handler


def _dec_zip(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 1, math.inf)
    return _call(path, zip, *d.items(x, path, 2), strict=_want(x[1], bool, path, 1, "true or false"))


def _dec_chain(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 0, 2)
    chain = itertools.chain()
    if len(x) > 1:
        _call(path, chain.__setstate__, tuple(d.items(x, path, 1)))
    return chain


def _dec_mapped(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 2, math.inf)
    kind, name = (map, x[1]) if x[0] == "mp" else (filter, x[1])
    if not ((name is None and kind is filter) or (type(name) is str and name in _SAFE_FUNCS)):
        raise SnapshotDataError(_fmt((path, 1)), f"not a function that may travel: {_show(name)}")
    return _call(path, kind, _SAFE_FUNCS.get(name), *d.items(x, path, 2))


def _dec_extension(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    if len(x) != 2:
        _shape(x, path, 1)
    if d.extension is None or type(x[1]) is not dict:
        raise SnapshotDataError(_fmt((path, 1)), "an extension entry, but no codec extension was given")
    return d.extension(x[1], _Child(d, x, slot), _fmt((path, 1)))


_DECODERS: dict[str, Callable[[_Decoder, list, Any, int | None], Any]] = {
    "l": _dec_list,
    "d": _dec_pairs,
    "u": lambda d, x, path, slot: tuple(d.items(x, path, 1)),
    "s": _dec_set,
    "fs": lambda d, x, path, slot: _call(path, frozenset, d.items(x, path, 1)),
    "f": _simple(_NONFINITE.__getitem__, _TEXT),
    "i": _simple(lambda text: int(text, 16), _TEXT),
    "b": _simple(_b64decode, _TEXT),
    "ba": _simple(lambda text: bytearray(_b64decode(text)), _TEXT),
    "dt": _dec_clock(datetime),
    "tm": _dec_clock(time),
    "da": _simple(date.fromisoformat, _TEXT),
    "td": _simple(timedelta, _INT, _INT, _INT),
    "tz": _dec_timezone,
    "zi": _dec_zoneinfo,
    "dec": _simple(Decimal, _TEXT),
    "uu": _simple(lambda text: uuid.UUID(hex=text), _TEXT),
    "fr": _simple(Fraction, _INT, _INT),
    "c": _simple(complex, _REAL, _REAL),
    "rg": _simple(range, _INT, _INT, _INT),
    "e": _dec_enum,
    "m": _dec_model,
    "dc": _dec_dataclass,
    "x": _dec_exception,
    "I": _dec_seq_iter,
    "R": _dec_seq_iter,
    "DK": _dec_dict_iter,
    "DV": _dec_dict_iter,
    "DI": _dec_dict_iter,
    "en": _dec_call(enumerate, 2, 2),
    "zp": _dec_zip,
    "cn": _dec_call(itertools.count, 1, 2),
    "rp": _dec_call(itertools.repeat, 1, 2),
    "ch": _dec_chain,
    "mp": _dec_mapped,
    "fl": _dec_mapped,
    "@": _dec_extension,
}


_GRAPH_FIELDS = frozenset({"roots", "objects"})


def decode(data: Any, *, allowed_modules: frozenset[str], extension: DecodeExtension | None = None) -> dict[str, Any]:
    """Rebuild the roots from what `encode` made (after any JSON round trip); see the module docstring."""
    if type(data) is not dict or data.keys() != _GRAPH_FIELDS:
        raise SnapshotDataError("data", f'expected {{"roots": {{...}}, "objects": [...]}}, got {_show(data)}')
    roots, objects = data["roots"], data["objects"]
    if type(roots) is not dict:
        raise SnapshotDataError("roots", f"expected an object, got {_show(roots)}")
    if type(objects) is not list:
        raise SnapshotDataError("objects", f"expected a list, got {_show(objects)}")
    d = _Decoder(objects, frozenset(allowed_modules), extension)
    try:
        out = {name: d.val(x, ("roots", name)) for name, x in roots.items()}
        for n in range(d.size):  # entries nothing referred to are still checked
            if d.built[n] is _TODO:
                d.ref(n, "objects", None)
    except RecursionError:
        raise SnapshotDataError("data", "nested too deeply to rebuild") from None
    finally:
        del d.val  # a cycle through the decoder: broken, so it is freed now, not by the garbage collector
    return out


# ---------------------------------------------------------------------------------------------------- plain data
# Most of what a suspended generator holds is plain data: scalars, lists and str-keyed dicts of them,
# and the range iterators of its for loops. These two functions write and read exactly what
# `encode` and `decode` do for such values, in one small recursive function each (few frames, no
# memo), and give up (None) at anything else, so that the caller runs the full codec instead. They
# never raise for a value they do not take: errors and their paths stay the full codec's.


class _NotPlain(Exception):
    """A value the plain fast path does not take."""


_RANGE_ITERATOR = type(iter(range(0)))
_RANGE_REDUCES = _RANGE_ITERATOR.__reduce__ is not object.__reduce__  # as _reduce checks it


def encode_plain(values: dict[str, Any], extras: dict[type, dict] | None = None) -> dict[str, Any] | None:
    """What `encode(values)["roots"]` would be, when "objects" would be empty: every value plain and
    no list, dict or iterator met twice; else None. `extras` maps exact types to the extension entry
    that every instance gets (written as ``["@", entry]``, a copy each time)."""
    seen: list[int] = []  # ids of the containers written: one met twice is shared (or on a cycle)

    def leaf(x: Any, path: Any) -> Any:
        t = type(x)
        if t is int:
            if _NEG_BIG < x < _BIG:
                return x
        elif t is float:
            if x - x == 0.0:
                return x
        elif t is _RANGE_ITERATOR and _RANGE_REDUCES:  # its bounds are C longs: never big ints
            seen.append(id(x))
            _, (source,), position = x.__reduce__()
            return ["I", ["rg", source.start, source.stop, source.step], position]
        elif extras is not None and t in extras:
            seen.append(id(x))
            return ["@", dict(extras[t])]
        raise _NotPlain

    out = {}
    try:
        for k, v in values.items():
            t = type(v)
            if t in _INLINE or (t is int and _NEG_BIG < v < _BIG):
                out[k] = v
            else:
                out[k] = _tree(seen, leaf, v, k) if t is list or t is dict else leaf(v, k)
    except (_NotPlain, RecursionError):
        return None
    return out if len(set(seen)) == len(seen) else None


def decode_plain(values: dict[str, Any], extras: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What `decode` would rebuild from these roots (with no "objects"), when all are plain; else
    None. `extras` maps the tag of an extension entry that has no other field to its object."""
    out = {}
    try:
        for k, v in values.items():
            out[k] = v if type(v) in _SCALARS else _unplain(v, extras)
    except (_NotPlain, RecursionError):
        return None
    return out


def _unplain(x: Any, extras: dict[str, Any] | None) -> Any:
    t = type(x)
    if t in _SCALARS:
        return x
    if t is dict:
        if "$" in x:
            raise _NotPlain
        for v in x.values():
            if type(v) not in _SCALARS:
                return {k: v if type(v) in _SCALARS else _unplain(v, extras) for k, v in x.items()}
        return x.copy()
    if t is not list or not x or type(x[0]) is not str:
        raise _NotPlain
    tag = x[0]
    if tag == "l":
        out = []
        append = out.append
        items = iter(x)
        next(items)  # the tag
        for v in items:
            if type(v) is dict:  # a dict of scalars (a message, say), inline
                if "$" not in v:
                    for w in v.values():
                        if type(w) is not str and type(w) not in _SCALARS:
                            break
                    else:
                        append(v.copy())
                        continue
            elif type(v) in _SCALARS:
                append(v)
                continue
            append(_unplain(v, extras))
        return out
    if tag == "I" and len(x) == 3:
        source, position = x[1], x[2]
        if type(source) is list and len(source) == 4 and type(position) is int:
            rg, start, stop, step = source  # exact types: a str subclass is no tag to `decode`, a bool no int
            if type(rg) is str and rg == "rg" and type(start) is int and type(stop) is int and type(step) is int:
                if step:
                    it = iter(range(start, stop, step))
                    try:
                        it.__setstate__(position)
                    except Exception:
                        raise _NotPlain from None
                    return it
    elif tag == "@" and len(x) == 2 and extras is not None:
        entry = x[1]
        if type(entry) is dict and len(entry) == 1 and type(entry.get("t")) is str and entry["t"] in extras:
            return extras[entry["t"]]
    raise _NotPlain
