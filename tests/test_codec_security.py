"""The decoder reads untrusted data: every test here plants an attack in a snapshot and checks that
`decode` refuses it with a SnapshotDataError naming the place (and, for a bound, the DecodeLimits
field to raise), in bounded work, running none of the code the data names beyond what the codec
documents. Work is measured by counting, not by timing: the classes below count the calls of
their hooks, and give up past a bound, so that a quadratic or exponential build fails fast."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from enum import Flag, IntFlag
from functools import cached_property
from typing import Any

import pytest
from _codec_tables import tabled
from pydantic import BaseModel, field_validator

import branchc
from branchc.continuation.codec import (
    DecodeLimits,
    NotSerializableError,
    SnapshotDataError,
    decode,
    decode_plain,
    encode,
    from_modules,
)

M = __name__
ALLOWED = frozenset({M})
P = 2**61 - 1  # hash(k * P) == 0 for every int k: CPython's int hash is the value modulo P

CALLS: list[str] = []  # hooks of the classes below that ran
WORK = {"hash": 0, "eq": 0}
BUDGET = 100_000  # hash / eq calls past which a build is quadratic (or worse): the hooks give up


def _tick(kind: str) -> None:
    WORK[kind] += 1
    if WORK[kind] > BUDGET:
        raise RuntimeError(f"{kind} called more than {BUDGET} times")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CALLS.clear()
    WORK.update(hash=0, eq=0)


@dataclasses.dataclass(frozen=True, eq=False)
class Alike:
    """Distinct keys that all hash alike: a dict or set of them takes n * n / 2 comparisons."""

    n: int

    def __hash__(self) -> int:
        _tick("hash")
        return 0

    def __eq__(self, other: object) -> bool:
        _tick("eq")
        return isinstance(other, Alike) and other.n == self.n


@dataclasses.dataclass(frozen=True)
class Pair:
    """A hashable pair whose (generated) hash hashes both halves: shared halves make that exponential."""

    left: Any
    right: Any


@dataclasses.dataclass(frozen=True)
class Same:
    """A key whose generated __hash__ is hash((n,)): every n that is a multiple of 2**61 - 1 hashes alike."""

    n: Any


class Compared:
    """Hashed by identity, but with an __eq__ of its own (building a dict calls it on keys that hash alike)."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        _tick("eq")
        return self is other


@dataclasses.dataclass
class Box:
    content: Any = None


@dataclasses.dataclass
class Hooked:
    """Every hook that a restore must not run records itself."""

    x: int = 0

    def __post_init__(self) -> None:
        CALLS.append("Hooked.__post_init__")

    def __setattr__(self, name: str, value: Any) -> None:
        CALLS.append(f"Hooked.__setattr__({name})")
        object.__setattr__(self, name, value)

    def __getattribute__(self, name: str) -> Any:
        if name == "__dict__":
            CALLS.append("Hooked.__getattribute__(__dict__)")
        return object.__getattribute__(self, name)

    def __iter__(self) -> Any:
        CALLS.append("Hooked.__iter__")
        return iter([])

    def __repr__(self) -> str:
        CALLS.append("Hooked.__repr__")
        return "Hooked()"

    def total(self) -> int:
        return self.x


@dataclasses.dataclass
class Cached:
    x: int

    @cached_property
    def double(self) -> int:
        return 2 * self.x


class HookedModel(BaseModel):
    name: str

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        CALLS.append("HookedModel.__new__")
        return super().__new__(cls)

    def __init__(self, **data: Any) -> None:
        CALLS.append("HookedModel.__init__")
        super().__init__(**data)

    def __setattr__(self, name: str, value: Any) -> None:
        CALLS.append(f"HookedModel.__setattr__({name})")
        super().__setattr__(name, value)

    def model_post_init(self, context: Any) -> None:
        CALLS.append("HookedModel.model_post_init")

    @field_validator("name")
    @classmethod
    def _check(cls, value: str) -> str:
        CALLS.append("HookedModel.validator")
        return value


