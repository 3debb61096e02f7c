"""Guided mode with the real `mcp` client over stdio: waiting runs are capped and expire, a refused
answer leaves the run waiting under the same state id, and a tool with `output=Model` runs guided
end to end (its listed output schema admits the guide; the final result is still checked)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import Scripted, stdio, within
from mcp import Client

from branchc.bridge.guided import (
    GuidedFullError,
    GuidedRunTooLargeError,
    MemoryWaitingRuns,
    WaitingRun,
    guided_output_schema,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

ASKER = """\
from pydantic import BaseModel, Field
from branchc import Context, tool


class Params(BaseModel):
    marker: str
    ask: bool = True
    bad_output: bool = False


class Number(BaseModel):
    value: int = Field(ge=1, le=9)


class Out(BaseModel):
    reply: str
    value: int


asker = tool("asker", params=Params, requires={"sampling", "elicitation"}, output=Out)


@asker.before
def before(params: Params) -> dict:
    with open(params.marker, "a", encoding="utf-8") as out:
        out.write("before\\n")
    return params.model_dump()


@asker.client
def client(handoff: dict, ctx: Context):
    if not handoff["ask"]:
        return {"reply": "none", "value": 0}
    reply = yield ctx.sample(prompt="say something")
    number = yield ctx.elicit("number", message="a number from 1 to 9", schema=Number)
    return {"reply": reply.text, "value": number.content.value}


@asker.after
def after(handoff: dict, result: dict) -> dict:
    return {"reply": 5} if handoff["bad_output"] else result
