"""The saved run's format: class references and field names once per document, packed for transport.

A run's text names each class once (the graph's "classes" table) and each set of field names once
("shapes"); entries refer to them by index, and a forged index is refused with the place it is at.
`pack_run` compresses the text for the 2026-07-28 request_state; `unpack_run` refuses a decompression
bomb once it has inflated `max_bytes`, quickly and in that much memory. Runs and snapshots of another
format version are refused with an error that says which version they are.
"""

from __future__ import annotations

import json
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from _runtime_support import entries

from branchc import resume, snapshot
from branchc.bridge.loading import load_served_tools
from branchc.continuation.errors import SnapshotDataError
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import MAX_RUN_BYTES, PACKED, RunStateError, dump_run, load_run, pack_run, unpack_run

TOOL = """
from pydantic import BaseModel

from branchc import Context, resumable, tool


class Params(BaseModel):
    n: int


loop = tool("loop", params=Params, requires={"sampling"})


@loop.client
def client(handoff: dict, ctx: Context):
    text, last, same = "", None, True
    for i in range(handoff["n"]):
        reply = yield ctx.sample(prompt=f"step {i} é \\ud800", max_tokens=1)
        if last is not None:
            same = same and last is ctx.messages[-3]  # held across the yield: still that very message
        last = ctx.messages[-1]
        text = reply.text
    return {"last": text, "turns": len(ctx.messages) // 2, "same": same}


@resumable
def counter(n):
    total = 0
    for i in range(n):
        total += yield i
    return total
"""

MESSAGE = "branchc.runtime.messages:Message"


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> Any:
    folder = tmp_path_factory.mktemp("runstate_format")
    (folder / "loop_tool.py").write_text(TOOL)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BRANCHC_CACHE", str(folder / "cache"))
        return load_served_tools(folder / "loop_tool.py")["loop"]


def waiting_after(tool: Any, rounds: int, total: int) -> tuple[dict, Machine]:
    """The loop tool's run, waiting for its sample after `rounds` answered (of `total`)."""
    handoff = {"n": total}
    machine = Machine(tool.name, "1", tool.limits)
    machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
    machine.advance()
    for i in range(rounds):
        (request,) = machine.pending
        machine.answer(request.key, f"answer {i}")
        machine.advance()
        machine.take_outbox()
    return handoff, machine


def saved(tool: Any, rounds: int = 3) -> dict:
    handoff, machine = waiting_after(tool, rounds, rounds + 2)
    text = dump_run(handoff, machine)
    machine.release()
    return json.loads(text)


def refused(data: Any, *fragments: str) -> str:
    with pytest.raises(RunStateError) as caught:
        load_run(json.dumps(data)) if not isinstance(data, str) else load_run(data)
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)
    assert len(str(caught.value)) < 1_000
    return str(caught.value)


# ---------------------------------------------------------------------------------------------------- round trips


def test_a_large_run_packs_and_continues_where_it_was(loop: Any) -> None:
    handoff, machine = waiting_after(loop, 1_000, 1_002)
    text = dump_run(handoff, machine)
    machine.release()
    assert text.count(MESSAGE) == 1  # named once, however many messages
    data = json.loads(text)
    assert data["branchc_run"] == 3 and list(data["graph"])[:2] == ["classes", "shapes"]  # the tables on top
    assert ["role", "content"] in data["graph"]["shapes"]
    packed = pack_run(text)
    assert packed.startswith(PACKED) and packed.isascii() and json.dumps(packed) == f'"{packed}"'  # nothing escaped
    assert len(packed) < len(text.encode("utf-8", "surrogatepass")) / 4
    assert unpack_run(packed) == text
    handoff, machine = load_run(unpack_run(packed))
    for i in range(1_000, 1_002):
        (request,) = machine.pending
        assert request.sample.messages[-1].content == f"step {i} é \ud800"  # a lone surrogate survives packing
        machine.answer(request.key, f"answer {i}")
        machine.advance()
    assert machine.done and machine.ok and machine.result == {"last": "answer 1001", "turns": 1_002, "same": True}