class HookedError(Exception):
    def __new__(cls, *args: Any) -> Any:
        CALLS.append("HookedError.__new__")
        return super().__new__(cls, *args)

    def __init__(self, *args: Any) -> None:
        CALLS.append("HookedError.__init__")
        super().__init__(*args)

    def __setattr__(self, name: str, value: Any) -> None:
        CALLS.append(f"HookedError.__setattr__({name})")
        super().__setattr__(name, value)

    def describe(self) -> str:
        return "the method"


class ExitingError(ValueError, SystemExit):
    """An Exception that is also a SystemExit: raised, it still ends the program."""


class Perm(Flag):
    R = 4
    W = 2
    X = 1

    @classmethod
    def _missing_(cls, value: Any) -> Any:
        CALLS.append(f"Perm._missing_({value!r})")
        return super()._missing_(value)


class Bits(IntFlag):
    """An IntFlag takes any int, and keeps a member for each one it is called with."""

    A = 1
    B = 2


def load(data: Any, **kwargs: Any) -> dict[str, Any]:
    """decode after a JSON round trip, as a snapshot travels."""
    return decode(tabled(json.loads(json.dumps(data))), classes=from_modules(ALLOWED), **kwargs)


def refused(data: Any, path: str, *fragments: str, **kwargs: Any) -> SnapshotDataError:
    with pytest.raises(SnapshotDataError) as caught:
        load(data, **kwargs)
    error = caught.value
    assert error.path == path, str(error)
    for fragment in fragments:
        assert fragment in error.problem, str(error)
    assert len(str(error)) < 2_000  # an error never quotes the data at length
    return error


def graph(x: Any, *objects: Any) -> dict[str, Any]:
    return {"roots": {"x": x}, "objects": list(objects)}


def flat(pairs: Any) -> list:
    return [part for pair in pairs for part in pair]


# ---------------------------------------------------------------------------------------------------- hash flooding

EXC = ["x", "builtins:ValueError", [], {}, None, None, False, {}]  # a plain exception, to build on


@pytest.mark.parametrize(
    "container",
    [
        lambda keys: ["d", *flat((k, 0) for k in keys)],
        lambda keys: ["s", *keys],
        lambda keys: ["fs", *keys],
        lambda keys: ["DK", ["l", *keys]],
        lambda keys: ["DI", ["l", *(["u", k, 0] for k in keys)]],
    ],
    ids=["dict", "set", "frozenset", "dict keys iterator", "dict items iterator"],
)
def test_ints_that_hash_alike_are_refused(container: Any) -> None:
    # 40,000 such keys take 10 s of CPU for 1 MB of data to build as a dict or set: it is quadratic
    keys = [k * P for k in range(1, 5_001)]
    refused(graph(container(keys)), "roots['x']", "5,000 ", "hash alike", "DecodeLimits.max_same_hash = 8")


def test_keys_that_hash_alike_are_refused() -> None:
    keys = [["dc", f"{M}:Same", {"n": n * P}] for n in range(1, 2_001)]
    for container in (["s", *keys], ["d", *flat((k, 0) for k in keys)]):
        refused(graph(container), "roots['x']", "2,000 ", "hash alike")


@pytest.mark.parametrize("container", ["s", "d", "fs", "DK"])
def test_a_key_whose_class_hashes_with_its_own_code_is_refused_before_it_runs(container: str) -> None:
    keys = [["dc", f"{M}:Alike", {"n": n}] for n in range(3)]
    data = {
        "s": ["s", *keys],
        "fs": ["fs", *keys],
        "d": ["d", *flat((k, 0) for k in keys)],
        "DK": ["DK", ["l", *keys]],
    }[container]
    where = {"s": "roots['x']", "fs": "roots['x']", "d": "roots['x'][1]", "DK": "roots['x'][1][1]"}[container]
    refused(graph(data), where, "Alike.__hash__ is code of its own", "frozen dataclass")
    refused(graph(["u", ["s", ["u", 1, ["o", f"{M}:Compared", {}]]]]), "roots['x'][1]", "Compared.__eq__ is code")
    assert WORK == {"hash": 0, "eq": 0}


