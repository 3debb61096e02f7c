"""run_tool's phases, the JSON boundary between them, phase errors, capabilities and events."""

from __future__ import annotations

import datetime
import inspect
import json
import os
from pathlib import Path

import pytest
from _runtime_support import CAPS, EchoClient, Events, run
from pydantic import BaseModel, Field

from branchc import (
    JsonDataError,
    MissingCapabilityError,
    ToolPhaseError,
    resumable,
    run_tool,
    tool,
)
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio


class Params(BaseModel):
    count: int = Field(5, ge=2, le=10)
    name: str
    tags: list[str] = []


class Point(BaseModel):
    x: int = 1


# -- phases ----------------------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_before_client_after_in_order(asynchronous):
    order: list = []
    t = tool("t", params=Params)

    if asynchronous:

        @t.before
        async def before(params):
            order.append(("before", params.count))
            return {"cards": ["a"] * params.count}

        @t.after
        async def after(handoff, result):
            order.append(("after", handoff, result))
            return {"final": result["picked"], "of": len(handoff["cards"])}
    else:

        @t.before
        def before(params):
            order.append(("before", params.count))
            return {"cards": ["a"] * params.count}

        @t.after
        def after(handoff, result):
            order.append(("after", handoff, result))
            return {"final": result["picked"], "of": len(handoff["cards"])}

    @t.client
    def client(handoff, ctx):
        order.append(("client", handoff))
        yield ctx.log("info", "x")
        return {"picked": handoff["cards"][0]}

    result, events = await run(t, MockClient(), {"count": 3, "name": "n"})
    assert result == {"final": "a", "of": 3}
    assert order == [
        ("before", 3),
        ("client", {"cards": ["a", "a", "a"]}),
        ("after", {"cards": ["a", "a", "a"]}, {"picked": "a"}),
    ]
    assert events.names == ["start", "handoff", "suspend", "log", "client_result", "result"]


async def test_without_before_the_handoff_is_the_params_as_json():
    class When(BaseModel):
        day: datetime.date
        n: int = 1

    t = tool("t", params=When)

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return handoff

    result, _ = await run(t, MockClient(), {"day": "2024-02-03"})
    assert result == {"day": "2024-02-03", "n": 1}


async def test_without_after_the_result_is_the_client_result():
    t = tool("t")

    @t.before
    def before(params):
        return [1, 2]

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return {"sum": sum(handoff)}

    assert (await run(t, MockClient()))[0] == {"sum": 3}


async def test_client_that_returns_before_any_yield():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        if handoff is not None:
            return "early"
        yield ctx.log("info", "unreachable")

    client_ = MockClient()
    assert (await run(t, client_))[0] == "early"
    assert client_.log_calls == []


async def test_client_gets_a_json_copy_of_the_handoff():
    original = {"cards": ["a", "b"], "meta": {"n": 2}, "x": 1.0}
    seen: dict = {}
    t = tool("t")

    @t.before
    def before(params):
        return original

    @t.client
    def client(handoff, ctx):
        seen["client_handoff_is_original"] = handoff is original
        handoff["cards"].append("evil")
        handoff["meta"]["n"] = 99
        del handoff["x"]
        yield ctx.log("info", "mutated")
        return "done"

    @t.after
    def after(handoff, result):
        seen["after"] = json.loads(json.dumps(handoff))
        seen["after_is_original"] = handoff is original
        return result

    assert (await run(t, MockClient()))[0] == "done"
    assert seen["client_handoff_is_original"] is False
    assert seen["after"] == {"cards": ["a", "b"], "meta": {"n": 2}, "x": 1.0}
    assert original == {"cards": ["a", "b"], "meta": {"n": 2}, "x": 1.0}


async def test_shared_references_are_fine_and_become_independent_copies():
    shared = {"k": [1]}
    seen: dict = {}
    t = tool("t")

    @t.before
    def before(params):
        return {"a": shared, "b": [shared, shared]}

    @t.client
    def client(handoff, ctx):
        handoff["a"]["k"].append(2)
        seen["b"] = handoff["b"]
        yield ctx.log("info", "x")
        return handoff

    result, _ = await run(t, MockClient())
    assert result == {"a": {"k": [1, 2]}, "b": [{"k": [1]}, {"k": [1]}]}
    assert shared == {"k": [1]}


