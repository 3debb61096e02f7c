"""A client that goes away ends its run, in a bounded time, on every transport and in both eras.

Real parts throughout: `branchc serve` subprocesses, the real SDK client in processes of its own that
get SIGKILLed mid-sample (tests/servers/abandoning_client.py), raw HTTP connections that are dropped
without a `notifications/cancelled`, and an answer bigger than the server takes. The tool
(tests/servers/abandon_tools.py) appends "finally" to a marker file in its finally block, and can
hold ballast live in its generator, so a run nobody ends shows in the server's memory (VmRSS).

Over streamable HTTP the SDK (mcp 2.3) ends the SSE stream of a call whose client went away but
tells nobody: the run waited forever (the session's idle timeout is 30 minutes), its finally blocks
never ran, and each abandoned call kept its memory. An answer over the SDK's body limit got a 413
that the SDK's client drops, and the run waited the same way. branchc watches the connection itself
(branchc/bridge/connection.py).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
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
from _bridge_support import KEY, fake_llm, free_port, within
from mcp import Client
from mcp.shared.exceptions import MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

SERVERS = Path(__file__).parent / "servers"
TOOLS = SERVERS / "abandon_tools.py"
CLIENT = SERVERS / "abandoning_client.py"
BOUND = 10.0  # seconds within which a run whose client went away must have ended
BIG = 8 * 2**20 + 100  # an answer over the server's limit (4 MiB by default)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("gone_cache"))


@contextlib.contextmanager
def serving(
    cache: str, errlog: Path, *args: str, env: dict[str, str] | None = None, tools: Path = TOOLS
) -> Iterator[tuple[str, subprocess.Popen]]:
    """`branchc serve --http` of the tool on a free loopback port: (its URL, the process)."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(tools), "--state-key", KEY]
    command += ["--http", f"127.0.0.1:{port}", *args]
    with errlog.open("w") as err:
        process = subprocess.Popen(
            command, env={**os.environ, "BRANCHC_CACHE": cache, **(env or {})}, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, errlog.read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            assert time.monotonic() < deadline, "the server did not listen in 60 s"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.kill()
        process.wait()


def abandoning(target: str, mode: str, arguments: dict[str, Any], asked: Path, count: int = 1) -> subprocess.Popen:
    """A client process that starts `count` calls and answers nothing (see abandoning_client.py)."""
    command = [sys.executable, str(CLIENT), target, mode, "hold", json.dumps(arguments), str(count), str(asked)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_lines(path: Path, count: int, seconds: float, *processes: subprocess.Popen) -> float:
    """Wait until `path` has `count` lines; the seconds it took (an AssertionError after `seconds`, or as soon
    as one of the client `processes` exits)."""
    start = time.monotonic()
    while len(lines(path)) < count:
        for process in processes:
            assert process.poll() is None, f"the client exited ({process.returncode})"
        assert time.monotonic() - start < seconds, f"{path.name}: {len(lines(path))} of {count} lines after {seconds} s"
        time.sleep(0.02)
    return time.monotonic() - start


def killed(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def assert_quiet(errlog: Path) -> None:
    text = errlog.read_text()
    for bad in ("Traceback", "gave up: transport write blocked", "Exception ignored", "ignored GeneratorExit"):
        assert bad not in text, text


async def still_serving(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        assert [tool.name for tool in (await within(20, client.list_tools())).tools] == ["hold"]


# -- the handshake era over HTTP -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_server(cache, tmp_path_factory) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """One server for the tests that do not measure its memory."""
    errlog = tmp_path_factory.mktemp("gone_http") / "stderr.txt"
    with serving(cache, errlog) as (url, process):
        yield url, process, errlog


@pytest.mark.parametrize("ask", ["sample", "elicit"])
async def test_a_killed_client_ends_its_run(ask, http_server, tmp_path):
    url, _, errlog = http_server
    marker, asked = tmp_path / "marker.txt", tmp_path / "asked.txt"
    client = abandoning(url, "legacy", {"marker": str(marker), "ask": ask, "log": True}, asked)
    try:
        wait_lines(asked, 1, 60, client)
        assert not marker.exists()  # the run waits for its answer
    finally:
        killed(client)
    took = wait_lines(marker, 1, BOUND)
    print(f"\nkilled client ({ask}): finally ran {took:.2f} s after the kill")
    await anyio.sleep(0.5)
    assert lines(marker) == ["finally"]  # once
    await still_serving(url)
    assert_quiet(errlog)


def raw_session(port: int) -> tuple[str, dict[str, str]]:
    """initialize + initialized over plain HTTP (handshake era, sampling declared): the session's headers."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}, "elicitation": {"form": {}}},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=20)) as connection:
        connection.request("POST", "/mcp", json.dumps(hello), headers)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        session = response.getheader("mcp-session-id")
        assert '"protocolVersion":"2025-11-25"' in response.read().decode()
    headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=20)) as connection:
        connection.request(
            "POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), headers
        )
        assert connection.getresponse().status == 202
    return session, headers


@pytest.mark.parametrize("how", ["connection-closed", "session-deleted"])
def test_a_client_that_leaves_without_cancelling_ends_its_run(how, http_server, tmp_path):
    """No notifications/cancelled: the client closes the call's connection, or deletes its session."""
    url, _, errlog = http_server
    port = int(url.split(":")[2].split("/")[0])
    marker = tmp_path / "marker.txt"
    _, headers = raw_session(port)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "hold", "arguments": {"marker": str(marker), "log": True}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request("POST", "/mcp", json.dumps(call), headers)
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
        while b"sampling/createMessage" not in response.readline():
            pass
        assert not marker.exists()  # the run waits for its sample
        if how == "session-deleted":
            with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=20)) as other:
                other.request("DELETE", "/mcp", headers=headers)
                assert other.getresponse().status == 200
        else:
            connection.sock.shutdown(2)
            connection.close()
        took = wait_lines(marker, 1, BOUND)
    finally:
        connection.close()
    print(f"\n{how}: finally ran {took:.2f} s after")
    time.sleep(0.5)
    assert lines(marker) == ["finally"]
    assert_quiet(errlog)


class Oversized:
    """Client callbacks that answer with more than the server takes."""

    async def sampling(self, ctx: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", model="m", content=types.TextContent(type="text", text="x" * BIG)
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"text": "x" * BIG})


@pytest.mark.parametrize("ask", ["sample", "elicit"])
async def test_an_oversized_answer_fails_its_question_and_ends_the_run(ask, http_server, tmp_path):
    url, _, errlog = http_server
    marker = tmp_path / "marker.txt"
    answers = Oversized()
    options = {"sampling_callback": answers.sampling, "elicitation_callback": answers.elicitation}
    async with Client(url, mode="legacy", **options) as client:
        start = time.monotonic()
        result = await within(30, client.call_tool("hold", {"marker": str(marker), "ask": ask, "log": True}))
        took = time.monotonic() - start
    assert result.is_error
    text = result.content[0].text
    assert "bytes, and this server takes at most 4194304 bytes (branchc serve --max-message-mb)" in text, text
    assert lines(marker) == ["finally"]
    print(f"\noversized {ask} answer: the call failed after {took:.2f} s")
    await still_serving(url)
    assert "was " in errlog.read_text() and "Traceback" not in errlog.read_text()


def test_an_oversized_chunked_answer_fails_its_question_too(http_server, tmp_path):
    """Without Content-Length (chunked), the body is counted as it comes."""
    url, _, _ = http_server
    port = int(url.split(":")[2].split("/")[0])
    marker = tmp_path / "marker.txt"
    _, headers = raw_session(port)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "hold", "arguments": {"marker": str(marker)}}
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as connection:
        connection.request("POST", "/mcp", json.dumps(call), headers)
        response = connection.getresponse()
        line = b""
        while b"sampling/createMessage" not in line:
            line = response.readline()
        asked = json.loads(line.decode().removeprefix("data: "))
        head = json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant", "model": "m"}})
        parts = [head[:-1].encode() + b', "content": {"type": "text", "text": "', *[b"y" * 2**20] * 6, b'"}}']
        with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as answer:
            answer.request("POST", "/mcp", iter(parts), headers, encode_chunked=True)
            refused = answer.getresponse()
            assert refused.status == 413
            assert "more than 4194304 bytes" in refused.read().decode()
        rest = response.read().decode()  # the call's stream ends with its result: a tool error
    assert "MCPError: the client's answer to request" in rest, rest
    assert lines(marker) == ["finally"]