"""


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "asker.py").write_text(ASKER)
    return folder, {"BRANCHC_CACHE": str(tmp_path / "cache")}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "marker.txt"


def guide(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    value = result.structured_content
    assert value["status"] == "waiting_for_answers", value
    return value


def final(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content[0].text
    assert result.structured_content.get("status") != "waiting_for_answers"
    return result.structured_content


def refusal(result: types.CallToolResult) -> str:
    assert result.is_error, result
    return result.content[0].text


async def resume(session: Any, state_id: str, answers: Any) -> types.CallToolResult:
    return await session.call_tool("branchc_resume", {"state_id": state_id, "answers": answers})


# -- output= tools --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_tool_with_an_output_model_runs_guided_end_to_end(mode, served, marker):
    folder, env = served
    args = {"marker": str(marker)}
    async with Client(stdio(folder, env, "--guided"), mode=mode) as session:  # the SDK client validates outputs
        (listed,) = [t for t in (await session.list_tools()).tools if t.name == "asker"]
        assert listed.output_schema["anyOf"][0]["properties"]["value"]["type"] == "integer"
        assert listed.output_schema["anyOf"][1]["properties"]["status"] == {"const": "waiting_for_answers"}
        first = guide(await within(30, session.call_tool("asker", args)))  # not refused by the client's check
        (request,) = first["requests"]
        second = guide(await resume(session, first["state_id"], {request["key"]: "hello"}))
        (request,) = second["requests"]
        assert request["schema"]["properties"]["value"]["minimum"] == 1
        assert final(await resume(session, second["state_id"], {request["key"]: {"value": 4}})) == {
            "reply": "hello",
            "value": 4,
        }
        # a run that asks nothing ends in its first call: validated against the listed schema by the client
        assert final(await session.call_tool("asker", {**args, "ask": False})) == {"reply": "none", "value": 0}
        # the final result is checked against the model: off it, the call is a tool error
        bad = guide(await session.call_tool("asker", {**args, "bad_output": True}))
        bad = guide(await resume(session, bad["state_id"], {"sample-1": "x"}))
        text = refusal(await resume(session, bad["state_id"], {"elicit-1": {"value": 1}}))
        assert "asker" in text and "value" in text


async def test_a_client_that_can_answer_gets_the_plain_output_schema(served, marker):
    folder, env = served
    callbacks = Scripted({"say something": "hi"}, [{"action": "accept", "content": {"value": 2}}]).callbacks()
    async with Client(stdio(folder, env, "--guided"), mode="legacy", **callbacks) as session:
        (listed,) = [t for t in (await session.list_tools()).tools if t.name == "asker"]
        assert "anyOf" not in listed.output_schema and listed.output_schema["required"] == ["reply", "value"]
        assert final(await within(30, session.call_tool("asker", {"marker": str(marker)}))) == {
            "reply": "hi",
            "value": 2,
        }


def test_the_guided_output_schema_keeps_the_models_definitions_at_the_root():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}}
    listed = guided_output_schema(schema)
    assert listed["$defs"] == schema["$defs"] and "$defs" not in listed["anyOf"][0]
    assert listed["anyOf"][0]["properties"] == schema["properties"]


# -- refused answers ----------------------------------------------------------------------------------


async def test_refused_answers_leave_the_run_waiting_under_the_same_state_id(served, marker):
    folder, env = served
    async with Client(stdio(folder, env, "--guided"), mode="2026-07-28") as session:
        first = guide(await within(30, session.call_tool("asker", {"marker": str(marker)})))
        state = first["state_id"]
        wrong = [
            ({"sample-9": "hello"}, "requests that were not asked: sample-9"),  # a wrong key
            ({}, "lacks answers to: sample-1"),  # a missing key
            ({"sample-1": 5}, "a sample is answered with the reply's text"),  # not a string
            ({"sample-1": {"text": "hello"}}, "a sample is answered with the reply's text"),
        ]
        for answers, why in wrong:
            text = refusal(await resume(session, state, answers))
            assert why in text and "the run still waits" in text, text
        second = guide(await resume(session, state, {"sample-1": "hello"}))
        state = second["state_id"]
        off_schema = [
            ({"elicit-1": {"value": 0}}, "value: Input should be greater than or equal to 1"),
            ({"elicit-1": {"value": "many"}}, "value: Input should be a valid integer"),
            ({"elicit-1": {}}, "value: Field required"),
            ({"elicit-1": 3}, "a form is answered with an object"),
        ]
        for answers, why in off_schema:
            text = refusal(await resume(session, state, answers))
            assert "does not fit the form's schema" in text or "a form is answered" in text, text
            assert why in text and "the run still waits" in text, text
        done = final(await resume(session, state, {"elicit-1": {"value": 7}}))
        used = refusal(await resume(session, state, {"elicit-1": {"value": 7}}))
    assert done == {"reply": "hello", "value": 7}
    assert "already used" in used
    assert marker.read_text() == "before\n"  # one run, started once


# -- caps and expiry ----------------------------------------------------------------------------------


async def test_waiting_runs_are_capped_and_a_start_past_the_cap_is_refused_before_it_runs(served, marker):
    folder, env = served
    args = {"marker": str(marker)}
    async with Client(stdio(folder, env, "--guided", "--guided-max-runs", "2"), mode="legacy") as session:
        waiting = [guide(await within(30, session.call_tool("asker", args))) for _ in range(2)]
        text = refusal(await session.call_tool("asker", args))
        assert "guided mode is full: 2 runs wait for answers" in text and "--guided-max-runs 2" in text
        assert marker.read_text() == "before\n" * 2  # the refused start ran nothing of the tool
        # a waiting run still continues (it replaces its own entry) and, once done, makes room
        second = guide(await resume(session, waiting[0]["state_id"], {"sample-1": "a"}))
        assert final(await resume(session, second["state_id"], {"elicit-1": {"value": 1}}))["value"] == 1
        guide(await session.call_tool("asker", args))
        assert marker.read_text() == "before\n" * 3


async def test_a_waiting_run_expires(served, marker):
    folder, env = served
    async with Client(stdio(folder, env, "--guided", "--guided-ttl", "1"), mode="legacy") as session:
        first = guide(await within(30, session.call_tool("asker", {"marker": str(marker)})))
        await anyio.sleep(1.5)
        text = refusal(await resume(session, first["state_id"], {"sample-1": "late"}))
    assert "is unknown, already used or expired (runs wait 1 s)" in text


def waiting(size: int, expires: float | None = None) -> WaitingRun:
    return WaitingRun("t", json.dumps("x" * (size - 2)), time.time() + 60 if expires is None else expires)


def test_the_memory_store_caps_count_and_bytes_and_sweeps_what_expired():
    store = MemoryWaitingRuns(max_runs=3, max_bytes=1000)
    a = store.keep(waiting(400), new=True)
    store.keep(waiting(400), new=True)
    with pytest.raises(GuidedFullError, match="hold 800 bytes and this one needs 400 more"):
        store.keep(waiting(400), new=True)
    assert len(store) == 2 and store.bytes == 800
    taken = store.take(a)
    assert taken is not None and store.take(a) is None
    assert len(store) == 1 and store.reserved == 1 and store.bytes == 800  # taken, it keeps its place
    store.put_back(a, taken)  # refused answers: the same id waits again
    assert len(store) == 2 and store.reserved == 0 and store.bytes == 800
    assert store.take(a) is taken
    store.keep(waiting(500), new=False, taken=a)  # a continuing run takes its own place over
    assert len(store) == 2 and store.reserved == 0 and store.bytes == 900
    with pytest.raises(GuidedFullError):
        store.admit(200)
    expired = store.keep(waiting(10, expires=time.time() - 1), new=True)
    assert store.sweep() == 1 and store.take(expired) is None and len(store) == 2
    small = MemoryWaitingRuns(max_runs=1)
    small.keep(waiting(10, expires=time.time() + 0.2), new=True)
    with pytest.raises(GuidedFullError, match="1 runs wait for answers"):
        small.admit()
    time.sleep(0.3)
    small.admit()  # the expired run was swept to make room
    assert len(small) == 0 and small.bytes == 0


def test_a_run_being_resumed_keeps_its_place_and_a_continuing_run_is_capped_too():
    store = MemoryWaitingRuns(max_runs=2, max_bytes=100)
    a = store.keep(waiting(40), new=True)
    b = store.keep(waiting(40), new=True)
    assert store.take(a) is not None  # its round goes on (after(), a server-side sample, sending logs)
    with pytest.raises(GuidedFullError, match="1 runs wait for answers and 1 are being answered"):
        store.keep(waiting(20), new=True)  # a newcomer cannot take the slot the resumed run will need
    with pytest.raises(GuidedFullError):
        store.keep(waiting(500), new=False)  # a run that names no place of its own needs a new one
    with pytest.raises(GuidedFullError, match=r"the most it holds \(--guided-max-runs 2\)"):
        store.keep(waiting(10), new=False)
    assert len(store) + store.reserved == 2 and store.bytes == 80
    c = store.keep(waiting(60), new=False, taken=a)  # 40 + 60: just fits
    assert len(store) == 2 and store.reserved == 0 and store.bytes == 100
    assert store.take(c) is not None
    with pytest.raises(GuidedFullError, match="grew to 70 bytes and the other waiting runs hold 40"):
        store.keep(waiting(70), new=False, taken=c)  # it no longer fits: it is ended, not kept past the cap
    assert len(store) == 1 and store.reserved == 0 and store.bytes == 40  # its place was given up
    assert store.take(b) is not None
    store.release(b)  # its round ended it (done, failed, cancelled)
    store.release(b)  # nothing more to release
    assert len(store) == 0 and store.reserved == 0 and store.bytes == 0


def test_one_run_may_hold_at_most_max_run_bytes():
    assert MemoryWaitingRuns().max_run_bytes == 4 * 2**20
    assert MemoryWaitingRuns(max_bytes=100).max_run_bytes == 100  # never more than all runs may hold
    store = MemoryWaitingRuns(max_bytes=1000, max_run_bytes=300)
    with pytest.raises(GuidedRunTooLargeError, match="is 301 bytes, past the most one waiting guided run may hold"):
        store.keep(waiting(301), new=True)
    a = store.keep(waiting(300), new=True)
    store.take(a)
    with pytest.raises(GuidedRunTooLargeError, match="cannot wait for more answers and was ended"):
        store.keep(waiting(301), new=False, taken=a)
    assert len(store) == 0 and store.reserved == 0 and store.bytes == 0
    with pytest.raises(ValueError):
        MemoryWaitingRuns(max_run_bytes=0)


GROWER = """\
from pydantic import BaseModel
from branchc import Context, tool


