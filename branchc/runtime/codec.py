"""The value codec: the live variables of a suspended generator as plain JSON data, and back.

`encode(roots)` turns a dict of named values into one object graph::

    {"roots": {name: <inline>}, "objects": [<entry>, ...]}

An inline value is a JSON scalar (None, bool, int, str, finite float), a reference
``{"$": index}`` into "objects", or a non-finite float ``{"$": "nan" | "inf" | "-inf"}``.
Every other value (dicts and lists included) is one entry ``{"t": tag, ...}`` in the table,
stored once however often it is referenced, so aliasing and cycles survive. Strings are
always inline: their identity is not observable in practice.

`decode(data, allowed_modules=...)` rebuilds the graph. It runs no code named by the data
except constructors of the fixed builtin types below and classes (enums, pydantic models,
dataclasses, exceptions) whose module is in `allowed_modules`; it never calls pickle,
copyreg, eval or exec, and imports nothing outside `allowed_modules`. Anything malformed
raises SnapshotDataError naming the place in the data, e.g. ``objects[4].v[2]``.

Extension protocol (the generator layer uses it for compiled generators, its Context handle,
compiled functions, cells):

- encode: ``extension(value, encode_child, path)`` is called for every value that is not a
  scalar and not of an exact builtin container type (list, dict, tuple, set, frozenset: those
  cannot be anything the extension owns; their subclasses do reach it). The value already has
  its table index, so ``encode_child(child, child_path)`` may refer back to it (cycles). It
  returns a JSON dict ``{"t": tag, ...}`` whose tag is not one of the codec's, or None to let
  the codec handle the value. The codec does not check that the entry is JSON.
- decode: ``extension(entry, decode_child, path)`` is called for unknown tags and returns the
  object or raises SnapshotDataError. ``decode_child(inline, child_path)`` decodes one child.
  A child may be a list, dict, model, ... that is still being filled (it is part of a cycle
  that runs through this entry); do not look inside it. If the extension's object itself is
  mutable and may be part of a cycle, it calls ``decode_child.created(obj)`` before decoding
  the children, so references back to the entry get `obj`.

Identity is keyed by ``id()`` for the duration of one `encode` call (every value met is kept
alive meanwhile). Limits: nesting depth is bounded by Python's recursion limit (about a third
of it when encoding); a dict or set whose hash depends on an object that is part of a cycle
through that same dict or set cannot be restored; set and dict iterators come back as
iterators over a list of the items they had left; exceptions lose their traceback (and
AttributeError its `obj`).
"""

from __future__ import annotations

import binascii
import dataclasses
import importlib
import io
import itertools
import math
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
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from .errors import BranchcError

__all__ = ["NotSerializableError", "SnapshotDataError", "decode", "encode"]


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

# Integers beyond this do not survive json.dumps (sys.int_max_str_digits); they travel as hex.
_BIG = 1 << 13_000
_INLINE = frozenset({str, bool, type(None)})
_PLAIN = frozenset({list, dict, tuple, set, frozenset})
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

# Builtin iterator types, read through their own __reduce__ (introspection, not pickle).
_SEQ_ITERATORS = {
    type(iter(x))
    for x in ([], (), range(0), range(1 << 70), "a", "é", b"", bytearray(), {}, {}.values(), {}.items(), set())
} | {type(reversed({})), type(reversed({}.values())), type(reversed({}.items()))}
_REV_ITERATORS = {type(reversed([])), reversed}
_ITER_SOURCES = (list, tuple, str, bytes, bytearray, range)
# map/filter travel only with one of these functions (none of them runs code named by data).
_SAFE_FUNCS: dict[str, Any] = {
    f.__qualname__: f
    for f in (str, int, float, bool, bytes, tuple, list, abs, len, repr, ord, chr, round, sorted, str.strip)
}
_SAFE_FUNCS.update({f.__qualname__: f for f in (str.lower, str.upper, str.split, str.title, str.casefold)})
_SAFE_NAMES = {id(f): name for name, f in _SAFE_FUNCS.items()}  # by id: a callable need not be hashable

_PROCESS_MODULES = frozenset(
    "_thread threading socket _socket ssl _ssl select selectors subprocess multiprocessing asyncio concurrent "
    "queue _queue sqlite3 _sqlite3 mmap signal _asyncio contextvars _contextvars weakref _weakref".split()
)
_DATA_HINT = (
    "a snapshot holds data: None, bool, int, float, str, bytes, containers, datetime values, Decimal, UUID, "
    "Fraction, complex, enums, dataclasses, pydantic models, exceptions and builtin iterators; convert it "
    "before the yield"
)


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


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


# ---------------------------------------------------------------------------------------------------- encode

_CLASS_REFS: dict[type, str] = {}


