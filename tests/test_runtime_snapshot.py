"""snapshot() and resume() take a short path for one generator of plain data (codec.encode_plain /
decode_plain). It must write and read exactly what the full path does, and keep its guarantees:
no aliasing either way, identity and cycles, complete validation with the place named."""

from __future__ import annotations

import gc
import json
import re
from typing import Any

import pytest
from differential import load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from branchc import release, resume, snapshot
from branchc.continuation import snapshots
from branchc.continuation.codec import DEFAULT_LIMITS, DecodeLimits, SnapshotDataError, encode
from branchc.continuation.errors import SnapshotError
from branchc.continuation.generator import state
from branchc.runtime.context import Context

TOOL = """
@resumable
def tool(n, ctx=None):
    history = []
    notes = {"count": 0, "ratio": 0.5, "flag": True, "none": None, "nested": {"a": [1, 2.5, {"b": "c"}]}}
    for i in range(n):
        reply = yield {"kind": "sample", "prompt": f"step {i}"}
        history.append({"role": "user", "content": f"step {i}"})
        history.append({"role": "assistant", "content": reply})
        notes["count"] += 1
    return history, notes, ctx
"""

SHARED = """
@resumable
def tool():
    a = [1, {"x": 2}]
    b = a
    c = []
    c.append(c)
    got = yield 1
    return a, b, c, got
"""


def full_snapshot(generator: Any) -> dict:
    """What the full path writes (the codec with the snapshot extension), for comparison."""
    return {"branchc": snapshots.VERSION, "graph": encode({"gen": generator}, extension=snapshots._encode_extension)}