def test_encode_refuses_a_key_whose_class_hashes_with_its_own_code() -> None:
    for value, path in [
        ({Alike(1): "a"}, "x<key 0>"),
        ({("t", Alike(1))}, "x<item 0>"),
        (frozenset({Same(Alike(2))}), "x<item 0>"),
        (iter({1: 2, Alike(3): 4}.items()), "x<source>[1]"),
    ]:
        with pytest.raises(NotSerializableError, match=r"hashing it runs code of its own: Alike\.__hash__") as caught:
            encode({"x": value}, classes=lambda cls: True)
        assert caught.value.path == path, str(caught.value)
    WORK.update(hash=0, eq=0)
    assert load(encode({"x": {Same(1), Same((2, "b"))}}))["x"] == {Same(1), Same((2, "b"))}


def test_dicts_in_dataclass_and_model_fields_go_through_the_same_check() -> None:
    flood = ["d", *flat((k * P, 0) for k in range(1, 1_001))]
    refused(graph(["dc", f"{M}:Box", {"content": flood}]), "roots['x'][2]['content']", "hash alike")
    refused(graph(["dc", f"{M}:Box", {"content": ["l", flood]}]), "roots['x'][2]['content'][1]", "hash alike")
    refused(graph(["x", "builtins:ValueError", [flood], {}, None, None, False, {}]), "roots['x'][2][0]", "alike")


def test_big_dicts_and_sets_with_distinct_hashes_still_decode() -> None:
    big = {k: str(k) for k in range(40_000)}
    values = {
        "dict": big,
        "set": set(range(40_000)),
        "tuples": {(k, -k) for k in range(40_000)},
        "floats": frozenset(k / 7 for k in range(40_000)),
        "a few alike": {-1: "a", -2: "b", **{k * P: k for k in range(1, 7)}},  # hash(-1) == hash(-2)
        "keys left": iter(big),
        "items left": iter(big.items()),
    }
    out = load(encode(values))
    assert out["dict"] == big and out["set"] == values["set"] and out["tuples"] == values["tuples"]
    assert out["floats"] == values["floats"] and out["a few alike"] == values["a few alike"]
    assert list(out["keys left"]) == list(big) and list(out["items left"]) == list(big.items())


def test_a_limit_can_be_raised() -> None:
    data = graph(["s", *(k * P for k in range(1, 21))])
    refused(data, "roots['x']", "20 items hash alike")
    assert load(data, limits=DecodeLimits(max_same_hash=20))["x"] == {k * P for k in range(1, 21)}


@pytest.mark.parametrize(
    ("x", "path", "what"),
    [
        (["d", 1, "a", 1, "b"], "roots['x'][3]", "the key 1 again"),
        (["d", "k", 1, "k", 2], "roots['x'][3]", "the key 'k' again"),
        (["d", 1, "a", 1.0, "b"], "roots['x'][3]", "the key 1.0 again"),
        (["s", 7, 7], "roots['x'][2]", "the item 7 again"),
        (["fs", ["u", 1], ["u", 1]], "roots['x'][2]", "the item (1,) again"),
        (["DK", ["l", 3, 3]], "roots['x'][1][2]", "the key 3 again"),
        (["DI", ["l", ["u", 3, "a"], ["u", 3, "b"]]], "roots['x'][1][2]", "the key 3 again"),
        (["s", *([5] * 10_000)], "roots['x']", "10,000 items hash alike"),
    ],
)
def test_a_repeated_key_is_refused(x: Any, path: str, what: str) -> None:
    # nothing encode writes repeats a key: a repeated one is tampering (and the cheapest flood)
    refused(graph(x), path, what)


# ---------------------------------------------------------------------------------------------------- shared parts


def test_hashing_a_key_of_shared_tuples_is_bounded() -> None:
    # hash((t, t)) hashes t twice, each time: 25 entries of data, 2**24 visits to hash the last
    objects = [["u", 0, 0]] + [["u", [k], [k]] for k in range(24)]
    refused(graph(["s", [24]], *objects), "roots['x']", "more than 10,000,000 values", "DecodeLimits.max_values")
    # built in order (nothing refers to them before the last), each entry is shallow to decode
    objects = [["u", 0, 0]] + [["u", [k], [k]] for k in range(200)] + [["d", [200], 1]]  # 2**200 visits
    refused({"roots": {}, "objects": objects}, "objects[201]", "DecodeLimits.max_values")


