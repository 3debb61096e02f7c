"""Values to the JSON object graph (the format is described in codec/__init__.py)."""

from __future__ import annotations

import binascii
import dataclasses
import itertools
import sys
import uuid
import warnings
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import Enum, Flag
from fractions import Fraction
from functools import partial
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from ..errors import NotSerializableError
from .common import (
    _ATTR,
    _BIG,
    _EXC_KEYWORDS,
    _INLINE,
    _MODEL_FIELDS,
    _NEG_BIG,
    _PLAIN,
    _SAFE_NAMES,
    _SEQ_ITERATORS,
    DEFAULT_LIMITS,
    HASH_SAFE,
    KEY_HINT,
    Extension,
    _dataclass_fields,
    _exception_args_problem,
    _flag_problem,
    _fmt,
    _hidden_method,
    _lookup,
    _model_fields,
    _not_an_exception,
    _type_name,
    _why_not,
    finalizer,
    key_problem,
    plain_class,
    saved_module,
    slot_members,
    written_tables,
)

__all__ = ["BUILTIN_TYPES", "encode"]

_CLASS_REFS: dict[type, str] = {}


def _class_ref(e: _Encoder, t: type, path: Any) -> int:
    """The index in the document's "classes" table of the "module:qualname" of a class that a restore
    can find again by name (checked once per class), and that the encoder's class policy lets a
    snapshot name."""
    index = e.class_of.get(t)
    if index is not None:
        return index  # checked already in this encoding
    ref = _CLASS_REFS.get(t)
    if ref is None:
        if _lookup(sys.modules.get(t.__module__), t.__qualname__) is not t:
            hint = f"define {t.__qualname__} at module level so a restore can find it by name"
            raise NotSerializableError(_fmt(path), _type_name(t), hint)
        if finalizer(t):
            hint = f"{t.__qualname__} has a __del__, which a restored copy would run with the snapshot's data"
            raise NotSerializableError(_fmt(path), _type_name(t), hint)
        ref = _CLASS_REFS[t] = f"{saved_module(t.__module__)}:{t.__qualname__}"
    if e.classes is not None and t.__module__ != "builtins" and not e.classes(t):
        hint = (
            f"a snapshot names only classes defined at module level in the modules `branchc compile` compiled, "
            f"and branchc's own data types; {t.__qualname__} of {t.__module__} is neither: keep its data instead "
            f"(convert it before the yield), or define the class in a module of your build"
        )
        raise NotSerializableError(_fmt(path), _type_name(t), hint)
    index = e.class_index.get(ref)
    if index is None:
        index = e.class_index[ref] = len(e.class_index)
    e.class_of[t] = index
    return index


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
            elif type(v) is not list:  # a model, say: straight to leaf (the dict case fell through above)
                append(leaf(v, (path, len(out) - 1)))
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

    __slots__ = (
        "asks",
        "base",
        "class_index",
        "class_of",
        "classes",
        "declines",
        "enc",
        "extension",
        "keep",
        "memo",
        "owns",
        "seen",
        "shape_index",
        "shared",
    )

    def __init__(self, extension: Extension | None, optimistic: bool, classes: Any = None, base: Any = None) -> None:
        self.classes = classes  # (type) -> bool: may a snapshot name this class; None: any module-level one
        self.base = base  # a list: BaseExceptions that are not Exceptions are written and listed there; None: refused
        self.class_index: dict[str, int] = {}  # "module:qualname" -> its place in the "classes" table
        self.shape_index: dict[tuple[str, ...], int] = {}  # field names, in order -> its place in "shapes"
        self.memo: dict[int, Any] = {}  # id -> its JSON (written once, in place) or its table index
        self.shared: list[Any] = []  # the JSON of values met twice; becomes "objects"
        self.keep: list[Any] = []  # temporaries (the codec's and the extension's), so no id() is reused
        self.seen: list[int] = []  # optimistic pass: ids of the lists and dicts _tree wrote
        self.class_of: dict[type, int] = {}  # class -> its place in "classes", once the policy allowed it
        self.extension = extension
        self.declines = getattr(extension, "declines", ())
        self.owns = getattr(extension, "owns", None)  # (type) -> bool: may the extension own such a value
        self.asks: dict[type, bool] = {}  # type -> whether the extension is asked about its values
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
        elif self.asks.get(t, True) and self._asks(t):
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

    def _asks(self, t: type) -> bool:
        """Whether the extension is asked about values of type t (decided once per type)."""
        asks = self.asks.get(t)
        if asks is None:
            asks = self.asks[t] = (
                self.extension is not None
                and t not in _PLAIN
                and t not in self.declines
                and (self.owns is None or bool(self.owns(t)))
            )
        return asks

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

    def shape(self, names: Any) -> int:
        """The index in the document's "shapes" table of these field names, in this order."""
        key = tuple(names)
        index = self.shape_index.get(key)
        if index is None:
            index = self.shape_index[key] = len(self.shape_index)
        return index

    def fields(self, values: dict, path: Any) -> list:
        """A str-keyed mapping of attributes (a payload, never shared) as ``[shape, value, ...]``: the
        index of its names in the "shapes" table, then the values in that order."""
        enc = self.enc
        out = [self.shape(values)]
        out += [v if type(v) in _INLINE else enc(v, (path, k, _ATTR)) for k, v in values.items()]
        return out

    def tables(self) -> dict[str, list]:
        """The document's tables (each present only when not empty)."""
        return written_tables(self.class_index, self.shape_index)

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
    out.append(_class_ref(e, cls, path))
    if cls.__members__.get(x._name_) is not x:
        if not isinstance(x, Flag):
            raise NotSerializableError(_fmt(path), _type_name(cls), "an enum value that is not a member cannot travel")
        problem = _flag_problem(cls, x._value_)
        if problem is not None:
            raise NotSerializableError(
                _fmt(path), _type_name(cls), f"a restore takes combinations of members only: {problem}"
            )
        out.append(None)  # a combination of flags has no member name: its value follows
        out.append(e.enc(x._value_, (path, "value", _ATTR)))
    else:
        out.append(x._name_)