def test_the_run_text_grows_by_its_data_only(loop: Any) -> None:
    """Each further round adds two messages: their text and a few bytes of indexes, not their class or names."""
    small, large = (len(json.dumps(saved(loop, rounds), separators=(",", ":"))) for rounds in (10, 110))
    per_message = (large - small) / 200
    # a message: "user","step 10 \u00e9 \ud800", in its branch's history, and nothing in the pending sample's
    # list (the history plus the prompt, made again on load); written as a model, with a reference to it from
    # each of the two lists, it took about 57 bytes; format 1 wrote its class and field names too (75 more)
    assert per_message < 35, per_message


def _branch_entry(graph: dict) -> dict:
    return next(entry[1] for entry in graph["objects"] if entry[0] == "@" and entry[1]["t"] == "branch")


def _request(graph: dict, key: str) -> list:
    machine = graph["roots"]["machine"][1]
    assert machine["t"] == "machine"
    return next(request for request in machine["requests"] if request[0] == key)


def test_a_history_travels_as_flat_text_and_keeps_what_is_held_elsewhere(loop: Any) -> None:
    """Text messages nothing else holds are role, text pairs; the one the tool holds across the yield is
    written once, by the codec, so after a load it is still that very message (the tool checks `is`)."""
    data = saved(loop, rounds=3)
    history = _branch_entry(data["graph"])["history"]
    assert history[:6] == ["user", "step 0 é \ud800", "assistant", "answer 0", "user", "step 1 é \ud800"]
    assert history[-2] == 0 and type(history[-1]) is list  # the last answer: held by `last` too
    request = _request(data["graph"], "sample-4")
    assert "step 0" not in json.dumps(request)  # the pending sample repeats none of the history
    _, machine = load_run(json.dumps(data))
    (request,) = machine.pending
    branch = machine.branches["0"].state
    assert [m.content for m in request.sample.messages] == [m.content for m in branch.messages] + ["step 3 é \ud800"]
    assert all(a is b for a, b in zip(request.sample.messages[:-1], branch.messages, strict=True))  # the same objects
    assert request.sample.messages[-1] is request.prompt
    machine.release()


@pytest.mark.parametrize(
    ("history", "fragment"),
    [
        (["root", "hi"], "history[0]: expected a role (assistant, system, user) and its text, or 0"),
        (["user", 7], "history[0]: expected a role"),
        (["user"], "history: expected a list of role, content pairs"),
        ({"user": "hi"}, "history: expected a list of role, content pairs"),
        ([False, [0]], "history[0]: expected a role"),
    ],
)
def test_a_forged_history_is_refused_with_its_place(loop: Any, history: Any, fragment: str) -> None:
    data = saved(loop)
    _branch_entry(data["graph"])["history"] = history
    refused(data, fragment)


def test_forged_branch_fields_are_refused(loop: Any) -> None:
    data = saved(loop)
    del _branch_entry(data["graph"])["fields"]["tokens"]
    refused(data, "fields: expected the fields id, name")
    data = saved(loop)
    _branch_entry(data["graph"])["extra"] = 1
    refused(data, "a branch entry in a run is {t, fields, history}")


def test_a_sample_without_its_messages_needs_its_prompt(loop: Any) -> None:
    data = saved(loop)
    _request(data["graph"], "sample-4")[7] = None  # the prompt
    refused(data, "request 'sample-4' has no history to take its messages from")


def test_a_snapshot_names_each_class_once_and_resumes(loop: Any) -> None:
    module = __import__(loop.client_fn.__module__)
    generator = module.counter(3)
    next(generator)
    data = snapshot(generator)
    assert data["branchc"] == 3
    again = resume(json.loads(json.dumps(data)))
    assert again.send(5) == 1


# ---------------------------------------------------------------------------------------------------- forged tables


def _first_message(graph: dict) -> list:
    index = graph["classes"].index(MESSAGE)
    return next(entry for entry in graph["objects"] if entry[:2] == ["m", index])


def test_a_forged_class_index_is_refused_with_its_place(loop: Any) -> None:
    data = saved(loop)
    message = _first_message(data["graph"])
    place = data["graph"]["objects"].index(message)
    count = len(data["graph"]["classes"])
    message[1] = count
    refused(data, f"objects[{place}][1]: expected an index into the {count} classes, got {count}")
    for forged in (-1, True, "branchc.runtime.messages:Message", 1.0, None):
        message[1] = forged
        refused(data, f"objects[{place}][1]: expected an index into the {count} classes")


