"""Branch steps elsewhere (issue 12): sub-branch steps run on a process pool or on dask.distributed workers,
each as a snapshot there and back, with the same results, requests, logs and order as inline; a worker
killed mid-step is retried once, then a clear error, and no step of the run is lost or done twice."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import warnings
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from _bridge_support import stdio, within
from _runtime_support import EchoClient, Events
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from typer.testing import CliRunner

from branchc import run_tool
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.cli import app
from branchc.executors import (
    DaskExecutor,
    ExecutorSpec,
    ExecutorSpecError,
    ProcessPool,
    open_executor,
    parse_executor,
)
from branchc.runtime.errors import ToolDefinitionError
from branchc.runtime.limits import Limits
from branchc.runtime.machine import Machine
from branchc.runtime.steps import StepElsewhereError

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

TOOLS = Path(__file__).resolve().parent / "servers" / "executor_tools.py"
PICK = {"action": "accept", "content": {"word": "w"}}


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> dict[str, Any]:
    patch = pytest.MonkeyPatch()
    patch.setenv("BRANCHC_CACHE", str(tmp_path_factory.mktemp("executor_cache")))
    try:
        return load_served_tools(TOOLS)
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def pool() -> Any:
    executor = ProcessPool(2)
    yield executor
    executor.shutdown()


@pytest.fixture(scope="module")
def dask_executor() -> Any:
    """A LocalCluster of two worker processes on loopback. The scheduler gives up on a task at the first
    worker that dies running it (allowed-failures 0), so the machine's own retry is what the tests see."""
    pytest.importorskip("distributed")
    import dask
    from distributed import Client as DaskClient
    from distributed import LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
        )
    client = DaskClient(cluster, set_as_default=False)
    executor = DaskExecutor(client)
    yield executor
    executor.shutdown()
    client.close()
    cluster.close()


@pytest.fixture(params=["process", "dask"])
def executor(request) -> Any:
    return request.getfixturevalue("pool" if request.param == "process" else "dask_executor")


async def fanout(tools: dict[str, Any], marker: Path, executor: Any, **options: Any) -> dict[str, Any]:
    """One run of `fanout`: everything a client and an observer see of it, and what its finally blocks wrote."""
    marker.unlink(missing_ok=True)
    client, events = EchoClient(elicit_answers=[PICK]), Events()
    result = await run_tool(
        tools["fanout"], {"marker": str(marker)}, client, call_id="c1", on_event=events, executor=executor, **options
    )
    return {
        "result": result,
        "samples": [call.model_dump() for call in client.sample_calls],
        "elicits": [call.model_dump() for call in client.elicit_calls],
        "logs": client.log_calls,
        "notes": client.notify_calls,
        "events": events.events,
        "finally": marker.read_text().splitlines(),
    }


# -- the same run, anywhere ---------------------------------------------------------------------------------


async def test_a_run_elsewhere_is_the_inline_run(tools, executor, tmp_path, recwarn):
    inline = await fanout(tools, tmp_path / "marker.txt", None)
    elsewhere = await fanout(tools, tmp_path / "marker.txt", executor)
    for part in inline:
        assert elsewhere[part] == inline[part], part
    # every step travelled (nothing fell back to this process), and each finally block ran once, in order
    assert not [w for w in recwarn if "runs in this process" in str(w.message)]
    assert inline["finally"] == ["doomed finally", "patient p finally", "plodder r finally", "client finally"]
    result = inline["result"]
    assert result["halted"] == "Failed: doomed gave up after 20000 turns"
    assert [leaf["history"] for leaf in result["leaves"]] == [
        ["plan", "re: plan", f"leaf {w}", f"re: leaf {w}"] for w in "abc"
    ]
    assert result["nested"][-1]["history"] == ["leaf fresh", "re: leaf fresh"]  # a fresh history, at depth 2
    logs = [message for _, message in inline["logs"]]
    # the plodder was halted while still stepping: its step elsewhere was dropped, its finally ran here
    assert logs.index("plodder r at 1") < logs.index("patient p cleans up") < logs.index("plodder r cleans up")
    assert "plodder r at 2" not in logs
    assert [e["event"] for e in inline["events"]].count("halt") == 2


