"""The runtime drives generators only through send/throw: a hand-written "compiled" object behaves the same.

Also: yielding something that is not an effect.
"""

from __future__ import annotations

import inspect
import os

import anyio
import pytest
from _runtime_support import EchoClient, Events, FakeCompiled, compiled, run
from pydantic import BaseModel, Field

from branchc import (
    BranchDepthError,
    EffectTypeError,
    ElicitValidationError,
    Limits,
    ToolPhaseError,
    resumable,
    run_tool,
    tool,
)
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio

FOREVER = 30.0


class Pick(BaseModel):
    n: int = Field(ge=1)


class Topic(BaseModel):
    topic: str


def build(kind: str, calls: list):
    """The same tool twice: native generators, or every generator wrapped as a fake compiled object."""

    def wrap(fn):
        return resumable(fn) if kind == "native" else compiled(fn, calls)

    def helper(ctx, word):
        r = yield ctx.sample(prompt=f"helper {word}")
        return r.text

    def analyze(ctx, topic, *, deep=False):
        r = yield ctx.sample(prompt=f"analyze {topic}")
        sub = None
        if deep:
            sub = yield ctx.branch(analyze, f"{topic}+", inherit_messages=False)
        text = yield from helper(ctx, topic)
        return {"text": r.text, "sub": sub, "helper": text, "depth": ctx.depth, "seen": len(ctx.messages)}

    def failing(ctx):
        yield ctx.sample(prompt="tick")
        yield ctx.log("info", "failing soon")
        raise ValueError("branch failed")

    def waiting(ctx):
        try:
            yield ctx.sample(prompt="wait forever")
        finally:
            yield ctx.log("info", "waiting cleaned up")

    def runaway(ctx):
        try:
            return (yield ctx.branch(runaway))
        except BranchDepthError as error:
            return f"stopped at {ctx.depth}: {error}"

    analyze = wrap(analyze)
    failing = wrap(failing)
    waiting = wrap(waiting)
    runaway = wrap(runaway)

    def client(handoff, ctx):
        yield ctx.log("info", f"start {handoff['topic']}")
        yield ctx.notify("working", progress=0, total=3)
        first = yield ctx.sample(prompt="hello", system_prompt="sys")
        deep = yield ctx.branch(analyze, handoff["topic"], deep=True)
        both = yield ctx.all([ctx.branch(analyze, "x"), ctx.branch(analyze, "y", inherit_messages=False)])
        try:
            yield ctx.all([ctx.branch(waiting), ctx.branch(failing)])
        except ValueError as error:
            halted = str(error)
        stopped = yield ctx.branch(runaway)
        while True:
            try:
                choice = yield ctx.elicit("pick", message="Pick", schema=Pick, context={"topic": handoff["topic"]})
                break
            except ElicitValidationError as error:
                yield ctx.log("warning", error.errors[0])
        declined = yield ctx.elicit("again", message="Again?", schema=Pick)
        yield ctx.notify("done", progress=3, total=3)
        return {
            "first": first.text,
            "deep": deep,
            "both": both,
            "halted": halted,
            "stopped": stopped,
            "choice": choice.content.n,
            "exchange": [m.model_dump(mode="json") for m in choice.exchange.messages],
            "declined": declined.action,
            "history": [m.content for m in ctx.messages],
        }

    t = tool("proto", params=Topic, limits=Limits(max_depth=3))
    t.client(client if kind == "native" else compiled(client, calls))
    return t


def _client():
    return EchoClient(
        delays={"wait forever": FOREVER, "tick": 0.02},
        elicit_answers=[
            {"action": "accept", "content": {"n": 0}},
            {"action": "accept", "content": {"n": 2}},
            {"action": "decline"},
        ],
    )


def _calls_of(client):
    return {
        "samples": [r.model_dump(mode="json") for r in client.sample_calls],
        "elicits": [r.model_dump(mode="json") for r in client.elicit_calls],
        "logs": client.log_calls,
        "notifies": client.notify_calls,
        "finished": client.finished,
        "cancelled": client.cancelled,
    }


async def test_a_compiled_stand_in_gives_identical_results_client_calls_and_events():
    outcomes = {}
    calls: list = []
    for kind in ("native", "compiled"):
        client = _client()
        events = Events()
        with anyio.fail_after(3):
            result = await run_tool(build(kind, calls), {"topic": "cards"}, client, call_id="same", on_event=events)
        assert events.not_json == []
        outcomes[kind] = (result, _calls_of(client), events.events)

    native, fake = outcomes["native"], outcomes["compiled"]
    assert fake[0] == native[0]
    assert fake[1] == native[1]
    # the stand-in has no frame, so its suspensions carry no source position; all else is equal
    located = [e for e in native[2] if e["event"] == "suspend"]
    assert located and all({"function", "line", "column"} <= e.keys() for e in located)
    position = ("function", "line", "column")
    unlocated = [{k: v for k, v in e.items() if e["event"] != "suspend" or k not in position} for e in native[2]]
    assert fake[2] == unlocated

    result = native[0]
    assert result["first"] == "re: hello"
    assert result["deep"]["sub"]["depth"] == 2
    assert result["deep"]["helper"] == "re: helper cards"
    assert [b["text"] for b in result["both"]] == ["re: analyze x", "re: analyze y"]
    assert result["halted"] == "branch failed"
    assert result["stopped"].startswith("stopped at 3: ")
    assert result["choice"] == 2
    assert result["exchange"][0]["tool_calls"][0]["id"] == "elicit_same_2"
    assert result["declined"] == "decline"
    assert result["history"] == ["hello", "re: hello"]
    assert ("info", "waiting cleaned up") in native[1]["logs"]
    assert ("warning", "n: Input should be greater than or equal to 1 (got 0)") in native[1]["logs"]
    assert native[1]["cancelled"] == ["wait forever"]

    # only send and throw were used, and every exception kind reached the fake through throw
    kinds = {name for name, _ in calls}
    assert kinds == {"send", "throw"}
    thrown = {detail for name, detail in calls if name == "throw"}
    assert thrown == {"GeneratorExit", "ValueError", "BranchDepthError", "ElicitValidationError"}
    assert calls[0] == ("send", "NoneType")


