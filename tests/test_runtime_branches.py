"""Sub-branches (history, depth, system prompts, errors) and ctx.all (concurrency, order, halting)."""

from __future__ import annotations

import anyio
import pytest
from _runtime_support import EchoClient, run
from pydantic import BaseModel

from branchc import Message, SampleResult, ToolPhaseError, resumable, run_tool, tool
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio

FOREVER = 30.0


def one_shot(body):
    t = tool("t")
    t.client(body)
    return t


# -- sub-branches ------------------------------------------------------------------------------


def _state(ctx):
    return {
        "depth": ctx.depth,
        "messages": [m.content for m in ctx.messages],
        "parent_messages": [m.content for m in ctx.parent_messages],
        "system_prompt": ctx.system_prompt,
        "parent_system_prompt": ctx.parent_system_prompt,
    }


@resumable
def _child(ctx, word, *, times=1):
    seen = [_state(ctx)]
    for i in range(times):
        yield ctx.sample(prompt=f"{word}{i}")
    seen.append(_state(ctx))
    return seen


@pytest.mark.parametrize("inherit", [True, False])
async def test_branch_history_is_an_inherited_copy_or_fresh(inherit):
    seen: dict = {}

    def body(handoff, ctx):
        yield ctx.sample(prompt="p")
        seen["child"] = yield ctx.branch(_child, "c", times=2, inherit_messages=inherit)
        seen["parent_after"] = [m.content for m in ctx.messages]
        yield ctx.sample(prompt="q")

    client = EchoClient()
    await run(one_shot(body), client)
    inherited = ["p", "re: p"] if inherit else []
    before, after = seen["child"]
    assert before == {
        "depth": 1,
        "messages": inherited,
        "parent_messages": ["p", "re: p"],
        "system_prompt": None,
        "parent_system_prompt": None,
    }
    assert after["messages"] == [*inherited, "c0", "re: c0", "c1", "re: c1"]
    assert after["parent_messages"] == ["p", "re: p"]
    # the child's first request carries the inherited history (or none)
    assert [m.content for m in client.sample_calls[1].messages] == [*inherited, "c0"]
    # nothing the child did leaks into the parent's history
    assert seen["parent_after"] == ["p", "re: p"]
    assert [m.content for m in client.sample_calls[-1].messages] == ["p", "re: p", "q"]


@resumable
def _nest(ctx, levels):
    here = _state(ctx)
    if levels == 0:
        r = yield ctx.sample(prompt="leaf")
        return [here, r.text]
    below = yield ctx.branch(_nest, levels - 1)
    return [here, *below]


async def test_depth_ids_and_system_prompts_through_nested_branches():
    def body(handoff, ctx):
        chain = yield ctx.branch(_nest, 2, system_prompt="S1")
        override = yield ctx.branch(_nest, 0, system_prompt="S2")
        return [chain, override]

    client = EchoClient()
    result, events = await run(one_shot(body), client)
    chain, override = result
    assert [(s["depth"], s["system_prompt"], s["parent_system_prompt"]) for s in chain[:3]] == [
        (1, "S1", None),
        (2, "S1", "S1"),
        (3, "S1", "S1"),
    ]
    assert chain[3] == "re: leaf"
    assert (override[0]["depth"], override[0]["system_prompt"]) == (1, "S2")
    # the branch's system prompt is sent with its samples
    assert [r.system_prompt for r in client.sample_calls] == ["S1", "S2"]
    assert [(e["branch"], e["depth"], e["parent"]) for e in events.named("branch")] == [
        ("0.1", 1, "0"),
        ("0.1.1", 2, "0.1"),
        ("0.1.1.1", 3, "0.1.1"),
        ("0.2", 1, "0"),
    ]


@resumable
def _system_sampler(ctx):
    a = yield ctx.sample(prompt="a")
    b = yield ctx.sample(prompt="b", system_prompt="explicit")
    c = yield ctx.sample(messages=[{"role": "user", "content": "c"}])
    return [a.text, b.text, c.text]


