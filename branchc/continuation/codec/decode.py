"""The JSON object graph back to values, trusting nothing in it (see codec/__init__.py)."""

from __future__ import annotations

import binascii
import dataclasses
import itertools
import math
import os
import re
import sys
import uuid
import warnings
import weakref
from collections import Counter
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
    DEFAULT_LIMITS,
    KEY_HINT,
    ClassResolver,
    DecodeExtension,
    DecodeLimits,
    _dataclass_fields,
    _exception_args_problem,
    _flag_problem,
    _fmt,
    _hidden_method,
    _lookup,
    _model_fields,
    _not_an_exception,
    _over,
    _show,
    finalizer,
    key_problem,
    plain_class,
    saved_module,
    slot_members,
)

__all__ = ["DecodeLimits", "decode"]


class _Mark:
    """Table slots not built yet: TODO, BUSY (an immutable under construction), AGAIN (rebuilt in a cycle)."""


_TODO, _BUSY, _AGAIN = _Mark(), _Mark(), _Mark()
_SCALARS = frozenset({str, int, float, bool, type(None)})
# Types whose hash looks at no other decoded value (a tuple's hashes its items, every time).
_FLAT_HASH = _SCALARS | {bytes, bytearray, complex, Decimal, Fraction, uuid.UUID, range, frozenset}
_FLAT_HASH |= {date, datetime, time, timedelta, timezone, ZoneInfo}
# str hashes are salted per process (unless PYTHONHASHSEED=0): data cannot make them collide.
_SALTED = frozenset({str, bytes}) if sys.flags.hash_randomization else frozenset()
_NO_TYPES: frozenset[type] = frozenset()


class _Kind(NamedTuple):
    """What a class named in the data must be, for the tag that names it."""

    name: str
    test: Callable[[type], bool]


