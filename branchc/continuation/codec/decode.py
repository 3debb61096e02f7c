"""The JSON object graph back to values, trusting nothing in it (see codec/__init__.py)."""

from __future__ import annotations

import binascii
import dataclasses
import importlib
import itertools
import math
import os
import re
import sys
import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from enum import Enum, Flag
from fractions import Fraction
from typing import Any, NamedTuple
from zoneinfo import TZPATH, ZoneInfo

from pydantic import BaseModel

from ..errors import SnapshotDataError
from .common import (
    _ITER_SOURCES,
    _NONFINITE,
    _SAFE_FUNCS,
    _SEQUENCES,
    DecodeExtension,
    _dataclass_fields,
    _fmt,
    _lookup,
    _model_fields,
    _show,
)

__all__ = ["decode"]


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