def _model(e: _Encoder, x: BaseModel, path: Any, out: list) -> None:
    """The pydantic state as it is (no dump, no validation): fields, fields_set, extra, private."""
    cls = type(x)
    out.append(_class_ref(e, cls, path))
    names = _MODEL_FIELDS.get(cls) or _model_fields(cls)
    state = x.__dict__
    if len(state) != len(names):  # other keys are cached_property values: left to recompute
        state = {k: v for k, v in state.items() if k in names}
    shapes = e.shape_index
    key = tuple(state)  # e.fields(state, path), inline: a history is thousands of models
    index = shapes.get(key)
    if index is None:
        index = shapes[key] = len(shapes)
    payload = [index]
    enc = e.enc
    for k, v in state.items():
        payload.append(v if type(v) in _INLINE else enc(v, (path, k, _ATTR)))
    out.append(payload)
    key = tuple(sorted(x.__pydantic_fields_set__))
    index = shapes.get(key)
    if index is None:
        index = shapes[key] = len(shapes)
    out.append(index)
    extra, private = getattr(x, "__pydantic_extra__", None), getattr(x, "__pydantic_private__", None)
    if extra is not None or private is not None:
        out.append(None if extra is None else e.fields(extra, path))
        out.append(None if private is None else e.fields(private, path))


def _hides_method(x: Any, names: Any, path: Any) -> None:
    """Refuse instance attributes that would hide a method (a restore refuses them: see decode)."""
    name = _hidden_method(type(x), names)
    if name is not None:
        hint = f"its attribute {name!r} hides the method of that name; rename the attribute"
        raise NotSerializableError(_fmt(path), _type_name(type(x)), hint)


