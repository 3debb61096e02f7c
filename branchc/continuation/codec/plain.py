"""Fast paths for the common snapshot: plain data and models of it, the same JSON as the full codec."""

from __future__ import annotations

import collections
import itertools
import operator
from typing import Any

from pydantic import BaseModel

from ..errors import NotSerializableError, SnapshotDataError
from .common import (
    _BIG,
    _INLINE,
    _MODEL_FIELDS,
    _NEG_BIG,
    DEFAULT_LIMITS,
    DecodeLimits,
    _model_fields,
    written_tables,
)
from .decode import _MODEL, _SCALARS, _tables, class_for
from .encode import _ENCODERS, _class_ref, _encoder_for, _model, _tree

__all__ = ["PlainTables", "decode_plain", "encode_plain"]

# Most of what a suspended generator holds is plain data: scalars, lists and str-keyed dicts of them,
# the range iterators of its for loops, and pydantic models of such data (a chat history). These two
# functions write and read exactly what `encode` and `decode` do for such values, in one small
# recursive function each (few frames, no memo), and give up (None) at anything else, so that the
# caller runs the full codec instead. They never raise for a value they do not take: errors and
# their paths stay the full codec's.


class _NotPlain(Exception):
    """A value the plain fast path does not take."""


_RANGE_ITERATOR = type(iter(range(0)))
_RANGE_REDUCES = _RANGE_ITERATOR.__reduce__ is not object.__reduce__  # as _reduce checks it
_new = object.__new__
_setattr = object.__setattr__


class PlainTables:
    """The document's "classes" and "shapes" tables, for models on the plain paths.

    Encoding (`PlainTables(policy)`): filled in the order the full encoder fills them; a model's class
    is taken when the full encoder would name it (`policy(cls)`, as `encode(..., classes=policy)`).
    Decoding (`PlainTables.read(data, resolver, limits)`): the tables of a document, checked as
    `decode` checks them, and the kinds of model entry met, each checked once per document."""

    __slots__ = ("class_index", "class_of", "classes", "count", "models", "resolve", "shape_index", "shapes")

    def __init__(self, classes: Any = None) -> None:
        self.classes = classes  # the policy: as _Encoder.classes, read by encode._class_ref
        self.class_index: dict[str, int] = {}
        self.class_of: dict[type, int] = {}
        self.shape_index: dict[tuple[str, ...], int] = {}
        self.models: dict[Any, tuple] = {}  # class -> how its models are written; (c, s, f) -> how read
        # read() sets the rest: the resolver, the document's shapes, and how many values its tables hold

    def tables(self) -> dict[str, list]:
        """The tables as `encode` writes them (each present only when not empty)."""
        return written_tables(self.class_index, self.shape_index)

    @classmethod
    def read(cls, data: dict, resolve: Any, limits: DecodeLimits = DEFAULT_LIMITS) -> PlainTables | None:
        """The tables of a document `decode` would take; None when it would refuse them."""
        try:
            refs, shapes, count = _tables(data, limits)
        except SnapshotDataError:
            return None
        tables = cls(refs)  # its "classes" table, decoding
        tables.shapes, tables.count, tables.resolve = shapes, count, resolve
        return tables

    def plan(self, c: int, s: int, f: int) -> tuple:
        """(class, field names, fields_set, values charged, whether `_direct`) of a model entry with class
        index c, shape s and fields_set f, checked as decode's _check_model checks the first such entry."""
        refs, shapes = self.classes, self.shapes
        if not (0 <= c < len(refs) and 0 <= s < len(shapes) and 0 <= f < len(shapes)):
            raise _NotPlain
        try:
            model = class_for(refs[c], _MODEL, self.resolve, "classes")
        except SnapshotDataError:
            raise _NotPlain from None
        names, fields_set, fields = shapes[s], shapes[f], _model_fields(model)
        # shapes hold distinct names: these are exactly the model's fields, and fields_set names some
        if len(names) != len(fields) or not fields.issuperset(names) or not fields.issuperset(fields_set):
            raise _NotPlain
        plan = self.models[c, s, f] = (model, names, fields_set, len(fields_set) + len(names), _direct(model))
        return plan


