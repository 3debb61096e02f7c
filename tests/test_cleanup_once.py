"""A run's cleanup runs exactly once, where the run really ends, in every way a tool is run.

The tools (tests/servers/cleanup_tools.py) ask N questions and append a line to a marker file
in each `finally`; a variant also yields `ctx.log(...)` there. In the 2026-07-28 era each
round saves the run as its request_state and drops the live machine: dropped unreleased, its
generators were closed, running every finally once per round (and a finally that yields
failed with "generator ignored GeneratorExit" on the server's stderr). `branchc run`, the
handshake era over stdio, the 2026-07-28 era over stdio and HTTP, and guided mode must all
leave the marker with one cleanup, the right result, and a quiet stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import yaml
from _bridge_support import KEY, free_port, within
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from branchc import ToolPhaseError, resumable, run_tool, tool
from branchc.bridge.loading import load_served_tools
from branchc.runtime.limits import Limits
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run, load_run
from branchc.testing import MockClient

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

TOOLS = Path(__file__).parent / "servers" / "cleanup_tools.py"
CLEANUP = {"cleanup_flat": "client\n", "cleanup_nested": "helper\nworker\nclient\n"}
LOGS = {"cleanup_flat": 1, "cleanup_nested": 2}  # the cleanup logs, with log=True
# (tool, whether its finally blocks also yield a log)
VARIANTS = [("cleanup_flat", False), ("cleanup_flat", True), ("cleanup_nested", True)]
VARIANT_IDS = ["flat", "flat-log", "nested-log"]
ROUNDS = [1, 3, 20]


def expected(rounds: int) -> dict[str, Any]:
    return {"answers": [f"reply {n}" if n % 2 == 0 else n for n in range(rounds)]}


def number_in(text: str) -> int:
    return int(re.fullmatch(r"question (\d+)", text).group(1))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """One cache of compiled tools for the whole module: each server compiles nothing twice."""
    return str(tmp_path_factory.mktemp("cleanup_cache"))


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "cleanup.txt"


def arguments(rounds: int, marker: Path, log: bool) -> dict[str, Any]:
    return {"rounds": rounds, "marker": str(marker), "log": log}


def assert_quiet(stderr: str) -> None:
    assert "ignored GeneratorExit" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    assert "Traceback" not in stderr, stderr


class Answers:
    """MCP client callbacks: question n is answered "reply n" (a sample) or n (a form); logs are kept."""

    def __init__(self, *, stall_at: int | None = None) -> None:
        self.stall_at = stall_at
        self.asked: list[int] = []
        self.logs: list[Any] = []
        self.stalled = anyio.Event()

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = "".join(block.text for block in params.messages[-1].content_as_list if block.type == "text")
        number = number_in(text)
        await self._maybe_stall(number)
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=f"reply {number}")
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        number = number_in(params.message)
        await self._maybe_stall(number)
        return types.ElicitResult(action="accept", content={"value": number})

    async def _maybe_stall(self, number: int) -> None:
        self.asked.append(number)
        if number == self.stall_at:
            self.stalled.set()
            await anyio.sleep_forever()

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    def callbacks(self, *, answering: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"logging_callback": self.logging, "log_level": "info"}
        if answering:
            out |= {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation}
        return out

    def cleanup_logs(self) -> list[Any]:
        return [log for log in self.logs if isinstance(log, str) and log.endswith("cleaned up")]


def check_logs(client: Answers, name: str, log: bool) -> None:
    """With `log`, each finally's log reached the client exactly once (in the handshake era, or
    when the 2026-07-28 client asked for logs, as Answers does)."""
    want = {"cleanup_flat": ["client cleaned up"], "cleanup_nested": ["worker cleaned up", "client cleaned up"]}[name]
    assert client.cleanup_logs() == (want if log else [])


@contextlib.contextmanager
def stdio_server(cache: str, errlog: Path, *args: str) -> Iterator[Any]:
    """`branchc serve` of the cleanup tools over stdio, its stderr written to `errlog`."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "branchc", "serve", str(TOOLS), "--state-key", KEY, *args],
        env={**os.environ, "BRANCHC_CACHE": cache},
    )
    with errlog.open("w") as err:
        yield stdio_client(params, errlog=err)