def _dataclass(e: _Encoder, x: Any, path: Any, out: list) -> None:
    """Field values (slots or __dict__), then any other instance attributes; no __init__ on restore."""
    out.append(_class_ref(e, type(x), path))
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
        _hides_method(x, extra, path)
        out.append(e.fields(extra, path))


def _plain_object(e: _Encoder, x: Any, path: Any, out: list) -> None:
    """[cls, {attributes}, {slots}]: an instance of a plain class (a context manager, say), by its state."""
    out.append(_class_ref(e, type(x), path))
    try:
        attributes = dict(object.__getattribute__(x, "__dict__"))
    except AttributeError:
        attributes = {}
    _hides_method(x, attributes, path)
    slots = {}
    for name, member in slot_members(type(x)).items():
        try:
            slots[name] = member.__get__(x, type(x))
        except AttributeError:  # an unset slot stays unset
            pass
    e.keep.append(slots)
    out.append(e.fields(attributes, path))
    if slots:
        out.append(e.fields(slots, path))


def _exception(e: _Encoder, x: BaseException, path: Any, out: list) -> None:
    """[cls, [args], {attributes}, cause, context, suppress_context, {keywords}]; the traceback is dropped."""
    cls = type(x)
    out.append(_class_ref(e, cls, path))
    args: list = []
    e.items(x.args, (path, "args", _ATTR), args)
    keywords = {}
    if cls.__module__ == "builtins":
        problem = _exception_args_problem(cls, x.args)
        if problem is not None:
            raise NotSerializableError(_fmt(path), _type_name(cls), f"its args cannot be trusted on restore: {problem}")
        for base, names in _EXC_KEYWORDS:
            if isinstance(x, base):
                keywords = {k: getattr(x, k) for k in names if getattr(x, k) is not None}
    if x.__dict__:
        _hides_method(x, x.__dict__, path)
    out += [
        args,
        e.fields(x.__dict__, path),  # __notes__ is one of them
        e.enc(x.__cause__, (path, "__cause__", _ATTR)),
        e.enc(x.__context__, (path, "__context__", _ATTR)),
        x.__suppress_context__,
        e.fields(keywords, path),
    ]


def _base_exception(e: _Encoder, x: BaseException, path: Any, out: list) -> None:
    """SystemExit, KeyboardInterrupt, GeneratorExit, ...: refused (a restore refuses them too), unless
    the caller takes them (`base_exceptions`), to check where each sits."""
    if e.base is None:
        hint = f"{_not_an_exception(type(x))}; handle it before the yield, or keep only what you need of it"
        raise NotSerializableError(_fmt(path), _type_name(type(x)), hint)
    e.base.append(x)
    _exception(e, x, path, out)


def _big_int(e: _Encoder, x: int, path: Any, out: list) -> None:
    """An int too big for JSON (sys.int_max_str_digits) travels in hex, up to what a restore takes."""
    if x.bit_length() > DEFAULT_LIMITS.max_int_bits:
        hint = f"it has {x.bit_length():,} bits, and a restore takes up to {DEFAULT_LIMITS.max_int_bits:,}"
        raise NotSerializableError(_fmt(path), "big int", f"{hint} (DecodeLimits.max_int_bits); make it bytes or str")
    out.append(format(x, "x"))


def _reduce(e: _Encoder, x: Any, path: Any) -> tuple:
    """A builtin iterator's own __reduce__; refused where the type no longer has one (Python 3.14)."""
    if type(x).__reduce__ is object.__reduce__:
        hint = "this Python cannot read its position; finish it before the yield"
        raise NotSerializableError(_fmt(path), _type_name(type(x)), hint)
    if type(x).__module__ == "itertools":  # deprecated since 3.12, still there until 3.14
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            reduced = x.__reduce__()
    else:
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
        if out[0] != "DV":  # a restore builds a dict of the keys left
            _check_keys(source if out[0] == "DK" else [pair[0] for pair in source], (path, "source", "<{}>"), "[{}]")
    out.append(e.enc(source, (path, "source", "<{}>")))
    # Since Python 3.12 a range iterator reduces to the range of what is left and no position (None):
    # written as position 0 of that range, which every version reads back the same.
    out += [0] if position == [None] else position


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


