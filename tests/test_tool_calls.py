"""Tools that call tools (`ctx.call_tool`) in the runtime: a tool of this server runs its before(), its client phase
as a sub-run of the caller's run, and its after(); any other goes to the client (MockClient scripts it). Each
call is recorded in the caller's history as a tool_use and its tool_result, travels in saved runs, obeys its
limits (calls per run, depth, time, the tools a branch may call) with a typed error at the yield, and a run
restored mid-call is never called twice."""

from __future__ import annotations

import textwrap
import time
from typing import Any

import anyio
import pytest
from _runtime_support import run
from pydantic import BaseModel

from branchc import (
    AssistantToolCallMessage,
    Limits,
    ToolCallInterruptedError,
    ToolCallLimitError,
    ToolDepthError,
    ToolNotAllowedError,
    ToolResult,
    ToolResultMessage,
    ToolTimeoutError,
    resumable,
    run_tool,
    tool,
)
from branchc.runtime.calling import interrupt_started
from branchc.runtime.compiled import load_compiled_tool
from branchc.runtime.runstate import RunStateError, dump_run, load_run
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio


class Amount(BaseModel):
    x: int


def doubling(calls: list[str] | None = None):
    """A tool of this server with all three phases; `calls` records each phase as it runs."""
    seen = [] if calls is None else calls
    double = tool("double", params=Amount)

    @double.before
    def before(params):
        seen.append(f"before {params.x}")
        return {"x": params.x}

    @double.client
    def client(handoff, ctx):
        r = yield ctx.sample(prompt=f"double {handoff['x']}?")
        return {"doubled": handoff["x"] * 2, "said": r.text}

    @double.after
    def after(handoff, result):
        seen.append("after")
        return {**result, "checked": True}

    return double


def calling(body, name: str = "main", limits: Limits | None = None):
    t = tool(name, limits=limits)
    t.client(body)
    return t


async def test_a_tool_of_this_server_runs_all_its_phases_and_its_result_joins_the_history():
    phases: list[str] = []
    double = doubling(phases)

    out: dict[str, Any] = {}

    def body(handoff, ctx):
        out["result"] = yield ctx.call_tool("double", {"x": 21})
        again = yield ctx.sample(prompt="and now?")
        out["messages"] = list(ctx.messages)
        return again.text

    client = MockClient(["sure", "done"], [])
    _, events = await run(calling(body), client, tools={"double": double})
    result: ToolResult = out["result"]
    assert result.structured_content == {"doubled": 42, "said": "sure", "checked": True}
    assert not result.is_error and result.data == result.structured_content
    assert phases == ["before 21", "after"]
    use, answer, prompt, reply = out["messages"]
    assert isinstance(use, AssistantToolCallMessage) and use.tool_calls[0].function.name == "double"
    assert use.tool_calls[0].function.arguments == {"x": 21}
    assert isinstance(answer, ToolResultMessage) and answer.tool_call_id == use.tool_calls[0].id
    assert answer.content == '{"doubled":42,"said":"sure","checked":true}'
    assert (prompt.content, reply.content) == ("and now?", "done")
    assert [call.last_text for call in client.sample_calls] == ["double 21?", "and now?"]
    assert len(client.sample_calls[0].messages) == 1  # the sub-run's history is its own
    assert [m.content for m in client.sample_calls[1].messages][-1] == "and now?"  # the caller's saw the call
    assert [e["event"] for e in events.named("call_tool")] == ["call_tool"]
    assert client.tool_calls == []  # a tool of this side never reaches the client


async def test_any_other_tool_goes_to_the_client_and_an_answered_tool_use_keeps_its_id():
    out: list[Any] = []

    def body(handoff, ctx):
        out.append((yield ctx.call_tool("search", {"q": "lisbon"}, server="web")))
        out.append((yield ctx.call_tool("lookup", {}, tool_call_id="call_9")))  # the model's own tool_use
        out.append(list(ctx.messages))

    client = MockClient(tool_responses=[{"content": [{"type": "text", "text": "3 hits"}]}, "looked"])
    await run(calling(body), client)
    found, said, messages = out
    assert [(c.name, c.arguments, c.server) for c in client.tool_calls] == [
        ("search", {"q": "lisbon"}, "web"),
        ("lookup", {}, None),
    ]
    assert found.text == "3 hits" and said.text == "looked"
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["AssistantToolCallMessage", "ToolResultMessage", "ToolResultMessage"]
    assert messages[2].tool_call_id == "call_9"