def encode_plain(
    values: dict[str, Any], extras: dict[type, dict] | None = None, tables: PlainTables | None = None
) -> dict[str, Any] | None:
    """What `encode(values)["roots"]` would be, when "objects" would be empty: every value plain and
    no list, dict, model or iterator met twice; else None. `extras` maps exact types to the extension
    entry that every instance gets (written as ``["@", entry]``, a copy each time). With `tables`,
    pydantic models (no extra, no private attributes) are taken too, and `tables.tables()` is then
    what `encode` writes beside "roots"."""
    seen: list[int] = []  # ids of the containers written: one met twice is shared (or on a cycle)
    models = tables.models if tables is not None else None

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
            _, (source,), position = x.__reduce__()  # since 3.12: the range of what is left, no position
            return ["I", ["rg", source.start, source.stop, source.step], position or 0]
        elif extras is not None and t in extras:
            seen.append(id(x))
            return ["@", dict(extras[t])]
        elif models is not None:
            plan = models.get(t) or _plan(tables, x, path)  # type: ignore[arg-type]
            if plan is not None:
                return _models([x], plan, path, seen, leaf, tables)[1]  # type: ignore[arg-type]
        raise _NotPlain

    out = {}
    try:
        for k, v in values.items():
            t = type(v)
            if t in _INLINE or (t is int and _NEG_BIG < v < _BIG):
                out[k] = v
            elif t is list and v and models is not None and (type(v[0]) in models or _model_first(tables, v, k)):
                seen.append(id(v))
                out[k] = _models(v, None, k, seen, leaf, tables)  # type: ignore[arg-type]  # a history
            else:
                out[k] = _tree(seen, leaf, v, k) if t is list or t is dict else leaf(v, k)
    except (_NotPlain, RecursionError):
        return None
    return out if len(set(seen)) == len(seen) else None


def _models(x: list, plan: tuple | None, path: Any, seen: list[int], leaf: Any, tables: PlainTables) -> list:
    """_tree's list case for a list of models (a history): each model written as encode._model writes
    it, in the same order (its class, its fields' shape, its fields' values, the shape of its fields_set),
    when it has no extra and no private attributes; other items as _tree writes them. With `plan`, every
    item is a model of that plan (leaf's one model)."""
    out = ["l"]
    append = out.append
    models = tables.models
    shapes = tables.shape_index
    shape = shapes.get
    for v in x:
        found = plan or models.get(type(v))
        if found is None:
            append(v if type(v) in _INLINE else _tree(seen, leaf, v, path))
            continue
        index, names, count, every = found
        seen.append(id(v))
        state = v.__dict__
        if len(state) != count:  # other keys are cached_property values: left to recompute
            state = {k: w for k, w in state.items() if k in names}
        key = tuple(state)
        s = shape(key)
        if s is None:
            s = shapes[key] = len(shapes)
        payload = [s]
        for k, w in state.items():
            payload.append(w if type(w) in _INLINE else _tree(seen, leaf, w, (path, k, ".{}")))
        fields_set = v.__pydantic_fields_set__
        key = every if type(fields_set) is set and fields_set == names else tuple(sorted(fields_set))
        f = shape(key)
        if f is None:
            f = shapes[key] = len(shapes)
        if getattr(v, "__pydantic_extra__", None) is not None:
            raise _NotPlain
        if getattr(v, "__pydantic_private__", None) is not None:
            raise _NotPlain
        append(["m", index, payload, f])
    return out


def _model_first(tables: PlainTables, x: list, path: Any) -> bool:
    """Whether a list starts with a model the full encoder would write as one (its plan then made)."""
    kind = type(x[0])
    if kind is dict or kind in _INLINE or BaseModel not in _MRO(kind):
        return False
    return _plan(tables, x[0], path) is not None


_MRO = type.__dict__["__mro__"].__get__


def _plan(tables: PlainTables, x: Any, path: Any) -> tuple | None:
    """How models of x's class are written: (class index, field names, how many, all of them sorted);
    None when the full encoder would not write x as a model, _NotPlain when it would refuse its class
    (then it says why). The class index is taken here, where the full encoder takes it: at its first model."""
    t = type(x)
    handler = _ENCODERS.get(t) or _encoder_for(t)
    if handler is None or handler.fill is not _model:
        return None
    try:
        index = _class_ref(tables, t, path)  # type: ignore[arg-type]  # the encoder's checks and table
    except NotSerializableError:
        raise _NotPlain from None
    names = _MODEL_FIELDS.get(t) or _model_fields(t)
    plan = tables.models[t] = (index, names, len(names), tuple(sorted(names)))
    return plan