def _check_keys(keys: Any, path: Any, where: str) -> None:
    """Refuse keys (set items) whose hashing would run code of the program's classes: a restore
    refuses them (see common.key_problem)."""
    for i, k in enumerate(keys):
        if type(k) not in HASH_SAFE:
            found = key_problem(k, _fields)
            if found is not None:
                hint = f"hashing it runs code of its own: {found[1]}; {KEY_HINT}"
                raise NotSerializableError(_fmt((path, i, where)), _type_name(found[0]), hint)


def _fields(obj: Any) -> list:
    """The attribute values of a dataclass or model instance, read without running its code."""
    try:
        values = list(object.__getattribute__(obj, "__dict__").values())
    except AttributeError:
        values = []
    for member in slot_members(type(obj)).values():
        try:
            values.append(member.__get__(obj, type(obj)))
        except AttributeError:
            pass
    return values


def _set_items(e: _Encoder, x: Any, path: Any, out: list) -> None:
    _check_keys(x, path, "<item {}>")
    enc = e.enc
    out += [v if type(v) in _INLINE else enc(v, (path, i, "<item {}>")) for i, v in enumerate(x)]


def _pairs(e: _Encoder, x: dict, path: Any, out: list) -> None:
    _check_keys(x, path, "<key {}>")
    enc = e.enc
    for i, (k, v) in enumerate(x.items()):
        out.append(k if type(k) in _INLINE else enc(k, (path, i, "<key {}>")))
        out.append(v if type(v) in _INLINE else enc(v, (path, k)))


_ENCODERS: dict[type, _Enc] = {
    dict: _Enc("d", _pairs),  # dicts with a non-str key, or a "$" key
    tuple: _Enc("u", lambda e, x, path, out: e.items(x, path, out)),
    set: _Enc("s", _set_items),
    frozenset: _Enc("fs", _set_items),
    int: _Enc("i", _big_int),
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
        handler = _Enc("x", _exception if _not_an_exception(t) is None else _base_exception)
    elif issubclass(t, BaseModel):
        handler = _Enc("m", _model)
    elif dataclasses.is_dataclass(t) and t.__new__ is object.__new__:
        handler = _Enc("dc", _dataclass)
    elif plain_class(t):
        handler = _Enc("o", _plain_object)
    else:
        return None
    _ENCODERS[t] = handler
    return handler


def encode(
    roots: dict[str, Any],
    *,
    extension: Extension | None = None,
    classes: Any = None,
    base_exceptions: list | None = None,
) -> dict:
    """Encode named root values as one object graph; json.dumps of the result always succeeds.
    `classes(cls) -> bool` says which classes the data may name (by default any at module level).
    A BaseException that is not an Exception is refused, unless `base_exceptions` is a list: then
    it is written, and listed there (the caller checks where each may be)."""
    try:
        return _encode(roots, extension, optimistic=True, classes=classes, base=base_exceptions)
    except _Again:
        return _encode(roots, extension, optimistic=False, classes=classes, base=base_exceptions)


def _encode(
    roots: dict[str, Any], extension: Extension | None, optimistic: bool, classes: Any, base: Any = None
) -> dict:
    if base is not None:
        base.clear()  # a second pass meets them again
    e = _Encoder(extension, optimistic, classes, base)
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
        objects = e.finish()
        return {**e.tables(), "roots": out, "objects": objects}
    finally:
        del e.enc  # a cycle through the encoder: broken, so it is freed now, not by the garbage collector