@contextlib.contextmanager
def http_server(cache: str, errlog: Path) -> Iterator[str]:
    """`branchc serve --http` of the cleanup tools on a free loopback port, its stderr written to `errlog`."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOLS), "--state-key", KEY, "--http", f"127.0.0.1:{port}"]
    with errlog.open("w") as err:
        process = subprocess.Popen(
            command, env={**os.environ, "BRANCHC_CACHE": cache}, stdout=subprocess.DEVNULL, stderr=err
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, errlog.read_text()
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                    break
                assert time.monotonic() < deadline, "the server did not listen in 30 s"
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            process.wait(10)


def structured(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, result
    return result.content[0].text


# -- every mode, N rounds -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rounds", ROUNDS)
@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
def test_branchc_run(rounds, name, log, marker, tmp_path):
    answers = expected(rounds)["answers"]
    script = {
        "sample": [a for a in answers if isinstance(a, str)],
        "elicit": [{"action": "accept", "content": {"value": a}} for a in answers if isinstance(a, int)],
    }
    (tmp_path / "answers.yaml").write_text(yaml.safe_dump(script))
    options = ["--params", json.dumps(arguments(rounds, marker, log)), "--responses", str(tmp_path / "answers.yaml")]
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "run", str(TOOLS), name, "-q", *options],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected(rounds)
    assert marker.read_text() == CLEANUP[name]
    assert_quiet(done.stderr)


# One server per test serves the N = 1, 3, 20 runs in turn (starting a server costs seconds); each
# run has a marker of its own, and the server's stderr is checked after each.


async def each_round_count(tmp_path: Path, errlog: Path, name: str, log: bool, call: Any) -> None:
    for rounds in ROUNDS:
        marker = tmp_path / f"cleanup-{rounds}.txt"
        client = Answers()
        value = await within(60, call(client, arguments(rounds, marker, log)))
        assert value == expected(rounds), rounds
        assert marker.read_text() == CLEANUP[name], rounds
        check_logs(client, name, log)
        assert_quiet(errlog.read_text())


class Callbacks:
    """Client callbacks that forward to the Answers of the run under way."""

    def __init__(self) -> None:
        self.client = Answers()

    def callbacks(self, *, answering: bool = True) -> dict[str, Any]:
        async def sampling(ctx: Any, params: Any) -> Any:
            return await self.client.sampling(ctx, params)

        async def elicitation(ctx: Any, params: Any) -> Any:
            return await self.client.elicitation(ctx, params)

        async def logging(params: Any) -> None:
            await self.client.logging(params)

        out: dict[str, Any] = {"logging_callback": logging, "log_level": "info"}
        if answering:
            out |= {"sampling_callback": sampling, "elicitation_callback": elicitation}
        return out


@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_over_stdio(mode, name, log, cache, tmp_path):
    errlog = tmp_path / "stderr.txt"
    forward = Callbacks()
    with stdio_server(cache, errlog) as transport:
        options = {"input_required_max_rounds": max(ROUNDS), **forward.callbacks()}
        async with Client(transport, mode=mode, **options) as session:

            async def call(client: Answers, args: dict[str, Any]) -> Any:
                forward.client = client
                value = structured(await session.call_tool(name, args))
                assert client.asked == list(range(args["rounds"]))
                return value

            await each_round_count(tmp_path, errlog, name, log, call)
    assert_quiet(errlog.read_text())


@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
async def test_over_http(name, log, cache, tmp_path):
    errlog = tmp_path / "stderr.txt"
    forward = Callbacks()
    with http_server(cache, errlog) as url:

        async def call(client: Answers, args: dict[str, Any]) -> Any:
            forward.client = client
            options = {"input_required_max_rounds": args["rounds"], **forward.callbacks()}
            async with Client(url, mode="2026-07-28", **options) as session:
                return structured(await session.call_tool(name, args))

        await each_round_count(tmp_path, errlog, name, log, call)


async def guide(session: Any, name: str, args: dict[str, Any]) -> tuple[Any, int]:
    """Play the calling model of guided mode to the end: (the result, the branchc_resume calls)."""
    result = await session.call_tool(name, args)
    steps = 0
    while True:
        value = structured(result)
        if value.get("status") != "waiting_for_answers":
            return value, steps
        answers = {}
        for request in value["requests"]:
            if request["kind"] == "sample":
                answers[request["key"]] = f"reply {number_in(request['messages'][-1]['content'])}"
            else:
                answers[request["key"]] = {"value": number_in(request["message"])}
        result = await session.call_tool("branchc_resume", {"state_id": value["state_id"], "answers": answers})
        steps += 1


@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_guided(mode, name, log, cache, tmp_path):
    errlog = tmp_path / "stderr.txt"
    forward = Callbacks()
    with stdio_server(cache, errlog, "--guided") as transport:
        async with Client(transport, mode=mode, **forward.callbacks(answering=False)) as session:

            async def call(client: Answers, args: dict[str, Any]) -> Any:
                forward.client = client
                value, steps = await guide(session, name, args)
                assert steps == args["rounds"]
                return value

            await each_round_count(tmp_path, errlog, name, log, call)
    assert_quiet(errlog.read_text())


# -- a run that ends early still cleans up once ----------------------------------------------------------------


async def wait_for(path: Path, text: str) -> None:
    with anyio.move_on_after(10):
        while not (path.exists() and path.read_text() == text):
            await anyio.sleep(0.05)
    assert path.exists() and path.read_text() == text


async def logs_arrived(client: Answers, name: str, log: bool) -> None:
    """A cancelled call's finally blocks log after it ended: wait (a while) until as many logs as expected came."""
    want = len({"cleanup_flat": ["client"], "cleanup_nested": ["worker", "client"]}[name]) if log else 0
    with anyio.move_on_after(10):
        while len(client.cleanup_logs()) < want:
            await anyio.sleep(0.05)