@pytest.mark.parametrize(
    ("phase", "words"),
    [
        ("params", "invalid params for double"),
        ("before", "double: before() failed: ValueError: no ledger"),
        ("client", "double: client() failed: ValueError: no model"),
        ("after", "double: after() failed: ValueError: no commit"),
    ],
)
async def test_a_tool_that_fails_gives_an_error_result_not_an_exception(phase, words):
    double = tool("double", params=Amount)

    @double.before
    def before(params):
        if phase == "before":
            raise ValueError("no ledger")
        return {"x": params.x}

    @double.client
    def client(handoff, ctx):
        yield ctx.log("info", "working")
        if phase == "client":
            raise ValueError("no model")
        return handoff

    @double.after
    def after(handoff, result):
        if phase == "after":
            raise ValueError("no commit")
        return result

    def body(handoff, ctx):
        r = yield ctx.call_tool("double", {"x": "many"} if phase == "params" else {"x": 1})
        return [r.is_error, r.text]

    is_error, text = (await run(calling(body), MockClient(), tools={"double": double}))[0]
    assert is_error and words in text


async def test_limits_on_tool_calls_are_raised_at_the_yield():
    def many(handoff, ctx):
        out = []
        for n in range(3):
            try:
                out.append((yield ctx.call_tool("search", {"n": n}, server="web")).text)
            except ToolCallLimitError as error:
                out.append(str(error))
        return out

    client = MockClient(tool_responses=["a", "b", "c"])
    out = (await run(calling(many, limits=Limits(max_tool_calls=2)), client))[0]
    assert out[:2] == ["a", "b"] and "tool call 3 of a run that may make 2 (Limits.max_tool_calls)" in out[2]

    loop = tool("loop", params=Amount)  # a tool that calls itself: stopped at the depth

    @loop.client
    def again(handoff, ctx):
        r = yield ctx.call_tool("loop", {"x": handoff["x"] + 1})
        return {"depth": handoff["x"], "inner": r.data}

    def body(handoff, ctx):
        try:
            return (yield ctx.call_tool("loop", {"x": 1})).data
        except ToolDepthError as error:
            return str(error)

    out = (await run(calling(body, limits=Limits(max_tool_depth=3)), MockClient(), tools={"loop": loop}))[0]
    assert (out["depth"], out["inner"]["depth"]) == (1, 2)
    third = out["inner"]["inner"]  # the third ran, and failed at its own call: a fourth would be too deep
    assert third.startswith("loop: client() failed: ToolDepthError:") and "would run 4 tools deep" in third


class Slow(MockClient):
    async def call_tool(self, name, arguments, server):
        await anyio.sleep(5)


async def test_a_call_past_its_time_budget_is_a_timeout_at_its_yield():
    def body(handoff, ctx):
        try:
            yield ctx.call_tool("slow", {}, server="web")
        except ToolTimeoutError as error:
            return str(error)

    started = time.monotonic()
    out = (await run(calling(body, limits=Limits(tool_timeout=0.05)), Slow()))[0]
    assert time.monotonic() - started < 2
    assert out == "the call of tool 'web:slow' ran past its deadline"


@resumable
def _helper(ctx, names):
    out = []
    for name in names:
        try:
            out.append((yield ctx.call_tool(name, {}, server="web")).text)
        except ToolNotAllowedError as error:
            out.append(str(error))
    inner = yield ctx.branch(_inner, tools=["web:*"])  # it cannot give itself more than it has
    return [*out, inner]


@resumable
def _inner(ctx):
    try:
        yield ctx.call_tool("write", {}, server="web")
    except ToolNotAllowedError:
        return "still only read"
    return "wrote"


async def test_the_tools_a_branch_may_call():
    def body(handoff, ctx):
        return (yield ctx.branch(_helper, ["read", "write"], tools=["web:read"]))

    client = MockClient(tool_responses=["read it"])
    out = (await run(calling(body), client))[0]
    assert out[0] == "read it"
    assert "_helper: ctx.call_tool('web:write'): this branch may call only web:read" in out[1]
    assert out[2] == "still only read"
    assert [c.name for c in client.tool_calls] == ["read"]