def _class_ref(t: type, path: str) -> str:
    """The "module:qualname" of a class a restore can find again by name (cached per class)."""
    ref = _CLASS_REFS.get(t)
    if ref is None:
        ref = f"{t.__module__}:{t.__qualname__}"
        if _lookup(sys.modules.get(t.__module__), t.__qualname__) is not t:
            raise NotSerializableError(
                path, _type_name(t), f"define {t.__qualname__} at module level so a restore can find it by name"
            )
        _CLASS_REFS[t] = ref
    return ref


def _lookup(obj: Any, qualname: str) -> Any:
    """Walk a qualname through __dict__ (no getattr hooks); None unless every step is a plain name."""
    for part in qualname.split("."):
        if obj is None or not part.isidentifier() or part.startswith("__"):
            return None
        obj = vars(obj).get(part) if isinstance(obj, (type, types.ModuleType)) else None
    return obj


class _Encoder:
    __slots__ = ("enc", "extension", "keep", "memo", "objects")

    def __init__(self, extension: Extension | None) -> None:
        self.memo: dict[int, int] = {}
        self.objects: list[Any] = []
        self.keep: list[Any] = []  # every value met stays alive, so no id() is reused mid-encode
        self.extension = extension
        self.enc = self.encode  # one bound method, handed to handlers and the extension

    def encode(self, x: Any, path: str) -> Any:
        """The inline form of x: the scalar itself or a reference to its table entry."""
        t = type(x)
        if t in _INLINE:
            return x
        if t is int and -_BIG < x < _BIG:
            return x
        if t is float:
            return x if x - x == 0.0 else {"$": "nan" if x != x else ("inf" if x > 0 else "-inf")}
        n = self.memo.get(id(x))
        if n is not None:
            return {"$": n}
        n = self.memo[id(x)] = len(self.objects)
        self.objects.append(None)
        self.keep.append(x)
        if self.extension is not None and t not in _PLAIN:
            entry = self.extension(x, self.enc, path)
            if entry is not None:
                if type(entry) is not dict or type(entry.get("t")) is not str or entry["t"] in _DECODERS:
                    raise TypeError(f"{path}: the codec extension must return a dict with its own str 't' tag")
                self.objects[n] = entry
                return {"$": n}
        handler = _ENCODERS.get(t) or _encoder_for(t)
        if handler is None:
            raise NotSerializableError(path, _type_name(t), _why_not(x))
        self.objects[n] = handler(self, x, path)
        return {"$": n}

    def items(self, values: Any, path: str) -> list:
        """Inline forms of a sequence's items; the path is only built for non-scalars."""
        enc = self.enc
        return [v if type(v) in _INLINE else enc(v, f"{path}[{i}]") for i, v in enumerate(values)]

    def fields(self, values: dict, path: str) -> dict:
        """Inline forms of a str-keyed mapping's values, e.g. object attributes."""
        enc = self.enc
        return {k: v if type(v) in _INLINE else enc(v, f"{path}.{k}") for k, v in values.items()}


def _enc_dict(e: _Encoder, x: dict, path: str) -> dict:
    enc = e.enc
    out = {}
    for k, v in x.items():
        if type(k) is not str:
            return _enc_pairs(e, x, path)
        out[k] = v if type(v) in _INLINE else enc(v, f"{path}[{k!r}]")
    return {"t": "o", "v": out}


def _enc_pairs(e: _Encoder, x: dict, path: str) -> dict:
    out = []
    for i, (k, v) in enumerate(x.items()):
        out.append(e.enc(k, f"{path}<key {i}>"))
        out.append(e.enc(v, f"{path}[{k!r}]"))
    return {"t": "d", "v": out}


def _enc_set(tag: str) -> Callable[[_Encoder, Any, str], dict]:
    def handler(e: _Encoder, x: Any, path: str) -> dict:
        return {"t": tag, "v": [e.enc(v, f"{path}<item {i}>") for i, v in enumerate(x)]}

    return handler


def _b64(x: bytes | bytearray) -> str:
    return binascii.b2a_base64(x, newline=False).decode("ascii")


def _enc_clock(tag: str) -> Callable[[_Encoder, Any, str], dict]:
    """datetime and time: the naive ISO text, the tzinfo as a child, fold when set."""

    def handler(e: _Encoder, x: Any, path: str) -> dict:
        entry = {"t": tag, "v": x.replace(tzinfo=None, fold=0).isoformat()}
        if x.tzinfo is not None:
            entry["z"] = e.enc(x.tzinfo, f"{path}.tzinfo")
        if x.fold:
            entry["f"] = 1
        return entry

    return handler


def _enc_timezone(e: _Encoder, x: timezone, path: str) -> dict:
    args = x.__getinitargs__()
    offset = args[0]
    entry = {"t": "tz", "v": [offset.days * 86400 + offset.seconds, offset.microseconds]}
    if len(args) > 1:
        entry["n"] = args[1]
    return entry