_ENUM = _Kind("an Enum", lambda c: issubclass(c, Enum))
_MODEL = _Kind("a pydantic model", lambda c: issubclass(c, BaseModel))
_DATACLASS = _Kind("a dataclass", lambda c: dataclasses.is_dataclass(c) and c.__new__ is object.__new__)
_EXCEPTION = _Kind("an exception", lambda c: issubclass(c, BaseException))
_PLAIN = _Kind("a plain class (no __new__, builtin base or pickling hook of its own)", plain_class)


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
    __slots__ = (
        "base",
        "built",
        "class_refs",
        "classes",
        "count",
        "depth",
        "extension",
        "heights",
        "instances",
        "level",
        "limits",
        "max_depth",
        "max_values",
        "models",
        "nodes",
        "objects",
        "peak",
        "resolve",
        "shapes",
        "size",
        "val",
        "work",
    )

    def __init__(
        self,
        objects: list,
        resolve: ClassResolver,
        extension: DecodeExtension | None,
        limits: DecodeLimits,
        class_refs: list[str] = (),  # type: ignore[assignment]
        shapes: list[tuple[str, ...]] = (),  # type: ignore[assignment]
    ) -> None:
        self.objects = objects
        self.class_refs = class_refs  # the document's "classes" table (checked: strings)
        self.shapes = shapes  # its "shapes" table (checked: tuples of distinct strings)
        self.size = len(objects)
        self.built: list[Any] = [_TODO] * self.size
        self.heights: list[int] = [0] * self.size  # how deep each table entry nests, once built
        self.resolve = resolve
        self.extension = extension
        self.classes: dict[tuple[int, _Kind], type] = {}
        self.depth = 0  # table entries under construction
        self.nodes: dict[int, Any] = {}  # id(JSON node) -> its container, while depth > 0
        self.limits = limits
        self.max_depth = limits.max_depth
        self.max_values = limits.max_values
        self.count = 0  # values decoded (DecodeLimits.max_values)
        self.level = 0  # how deep the value being decoded is
        self.peak = 0  # the deepest level reached (through references too) since `ref` reset it
        self.instances: frozenset[type] = _NO_TYPES  # dataclasses and models decoded (their hash reads fields)
        self.work: dict[int, tuple] | None = None  # id(tuple or instance) -> (values hashing it visits, it)
        # (class, shape, fields_set) indexes of a model entry without extra or private -> what _dec_model
        # checked about them once: (class, field names, fields_set, values charged)
        self.models: dict[tuple[int, int, int], tuple[type, tuple[str, ...], tuple[str, ...], int]] = {}
        self.val = self.value  # one bound method, handed to handlers
        self.base: list | None = None  # BaseExceptions that are not Exceptions met (None: they are refused)

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
            handler = None
        elif t is list and x and type(x[0]) is str:
            handler = _DECODERS.get(x[0])
            if handler is None:
                raise SnapshotDataError(_fmt((path, 0)), f"unknown tag {_show(x[0])}")
        elif t is list and len(x) == 1:
            return self.ref(x[0], path, slot)
        else:
            raise SnapshotDataError(_fmt(path), f"expected a JSON scalar, object or tagged array, got {_show(x)}")
        level = self.level + 1
        self.count += len(x)
        if level > self.max_depth or self.count > self.max_values:
            raise self.over(path, level)
        if level > self.peak:
            self.peak = level
        self.level = level
        try:
            if handler is not None:
                return handler(self, x, path, slot)
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
        finally:
            self.level = level - 1

    def over(self, path: Any, level: int) -> SnapshotDataError:
        if level > self.max_depth:
            return _over(path, f"nested more than {self.max_depth:,} deep", self.limits, "max_depth")
        return _over(path, f"more than {self.max_values:,} values", self.limits, "max_values")

    def charge(self, count: int, path: Any) -> None:
        """Count values decoded (or visited by a hash) outside `value`."""
        self.count += count
        if self.count > self.max_values:
            raise self.over(path, 0)

    def ref(self, n: Any, path: Any, slot: int | None) -> Any:
        if slot is not None or type(n) is not int or not 0 <= n < self.size:
            raise SnapshotDataError(_fmt(path), f"expected a reference to one of {self.size} objects, got {_show(n)}")
        obj = self.built[n]
        if type(obj) is not _Mark:
            # Shared values nest as deep as they did where they were built: a chain of references to
            # entries built one after the other must not nest deeper than a chain written inline could.
            reach = self.level + self.heights[n]
            if reach > self.peak:
                if reach > self.max_depth:
                    raise _over(path, f"nested more than {self.max_depth:,} deep", self.limits, "max_depth")
                self.peak = reach
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
        outer, start = self.peak, self.level
        self.peak = start
        handler = _DECODERS.get(entry[0]) if type(entry) is list and entry and type(entry[0]) is str else None
        if handler is None or id(entry) in self.nodes:
            obj = self.val(entry, ("objects", n), n)
        else:  # self.val(entry, ...), inline: a history's table is thousands of models
            level = start + 1
            self.count += len(entry)
            if level > self.max_depth or self.count > self.max_values:
                raise self.over(("objects", n), level)
            self.peak = self.level = level
            try:
                obj = handler(self, entry, ("objects", n), n)
            finally:
                self.level = start
        self.heights[n] = max(self.heights[n], self.peak - start)
        if outer > self.peak:
            self.peak = outer
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
        built, size = self.built, self.size
        for i, v in enumerate(out):
            if type(v) in _SCALARS:
                continue
            if type(v) is list and len(v) == 1 and type(v[0]) is int:  # a reference (never in `nodes`)
                n = v[0]
                if 0 <= n < size:
                    obj = built[n]
                    if type(obj) is not _Mark:  # self.ref(n, ...), inline: a history refers to thousands
                        reach = self.level + self.heights[n]
                        if reach > self.peak:
                            if reach > self.max_depth:
                                raise self.over((path, i + start), reach)
                            self.peak = reach
                        out[i] = obj
                        continue
                out[i] = self.ref(n, (path, i + start), None)
                continue
            out[i] = val(v, (path, i + start))
        return out

    def names(self, src: Any, path: Any) -> tuple[str, ...]:
        """The field names of a payload ``[shape, value, ...]``: its entry in the "shapes" table."""
        if type(src) is not list or not src:
            raise SnapshotDataError(_fmt(path), f"expected [shape, value, ...], got {_show(src)}")
        n = src[0]
        if type(n) is not int or not 0 <= n < len(self.shapes):
            raise SnapshotDataError(
                _fmt((path, 0)), f"expected an index into the {len(self.shapes)} shapes, got {_show(n)}"
            )
        names = self.shapes[n]
        if len(src) != len(names) + 1:
            problem = f"shapes[{n}] names {len(names)} fields, but {len(src) - 1} values follow"
            raise SnapshotDataError(_fmt(path), problem)
        return names

    def fill(self, out: dict, src: Any, path: Any, allowed: Any = None) -> dict:
        """Decode a payload ``[shape, value, ...]`` of named values into `out` (registered first, so
        cycles see it); `allowed`, when given, holds the names it may have."""
        names = self.names(src, path)
        self.charge(len(names), path)
        val = self.val
        for k, v in zip(names, src[1:], strict=True):
            if allowed is not None and k not in allowed:
                raise SnapshotDataError(_fmt(path), f"unexpected name {_show(k)}")
            out[k] = v if type(v) in _SCALARS else val(v, (path, k))
        return out

    def hashable(self, keys: list, path: Any, where: Callable[[int], Any], what: str) -> None:
        """Refuse the keys of a dict (items of a set) about to be built, when building it would take
        more than linear time: many keys whose hashes are alike (hash flooding: ints, floats,
        tuples, ... hash alike by design, without a per-process salt as str has), or keys whose
        hashing visits values many times over (a tuple of a tuple of ..., shared, is hashed whole
        each time). `path` is the container's, `where(i)` the path of key i."""
        kinds = set(map(type, keys))
        if kinds <= _SALTED:
            return
        check = keys if kinds.isdisjoint(_SALTED) else [k for k in keys if type(k) not in _SALTED]
        if not kinds <= _FLAT_HASH:
            for i, k in enumerate(keys):  # no code of the program's classes runs to hash or compare them
                if type(k) not in _FLAT_HASH:
                    found = key_problem(k, _state)
                    if found is not None:
                        problem = f"hashing it runs code of its own: {found[1]}; {KEY_HINT}"
                        raise SnapshotDataError(_fmt(where(i)), problem)
            if self.size:  # parts are shared only through the table
                self.hash_work([k for k in check if type(k) not in _FLAT_HASH], path)
        try:
            hashes = set(map(hash, check))
        except Exception:
            for i, k in enumerate(keys):
                try:
                    hash(k)
                except Exception as error:
                    raise _refused(where(i), error) from None
            raise
        if len(check) - len(hashes) < self.limits.max_same_hash:
            return  # no hash can be shared by more than max_same_hash keys
        worst, many = max(Counter(map(hash, check)).items(), key=lambda item: item[1])
        if many > self.limits.max_same_hash:
            first = next(k for k in check if hash(k) == worst)
            what = f"{many:,} {what} hash alike (like {_show(first)}), which makes building it quadratic"
            raise _over(path, what, self.limits, "max_same_hash")

    def hash_work(self, keys: list, path: Any) -> None:
        """Count the values that hashing these keys visits (memoized per object, so linear here)."""
        if self.work is None:
            self.work = {}
        work = self.work
        memo = work.get
        instances = self.instances

        def visits(x: Any) -> int:
            parts: Any
            if type(x) is tuple:
                parts = x
            elif type(x) in instances:
                parts = _state(x)
            else:
                return 1
            known = memo(id(x))
            if known is not None:
                return known[0]
            work[id(x)] = (1, x)  # on a cycle back to itself: its hash never ends (RecursionError)
            n = 1
            for v in parts:
                n += 1 if type(v) in _FLAT_HASH else visits(v)
            work[id(x)] = (n, x)  # x kept alive: no other object gets its id meanwhile
            return n

        self.charge(sum(map(visits, keys)), path)

    def repeated(self, keys: list, where: Callable[[int], Any], what: str) -> SnapshotDataError:
        """The error for a dict or set built of fewer keys than given: a key came twice."""
        seen: set = set()
        i = 0
        for i, k in enumerate(keys):  # noqa: B007 (i is the place of the repeated key)
            if k in seen:
                break
            seen.add(k)
        return SnapshotDataError(_fmt(where(i)), f"{what} {_show(keys[i])} again (a snapshot never repeats one)")

    def cls(self, n: Any, path: Any, kind: _Kind) -> type:
        """Resolve an index into the "classes" table, whose entry is "module:qualname", to a class of
        `kind`: a builtin exception, or what the resolver allows (it imports what it must; the codec
        imports nothing)."""
        found = self.classes.get((n, kind)) if type(n) is int else None
        if found is not None:
            return found
        if type(n) is not int or not 0 <= n < len(self.class_refs):
            raise SnapshotDataError(
                _fmt(path), f"expected an index into the {len(self.class_refs)} classes, got {_show(n)}"
            )
        found = self.classes[(n, kind)] = class_for(self.class_refs[n], kind, self.resolve, path)
        return found


