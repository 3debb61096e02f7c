"""Limits at the branch site, the tool and the runtime: depth, tokens, time. The tightest wins."""

from __future__ import annotations

import time

import anyio
import pytest
from _runtime_support import EchoClient, run
from pydantic import BaseModel, ValidationError

from branchc import (
    BranchDepthError,
    BranchError,
    BranchTimeoutError,
    BranchTokenError,
    Limits,
    SampleResult,
    ToolPhaseError,
    resumable,
    run_tool,
    tool,
)
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio

FOREVER = 30.0
FORTY = "x" * 40  # 10 estimated tokens


def one_shot(body, limits=None):
    t = tool("t", limits=limits)
    t.client(body)
    return t


def test_limits_model():
    assert Limits().model_dump() == {
        "max_depth": None, "max_tokens": None, "timeout": None,
        "max_tool_calls": None, "max_tool_depth": None, "tool_timeout": None,
    }  # fmt: skip
    a = Limits(max_depth=3, timeout=2.0, max_tool_calls=4)
    assert a.tighten(None) is a
    assert a.tighten(Limits(max_depth=1, max_tokens=5, timeout=9, max_tool_calls=9, tool_timeout=1)) == Limits(
        max_depth=1, max_tokens=5, timeout=2.0, max_tool_calls=4, tool_timeout=1
    )
    assert Limits(max_depth=0).max_depth == 0
    bad_ones = ({"max_depth": -1}, {"max_tokens": 0}, {"timeout": 0}, {"timeout": -1.0}, {"depth": 1})
    for bad in (*bad_ones, {"max_tool_calls": -1}, {"max_tool_depth": -1}, {"tool_timeout": 0}):
        with pytest.raises(ValidationError):
            Limits(**bad)
    assert issubclass(BranchDepthError, BranchError)
    assert issubclass(BranchTokenError, BranchError)
    assert issubclass(BranchTimeoutError, BranchError)


# -- depth ---------------------------------------------------------------------------------------


@resumable
def _deeper(ctx):
    try:
        return (yield ctx.branch(_deeper))
    except BranchDepthError as error:
        return [ctx.depth, str(error)]


def _depth_tool(tool_depth, site_depth):
    def body(handoff, ctx):
        try:
            return (yield ctx.branch(_deeper, max_depth=site_depth))
        except BranchDepthError as error:
            return [ctx.depth, str(error)]

    return one_shot(body, Limits(max_depth=tool_depth))


@pytest.mark.parametrize(
    ("tool_depth", "runtime_depth", "site_depth", "deepest"),
    [
        (3, None, None, 3),
        (None, 2, None, 2),
        (3, 1, None, 1),
        (1, 3, None, 1),
        (5, None, 2, 2),
        (1, None, 4, 1),
        (None, 4, 2, 2),
        (None, None, 0, 0),
        (0, None, None, 0),
    ],
)
async def test_the_tightest_max_depth_wins(tool_depth, runtime_depth, site_depth, deepest):
    t = _depth_tool(tool_depth, site_depth)
    result, _ = await run(t, MockClient(), limits=Limits(max_depth=runtime_depth))
    depth, message = result
    assert depth == deepest
    branch_id = ".".join(["0"] + ["1"] * deepest)  # 0, 0.1, 0.1.1, ...
    expected = f"a branch at depth {deepest + 1} exceeds max_depth {deepest} (branch {branch_id} is at depth {deepest})"
    assert message.endswith(expected)


async def test_depth_error_is_thrown_at_the_yield_and_finally_blocks_run():
    trace: list = []

    @resumable
    def middle(ctx):
        try:
            yield ctx.branch(middle)
        finally:
            trace.append(f"finally at {ctx.depth}")
            yield ctx.log("info", f"cleanup {ctx.depth}")

    def body(handoff, ctx):
        yield ctx.branch(middle)

    client = MockClient()
    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, client, limits=Limits(max_depth=2))
    assert info.value.phase == "client"
    assert isinstance(info.value.__cause__, BranchDepthError)
    assert "a branch at depth 3 exceeds max_depth 2" in str(info.value.__cause__)
    assert trace == ["finally at 2", "finally at 1"]
    assert client.log_calls == [("info", "cleanup 2"), ("info", "cleanup 1")]