def test_a_forged_shape_index_is_refused_with_its_place(loop: Any) -> None:
    data = saved(loop)
    message = _first_message(data["graph"])
    place = data["graph"]["objects"].index(message)
    count = len(data["graph"]["shapes"])
    message[2][0] = count
    refused(data, f"objects[{place}][2][0]: expected an index into the {count} shapes, got {count}")
    other = next(i for i, names in enumerate(data["graph"]["shapes"]) if len(names) != len(message[2]) - 1)
    message[2][0] = other  # a shape of another length than the values that follow
    refused(data, f"objects[{place}][2]: shapes[{other}] names")
    message[2] = {"role": "user", "content": "hi"}  # format 1's payload
    refused(data, f"objects[{place}][2]: expected [shape, value, ...]")
    data = saved(loop)
    _first_message(data["graph"])[3] = ["content", "role"]  # format 1's fields_set
    refused(data, "[3]: expected an index into the")


def test_table_entries_are_checked(loop: Any) -> None:
    data = saved(loop)
    data["graph"]["classes"][0] = 7
    refused(data, 'classes[0]: expected "module:qualname", got 7')
    data = saved(loop)
    data["graph"]["classes"] = {"0": MESSAGE}
    refused(data, "classes: expected a list")
    data = saved(loop)
    data["graph"]["shapes"][0] = ["role", 3]
    refused(data, "shapes[0][1]: expected a name, got 3")
    data = saved(loop)
    data["graph"]["shapes"][0] = ["role", "role"]
    refused(data, "shapes[0]: a name comes twice")
    data = saved(loop)
    data["graph"]["shapes"][0] = "role"
    refused(data, "shapes[0]: expected a list of names")
    data = saved(loop)
    data["graph"]["tables"] = []
    refused(data, 'expected {"classes": [...]')


def test_a_table_may_name_only_what_a_build_records(loop: Any) -> None:
    data = saved(loop)
    graph = data["graph"]
    graph["classes"][graph["classes"].index(MESSAGE)] = "subprocess:Popen"
    refused(data, "subprocess:Popen")
    data = saved(loop)
    graph = data["graph"]
    graph["classes"][graph["classes"].index(MESSAGE)] = "branchc.runtime.machine:Request"  # allowed, not a model
    refused(data, "branchc.runtime.machine:Request is not a pydantic model")


def test_a_shape_naming_a_field_the_class_lacks_is_refused(loop: Any) -> None:
    data = saved(loop)
    graph = data["graph"]
    graph["shapes"][graph["shapes"].index(["role", "content"])] = ["role", "__class__"]
    refused(data, "unexpected name '__class__'")


# ---------------------------------------------------------------------------------------------------- versions


def test_a_run_of_format_1_is_refused_with_a_clear_message(loop: Any) -> None:
    data = saved(loop)
    data["branchc_run"] = 1
    text = refused(data, "format 1, written by an older branchc", "reads formats 2, 3 only")
    assert "make it again" in text
    data["branchc_run"] = 4
    refused(data, "format 4, written by a newer branchc")
    for version in ("3", None, True, 3.0):
        data["branchc_run"] = version
        refused(data, "expected the saved run as {'branchc_run': 3, ...}")
    refused({"graph": {}}, "got no format version")
    refused([], "got no format version")


def test_a_run_of_format_2_still_loads_where_it_was_saved(loop: Any) -> None:
    # format 2 is format 3 without where each generator waits: it goes on in the code that saved it
    data = saved(loop)
    generators = [entry for entry in entries(data) if entry.get("t") == "gen"]
    assert generators and all({"point", "live"} <= entry.keys() for entry in generators)
    for entry in generators:
        for key in ("point", "live", "asks"):
            entry.pop(key, None)
    data["branchc_run"] = 2
    handoff, machine = load_run(json.dumps(data))
    assert machine.pending and handoff == saved(loop)["graph"]["roots"]["handoff"]
    machine.release()


def test_a_snapshot_of_format_1_is_refused_with_a_clear_message(loop: Any) -> None:
    module = __import__(loop.client_fn.__module__)
    generator = module.counter(3)
    next(generator)
    data = snapshot(generator)
    data["branchc"] = 1
    with pytest.raises(SnapshotDataError, match="the snapshot is in format 1, written by an older branchc"):
        resume(data)


# ---------------------------------------------------------------------------------------------------- packing