class Counting(cf.Executor):
    """Another executor, counting what it is given."""

    def __init__(self, inner: cf.Executor) -> None:
        self.inner, self.submitted = inner, 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
        self.submitted += 1
        return self.inner.submit(fn, *args, **kwargs)


async def test_a_portable_run_keeps_stepping_its_branches_elsewhere(tools, pool, tmp_path):
    """`portable` continues the run from its saved text at every suspension: a new machine, the same executor."""
    inline = await fanout(tools, tmp_path / "marker.txt", None, portable=True)
    counting = Counting(pool)
    elsewhere = await fanout(tools, tmp_path / "marker.txt", counting, portable=True)
    assert elsewhere == inline
    # every step of every sub-branch, once: each that yielded, each that ended it, and the plodder's dropped one
    events = inline["events"]
    yielded = sum(e["event"] == "suspend" and e["branch"] != "0" for e in events)
    ended = sum(e["event"] == "branch_end" and e.get("error") != "halted" for e in events)
    assert (yielded, ended) == (30, 11)
    assert counting.submitted == yielded + ended + 1


async def test_cpu_bound_branches_run_in_parallel_on_separate_workers(tools, executor):
    params = {"branches": 4, "spin": 400_000}
    inline = await run_tool(tools["crunch"], params, EchoClient())
    elsewhere = await run_tool(tools["crunch"], params, EchoClient(), executor=executor)
    assert elsewhere["totals"] == inline["totals"]
    assert inline["pids"] == [os.getpid()]
    assert os.getpid() not in elsewhere["pids"]
    if isinstance(executor, ProcessPool):
        assert len(elsewhere["pids"]) == 2  # four branches over both workers of the pool


async def test_a_run_served_with_an_executor_gives_the_inline_result_in_both_eras(tools, pool, tmp_path):
    inline = (await fanout(tools, tmp_path / "inline.txt", None))["result"]

    async def sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = params.messages[-1].content_as_list[-1].text.rsplit("\n\n", 1)[-1]
        return types.CreateMessageResult(
            role="assistant", model="m", content=types.TextContent(type="text", text=f"re: {text}")
        )

    async def elicitation(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"word": "w"})

    server = create_server(tools, state_key="k" * 40, executor=pool)
    for mode in ("legacy", "2026-07-28"):
        marker = tmp_path / f"{mode}.txt"
        async with Client(server, mode=mode, sampling_callback=sampling, elicitation_callback=elicitation) as client:
            done = await client.call_tool("fanout", {"marker": str(marker)})
        assert not done.is_error, done.content
        assert done.structured_content == inline, mode
        assert marker.read_text().splitlines() == [
            "doomed finally",
            "patient p finally",
            "plodder r finally",
            "client finally",
        ]


async def test_a_branch_whose_state_cannot_travel_is_stepped_here_with_a_warning(tools, pool):
    with pytest.warns(RuntimeWarning, match="holding: a step runs in this process, not on the executor: ") as caught:
        result = await run_tool(tools["stubborn"], {}, EchoClient(), executor=pool)
    assert result == {"held": True, "travelled": True, "total": 328350}
    assert "variable 'lock'" in str(caught[0].message)


async def test_branchc_serve_executor_process_runs_branches_in_its_pool(tmp_path):
    env = {"BRANCHC_CACHE": str(tmp_path / "cache")}
    server = stdio(TOOLS, env, "--executor", "process:2")
    async with Client(server, mode="2026-07-28") as client:
        done = await within(60, client.call_tool("crunch", {"branches": 2, "spin": 300_000}))
    assert not done.is_error, done.content
    pids, server = done.structured_content["pids"], done.structured_content["server"]
    # the pool's workers, never the server (one worker may take both steps when the other is slow to start)
    assert 1 <= len(pids) <= 2 and server not in pids


