"""snapshot() and resume() take a short path for one generator of plain data (codec.encode_plain /
decode_plain). It must write and read exactly what the full path does, and keep its guarantees:
no aliasing either way, identity and cycles, complete validation with the place named."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from differential import load

from branchc import resume, snapshot
from branchc.continuation import snapshots
from branchc.continuation.codec import SnapshotDataError, encode
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
