"""Fast paths for the common snapshot: plain data only, the same JSON as the full codec."""

from __future__ import annotations

from typing import Any

from .common import _BIG, _INLINE, _NEG_BIG, DEFAULT_LIMITS, DecodeLimits
from .decode import _SCALARS
from .encode import _tree

__all__ = ["decode_plain", "encode_plain"]

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
            _, (source,), position = x.__reduce__()  # since 3.12: the range of what is left, no position
            return ["I", ["rg", source.start, source.stop, source.step], position or 0]
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


def decode_plain(
    values: dict[str, Any], extras: dict[str, Any] | None = None, *, limits: DecodeLimits = DEFAULT_LIMITS
) -> dict[str, Any] | None:
    """What `decode` would rebuild from these roots (with no "objects"), when all are plain; else
    None. `extras` maps the tag of an extension entry that has no other field to its object.
    Within the same `limits` as `decode` (past one: None, and `decode` says which)."""
    out = {}
    room = [limits.max_values - len(values), limits.max_depth]  # values left, the deepest level allowed
    try:
        for k, v in values.items():
            out[k] = v if type(v) in _SCALARS else _unplain(v, extras, room, 1)
    except (_NotPlain, RecursionError):
        return None
    return out


def _unplain(x: Any, extras: dict[str, Any] | None, room: list[int], level: int) -> Any:
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
                return {k: v if type(v) in _SCALARS else _unplain(v, extras, room, level) for k, v in x.items()}
        return x.copy()
    if not x or type(x[0]) is not str:
        raise _NotPlain
    tag = x[0]
    if tag == "l":
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
            append(_unplain(v, extras, room, level))
        return out
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