# -- faults ------------------------------------------------------------------------------------------------


class Failing(cf.Executor):
    """An executor whose every step fails as if its worker died."""

    name = "a failing executor"

    def __init__(self) -> None:
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
        self.submitted += 1
        future: cf.Future = cf.Future()
        future.set_exception(cf.process.BrokenProcessPool("a worker died"))
        return future


def test_a_step_that_cannot_be_had_leaves_the_run_as_it_was(tools):
    tool = tools["crunch"]
    machine = Machine(tool.name, "1", Limits())
    machine.start(tool.client_fn, {"branches": 3, "spin": 10}, tool.client_fn.__qualname__)
    machine.executor = failing = Failing()
    with pytest.raises(StepElsewhereError) as caught:
        machine.advance()
    message = str(caught.value)
    assert "crunch: crunching (branch 0.1) could not be stepped on a failing executor" in message
    assert "BrokenProcessPool: a worker died (tried 2 times)" in message
    assert failing.submitted == 6  # the three branches, each tried twice
    assert [entry[0] for entry in machine.ready] == ["0.1", "0.2", "0.3"]  # not stepped, still to step
    assert machine.take_outbox() == []  # the root's step was applied; none of the branches' was
    machine.executor = None  # the same run, continued here, is the whole run: nothing lost, nothing twice
    machine.advance()
    assert machine.done and machine.ok
    assert machine.result["totals"] == [285] * 3
    assert machine.take_outbox() == [("log", "debug", "crunching")] * 3


async def test_an_executor_needs_a_compiled_tool():
    from branchc import tool

    @tool
    def native(ctx):
        yield ctx.log("info", "not compiled")

    with pytest.raises(ToolDefinitionError, match="branch steps run on an executor as snapshots"):
        await run_tool(native, {}, EchoClient(), executor=Failing())


async def killed(tools: dict[str, Any], executor: Any, marker: Path, kills: int) -> tuple[Any, EchoClient]:
    marker.write_text("")
    client = EchoClient()
    try:
        result: Any = await run_tool(
            tools["killer"], {"marker": str(marker), "kills": kills}, client, executor=executor
        )
    except StepElsewhereError as error:
        result = error
    return result, client


async def test_a_worker_killed_mid_step_gets_the_step_retried(tools, executor, tmp_path):
    marker = tmp_path / "kills.txt"
    result, client = await killed(tools, executor, marker, kills=1)
    assert result == {"suicidal": {"died": 1, "reply": "re: survived"}, "other": 832504}
    assert [line.split()[0] for line in marker.read_text().splitlines()] == ["killing"]  # one worker died
    # each step counted once: one start log, one sample, the cleanup once
    assert client.log_calls == [("info", "suicidal starts"), ("debug", "pid starts"), ("info", "killer cleans up")]
    assert [call.last_text for call in client.sample_calls] == ["survived"]


async def test_a_worker_killed_at_every_try_fails_the_run_clearly(tools, executor, tmp_path):
    marker = tmp_path / "kills.txt"
    renewed = getattr(executor, "renewed", 0)
    error, client = await killed(tools, executor, marker, kills=5)
    assert isinstance(error, StepElsewhereError)
    assert str(error).startswith(f"killer: suicidal (branch 0.1) could not be stepped on {executor.name}: ")
    assert "(tried 2 times); the run is as it was before this step" in str(error)
    assert ("BrokenProcessPool" if isinstance(executor, ProcessPool) else "KilledWorker") in str(error)
    assert len(marker.read_text().splitlines()) == 2  # the first try and the retry, each killed its worker
    if isinstance(executor, ProcessPool):
        assert executor.renewed == renewed + 1  # the first death broke the pool: the retry went to a fresh one
    # the run was halted from where it was: its finally block ran once, no sample was asked
    assert client.log_calls == [("info", "suicidal starts"), ("debug", "pid starts"), ("info", "killer cleans up")]
    assert client.sample_calls == []