_LIST_ONLY = {list}
_INT_ONLY = {int}
_STR_INT = {str, int}
_FOUR = {4}
_chain = itertools.chain.from_iterable
_repeat = itertools.repeat
_consume = collections.deque(maxlen=0).extend
_first, _third = operator.itemgetter(0), operator.itemgetter(2)
_heads = operator.itemgetter(0, 1, 3)
_tail = operator.itemgetter(slice(1, None))


def decode_plain(
    values: dict[str, Any],
    extras: dict[str, Any] | None = None,
    *,
    limits: DecodeLimits = DEFAULT_LIMITS,
    tables: PlainTables | None = None,
    level: int = 1,
    counted: int | None = None,
) -> dict[str, Any] | None:
    """What `decode` would rebuild from these roots (with no "objects"), when all are plain; else
    None. `extras` maps the tag of an extension entry that has no other field to its object; with
    `tables` (`PlainTables.read`), model entries are taken too. Within the same `limits` as `decode`
    (past one: None, and `decode` says which): the values sit at `level` (1: roots), and `counted`
    values are counted before them (by default len(values), as decode counts its roots)."""
    out = {}
    count = (len(values) if counted is None else counted) + (tables.count if tables is not None else 0)
    room = [limits.max_values - count, limits.max_depth]  # values left, the deepest level allowed
    try:
        for k, v in values.items():
            out[k] = v if type(v) in _SCALARS else _unplain(v, extras, room, level, tables)
    except (_NotPlain, RecursionError):
        return None
    return out


def _unplain(x: Any, extras: dict[str, Any] | None, room: list[int], level: int, tables: PlainTables | None) -> Any:
    # Counts as `decode` does: len() of every JSON list and object, the level of every one, but
    # for the dicts of scalars inside a list (copied whole by both: one value each, no level).
    t = type(x)
    if t in _SCALARS:
        return x
    if (t is not dict and t is not list) or level > room[1]:
        raise _NotPlain
    room[0] -= len(x)
    if room[0] < 0:
        raise _NotPlain
    if t is dict:
        if "$" in x:
            raise _NotPlain
        for v in x.values():
            if type(v) not in _SCALARS:
                level += 1
                return {k: v if type(v) in _SCALARS else _unplain(v, extras, room, level, tables) for k, v in x.items()}
        return x.copy()
    if not x or type(x[0]) is not str:
        raise _NotPlain
    tag = x[0]
    if tag == "l":
        if len(x) > 4 and tables is not None and type(x[1]) is list:
            flat = _flat_items(x, room, level + 1, tables)
            if flat is not None:
                return flat
        out = []
        append = out.append
        items = iter(x)
        next(items)  # the tag
        level += 1
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
            elif type(v) is list and len(v) == 4 and tables is not None and type(v[0]) is str and v[0] == "m":
                room[0] -= 4  # _unplain(v, ...) for a model (a history's), inline
                if room[0] < 0 or level > room[1]:
                    raise _NotPlain
                append(_model_entry(v, extras, room, level, tables))
                continue
            append(_unplain(v, extras, room, level, tables))
        return out
    if tag == "m" and tables is not None and len(x) == 4:
        return _model_entry(x, extras, room, level, tables)
    if tag == "I" and len(x) == 3:
        source, position = x[1], x[2]
        if type(source) is list and len(source) == 4 and type(position) is int and level < room[1]:
            rg, start, stop, step = source  # exact types: a str subclass is no tag to `decode`, a bool no int
            if type(rg) is str and rg == "rg" and type(start) is int and type(stop) is int and type(step) is int:
                room[0] -= 4
                if step and room[0] >= 0:
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