def class_for(ref: str, kind: _Kind, resolve: ClassResolver, path: Any) -> type:
    """The class "module:qualname" names, of `kind` (see `_Decoder.cls`); SnapshotDataError at `path`
    when the resolver refuses it or it is not a `kind` defined there."""
    if ref.count(":") != 1:
        raise SnapshotDataError(_fmt(path), f'expected "module:qualname", got {_show(ref)}')
    module, qualname = ref.split(":")
    if module == "builtins" and kind is _EXCEPTION:
        found = _lookup(sys.modules["builtins"], qualname)
    else:
        try:
            found = resolve(ref)
        except (LookupError, ValueError, ImportError) as error:  # the resolver's refusal, as it says it
            raise SnapshotDataError(_fmt(path), str(error)) from None
    checked = _CHECKED.get((ref, kind))  # what passed these checks before in this process, if anything
    if checked is None or checked is not found:
        if not (
            isinstance(found, type)
            and saved_module(found.__module__) == module
            and found.__qualname__ == qualname
            and kind.test(found)
        ):
            raise SnapshotDataError(_fmt(path), f"{ref} is not {kind.name} defined there")
        if finalizer(found):
            raise SnapshotDataError(_fmt(path), f"{ref} has a __del__, which would run with the snapshot's data")
        _CHECKED[(ref, kind)] = found
    return found


#: ("module:qualname", kind) -> the class the resolver gave for it, once it passed the checks of
#: `cls` (its name, kind and no __del__): a class, not its instances, so checked once per process
_CHECKED: weakref.WeakValueDictionary[tuple[str, _Kind], type] = weakref.WeakValueDictionary()


def _state(obj: Any) -> list:
    """The attribute values of a dataclass or model instance, read without running its code."""
    try:
        values = list(object.__getattribute__(obj, "__dict__").values())
    except AttributeError:
        values = []
    for c in type(obj).__mro__:
        slots = c.__dict__.get("__slots__", ())
        for name in (slots,) if type(slots) is str else slots:
            slot = c.__dict__.get(name)
            if type(slot) is _MEMBER:
                try:
                    values.append(slot.__get__(obj, type(obj)))
                except AttributeError:
                    pass
    return values


