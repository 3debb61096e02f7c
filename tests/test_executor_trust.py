"""Workers are not believed (issue 21): a branch step's outcome from a process pool or dask worker is untrusted
input. Every request and outcome is MACed under a key only the server and its workers hold and bound to its
step; an outcome is decoded by the snapshot rules and its effect rebuilt as compiled code makes it, before the
server acts on it. A lying worker (tests/_step_attacks.py) never makes the server construct or call anything:
each lie is refused with StepRefusedError naming the step, and the run ends as when a worker dies."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from _runtime_support import EchoClient
from _step_attacks import FORGED, INVALID, held_keys, lying_step
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import BaseModel

from branchc import run_tool
from branchc.bridge.loading import load_served_tools
from branchc.executors import DaskExecutor, ProcessPool, StepRefusedError, open_executor
from branchc.runtime import steps
from branchc.runtime.context import BranchState, Context, TokenAccount
from branchc.runtime.effects import Branch, Elicit, Log
from branchc.runtime.outcomes import OutcomeRefused, rebuild_effect

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

TOOLS = Path(__file__).resolve().parent / "servers" / "trust_tools.py"
KEY = b"a state key of this test, 32 b."


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> dict[str, Any]:
    patch = pytest.MonkeyPatch()
    patch.setenv("BRANCHC_CACHE", str(tmp_path_factory.mktemp("trust_cache")))
    try:
        return load_served_tools(TOOLS)
    finally:
        patch.undo()


@pytest.fixture
def sprung(tools) -> list[str]:
    """The server's record of everything of `Trap` that ran in this process (empty at the start of each test)."""
    marks = tools["relay"].client_fn.__globals__["SPRUNG"]
    marks.clear()
    return marks


@pytest.fixture(scope="module")
def pool() -> Any:
    executor = ProcessPool(2)
    yield executor
    executor.shutdown()


@pytest.fixture(scope="module")
def dask_executor() -> Any:
    pytest.importorskip("distributed")
    from distributed import Client as DaskClient
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1")
    client = DaskClient(cluster, set_as_default=False)
    executor = DaskExecutor(client, key=KEY)
    yield executor
    executor.shutdown()
    client.close()
    cluster.close()


class Lying(cf.Executor):
    """The executor's workers (which hold its key) run the first step of each branch (`honest` steps), then
    `lying_step(attack, ...)` instead of the real step: the branches wait at their first yield by then."""

    def __init__(self, inner: Any, attack: str, honest: int = 2) -> None:
        self.inner, self.attack, self.honest = inner, attack, honest
        self.step_key, self.workers_hold_key = inner.step_key, inner.workers_hold_key
        self.name = f"{inner.name}, lying"

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
        if self.honest > 0:
            self.honest -= 1
            return self.inner.submit(fn, *args, **kwargs)
        return self.inner.submit(functools.partial(lying_step, self.attack), *args, **kwargs)


class Replaying(cf.Executor):
    """Answers every step after the first with the first one's genuine outcome; `reflect`: sends each request
    back as its own outcome."""

    def __init__(self, inner: Any, reflect: bool = False) -> None:
        self.inner, self.reflect = inner, reflect
        self.step_key, self.workers_hold_key = inner.step_key, inner.workers_hold_key
        self.name = f"{inner.name}, replaying"
        self.first: cf.Future | None = None
        self.replays = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
        if self.reflect:
            future: cf.Future = cf.Future()
            future.set_result(args[0])
            return future
        if self.first is None:
            self.first = self.inner.submit(fn, *args, **kwargs)
            return self.first
        self.replays += 1
        if self.replays > 20:  # a server that took the replays would loop on them: stop it
            raise RuntimeError("the server took 20 replayed outcomes")
        return self.first