def _model_entry(x: list, extras: Any, room: list[int], level: int, tables: PlainTables) -> Any:
    """``["m", class, [shape, value, ...], fields_set]``, as decode's _dec_model rebuilds it: made by
    object.__new__, its state set as it was (no validation, no __init__, no model_post_init)."""
    c, payload, f = x[1], x[2], x[3]
    if type(c) is not int or type(payload) is not list or not payload or type(f) is not int:
        raise _NotPlain
    s = payload[0]
    if type(s) is not int:
        raise _NotPlain
    plan = tables.models.get((c, s, f)) or tables.plan(c, s, f)
    model, names, fields_set, charged, direct = plan
    if len(payload) != len(names) + 1:
        raise _NotPlain
    room[0] -= charged
    if room[0] < 0:
        raise _NotPlain
    state = dict(zip(names, payload[1:], strict=True))
    if not _SCALARS.issuperset(map(type, payload)):
        for k, v in state.items():
            if type(v) not in _SCALARS:
                state[k] = _unplain(v, extras, room, level + 1, tables)
    obj = _new(model)
    if direct:  # the class's own slots (BaseModel's descriptors): what object.__setattr__ finds and calls
        _set_dict(obj, state)
        _set_fields_set(obj, set(fields_set))
        _set_extra(obj, None)
        _set_private(obj, None)
    else:
        _setattr(obj, "__dict__", state)
        _setattr(obj, "__pydantic_fields_set__", set(fields_set))
        _setattr(obj, "__pydantic_extra__", None)
        _setattr(obj, "__pydantic_private__", None)
    return obj


_MODEL_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_set_dict, _set_fields_set, _set_extra, _set_private = (BaseModel.__dict__[name].__set__ for name in _MODEL_SLOTS)


def _direct(model: type) -> bool:
    """Whether setting a model's state through BaseModel's own descriptors is what object.__setattr__
    does: its class's MRO finds them first (nothing of its own under those names). Read once per class."""
    found = _DIRECT.get(model)
    if found is None:
        found = True
        for name in _MODEL_SLOTS:
            for klass in _MRO(model):
                if name in klass.__dict__:
                    found = found and klass.__dict__[name] is BaseModel.__dict__[name]
                    break
        if len(_DIRECT) > 4096:  # classes made on the fly (a test's, say) are not kept for ever
            _DIRECT.clear()
        _DIRECT[model] = found
    return found


_DIRECT: dict[type, bool] = {}


def _flat_items(x: list, room: list[int], level: int, tables: PlainTables) -> list | None:
    """What the list case of _unplain makes of a list of model entries of one kind whose values are
    scalars (a history), made in C (map, chain) rather than item by item; None for any other list
    (then it is read item by item). Counted as the items would be, at `level`."""
    items = x[1:]
    if set(map(type, items)) != _LIST_ONLY or set(map(len, items)) != _FOUR:
        return None
    # One (tag, class, fields_set) for all, each part of exactly str or int: so each is ("m", c, f) itself
    # (a bool equals an int, a str subclass a str: neither passes the types)
    heads = list(map(_heads, items))
    if set(map(type, _chain(heads))) - _STR_INT:
        return None
    distinct = set(heads)  # hashable: str and int
    if len(distinct) != 1:
        return None
    ((tag, c, f),) = distinct
    if type(tag) is not str or tag != "m" or type(c) is not int or type(f) is not int:
        return None
    payloads = list(map(_third, items))
    if set(map(type, payloads)) != _LIST_ONLY:
        return None
    lengths = set(map(len, payloads))
    if len(lengths) != 1 or 0 in lengths:
        return None
    if set(map(type, map(_first, payloads))) != _INT_ONLY:
        return None
    shapes = set(map(_first, payloads))
    if len(shapes) != 1:
        return None
    if not _SCALARS.issuperset(map(type, _chain(payloads))) or level > room[1]:
        return None
    (s,) = shapes
    model, names, fields_set, charged, direct = tables.models.get((c, s, f)) or tables.plan(c, s, f)
    if not direct or lengths != {len(names) + 1}:
        return None
    n = len(items)
    room[0] -= n * (4 + charged)
    if room[0] < 0:
        raise _NotPlain
    objects = list(map(_new, _repeat(model, n)))
    _consume(map(_set_dict, objects, map(dict, map(zip, _repeat(names), map(_tail, payloads)))))
    _consume(map(_set_fields_set, objects, map(set, _repeat(fields_set, n))))
    _consume(map(_set_extra, objects, _repeat(None)))
    _consume(map(_set_private, objects, _repeat(None)))
    return objects