async def test_no_depth_limit_allows_deep_nesting():
    @resumable
    def down(ctx, n):
        if n == 0:
            return ctx.depth
        return (yield ctx.branch(down, n - 1))

    def body(handoff, ctx):
        return (yield ctx.branch(down, 30))

    assert (await run(one_shot(body), MockClient()))[0] == 31


# -- tokens --------------------------------------------------------------------------------------


async def test_reported_tokens_are_charged_and_max_tokens_is_clamped_then_refused():
    def body(handoff, ctx):
        out = []
        for _ in range(3):
            try:
                r = yield ctx.sample(messages=[{"role": "user", "content": FORTY}])
                out.append(r.text)
            except BranchTokenError as error:
                out.append(str(error))
        return out

    client = MockClient(
        [
            SampleResult(text="a", input_tokens=10, output_tokens=50),
            SampleResult(text="b", input_tokens=10, output_tokens=30),
        ]
    )
    result, events = await run(one_shot(body), client, limits=Limits(max_tokens=100))
    assert [r.max_tokens for r in client.sample_calls] == [90, 30]
    assert result[:2] == ["a", "b"]
    assert result[2].endswith(
        "sample #3 needs about 10 prompt tokens plus its answer, but only 0 of the token budget remain"
    )
    assert [e["tokens"] for e in events.named("sample")] == [60, 40]


async def test_estimated_tokens_when_the_client_reports_none():
    def body(handoff, ctx):
        for _ in range(2):
            yield ctx.sample(messages=[{"role": "user", "content": FORTY}], system_prompt="12345678")

    client = MockClient(["y" * 20, "y" * 18])
    _, events = await run(one_shot(body), client, limits=Limits(max_tokens=1000))
    # prompt: ceil(40/4) + ceil(8/4) = 12; answer: ceil(20/4) = 5, then ceil(18/4) = 5
    assert [e["tokens"] for e in events.named("sample")] == [17, 17]
    assert [r.max_tokens for r in client.sample_calls] == [1000 - 12, 1000 - 17 - 12]


@pytest.mark.parametrize(
    ("answer", "charged"),
    [
        (SampleResult(text="y" * 9, input_tokens=3), 3 + 3),
        (SampleResult(text="y" * 9, output_tokens=7), 10 + 7),
        (SampleResult(text="y" * 9, input_tokens=0, output_tokens=0), 0),
        (SampleResult(text="", tool_calls=[{"id": "1", "function": {"name": "f", "arguments": {"k": 1}}}]), 10 + 2),
    ],
)
async def test_reported_and_estimated_tokens_mix(answer, charged):
    def body(handoff, ctx):
        yield ctx.sample(messages=[{"role": "user", "content": FORTY}])
        yield ctx.sample(messages=[{"role": "user", "content": FORTY}])

    client = MockClient([answer, "z"])
    _, events = await run(one_shot(body), client, limits=Limits(max_tokens=500))
    assert events.named("sample")[0]["tokens"] == charged
    assert client.sample_calls[1].max_tokens == 500 - charged - 10


async def test_auto_tracked_history_counts_toward_the_prompt():
    def body(handoff, ctx):
        yield ctx.sample(prompt=FORTY)
        yield ctx.sample(prompt="z" * 40)

    client = MockClient(["y" * 8, "ok"])
    await run(one_shot(body), client, limits=Limits(max_tokens=100))
    # first: 100 - 10; spent 10 + 2; second prompt is history (10 + 2) + 10
    assert [r.max_tokens for r in client.sample_calls] == [90, 100 - 12 - 22]


async def test_a_sample_whose_prompt_alone_exceeds_the_budget_is_refused_before_the_client_sees_it():
    def body(handoff, ctx):
        yield ctx.sample(prompt=FORTY)

    client = MockClient(["never"])
    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body, Limits(max_tokens=9)), {}, client)
    assert isinstance(info.value.__cause__, BranchTokenError)
    assert "needs about 10 prompt tokens plus its answer, but only 9 of the token budget remain" in str(info.value)
    assert client.sample_calls == []