async def test_none_handoff_is_fine():
    t = tool("t")

    @t.before
    async def before(params):
        return None

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", repr(handoff))
        return handoff

    client_ = MockClient()
    assert (await run(t, client_))[0] is None
    assert client_.log_calls == [("info", "None")]


# -- the JSON boundary -----------------------------------------------------------------------


def _cycle():
    data: dict = {"a": []}
    data["a"].append(data)
    return data


KINDS = "JSON data is None, bool, int, float, str, list, and dict with str keys"


def return_line(fn) -> int:
    """The line of the (one) `return` in fn's source."""
    lines, first = inspect.getsourcelines(fn)
    (index,) = [i for i, line in enumerate(lines) if line.lstrip().startswith("return ")]
    return first + index


def not_json(fn, phase: str, *problems: str) -> str:
    """The message for data a phase returned that is not JSON: the file:line of its `return`, each problem,
    the hint."""
    relative = os.path.relpath(__file__)  # relative to the working folder when inside it
    place = f"{__file__ if relative.startswith('..') else relative}:{return_line(fn)}"
    lines = [f"{place}: {phase}() returned data that is not JSON:", *(f"  {p}" for p in problems)]
    return "\n".join([*lines, f"  hint: convert them in {phase}(): {KINDS}"])


@pytest.mark.parametrize(
    ("handoff", "message"),
    [
        (
            {"flights": [1, 2, datetime.datetime(2024, 1, 1)]},
            "handoff['flights'][2]: datetime is not JSON data (use .isoformat())",
        ),
        ({"p": (1, 2)}, "handoff['p']: tuple is not JSON data (use a list)"),
        ((1, 2), "handoff: tuple is not JSON data (use a list)"),
        ({"x": float("nan")}, "handoff['x']: nan is not JSON data (JSON has no NaN or infinity)"),
        ({"x": [0.5, float("-inf")]}, "handoff['x'][1]: -inf is not JSON data (JSON has no NaN or infinity)"),
        ({"ok": 1, 1: "a"}, "handoff: key 1 is a int; JSON object keys are str"),
        ({"d": {("a",): 1}}, "handoff['d']: key ('a',) is a tuple; JSON object keys are str"),
        ({"m": [Point()]}, "handoff['m'][0]: Point is not JSON data (use .model_dump(mode='json'))"),
        (Point(), "handoff: Point is not JSON data (use .model_dump(mode='json'))"),
        ({"s": {1, 2}}, "handoff['s']: set is not JSON data (use a sorted list)"),
        ({"b": b"raw"}, "handoff['b']: bytes is not JSON data (decode or base64-encode it to a str)"),
        (_cycle(), "handoff['a'][0]: the value contains itself (a cycle is not JSON data)"),
    ],
)
async def test_handoff_that_is_not_json_data_names_the_path(handoff, message):
    started: list = []
    t = tool("t")

    @t.before
    def before(params):
        return handoff

    @t.client
    def client(h, ctx):
        started.append(h)
        yield ctx.log("info", "x")

    client_ = MockClient()
    events = Events()
    with pytest.raises(JsonDataError) as info:
        await run_tool(t, {}, client_, on_event=events)
    assert str(info.value) == not_json(before, "before", message)
    assert info.value.problems == [message] and info.value.phase == "before"
    assert not isinstance(info.value, ToolPhaseError)
    assert started == []
    assert client_.log_calls == []
    assert events.names == ["start"]


async def test_client_result_that_is_not_json_data():
    after_calls: list = []
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return {"ok": [1, {"when": datetime.date(2024, 1, 1)}]}

    @t.after
    def after(handoff, result):
        after_calls.append(result)
        return result

    with pytest.raises(JsonDataError) as info:
        await run_tool(t, {}, MockClient())
    assert str(info.value) == not_json(
        client, "client", "client_result['ok'][1]['when']: date is not JSON data (use .isoformat())"
    )
    assert after_calls == []