_MEMBER = type(BaseException.__suppress_context__)


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
    text = str(error)  # the message of a builtin's error: it may quote a long input
    text = text if len(text) <= 200 else text[:197] + "..."
    return SnapshotDataError(_fmt(path), f"cannot restore: {type(error).__name__}: {text}")


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
                out[i] = v.copy()  # one value for max_values: a copy no bigger than the data
                continue
        elif t is list and len(v) == 1 and type(v[0]) is int:  # a reference: what val() would do with it
            out[i] = d.ref(v[0], (path, i + 1), None)
            continue
        out[i] = val(v, (path, i + 1))
    return out


def _dec_pairs(d: _Decoder, x: list, path: Any, slot: int | None) -> dict:
    out = d.shell(x, slot, {})
    flat = d.items(x, path, 1)
    if len(flat) % 2:
        raise SnapshotDataError(_fmt(path), "expected key, value pairs (an odd length)")
    keys = flat[::2]
    d.hashable(keys, path, lambda i: (path, 2 * i + 1), "keys")
    _call(path, out.update, zip(keys, flat[1::2], strict=True))
    if len(out) != len(keys):
        raise d.repeated(keys, lambda i: (path, 2 * i + 1), "the key")
    return out


def _dec_set(d: _Decoder, x: list, path: Any, slot: int | None) -> set:
    out = d.shell(x, slot, set())
    items = d.items(x, path, 1)
    d.hashable(items, path, lambda i: path, "items")
    _call(path, out.update, items)
    if len(out) != len(items):
        raise d.repeated(items, lambda i: (path, i + 1), "the item")
    return out


def _dec_frozenset(d: _Decoder, x: list, path: Any, slot: int | None) -> frozenset:
    items = d.items(x, path, 1)
    d.hashable(items, path, lambda i: path, "items")
    out = _call(path, frozenset, items)
    if len(out) != len(items):
        raise d.repeated(items, lambda i: (path, i + 1), "the item")
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


_TEXT_PART = _parts(_TEXT)
_FRACTION_PARTS = _parts(_INT, _INT)


def _b64decode(text: str) -> bytes:
    return binascii.a2b_base64(text, strict_mode=True)


def _dec_int(d: _Decoder, x: list, path: Any, slot: int | None) -> int:
    """An int too big for JSON, in hex: up to DecodeLimits.max_int_bits (checked before it is parsed)."""
    (text,) = _TEXT_PART(d, x, path)
    bits = d.limits.max_int_bits
    if len(text) > bits // 4 + 2:
        raise _over((path, 1), f"an int of {len(text):,} hex digits", d.limits, "max_int_bits")
    number = _call(path, int, text, 16)
    if number.bit_length() > bits:
        raise _over((path, 1), f"an int of {number.bit_length():,} bits", d.limits, "max_int_bits")
    return number


def _dec_fraction(d: _Decoder, x: list, path: Any, slot: int | None) -> Fraction:
    """Fraction(n, d) reduces by their gcd, which takes quadratic time in their size: bounded here
    (they may be ints inline when the data did not come through JSON)."""
    numerator, denominator = _FRACTION_PARTS(d, x, path)
    for i, part in ((1, numerator), (2, denominator)):
        if part.bit_length() > d.limits.max_int_bits:
            raise _over((path, i), f"an int of {part.bit_length():,} bits", d.limits, "max_int_bits")
    return _call(path, Fraction, numerator, denominator)


# ISO texts are short: a long one is refused before it is parsed (and before it is quoted in an error).
_MAX_ISO = 64


def _iso_text(text: str, path: Any) -> str:
    if len(text) > _MAX_ISO:
        raise SnapshotDataError(_fmt(path), f"expected ISO text, got {len(text):,} characters")
    return text