def _enc_zoneinfo(e: _Encoder, x: ZoneInfo, path: str) -> dict:
    if x.key is None:
        raise NotSerializableError(path, "zoneinfo.ZoneInfo", "a zone read from a file cannot travel; use a key")
    return {"t": "zi", "v": x.key}


def _enc_enum(e: _Encoder, x: Enum, path: str) -> dict:
    cls = type(x)
    ref = _class_ref(cls, path)
    if cls.__members__.get(x._name_) is x:
        return {"t": "e", "c": ref, "n": x._name_}
    if isinstance(x, Flag):  # a combination of flags has no member name of its own
        return {"t": "e", "c": ref, "v": e.enc(x._value_, f"{path}.value")}
    raise NotSerializableError(path, _type_name(cls), "an enum value that is not a member cannot travel")


_MODEL_FIELDS: dict[type, frozenset[str]] = {}


def _model_fields(cls: type[BaseModel]) -> frozenset[str]:
    names = _MODEL_FIELDS.get(cls)
    if names is None:
        names = _MODEL_FIELDS[cls] = frozenset(cls.model_fields)
    return names


def _enc_model(e: _Encoder, x: BaseModel, path: str) -> dict:
    """The pydantic state as it is (no dump, no validation): fields, fields_set, extra, private."""
    ref = _class_ref(type(x), path)
    names = _model_fields(type(x))
    state = {k: v for k, v in x.__dict__.items() if k in names}  # other keys: cached_property values
    entry = {"t": "m", "c": ref, "v": e.fields(state, path), "s": sorted(x.__pydantic_fields_set__)}
    extra = getattr(x, "__pydantic_extra__", None)
    if extra is not None:
        entry["x"] = e.fields(extra, path)
    private = getattr(x, "__pydantic_private__", None)
    if private is not None:
        entry["p"] = e.fields(private, path)
    return entry


_DATACLASS_FIELDS: dict[type, tuple[str, ...]] = {}


def _dataclass_fields(cls: type) -> tuple[str, ...]:
    names = _DATACLASS_FIELDS.get(cls)
    if names is None:
        names = _DATACLASS_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _enc_dataclass(e: _Encoder, x: Any, path: str) -> dict:
    """Field values (slots or __dict__) plus any other instance attributes; no __init__ on restore."""
    names = _dataclass_fields(type(x))
    state = {}
    for name in names:
        try:
            state[name] = getattr(x, name)
        except AttributeError:  # an unset slot stays unset
            pass
    entry = {"t": "dc", "c": _class_ref(type(x), path), "v": e.fields(state, path)}
    extra = {k: v for k, v in getattr(x, "__dict__", {}).items() if k not in state}
    if extra:
        entry["a"] = e.fields(extra, path)
    return entry


# Builtin exception attributes that args do not imply, restored as keywords.
_EXC_KEYWORDS = ((ImportError, ("name", "path")), (NameError, ("name",)), (AttributeError, ("name",)))


def _enc_exception(e: _Encoder, x: BaseException, path: str) -> dict:
    """args, instance attributes (__notes__ among them), cause and context; the traceback is dropped."""
    cls = type(x)
    entry = {"t": "x", "c": _class_ref(cls, path), "a": e.items(x.args, f"{path}.args")}
    if cls.__module__ == "builtins":
        keywords = {}
        if isinstance(x, OSError):
            keywords = {k: getattr(x, k) for k in ("filename", "filename2") if getattr(x, k) is not None}
        for base, names in _EXC_KEYWORDS:
            if isinstance(x, base):
                keywords = {k: getattr(x, k) for k in names if getattr(x, k) is not None}
        if keywords:
            entry["k"] = e.fields(keywords, path)
    if x.__dict__:
        entry["d"] = e.fields(x.__dict__, path)
    if x.__cause__ is not None:
        entry["ca"] = e.enc(x.__cause__, f"{path}.__cause__")
    if x.__context__ is not None:
        entry["cx"] = e.enc(x.__context__, f"{path}.__context__")
    if x.__suppress_context__:
        entry["sc"] = True
    return entry


def _reduce(x: Any, path: str) -> tuple:
    """A builtin iterator's own __reduce__; refused where the type no longer has one (Python 3.14)."""
    if type(x).__reduce__ is object.__reduce__:
        raise NotSerializableError(path, _type_name(type(x)), "this Python cannot read its position; finish it first")
    return x.__reduce__()


def _enc_seq_iter(e: _Encoder, x: Any, path: str) -> dict:
    fn, args, *state = _reduce(x, path)
    tag = "R" if fn is reversed else "I"
    return {"t": tag, "v": [e.enc(args[0], f"{path}<source>"), *state]}