async def test_after_result_that_is_not_json_data():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return [1]

    @t.after
    def after(handoff, result):
        return {"r": tuple(result)}

    with pytest.raises(JsonDataError) as info:
        await run_tool(t, {}, MockClient())
    assert str(info.value) == not_json(after, "after", "result['r']: tuple is not JSON data (use a list)")


# -- phase errors ----------------------------------------------------------------------------


async def test_error_in_before_is_a_tool_phase_error():
    boom = KeyError("db")
    started: list = []
    t = tool("pick")

    @t.before
    def before(params):
        raise boom

    @t.client
    def client(handoff, ctx):
        started.append(1)
        yield ctx.log("info", "x")

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    error = info.value
    assert (error.tool, error.phase) == ("pick", "before")
    assert error.__cause__ is boom
    assert error.error is boom
    assert str(error) == "pick: before() failed: KeyError: 'db'"
    assert started == []


async def test_error_in_async_after_is_a_tool_phase_error():
    t = tool("pick")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return 1

    @t.after
    async def after(handoff, result):
        raise ValueError(f"bad {result}")

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    assert (info.value.tool, info.value.phase) == ("pick", "after")
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value) == "pick: after() failed: ValueError: bad 1"


async def test_error_in_client_is_a_tool_phase_error_and_after_is_skipped():
    after_calls: list = []
    t = tool("pick")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        raise ZeroDivisionError("oops")

    @t.after
    def after(handoff, result):
        after_calls.append(result)

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    assert (info.value.tool, info.value.phase) == ("pick", "client")
    assert type(info.value.__cause__) is ZeroDivisionError
    assert str(info.value) == "pick: client() failed: ZeroDivisionError: oops"
    assert after_calls == []


async def test_error_while_making_the_first_generator_is_a_client_phase_error():
    t = tool("pick")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("nope", "x")

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    assert info.value.phase == "client"
    assert isinstance(info.value.__cause__, ValueError)
    assert "ctx.log(level='nope')" in str(info.value)


# -- capabilities ----------------------------------------------------------------------------


async def test_missing_capability_is_refused_before_anything_runs():
    ran: list = []
    t = tool("pick", requires={"sampling", "elicitation"})

    @t.before
    def before(params):
        ran.append("before")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")

    with pytest.raises(MissingCapabilityError) as info:
        await run_tool(t, {}, MockClient(capabilities={"sampling"}))
    assert str(info.value) == "pick requires elicitation, which the client does not offer"
    assert ran == []


async def test_client_without_a_capabilities_attribute_offers_nothing():
    class Bare:
        async def sample(self, request):
            return "x"

        async def elicit(self, request):
            return {"action": "cancel"}

        async def log(self, level, message):
            pass

        async def notify(self, message, progress, total):
            pass

    t = tool("pick", requires={"sampling", "elicitation"})

    @t.client
    def client(handoff, ctx):
        r = yield ctx.sample(prompt="hi")
        return r.text

    with pytest.raises(MissingCapabilityError, match="pick requires elicitation, sampling, which the client"):
        await run_tool(t, {}, Bare())
    plain = tool("plain")
    plain.client(client)
    assert (await run(plain, Bare()))[0] == "x"


async def test_a_tool_without_requirements_runs_on_a_bare_client():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        r = yield ctx.sample(prompt="hi")
        return r.text

    client_ = EchoClient(capabilities=frozenset())
    assert (await run(t, client_))[0] == "re: hi"
    assert CAPS - client_.capabilities == CAPS


# -- events ----------------------------------------------------------------------------------


class Pick(BaseModel):
    n: int


@resumable
def _event_child(ctx, word):
    r = yield ctx.sample(prompt=f"say {word}")
    return {"child": r.text, "odd": {1, 2}}