class Params(BaseModel):
    marker: str


grower = tool("guided_grower", params=Params, requires={"sampling"})


@grower.client
def client(handoff: dict, ctx: Context):
    kept = []
    try:
        while True:
            reply = yield ctx.sample(prompt="more")
            if reply.text == "stop":
                return {"rounds": len(kept)}
            kept.append(reply.text)
    finally:
        with open(handoff["marker"], "a", encoding="utf-8") as out:
            out.write("finally\\n")
"""


@pytest.fixture
def grower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "grower"
    folder.mkdir()
    (folder / "guided_grower.py").write_text(GROWER)
    server = create_server(load_served_tools(folder, guided=True), guided=True)
    store = MemoryWaitingRuns(max_runs=10, max_bytes=2**20, max_run_bytes=8000)
    server.bridge.guided.store = store
    return server, store


async def test_a_normal_resume_cycle_settles_every_place_it_held(grower, marker):
    server, store = grower
    async with Client(server, mode="legacy") as session:
        state = guide(await within(30, session.call_tool("guided_grower", {"marker": str(marker)})))["state_id"]
        text = refusal(await resume(session, state, {"sample-9": "x"}))  # refused: put back, same id
        assert "the run still waits" in text and len(store) == 1 and store.reserved == 0
        for n in range(3):
            state = guide(await resume(session, state, {f"sample-{n + 1}": "a"}))["state_id"]
            assert len(store) == 1 and store.reserved == 0
        assert final(await resume(session, state, {"sample-4": "stop"})) == {"rounds": 3}
    assert len(store) == 0 and store.reserved == 0 and store.bytes == 0
    assert marker.read_text() == "finally\n"


async def test_a_looping_run_that_grows_past_the_per_run_cap_is_ended_and_cleaned_up_once(grower, marker):
    server, store = grower
    async with Client(server, mode="legacy") as session:
        state = guide(await within(30, session.call_tool("guided_grower", {"marker": str(marker)})))["state_id"]
        for n in range(1, 50):
            result = await resume(session, state, {f"sample-{n}": "x" * 1000})
            if result.is_error:
                break
            state = guide(result)["state_id"]
        else:
            pytest.fail("the run never reached the per-run cap")
        text = refusal(result)
        assert n > 2 and "GuidedRunTooLargeError" in text, text
        assert "past the most one waiting guided run may hold (8000 bytes)" in text
        assert "cannot wait for more answers and was ended" in text
        assert "already used" in refusal(await resume(session, state, {f"sample-{n}": "stop"}))
    assert len(store) == 0 and store.reserved == 0 and store.bytes == 0
    assert marker.read_text() == "finally\n"  # halted: its cleanup ran, once