def _enc_reduced(tag: str) -> Callable[[_Encoder, Any, str], dict]:
    """enumerate, zip, count, repeat: their constructor arguments are the state."""

    def handler(e: _Encoder, x: Any, path: str) -> dict:
        _, args, *state = _reduce(x, path)
        entry = {"t": tag, "v": e.items(args, f"{path}<args>")}
        if state:  # zip(strict=True)
            entry["s"] = True
        return entry

    return handler


def _enc_chain(e: _Encoder, x: Any, path: str) -> dict:
    reduced = _reduce(x, path)
    return {"t": "ch", "v": e.items(reduced[2] if len(reduced) > 2 else (), f"{path}<state>")}


def _enc_mapped(tag: str) -> Callable[[_Encoder, Any, str], dict]:
    def handler(e: _Encoder, x: Any, path: str) -> dict:
        fn, (func, *iterators) = _reduce(x, path)
        name = _SAFE_NAMES.get(id(func))
        if name is None and not (func is None and fn is filter):
            hint = f"{fn.__name__}() travels only with a builtin such as str or len; use a list before the yield"
            raise NotSerializableError(path, fn.__name__, hint)
        return {"t": tag, "f": name, "v": e.items(iterators, f"{path}<args>")}

    return handler


_ENCODERS: dict[type, Callable[[_Encoder, Any, str], dict]] = {
    list: lambda e, x, path: {"t": "l", "v": e.items(x, path)},
    dict: _enc_dict,
    tuple: lambda e, x, path: {"t": "u", "v": e.items(x, path)},
    set: _enc_set("s"),
    frozenset: _enc_set("fs"),
    int: lambda e, x, path: {"t": "i", "v": format(x, "x")},
    bytes: lambda e, x, path: {"t": "b", "v": _b64(x)},
    bytearray: lambda e, x, path: {"t": "ba", "v": _b64(x)},
    datetime: _enc_clock("dt"),
    time: _enc_clock("tm"),
    date: lambda e, x, path: {"t": "da", "v": x.isoformat()},
    timedelta: lambda e, x, path: {"t": "td", "v": [x.days, x.seconds, x.microseconds]},
    timezone: _enc_timezone,
    ZoneInfo: _enc_zoneinfo,
    Decimal: lambda e, x, path: {"t": "dec", "v": str(x)},
    uuid.UUID: lambda e, x, path: {"t": "uu", "v": x.hex},
    Fraction: lambda e, x, path: {"t": "fr", "v": e.items((x.numerator, x.denominator), path)},
    complex: lambda e, x, path: {"t": "c", "v": e.items((x.real, x.imag), path)},
    range: lambda e, x, path: {"t": "rg", "v": e.items((x.start, x.stop, x.step), path)},
    **dict.fromkeys(_SEQ_ITERATORS | _REV_ITERATORS, _enc_seq_iter),
    enumerate: _enc_reduced("en"),
    zip: _enc_reduced("zp"),
    itertools.count: _enc_reduced("cn"),
    itertools.repeat: _enc_reduced("rp"),
    itertools.chain: _enc_chain,
    map: _enc_mapped("mp"),
    filter: _enc_mapped("fl"),
}


def _encoder_for(t: type) -> Callable[[_Encoder, Any, str], dict] | None:
    """Handlers for open-ended kinds (enums, exceptions, models, dataclasses), found once per class."""
    if issubclass(t, Enum):
        handler = _enc_enum
    elif issubclass(t, BaseException):
        handler = _enc_exception
    elif issubclass(t, BaseModel):
        handler = _enc_model
    elif dataclasses.is_dataclass(t) and t.__new__ is object.__new__:
        handler = _enc_dataclass
    else:
        return None
    _ENCODERS[t] = handler
    return handler


def encode(roots: dict[str, Any], *, extension: Extension | None = None) -> dict:
    """Encode named root values as one object graph; json.dumps of the result always succeeds."""
    e = _Encoder(extension)
    out = {}
    for name, value in roots.items():
        try:
            out[name] = e.enc(value, name)
        except RecursionError:
            raise NotSerializableError(
                name, _type_name(type(value)), "it is nested too deeply for a snapshot; flatten it"
            ) from None
    return {"roots": out, "objects": e.objects}


# ---------------------------------------------------------------------------------------------------- decode