async def test_a_compiled_stand_in_fails_the_same_way():
    outcomes = {}
    for kind in ("native", "compiled"):

        def body(handoff, ctx):
            yield ctx.sample(prompt="one")
            raise RuntimeError(f"broken after {len(ctx.messages)} messages")

        t = tool("proto")
        calls: list = []
        t.client(body if kind == "native" else compiled(body, calls))
        with pytest.raises(ToolPhaseError) as info:
            await run_tool(t, {}, EchoClient())
        outcomes[kind] = (str(info.value), type(info.value.__cause__))
    assert outcomes["native"] == outcomes["compiled"]
    assert outcomes["native"] == ("proto: client() failed: RuntimeError: broken after 2 messages", RuntimeError)


async def test_the_first_call_is_send_none_and_the_return_value_comes_from_stop_iteration():
    calls: list = []

    def body(handoff, ctx):
        got = yield ctx.log("info", "a")
        return {"got": got}

    t = tool("t")
    t.client(compiled(body, calls))
    assert (await run(t, MockClient()))[0] == {"got": None}
    assert calls == [("send", "NoneType"), ("send", "NoneType")]


# -- yielding something that is not an effect --------------------------------------------------


def _line_of(fn, marker):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if marker in line)


HERE = os.path.relpath(__file__)


async def test_yielding_a_non_effect_names_tool_place_and_type():
    def play(handoff, ctx):
        yield 42  # not an effect

    t = tool("pick")
    t.client(play)
    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    error = info.value.__cause__
    assert isinstance(error, EffectTypeError)
    assert str(error) == (
        f"pick: {play.__qualname__} yielded a int at {HERE}:{_line_of(play, 'yield 42')}, which is not an effect; "
        "yield what ctx makes (ctx.sample, ctx.elicit, ctx.log, ctx.notify, ctx.branch, ctx.all)"
    )
    assert info.value.phase == "client"


async def test_forgetting_to_call_a_ctx_method_is_reported():
    def play(handoff, ctx):
        yield ctx.log("info", "fine")
        yield ctx.sample  # forgot the call

    t = tool("pick")
    t.client(play)
    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    assert f"yielded a method at {HERE}:{_line_of(play, 'forgot the call')}," in str(info.value.__cause__)


async def test_a_non_effect_in_a_branch_names_the_branch_and_is_catchable_at_that_yield():
    def bad_branch(ctx):
        try:
            yield {"kind": "sample", "prompt": "hand-made"}
        except EffectTypeError as error:
            return str(error)

    bad_branch = resumable(bad_branch)

    def play(handoff, ctx):
        return (yield ctx.branch(bad_branch))

    t = tool("pick")
    t.client(play)
    result, _ = await run(t, MockClient())
    line = _line_of(bad_branch, "hand-made")
    assert result.startswith(f"pick: {bad_branch.__qualname__} yielded a dict at {HERE}:{line}, which is not an effect")


@pytest.mark.parametrize(
    ("location", "expected"), [("tools/pick.py:12", "tools/pick.py:12"), (None, "an unknown line")]
)
async def test_a_non_effect_from_a_compiled_object_uses_its_source_location(location, expected):
    def play(handoff, ctx):
        yield ctx.log("info", "ok")
        yield "not an effect"

    calls: list = []
    t = tool("pick")
    t.client(compiled(play, calls, source_location=location))
    with pytest.raises(ToolPhaseError) as info:
        await run_tool(t, {}, MockClient())
    assert str(info.value.__cause__).startswith(f"pick: {play.__qualname__} yielded a str at {expected}, which is")
    assert calls[-1] == ("throw", "EffectTypeError")


async def test_the_fake_is_a_faithful_generator_stand_in():
    calls: list = []

    def gen():
        try:
            received = yield 1
            yield received * 2
        finally:
            calls.append(("finally", ""))

    fake = FakeCompiled(gen(), calls)
    assert iter(fake) is fake
    assert next(fake) == 1
    assert fake.send(5) == 10
    with pytest.raises(KeyError):
        fake.throw(KeyError("k"))
    assert [name for name, _ in calls] == ["__iter__", "__next__", "send", "throw", "finally"]