def _bomb(size: int) -> str:
    """A packed run of `size` spaces, compressed about a thousandfold."""
    packer = zlib.compressobj(9)
    chunk = b" " * 2**20
    raw = b"".join(packer.compress(chunk) for _ in range(size // 2**20)) + packer.flush()
    import base64

    return PACKED + base64.b64encode(raw).decode()


def test_a_decompression_bomb_is_refused_quickly_and_within_memory() -> None:
    bomb = _bomb(1024 * 2**20)  # 1 GiB of spaces, about 1 MiB packed
    assert len(bomb) < 2 * 2**20
    start = time.perf_counter()
    with pytest.raises(RunStateError, match=r"unpacks to more than 16,777,216 bytes \(MAX_RUN_BYTES"):
        unpack_run(bomb)
    assert time.perf_counter() - start < 1.0
    tracemalloc.start()
    try:
        with pytest.raises(RunStateError, match="unpacks to more than 1,048,576 bytes"):
            unpack_run(bomb, max_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20 + len(bomb) * 2, peak  # the output limit and the input, never the gigabyte
    assert MAX_RUN_BYTES == 16 * 2**20
    ok = _bomb(2**20)
    assert unpack_run(ok, max_bytes=2**20) == " " * 2**20  # exactly the limit is fine


@pytest.mark.parametrize(
    ("packed", "message"),
    [
        ('{"branchc_run": 2}', "not packed by pack_run"),
        (b"z1:eJwDAAAAAAE=", "not packed by pack_run"),
        (PACKED + "eJwDAAAAAAE", "not base64"),
        (PACKED + "not base64!", "not base64"),
        (PACKED + "aGVsbG8=", "not zlib data"),
        (PACKED + pack_run("{}" * 100)[len(PACKED) : -12], "cut short"),
        (PACKED + __import__("base64").b64encode(zlib.compress(b"{}") + b"more").decode(), "data past its end"),
        (PACKED + __import__("base64").b64encode(zlib.compress(b"\xff\xfe")).decode(), "not UTF-8"),
    ],
)
def test_what_is_not_a_packed_run_is_refused(packed: Any, message: str) -> None:
    with pytest.raises(RunStateError, match=message):
        unpack_run(packed)


def test_packing_is_total_on_text(tmp_path: Path) -> None:
    for text in ("", "é", "\ud800", "x" * 100_000, json.dumps({"a": ["\u2028"]}, ensure_ascii=False)):
        assert unpack_run(pack_run(text)) == text


def _machine(data: dict) -> dict:
    return data["graph"]["roots"]["machine"][1]


@pytest.mark.parametrize(
    ("forge", "fragment"),
    [
        (lambda m: m.__setitem__("counts", [1, 2]), ".counts: expected [samples, elicitations, groups]"),
        (lambda m: m.__setitem__("counts", [1, 2, "3"]), ".counts: expected"),
        (lambda m: m.__setitem__("tool", 7), "expected the tool's name and the call's id"),
        (lambda m: m.__setitem__("limits", {"max_depth": 1}), ".limits: expected the run's limits"),
        (lambda m: m.__setitem__("groups", ["l"]), ".groups: expected an object"),
        (lambda m: m["branches"][0].__setitem__(4, 5), "branches[0]: expected [id, state, generator, parent, wait]"),
        (lambda m: m["branches"][0].__setitem__(1, {"id": "0"}), "branches[0][1]: expected a branch state"),
        (lambda m: m["requests"][0].__setitem__(3, "guess"), "requests[0].kind: expected 'sample' or 'elicit'"),
        (lambda m: m["requests"][0].__setitem__(4, "4"), "requests[0].number: expected int"),
        (lambda m: m["requests"][0].__setitem__(5, "soon"), "requests[0].deadline: expected a time or null"),
        (lambda m: m["requests"][0].pop(), "requests[0]: expected [key, branch, where"),
        (lambda m: m["requests"][0][6].pop(), "requests[0].sample: expected [messages, system_prompt"),
        (lambda m: m.pop("groups"), "a machine entry is {t, tool, call, limits, counts, branches, groups, requests}"),
    ],
)
def test_a_forged_machine_is_refused_with_its_place(loop: Any, forge: Any, fragment: str) -> None:
    data = saved(loop)
    forge(_machine(data))
    refused(data, fragment)