TOOLS = textwrap.dedent(
    """
    from pydantic import BaseModel

    from branchc import Context, tool


    class Amount(BaseModel):
        x: int


    double = tool("double", params=Amount)


    @double.before
    def before(params):
        return {"x": params.x}


    @double.client
    def double_client(handoff: dict, ctx: Context):
        r = yield ctx.sample(prompt=f"double {handoff['x']}?")
        return {"doubled": handoff["x"] * 2, "said": r.text}


    main = tool("main")


    @main.client
    def main_client(handoff: dict, ctx: Context):
        first = yield ctx.call_tool("double", {"x": 2})
        both = yield ctx.all([ctx.call_tool("double", {"x": 3}), ctx.call_tool("search", {}, server="web")])
        return {"first": first.data, "both": [r.data for r in both], "turns": len(ctx.messages)}
    """
)


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "chain_tools.py").write_text(TOOLS)
    return {name: load_compiled_tool(tmp_path / "chain_tools.py", name) for name in ("main", "double")}


def _answers() -> MockClient:
    return MockClient(["two", "three"], [], tool_responses=["hits"])


async def test_a_compiled_run_saved_at_every_wait_ends_as_the_same_run_in_memory(compiled):
    saved = await run_tool(compiled["main"], {}, _answers(), tools=compiled, portable=True)
    live = await run_tool(compiled["main"], {}, _answers(), tools=compiled)
    assert (
        saved
        == live
        == {
            "first": {"doubled": 4, "said": "two"},
            "both": [{"doubled": 6, "said": "three"}, "hits"],
            "turns": 6,
        }
    )


async def test_a_run_saved_mid_call_is_told_so_and_one_saved_with_the_outcome_feeds_it(compiled):
    from branchc.runtime.machine import Machine

    machine = Machine("main", "1", Limits())
    machine.start(compiled["main"].client_fn, {}, "main_client")
    machine.advance()
    (entry,) = machine.ready_calls()
    machine.start_call(entry.key)  # under way, when the process stops: saved so
    text = dump_run({}, machine)
    machine.release()

    _, restored = load_run(text)
    interrupt_started(restored)  # what a driver does with a run it restores: the call is not made again
    restored.advance()
    assert restored.done and not restored.ok
    assert isinstance(restored.result, ToolCallInterruptedError)
    assert "whether it took effect is unknown, so it is not made again" in str(restored.result)

    _, again = load_run(text)
    again.record_call(entry.key, True, ToolResult.of({"doubled": 4}))  # came back, and was written down
    with_outcome = dump_run({}, again)
    again.release()
    _, fed = load_run(with_outcome)
    interrupt_started(fed)  # an outcome is there: fed as it is, nothing interrupted, nothing called
    assert not fed.ready_calls() and fed.ready
    fed.release()


async def test_a_forged_call_in_a_saved_run_is_refused_with_its_place(compiled):
    from branchc.runtime.machine import Machine

    machine = Machine("main", "1", Limits())
    machine.start(compiled["main"].client_fn, {}, "main_client")
    machine.advance()
    (entry,) = machine.ready_calls()
    entry.call.started = "yes"  # what a forger could write there: the codec takes it, the run does not
    text = dump_run({}, machine)
    machine.release()
    with pytest.raises(RunStateError, match=r"calls\[0\]\[4\]\.started: expected bool"):
        load_run(text)


async def test_a_call_in_a_group_is_dropped_when_a_sibling_fails():
    class Hold(MockClient):
        async def call_tool(self, name, arguments, server):
            self.tool_calls.append(name)
            await anyio.sleep(30)

    @resumable
    def failing(ctx):
        yield ctx.sample(prompt="go on?")  # answered while the call is under way
        raise ValueError("sibling failed")

    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.call_tool("slow", {}, server="web"), ctx.branch(failing)])
        except ValueError as error:
            return str(error)

    client = Hold(["yes"])
    with anyio.fail_after(5):
        out = (await run(calling(body), client))[0]
    assert out == "sibling failed" and client.tool_calls == ["slow"]


async def test_run_tool_without_tools_sends_every_call_to_the_client_and_a_client_without_calls_refuses():
    def body(handoff, ctx):
        try:
            return (yield ctx.call_tool("double", {"x": 1})).text
        except ToolNotAllowedError as error:
            return str(error)

    class Plain:
        capabilities = frozenset()

        async def log(self, level: str, message: str) -> None:
            pass

        async def notify(self, *args: Any) -> None:
            pass

    assert (await run(calling(body), MockClient(tool_responses=["scripted"])))[0] == "scripted"
    assert (await run(calling(body), Plain()))[0] == "ctx.call_tool('double'): this server has no such tool"