async def test_sample_system_prompt_overrides_the_branch_one():
    def body(handoff, ctx):
        return (yield ctx.branch(_system_sampler, system_prompt="branch"))

    client = EchoClient()
    await run(one_shot(body), client)
    assert [r.system_prompt for r in client.sample_calls] == ["branch", "explicit", "branch"]


@resumable
def _raiser(ctx, error):
    yield ctx.log("info", "raising")
    raise error


async def test_a_branch_error_is_raised_at_the_parent_yield():
    boom = KeyError("k")

    def body(handoff, ctx):
        try:
            yield ctx.branch(_raiser, boom)
        except KeyError as error:
            caught = error
        r = yield ctx.sample(prompt="after")
        return [caught is boom, r.text]

    assert (await run(one_shot(body), EchoClient()))[0] == [True, "re: after"]


async def test_an_uncaught_branch_error_fails_the_client_phase_with_the_original_cause():
    boom = LookupError("deep")

    def body(handoff, ctx):
        yield ctx.branch(_raiser, boom)

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, MockClient())
    assert info.value.__cause__ is boom
    assert info.value.phase == "client"


@resumable
def _needs_two(ctx, a, b):
    yield ctx.log("info", f"{a}{b}")


async def test_calling_a_branch_with_the_wrong_arguments_raises_at_the_parent_yield():
    def body(handoff, ctx):
        try:
            yield ctx.branch(_needs_two, 1)
        except TypeError as error:
            return str(error)

    client = MockClient()
    result, events = await run(one_shot(body), client)
    assert "_needs_two() missing 1 required positional argument: 'b'" in result
    assert client.log_calls == []
    assert events.named("branch_end")[0]["error"].startswith("TypeError: _needs_two() missing 1 required")


@resumable
def _any_value(ctx):
    yield ctx.log("info", "x")
    return {1, 2}


async def test_branch_results_are_plain_python_values_in_process():
    def body(handoff, ctx):
        value = yield ctx.branch(_any_value)
        return sorted(value)

    assert (await run(one_shot(body), MockClient()))[0] == [1, 2]


# -- ctx.all -----------------------------------------------------------------------------------


class Rendezvous(EchoClient):
    """Each sample of prompt X sets X's event and waits for the other prompt's: sequential would deadlock."""

    def __init__(self, names):
        super().__init__()
        self.ready = {name: anyio.Event() for name in names}

    async def sample(self, request):
        me = request.last_text
        self.ready[me].set()
        for event in self.ready.values():
            await event.wait()
        return await super().sample(request)


@resumable
def _ask(ctx, prompt):
    r = yield ctx.sample(prompt=prompt)
    return r.text


async def test_all_runs_branches_concurrently():
    def body(handoff, ctx):
        return (yield ctx.all([ctx.branch(_ask, "a"), ctx.branch(_ask, "b"), ctx.branch(_ask, "c")]))

    client = Rendezvous(["a", "b", "c"])
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client)
    assert result == ["re: a", "re: b", "re: c"]


async def test_all_runs_leaf_effects_concurrently_too():
    def body(handoff, ctx):
        results = yield ctx.all([ctx.sample(prompt="a"), ctx.log("info", "mid"), ctx.sample(prompt="b")])
        return [results[0].text, results[1], results[2].text]

    client = Rendezvous(["a", "b"])
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client)
    assert result == ["re: a", None, "re: b"]
    assert client.log_calls == [("info", "mid")]


async def test_all_results_are_in_order_not_in_completion_order():
    def body(handoff, ctx):
        return (yield ctx.all([ctx.branch(_ask, "slow"), ctx.branch(_ask, "fast"), ctx.branch(_ask, "mid")]))

    client = EchoClient(delays={"slow": 0.06, "fast": 0.0, "mid": 0.03})
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client)
    assert result == ["re: slow", "re: fast", "re: mid"]
    assert client.finished == ["fast", "mid", "slow"]