async def test_one_token_left_for_the_answer_is_still_sent():
    def body(handoff, ctx):
        r = yield ctx.sample(prompt=FORTY)
        return r.text

    client = MockClient(["k"])
    assert (await run(one_shot(body), client, limits=Limits(max_tokens=11)))[0] == "k"
    assert client.sample_calls[0].max_tokens == 1


@resumable
def _budgeted(ctx):
    out = []
    for _ in range(2):
        try:
            r = yield ctx.sample(messages=[{"role": "user", "content": FORTY}])
            out.append(r.text)
        except BranchTokenError as error:
            out.append(str(error))
    return out


async def test_a_branch_budget_is_its_own_and_charges_every_budget_above():
    def body(handoff, ctx):
        child = yield ctx.branch(_budgeted, max_tokens=30)
        r = yield ctx.sample(messages=[{"role": "user", "content": FORTY}])
        return [child, r.text]

    client = MockClient([SampleResult(text="c", input_tokens=10, output_tokens=15), "parent"])
    result, _ = await run(one_shot(body), client, limits=Limits(max_tokens=100))
    child, parent = result
    assert child[0] == "c"
    assert child[1].startswith("_budgeted: sample #2 needs about 10 prompt tokens")
    assert child[1].endswith("but only 5 of the token budget remain")
    assert parent == "parent"
    assert [r.max_tokens for r in client.sample_calls] == [20, 100 - 25 - 10]


@pytest.mark.parametrize(
    ("tool_budget", "runtime_budget", "site_budget", "expected"),
    [
        (50, 200, None, 40),
        (200, 50, None, 40),
        (None, None, 25, 15),
        (30, None, 100, 20),
        (None, 1000, None, 990),
        (None, None, None, 1024),
    ],
)
async def test_the_tightest_token_budget_wins(tool_budget, runtime_budget, site_budget, expected):
    @resumable
    def child(ctx):
        yield ctx.sample(messages=[{"role": "user", "content": FORTY}])

    def body(handoff, ctx):
        yield ctx.branch(child, max_tokens=site_budget)

    client = MockClient(["ok"])
    t = one_shot(body, Limits(max_tokens=tool_budget))
    await run(t, client, limits=Limits(max_tokens=runtime_budget))
    assert client.sample_calls[0].max_tokens == expected


class Greedy(MockClient):
    """Answers with everything it was allowed: input = the estimated prompt, output = the request's max_tokens."""

    async def sample(self, request):
        self.sample_calls.append(request)
        await anyio.sleep(0.01)
        return SampleResult(text="a", input_tokens=10, output_tokens=request.max_tokens)


async def test_concurrent_samples_do_not_overspend_a_shared_budget():
    def body(handoff, ctx):
        message = [{"role": "user", "content": FORTY}]
        results = yield ctx.all([ctx.sample(messages=message), ctx.sample(messages=message)])
        return [r.text for r in results]

    client = Greedy()
    try:
        _, events = await run(one_shot(body), client, limits=Limits(max_tokens=30))
    except ToolPhaseError as error:
        assert isinstance(error.__cause__, BranchTokenError)
        return
    assert sum(e["tokens"] for e in events.named("sample")) <= 30


@pytest.mark.parametrize("bad", [{"timeout": "5"}, {"max_tokens": "9"}, {"timeout": 0}, {"max_depth": -1}])
async def test_branch_site_limits_are_validated_at_the_call_site(bad):
    @resumable
    def child(ctx):
        yield ctx.log("info", "x")

    def body(handoff, ctx):
        try:
            ctx.branch(child, **bad)
        except (TypeError, ValueError) as error:
            return str(error)
        yield ctx.log("info", "unreachable")
        return "accepted"

    result, _ = await run(one_shot(body), MockClient())
    assert next(iter(bad)) in result


# -- timeouts ------------------------------------------------------------------------------------


async def test_a_timeout_is_thrown_at_the_yield_and_later_samples_are_refused_at_once():
    def body(handoff, ctx):
        out = []
        try:
            yield ctx.sample(prompt="slow")
        except BranchTimeoutError as error:
            out.append(str(error))
        yield ctx.log("info", "logging still works")
        try:
            yield ctx.sample(prompt="fast")
        except BranchTimeoutError:
            out.append("refused again")
        return out

    client = EchoClient(delays={"slow": FOREVER})
    started = time.monotonic()
    with anyio.fail_after(2):
        result, events = await run(one_shot(body, Limits(timeout=0.05)), client)
    assert time.monotonic() - started < 1
    assert result[0].endswith("body (branch 0) ran past its timeout")
    assert result[1] == "refused again"
    assert client.cancelled == ["slow"]
    assert [r.last_text for r in client.sample_calls] == ["slow"]
    assert client.log_calls == [("info", "logging still works")]
    assert [e["branch"] for e in events.named("timeout")] == ["0", "0"]