def test_hashing_a_key_of_shared_dataclasses_is_bounded() -> None:
    objects = [["dc", f"{M}:Pair", {"left": 0, "right": 0}]]
    objects += [["dc", f"{M}:Pair", {"left": [k], "right": [k]}] for k in range(40)]
    start = time.perf_counter()
    refused(graph(["s", [40]], *objects), "roots['x']", "DecodeLimits.max_values")
    assert time.perf_counter() - start < 2  # refused before hashing it (2**40 visits)
    # within the limit, it is a set like any other (its generated hash runs, as documented)
    objects = objects[:11]
    (key,) = load(graph(["s", [10]], *objects))["x"]
    assert key.left is key.right


def test_shared_values_are_fine_where_nothing_hashes_them() -> None:
    objects = [["u", 0, 0]] + [["u", [k], [k]] for k in range(60)]
    out = load(graph(["l", [60]], *objects))["x"]
    assert out[0][0] is out[0][1]


# ---------------------------------------------------------------------------------------------------- size bounds


def test_nesting_is_bounded() -> None:
    deep: Any = 1
    for _ in range(60):
        deep = ["l", deep]
    error = refused(
        graph(deep), "roots['x']" + "[1]" * 50, "nested more than 50 deep", limits=DecodeLimits(max_depth=50)
    )
    assert "DecodeLimits.max_depth = 50" in error.problem
    out = load(graph(deep), limits=DecodeLimits(max_depth=60))["x"]
    for _ in range(60):
        (out,) = out
    assert out == 1


def test_references_do_not_hide_depth() -> None:
    # each entry nests 20 deep and ends at the one before: built in order, each is shallow to
    # decode, yet the value nests 20 deeper per entry
    def chain(entries: int) -> list:
        objects: list = [["l"]]
        for k in range(1, entries):
            x: Any = [k - 1]
            for _ in range(20):
                x = ["l", x]
            objects.append(x)
        return objects

    limits = DecodeLimits(max_depth=50)
    refused({"roots": {}, "objects": chain(4)}, "objects[3]" + "[1]" * 20, "nested more than 50 deep", limits=limits)
    refused({"roots": {"x": [3]}, "objects": chain(4)}, "objects[1]" + "[1]" * 10, "nested more", limits=limits)
    assert load({"roots": {"x": [2]}, "objects": chain(3)}, limits=limits)["x"]