async def test_all_of_nothing_is_an_empty_list():
    def body(handoff, ctx):
        return (yield ctx.all([]))

    assert (await run(one_shot(body), MockClient()))[0] == []


@resumable
def _fan(ctx, prefix):
    return (yield ctx.all([ctx.branch(_ask, f"{prefix}1"), ctx.branch(_ask, f"{prefix}2")]))


async def test_nested_all_with_branch_ids():
    def body(handoff, ctx):
        return (yield ctx.all([ctx.branch(_fan, "x"), ctx.branch(_fan, "y")]))

    client = Rendezvous(["x1", "x2", "y1", "y2"])
    with anyio.fail_after(2):
        result, events = await run(one_shot(body), client)
    assert result == [["re: x1", "re: x2"], ["re: y1", "re: y2"]]
    assert sorted(e["branch"] for e in events.named("branch")) == ["0.1", "0.1.1", "0.1.2", "0.2", "0.2.1", "0.2.2"]


@resumable
def _fail_soon(ctx, message, delay_prompt=None):
    if delay_prompt is not None:
        yield ctx.sample(prompt=delay_prompt)
    yield ctx.log("info", f"failing {message}")
    raise ValueError(message)


@resumable
def _wait_forever(ctx, name, trace):
    try:
        yield ctx.sample(prompt=f"wait {name}")
        trace.append(f"{name} resumed")
    except GeneratorExit:
        trace.append(f"{name} GeneratorExit")
        raise
    finally:
        trace.append(f"{name} finally")
        yield ctx.log("info", f"cleanup {name}")
        trace.append(f"{name} logged")


async def test_a_failure_halts_the_others_and_the_first_error_is_catchable_at_the_parent_yield():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.all(
                [
                    ctx.branch(_wait_forever, "w1", trace),
                    ctx.branch(_fail_soon, "first", "tick"),
                    ctx.branch(_wait_forever, "w2", trace),
                ]
            )
        except ValueError as error:
            trace.append(f"parent caught {error}")
        yield ctx.log("info", "parent continues")
        return "survived"

    client = EchoClient(delays={"wait w1": FOREVER, "wait w2": FOREVER, "tick": 0.02})
    with anyio.fail_after(2):
        result, events = await run(one_shot(body), client)
    assert result == "survived"
    for name in ("w1", "w2"):
        assert [t for t in trace if t.startswith(name)] == [
            f"{name} GeneratorExit",
            f"{name} finally",
            f"{name} logged",
        ]
    assert trace[-1] == "parent caught first"
    assert sorted(client.cancelled) == ["wait w1", "wait w2"]
    assert client.finished == ["tick"]
    assert ("info", "cleanup w1") in client.log_calls
    assert ("info", "cleanup w2") in client.log_calls
    assert client.log_calls[-1] == ("info", "parent continues")
    assert sorted(e["branch"] for e in events.named("halt")) == ["0.1", "0.3"]


async def test_the_first_error_in_time_wins_not_the_first_in_order():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.branch(_fail_soon, "late", "slow"), ctx.branch(_fail_soon, "early", "tick")])
        except ValueError as error:
            return [str(error), getattr(error, "__notes__", [])]

    client = EchoClient(delays={"slow": 0.2, "tick": 0.02})
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client)
    assert result == ["early", []]
    assert client.cancelled == ["slow"]
    assert ("info", "failing late") not in client.log_calls
    assert trace == []


async def test_a_request_made_in_the_step_a_sibling_fails_is_never_sent():
    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.branch(_fail_soon, "late", "never asked"), ctx.branch(_fail_soon, "at once")])
        except ValueError as error:
            return str(error)

    client = EchoClient()
    with anyio.fail_after(2):
        result, events = await run(one_shot(body), client)
    assert result == "at once"
    assert client.sample_calls == [] and client.cancelled == []
    assert [e["branch"] for e in events.named("halt")] == ["0.1"]


@resumable
def _bad_cleanup(ctx):
    try:
        yield ctx.sample(prompt="stuck")
    finally:
        raise RuntimeError("second")