async def test_an_uncaught_timeout_is_a_client_phase_error_and_finally_runs():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.sample(prompt="slow")
        finally:
            trace.append("finally")
            yield ctx.notify("gave up")

    client = EchoClient(delays={"slow": FOREVER})
    with anyio.fail_after(2), pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, client, limits=Limits(timeout=0.05))
    assert info.value.phase == "client"
    assert isinstance(info.value.__cause__, BranchTimeoutError)
    assert trace == ["finally"]
    assert client.notify_calls == [("gave up", None, None)]


class SlowElicit(EchoClient):
    async def elicit(self, request):
        self.elicit_calls.append(request)
        await anyio.sleep(FOREVER)


class Ok(BaseModel):
    ok: bool


async def test_a_slow_elicitation_times_out_too():
    def body(handoff, ctx):
        try:
            yield ctx.elicit("confirm", message="ok?", schema=Ok)
        except BranchTimeoutError:
            return "timed out"

    with anyio.fail_after(2):
        result, _ = await run(one_shot(body, Limits(timeout=0.05)), SlowElicit())
    assert result == "timed out"


@resumable
def _slow_branch(ctx, trace):
    try:
        yield ctx.sample(prompt="slow")
        trace.append("child resumed")
    finally:
        trace.append("child finally")
        yield ctx.log("info", "child cleanup")


async def test_a_branch_site_timeout_is_local_to_the_branch():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.branch(_slow_branch, trace, timeout=0.05)
        except BranchTimeoutError as error:
            trace.append(str(error))
        r = yield ctx.sample(prompt="fast")
        return r.text

    client = EchoClient(delays={"slow": FOREVER})
    with anyio.fail_after(2):
        result, events = await run(one_shot(body), client)
    assert result == "re: fast"
    assert trace == ["child finally", "_slow_branch (branch 0.1) ran past its timeout"]
    assert client.log_calls == [("info", "child cleanup")]
    assert [e["branch"] for e in events.named("timeout")] == ["0.1"]


@pytest.mark.parametrize(
    ("tool_timeout", "runtime_timeout", "site_timeout"),
    [(0.05, 10, 10), (10, 0.05, 10), (10, 10, 0.05), (0.05, None, None), (None, 0.05, 10), (None, None, 0.05)],
)
async def test_the_tightest_timeout_wins(tool_timeout, runtime_timeout, site_timeout):
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.branch(_slow_branch, trace, timeout=site_timeout)
        except BranchTimeoutError:
            return "timed out"

    client = EchoClient(delays={"slow": FOREVER})
    started = time.monotonic()
    with anyio.fail_after(3):
        result, _ = await run(
            one_shot(body, Limits(timeout=tool_timeout)), client, limits=Limits(timeout=runtime_timeout)
        )
    assert time.monotonic() - started < 2
    assert result == "timed out"
    assert trace == ["child finally"]


async def test_a_parent_deadline_also_bounds_a_branch_with_a_longer_timeout():
    trace: list = []

    def body(handoff, ctx):
        try:
            yield ctx.branch(_slow_branch, trace, timeout=10)
        except BranchTimeoutError:
            trace.append("parent caught")
        try:
            yield ctx.sample(prompt="fast")
        except BranchTimeoutError:
            trace.append("parent is past its own deadline")
        return trace

    with anyio.fail_after(2):
        result, _ = await run(one_shot(body, Limits(timeout=0.05)), EchoClient(delays={"slow": FOREVER}))
    assert result == ["child finally", "parent caught", "parent is past its own deadline"]