class _Mark:
    """Table slots not built yet: TODO, BUSY (an immutable under construction), AGAIN (rebuilt in a cycle)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_TODO, _BUSY, _AGAIN = _Mark("todo"), _Mark("busy"), _Mark("again")
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _path(at: Any, field: str | None = None, key: Any = None) -> str:
    """objects[4].v[2] for a table position, roots['x'] for a root, or a path given as text."""
    if type(at) is str:
        return at
    if at is None:
        return f"roots[{key!r}]"
    return f"objects[{at}]" + (f".{field}" if field else "") + (f"[{key!r}]" if key is not None else "")


def _show(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


class _Child:
    """decode_child for the extension: decodes one inline value; `created` publishes a two-phase object."""

    __slots__ = ("dec", "idx")

    def __init__(self, dec: _Decoder, idx: int) -> None:
        self.dec = dec
        self.idx = idx

    def __call__(self, x: Any, path: str) -> Any:
        return self.dec.val(x, path)

    def created(self, obj: Any) -> None:
        self.dec.built[self.idx] = obj


class _Decoder:
    __slots__ = ("allowed", "built", "classes", "extension", "objects", "size")

    def __init__(self, objects: list, allowed: frozenset[str], extension: DecodeExtension | None) -> None:
        self.objects = objects
        self.size = len(objects)
        self.built: list[Any] = [_TODO] * self.size
        self.allowed = allowed
        self.extension = extension
        self.classes: dict[tuple[str, str], type] = {}

    def val(self, x: Any, at: Any, field: str | None = "v", key: Any = None) -> Any:
        """Decode one inline value found at `at` (an index, None for roots, or a path)."""
        t = type(x)
        if t in _SCALARS:
            return x
        if t is dict and len(x) == 1 and "$" in x:
            n = x["$"]
            if type(n) is int and 0 <= n < self.size:
                obj = self.built[n]
                return self.build(n) if type(obj) is _Mark else obj
            if type(n) is str and n in _NONFINITE:
                return _NONFINITE[n]
        raise SnapshotDataError(
            _path(at, field, key), f'expected a scalar or a reference {{"$": index}} below {self.size}, got {_show(x)}'
        )

    def build(self, idx: int) -> Any:
        """Build entry idx; an immutable met again through a cycle is built once more, inside (as pickle does)."""
        mark = self.built[idx]
        if mark is _AGAIN:
            raise SnapshotDataError(f"objects[{idx}]", "a cycle that runs through immutable values only")
        self.built[idx] = _BUSY if mark is _TODO else _AGAIN
        entry = self.objects[idx]
        if type(entry) is not dict or type(entry.get("t")) is not str:
            raise SnapshotDataError(f"objects[{idx}]", f'expected an entry {{"t": tag, ...}}, got {_show(entry)}')
        handler = _DECODERS.get(entry["t"])
        if handler is not None:
            obj = handler(self, entry, idx)
        elif self.extension is not None:
            obj = self.extension(entry, _Child(self, idx), f"objects[{idx}]")
        else:
            raise SnapshotDataError(f"objects[{idx}].t", f"unknown tag {entry['t']!r}")
        if type(self.built[idx]) is _Mark:
            self.built[idx] = obj
        return self.built[idx]  # a shell registered early, or the object built inside a cycle

    def field(self, entry: dict, idx: int, name: str, kind: type | tuple[type, ...], what: str) -> Any:
        value = entry.get(name)
        if not isinstance(value, kind) or (type(value) is bool and kind is not bool):
            raise SnapshotDataError(f"objects[{idx}].{name}", f"expected {what}, got {_show(value)}")
        return value

    def items(self, entry: dict, idx: int, name: str = "v", size: int | None = None) -> list:
        seq = self.field(entry, idx, name, list, "a list")
        if size is not None and len(seq) != size:
            raise SnapshotDataError(f"objects[{idx}].{name}", f"expected {size} items, got {len(seq)}")
        val = self.val
        return [x if type(x) in _SCALARS else val(x, idx, name, i) for i, x in enumerate(seq)]

    def fill(self, out: dict, entry: dict, idx: int, name: str = "v", allowed: Any = None) -> dict:
        """Decode a str-keyed mapping into `out` (registered first, so cycles see it)."""
        src = self.field(entry, idx, name, dict, "an object")
        val = self.val
        for k, x in src.items():
            if allowed is not None and k not in allowed:
                raise SnapshotDataError(f"objects[{idx}].{name}", f"unexpected name {k!r}")
            out[k] = x if type(x) in _SCALARS else val(x, idx, name, k)
        return out

    def cls(self, entry: dict, idx: int, kind: _Kind) -> type:
        """Resolve "module:qualname" to a class of `kind`, importing only allowed modules."""
        ref = entry.get("c")
        known = self.classes.get((ref, kind)) if type(ref) is str else None
        if known is not None:
            return known
        where = f"objects[{idx}].c"
        if type(ref) is not str or ref.count(":") != 1:
            raise SnapshotDataError(where, f'expected "module:qualname", got {_show(ref)}')
        module, qualname = ref.split(":")
        if module == "builtins" and kind is _EXCEPTION:
            found = _lookup(sys.modules["builtins"], qualname)
        elif module in self.allowed:
            try:
                mod = sys.modules.get(module) or importlib.import_module(module)
            except Exception as error:
                raise SnapshotDataError(where, f"cannot import {module}: {error}") from None
            found = _lookup(mod, qualname)
        else:
            raise SnapshotDataError(where, f"module {module!r} is not among the allowed modules")
        if not (
            isinstance(found, type)
            and kind.test(found)
            and found.__module__ == module
            and found.__qualname__ == qualname
        ):
            raise SnapshotDataError(where, f"{ref} is not {kind.name} defined there")
        self.classes[(ref, kind)] = found
        return found

    def call(self, idx: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run a constructor on decoded values; any failure is bad data at objects[idx]."""
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            raise SnapshotDataError(f"objects[{idx}]", f"cannot restore: {type(error).__name__}: {error}") from None