async def test_an_oversized_request_is_a_clear_error(http_server, tmp_path):
    """A request over the limit (here the 2026-07-28 era's retry carrying the answer) gets a JSON-RPC error
    the client shows; no run waits on the server in that era, and the server serves on."""
    url, _, _ = http_server
    answers = Oversized()
    async with Client(url, mode="2026-07-28", sampling_callback=answers.sampling) as client:
        with pytest.raises(MCPError, match=r"the request body was \d+ bytes, and this server takes at most 4194304"):
            await within(30, client.call_tool("hold", {"marker": str(tmp_path / "marker.txt")}))
    assert not (tmp_path / "marker.txt").exists()  # the run lives on in its request_state, as any unanswered round
    await still_serving(url)


def refused_in(port: int, headers: dict[str, str], body: bytes) -> tuple[int, str, float]:
    """POST `body` (with its Content-Length): (the status, the response's text, the seconds it took)."""
    start = time.monotonic()
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=60)) as connection:
        connection.request("POST", "/mcp", body, headers)
        response = connection.getresponse()
        return response.status, response.read().decode(), time.monotonic() - start


def slow_sender(port: int, headers: dict[str, str]) -> tuple[int, float]:
    """Declare a 32 MiB body, send its first bytes (no id yet), then nothing: (the status, the seconds it took)."""
    start = time.monotonic()
    lines_ = ["POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {32 * 2**20}"]
    lines_ += [f"{key}: {value}" for key, value in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(lines_) + "\r\n\r\n").encode() + b'{"jsonrpc": "2.0", "id": ')
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, "the server closed the connection without an answer"
            answer += chunk
    return int(answer.split()[1]), time.monotonic() - start