async def test_a_timeout_inside_all_halts_the_others():
    trace: list = []

    @resumable
    def waiter(ctx, name):
        try:
            yield ctx.sample(prompt=f"slow {name}")
        finally:
            trace.append(f"{name} finally")

    def body(handoff, ctx):
        try:
            yield ctx.all([ctx.branch(waiter, "a"), ctx.branch(waiter, "b")])
        except BranchTimeoutError:
            return "timed out"

    client = EchoClient(delays={"slow a": FOREVER, "slow b": FOREVER})
    with anyio.fail_after(2):
        result, _ = await run(one_shot(body), client, limits=Limits(timeout=0.05))
    assert result == "timed out"
    assert sorted(trace) == ["a finally", "b finally"]
    assert client.finished == []


async def test_a_fast_run_is_not_disturbed_by_a_timeout():
    def body(handoff, ctx):
        r = yield ctx.sample(prompt="quick")
        child = yield ctx.branch(_budgeted, timeout=5)
        return [r.text, child]

    result, _ = await run(one_shot(body, Limits(timeout=5)), EchoClient(), limits=Limits(timeout=5))
    assert result == ["re: quick", [f"re: {FORTY}", f"re: {FORTY}"]]


# A branch that works past its deadline without asking anything: the next yield raises, whatever it yields, and
# so does its return.


def _busy(seconds: float) -> None:
    """Work that takes `seconds` without a yield (the clock the deadline reads moves on meanwhile)."""
    end = time.time() + seconds
    while time.time() < end:
        pass


@resumable
def _busy_then(ctx, trace, effect):
    try:
        _busy(0.1)
        if effect == "log":
            yield ctx.log("info", "done working")
        elif effect == "notify":
            yield ctx.notify("done working", progress=1, total=1)
        elif effect == "all":
            yield ctx.all([])
        trace.append("went on")
        return "finished"
    finally:
        trace.append("child finally")
        yield ctx.log("info", "child cleanup")  # told already: cleanup still logs


@resumable
def _late_return(ctx, trace):
    try:
        yield ctx.log("info", "started")
        _busy(0.1)
        return "finished"
    finally:
        trace.append("child finally")


@pytest.mark.parametrize("effect", ["log", "notify", "all", "return"])
async def test_a_branch_past_its_deadline_times_out_at_its_next_yield_or_its_return(effect):
    trace: list = []

    def body(handoff, ctx):
        try:
            out = yield ctx.branch(_busy_then, trace, effect, timeout=0.03)
        except BranchTimeoutError as error:
            out = str(error)
        return out

    client = EchoClient()
    result, events = await run(one_shot(body), client)
    assert result == "_busy_then (branch 0.1) ran past its timeout"
    if effect == "return":  # the finally's log is the first yield past the deadline: it raises, not the return
        assert trace == ["went on", "child finally"]
        assert client.log_calls == []
    else:
        assert trace == ["child finally"]
        assert client.log_calls == [("info", "child cleanup")]
    assert client.notify_calls == []
    assert [e["branch"] for e in events.named("timeout")] == ["0.1"]


async def test_a_caught_timeout_at_a_log_lets_the_branch_go_on_and_log():
    def body(handoff, ctx):
        _busy(0.1)
        try:
            yield ctx.log("info", "late")
        except BranchTimeoutError:
            pass
        yield ctx.log("info", "after the timeout")
        return "handled"

    client = EchoClient()
    result, _ = await run(one_shot(body, Limits(timeout=0.03)), client)
    assert result == "handled"
    assert client.log_calls == [("info", "after the timeout")]


async def test_a_tool_that_returns_past_its_timeout_fails_with_it():
    def body(handoff, ctx):
        yield ctx.log("info", "started")
        _busy(0.1)
        return "finished"

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, EchoClient(), limits=Limits(timeout=0.03))
    assert isinstance(info.value.__cause__, BranchTimeoutError)


async def test_a_branch_that_returns_past_its_deadline_gives_its_parent_the_timeout():
    trace: list = []

    def body(handoff, ctx):
        try:
            return (yield ctx.branch(_late_return, trace, timeout=0.03))
        except BranchTimeoutError as error:
            return str(error)

    client = EchoClient()
    result, events = await run(one_shot(body), client)
    assert result == "_late_return (branch 0.1) ran past its timeout"
    assert trace == ["child finally"]
    assert client.log_calls == [("info", "started")]
    assert [e["branch"] for e in events.named("timeout")] == ["0.1"]