async def test_events_are_json_data_in_order_with_their_fields():
    t = tool("ev", params=Params, requires={"sampling"})

    @t.before
    def before(params):
        return {"name": params.name}

    @t.client
    def client(handoff, ctx):
        yield ctx.log("warning", "careful")
        yield ctx.notify("half", progress=0.5, total=1.0)
        child = yield ctx.branch(_event_child, "hi")
        r = yield ctx.elicit("pick", message="Pick", schema=Pick)
        return {"child": child["child"], "n": r.content.n}

    @t.after
    def after(handoff, result):
        return {**result, "name": handoff["name"]}

    client_ = MockClient(["yo"], [{"action": "accept", "content": {"n": 4}}])
    result, events = await run(t, client_, {"name": "z"}, call_id="c1")
    assert result == {"child": "yo", "n": 4, "name": "z"}
    assert events.names == [
        "start", "handoff", "suspend", "log", "suspend", "notify", "suspend", "branch", "suspend", "sample",
        "branch_end", "suspend", "elicit", "client_result", "result",
    ]  # fmt: skip
    # each suspension says where: the function, and the yield's line and column in the source
    suspends = [e for e in events.events if e["event"] == "suspend"]
    assert [(e["branch"], e["function"]) for e in suspends] == [
        ("0", "test_events_are_json_data_in_order_with_their_fields.<locals>.client"),
        ("0", "test_events_are_json_data_in_order_with_their_fields.<locals>.client"),
        ("0", "test_events_are_json_data_in_order_with_their_fields.<locals>.client"),
        ("0.1", "_event_child"),
        ("0", "test_events_are_json_data_in_order_with_their_fields.<locals>.client"),
    ]
    source = Path(__file__).read_text().splitlines()
    assert "ctx.elicit(" in source[suspends[-1]["line"] - 1][suspends[-1]["column"] - 1 :]
    # every event survives a JSON round trip unchanged (no tuples, no objects)
    assert events.events == events.raw
    by = {e["event"]: e for e in events.events}
    assert by["start"] == {
        "event": "start",
        "tool": "ev",
        "call_id": "c1",
        "params": {"count": 5, "name": "z", "tags": []},
    }
    assert by["handoff"] == {"event": "handoff", "handoff": {"name": "z"}}
    assert by["log"] == {"event": "log", "branch": "0", "depth": 0, "level": "warning", "message": "careful"}
    assert by["notify"] == {
        "event": "notify", "branch": "0", "depth": 0, "message": "half", "progress": 0.5, "total": 1.0,
    }  # fmt: skip
    assert by["branch"] == {
        "event": "branch", "branch": "0.1", "depth": 1, "parent": "0", "name": "_event_child",
        "function": "_event_child", "inherit_messages": True,
    }  # fmt: skip
    assert by["sample"]["branch"] == "0.1"
    assert by["sample"]["number"] == 1
    assert by["sample"]["tracked"] is True
    assert by["sample"]["request"] == {"messages": [{"role": "user", "content": "say hi"}], "max_tokens": 1024}
    assert by["sample"]["result"] == {"text": "yo"}
    assert by["sample"]["tokens"] == 2 + 1  # ceil(6/4) + ceil(2/4)
    # a branch result that is not JSON data is shown as its repr
    assert by["branch_end"]["branch"] == "0.1"
    assert by["branch_end"]["result"] == repr({"child": "yo", "odd": {1, 2}})
    assert by["elicit"]["seq"] == 1
    assert by["elicit"]["answer"] == {"action": "accept", "content": {"n": 4}}
    assert by["elicit"]["request"]["requested_schema"] == Pick.model_json_schema()
    assert by["client_result"] == {"event": "client_result", "result": {"child": "yo", "n": 4}}
    assert by["result"] == {"event": "result", "result": {"child": "yo", "n": 4, "name": "z"}}


@resumable
def _failing_child(ctx):
    yield ctx.log("info", "about to fail")
    raise ValueError("boom")


async def test_branch_end_event_reports_the_error():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        try:
            yield ctx.branch(_failing_child)
        except ValueError as error:
            return str(error)

    result, events = await run(t, MockClient())
    assert result == "boom"
    assert events.named("branch_end") == [
        {"event": "branch_end", "branch": "0.1", "depth": 1, "error": "ValueError: boom"}
    ]