async def test_an_adversarial_oversized_body_is_refused_at_once(http_server):
    """Bodies over the limit built to be slow to scan for an id (32 MiB of nesting, in a session: the old scan
    read 256 MiB with a Python step per bracket, ~20 s of the event loop for each) are refused within a
    second or so each, a sender that stalls within SCAN_SECONDS, and the server answers others meanwhile."""
    url, _, errlog = http_server
    port = int(url.split(":")[2].split("/")[0])
    _, headers = raw_session(port)
    bodies = [
        b'{"jsonrpc": "2.0", "x": ' + b"[" * (32 * 2**20),
        b"[" * (32 * 2**20),
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "' + b"a" * (32 * 2**20) + b'"}}',
    ]
    results: list[tuple[int, str, float]] = []
    stalled: list[tuple[int, float]] = []

    async def send(body: bytes) -> None:
        results.append(await anyio.to_thread.run_sync(refused_in, port, headers, body))

    async def stall() -> None:
        stalled.append(await anyio.to_thread.run_sync(slow_sender, port, headers))

    async with anyio.create_task_group() as group:
        group.start_soon(stall)
        for body in bodies:
            group.start_soon(send, body)
        await anyio.sleep(0.3)  # the bodies are being sent and refused
        start = time.monotonic()
        await still_serving(url)
        meanwhile = time.monotonic() - start
    print(
        f"\nadversarial bodies refused in {[round(took, 2) for *_, took in results]} s, a stalled sender in "
        f"{stalled[0][1]:.2f} s; a call meanwhile took {meanwhile:.2f} s"
    )
    for status, text, took in results:
        assert status == 413 and "this server takes at most 4194304 bytes" in text, (status, text)
        assert took < 5
    assert stalled[0][0] == 413 and stalled[0][1] < 9  # SCAN_SECONDS (5 s), then the plain 413
    assert meanwhile < 3
    await still_serving(url)
    assert "Traceback" not in errlog.read_text()