def test_a_million_deep_tuple_cannot_be_built_from_a_chain_of_entries() -> None:
    # 10,000 entries of 100 nested tuples each, every one ending at the one before, then a set of
    # the last: hashing a tuple nested a million deep overflows CPython's C stack (a crash, not
    # an error), so it runs in a child process
    script = textwrap.dedent(
        """
        import json
        from branchc.continuation.codec import SnapshotDataError, decode, from_modules

        objects = [["u", 1]]
        for k in range(1, 10_000):
            x = [k - 1]
            for _ in range(100):
                x = ["u", x]
            objects.append(x)
        objects.append(["s", [9_999]])
        data = json.loads(json.dumps({"roots": {}, "objects": objects}))
        try:
            decode(data, classes=from_modules(frozenset()))
            print("decoded")
        except SnapshotDataError as error:
            print("refused:", error.problem)
        """
    )
    root = os.path.dirname(os.path.dirname(branchc.__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"the decoder crashed (exit {done.returncode}): {done.stderr[-500:]}"
    assert done.stdout.startswith("refused: nested more than 500 deep"), done.stdout


def test_the_number_of_values_is_bounded() -> None:
    limits = DecodeLimits(max_values=1_000)
    refused(graph(["l", *range(2_000)]), "roots['x']", "more than 1,000 values", limits=limits)
    refused(graph(["l", *({"a": k} for k in range(1_000))]), "roots['x']", "more than 1,000 values", limits=limits)
    refused(graph(["dc", f"{M}:Box", {"content": ["l", *range(999)]}]), "roots['x'][2]['content']", limits=limits)
    assert len(load(graph(["l", *range(900)]), limits=limits)["x"]) == 900


def test_limits_are_checked_and_frozen() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        DecodeLimits(max_depth=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DecodeLimits().max_depth = 10**6  # type: ignore[misc]
    with pytest.raises(TypeError, match="DecodeLimits"):
        decode(graph(1), classes=from_modules(ALLOWED), limits={"max_depth": 5})  # type: ignore[arg-type]


def test_the_plain_fast_path_keeps_the_same_limits() -> None:
    deep: Any = 1
    for _ in range(10):
        deep = ["l", deep]
    roots = {"x": deep, "y": ["l", *range(100)]}
    assert decode_plain(roots) is not None
    assert decode_plain(roots, limits=DecodeLimits(max_depth=9)) is None
    assert decode_plain(roots, limits=DecodeLimits(max_values=50)) is None
    assert (
        decode_plain(roots, limits=DecodeLimits(max_depth=10, max_values=130))["x"]
        == load({"roots": roots, "objects": []}, limits=DecodeLimits(max_depth=10, max_values=130))["x"]
    )
    refused({"roots": roots, "objects": []}, "roots['x']" + "[1]" * 9, "deep", limits=DecodeLimits(max_depth=9))


def test_big_ints_are_bounded() -> None:
    million = "f" * 250_000  # 1,000,000 bits
    refused(graph(["i", million]), "roots['x'][1]", "250,000 hex digits", "DecodeLimits.max_int_bits = 100,000")
    refused(graph(["i", "0" * 30_000 + "1"]), "roots['x'][1]", "hex digits")
    assert load(graph(["i", "f" * 25_000]))["x"] == 2**100_000 - 1
    # a Fraction's gcd is quadratic (over a second at 1,000,000 bits): its parts are bounded too,
    # also when they come inline (data that did not come through JSON)
    big = ["i", "f" * 20_000]
    assert load(graph(["fr", big, ["i", "e" * 20_000]]))["x"].denominator > 1
    refused(graph(["fr", big, ["i", "e" * 30_000]]), "roots['x'][2][1]", "max_int_bits")
    with pytest.raises(SnapshotDataError, match=r"roots\['x'\]\[1\]: an int of 200,001 bits"):
        decode(graph(["fr", 2**200_000, 3]), classes=from_modules(ALLOWED))
    assert load(graph(["i", "f" * 30_000]), limits=DecodeLimits(max_int_bits=120_000))["x"] == 2**120_000 - 1


def test_encode_refuses_ints_that_decode_would_refuse() -> None:
    with pytest.raises(NotSerializableError, match=r"^x\[0\]: a big int cannot travel.*200,001 bits.*max_int_bits"):
        encode({"x": [2**200_000]})
    assert load(encode({"x": [2**100_000 - 1]}))["x"] == [2**100_000 - 1]


@pytest.mark.parametrize("tag", ["dt", "tm", "da"])
def test_long_iso_texts_are_refused_before_they_are_parsed_or_quoted(tag: str) -> None:
    refused(graph([tag, "2024-01-01T00:00:00" + "0" * 1_000_000]), "roots['x'][1]", "expected ISO text")


def test_errors_quote_the_data_briefly_and_run_none_of_its_code() -> None:
    # a huge int is shown by its size (its repr would raise ValueError: int_max_str_digits)
    refused(graph(["f", ["i", "f" * 5_000]]), "roots['x'][1]", "got <int of 20,000 bits>")
    # a value made of shared parts is shown in bounded time (its repr unfolds them: 2**40 here)
    objects = [["u", 0, 0]] + [["u", [k], [k]] for k in range(40)]
    refused(graph(["f", [40]], *objects), "roots['x'][1]", "expected a string, got ((((")
    # an instance is shown by its class: its __repr__ does not run
    refused(graph(["f", ["dc", f"{M}:Hooked", {"x": 1}]]), "roots['x'][1]", "got <Hooked>")
    assert CALLS == []
    refused(graph(["zi", "a/" * 1_000_000 + "b"]), "roots['x'][1]", "not a time zone key")
    with pytest.raises(SnapshotDataError, match=r"^roots\['xxxx*\.\.\.\]\[0\]: unknown tag 'zz'$"):
        decode({"roots": {"x" * 1_000_000: ["zz"]}, "objects": []}, classes=from_modules(ALLOWED))


# ---------------------------------------------------------------------------------------------------- exceptions


def _exc(cls: str, args: list | None = None, **parts: Any) -> list:
    entry = ["x", cls, args or [], {}, None, None, False, {}]
    for i, name in ((3, "attrs"), (4, "cause"), (5, "context"), (7, "keywords")):
        if name in parts:
            entry[i] = parts[name]
    return entry


@pytest.mark.parametrize(
    "cls", ["builtins:SystemExit", "builtins:KeyboardInterrupt", "builtins:GeneratorExit", f"{M}:ExitingError"]
)
def test_only_exceptions_that_except_exception_catches_travel(cls: str) -> None:
    what = "derives from SystemExit" if "Exiting" in cls else "is a BaseException but not an Exception"
    refused(graph(_exc(cls, [0])), "roots['x'][1]", what, "only Exception subclasses travel")
    refused(graph(_exc("builtins:ValueError", cause=_exc(cls))), "roots['x'][4][1]", what)
    refused(graph(_exc("builtins:ValueError", context=_exc(cls))), "roots['x'][5][1]", what)
    refused(graph(_exc("builtins:ValueError", ["l", _exc(cls)])), "roots['x'][2][1][1]", what)


def test_base_exception_groups_do_not_travel() -> None:
    group = _exc("builtins:BaseExceptionGroup", ["m", ["l", _exc("builtins:ValueError")]])
    refused(graph(group), "roots['x'][1]", "BaseExceptionGroup is a BaseException but not an Exception")
    out = load(graph(_exc("builtins:ExceptionGroup", ["m", ["l", _exc("builtins:ValueError")]])))["x"]
    assert type(out) is ExceptionGroup and type(out.exceptions[0]) is ValueError


@pytest.mark.parametrize("value", [SystemExit(2), KeyboardInterrupt(), GeneratorExit(), ExitingError("x")])
def test_encode_refuses_base_exceptions_with_a_hint(value: BaseException) -> None:
    hint = r"^e: a .* cannot travel.*a BaseException but not an Exception.*before the yield"
    with pytest.raises(NotSerializableError, match=hint):
        encode({"e": value})
    error = ValueError("outer")
    error.__context__ = value
    with pytest.raises(NotSerializableError, match=r"^e\.__context__: "):
        encode({"e": error})


def test_a_builtin_exception_comes_back_as_the_class_named() -> None:
    # OSError(2, ...) makes a FileNotFoundError: the class named is what the resumed code sees
    refused(graph(_exc("builtins:OSError", [2, "gone"])), "roots['x'][2]", "make a FileNotFoundError, not a OSError")
    assert type(load(graph(_exc("builtins:OSError", ["just text"])))["x"]) is OSError
    assert type(load(encode({"x": FileNotFoundError(2, "gone")}))["x"]) is FileNotFoundError


@pytest.mark.parametrize(
    ("cls", "args", "what"),
    [
        # str() of this one reads out of bounds (CPython 3.11 crashes, in whatever prints it)
        ("UnicodeDecodeError", ["utf-8", ["b", "YWJj"], -100_000_000, -99_999_999, "bad"], "not positions"),
        ("UnicodeDecodeError", ["utf-8", ["b", "YWJj"], 2, 9, "bad"], "start 2 and end 9 are not positions"),
        ("UnicodeEncodeError", ["utf-8", "abc", -5, 1, "bad"], "not positions"),
        ("UnicodeTranslateError", ["abc", 3, 1, "bad"], "not positions"),
        ("UnicodeDecodeError", ["utf-8", "text, not bytes", 0, 1, "bad"], "expected an object of the right type"),
        ("SyntaxError", ["msg", ["u", "f.py", 1, 2, ["b", "YWJj"]]], "expected str or None"),
        ("SyntaxError", ["msg", ["u", "f.py", True, 2, "x"]], "expected str or None"),
        ("SyntaxError", ["msg", ["u", "f.py"]], "expected (message, (filename"),
    ],
)
def test_builtin_exception_args_are_what_their_c_code_trusts(cls: str, args: list, what: str) -> None:
    refused(graph(_exc(f"builtins:{cls}", args)), "roots['x'][2]", f"{cls} args", what)


def test_builtin_exceptions_with_sound_args_still_travel() -> None:
    try:
        b"\xff".decode()
    except UnicodeDecodeError as caught:
        decode_error = caught
    try:
        compile("1 +", "f.py", "exec")
    except SyntaxError as caught:
        syntax_error = caught
    out = load(encode({"d": decode_error, "s": syntax_error, "e": UnicodeEncodeError("ascii", "é", 0, 1, "no")}))
    assert str(out["d"]) == str(decode_error) and str(out["e"]).endswith("in position 0: no")
    assert (out["s"].filename, out["s"].lineno, out["s"].text) == ("f.py", 1, syntax_error.text)


def test_encode_refuses_exception_args_that_decode_would_refuse() -> None:
    with pytest.raises(NotSerializableError, match=r"^e: a UnicodeDecodeError cannot travel.*not positions"):
        encode({"e": UnicodeDecodeError("utf-8", b"abc", -5, 1, "bad")})


def test_user_exceptions_restore_without_running_their_code() -> None:
    error = HookedError("boom", 3)
    error.code = 404
    data = json.loads(json.dumps(encode({"e": error})))
    CALLS.clear()
    out = decode(data, classes=from_modules(ALLOWED))["e"]
    assert CALLS == []  # no __new__, __init__ or __setattr__ of HookedError
    assert type(out) is HookedError and out.args == ("boom", 3) and out.code == 404


def test_attributes_cannot_hide_methods() -> None:
    # {"describe": ...} in an instance __dict__ is what `error.describe()` would call
    refused(
        graph(_exc(f"{M}:HookedError", ["boom"], attrs={"describe": "gotcha"})),
        "roots['x'][3]['describe']",
        "hide the method HookedError.describe",
    )
    refused(graph(_exc("builtins:ValueError", attrs={"with_traceback": 1})), "roots['x'][3]['with_traceback']", "hide")
    refused(graph(["dc", f"{M}:Hooked", {"x": 1}, {"total": 5}]), "roots['x'][3]['total']", "hide the method")
    # attributes that hide no method, and cached_property values (meant to be hidden), still travel
    cached = Cached(4)
    assert cached.double == 8
    out = load(encode({"c": cached, "e": _with(ValueError("v"), note=1)}))
    assert out["c"].__dict__ == {"x": 4, "double": 8} and out["e"].note == 1
    error = HookedError("x")
    error.describe = "a str"  # type: ignore[method-assign,assignment]
    with pytest.raises(NotSerializableError, match="hides the method of that name"):
        encode({"e": error})


def _with(error: Exception, **attrs: Any) -> Exception:
    error.__dict__.update(attrs)
    return error


def test_causes_and_contexts_must_be_exceptions() -> None:
    refused(graph(_exc("builtins:ValueError", cause=5)), "roots['x'][4]", "cannot restore: TypeError")
    refused(graph(_exc("builtins:ValueError", cause=["dc", f"{M}:Box", {}])), "roots['x'][4]", "cannot restore")


# ---------------------------------------------------------------------------------------------------- no code runs


def test_dataclasses_restore_without_running_their_code() -> None:
    hooked = Hooked(3)
    object.__getattribute__(hooked, "__dict__")["extra"] = [1]
    data = json.loads(json.dumps(encode({"h": hooked})))
    CALLS.clear()
    out = decode(data, classes=from_modules(ALLOWED))["h"]
    assert CALLS == []  # no __post_init__, __setattr__, __getattribute__
    assert object.__getattribute__(out, "__dict__") == {"x": 3, "extra": [1]}


def test_models_restore_without_running_their_code() -> None:
    data = json.loads(json.dumps(encode({"m": HookedModel(name="a")})))
    CALLS.clear()
    out = decode(data, classes=from_modules(ALLOWED))["m"]
    assert CALLS == []  # no __new__, __init__, __setattr__, validator, model_post_init
    assert type(out) is HookedModel and out.name == "a" and out.model_fields_set == {"name"}


def test_a_models_fields_set_names_its_fields() -> None:
    model = ["m", f"{M}:HookedModel", {"name": "a"}, ["name", "__class__"]]
    refused(graph(model), "roots['x'][3]", "expected names of fields")
    # a set of names comes from the table, whose entries are distinct names
    refused(graph(["m", f"{M}:HookedModel", {"name": "a"}, ["name", "name"]]), "shapes[1]", "a name comes twice")


def test_iterator_builders_take_iterators_only() -> None:
    # enumerate, zip, map and filter call iter() on what they run over: on an object that is not
    # an iterator, that would run its class's __iter__
    hooked = ["dc", f"{M}:Hooked", {"x": 1}]
    refused(graph(["en", hooked, 0]), "roots['x'][1]", "expected an iterator, got a Hooked")
    refused(graph(["zp", False, ["I", ["l"]], hooked]), "roots['x'][3]", "expected an iterator")
    refused(graph(["mp", "str", hooked]), "roots['x'][2]", "expected an iterator")
    refused(graph(["fl", None, ["m", f"{M}:HookedModel", {"name": "a"}, []]]), "roots['x'][2]", "iterator")
    assert CALLS == []
    values = {"e": enumerate(iter([1, 2])), "z": zip(iter("ab"), iter([1]), strict=False), "m": map(str, iter([1]))}
    out = load(encode(values))
    assert list(out["e"]) == [(0, 1), (1, 2)] and list(out["z"]) == [("a", 1)] and list(out["m"]) == ["1"]


def test_a_flag_value_must_be_an_int() -> None:
    refused(graph(["e", f"{M}:Perm", None, "rwx"]), "roots['x'][3]", "expected an integer")
    refused(graph(["e", f"{M}:Perm", None, ["l", 1]]), "roots['x'][3]", "expected an integer")
    assert CALLS == []  # Perm._missing_ did not see the data
    assert load(encode({"p": Perm.R | Perm.W}))["p"] is Perm.R | Perm.W


def test_a_flag_value_is_a_combination_of_members() -> None:
    # each value an IntFlag is called with stays in its class for good: 100,000 of them hold 40 MB
    cached = len(Bits._value2member_map_)
    for value in (4, 2**40, -1, 3 + 8):
        refused(graph(["e", f"{M}:Bits", None, value]), "roots['x'][3]", "has bits that no member of Bits has")
    assert len(Bits._value2member_map_) == cached
    assert load(encode({"b": Bits.A | Bits.B}))["b"] == 3
    with pytest.raises(NotSerializableError, match=r"^b: a .*Bits cannot travel.*combinations of members"):
        encode({"b": Bits(8)})


def test_functions_named_by_map_and_filter_are_few() -> None:
    for name in ("eval", "exec", "__import__", "getattr", "open", "breakpoint", "str.format", "print"):
        refused(graph(["mp", name, ["I", ["l"]]]), "roots['x'][1]", "not a function that may travel")


@pytest.mark.parametrize(
    "key",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "Europe/../../../etc/passwd",
        "Europe/./Paris",
        "Europe//Paris",
        "..",
        "Europe/Paris/",
        "C:\\Windows\\win.ini",
        "Europe/Paris\x00",
        "x" * 300,
    ],
)
def test_time_zone_keys_are_plain_relative_names(key: str) -> None:
    refused(graph(["zi", key]), "roots['x'][1]", "not a time zone key")


def test_base64_is_strict() -> None:
    refused(graph(["b", "YW Jj"]), "roots['x']", "cannot restore")
    refused(graph(["b", "YWJj!"]), "roots['x']", "cannot restore")
    refused(graph(["b", "é"]), "roots['x']", "cannot restore")