@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
async def test_a_cancelled_call_cleans_up_once_in_the_handshake_era(name, log, marker, cache, tmp_path):
    client = Answers(stall_at=2)
    errlog = tmp_path / "stderr.txt"
    with stdio_server(cache, errlog) as transport:
        async with Client(transport, mode="legacy", **client.callbacks()) as session:
            with anyio.move_on_after(30) as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(session.call_tool, name, arguments(5, marker, log))
                    await client.stalled.wait()
                    assert not marker.exists()  # two questions answered, the third waits: nothing ended
                    group.cancel_scope.cancel()
            assert not scope.cancelled_caught
            await wait_for(marker, CLEANUP[name])
            assert (await session.list_tools()).tools  # the server goes on serving
            await logs_arrived(client, name, log)
            check_logs(client, name, log)
    assert marker.read_text() == CLEANUP[name]
    assert client.asked == [0, 1, 2]
    assert_quiet(errlog.read_text())


def test_a_dropped_connection_cleans_up_once_in_the_handshake_era(marker, cache, tmp_path):
    """The client goes away after two rounds (its end of stdio closes): the run is halted once."""
    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "branchc", "serve", str(TOOLS)],
            env={**os.environ, "BRANCHC_CACHE": cache},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:

        def send(message: dict) -> None:
            server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            server.stdin.flush()

        def receive() -> dict:
            return json.loads(server.stdout.readline())

        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}, "elicitation": {"form": {}}},
            "clientInfo": {"name": "t", "version": "1"},
        }
        send({"id": 1, "method": "initialize", "params": hello})
        assert receive()["id"] == 1
        send({"method": "notifications/initialized"})
        call = {"name": "cleanup_nested", "arguments": arguments(5, marker, True)}
        send({"id": 2, "method": "tools/call", "params": call})
        for number in range(3):
            message = receive()
            while "method" not in message or message["method"] == "notifications/message":
                message = receive()
            if number % 2 == 0:
                assert message["method"] == "sampling/createMessage"
                answer = {"role": "assistant", "model": "m", "content": {"type": "text", "text": f"reply {number}"}}
            else:
                assert message["method"] == "elicitation/create"
                answer = {"action": "accept", "content": {"value": number}}
            if number < 2:
                send({"id": message["id"], "result": answer})
        assert not marker.exists()  # the third question waits
        server.stdin.close()  # the connection drops
        assert server.wait(timeout=20) == 0
        assert marker.read_text() == CLEANUP["cleanup_nested"]
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    assert_quiet(errlog.read_text())


# -- refused answers do not end the run ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
async def test_a_refused_round_runs_no_cleanup_and_its_state_can_be_answered_again(name, log, marker, cache, tmp_path):
    client = Answers()
    errlog = tmp_path / "stderr.txt"
    args = arguments(3, marker, log)
    with stdio_server(cache, errlog) as transport:
        async with Client(transport, mode="2026-07-28", **client.callbacks()) as session:
            call = session.session.call_tool
            asked = await call(name, args, allow_input_required=True)
            assert list(asked.input_requests) == ["sample-1"]
            reply = await client.sampling(None, asked.input_requests["sample-1"].params)
            wrong_answers = [
                {"sample-9": reply},  # the wrong key
                {},  # no answer
                {"sample-1": types.ElicitResult(action="accept", content={"value": 0})},  # the wrong kind
            ]
            for wrong in wrong_answers:
                refused = await call(
                    name, args, input_responses=wrong, request_state=asked.request_state, allow_input_required=True
                )
                assert "sample-1" in error_text(refused) or "sample-9" in error_text(refused)
                assert not marker.exists()  # the run did not end: nothing cleaned up
            state, responses, rounds = asked.request_state, {"sample-1": reply}, 1
            while True:
                result = await call(
                    name, args, input_responses=responses, request_state=state, allow_input_required=True
                )
                rounds += 1
                if not isinstance(result, types.InputRequiredResult):
                    break
                assert not marker.exists()
                ((key, request),) = result.input_requests.items()
                answer = client.sampling if isinstance(request, types.CreateMessageRequest) else client.elicitation
                state, responses = result.request_state, {key: await answer(None, request.params)}
            check_logs(client, name, log)
    assert structured(result) == expected(3)
    assert rounds == 4
    assert marker.read_text() == CLEANUP[name]
    assert_quiet(errlog.read_text())