COMMIT_TOOL = """
import asyncio

from pydantic import BaseModel

from branchc import Context, tool


class Params(BaseModel):
    marker: str


commit = tool("commit", description="asks one sample; its after() commits slowly", params=Params)


def note(handoff: dict, text: str) -> None:
    with open(handoff["marker"], "a", encoding="utf-8") as out:
        out.write(text + "\\n")


@commit.client
def client(handoff: dict, ctx: Context):
    try:
        reply = yield ctx.sample(prompt="question")
        return {"answer": reply.text}
    finally:
        note(handoff, "finally")


@commit.after
async def after(handoff: dict, result: dict) -> dict:
    note(handoff, "after started")
    await asyncio.sleep(1)  # a database commit, say
    note(handoff, "after done")
    return result
"""


def test_a_client_gone_during_after_does_not_cancel_it(cache, tmp_path):
    """The client answers the last sample and drops the call's connection while after() runs: after()
    finishes (a commit cancelled halfway is worse than one finished), the finally ran once."""
    tools, marker, errlog = tmp_path / "commit.py", tmp_path / "marker.txt", tmp_path / "stderr.txt"
    tools.write_text(COMMIT_TOOL)
    with serving(cache, errlog, tools=tools) as (url, _):
        port = int(url.split(":")[2].split("/")[0])
        _, headers = raw_session(port)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "commit", "arguments": {"marker": str(marker)}}
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        try:
            connection.request("POST", "/mcp", json.dumps(call), headers)
            response = connection.getresponse()
            line = b""
            while b"sampling/createMessage" not in line:
                line = response.readline()
            asked = json.loads(line.decode().removeprefix("data: "))
            content = {"type": "text", "text": "an answer"}
            answer = {
                "jsonrpc": "2.0",
                "id": asked["id"],
                "result": {"role": "assistant", "model": "m", "content": content},
            }
            with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=20)) as other:
                other.request("POST", "/mcp", json.dumps(answer), headers)
                assert other.getresponse().status == 202
            wait_lines(marker, 2, BOUND)  # the client phase ended (its finally ran); after() runs
            connection.sock.shutdown(2)
        finally:
            connection.close()
        wait_lines(marker, 3, BOUND)
        time.sleep(0.3)
    assert lines(marker) == ["finally", "after started", "after done"]
    assert_quiet(errlog)