class _Kind(NamedTuple):
    """What a class named in the data must be, for the tag that names it."""

    name: str
    test: Callable[[type], bool]


_ENUM = _Kind("an Enum", lambda c: issubclass(c, Enum))
_MODEL = _Kind("a pydantic model", lambda c: issubclass(c, BaseModel))
_DATACLASS = _Kind("a dataclass", lambda c: dataclasses.is_dataclass(c) and c.__new__ is object.__new__)
_EXCEPTION = _Kind("an exception", lambda c: issubclass(c, BaseException))


def _dec_list(d: _Decoder, entry: dict, idx: int) -> list:
    out = d.built[idx] = []
    out.extend(d.items(entry, idx))
    return out


def _dec_strdict(d: _Decoder, entry: dict, idx: int) -> dict:
    out = d.built[idx] = {}
    return d.fill(out, entry, idx)


def _dec_pairs(d: _Decoder, entry: dict, idx: int) -> dict:
    out = d.built[idx] = {}
    flat = d.items(entry, idx)
    if len(flat) % 2:
        raise SnapshotDataError(f"objects[{idx}].v", "expected key, value pairs (an even length)")
    for i in range(0, len(flat), 2):
        d.call(idx, out.__setitem__, flat[i], flat[i + 1])
    return out


def _dec_set(d: _Decoder, entry: dict, idx: int) -> set:
    out = d.built[idx] = set()
    d.call(idx, out.update, d.items(entry, idx))
    return out


def _text(d: _Decoder, entry: dict, idx: int) -> str:
    return d.field(entry, idx, "v", str, "a string")


def _ints(d: _Decoder, entry: dict, idx: int, size: int) -> list:
    values = d.items(entry, idx, size=size)
    for i, v in enumerate(values):
        if type(v) is not int:
            raise SnapshotDataError(f"objects[{idx}].v[{i}]", f"expected an integer, got {_show(v)}")
    return values


def _dec_bytes(kind: type) -> Callable[[_Decoder, dict, int], Any]:
    return lambda d, entry, idx: kind(d.call(idx, binascii.a2b_base64, _text(d, entry, idx), strict_mode=True))


def _dec_clock(kind: type) -> Callable[[_Decoder, dict, int], Any]:
    def handler(d: _Decoder, entry: dict, idx: int) -> Any:
        naive = d.call(idx, kind.fromisoformat, _text(d, entry, idx))
        if naive.tzinfo is not None:
            raise SnapshotDataError(f"objects[{idx}].v", "expected ISO text without an offset (it goes in 'z')")
        zone = d.val(entry["z"], idx, "z") if "z" in entry else None
        if zone is not None and not isinstance(zone, tzinfo):
            raise SnapshotDataError(f"objects[{idx}].z", f"expected a time zone, got {_show(zone)}")
        fold = entry.get("f", 0)
        if fold not in (0, 1) or type(fold) is bool:
            raise SnapshotDataError(f"objects[{idx}].f", f"expected 0 or 1, got {_show(fold)}")
        return naive.replace(tzinfo=zone, fold=fold)

    return handler


def _dec_timezone(d: _Decoder, entry: dict, idx: int) -> timezone:
    seconds, micros = _ints(d, entry, idx, 2)
    offset = d.call(idx, timedelta, seconds=seconds, microseconds=micros)
    if "n" not in entry:
        return d.call(idx, timezone, offset)
    return d.call(idx, timezone, offset, d.field(entry, idx, "n", str, "a string"))


def _dec_number(kind: type, size: int, types_: tuple[type, ...]) -> Callable[[_Decoder, dict, int], Any]:
    """Fraction, complex, range: a fixed number of numeric parts."""

    def handler(d: _Decoder, entry: dict, idx: int) -> Any:
        parts = d.items(entry, idx, size=size)
        for i, v in enumerate(parts):
            if type(v) not in types_:
                raise SnapshotDataError(f"objects[{idx}].v[{i}]", f"expected a number, got {_show(v)}")
        return d.call(idx, kind, *parts)

    return handler


