"""The value codec: every supported type round trips through JSON with its identity structure;
everything else is refused with a path and a hint; tampered data only ever raises SnapshotDataError."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
import socket
import sys
import threading
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

import codec_fixtures as fx
import pytest
from _codec_tables import tabled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from branchc.continuation.codec import (
    NotSerializableError,
    SnapshotDataError,
    decode,
    encode,
    format_path,
    from_modules,
)
from branchc.runtime.errors import BranchcError

ALLOWED = frozenset({fx.__name__})


def roundtrip(roots: dict[str, Any], extension: Any = None) -> dict[str, Any]:
    """encode -> strict JSON text -> decode, as a snapshot travels."""
    text = json.dumps(encode(roots, extension=extension), allow_nan=False)
    return decode(json.loads(text), classes=from_modules(ALLOWED))


def canon(x: Any, seen: dict[int, tuple[int, Any]] | None = None) -> Any:
    """A comparable picture of a value: types, contents and which objects are the same object."""
    seen = {} if seen is None else seen
    t = type(x)
    if t in (str, int, bool, type(None)):
        return (t.__name__, x)
    if t is float:
        return ("float", repr(x))  # nan == nan here, and -0.0 != 0.0
    if t is complex:
        return ("complex", repr(x))
    if id(x) in seen:
        return ("same as", seen[id(x)][0])
    seen[id(x)] = (len(seen), x)  # keeps temporaries (like `state` below) alive, so no id is reused
    if t in (list, tuple):
        return (t.__name__, [canon(v, seen) for v in x])
    if t is dict:
        return ("dict", [(canon(k, seen), canon(v, seen)) for k, v in x.items()])
    if t in (set, frozenset):
        return (t.__name__, sorted(repr(canon(v)) for v in x))
    if isinstance(x, BaseModel):
        extra, private = x.__pydantic_extra__, x.__pydantic_private__
        return (t, canon(x.__dict__, seen), sorted(x.__pydantic_fields_set__), canon(extra, seen), canon(private, seen))
    if dataclasses.is_dataclass(x):
        state = {f.name: getattr(x, f.name) for f in dataclasses.fields(x) if hasattr(x, f.name)}
        return (t, canon(state, seen), canon(getattr(x, "__dict__", {}), seen))
    if isinstance(x, BaseException):
        parts = (x.args, x.__dict__, x.__cause__, x.__context__, x.__suppress_context__)
        return (t, *(canon(part, seen) for part in parts))
    if isinstance(x, (datetime, time)):
        return (t, x.isoformat(), repr(x.tzinfo), x.fold)
    return (t, repr(x))  # exact: Decimal("1.10") is not Decimal("1.1") here


def assert_same(restored: Any, original: Any) -> None:
    assert canon(restored) == canon(original)


# ---------------------------------------------------------------------------------------------------- round trips

VALUES = {
    "json": {"s": "text", "n": 3, "f": 1.5, "t": True, "z": None, "l": [1, [2, {}]], "d": {"a": {"b": []}}},
    "empty": [[], {}, (), set(), frozenset(), b"", bytearray(), ""],
    "floats": [math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324],
    "big ints": [2**64, -(2**64), 10**5000, -(10**5000)],
    "non-str keys": {1: "a", (1, 2): "b", None: "c", False: "d", 2.5: "e", frozenset({1}): "f", date(2024, 1, 2): "g"},
    "str and other keys": {"a": 1, 2: "b", "c": 3},
    "a '$' key": {"$": 1, "x": [2]},
    "key order": dict.fromkeys("zyxabc", 0),
    "containers": [[1, 2], (3, (4,)), {5, 6}, frozenset({7, (8, 9)}), b"\x00\xffbytes", bytearray(b"ba")],
    "datetimes": [
        datetime(2024, 5, 1, 12, 30, 15, 123456),
        datetime(2024, 5, 1, 12, tzinfo=UTC),
        datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=1), "CET")),
        datetime(2024, 11, 3, 1, 30, fold=1),
        datetime(2024, 3, 10, 12, tzinfo=ZoneInfo("America/New_York")),
        date(1999, 12, 31),
        time(23, 59, 59, 999999),
        time(8, 0, tzinfo=timezone(timedelta(microseconds=1))),
        timedelta(days=-3, seconds=5, microseconds=7),
        UTC,
    ],
    "decimals": [Decimal("1.10"), Decimal("-0"), Decimal("NaN"), Decimal("-Infinity"), Decimal("1e-999")],
    "numbers": [Fraction(-3, 4), Fraction(10**40, 3), complex(1.5, -2), complex(math.inf, math.nan)],
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "ranges": [range(10), range(5, -20, -3), range(0)],
    "enums": [fx.Color.RED, fx.Level.HIGH, fx.Mode.WRITE, fx.Perm.R, fx.Perm.R | fx.Perm.W, fx.Perm(0)],
    "nested enum": fx.Outer.Inner.A,
    "dataclasses": [fx.Point(1, 2, ["t"]), fx.FrozenPoint(3, 4), fx.Slotted(5, [6]), fx.Node(1, fx.Node(2))],
}


@pytest.mark.parametrize("name", list(VALUES))
def test_round_trip(name: str) -> None:
    value = VALUES[name]
    restored = roundtrip({"v": value})["v"]
    assert_same(restored, value)


def test_strings_never_go_to_the_table() -> None:
    text = "a long string " * 20
    data = encode({"a": text, "b": [text, text]})
    assert data["objects"] == []
    assert data == {"roots": {"a": text, "b": ["l", text, text]}, "objects": []}


def test_plain_data_stays_close_to_its_json() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    data = encode({"history": history, "step": 2})
    assert data == {"roots": {"history": ["l", *history], "step": 2}, "objects": []}
    assert data["roots"]["history"][1] is not history[0]  # a copy, not the live dict


def test_unsafe_int_sizes_still_dump() -> None:
    value = 7**20000  # more digits than int <-> str conversion allows
    data = encode({"n": value})
    assert roundtrip({"n": value})["n"] == value
    assert json.loads(json.dumps(data))["roots"]["n"][0] == "i"


def test_dict_subclasses_and_others_are_not_plain_dicts() -> None:
    from collections import OrderedDict

    with pytest.raises(NotSerializableError, match=r"^v: a collections.OrderedDict cannot travel"):
        encode({"v": OrderedDict(a=1)})


# ---------------------------------------------------------------------------------------------------- identity


def test_two_roots_bound_to_one_list_stay_one_list() -> None:
    shared = [1, 2]
    out = roundtrip({"a": shared, "b": shared, "c": [shared, (shared,)]})
    assert out["a"] is out["b"] is out["c"][0] is out["c"][1][0]
    out["a"].append(3)
    assert out["b"] == [1, 2, 3]


def test_cycles() -> None:
    loop: list = [1]
    loop.append(loop)
    d: dict = {"name": "d"}
    d["self"] = d
    d["list"] = [d, loop]
    a, b = fx.Node(1), fx.Node(2)
    a.next, b.next = b, a
    t = ([],)
    t[0].append(t)  # a tuple on a cycle through a list
    out = roundtrip({"loop": loop, "d": d, "a": a, "t": t})
    assert out["loop"][1] is out["loop"]
    assert out["d"]["self"] is out["d"] and out["d"]["list"][0] is out["d"] and out["d"]["list"][1] is out["loop"]
    assert out["a"].next.next is out["a"] and out["a"].next.value == 2
    assert out["t"][0][0] is out["t"]
    assert_same(out, {"loop": loop, "d": d, "a": a, "t": t})


def test_cycles_through_nested_immutables() -> None:
    box: list = []
    t = ((box, {"k": box}),)
    box.append(t)
    node = fx.Node(1)
    frozen = frozenset({node})
    node.next = frozen
    out = roundtrip({"t": t, "frozen": frozen})
    assert out["t"][0][0][0] is out["t"] and out["t"][0][1]["k"] is out["t"][0][0]
    (restored_node,) = out["frozen"]
    assert restored_node.next is out["frozen"]


def test_encode_is_deterministic_and_changes_nothing() -> None:
    value = _rich_value()
    before = canon(value)
    first, second = encode(value), encode(value)
    assert first == second and canon(value) == before
    text = json.dumps(first)
    decode(first, classes=from_modules(ALLOWED))
    assert json.dumps(first) == text


def test_too_deep_data_is_refused_cleanly() -> None:
    deep: Any = 1
    for _ in range(10_000):
        deep = ["l", deep]
    with pytest.raises(SnapshotDataError, match=r"^data: nested too deeply"):
        decode({"roots": {"a": deep}, "objects": []}, classes=from_modules(ALLOWED))


def test_shared_values_move_to_the_table_in_place() -> None:
    inner = {"k": [1]}
    data = encode({"x": [inner, inner], "y": inner["k"]})
    assert data["roots"] == {"x": ["l", {"$": 0}, [0]], "y": [1]}
    assert data["objects"] == [{"k": [1]}, ["l", 1]]


def test_models_keep_state_and_identity_without_validation() -> None:
    card = fx.Card(rank="A")
    hand = fx.Hand(cards=[card, card], bonus=3)
    hand._secret = 42
    tree = fx.Tree(name="root")
    tree.children.append(fx.Tree(name="leaf", parent=tree))
    frozen = fx.Frozen(x=1)
    fx.CALLS.clear()
    out = roundtrip({"hand": hand, "tree": tree, "frozen": frozen, "again": card})
    assert fx.CALLS == []
    assert_same(out, {"hand": hand, "tree": tree, "frozen": frozen, "again": card})
    restored = out["hand"]
    assert restored == hand and restored.model_fields_set == {"cards", "bonus"} and restored.bonus == 3
    assert restored._secret == 42 and restored.cards[0] is restored.cards[1] is out["again"]
    assert out["tree"].children[0].parent is out["tree"]
    assert out["frozen"] == frozen and hash(out["frozen"]) == hash(frozen)
    with pytest.raises(Exception, match="frozen"):
        out["frozen"].x = 2


def test_dataclasses_restore_fields_without_init() -> None:
    point = fx.Point(1, tags=["a"])
    point.note = "extra attribute"
    slotted = fx.Slotted(1, [2])
    del slotted.b
    fx.CALLS.clear()
    out = roundtrip({"point": point, "frozen": fx.FrozenPoint(1, 2), "slotted": slotted})
    assert fx.CALLS == []
    assert out["point"] == point and out["point"].note == "extra attribute"
    assert out["frozen"] == fx.FrozenPoint(1, 2) and hash(out["frozen"]) == hash(fx.FrozenPoint(1, 2))
    assert out["slotted"].a == 1 and not hasattr(out["slotted"], "b")


def test_hashable_objects_as_keys_and_set_items() -> None:
    frozen = fx.FrozenPoint(1, 2)
    value = {"by point": {frozen: "x"}, "set": {frozen, fx.Color.RED}, "point": frozen}
    out = roundtrip(value)
    assert out["by point"] == {frozen: "x"} and out["set"] == {frozen, fx.Color.RED}
    assert next(iter(out["by point"])) is out["point"]


# ---------------------------------------------------------------------------------------------------- exceptions


def test_builtin_exceptions() -> None:
    cause = KeyError("k")
    error = ValueError("bad", 3)
    error.__cause__ = cause
    error.__suppress_context__ = True
    error.add_note("a note")
    error.detail = {"x": 1}
    os_error = FileNotFoundError(2, "No such file", "a.txt", None, "b.txt")
    values = {
        "error": error,
        "os": os_error,
        "plain os": OSError("just a message"),
        "import": ModuleNotFoundError("no module", name="m", path="/p"),
        "attribute": AttributeError("no attr", name="a"),
        "stop": StopIteration(5),
        "group": ExceptionGroup("several", [ValueError(1), TypeError(2)]),
    }
    out = roundtrip(values)
    assert_same(out, values)
    assert out["error"].__notes__ == ["a note"] and out["error"].__cause__.args == ("k",)
    assert out["os"].errno == 2 and out["os"].filename == "a.txt" and out["os"].filename2 == "b.txt"
    assert out["os"].strerror == "No such file" and type(out["os"]) is FileNotFoundError
    assert out["import"].name == "m" and out["import"].path == "/p" and out["attribute"].name == "a"
    assert out["stop"].value == 5
    assert [type(e) for e in out["group"].exceptions] == [ValueError, TypeError]


def test_raised_exceptions_drop_their_traceback() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            raise RuntimeError("outer") from None
    except RuntimeError as caught:
        error = caught
    out = roundtrip({"e": error})["e"]
    assert out.__traceback__ is None and out.__suppress_context__ and isinstance(out.__context__, KeyError)


def test_user_exceptions_restore_without_init() -> None:
    error = fx.ToolError(404, "missing")
    fx.CALLS.clear()
    out = roundtrip({"e": error})["e"]
    assert fx.CALLS == []
    assert type(out) is fx.ToolError and out.args == ("404: missing",) and out.code == 404


def test_exception_in_a_cycle_through_its_args() -> None:
    box: list = []
    error = ValueError(box)
    box.append(error)
    out = roundtrip({"e": error, "box": box})
    assert out["e"].args[0] is out["box"] and out["box"][0] is out["e"]


# ---------------------------------------------------------------------------------------------------- iterators


def _advanced(it: Any, steps: int) -> Any:
    for _ in range(steps):
        next(it)
    return it


ITERATORS = {
    "list": lambda: _advanced(iter([1, 2, 3, 4]), 1),
    "list exhausted": lambda: _advanced(iter([1]), 1),
    "list reversed": lambda: _advanced(reversed([1, 2, 3]), 1),
    "tuple": lambda: _advanced(iter((1, 2, 3)), 2),
    "tuple reversed": lambda: _advanced(reversed((1, 2, 3)), 1),
    "range": lambda: _advanced(iter(range(10)), 3),
    "range reversed": lambda: _advanced(reversed(range(0, 10, 3)), 1),
    "long range": lambda: _advanced(iter(range(2**70, 2**70 + 5)), 2),
    "str": lambda: _advanced(iter("abcd"), 1),
    "str non-ascii": lambda: _advanced(iter("äbc"), 1),
    "bytes": lambda: _advanced(iter(b"abc"), 1),
    "bytearray": lambda: _advanced(iter(bytearray(b"abc")), 2),
    "enumerate": lambda: _advanced(enumerate(["a", "b", "c"], start=10), 1),
    "zip": lambda: _advanced(zip([1, 2, 3], "abc", strict=False), 1),
    "count": lambda: _advanced(itertools.count(5, 2), 3),
    "count float": lambda: _advanced(itertools.count(0.5), 1),
    "repeat": lambda: _advanced(itertools.repeat("x", 4), 1),
    "chain": lambda: _advanced(itertools.chain([1, 2], (3,), "ab"), 2),
    "chain fresh": lambda: itertools.chain([1], [2]),
    "map": lambda: _advanced(map(str.upper, ["a", "b", "c"]), 1),
    "filter": lambda: _advanced(filter(None, [0, 1, 0, 2, 3]), 1),
}
CONVERTED = {  # these come back as iterators over a list of what was left
    "dict keys": lambda: _advanced(iter({"a": 1, "b": 2, "c": 3}), 1),
    "dict values": lambda: _advanced(iter({"a": 1, "b": 2}.values()), 1),
    "dict items": lambda: _advanced(iter({"a": 1, "b": 2}.items()), 1),
    "dict reversed": lambda: _advanced(reversed({"a": 1, "b": 2}), 1),
    "set": lambda: _advanced(iter({1, 2, 3}), 1),
}


def _rest(it: Any) -> list:
    return list(itertools.islice(it, 6))


@pytest.mark.parametrize("name", list(ITERATORS))
def test_iterators_keep_their_position(name: str) -> None:
    original, expected = ITERATORS[name](), ITERATORS[name]()
    restored = roundtrip({"it": original})["it"]
    assert type(restored) is type(expected)
    assert _rest(restored) == _rest(expected)


@pytest.mark.parametrize("name", list(CONVERTED))
def test_dict_and_set_iterators_continue_over_what_was_left(name: str) -> None:
    original, expected = CONVERTED[name](), CONVERTED[name]()
    restored = roundtrip({"it": original})["it"]
    # a forward dict iterator stays one (over a new dict of what is left); the others become list iterators
    assert type(restored) is (type(expected) if name in ("dict keys", "dict values", "dict items") else type(iter([])))
    assert _rest(restored) == _rest(expected)


def test_iterator_shares_its_list_and_zip_stays_strict() -> None:
    items = [1, 2, 3]
    it = _advanced(iter(items), 1)
    strict = zip([1, 2], [1], strict=True)
    out = roundtrip({"items": items, "it": it, "strict": strict, "pair": enumerate(it)})
    out["items"].append(4)
    assert out["pair"].__reduce__()[1][0] is out["it"]
    assert list(out["it"]) == [2, 3, 4]
    assert next(out["strict"]) == (1, 1)
    with pytest.raises(ValueError, match="shorter"):
        next(out["strict"])


# ---------------------------------------------------------------------------------------------------- not serializable


def _generator():
    yield 1


async def _coroutine() -> None:
    pass


def test_refusals_name_the_path_the_type_and_a_fix(tmp_path) -> None:
    with open(tmp_path / "f.txt", "w") as handle:
        history = [{}, {}, {}, {"when": handle}]
        with pytest.raises(NotSerializableError) as caught:
            encode({"history": history})
    error = caught.value
    assert str(error) == (
        "history[3]['when']: a _io.TextIOWrapper cannot travel in a snapshot; "
        "close it before the yield, or keep the path and reopen it after"
    )
    assert (error.path, error.type_name) == ("history[3]['when']", "_io.TextIOWrapper")
    assert isinstance(error, BranchcError) and isinstance(error, TypeError)


def _local_class_instance() -> Any:
    @dataclasses.dataclass
    class Local:
        x: int

    return Local(1)


gen = _generator()
coro = _coroutine()
coro.close()
sock = socket.socket()
sock.close()
REFUSED = [
    ({"lock": threading.Lock()}, "lock", "_thread.lock", "cannot be moved to another process"),
    ({"t": [threading.Thread()]}, "t[0]", "threading.Thread", "cannot be moved to another process"),
    ({"s": {"sock": sock}}, "s['sock']", "socket.socket", "cannot be moved to another process"),
    ({"g": gen}, "g", "generator", "make it @resumable so it compiles, or finish it before the yield"),
    ({"c": coro}, "c", "coroutine", "make it @resumable"),
    ({"f": (lambda: 1,)}, "f[0]", "function", "only functions the compiler compiled can travel"),
    ({"f": len}, "f", "builtin_function_or_method", "only functions the compiler compiled"),
    ({"m": sys}, "m", "module", "modules cannot travel"),
    ({"c": fx.Card}, "c", "pydantic._internal._model_construction.ModelMetaclass", "classes cannot travel"),
    ({"o": object()}, "o", "object", "a snapshot holds data"),
    ({"p": fx.Point(1, tags=[io.StringIO()])}, "p.tags[0]", "_io.StringIO", "close it before the yield"),
    ({"e": ValueError(threading.Lock())}, "e.args[0]", "_thread.lock", "another process"),
    ({"k": {threading.Lock(): 1}}, "k<key 0>", "_thread.lock", "another process"),
    ({"s": {(2, threading.Lock())}}, "s<item 0>[1]", "_thread.lock", "another process"),
    ({"l": _local_class_instance()}, "l", "test_codec._local_class_instance.<locals>.Local", "at module level"),
    ({"m": map(lambda x: x, [1])}, "m", "map", "travels only with a builtin"),
    ({"it": iter([threading.Lock()])}, "it<source>[0]", "_thread.lock", "another process"),
]


@pytest.mark.parametrize(("roots", "path", "type_name", "hint"), REFUSED, ids=[r[1] for r in REFUSED])
def test_refusals(roots: dict, path: str, type_name: str, hint: str) -> None:
    with pytest.raises(NotSerializableError) as caught:
        encode(roots)
    assert caught.value.path == path
    assert caught.value.type_name == type_name
    assert hint in caught.value.hint
    assert str(caught.value).startswith(f"{path}: a {type_name} cannot travel in a snapshot; ")


def test_too_deep_is_refused_cleanly() -> None:
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(NotSerializableError, match="nested too deeply"):
        encode({"deep": deep})


# ---------------------------------------------------------------------------------------------------- extension


class Handle:
    """Something only the extension knows (as the generator layer knows its compiled generators)."""

    def __init__(self, name: str, payload: Any) -> None:
        self.name = name
        self.payload = payload


def test_extension_round_trip_with_cycles_and_sharing() -> None:
    seen_paths = []

    def enc_ext(value, encode_child, path):
        seen_paths.append((type(value).__name__, format_path(path)))
        if isinstance(value, Handle):
            return {"t": "handle", "name": value.name, "payload": encode_child(value.payload, f"{path}.payload")}
        return None

    def dec_ext(entry, decode_child, path):
        if entry["t"] != "handle":
            raise SnapshotDataError(path, f"unknown extension tag {entry['t']!r}")
        handle = Handle(entry["name"], None)
        decode_child.created(handle)
        handle.payload = decode_child(entry["payload"], f"{path}.payload")
        return handle

    handle = Handle("h", None)
    handle.payload = [handle, {"when": date(2024, 1, 1)}]
    out = decode(
        json.loads(json.dumps(encode({"h": handle, "box": [handle]}, extension=enc_ext))),
        classes=from_modules(ALLOWED),
        extension=dec_ext,
    )
    restored = out["h"]
    assert type(restored) is Handle and restored.name == "h"
    assert restored.payload[0] is restored and out["box"][0] is restored
    assert restored.payload[1] == {"when": date(2024, 1, 1)}
    # asked first for what it may own, never for exact lists and dicts
    assert ("Handle", "h") in seen_paths and ("date", "h.payload[1]['when']") in seen_paths
    assert {name for name, _ in seen_paths} == {"Handle", "date"}


class Opaque:
    """Not a plain class (a __new__ of its own): only an extension could write it."""

    def __new__(cls) -> Opaque:
        return super().__new__(cls)


def test_extension_declining_lets_the_codec_refuse() -> None:
    with pytest.raises(NotSerializableError, match=r"^x: a test_codec\.Opaque cannot travel"):
        encode({"x": Opaque()}, extension=lambda value, child, path: None)


def test_extension_must_decline_before_encoding_children() -> None:
    def extension(value, encode_child, path):
        encode_child(value.payload, f"{path}.payload")
        return None

    handle = Handle("h", None)
    handle.payload = [handle]
    with pytest.raises(TypeError, match="encoded children, then returned None"):
        encode({"x": handle}, extension=extension)


def test_extension_must_return_a_tagged_dict() -> None:
    with pytest.raises(TypeError, match="must return a dict"):
        encode({"x": Handle("h", 1)}, extension=lambda value, child, path: {"no": "tag"})


def test_extension_entry_without_extension_is_bad_data() -> None:
    data = encode({"x": Handle("h", 1)}, extension=lambda value, child, path: {"t": "handle"})
    with pytest.raises(SnapshotDataError, match=r"^roots\['x'\]\[1\]: an extension entry, but no codec extension"):
        decode(data, classes=from_modules(ALLOWED))


# ---------------------------------------------------------------------------------------------------- bad data

FX = fx.__name__
BAD = [
    ([], "data", "expected {"),
    ({"roots": {}}, "data", "expected {"),
    ({"roots": [], "objects": []}, "roots", "expected an object"),
    ({"roots": {}, "objects": {}}, "objects", "expected a list"),
    ({"roots": {"a": [5]}, "objects": []}, "roots['a']", "expected a reference to one of 0 objects, got 5"),
    ({"roots": {"a": {"$": -1}}, "objects": [1]}, "roots['a']", "got -1"),
    ({"roots": {"a": {"$": 0, "x": 1}}, "objects": [1]}, "roots['a']", "expected a reference"),
    ({"roots": {"a": []}, "objects": []}, "roots['a']", "expected a JSON scalar, object or tagged array"),
    ({"roots": {"a": [True]}, "objects": []}, "roots['a']", "expected a reference to one of 0 objects, got True"),
    ({"roots": {"a": ["zz"]}, "objects": []}, "roots['a'][0]", "unknown tag 'zz'"),
    ({"roots": {"a": ["l", 1, ["zz"]]}, "objects": []}, "roots['a'][2][0]", "unknown tag 'zz'"),
    ({"roots": {"a": {"k": ["l", []]}}, "objects": []}, "roots['a']['k'][1]", "expected a JSON scalar"),
    ({"roots": {}, "objects": [["l"], ["l", [7]]]}, "objects[1][1]", "expected a reference to one of 2"),
    ({"roots": {}, "objects": [[0]]}, "objects[0]", "expected a reference"),
    ({"roots": {}, "objects": ["text"]}, "objects[0]", "expected a tagged array or an object, got 'text'"),
    ({"roots": {"a": [0]}, "objects": [["u", [0]]]}, "objects[0]", "a cycle that runs through immutable values"),
    ({"roots": {"a": ["b", "!!"]}, "objects": []}, "roots['a']", "cannot restore: Error: "),
    ({"roots": {"a": ["b", 5]}, "objects": []}, "roots['a'][1]", "expected a string, got 5"),
    ({"roots": {"a": ["b"]}, "objects": []}, "roots['a']", "expected 1 part after the tag 'b', got 0"),
    ({"roots": {"a": ["da", "2024-13-01"]}, "objects": []}, "roots['a']", "cannot restore: ValueError"),
    ({"roots": {"a": ["dt", "2024-01-01T00:00+01:00"]}, "objects": []}, "roots['a'][1]", "without an offset"),
    ({"roots": {"a": ["dt", "2024-01-01", 5]}, "objects": []}, "roots['a'][2]", "expected a time zone"),
    ({"roots": {"a": ["tz", 86400, 0]}, "objects": []}, "roots['a']", "cannot restore: ValueError"),
    ({"roots": {"a": ["zi", "../etc/passwd"]}, "objects": []}, "roots['a'][1]", "not a time zone key"),
    ({"roots": {"a": ["zi", "Mars/Olympus"]}, "objects": []}, "roots['a'][1]", "is not installed here"),
    ({"roots": {"a": ["i", "xyz"]}, "objects": []}, "roots['a']", "cannot restore: ValueError"),
    ({"roots": {"a": ["f", "nope"]}, "objects": []}, "roots['a']", "cannot restore: KeyError"),
    ({"roots": {"a": ["dec", "1.2.3"]}, "objects": []}, "roots['a']", "cannot restore"),
    ({"roots": {"a": ["uu", "nope"]}, "objects": []}, "roots['a']", "cannot restore: ValueError"),
    ({"roots": {"a": ["fr", 1, 0]}, "objects": []}, "roots['a']", "cannot restore: ZeroDivisionError"),
    ({"roots": {"a": ["fr", 1, True]}, "objects": []}, "roots['a'][2]", "expected an integer, got True"),
    ({"roots": {"a": ["rg", 0, 1, 0]}, "objects": []}, "roots['a']", "cannot restore: ValueError"),
    ({"roots": {"a": ["d", 1]}, "objects": []}, "roots['a']", "expected key, value pairs"),
    ({"roots": {"a": ["d", ["l"], 1]}, "objects": []}, "roots['a'][1]", "unhashable type: 'list'"),
    ({"roots": {"a": ["s", ["l"]]}, "objects": []}, "roots['a']", "unhashable type"),
    ({"roots": {"a": ["I", {}]}, "objects": []}, "roots['a'][1]", "expected a sequence"),
    ({"roots": {"a": ["I", ["l"], "x"]}, "objects": []}, "roots['a'][2]", "expected an integer"),
    ({"roots": {"a": ["R", ["rg", 0, 3, 1]]}, "objects": []}, "roots['a'][1]", "a reversed range"),
    ({"roots": {"a": ["en", 5, 0]}, "objects": []}, "roots['a']", "cannot restore: TypeError"),
    ({"roots": {"a": ["zp", "yes"]}, "objects": []}, "roots['a'][1]", "expected true or false"),
    ({"roots": {"a": ["ch", 1]}, "objects": []}, "roots['a']", "cannot restore: TypeError"),
    ({"roots": {"a": ["mp", "eval", ["I", ["l"]]]}, "objects": []}, "roots['a'][1]", "not a function that may"),
    ({"roots": {"a": ["mp", "__import__", 1]}, "objects": []}, "roots['a'][1]", "not a function that may"),
    # classes: the allowlist, the kind, the name
    ({"roots": {"a": ["e", "subprocess:Popen", "x"]}, "objects": []}, "roots['a'][1]", "module 'subprocess' is not"),
    ({"roots": {"a": ["m", "os:system", {}, []]}, "objects": []}, "roots['a'][1]", "module 'os' is not among"),
    ({"roots": {"a": ["dc", "collections:OrderedDict", {}]}, "objects": []}, "roots['a'][1]", "'collections' is not"),
    (
        {"roots": {"a": ["x", "builtins:eval", [], {}, None, None, False, {}]}, "objects": []},
        "roots['a'][1]",
        "builtins:eval is not an exception defined there",
    ),
    (
        {"roots": {"a": ["x", "builtins:object", [], {}, None, None, False, {}]}, "objects": []},
        "roots['a'][1]",
        "builtins:object is not an exception",
    ),
    ({"roots": {"a": ["e", "builtins:bool", "True"]}, "objects": []}, "roots['a'][1]", "'builtins' is not among"),
    ({"roots": {"a": ["e", "nocolon", "x"]}, "objects": []}, "roots['a'][1]", 'expected "module:qualname"'),
    ({"roots": {"a": ["e", f"{FX}:Card", "x"]}, "objects": []}, "roots['a'][1]", f"{FX}:Card is not an Enum"),
    ({"roots": {"a": ["e", f"{FX}:Enum", "x"]}, "objects": []}, "roots['a'][1]", "is not an Enum defined there"),
    ({"roots": {"a": ["m", f"{FX}:Color", {}, []]}, "objects": []}, "roots['a'][1]", "is not a pydantic model"),
    ({"roots": {"a": ["m", f"{FX}:NotAModel", {}, []]}, "objects": []}, "roots['a'][1]", "not a pydantic model"),
    ({"roots": {"a": ["dc", f"{FX}:Card", {}]}, "objects": []}, "roots['a'][1]", "is not a dataclass"),
    (
        {"roots": {"a": ["x", f"{FX}:Point", [], {}, None, None, False, {}]}, "objects": []},
        "roots['a'][1]",
        "is not an exception",
    ),
    ({"roots": {"a": ["e", f"{FX}:Color.__class__", "x"]}, "objects": []}, "roots['a'][1]", "is not an Enum"),
    ({"roots": {"a": ["e", f"{FX}:Color.__init__.__globals__", "x"]}, "objects": []}, "roots['a'][1]", "not an"),
    ({"roots": {"a": ["e", f"{FX}:f.<locals>.E", "x"]}, "objects": []}, "roots['a'][1]", "is not an Enum"),
    ({"roots": {"a": ["e", f"{FX}:Color", "BLUE"]}, "objects": []}, "roots['a'][2]", "Color has no member 'BLUE'"),
    ({"roots": {"a": ["e", f"{FX}:Color", None, 1]}, "objects": []}, "roots['a']", "a Flag's [tag, class, null"),
    ({"roots": {"a": ["e", f"{FX}:Perm", None, 99]}, "objects": []}, "roots['a'][3]", "has bits that no member"),
    (
        {"roots": {"a": ["m", f"{FX}:Card", {"suit": "hearts"}, []]}, "objects": []},
        "roots['a'][2]",
        "missing fields ['rank']",
    ),
    (
        {"roots": {"a": ["m", f"{FX}:Card", {"rank": "A", "suit": "s", "x": 1}, []]}, "objects": []},
        "roots['a'][2]",
        "unexpected name 'x'",
    ),
    (
        {"roots": {"a": ["m", f"{FX}:Card", {"rank": "A", "suit": "s"}, [1]]}, "objects": []},
        "roots['a'][3]",
        "expected an index into the 1 shapes, got [1]",
    ),
    (
        {"roots": {"a": ["m", f"{FX}:Card", {"rank": "A", "suit": "s"}, [], {"x": 1}, None]}, "objects": []},
        "roots['a'][4]",
        "does not allow extra fields",
    ),
    (
        {"roots": {"a": ["m", f"{FX}:Hand", {"cards": ["l"], "owner": None}, [], None, {"_other": 1}]}, "objects": []},
        "roots['a'][5]",
        "unexpected name '_other'",
    ),
    ({"roots": {"a": ["dc", f"{FX}:Point", {"z": 1}]}, "objects": []}, "roots['a'][2]", "unexpected name 'z'"),
    ({"roots": {"a": ["dc", f"{FX}:Slotted", {"a": 1}, {"x": 1}]}, "objects": []}, "roots['a'][3]", "no __dict__"),
    (
        {"roots": {"a": ["x", "builtins:ValueError", [], {}, 5, None, False, {}]}, "objects": []},
        "roots['a'][4]",
        "cannot restore: TypeError",
    ),
    (
        {"roots": {"a": ["x", "builtins:ValueError", [], {}, None, None, 1, {}]}, "objects": []},
        "roots['a'][6]",
        "expected true or false",
    ),
    (
        {"roots": {"a": ["x", "builtins:ValueError", [], {}, None, None, False, {"bad": 1}]}, "objects": []},
        "roots['a']",
        "cannot restore: TypeError",
    ),
    ({"roots": {"a": ["@", {"t": "gen"}]}, "objects": []}, "roots['a'][1]", "no codec extension was given"),
]


@pytest.mark.parametrize(("data", "path", "message"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_data_names_the_place(data: Any, path: str, message: str) -> None:
    modules = set(sys.modules)
    with pytest.raises(SnapshotDataError) as caught:
        decode(tabled(data), classes=from_modules(ALLOWED | {"tests_never_imported"}))
    assert caught.value.path == path, str(caught.value)
    assert message in caught.value.problem
    assert str(caught.value) == f"{path}: {caught.value.problem}"
    assert isinstance(caught.value, BranchcError) and isinstance(caught.value, ValueError)
    assert set(sys.modules) == modules


def test_a_model_field_added_since_with_a_literal_default_gets_it() -> None:
    # a value saved before the class gained `suit = "spades"`: what validation would give it
    card = decode(tabled({"roots": {"a": ["m", f"{FX}:Card", {"rank": "A"}, ["rank"]]}, "objects": []}),
                  classes=from_modules(ALLOWED))["a"]  # fmt: skip
    assert (card.rank, card.suit, card.model_fields_set) == ("A", "spades", {"rank"})


def test_allowed_modules_are_imported_on_demand_and_others_never() -> None:
    assert "json.tool" not in sys.modules
    data = tabled({"roots": {"a": ["e", "json.tool:X", "A"]}, "objects": []})
    with pytest.raises(SnapshotDataError, match=r"'json\.tool' is not among the allowed modules"):
        decode(data, classes=from_modules(ALLOWED))
    assert "json.tool" not in sys.modules
    with pytest.raises(SnapshotDataError, match=r"json\.tool:X is not an Enum defined there"):
        decode(data, classes=from_modules(ALLOWED | {"json.tool"}))
    assert "json.tool" in sys.modules  # it was allowed, so it could be imported
    with pytest.raises(SnapshotDataError, match="cannot import no_such_module_here"):
        decode(
            tabled({"roots": {"a": ["e", "no_such_module_here:X", "A"]}, "objects": []}),
            classes=from_modules({"no_such_module_here"}),
        )


def test_codec_classes_are_refused_when_their_module_is_not_allowed() -> None:
    data = json.loads(json.dumps(encode({"c": fx.Color.RED})))
    with pytest.raises(SnapshotDataError, match=rf"^roots\['c'\]\[1\]: module '{FX}' is not among"):
        decode(data, classes=from_modules(frozenset()))


def test_unreferenced_entries_are_checked_too() -> None:
    with pytest.raises(SnapshotDataError, match=r"^objects\[1\]\[0\]: unknown tag"):
        decode({"roots": {"a": [0]}, "objects": [["l"], ["zz"]]}, classes=from_modules(ALLOWED))


# ---------------------------------------------------------------------------------------------------- fuzzing


def _rich_value() -> dict[str, Any]:
    shared = [1, "two", 3.0]
    node = fx.Node(1)
    node.next = node
    hand = fx.Hand(cards=[fx.Card(rank="K")], note="x")
    values = dict(VALUES)
    values.update(
        shared=shared,
        again=(shared, {"s": shared}),
        node=node,
        hand=hand,
        hands=[hand, hand],
        error=ValueError("e", shared),
        iterators=[ITERATORS[name]() for name in ITERATORS],
        tree=fx.Tree(name="t", children=[fx.Tree(name="u")]),
        exc=fx.ToolError(1, "m"),
    )
    return values


RICH = json.dumps(encode(_rich_value()))
TAGS = ["l", "d", "u", "s", "fs", "f", "i", "b", "ba", "dt", "tm", "da", "td", "tz", "zi", "dec", "uu", "fr", "c"]
TAGS += ["rg", "e", "m", "dc", "x", "I", "R", "en", "zp", "cn", "rp", "ch", "mp", "fl", "@"]
CLASS_NAMES = [f"{FX}:{name}" for name in ("Color", "Perm", "Card", "Hand", "Point", "Node", "ToolError", "Slotted")]
CLASS_NAMES += ["builtins:ValueError", "builtins:OSError", "os:system", "subprocess:Popen"]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 40)
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.sampled_from(TAGS + CLASS_NAMES + ["nan", "UTC", "A", "$", "2024-01-01", "AAAA"])
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(st.sampled_from(TAGS), st.lists(children, max_size=7)).map(lambda pair: [pair[0], *pair[1]])
        | st.integers(0, 6).map(lambda n: [n])
        | st.dictionaries(
            st.sampled_from(["$", "t", "a", "rank", "suit", "x"]) | st.text(max_size=3), children, max_size=4
        )
    ),
    max_leaves=25,
)


def _decode_only_raises_snapshot_errors(data: Any, allowed: frozenset[str] = ALLOWED) -> None:
    modules = set(sys.modules)
    try:
        decode(data, classes=from_modules(allowed))
    except SnapshotDataError:
        pass
    assert set(sys.modules) == modules


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roots=st.dictionaries(st.text(max_size=3), json_values, max_size=3),
    objects=st.lists(json_values, max_size=6),
    tables=st.fixed_dictionaries(
        {},
        optional={
            "classes": st.lists(st.sampled_from(CLASS_NAMES) | scalars, max_size=4) | scalars,
            "shapes": st.lists(st.lists(st.sampled_from(["rank", "suit", "x"]) | scalars, max_size=3) | scalars)
            | scalars,
        },
    ),
)
def test_fuzz_random_json(roots: dict, objects: list, tables: dict) -> None:
    _decode_only_raises_snapshot_errors({**tables, "roots": roots, "objects": objects})


@settings(max_examples=100, deadline=None)
@given(data=json_values)
def test_fuzz_random_top_level(data: Any) -> None:
    _decode_only_raises_snapshot_errors(data)


def _positions(node: Any, out: list) -> list:
    """Every (container, key) in a JSON tree, in a stable order."""
    keys = range(len(node)) if isinstance(node, list) else list(node) if isinstance(node, dict) else []
    for key in keys:
        out.append((node, key))
        _positions(node[key], out)
    return out


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_snapshots(data: st.DataObject) -> None:
    snapshot = json.loads(RICH)
    for _ in range(data.draw(st.integers(1, 3))):
        positions = _positions(snapshot, [])
        container, key = positions[data.draw(st.integers(0, len(positions) - 1))]
        choice = data.draw(st.integers(0, 3))
        if choice == 0:
            container[key] = data.draw(json_values)
        elif choice == 1 and isinstance(container, list):
            del container[key]
        elif choice == 2 and isinstance(container[key], int) and not isinstance(container[key], bool):
            container[key] += data.draw(st.integers(-2, 2))
        else:
            container[key] = data.draw(scalars)
    _decode_only_raises_snapshot_errors(snapshot)


def test_rich_snapshot_decodes() -> None:
    out = decode(json.loads(RICH), classes=from_modules(ALLOWED))
    assert out["hands"][0] is out["hands"][1] and out["again"][0] is out["shared"]


# ---------------------------------------------------------------------------------------------------- fast paths
# encode tries an optimistic pass first; encode_plain / decode_plain are short paths for plain data.
# Whatever they return must be exactly what the full codec makes; otherwise they give up (None).


def _careful(roots: dict[str, Any]) -> dict:
    from branchc.continuation.codec.encode import _encode

    return _encode(roots, None, optimistic=False, classes=None)


def test_the_optimistic_pass_writes_what_the_careful_pass_writes() -> None:
    rich = _rich_value()
    assert encode(rich) == _careful(rich)
    shared: dict[str, Any] = {"a": 1}
    loop: list[Any] = []
    loop.append(loop)
    for roots in ({"a": [shared, shared]}, {"a": shared, "b": [shared]}, {"l": loop}, {"d": {"in": shared}}):
        assert encode(roots) == _careful(roots)
    assert all(encode(roots)["objects"] for roots in ({"a": [shared, shared]}, {"l": loop}))


def test_an_extension_is_not_asked_about_the_types_it_declines() -> None:
    asked = []

    def extension(value: Any, child: Any, path: str) -> None:
        asked.append(type(value))

    extension.declines = frozenset({date})  # type: ignore[attr-defined]
    data = encode({"d": date(2024, 1, 1), "t": time(1, 2)}, extension=extension)
    assert asked == [time] and data == encode({"d": date(2024, 1, 1), "t": time(1, 2)})


def _shares(x: Any, y: Any) -> bool:
    """Whether any list or dict inside x is also inside y."""

    def containers(v: Any, out: dict) -> dict:
        if type(v) in (list, dict) and id(v) not in out:
            out[id(v)] = v
            for child in v.values() if type(v) is dict else v:
                containers(child, out)
        return out

    return bool(containers(x, {}).keys() & containers(y, {}).keys())


def test_plain_encoding_is_the_full_encoding() -> None:
    from branchc.continuation.codec import encode_plain

    it = iter(range(2, 40, 3))
    next(it)
    values: dict[str, Any] = {"history": [{"role": "user", "content": "hi"}, {"role": "a", "content": None}]}
    values.update(n=3, f=-1.5, t=True, z=None, s="s", nested={"a": [1, [2.5, {"b": {}}], []]}, it=it, empty=[])
    plain = encode_plain(values)
    assert plain is not None and plain == encode(values)["roots"]
    assert not _shares(plain, values)  # copies, never the live lists and dicts
    assert next(it) == 5  # encoding read the iterator's position without moving it


_SHARED, _MESSAGE, _ITERATOR, _CYCLIC = [1], {"x": 1}, iter(range(3)), []
_CYCLIC.append(_CYCLIC)
NOT_PLAIN = {
    "a list held twice": {"a": _SHARED, "b": _SHARED},
    "a dict held twice": {"a": [_MESSAGE, _MESSAGE]},
    "an iterator held twice": {"a": _ITERATOR, "b": [_ITERATOR]},
    "a cycle": {"a": _CYCLIC},
    "a tuple": {"a": (1, 2)},
    "a non-str key": {"a": {1: "x"}},
    "a '$' key": {"a": {"$": 1}},
    "nan": {"a": [math.nan]},
    "a big int": {"a": 10**5000},
    "a list iterator": {"a": iter([1])},
    "an enum": {"a": fx.Color.RED},
    "a date": {"a": [date(2024, 1, 1)]},
}


@pytest.mark.parametrize("name", list(NOT_PLAIN))
def test_plain_encoding_gives_up_on_anything_else(name: str) -> None:
    from branchc.continuation.codec import encode_plain

    assert encode_plain(NOT_PLAIN[name]) is None


python_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=4)
    | st.sampled_from(["$", "l", "@", "I"])
    | st.integers(-2, 5).map(lambda n: iter(range(n))),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=2) | st.sampled_from(["$", "t"]) | st.integers(0, 2), children, max_size=3)
        | st.tuples(children)
    ),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_plain_encoding_is_the_full_encoding_or_none(data: st.DataObject) -> None:
    from branchc.continuation.codec import encode_plain

    roots = data.draw(st.dictionaries(st.text(max_size=3), python_values, max_size=3))
    containers = [v for v in _positions_py(roots) if type(v) in (list, dict)]
    if containers and data.draw(st.booleans()):  # one container held twice
        roots["again"] = data.draw(st.sampled_from(containers))
    plain, full = encode_plain(roots), encode(roots)
    if plain is not None:
        assert full["objects"] == [] and plain == full["roots"]


def _positions_py(x: Any) -> list:
    out = [x]
    if type(x) in (list, tuple):
        for v in x:
            out += _positions_py(v)
    elif type(x) is dict:
        for v in x.values():
            out += _positions_py(v)
    return out


def _picture(x: Any) -> Any:
    """canon(), with range iterators compared by where they are."""
    if type(x) is type(iter(range(0))):
        return ("range_iterator", x.__reduce__()[1:])
    if type(x) is list:
        return ("list", [_picture(v) for v in x])
    if type(x) is dict:
        return ("dict", [(k, _picture(v)) for k, v in x.items()])
    return canon(x)


def test_plain_decoding_is_the_full_decoding() -> None:
    from branchc.continuation.codec import decode_plain

    it = iter(range(2, 40, 3))
    next(it)
    values = {"h": [{"r": "u", "c": "x"}, {"r": "a", "c": None}], "n": 3, "f": 1.5, "d": {"a": [1, [2.5, {}]]}}
    values.update(it=it, e=[])
    roots = json.loads(json.dumps(encode(values)["roots"]))
    roots["ctx"] = ["@", {"t": "ctx"}]  # an extension entry
    marker = object()
    plain = decode_plain(roots, {"ctx": marker})
    full = decode({"roots": roots, "objects": []}, classes=from_modules(ALLOWED), extension=lambda e, c, p: marker)
    assert plain is not None and _picture(plain) == _picture(full)
    assert plain["ctx"] is marker and not _shares(plain, roots)
    assert decode_plain({"x": ["@", {"t": "ctx", "more": 1}]}, {"ctx": marker}) is None
    assert decode_plain({"x": ["@", {"t": "other"}]}, {"ctx": marker}) is None


class _Tag(str):
    """A str that is not a str to `decode` (only Python callers can hand one over)."""


NOT_PLAIN_JSON = {
    "a reference": {"a": [0]},
    "a '$' reference": {"a": {"$": 0}},
    "a tuple": {"a": ["u", 1]},
    "a zero step": {"a": ["I", ["rg", 0, 5, 0], 1]},
    "a bool step": {"a": ["I", ["rg", 0, 5, True], 1]},
    "no position": {"a": ["I", ["rg", 0, 5, 1]]},
    "a str subclass tag": {"a": [_Tag("l"), 1]},
    "a str subclass source tag": {"a": ["I", [_Tag("rg"), 0, 5, 1], 1]},
    "an empty array": {"a": []},
    "an unknown tag": {"a": {"k": ["zz"]}},
    "not JSON": {"a": ["l", date(2024, 1, 1)]},
}


@pytest.mark.parametrize("name", list(NOT_PLAIN_JSON))
def test_plain_decoding_gives_up_on_anything_else(name: str) -> None:
    from branchc.continuation.codec import decode_plain

    assert decode_plain(NOT_PLAIN_JSON[name]) is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roots=st.dictionaries(st.text(max_size=3), json_values, max_size=3))
def test_fuzz_plain_decoding_is_the_full_decoding_or_none(roots: dict) -> None:
    from branchc.continuation.codec import decode_plain

    plain = decode_plain(roots)
    try:
        full = decode({"roots": roots, "objects": []}, classes=from_modules(ALLOWED))
    except SnapshotDataError:
        assert plain is None
        return
    if plain is not None:
        assert _picture(plain) == _picture(full) and not _shares(plain, roots)