async def refused(tools: dict[str, Any], executor: Any) -> tuple[StepRefusedError, EchoClient, float]:
    client = EchoClient()
    started = time.monotonic()
    with pytest.raises(StepRefusedError) as caught:
        await run_tool(tools["relay"], {"count": 2}, client, executor=executor)
    return caught.value, client, time.monotonic() - started


def assert_run_ended_cleanly(client: EchoClient) -> None:
    """The run was halted from where it was: each branch had taken its first step (a log), none its second
    (no sample was asked), and then each branch's finally block ran once, at its yield."""
    assert client.sample_calls == []
    assert client.log_calls[:2] == [("info", "echo w0"), ("info", "echo w1")]
    assert sorted(client.log_calls[2:]) == [("info", "echo w0 cleans up"), ("info", "echo w1 cleans up")]


REASONS = {
    "class": "the effect is class Trap, not an effect",
    "branch_of_class": "the effect.fn is class Trap, not a compiled @resumable function",
    "branch_of_client": "the effect.fn is the function relay_client, not a compiled @resumable function",
    "log_of_trap": "the effect.message is a Trap, not a str",
    "elicit_schema": "the effect.schema is class Trap, not a pydantic model class",
    "sample_message": "the effect.messages[0].content is a Trap, not JSON data",
    "all_with_trap": "the effect.effects[1] is a Trap, not an effect",
    "all_nested": "ctx.all nested more than 64 deep (EffectBounds.max_nesting)",
    "raise_trap": "its error is a Trap, not an Exception",
    "other_trap": "a value that is no effect is named by a str",
    "wrong_generator": "it sends back a generator of trust_tools:decoy, not of the branch's trust_tools:echo",
    "unfinished_return": "its generator is not finished, which a step that ended in 'return' cannot leave it",
    "deep": "it is nested too deeply to read",
    "not_json": "it is not JSON",
    "another_step": "it is the outcome of step 1",
    "forged": "its MAC does not verify: it was forged, altered on the way, or made under another key",
    "no_mac": "its MAC does not verify",
    "unsealed_text": "it is a str, not a step message (bytes)",
    "altered": "its MAC does not verify",
    "none": "it is a NoneType, not a step message (bytes)",
}


@pytest.mark.parametrize("attack", INVALID + FORGED)
async def test_a_lying_process_pool_worker_is_refused_before_anything_of_it_runs(tools, sprung, pool, attack):
    error, client, took = await refused(tools, Lying(pool, attack))
    assert sprung == []  # nothing of Trap was constructed, called, formatted or asked here
    message = str(error)
    assert message.startswith("relay: the outcome of echo (branch 0.1), step "), message
    assert f"from {pool.name}, lying is refused: " in message
    assert REASONS[attack] in message, message
    assert message.endswith("nothing of it was used, and the run is as it was before this step")
    assert_run_ended_cleanly(client)
    assert took < 30


@pytest.mark.parametrize("attack", ["forged", "branch_of_class", "deep"])
async def test_a_lying_dask_worker_is_refused_too(tools, sprung, dask_executor, attack):
    error, client, took = await refused(tools, Lying(dask_executor, attack))
    assert sprung == []
    assert REASONS[attack] in str(error)
    assert_run_ended_cleanly(client)
    assert took < 60


async def test_another_steps_outcome_is_refused(tools, sprung, pool):
    """The first branch's genuine outcome (its MAC right), sent again as the second branch's."""
    error, client, _ = await refused(tools, Replaying(pool))
    message = str(error)
    assert message.startswith("relay: the outcome of echo (branch 0.2), step "), message
    assert "is refused: it is the outcome of step " in message
    assert "(branch '0.1' of the 'relay' run " in message
    assert sprung == []
    # the first branch's step was applied (it logged; the second branch had not started: no finally to run)
    assert client.log_calls == [("info", "echo w0"), ("info", "echo w0 cleans up")]
    assert client.sample_calls == []


