"""What a round reads and writes besides its run, on a real SQLite store: the caps' counts (bridge/quotas.py),
the store calls of a round, the MCP forms of messages."""

from __future__ import annotations

from typing import Any

import pytest
from _bridge_support import KEYS

from branchc.bridge.quotas import EVERYONE_FOR, QuotaError, RunCaps
from branchc.store.base import RunRecord
from branchc.store.sqlite import SQLiteStore


class Counted(SQLiteStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str | None] = []

    def usage(self, *statuses: str, **owner: Any) -> Any:
        self.reads.append(owner.get("owner", "everyone"))
        return super().usage(*statuses, **owner)


def test_a_growing_run_reads_everyones_usage_at_most_once_a_second(tmp_path, monkeypatch):
    store = Counted(tmp_path / "runs.db", keys=KEYS, history=0)  # the saved runs alone in usage
    store.create(RunRecord.new("tool", "x" * 1000, ttl=600, owner="alice"))
    caps = RunCaps(store, max_runs=10, max_bytes=1500, principal_runs=5, principal_bytes=10_000)
    clock = [100.0]
    monkeypatch.setattr("branchc.bridge.quotas.time.monotonic", lambda: clock[0])
    caps.admit("alice", 1100, grows_from=1000)
    caps.admit("alice", 1200, grows_from=1100)  # within the second: everyone's usage as read above
    assert store.reads == ["alice", "everyone", "alice"]
    caps.admit("bob")  # a new run: both read, always
    assert store.reads[-2:] == ["bob", "everyone"]
    clock[0] += EVERYONE_FOR
    with pytest.raises(QuotaError, match="--max-runs-mb"):  # read again: 1000 stored + 600 more is past 1500
        caps.admit("alice", 1600, grows_from=1000)
    assert store.reads[-2:] == ["alice", "everyone"]
    store.close()


TOOL = """
from pydantic import BaseModel

from branchc import Context, tool


class Params(BaseModel):
    n: int


loop = tool("loop", params=Params, requires={"sampling"})


@loop.client
def client(handoff: dict, ctx: Context):
    for i in range(handoff["n"]):
        yield ctx.sample(prompt=f"step {i}", max_tokens=1)
    return {"turns": len(ctx.messages) // 2}
"""


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_run_held_in_the_handshake_era_saves_its_history_as_flat_text(tmp_path, monkeypatch):
    """Each time the run waits it is saved; the answered request is not kept alive past its answer, so no
    message of the history is held twice and every one is written as role, text (runstate._history)."""
    import json

    import mcp.types as types
    from mcp import Client

    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "loop_tool.py").write_text(TOOL)
    tools = load_served_tools(tmp_path / "loop_tool.py")
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    histories: list[list] = []

    async def sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
        (record,) = store.list()
        graph = json.loads(store.load(record.run_id).saved)["graph"]
        (branch,) = [e[1] for e in graph["objects"] if e[0] == "@" and e[1]["t"] == "branch"]
        histories.append(branch["history"])
        return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))

    async with Client(create_server(tools, keys=KEYS, store=store), mode="legacy", sampling_callback=sampling) as c:
        result = await c.call_tool("loop", {"n": 4})
    assert result.structured_content == {"turns": 4}
    assert [len(history) for history in histories] == [0, 4, 8, 12]
    assert all(type(item) is str for history in histories for item in history), histories
    store.close()


def test_the_mcp_form_of_a_message_is_made_once_and_the_forms_kept_are_bounded(monkeypatch):
    from branchc.bridge import sampling

    forms = sampling._TextForms()
    monkeypatch.setattr(sampling, "_TEXT_FORMS", forms)
    monkeypatch.setattr(sampling._TextForms, "MAX_CHARS", 10)
    first = sampling._text("user", "hello")
    assert sampling._text("user", "hello") is first  # the same history, resent at the next sample
    assert sampling._text("assistant", "hello") is not first and first.content.text == "hello"
    sampling._text("user", "a longer text")  # past the bound
    sampling._text("user", "x")  # the forms were let go of before this one was kept
    assert ("user", "hello") not in forms and forms.chars == 1


@pytest.mark.anyio
async def test_a_stored_round_is_two_store_calls_and_an_answer_of_the_wrong_kind_writes_nothing(tmp_path, monkeypatch):
    """Each later round of a stored run is one store call that loads the record and claims the round, then
    one that writes its outcome (the claim keeps two replicas from running one round; no third hop).
    Answers of the wrong kind are refused before anything is written."""
    import mcp.types as types
    from mcp import Client

    import branchc.bridge.durable as durable
    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "loop_tool.py").write_text(TOOL)
    tools = load_served_tools(tmp_path / "loop_tool.py")
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    calls: list[str] = []
    made = durable.store_io

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await made(fn, *args, **kwargs)

    monkeypatch.setattr(durable, "store_io", counted)
    reply = types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))

    async def sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
        return reply

    async with Client(create_server(tools, keys=KEYS, store=store), mode="2026-07-28", sampling_callback=sampling) as c:
        session = c.session
        first = await session.call_tool("loop", {"n": 3}, allow_input_required=True)
        (key,) = first.input_requests
        calls.clear()
        second = await session.call_tool(
            "loop", {"n": 3}, input_responses={key: reply}, request_state=first.request_state, allow_input_required=True
        )
        assert isinstance(second, types.InputRequiredResult)
        assert [name for name in calls if name != "gc"] == ["_load_and_claim", "write"]
        (record,) = store.list()
        assert record.status == "waiting" and record.meta.extra["round"] == 2
        # an elicitation's answer to a sample: refused with nothing written (no claim to put back)
        (key,) = second.input_requests
        calls.clear()
        refused = await session.call_tool(
            "loop",
            {"n": 3},
            input_responses={key: types.ElicitResult(action="decline")},
            request_state=second.request_state,
            allow_input_required=True,
        )
        assert refused.is_error and "expected a sampling result" in refused.content[0].text
        assert [name for name in calls if name != "gc"] == ["_load_and_claim"]
        assert store.load(record.run_id) == record  # the same version, untouched
    store.close()


@pytest.mark.anyio
async def test_a_claimed_round_whose_answers_the_run_refuses_is_put_back(tmp_path, monkeypatch):
    """The claim is made from the record's summary of what was asked; when the run itself then refuses the
    answers (here the record's summary was edited to name a request the run never asked), the claim is put
    back: the run waits for the same round, unclaimed, and the error names what is wrong."""
    import dataclasses

    import mcp.types as types
    from mcp import Client

    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "loop_tool.py").write_text(TOOL)
    tools = load_served_tools(tmp_path / "loop_tool.py")
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    reply = types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))

    async def sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
        return reply

    async with Client(create_server(tools, keys=KEYS, store=store), mode="2026-07-28", sampling_callback=sampling) as c:
        first = await c.session.call_tool("loop", {"n": 3}, allow_input_required=True)
        (record,) = store.list()
        (asked,) = record.meta.pending
        pending = ({**asked, "key": "sample-99"},)
        store.checkpoint(record.run_id, record.version, meta=dataclasses.replace(record.meta, pending=pending))
        refused = await c.session.call_tool(
            "loop",
            {"n": 3},
            input_responses={"sample-99": reply},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert refused.is_error and "answers to requests that were not asked: sample-99" in refused.content[0].text
    (after,) = store.list()
    assert after.version == record.version + 3  # the edit, the claim, and the claim put back
    assert after.status == "waiting" and after.meta.extra["round"] == 1 and "claim" not in after.meta.extra
    store.close()