# -- naming an executor ---------------------------------------------------------------------------------------


def test_executor_specs():
    assert parse_executor(None) == parse_executor("inline") == ExecutorSpec("inline")
    assert parse_executor("process") == ExecutorSpec("process")
    assert parse_executor("process:3") == ExecutorSpec("process", workers=3)
    assert parse_executor("dask://127.0.0.1:8786") == ExecutorSpec("dask", address="tcp://127.0.0.1:8786")
    assert str(parse_executor("dask://scheduler.local:8786")) == "dask://scheduler.local:8786"
    assert open_executor("inline") is None
    for bad, words in [
        ("threads", "'threads' is not an executor; use inline, process (process:N for N workers) or dask://HOST:PORT"),
        ("process:0", "process:N takes a number of workers from 1 to 1024, like process:4"),
        ("process:many", "process:N takes a number of workers"),
        ("dask://", "give the dask scheduler as dask://HOST:PORT, like dask://127.0.0.1:8786"),
        ("dask://host", "give the dask scheduler as dask://HOST:PORT"),
        ("dask://host:99999", "give the dask scheduler as dask://HOST:PORT"),
    ]:
        with pytest.raises(ExecutorSpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
            parse_executor(bad)


def test_a_dask_scheduler_that_does_not_answer_is_named():
    pytest.importorskip("distributed")
    with pytest.raises(
        ExecutorSpecError, match=r"no dask scheduler answers at tcp://127\.0\.0\.1:9 \(OSError: .*\); start one"
    ):
        open_executor("dask://127.0.0.1:9", timeout=0.5)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("bogus", "error: --executor 'bogus' is not an executor; use inline, process"),
        ("process:0", "error: --executor 'process:0': process:N takes a number of workers from 1 to 1024"),
        ("dask://nowhere", "error: --executor 'dask://nowhere': give the dask scheduler as dask://HOST:PORT"),
    ],
)
def test_serve_refuses_a_bad_executor_before_loading_anything(spec, words, tmp_path):
    done = CliRunner().invoke(app, ["serve", str(tmp_path / "missing"), "--executor", spec])
    assert done.exit_code == 1
    assert words in " ".join(done.output.split())


def test_run_takes_the_executor_serve_takes(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    answers = tmp_path / "none.yaml"
    answers.write_text("sample: []\nelicit: []\n")
    arguments = ["run", str(TOOLS), "crunch", "--params", '{"branches": 2, "spin": 1000}', "-r", str(answers), "-q"]
    here = CliRunner().invoke(app, arguments)
    elsewhere = CliRunner().invoke(app, [*arguments, "--executor", "process:2"])
    assert here.exit_code == 0 and elsewhere.exit_code == 0, here.output + elsewhere.output
    assert json.loads(here.stdout)["pids"] == [os.getpid()]
    pids = json.loads(elsewhere.stdout)["pids"]
    assert pids and os.getpid() not in pids  # the branch steps ran in the pool's workers
    assert json.loads(elsewhere.stdout)["totals"] == json.loads(here.stdout)["totals"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--executor", "bogus"], "error: --executor 'bogus' is not an executor; use inline, process"),
        (["--executor", "process", "--in-memory"], "error: --executor runs branch steps as snapshots elsewhere"),
    ],
)
def test_run_refuses_a_bad_executor(extra, words, tmp_path):
    answers = tmp_path / "none.yaml"
    answers.write_text("sample: []\nelicit: []\n")
    done = CliRunner().invoke(app, ["run", str(TOOLS), "crunch", "-r", str(answers), *extra])
    assert done.exit_code == 1
    assert words in " ".join(done.output.split())