async def test_a_request_sent_back_as_its_outcome_is_refused(tools, sprung, pool):
    error, client, _ = await refused(tools, Replaying(pool, reflect=True))
    assert "is refused: it is the request of step " in str(error)
    assert client.log_calls == client.sample_calls == []  # no branch had started


async def test_an_outcome_replayed_from_another_run_is_refused(tools, sprung, pool):
    """Each step has a number and a nonce of its own: the same branch at the same place of another run (even
    one with the same call id) is another step."""
    recorded: list[cf.Future] = []

    class Recording(cf.Executor):
        step_key, workers_hold_key, name = pool.step_key, True, "a recording pool"

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
            recorded.append(pool.submit(fn, *args, **kwargs))
            return recorded[-1]

    class Replaying(Recording):
        name = "a replaying pool"

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
            return recorded.pop(0)  # the first run's outcomes, in order

    first = await run_tool(tools["relay"], {"count": 2}, EchoClient(), call_id="same", executor=Recording())
    assert first == {"replies": ["re: w0", "re: w1"]}
    client = EchoClient()
    with pytest.raises(StepRefusedError) as caught:
        await run_tool(tools["relay"], {"count": 2}, client, call_id="same", executor=Replaying())
    message = str(caught.value)
    assert message.startswith("relay: the outcome of echo (branch 0.1), step ")
    assert "is refused: it is the outcome of step " in message
    assert "(branch '0.1' of the 'relay' run 'same')" in message
    assert client.log_calls == client.sample_calls == [] and sprung == []


# -- the legitimate outcomes pass the checks unchanged --------------------------------------------------------


async def test_a_long_call_id_travels_as_its_digest(tools, pool):
    """A client may choose a long request id: the step header stays short, and the steps go through."""
    result = await run_tool(tools["relay"], {"count": 2}, EchoClient(), call_id="c" * 10_000, executor=pool)
    assert result == {"replies": ["re: w0", "re: w1"]}


@pytest.fixture(params=["process", "dask"])
def executor(request) -> Any:
    return request.getfixturevalue("pool" if request.param == "process" else "dask_executor")


async def test_every_effect_with_every_field_passes_the_checks_as_it_is(tools, executor):
    answers = [{"action": "accept", "content": {"word": "w"}}]
    inline_client = EchoClient(elicit_answers=list(answers))
    inline = await run_tool(tools["explicit"], {}, inline_client)
    client = EchoClient(elicit_answers=list(answers))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no step fell back to this process
        elsewhere = await run_tool(tools["explicit"], {}, client, executor=executor)
    assert elsewhere == inline
    assert inline["reply"] == "re: found"
    # what the client is asked is what it is asked inline, down to the fields each request was given
    assert [c.model_dump() for c in client.sample_calls] == [c.model_dump() for c in inline_client.sample_calls]
    assert [c.model_dump(exclude_unset=True) for c in client.sample_calls] == [
        c.model_dump(exclude_unset=True) for c in inline_client.sample_calls
    ]
    assert [c.model_dump() for c in client.elicit_calls] == [c.model_dump() for c in inline_client.elicit_calls]
    assert client.log_calls == inline_client.log_calls
    assert client.notify_calls == inline_client.notify_calls == [("starting", 0, 2), ("done", 2, 2)]


def test_an_effect_is_rebuilt_within_its_bounds():
    ctx = Context(BranchState("0.1", "b", 1, None, None, TokenAccount(None)))
    log = Log("info", "x")
    assert rebuild_effect(log, ctx) == log and rebuild_effect(log, ctx) is not log
    with pytest.raises(OutcomeRefused, match=r"^the effect: ctx\.log\(level='loud'\): use one of debug"):
        rebuild_effect(Log("loud", "x"), ctx)
    with pytest.raises(OutcomeRefused, match=r"more than 10,000 effects in one \(EffectBounds\.max_effects\)"):
        rebuild_effect(ctx.all([log] * 10_001), ctx)
    with pytest.raises(OutcomeRefused, match=r"the effect\.fn is the function plain, not a compiled @resumable"):
        rebuild_effect(Branch(fn=plain), ctx)
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    with pytest.raises(OutcomeRefused, match=r"nested more than 200 deep \(EffectBounds\.max_depth\)"):
        rebuild_effect(Elicit("k", "m", Word, {"deep": deep}), ctx)