@pytest.mark.parametrize(("name", "log"), VARIANTS, ids=VARIANT_IDS)
async def test_a_refused_guided_answer_runs_no_cleanup_and_its_state_id_still_waits(name, log, marker, cache, tmp_path):
    errlog = tmp_path / "stderr.txt"
    with stdio_server(cache, errlog, "--guided") as transport:
        async with Client(transport, mode="2026-07-28") as session:
            first = structured(await session.call_tool(name, arguments(2, marker, log)))
            state_id = first["state_id"]
            for wrong in [{"sample-9": "reply 0"}, {"sample-1": {"value": 0}}, "not an object"]:
                text = error_text(await session.call_tool("branchc_resume", {"state_id": state_id, "answers": wrong}))
                assert "the run still waits" in text
                assert not marker.exists()
            second = structured(
                await session.call_tool("branchc_resume", {"state_id": state_id, "answers": {"sample-1": "reply 0"}})
            )
            assert second["status"] == "waiting_for_answers" and not marker.exists()
            used = error_text(await session.call_tool("branchc_resume", {"state_id": state_id, "answers": {}}))
            assert "already used" in used
            done = structured(
                await session.call_tool(
                    "branchc_resume", {"state_id": second["state_id"], "answers": {"elicit-1": {"value": 1}}}
                )
            )
    assert done == expected(2)
    assert marker.read_text() == CLEANUP[name]
    assert_quiet(errlog.read_text())


# -- the machine itself ----------------------------------------------------------------------------------------