async def test_a_mounted_server_wrapped_in_watch_clients_ends_a_killed_clients_run(cache, tmp_path, monkeypatch):
    """`mount` on an MCPServer served by the SDK's own app: wrapped in `watch_clients`, a killed client's run
    ends (its finally runs) instead of waiting for the session's idle timeout."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    from branchc.bridge import mount, watch_clients

    monkeypatch.setenv("BRANCHC_CACHE", cache)
    mcp = MCPServer("mine")
    mount(mcp, TOOLS)
    port = free_port()
    app = watch_clients(mcp.streamable_http_app())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    marker, asked = tmp_path / "marker.txt", tmp_path / "asked.txt"
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        while not server.started:
            await anyio.sleep(0.05)
        url = f"http://127.0.0.1:{port}/mcp"
        client = abandoning(url, "legacy", {"marker": str(marker), "log": True}, asked)
        try:
            await anyio.to_thread.run_sync(wait_lines, asked, 1, 60, client)
            assert not marker.exists()
        finally:
            killed(client)
        took = await anyio.to_thread.run_sync(wait_lines, marker, 1, BOUND)
        await anyio.sleep(0.3)
        server.should_exit = True
    print(f"\nmounted, killed client: finally ran {took:.2f} s after the kill")
    assert lines(marker) == ["finally"]


# -- memory -------------------------------------------------------------------------------------------------


CALLS, CLIENTS, BALLAST_MB = 30, 3, 4
MARGIN_MB = 20  # VmRSS after the calls ended, over the baseline: under two held runs (~10 MiB each)
ROUNDS = 3  # rounds of CALLS calls at most, until one ends within MARGIN_MB of the baseline (see the test)
ALL_ENDED = 60  # seconds for all CALLS runs of killed clients to end at once, on a loaded machine (one alone: BOUND)


def settled_rss_mb(pid: int, seconds: float = 60, still: float = 2.0, within: float = 2.0) -> float:
    """VmRSS once it has stayed within `within` MiB for `still` seconds: freeing the runs of 30 calls takes a
    few seconds on a loaded machine, and a value read while it is under way says nothing."""
    start = time.monotonic()
    samples: list[tuple[float, float]] = []
    while True:
        now = time.monotonic()
        samples.append((now, rss_mb(pid)))
        recent = [rss for at, rss in samples if at >= now - still]
        if now - start >= still and max(recent) - min(recent) <= within:
            return samples[-1][1]
        assert now - start < seconds, f"VmRSS did not settle in {seconds} s: {[round(r) for _, r in samples[-30:]]}"
        time.sleep(0.1)


def test_abandoned_calls_give_their_memory_back(cache, tmp_path):
    """30 calls, each holding 4 MiB in its run, whose clients are killed mid-sample: every finally runs and
    the server's memory returns to what it was before them.

    glibc raises its mmap threshold once a big block was freed (the warm-up's), after which it keeps freed
    4 MiB blocks in its heap for reuse instead of giving them back: VmRSS would then stay high although the
    server holds nothing. A fixed threshold (MALLOC_MMAP_THRESHOLD_) makes VmRSS follow what is live.

    The baseline is taken after a warm-up of the same 30 calls, abandoned the same way, once VmRSS has
    settled: so it has every code path, each thread of the store (up to 8 write to SQLite at once,
    durable.STORE_THREADS, each with its malloc arena: fewer with MALLOC_ARENA_MAX) and the heap that 30 calls
    at once grow. With a smaller warm-up the baseline was some 10 MiB low.

    Where the freed memory lies in the heaps still varies from round to round, though nothing is held: the
    settled VmRSS after rounds of 30 abandoned calls spreads over about 25 MiB with no trend (131 to 157 MiB
    over ten rounds on a loaded 2-CPU machine), so one round can end above the margin. A run that is held
    keeps its ballast, and each further round then adds ~300 MiB that no later round gives back; so a round
    that ends above the margin is followed by another, up to ROUNDS, and one of them must end within it."""
    errlog = tmp_path / "stderr.txt"
    marker, asked = tmp_path / "marker.txt", tmp_path / "asked.txt"
    arguments = {"marker": str(marker), "ballast_mb": BALLAST_MB, "log": True}
    malloc = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024), "MALLOC_ARENA_MAX": "2"}
    # the server's memory is measured, not the store: no history of 60 runs of 4 MiB each is written (twice the
    # bytes of every save, and on a loaded machine past the deadline of the warm-up)
    with serving(cache, errlog, "--history", "0", env=malloc) as (url, server):

        def abandon() -> tuple[float, float]:
            """CALLS calls at once, their clients killed mid-sample: (VmRSS while the runs wait, the seconds
            until every finally ran)."""
            ended = len(lines(marker))
            clients = [abandoning(url, "legacy", arguments, asked, CALLS // CLIENTS) for _ in range(CLIENTS)]
            try:
                wait_lines(asked, ended + CALLS, 120, *clients)
                time.sleep(0.5)
                held = rss_mb(server.pid)
                assert len(lines(marker)) == ended  # every run waits
            finally:
                for client in clients:
                    killed(client)
            return held, wait_lines(marker, ended + CALLS, ALL_ENDED)

        abandon()  # the warm-up
        before = settled_rss_mb(server.pid)
        rounds = []
        while len(rounds) < ROUNDS and (not rounds or rounds[-1][2] >= before + MARGIN_MB):
            held, took = abandon()
            rounds.append((held, took, settled_rss_mb(server.pid)))
            assert held > before + 0.6 * CALLS * BALLAST_MB  # the runs did hold their ballast (the test can fail)
        for held, took, after in rounds:
            print(
                f"\nVmRSS: {before:.1f} MiB before, {held:.1f} MiB with {CALLS} calls waiting, {after:.1f} MiB "
                f"after their clients were killed; all {CALLS} finally blocks ran within {took:.2f} s of the kills"
            )
        afters = [f"{after:.1f}" for _, _, after in rounds]
        assert rounds[-1][2] < before + MARGIN_MB, f"VmRSS {before:.1f} MiB before; after each round: {afters} MiB"
    assert len(lines(marker)) == CALLS * (1 + len(rounds))
    assert_quiet(errlog)


# -- the 2026-07-28 era over HTTP ---------------------------------------------------------------------------


async def test_a_client_killed_mid_round_leaves_nothing_behind(cache, tmp_path):
    """The round waits on the server's model (a provider that never answers) when its client is killed: the
    round is cancelled, the run (started in this round, saved nowhere) is halted, its finally runs once and
    its log is not waited on, and the server shuts down at once (nothing hangs in a shielded write)."""
    errlog, llm_log = tmp_path / "stderr.txt", tmp_path / "llm.jsonl"
    marker, asked = tmp_path / "marker.txt", tmp_path / "asked.txt"
    with fake_llm(llm_log) as base:
        provider = ["--sampling", "provider", "--provider-url", base, "--provider-model", "m"]
        with serving(cache, errlog, *provider) as (url, server):
            arguments = {"marker": str(marker), "prompt": "please stall", "ballast_mb": 0, "log": True}
            client = abandoning(url, "2026-07-28", arguments, asked)
            try:
                wait_lines(llm_log, 1, 60, client)  # the round asks the model, which stalls
                assert not marker.exists()
            finally:
                killed(client)
            took = wait_lines(marker, 1, BOUND)
            await still_serving(url)
            server.send_signal(signal.SIGTERM)  # uvicorn waits for every request in flight to end
            start = time.monotonic()
            server.wait(timeout=15)
            stopped = time.monotonic() - start
    print(f"\n2026-07-28 round killed: finally ran {took:.2f} s after the kill; the server stopped in {stopped:.2f} s")
    assert lines(marker) == ["finally"]
    assert stopped < 5
    assert_quiet(errlog)


# -- stdio ------------------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_a_killed_parent_ends_the_stdio_server_and_its_run(cache, tmp_path):
    """The MCP host (the stdio server's parent) is SIGKILLed mid-sample: the server sees its stdin end,
    halts the run (its finally runs) and exits."""
    marker, asked = tmp_path / "marker.txt", tmp_path / "asked.txt"
    command = [sys.executable, str(CLIENT), str(TOOLS), "legacy", "hold", json.dumps({"marker": str(marker)})]
    client = subprocess.Popen(
        [*command, "1", str(asked)],
        env={**os.environ, "BRANCHC_CACHE": cache},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_lines(asked, 1, 60, client)
        (server,) = children(client.pid)
    finally:
        killed(client)
    took = wait_lines(marker, 1, BOUND)
    deadline = time.monotonic() + BOUND
    while alive(server):
        assert time.monotonic() < deadline, "the stdio server outlived its killed parent"
        time.sleep(0.05)
    print(f"\nstdio parent killed: finally ran {took:.2f} s after, and the server exited")
    assert lines(marker) == ["finally"]


async def test_a_client_that_never_answers_fails_the_question_after_the_answer_timeout(cache, tmp_path):
    """Connected but silent (a hung client): --answer-timeout bounds the wait; the run sees the error at its yield."""
    marker, errlog = tmp_path / "marker.txt", tmp_path / "stderr.txt"

    async def silent(ctx: Any, params: Any) -> Any:
        await anyio.sleep_forever()

    with serving(cache, errlog, "--answer-timeout", "1") as (url, _):
        async with Client(url, mode="legacy", sampling_callback=silent) as client:
            result = await within(20, client.call_tool("hold", {"marker": str(marker), "log": True}))
    assert result.is_error
    assert "the client did not answer the sample within 1 s (branchc serve --answer-timeout)" in result.content[0].text
    assert lines(marker) == ["finally"]