def _dec_enum(d: _Decoder, entry: dict, idx: int) -> Enum:
    cls = d.cls(entry, idx, _ENUM)
    if "n" in entry:
        member = cls.__members__.get(d.field(entry, idx, "n", str, "a member name"))
        if member is None:
            raise SnapshotDataError(f"objects[{idx}].n", f"{cls.__qualname__} has no member {entry['n']!r}")
        return member
    if not issubclass(cls, Flag):
        raise SnapshotDataError(f"objects[{idx}]", f"expected a member name 'n' for {cls.__qualname__}")
    return d.call(idx, cls, d.val(entry.get("v"), idx))


def _dec_model(d: _Decoder, entry: dict, idx: int) -> BaseModel:
    cls = d.cls(entry, idx, _MODEL)
    names = _model_fields(cls)
    obj = d.built[idx] = d.call(idx, cls.__new__, cls)
    state: dict = {}
    fields_set = d.field(entry, idx, "s", list, "a list of field names")
    if not all(type(name) is str for name in fields_set):
        raise SnapshotDataError(f"objects[{idx}].s", f"expected field names, got {_show(fields_set)}")
    fields_set = set(fields_set)
    if "x" in entry and cls.model_config.get("extra") != "allow":
        raise SnapshotDataError(f"objects[{idx}].x", f"{cls.__qualname__} does not allow extra fields")
    setattr_ = object.__setattr__
    setattr_(obj, "__dict__", state)
    setattr_(obj, "__pydantic_fields_set__", fields_set)
    setattr_(obj, "__pydantic_extra__", None if "x" not in entry else d.fill({}, entry, idx, "x"))
    setattr_(obj, "__pydantic_private__", None)
    if "p" in entry:
        setattr_(obj, "__pydantic_private__", d.fill({}, entry, idx, "p", cls.__private_attributes__))
    d.fill(state, entry, idx, "v", names)
    if len(state) != len(names):
        raise SnapshotDataError(f"objects[{idx}].v", f"missing fields {sorted(names - state.keys())}")
    if not fields_set <= names | (obj.__pydantic_extra__ or {}).keys():
        raise SnapshotDataError(f"objects[{idx}].s", f"unknown names {sorted(fields_set - names)}")
    return obj


def _dec_dataclass(d: _Decoder, entry: dict, idx: int) -> Any:
    cls = d.cls(entry, idx, _DATACLASS)
    obj = d.built[idx] = d.call(idx, object.__new__, cls)
    for name, value in d.fill({}, entry, idx, "v", _dataclass_fields(cls)).items():
        object.__setattr__(obj, name, value)
    if "a" in entry:
        if not hasattr(obj, "__dict__"):
            raise SnapshotDataError(f"objects[{idx}].a", f"{cls.__qualname__} instances have no __dict__")
        d.fill(obj.__dict__, entry, idx, "a")
    return obj


def _dec_exception(d: _Decoder, entry: dict, idx: int) -> BaseException:
    cls = d.cls(entry, idx, _EXCEPTION)
    args = d.items(entry, idx, "a")
    if cls.__module__ == "builtins":
        keywords = d.fill({}, entry, idx, "k") if "k" in entry else {}
        if issubclass(cls, OSError) and keywords:
            if len(args) != 2 or not keywords.keys() <= {"filename", "filename2"}:
                raise SnapshotDataError(f"objects[{idx}].k", "expected filename(s) with (errno, strerror) args")
            args = [*args, keywords.get("filename"), None, keywords.get("filename2")]
            keywords = {}
        obj = d.call(idx, cls, *args, **keywords)
    else:  # a user class: no __init__, like dataclasses; attributes come back through __dict__
        obj = d.call(idx, cls.__new__, cls, *args)
        obj.args = tuple(args)
    if type(d.built[idx]) is not _Mark:
        return d.built[idx]  # built inside a cycle through its args
    d.built[idx] = obj
    if "d" in entry:
        d.fill(obj.__dict__, entry, idx, "d")
    for name, attr in (("ca", "__cause__"), ("cx", "__context__")):
        if name in entry:
            value = d.val(entry[name], idx, name)
            if not isinstance(value, BaseException):
                raise SnapshotDataError(f"objects[{idx}].{name}", f"expected an exception, got {_show(value)}")
            setattr(obj, attr, value)
    obj.__suppress_context__ = d.field(entry, idx, "sc", bool, "true") if "sc" in entry else False
    return obj


def _dec_seq_iter(reverse: bool) -> Callable[[_Decoder, dict, int], Any]:
    def handler(d: _Decoder, entry: dict, idx: int) -> Any:
        state = d.items(entry, idx)
        source = state[0] if state else None
        if len(state) > 2 or not isinstance(source, _ITER_SOURCES) or (reverse and type(source) is range):
            raise SnapshotDataError(f"objects[{idx}].v", "expected [sequence] or [sequence, position]")
        it = d.call(idx, reversed if reverse else iter, state[0])
        if len(state) == 2:
            if type(state[1]) is not int:
                raise SnapshotDataError(f"objects[{idx}].v[1]", f"expected a position, got {_show(state[1])}")
            d.call(idx, it.__setstate__, state[1])
        return it

    return handler