def _dec_clock(kind: type) -> Callable:
    parts = _parts(_TEXT, ((tzinfo, type(None)), "a time zone"), ((int,), "0 or 1"), optional=2)

    def handler(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
        values = parts(d, x, path)
        text, zone, fold = values + [None, 0][len(values) - 1 :]  # the defaults of what is missing
        naive = _call((path, 1), kind.fromisoformat, _iso_text(text, (path, 1)))
        if naive.tzinfo is not None:
            raise SnapshotDataError(_fmt((path, 1)), "expected ISO text without an offset (the zone comes next)")
        return _call(path, naive.replace, tzinfo=zone, fold=fold)

    return handler


def _dec_date(d: _Decoder, x: list, path: Any, slot: int | None) -> date:
    (text,) = _TEXT_PART(d, x, path)
    return _call(path, date.fromisoformat, _iso_text(text, (path, 1)))


_TIMEZONE_PARTS = _parts(_INT, _INT, _TEXT, optional=1)


def _dec_timezone(d: _Decoder, x: list, path: Any, slot: int | None) -> timezone:
    seconds, micros, *name = _TIMEZONE_PARTS(d, x, path)
    return _call(path, timezone, _call(path, timedelta, seconds=seconds, microseconds=micros), *name)


# A zone key is a relative path of plain names ("America/New_York"): no "..", no "/" first, no dots.
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")


def _dec_zoneinfo(d: _Decoder, x: list, path: Any, slot: int | None) -> ZoneInfo:
    """A zone from the system's tz files (ZoneInfo would import the tzdata package for one that is not)."""
    (key,) = _TEXT_PART(d, x, path)
    if len(key) > 255 or not _ZONE_KEY.fullmatch(key):
        raise SnapshotDataError(_fmt((path, 1)), f"not a time zone key: {_show(key)}")
    if not any(os.path.isfile(os.path.join(root, key)) for root in TZPATH):
        raise SnapshotDataError(_fmt((path, 1)), f"time zone {_show(key)} is not installed here (no zone file)")
    return _call(path, ZoneInfo, key)


def _dec_enum(d: _Decoder, x: list, path: Any, slot: int | None) -> Enum:
    _shape(x, path, 2, 3)
    cls = d.cls(x[1], (path, 1), _ENUM)
    name = _want(x[2], (str, type(None)), path, 2, "a member name or null")
    if name is not None and len(x) == 3:
        member = cls.__members__.get(name)
        if member is None:
            raise SnapshotDataError(_fmt((path, 2)), f"{cls.__qualname__} has no member {_show(name)}")
        return member
    if name is not None or len(x) != 4 or not issubclass(cls, Flag):
        raise SnapshotDataError(_fmt(path), "expected [tag, class, name] or a Flag's [tag, class, null, value]")
    value = d.val(x[3], (path, 3))
    problem = _flag_problem(cls, value)  # no other value reaches its _missing_ hook, or stays in its cache
    if problem is not None:
        raise SnapshotDataError(_fmt((path, 3)), problem)
    return _call(path, cls, value)


_new = object.__new__
_setattr = object.__setattr__


def _dec_model(d: _Decoder, x: list, path: Any, slot: int | None) -> BaseModel:
    """The pydantic state as it was (no validation, no __init__, no model_post_init)."""
    if len(x) == 4:  # no extra, no private: perhaps a kind of entry checked already (most of a history)
        payload, c, f = x[2], x[1], x[3]
        if type(payload) is list and payload and type(c) is int and type(f) is int and type(payload[0]) is int:
            plan = d.models.get((c, payload[0], f))
            if plan is not None:
                cls, names, fields_set, charged = plan
                if len(payload) == len(names) + 1 and d.count + charged <= d.max_values:
                    d.count += charged  # as the checks below count them
                    obj = _new(cls)
                    if slot is not None:  # d.shell(x, slot, obj), inline
                        d.built[slot] = obj
                    elif d.depth:
                        d.nodes[id(x)] = obj
                    state: dict = {}
                    _setattr(obj, "__dict__", state)
                    _setattr(obj, "__pydantic_fields_set__", set(fields_set))
                    _setattr(obj, "__pydantic_extra__", None)
                    _setattr(obj, "__pydantic_private__", None)
                    val = d.val
                    for k, v in zip(names, payload[1:], strict=True):  # d.fill(state, payload, ...), checked
                        state[k] = v if type(v) in _SCALARS else val(v, ((path, 2), k))
                    return obj
    return _check_model(d, x, path, slot)


def _check_model(d: _Decoder, x: list, path: Any, slot: int | None) -> BaseModel:
    _shape(x, path, 3, 5)
    cls = d.cls(x[1], (path, 1), _MODEL)
    if cls not in d.instances:
        d.instances |= {cls}
    names = _model_fields(cls)
    n = x[3]
    if type(n) is not int or not 0 <= n < len(d.shapes):
        raise SnapshotDataError(_fmt((path, 3)), f"expected an index into the {len(d.shapes)} shapes, got {_show(n)}")
    fields_set = d.shapes[n]
    extra, private = [*x[4:], None, None][:2]
    if extra is not None and cls.model_config.get("extra") != "allow":
        raise SnapshotDataError(_fmt((path, 4)), f"{cls.__qualname__} does not allow extra fields")
    d.charge(len(fields_set), (path, 3))
    obj = d.shell(x, slot, _call(path, object.__new__, cls))
    state: dict = {}
    fields = set(fields_set)
    setattr_ = object.__setattr__
    setattr_(obj, "__dict__", state)
    setattr_(obj, "__pydantic_fields_set__", fields)
    extra = None if extra is None else d.fill({}, extra, (path, 4))
    setattr_(obj, "__pydantic_extra__", extra)
    setattr_(obj, "__pydantic_private__", None)
    if private is not None:
        setattr_(obj, "__pydantic_private__", d.fill({}, private, (path, 5), cls.__private_attributes__))
    d.fill(state, x[2], (path, 2), names)
    defaulted = len(state) != len(names)
    if defaulted:
        _defaults(cls, names - state.keys(), state, path)
    known = names if extra is None else names | extra.keys()
    if not known.issuperset(fields):
        raise SnapshotDataError(_fmt((path, 3)), f"expected names of fields, got {_show(list(fields_set))}")
    if len(x) == 4 and private is None and not defaulted:  # the same class, shape and fields_set pass again
        shape = d.shapes[x[2][0]]
        d.models[(x[1], x[2][0], x[3])] = (cls, shape, fields_set, len(fields_set) + len(shape))
    return obj


_LITERALS = frozenset((str, int, float, bool, type(None)))


def _defaults(cls: type[BaseModel], missing: set[str], state: dict, path: Any) -> None:
    """Fields a snapshot lacks that have a literal default: a field added to the class since the value was saved
    (a run moving to a new build), given its default as validation would; any other missing field is refused."""
    fields = cls.model_fields
    lacking = sorted(
        name
        for name in missing
        if fields[name].default_factory is not None or type(fields[name].default) not in _LITERALS
    )
    if lacking:
        raise SnapshotDataError(_fmt((path, 2)), f"missing fields {lacking}")
    for name in missing:
        state[name] = fields[name].default


def _attributes(d: _Decoder, cls: type, src: Any, path: Any) -> dict:
    """Decode instance attributes that go to __dict__ as they are: none may hide a method of the
    class (an attribute named like a method is what calling that method would call)."""
    if type(src) is list and len(src) > 1:
        name = _hidden_method(cls, d.names(src, path))
        if name is not None:
            problem = f"an attribute that would hide the method {cls.__qualname__}.{name}"
            raise SnapshotDataError(_fmt((path, name)), problem)
    return d.fill({}, src, path)


def _dec_plain(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    """An instance of a plain class: made by object.__new__, its __dict__ and slots filled directly
    (no __init__, no __setattr__ of the class)."""
    _shape(x, path, 2, 3)
    cls = d.cls(x[1], (path, 1), _PLAIN)
    if cls not in d.instances:  # its __hash__ may read its attributes: count that work too
        d.instances |= {cls}
    obj = d.shell(x, slot, _call(path, object.__new__, cls))
    attributes = _attributes(d, cls, x[2], (path, 2))
    if attributes:
        try:
            object.__getattribute__(obj, "__dict__").update(attributes)
        except AttributeError:
            raise SnapshotDataError(_fmt((path, 2)), f"{cls.__qualname__} instances have no __dict__") from None
    if len(x) == 4:
        members = slot_members(cls)
        for name, value in d.fill({}, x[3], (path, 3), members).items():
            members[name].__set__(obj, value)
    return obj


def _dec_dataclass(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    """Fields set with object.__setattr__ (no __init__, no __post_init__, no __setattr__ of the class)."""
    _shape(x, path, 2, 3)
    cls = d.cls(x[1], (path, 1), _DATACLASS)
    if cls not in d.instances:
        d.instances |= {cls}
    obj = d.shell(x, slot, _call(path, object.__new__, cls))
    for name, value in d.fill({}, x[2], (path, 2), _dataclass_fields(cls)).items():
        object.__setattr__(obj, name, value)
    if len(x) == 4:
        try:
            state = object.__getattribute__(obj, "__dict__")
        except AttributeError:
            raise SnapshotDataError(_fmt((path, 3)), f"{cls.__qualname__} instances have no __dict__") from None
        state.update(_attributes(d, cls, x[3], (path, 3)))
    return obj


# BaseException's own descriptors: set through them, no __setattr__ of a user class runs.
_EXC_ARGS = BaseException.__dict__["args"]
_EXC_DICT = BaseException.__dict__["__dict__"]
_EXC_LINKS = ((4, BaseException.__dict__["__cause__"]), (5, BaseException.__dict__["__context__"]))
_EXC_SUPPRESS = BaseException.__dict__["__suppress_context__"]


def _builtin_base(cls: type) -> type:
    return next(c for c in cls.__mro__ if c.__module__ == "builtins")


def _dec_exception(d: _Decoder, x: list, path: Any, slot: int | None) -> Exception:
    """Only Exception subclasses (see _not_an_exception), unless the caller takes the others and
    checks where each sits (`base_exceptions`). A builtin class is called with its args
    (checked where its C code trusts them); a user class is made by its builtin base's __new__,
    with no __new__ or __init__ of its own, its attributes going back to __dict__ as they are."""
    _shape(x, path, 7)
    cls = d.cls(x[1], (path, 1), _EXCEPTION)
    not_exception = _not_an_exception(cls)
    if not_exception is not None and d.base is None:
        raise SnapshotDataError(_fmt((path, 1)), f"{not_exception}; only Exception subclasses travel")
    d.charge(len(_want(x[2], list, path, 2, "a list of args")), (path, 2))
    args = d.items(x[2], (path, 2), 0)
    keywords = d.fill({}, x[7], (path, 7))
    if cls.__module__ == "builtins":
        if issubclass(cls, OSError) and keywords:  # OSError(errno, strerror, filename, winerror, filename2)
            if len(args) != 2 or not keywords.keys() <= {"filename", "filename2"}:
                raise SnapshotDataError(_fmt((path, 7)), "expected filename(s) with args (errno, strerror)")
            args = [*args, keywords.get("filename"), None, keywords.get("filename2")]
            keywords = {}
        problem = _exception_args_problem(cls, args)
        if problem is not None:
            raise SnapshotDataError(_fmt((path, 2)), f"{cls.__qualname__} args: {problem}")
        obj = _call(path, cls, *args, **keywords)
    else:  # a user class: no __init__, like dataclasses; its attributes come back through __dict__
        if keywords:
            raise SnapshotDataError(_fmt((path, 7)), "keywords are for builtin exceptions only")
        obj = _call(path, _builtin_base(cls).__new__, cls, *args)
        _EXC_ARGS.__set__(obj, tuple(args))
    if type(obj) is not cls:  # OSError(2, ...) is a FileNotFoundError: the class named is the class restored
        problem = f"these args make a {type(obj).__qualname__}, not a {cls.__qualname__}"
        raise SnapshotDataError(_fmt((path, 2)), problem)
    published = d.late(x, slot, obj)
    if published is not obj:
        return published  # built already, inside a cycle through its args
    if not_exception is not None:
        d.base.append(obj)  # type: ignore[union-attr]  # the caller checks where it sits
    _EXC_DICT.__get__(obj).update(_attributes(d, cls, x[3], (path, 3)))
    for i, link in _EXC_LINKS:
        value = d.val(x[i], (path, i))
        if d.base is None and isinstance(value, BaseException) and _not_an_exception(type(value)) is not None:
            raise SnapshotDataError(_fmt((path, i)), f"expected an Exception or null, got {_show(value)}")
        _call((path, i), link.__set__, obj, value)
    _EXC_SUPPRESS.__set__(obj, _want(x[6], bool, path, 6, "true or false"))
    return obj


_DICT_ITER_PARTS = _parts((list, "a list of what is left"))
_SEQ_ITER_PARTS = _parts((_ITER_SOURCES, "a sequence"), _INT, optional=1)


def _dec_dict_iter(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    (left,) = _DICT_ITER_PARTS(d, x, path)
    where = (path, 1)
    if x[0] == "DV":
        return iter(dict(enumerate(left)).values())
    if x[0] == "DK":
        keys = left
    elif not all(type(item) is tuple and len(item) == 2 for item in left):
        raise SnapshotDataError(_fmt(where), "expected (key, value) pairs")
    else:
        keys = [key for key, _ in left]
    d.hashable(keys, path, lambda i: (where, i + 1), "keys")
    out = _call(path, dict.fromkeys, keys) if x[0] == "DK" else _call(path, dict, left)
    if len(out) != len(keys):
        raise d.repeated(keys, lambda i: (where, i + 1), "the key")
    return iter(out) if x[0] == "DK" else iter(out.items())


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


def _iterators(values: list, path: Any, start: int) -> list:
    """What enumerate, zip, map and filter run over are iterators (their __reduce__ gives nothing
    else): an object that is not one, but whose class defines __iter__ in Python (a model, say), is
    refused, so that making them calls no __iter__ but an iterator's own."""
    for i, value in enumerate(values):
        mro = type(value).__mro__
        if not any("__next__" in vars(c) for c in mro):
            if any("__iter__" in vars(c) for c in mro if c.__module__ != "builtins"):
                problem = f"expected an iterator, got a {type(value).__qualname__} (its __iter__ is not run)"
                raise SnapshotDataError(_fmt((path, i + start)), problem)
    return values


def _dec_enumerate(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 2)
    source, count = d.items(x, path, 1)
    _iterators([source], path, 1)
    _numbers([count], (int,), path, 2)
    return _call(path, enumerate, source, count)


# The numbers these builtins compute with: exact builtin types, so that no class's __index__ or __add__ runs.
_COUNTING = (int, float, complex, Decimal, Fraction)


def _numbers(values: list, kinds: tuple[type, ...], path: Any, first: int) -> None:
    for index, value in enumerate(values):
        if type(value) not in kinds:  # exact: a bool is no int here
            names = " or ".join(kind.__name__ for kind in kinds)
            raise SnapshotDataError(_fmt((path, first + index)), f"expected {names}, got {_show(value)}")


def _dec_count(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 1, 2)
    parts = d.items(x, path, 1)
    _numbers(parts, _COUNTING, path, 1)
    return _call(path, itertools.count, *parts)


def _dec_repeat(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 1, 2)
    value, *times = d.items(x, path, 1)
    _numbers(times, (int,), path, 2)
    return _call(path, itertools.repeat, value, *times)


def _dec_zip(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 1, math.inf)
    strict = _want(x[1], bool, path, 1, "true or false")
    return _call(path, zip, *_iterators(d.items(x, path, 2), path, 2), strict=strict)


def _dec_chain(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 0, 2)
    chain = itertools.chain()
    if len(x) > 1:
        state = tuple(d.items(x, path, 1))
        with warnings.catch_warnings():  # deprecated since 3.12, still there until 3.14
            warnings.simplefilter("ignore", DeprecationWarning)
            _call(path, chain.__setstate__, state)
    return chain


def _dec_mapped(d: _Decoder, x: list, path: Any, slot: int | None) -> Any:
    _shape(x, path, 2, math.inf)
    kind, name = (map, x[1]) if x[0] == "mp" else (filter, x[1])
    if not ((name is None and kind is filter) or (type(name) is str and name in _SAFE_FUNCS)):
        raise SnapshotDataError(_fmt((path, 1)), f"not a function that may travel: {_show(name)}")
    return _call(path, kind, _SAFE_FUNCS.get(name), *_iterators(d.items(x, path, 2), path, 2))


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
    "fs": _dec_frozenset,
    "f": _simple(_NONFINITE.__getitem__, _TEXT),
    "i": _dec_int,
    "b": _simple(_b64decode, _TEXT),
    "ba": _simple(lambda text: bytearray(_b64decode(text)), _TEXT),
    "dt": _dec_clock(datetime),
    "tm": _dec_clock(time),
    "da": _dec_date,
    "td": _simple(timedelta, _INT, _INT, _INT),
    "tz": _dec_timezone,
    "zi": _dec_zoneinfo,
    "dec": _simple(Decimal, _TEXT),
    "uu": _simple(lambda text: uuid.UUID(hex=text), _TEXT),
    "fr": _dec_fraction,
    "c": _simple(complex, _REAL, _REAL),
    "rg": _simple(range, _INT, _INT, _INT),
    "e": _dec_enum,
    "m": _dec_model,
    "dc": _dec_dataclass,
    "o": _dec_plain,
    "x": _dec_exception,
    "I": _dec_seq_iter,
    "R": _dec_seq_iter,
    "DK": _dec_dict_iter,
    "DV": _dec_dict_iter,
    "DI": _dec_dict_iter,
    "en": _dec_enumerate,
    "zp": _dec_zip,
    "cn": _dec_count,
    "rp": _dec_repeat,
    "ch": _dec_chain,
    "mp": _dec_mapped,
    "fl": _dec_mapped,
    "@": _dec_extension,
}


_GRAPH_FIELDS = frozenset({"roots", "objects"})
_TABLES = frozenset({"classes", "shapes"})


def _tables(data: dict, limits: DecodeLimits) -> tuple[list[str], list[tuple[str, ...]], int]:
    """The document's "classes" (strings) and "shapes" (lists of distinct strings), each optional;
    and how many values they hold (counted against max_values)."""
    classes, shapes = data.get("classes", []), data.get("shapes", [])
    if type(classes) is not list:
        raise SnapshotDataError("classes", f'expected a list of "module:qualname", got {_show(classes)}')
    for i, ref in enumerate(classes):
        if type(ref) is not str:
            raise SnapshotDataError(f"classes[{i}]", f'expected "module:qualname", got {_show(ref)}')
    if type(shapes) is not list:
        raise SnapshotDataError("shapes", f"expected a list of lists of names, got {_show(shapes)}")
    count = len(classes) + len(shapes)
    if count > limits.max_values:
        raise _over("data", f"more than {limits.max_values:,} values", limits, "max_values")
    out = []
    for i, names in enumerate(shapes):
        if type(names) is not list:
            raise SnapshotDataError(f"shapes[{i}]", f"expected a list of names, got {_show(names)}")
        count += len(names)
        if count > limits.max_values:
            raise _over(f"shapes[{i}]", f"more than {limits.max_values:,} values", limits, "max_values")
        for j, name in enumerate(names):
            if type(name) is not str:
                raise SnapshotDataError(f"shapes[{i}][{j}]", f"expected a name, got {_show(name)}")
        if len(set(names)) != len(names):
            raise SnapshotDataError(f"shapes[{i}]", f"a name comes twice in {_show(names)}")
        out.append(tuple(names))
    return classes, out, count


def decode(
    data: Any,
    *,
    classes: ClassResolver,
    extension: DecodeExtension | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
    base_exceptions: list | None = None,
) -> dict[str, Any]:
    """Rebuild the roots from what `encode` made (after any JSON round trip); see the module docstring.
    `classes(ref)` gives the class a "module:qualname" in the data names, or raises LookupError (see
    `from_modules`); `limits` bounds the work and memory that the data can ask for (see DecodeLimits).
    A BaseException that is not an Exception is refused, unless `base_exceptions` is a list: then it
    is rebuilt and listed there, for the caller to check where it sits before anything runs."""
    if type(data) is not dict or not _GRAPH_FIELDS <= data.keys() <= _GRAPH_FIELDS | _TABLES:
        expected = '{"classes": [...], "shapes": [...], "roots": {...}, "objects": [...]} (the tables optional)'
        raise SnapshotDataError("data", f"expected {expected}, got {_show(data)}")
    roots, objects = data["roots"], data["objects"]
    if type(roots) is not dict:
        raise SnapshotDataError("roots", f"expected an object, got {_show(roots)}")
    if type(objects) is not list:
        raise SnapshotDataError("objects", f"expected a list, got {_show(objects)}")
    if type(limits) is not DecodeLimits:
        raise TypeError(f"limits must be a DecodeLimits, got {type(limits).__name__}")
    class_refs, shapes, count = _tables(data, limits)
    d = _Decoder(objects, classes, extension, limits, class_refs, shapes)
    d.base = base_exceptions
    d.count = len(roots) + count
    try:
        out = {name: d.val(x, ("roots", name)) for name, x in roots.items()}
        for n in range(d.size):  # entries nothing referred to are still checked
            if d.built[n] is _TODO:
                d.ref(n, "objects", None)
    except RecursionError:
        limit = sys.getrecursionlimit()
        problem = f"nested too deeply to rebuild within Python's recursion limit ({limit}; see DecodeLimits.max_depth)"
        raise SnapshotDataError("data", problem) from None
    finally:
        del d.val  # a cycle through the decoder: broken, so it is freed now, not by the garbage collector
    return out