def plain(ctx: Any) -> None:
    return None


class Word(BaseModel):
    word: str


# -- the key ---------------------------------------------------------------------------------------------------


def test_the_step_key_is_derived_from_the_key_given_or_random():
    derived = steps.step_key(KEY)
    assert derived == steps.step_key(KEY) == steps.step_key(KEY.decode()) != KEY
    assert len(derived) == 32 and KEY not in derived
    assert steps.step_key() != steps.step_key() and len(steps.step_key()) == 32
    with pytest.raises(ValueError, match="an executor's key has at least 16 bytes, not 5"):
        steps.step_key(b"short")
    with pytest.raises(TypeError, match="an executor's key is bytes"):
        steps.step_key(12345678901234567890)  # type: ignore[arg-type]


def test_the_pools_workers_get_its_key_from_the_initializer_and_never_the_key_given():
    pool = open_executor("process:1", key=KEY)
    try:
        assert pool.step_key == steps.step_key(KEY)
        assert pool.submit(held_keys).result(timeout=60) == [steps.step_key(KEY)]
    finally:
        pool.shutdown()
    other = ProcessPool(1)
    try:
        assert other.step_key != pool.step_key
        assert other.submit(held_keys).result(timeout=60) == [other.step_key]
    finally:
        other.shutdown()


def test_the_dask_workers_hold_the_key_until_the_executor_shuts_down():
    pytest.importorskip("distributed")
    from distributed import Client as DaskClient
    from distributed import LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
        ) as cluster,
        DaskClient(cluster, set_as_default=False) as client,
    ):
        executor = DaskExecutor(client, key=KEY)
        assert list(client.run(held_keys).values()) == [[steps.step_key(KEY)]]
        executor.shutdown()
        assert list(client.run(held_keys).values()) == [[]]
        # two servers given one key (replicas, say) share the cluster: the key stays until both let go of it
        first, second = DaskExecutor(client, key=KEY), DaskExecutor(client, key=KEY)
        first.shutdown()
        assert list(client.run(held_keys).values()) == [[steps.step_key(KEY)]]
        second.shutdown()
        assert list(client.run(held_keys).values()) == [[]]


def test_a_worker_reads_no_request_whose_mac_does_not_verify():
    """A request that is not the server's (no key, another key, altered) is refused before it is parsed."""
    secret = steps.step_key()
    identity = steps._identity("t", "r", "0.1", 1, "00")
    junk = b'{"branchc_step":2,"graph":{"roots":{"gen":["@",{"t":"ref","ref":"trust_tools:Trap"}]},"objects":[]}}'
    request = steps._seal(secret, steps._REQUEST + identity, junk)
    cases = {
        "no key": steps.run_step(request, (), "no such key id"),
        "another key": steps.run_step(request, (), steps.step_key()),
        "altered": steps.run_step(request.replace(b"Trap", b"Trip"), (), secret),
        "an outcome": steps.run_step(steps._seal(secret, steps._OUTCOME + identity, junk), (), secret),
    }
    for case, answer in cases.items():
        assert answer[:32] == bytes(32), case  # not MACed: the server refuses it
        why = json.loads(answer.split(b"\n", 1)[1])["failed"]
        assert why in (
            "the request's MAC does not verify here",
            "this worker holds no key for the step (a worker that its executor did not start?)",
        ), case
    # the same request under the right key is read (and refused as no branch step): it was not read above
    answer = steps.run_step(request, (), secret)
    assert answer[:32] != bytes(32)
    assert "failed" in json.loads(steps._open(secret, answer)[1])