def _dec_reduced(kind: Callable, arity: tuple[int, ...]) -> Callable[[_Decoder, dict, int], Any]:
    """enumerate, zip, count, repeat: call the builtin with the decoded arguments."""

    def handler(d: _Decoder, entry: dict, idx: int) -> Any:
        args = d.items(entry, idx)
        if arity and len(args) not in arity:
            raise SnapshotDataError(f"objects[{idx}].v", f"expected {' or '.join(map(str, arity))} items")
        if "s" in entry:
            return d.call(idx, kind, *args, strict=d.field(entry, idx, "s", bool, "true"))
        return d.call(idx, kind, *args)

    return handler


def _dec_chain(d: _Decoder, entry: dict, idx: int) -> Any:
    state = d.items(entry, idx)
    chain = itertools.chain()
    if state:
        d.call(idx, chain.__setstate__, tuple(state))
    return chain


def _dec_mapped(kind: type) -> Callable[[_Decoder, dict, int], Any]:
    def handler(d: _Decoder, entry: dict, idx: int) -> Any:
        name = entry.get("f")
        if not ((name is None and kind is filter) or (type(name) is str and name in _SAFE_FUNCS)):
            raise SnapshotDataError(f"objects[{idx}].f", f"not a function that may travel: {_show(name)}")
        return d.call(idx, kind, _SAFE_FUNCS.get(name), *d.items(entry, idx))

    return handler


_INTS = (int,)
_REALS = (int, float)
_DECODERS: dict[str, Callable[[_Decoder, dict, int], Any]] = {
    "l": _dec_list,
    "o": _dec_strdict,
    "d": _dec_pairs,
    "u": lambda d, entry, idx: tuple(d.items(entry, idx)),
    "s": _dec_set,
    "fs": lambda d, entry, idx: d.call(idx, frozenset, d.items(entry, idx)),
    "i": lambda d, entry, idx: d.call(idx, int, _text(d, entry, idx), 16),
    "b": _dec_bytes(bytes),
    "ba": _dec_bytes(bytearray),
    "dt": _dec_clock(datetime),
    "tm": _dec_clock(time),
    "da": lambda d, entry, idx: d.call(idx, date.fromisoformat, _text(d, entry, idx)),
    "td": lambda d, entry, idx: d.call(idx, timedelta, *_ints(d, entry, idx, 3)),
    "tz": _dec_timezone,
    "zi": lambda d, entry, idx: d.call(idx, ZoneInfo, _text(d, entry, idx)),
    "dec": lambda d, entry, idx: d.call(idx, Decimal, _text(d, entry, idx)),
    "uu": lambda d, entry, idx: d.call(idx, uuid.UUID, hex=_text(d, entry, idx)),
    "fr": _dec_number(Fraction, 2, _INTS),
    "c": _dec_number(complex, 2, _REALS),
    "rg": _dec_number(range, 3, _INTS),
    "e": _dec_enum,
    "m": _dec_model,
    "dc": _dec_dataclass,
    "x": _dec_exception,
    "I": _dec_seq_iter(False),
    "R": _dec_seq_iter(True),
    "en": _dec_reduced(enumerate, (2,)),
    "zp": _dec_reduced(zip, ()),
    "cn": _dec_reduced(itertools.count, (1, 2)),
    "rp": _dec_reduced(itertools.repeat, (1, 2)),
    "ch": _dec_chain,
    "mp": _dec_mapped(map),
    "fl": _dec_mapped(filter),
}


def decode(data: Any, *, allowed_modules: frozenset[str], extension: DecodeExtension | None = None) -> dict[str, Any]:
    """Rebuild the roots from what `encode` made (after any JSON round trip); see the module docstring."""
    if type(data) is not dict or data.keys() != {"roots", "objects"}:
        raise SnapshotDataError("data", f'expected {{"roots": {{...}}, "objects": [...]}}, got {_show(data)}')
    roots, objects = data["roots"], data["objects"]
    if type(roots) is not dict:
        raise SnapshotDataError("roots", f"expected an object, got {_show(roots)}")
    if type(objects) is not list:
        raise SnapshotDataError("objects", f"expected a list, got {_show(objects)}")
    d = _Decoder(objects, frozenset(allowed_modules), extension)
    try:
        # Children follow their parents in the table, so building from the end needs almost no recursion.
        for idx in range(d.size - 1, -1, -1):
            if d.built[idx] is _TODO:
                d.build(idx)
        return {name: d.val(x, None, None, name) for name, x in roots.items()}
    except RecursionError:
        raise SnapshotDataError("objects", "references nested too deeply to rebuild") from None