def full_resume(data: Any, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(snapshots, "_plain_resume", lambda *args: None)
        return resume(data, **kwargs)


def run(generator: Any, answers: list[str]) -> list[Any]:
    out = []
    try:
        for answer in answers:
            out.append(generator.send(answer))
    except StopIteration as stop:
        out.append(("return", stop.value))
    return out


def test_the_plain_path_writes_what_the_full_path_writes() -> None:
    module = load(TOOL, compiled=True)
    generator = module.tool(3)
    assert snapshots._plain_snapshot(generator) == full_snapshot(generator)  # created
    next(generator)
    for answer in ("one", "two"):
        assert snapshots._plain_snapshot(generator) is not None
        assert snapshot(generator) == full_snapshot(generator)
        generator.send(answer)
    with pytest.raises(StopIteration):
        generator.send("three")
    assert snapshot(generator) == full_snapshot(generator)  # done


def test_the_plain_path_resumes_what_the_full_path_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load(TOOL, compiled=True)
    generator = module.tool(4)
    next(generator)
    generator.send("one")
    data = json.loads(json.dumps(snapshot(generator)))
    fast, full = resume(data), full_resume(data, monkeypatch)
    assert full_snapshot(fast) == full_snapshot(full) == data
    assert run(fast, ["a", "b", "c"]) == run(full, ["a", "b", "c"])


def test_a_snapshot_does_not_alias_the_live_generator() -> None:
    module = load(TOOL, compiled=True)
    generator = module.tool(4)
    next(generator)
    generator.send("one")
    taken = snapshot(generator)
    text = json.dumps(taken)
    live = state(generator)[2]
    live["history"][1]["content"] = "changed"
    live["notes"]["nested"]["a"].append("more")
    generator.send("two")
    assert json.dumps(taken) == text


def test_resumes_share_nothing_with_the_data_or_each_other() -> None:
    module = load(TOOL, compiled=True)
    generator = module.tool(4)
    next(generator)
    generator.send("one")
    data = json.loads(json.dumps(snapshot(generator)))
    text = json.dumps(data)
    first, second = resume(data), resume(data)
    one, two = state(first)[2], state(second)[2]
    for name in ("history", "notes"):
        assert one[name] == two[name] and one[name] is not two[name]
    assert one["history"][0] is not two["history"][0]
    assert one["notes"]["nested"]["a"] is not two["notes"]["nested"]["a"]
    one["history"][0]["content"] = "changed"
    one["notes"]["nested"]["a"].append("more")
    first.send("two")
    assert json.dumps(data) == text
    assert two["history"][0]["content"] == "step 0"


def test_the_context_travels_on_the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load(TOOL, compiled=True)
    generator = module.tool(1, Context(None))
    next(generator)
    assert snapshots._plain_snapshot(generator) is not None
    assert snapshot(generator) == full_snapshot(generator)
    data = json.loads(json.dumps(snapshot(generator)))
    here = Context(None)
    assert run(resume(data, context=here), ["x"])[-1][1][2] is here
    assert run(full_resume(data, monkeypatch, context=here), ["x"])[-1][1][2] is here


def test_shared_and_cyclic_values_take_the_full_path_and_keep_their_identity() -> None:
    module = load(SHARED, compiled=True)
    generator = module.tool()
    next(generator)
    assert snapshots._plain_snapshot(generator) is None
    data = json.loads(json.dumps(snapshot(generator)))
    assert data["graph"]["objects"]
    (_, (a, b, c, got)) = run(resume(data), ["x"])[-1]
    assert a is b and a == [1, {"x": 2}] and c[0] is c and got == "x"


def tampered(change: Any) -> dict:
    module = load(TOOL, compiled=True)
    generator = module.tool(4)
    next(generator)
    generator.send("one")
    data = json.loads(json.dumps(snapshot(generator)))
    change(data["graph"]["roots"]["gen"][1])
    return data


GEN = re.escape("roots['gen'][1]")
BAD = [
    (
        lambda e: e["vars"]["history"].append({"role": ["zz"]}),
        rf"^{GEN}\.vars\['history'\]\[3\]\['role'\]\[0\]: unknown",
    ),
    (
        lambda e: e["vars"].__setitem__("_bc_it1", ["I", ["rg", 0, 4, 0], 1]),
        rf"^{GEN}\.vars\['_bc_it1'\]\[1\]: cannot restore: ValueError",
    ),
    (lambda e: e["vars"]["notes"].__setitem__("$", 0), rf"^{GEN}\.vars\['notes'\]: expected a reference"),
    (lambda e: e["vars"].__setitem__("nope", 1), rf"^{GEN}\.vars: .*keeps no variable 'nope' at suspended 1"),
    (lambda e: e.__setitem__("label", 99), rf"^{GEN}\.label: .*has no suspension point 99"),
    (lambda e: e.__setitem__("free", {"x": ["l"]}), rf"^{GEN}\.free\['x'\]: .*closes over no such cell"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_tampered_data_still_names_the_place(change: Any, message: str) -> None:
    with pytest.raises(SnapshotDataError, match=message):
        resume(tampered(change))


def test_the_default_allowlist_follows_newly_compiled_modules() -> None:
    first = load(TOOL, compiled=True).tool(2)
    next(first)
    resume(json.loads(json.dumps(snapshot(first))))  # fills the allowlist cache
    later = load(TOOL.replace("def tool", "def later"), compiled=True).later(2)
    next(later)
    assert run(resume(json.loads(json.dumps(snapshot(later)))), ["a", "b"])[-1][0] == "return"


# -- histories of models on the short path (issue 22) ---------------------------------------------

HISTORY = """
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: str
    content: str


class Note(BaseModel):
    text: str = ""
    tags: list[str] = []
    count: int = 0
    inner: Message | None = None

    @cached_property
    def size(self) -> int:
        return len(self.text)


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")

    x: int = 0


class Secret(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    item: Any = None
    _hidden: Any = PrivateAttr(default=None)


@resumable
def chat(history, extra=None):
    step = 0
    while True:
        got = yield step
        step += 1
        if got is not None:
            history = [*history, got]


@resumable
def compiled_sub(tag, log):
    try:
        yield tag
    finally:
        log.append(tag)
"""


def _messages(module: Any, n: int = 6) -> list:
    return [module.Message(role="user" if i % 2 else "assistant", content=f"line {i} é\u2028") for i in range(n)]


def _histories(module: Any) -> dict[str, Any]:
    noted = module.Note(text="abc", tags=["x", "y"], count=3, inner=module.Message(role="user", content="hi"))
    assert noted.size == 3  # a cached_property value sits in its __dict__: never written
    shared = module.Message(role="user", content="twice")
    return {
        "messages": _messages(module),
        "partly set": [module.Note(text="a"), module.Note(count=2), module.Note()],
        "nested and cached": [noted, noted.inner.model_copy(), {"role": "user", "content": "a dict"}, 3, None],
        "mixed": [{"role": "user", "content": "a dict"}, *_messages(module, 3), module.Note(tags=["t"])],
        "extra": [module.Loose(x=1, y=[2])],
        "private": [module.Secret(item=1)],
        "shared": [shared, shared, *_messages(module, 2)],
        "empty": [],
    }


PLAIN_HISTORIES = {"messages", "partly set", "nested and cached", "mixed", "empty"}


def _state_of(value: Any) -> Any:
    """A model's whole state (class, fields, fields_set, extra, private) for comparison; lists item by item."""
    if isinstance(value, list):
        return [_state_of(v) for v in value]
    if isinstance(value, BaseModel):
        names = type(value).model_fields  # a cached_property value in __dict__ is left to recompute
        fields = {k: _state_of(v) for k, v in value.__dict__.items() if k in names}
        return (
            type(value),
            fields,
            value.__pydantic_fields_set__,
            value.__pydantic_extra__,
            value.__pydantic_private__,
        )
    return (type(value), value)


HISTORY_NAMES = ["messages", "partly set", "nested and cached", "mixed", "extra", "private", "shared", "empty"]


@pytest.mark.parametrize("name", HISTORY_NAMES)
def test_a_history_of_models_is_written_and_read_as_the_full_path_does(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load(HISTORY, compiled=True)
    history = _histories(module)[name]
    generator = module.chat(history)
    next(generator)
    full = full_snapshot(generator)
    plain = snapshots._plain_snapshot(generator)
    assert (plain is not None) == (name in PLAIN_HISTORIES)
    if plain is not None:
        assert json.dumps(plain) == json.dumps(full)  # the same data, tables and keys in the same order
    assert snapshot(generator) == full
    data = json.loads(json.dumps(full))
    fast, slow = resume(data), full_resume(data, monkeypatch)
    assert _state_of(state(fast)[2]["history"]) == _state_of(state(slow)[2]["history"]) == _state_of(history)
    assert full_snapshot(fast) == full
    if name == "shared":
        again = state(fast)[2]["history"]
        assert again[0] is again[1]


def test_models_resumed_share_nothing_with_each_other_or_the_data() -> None:
    module = load(HISTORY, compiled=True)
    generator = module.chat(_histories(module)["partly set"])
    next(generator)
    data = json.loads(json.dumps(snapshot(generator)))
    text = json.dumps(data)
    one, two = (state(resume(data))[2]["history"] for _ in range(2))
    assert one == two
    for a, b in zip(one, two, strict=True):
        assert a is not b and a.__dict__ is not b.__dict__ and a.tags is not b.tags
        assert a.__pydantic_fields_set__ is not b.__pydantic_fields_set__
    one[0].__pydantic_fields_set__.add("count")
    one[0].tags.append("more")
    assert json.dumps(data) == text and two[0].__pydantic_fields_set__ == {"text"} and two[0].tags == []


def _history(graph: dict) -> list:
    return graph["roots"]["gen"][1]["vars"]["history"]


def _new_shape(graph: dict, names: list[str]) -> int:
    graph["shapes"].append(names)
    return len(graph["shapes"]) - 1


TAMPERED = {
    "class index out of range": lambda g: _history(g)[1].__setitem__(1, 9),
    "class index a bool": lambda g: _history(g)[2].__setitem__(1, False),
    "fields_set a bool": lambda g: _history(g)[2].__setitem__(3, True),
    "shape index a bool": lambda g: _history(g)[2][2].__setitem__(0, False),
    "an int subclass": lambda g: _history(g)[4].__setitem__(1, _Int(0)),
    "shape out of range": lambda g: _history(g)[1][2].__setitem__(0, 99),
    "fields_set out of range": lambda g: _history(g)[1].__setitem__(3, 99),
    "fields_set not fields": lambda g: _history(g)[1].__setitem__(3, _new_shape(g, ["nope"])),
    "a missing field": lambda g: _history(g)[1].__setitem__(2, [_new_shape(g, ["role"]), "x"]),
    "a shape naming a field twice": lambda g: g["shapes"].__setitem__(0, ["role", "role"]),
    "a value too many": lambda g: _history(g)[1][2].append("x"),
    "a class no build records": lambda g: g["classes"].__setitem__(0, "os:PathLike"),
    "a function, not a model": lambda g: g["classes"].__setitem__(0, g["classes"][0].replace("Message", "chat")),
    "a table that is no list": lambda g: g.__setitem__("shapes", {"a": 1}),
    "a str subclass tag": lambda g: _history(g)[1].__setitem__(0, _Tag("m")),
    "a nested reference": lambda g: _history(g)[1][2].__setitem__(1, [0]),
    "a nested list value": lambda g: _history(g)[1][2].__setitem__(1, ["l", "x"]),
    "an extra payload": lambda g: _history(g)[1].append(None),
    "a table of its own": lambda g: g.__setitem__("more", []),
    "another kind of entry": lambda g: _history(g)[3].__setitem__(3, 0),
}


_Tag = type("_Tag", (str,), {})
_Int = type("_Int", (int,), {})


@pytest.mark.parametrize(("name", "change"), list(TAMPERED.items()), ids=list(TAMPERED))
def test_tampered_models_take_the_full_path_which_says_what_is_wrong(
    name: str, change: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load(HISTORY, compiled=True)
    generator = module.chat(_messages(module))
    next(generator)
    data = json.loads(json.dumps(snapshot(generator)))
    change(data["graph"])
    try:
        expected = full_resume(data, monkeypatch)
    except (SnapshotDataError, SnapshotError) as error:
        assert snapshots._plain_resume(data["graph"], None, None, DEFAULT_LIMITS) is None, name
        with pytest.raises(type(error)):
            resume(data)
        return
    assert _state_of(state(resume(data))[2]) == _state_of(state(expected)[2])


LIMITED = """
@resumable
def tool(n):
    deep = [[[1, [2]], {"a": [3, {"b": [4]}]}], "x" * 3]
    got = yield n
    return deep, got
"""


@pytest.mark.parametrize("kind", ["max_depth", "max_values"])
def test_the_short_path_takes_exactly_what_the_limits_let_the_full_path_take(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variables nest one level inside the generator's entry, and the root and its entry count as values."""
    for source, make in ((LIMITED, lambda m: m.tool(1)), (HISTORY, lambda m: m.chat(_messages(m, 3)))):
        module = load(source, compiled=True)
        generator = make(module)
        next(generator)
        data = json.loads(json.dumps(snapshot(generator)))
        outcomes = set()
        for bound in range(1, 60):
            limits = DecodeLimits(**{kind: bound})
            try:
                full_resume(data, monkeypatch, limits=limits)
            except SnapshotDataError:
                assert snapshots._plain_resume(data["graph"], None, None, limits) is None, (kind, bound)
                outcomes.add("refused")
            else:
                assert snapshots._plain_resume(data["graph"], None, None, limits) is not None, (kind, bound)
                outcomes.add("taken")
        assert outcomes == {"refused", "taken"}


def test_release_finds_generators_inside_a_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """A history of dicts or models is read by type in one go; a generator in one of them is still released."""
    module = load(HISTORY, compiled=True)
    log: list[str] = []
    for make in (
        lambda g: [{"role": "user", "content": str(i)} for i in range(8)] + [{"role": "user", "content": g}],
        lambda g: [*_messages(module, 8), module.Secret(item=g)],
        lambda g: [module.Secret(item=i) for i in range(8)] + [module.Secret(item=g)],
        lambda g: [*_messages(module, 8), module.Message.model_construct(role="user", content=g)],
        lambda g: [*(module.Secret() for _ in range(8)), _private(module.Secret(), g)],
        lambda g: [("a", "b"), ("c", g)],
    ):
        inner = module.compiled_sub("inner", log)
        next(inner)
        generator = module.chat(make(inner))
        next(generator)
        del inner
        release(generator)
        gc.collect()
        assert log == [], make
    inner = module.compiled_sub("closed", log)
    next(inner)
    history = _messages(module, 8)
    generator = module.chat(history)
    next(generator)
    release(generator)
    del inner
    gc.collect()
    assert log == ["closed"]  # not held by the released generator: closed when dropped, as before


def _private(model: Any, value: Any) -> Any:
    model._hidden = value
    return model


def test_snapshot_json_text_is_exact() -> None:
    """dump_json / parse_json (msgspec underneath) give back exactly what json gives back, falling back to
    json for what msgspec does not write or read as json does."""
    values: list[Any] = [
        "\ud800 lone",
        ["\udfff", {"k\ud83d": 1}],
        2**70,
        -(2**64),
        10**4000,
        -0.0,
        5e-324,
        1.7976931348623157e308,
        0.1,
        "é\u2028\x00\x7f",
        {"a": [True, None, 1.5, "x"]},
    ]
    for value in values:
        text = snapshots.dump_json(value)
        assert type(text) is str
        back = snapshots.parse_json(text)
        assert repr(back) == repr(value) and repr(json.loads(text)) == repr(value)
        assert repr(snapshots.parse_json(json.dumps(value))) == repr(value)
    for text in ["[NaN, Infinity, -Infinity, 1e400]", '"\\ud800"', "\ufeff[1]", " [1] \n", '{"a": 1, "a": 2}']:
        expected = json.loads(text.encode() if text.startswith("\ufeff") else text)
        got = snapshots.parse_json(text.encode() if text.startswith("\ufeff") else text)
        assert repr(got) == repr(expected)
    assert snapshots.parse_json(b'"\xed\xa0\x80"') == json.loads(b'"\xed\xa0\x80"') == "\ud800"
    for bad in ["[1,]", "[1] x", '"\x01"', b'"\xff"', "[" + "9" * 5000 + "]", ""]:
        with pytest.raises(ValueError) as raised:
            snapshots.parse_json(bad)
        with pytest.raises(type(raised.value)):
            json.loads(bad)
    with pytest.raises(TypeError):
        snapshots.parse_json(memoryview(b"[1]"))  # type: ignore[arg-type]  # as json.loads refuses it
    with pytest.raises(SnapshotDataError, match="nested 100,000 deep"):
        snapshots.parse_json("[" * 100_000 + "]" * 100_000)


json_texts = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec=None), max_size=6),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=json_texts,
    cut=st.integers(0, 200),
    junk=st.sampled_from(["", "]", ",", "NaN", "\\", '"', "1e999", "\ud800"]),
)
def test_fuzz_snapshot_json_text_reads_as_json_reads(value: Any, cut: int, junk: str) -> None:
    text = snapshots.dump_json(value)
    assert repr(snapshots.parse_json(text)) == repr(json.loads(text)) == repr(value)
    mangled = text[:cut] + junk + text[cut:]
    try:
        expected = json.loads(mangled)
    except (ValueError, RecursionError) as error:
        with pytest.raises(type(error)):
            snapshots.parse_json(mangled)
    else:
        assert repr(snapshots.parse_json(mangled)) == repr(expected)


def test_a_snapshot_travels_through_dump_json_as_through_json() -> None:
    module = load(HISTORY, compiled=True)
    generator = module.chat(_histories(module)["nested and cached"])
    next(generator)
    data = snapshot(generator)
    assert snapshots.parse_json(snapshots.dump_json(data)) == json.loads(json.dumps(data)) == data
    resumed = resume(snapshots.parse_json(snapshots.dump_json(data)))
    assert _state_of(state(resumed)[2]) == _state_of(state(generator)[2])


RESOLVED = """
from pydantic import BaseModel


class Message(BaseModel):
    text: str


@resumable
def tool():
    yield 1
"""


def test_a_class_found_before_is_looked_up_again_when_its_module_or_name_changes() -> None:
    """resolve_class keeps what it found in a compiled module, and takes it again only while the module's
    record, the module and the name are the ones it was found through."""
    import sys

    from branchc.continuation.registry import resolve_class
    from branchc.splitter import load_source

    source = "from branchc import resumable\n" + RESOLVED
    name, ref = "bc_resolved_probe", "bc_resolved_probe:Message"
    first = load_source(source, name, f"<{name}>")
    try:
        assert resolve_class(ref) is resolve_class(ref) is first.Message
        with pytest.raises(SnapshotError, match="not among the modules this resume allows"):
            resolve_class(ref, frozenset({"elsewhere"}))
        second = load_source(source, name, f"<{name}>")  # built and loaded again: a new class
        assert second.Message is not first.Message and resolve_class(ref) is second.Message
        second.Message = type("Message", (BaseModel,), {"__module__": name, "__annotations__": {"text": str}})
        assert resolve_class(ref) is second.Message  # bound anew: what the module holds now
        second.Message = type("Other", (BaseModel,), {"__module__": name})
        with pytest.raises(SnapshotError, match="is not a class defined there"):
            resolve_class(ref)
        del sys.modules[name]
        with pytest.raises(SnapshotError, match="not loaded any more"):
            resolve_class(ref)
    finally:
        sys.modules.pop(name, None)