async def test_an_error_while_halting_is_noted_on_the_first_error():
    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.branch(_bad_cleanup), ctx.branch(_fail_soon, "first")])
        except ValueError as error:
            return [str(error), error.__notes__]

    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), EchoClient(delays={"stuck": FOREVER}))
    assert result == ["first", ["also, while halting: RuntimeError: second"]]


async def test_an_uncaught_all_failure_fails_the_client_phase_after_halting():
    trace: list = []

    def body(handoff, ctx):
        yield ctx.all([ctx.branch(_wait_forever, "w", trace), ctx.branch(_fail_soon, "boom")])

    with anyio.fail_after(2), pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, EchoClient(delays={"wait w": FOREVER}))
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "boom"
    assert trace == ["w GeneratorExit", "w finally", "w logged"]


@resumable
def _fan_forever(ctx, trace):
    try:
        yield ctx.all([ctx.branch(_wait_forever, "a1", trace), ctx.branch(_wait_forever, "a2", trace)])
    finally:
        trace.append("A finally")


async def test_halting_reaches_nested_branches():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.branch(_fan_forever, trace), ctx.branch(_fail_soon, "boom", "tick")])
        except ValueError:
            trace.append("parent caught")
        return "ok"

    client = EchoClient(delays={"wait a1": FOREVER, "wait a2": FOREVER, "tick": 0.02})
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client)
    assert result == "ok"
    assert set(trace[:-2]) == {
        "a1 GeneratorExit",
        "a1 finally",
        "a1 logged",
        "a2 GeneratorExit",
        "a2 finally",
        "a2 logged",
    }
    assert trace[-2:] == ["A finally", "parent caught"]


@resumable
def _stubborn(ctx, trace):
    try:
        yield ctx.sample(prompt="stuck")
    finally:
        try:
            yield ctx.sample(prompt="one more sample")
            trace.append("sample answered")
        except GeneratorExit:
            trace.append("GeneratorExit again")
            raise


async def test_a_halted_branch_gets_generator_exit_again_for_anything_but_log_or_notify():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.branch(_stubborn, trace), ctx.branch(_fail_soon, "boom", "tick")])
        except ValueError:
            return trace

    client = EchoClient(delays={"stuck": FOREVER, "tick": 0.02})
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client)
    assert result == ["GeneratorExit again"]
    assert [r.last_text for r in client.sample_calls] == ["stuck", "tick"]


async def test_cancelling_run_tool_from_outside_runs_finally_blocks():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.sample(prompt="slow")
        finally:
            trace.append("finally")
            yield ctx.log("warning", "cancelled")
            yield ctx.notify("stopped", progress=1, total=1)

    client = EchoClient(delays={"slow": FOREVER})
    events: list = []
    with anyio.fail_after(2), anyio.move_on_after(0.05) as scope:
        await run_tool(one_shot(body), {}, client, on_event=events.append)
    assert scope.cancelled_caught
    assert trace == ["finally"]
    assert client.log_calls == [("warning", "cancelled")]
    assert client.notify_calls == [("stopped", 1, 1)]
    assert [e["event"] for e in events][-3:] == ["halt", "log", "notify"]


class Sum(BaseModel):
    total: int


@resumable
def _elicit_branch(ctx, key):
    r = yield ctx.elicit(key, message=key, schema=Sum)
    return r.content.total


async def test_all_mixes_elicitations_and_samples():
    def body(handoff, ctx):
        results = yield ctx.all([ctx.branch(_elicit_branch, "x"), ctx.sample(prompt="s")])
        return [results[0], results[1].text, [m.content for m in ctx.messages]]

    client = EchoClient(elicit_answers=[{"action": "accept", "content": {"total": 9}}])
    result, _ = await run(one_shot(body), client)
    assert result == [9, "re: s", ["s", "re: s"]]
    assert isinstance(client.sample_calls[0].messages[0], Message)
    assert SampleResult(text="re: s").text == result[1]