@pytest.fixture
def compiled(cache, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", cache)
    return load_served_tools(TOOLS)


def started(tool: Any, marker: Path, rounds: int = 3) -> Machine:
    machine = Machine(tool.name, "1", Limits())
    machine.start(tool.client_fn, arguments(rounds, marker, True), tool.client_fn.__qualname__)
    machine.advance()
    machine.take_outbox()
    return machine


def answer_round(machine: Machine) -> None:
    for request in machine.pending:
        number = number_in(request.sample.messages[-1].content if request.kind == "sample" else request.elicit.message)
        if request.kind == "sample":
            machine.answer(request.key, f"reply {number}")
        else:
            machine.answer(request.key, {"action": "accept", "content": {"value": number}})
    machine.advance()


@pytest.mark.parametrize("name", sorted(CLEANUP))
def test_a_released_machine_runs_no_cleanup_and_its_saved_copy_runs_it_once(name, compiled, marker):
    machine = started(compiled[name], marker)
    handoff = arguments(3, marker, True)
    while not machine.done:
        text = dump_run(handoff, machine)
        machine.release()
        assert machine.released and machine.branches == {} and machine.pending == []
        assert not marker.exists()
        handoff, machine = load_run(text)
        answer_round(machine)
        logs = machine.take_outbox()
    assert machine.ok and machine.result == expected(3)
    assert marker.read_text() == CLEANUP[name]
    assert len(logs) == LOGS[name]


def test_a_released_machine_cannot_be_stepped_or_saved(compiled, marker):
    machine = started(compiled["cleanup_nested"], marker)
    machine.release()
    machine.release()  # again: nothing to do
    with pytest.raises(RuntimeError, match="released machine"):
        machine.advance()
    with pytest.raises(RuntimeError, match="released machine"):
        dump_run({}, machine)
    machine.halt()  # nothing left to halt
    assert not marker.exists()


def test_a_halted_machine_runs_its_cleanup_once(compiled, marker):
    machine = started(compiled["cleanup_nested"], marker)
    machine.halt()
    assert marker.read_text() == CLEANUP["cleanup_nested"]
    assert [item[2] for item in machine.take_outbox()] == ["worker cleaned up", "client cleaned up"]
    machine.release()  # a halted run has nothing left to let go of
    assert marker.read_text() == CLEANUP["cleanup_nested"]


def test_a_machine_of_native_generators_cannot_be_released(marker):
    def native(handoff: dict, ctx: Any):
        try:
            yield ctx.sample(prompt="question 0")
        finally:
            with open(handoff["marker"], "a") as out:
                out.write("native\n")

    machine = Machine("native", "1", Limits())
    machine.start(native, {"marker": str(marker)}, "native")
    machine.advance()
    with pytest.raises(TypeError, match="only a machine of compiled generators can be released"):
        machine.release()
    assert not machine.released and machine.pending  # untouched: it can still be halted
    machine.halt()
    assert marker.read_text() == "native\n"


@pytest.mark.parametrize("branches", [1, 2])
def test_a_halt_that_fails_in_one_branch_still_halts_the_others(branches, marker):
    """CPython closes a `yield from` delegate on GeneratorExit, so a delegate's finally that yields
    fails the halt ("ignored GeneratorExit"); every other branch is halted all the same, now."""

    def helper(ctx: Any, number: int):
        try:
            yield ctx.sample(prompt=f"question {number}")
        finally:
            with open(marker, "a") as out:
                out.write("helper\n")
            yield ctx.log("info", "helper cleaned up")

    @resumable
    def worker(ctx: Any, number: int):
        try:
            yield from helper(ctx, number)
        finally:
            with open(marker, "a") as out:
                out.write("worker\n")

    def client(handoff: dict, ctx: Any):
        try:
            if branches == 1:
                yield ctx.branch(worker, 0)
            else:
                yield ctx.all([ctx.branch(worker, number) for number in range(branches)])
        finally:
            with open(marker, "a") as out:
                out.write("client\n")
            yield ctx.log("info", "client cleaned up")

    machine = Machine("native", "1", Limits())
    machine.start(client, {}, "client")
    machine.advance()
    assert len(machine.pending) == branches
    with pytest.raises(RuntimeError, match="generator ignored GeneratorExit") as failure:
        machine.halt()
    assert marker.read_text() == "helper\nworker\n" * branches + "client\n"
    assert machine.branches == {}
    assert [item[2] for item in machine.take_outbox()] == ["client cleaned up"]
    assert len(getattr(failure.value, "__notes__", [])) == branches - 1  # the second failure, noted


class LosingClient(MockClient):
    """A client whose connection is gone by the time the first log is sent."""

    async def log(self, level: str, message: str) -> None:
        raise ConnectionResetError("the client went away")


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
async def test_a_run_the_client_fails_under_is_halted_at_once(marker):
    """A failure that is not a cancellation (a log the client cannot take) ends the run: run_tool halts it
    before it raises, so the finally runs, once, at its yield, and is not left to the collector."""
    lost = tool("lost", requires={"sampling"})

    @lost.client
    def client(handoff: dict, ctx: Any):
        try:
            yield ctx.log("info", "hello")
            yield ctx.sample(prompt="question 0")
        finally:
            with open(marker, "a") as out:
                out.write("client\n")
            yield ctx.log("info", "client cleaned up")

    with pytest.raises(ToolPhaseError, match=r"lost: client\(\) failed") as failure:
        await run_tool(lost, {}, LosingClient(["reply 0"]))
    cause = failure.value.error
    causes = cause.exceptions if isinstance(cause, BaseExceptionGroup) else (cause,)
    assert [type(c) for c in causes] == [ConnectionResetError]
    assert marker.read_text() == "client\n"  # while the failure (and its frames) still lives
    del failure
    assert marker.read_text() == "client\n"


@pytest.mark.parametrize("log", [False, True])
async def test_a_round_that_cannot_save_its_run_halts_it_once(log, marker, cache, tmp_path):
    """The run cannot be saved for a next round (a lock is live across the yield): the run ends in
    this round, so it is halted there: its finally runs once, and its log still reaches the client."""
    client = Answers()
    errlog = tmp_path / "stderr.txt"
    with stdio_server(cache, errlog) as transport:
        async with Client(transport, mode="2026-07-28", **client.callbacks()) as session:
            text = error_text(await session.call_tool("cleanup_unsaveable", arguments(1, marker, log)))
    assert "NotSerializableError" in text and "lock" in text
    assert marker.read_text() == "client\n"
    assert client.cleanup_logs() == (["client cleaned up"] if log else [])
    assert client.asked == []
    assert_quiet(errlog.read_text())
