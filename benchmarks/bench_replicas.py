"""Replicas under load: many concurrent multi-round calls over HTTP, every run moving between two servers.

Two real `branchc serve TOOL --http` subprocesses on loopback ports share one store (an SQLite file, then
a redis-server this script starts on a free loopback port, then a PostgreSQL it starts from Debian's
binaries with its own durable settings, tests/_postgres_support.py) and one `--state-key`, so either replica can
continue a run the other started. The tool (tests/servers/replica_tools.py) asks `--rounds` questions,
samples and forms in turn, each naming the call; it returns the answers in order and the pid of the server
that took each one. The real `mcp` client, in the 2026-07-28 era, drives `--calls` calls at once, each by
hand (call_tool, then InputRequiredResult -> call again with input_responses and the request_state), and
sends round k of call i to replica (i + k) % 2, so every round of every run changes servers.

Every call's result is checked: the answers in order, and the pids alternating between the two replicas.
Reported per store: per-round latency (p50 / p99, in ms; round 0 starts the run, round k answers
question k - 1), wall time, calls and rounds per second, and each server's resident memory (VmRSS)
before the load (after one warm-up call) and after it.

    python benchmarks/bench_replicas.py                 # the full run: 200 calls x 10 rounds, each store
    python benchmarks/bench_replicas.py --quick         # a smoke run: 20 calls
    python benchmarks/bench_replicas.py --store sqlite --calls 50 --rounds 4

Each replica is one client (one `mcp.Client`, one HTTP connection pool sized for `--calls` connections)
shared by every call: the 2026-07-28 era is one POST per round with no session state, so sharing costs
nothing, and one connection per call in flight avoids the default pool's 100-connection queue.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.simplefilter("ignore", MCPDeprecationWarning)

ROOT = Path(__file__).resolve().parent.parent
TOOL_FILE = ROOT / "tests" / "servers" / "replica_tools.py"
TOOL = "replica_rounds"
KEEPALIVE = 2.0  # seconds an idle client connection is reused (see shared_client)
KEY = "replicas-bench-" + "k" * 32  # the state key both replicas seal request_state with


# -- the parts: a redis-server, two branchc servers -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """redis-server on a free loopback port, no persistence; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (Debian: apt-get install redis-server); use --store sqlite")
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*args, "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not answers_ping(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"redis-server did not answer PING on port {port}")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL on a free loopback port, in a temporary folder, fsync per commit (its own settings); its URL."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _postgres_support import BIN, SKIP_REASON, PostgresServer

    if BIN is None:
        raise SystemExit(f"{SKIP_REASON}; use --store sqlite")
    server = PostgresServer(durable=True).start()
    try:
        yield server.url
    finally:
        server.remove()


@contextlib.contextmanager
def replica(store: str, cache: Path, log: Path, calls: int) -> Iterator[tuple[subprocess.Popen, str]]:
    """`branchc serve TOOL --http 127.0.0.1:PORT --store STORE --state-key KEY`, the one (unauthenticated)
    caller allowed `calls` runs waiting at once (100 by default); yields (process, its URL)."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--http", f"127.0.0.1:{port}"]
    command += ["--store", store, "--state-key", KEY, "--principal-max-runs", str(calls + 10)]
    env = {**os.environ, "BRANCHC_CACHE": str(cache), "BRANCHC_STATE_DIR": str(cache.parent / "state")}
    with log.open("ab") as errors:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise SystemExit(f"branchc serve exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise SystemExit("branchc serve did not start listening in 60 s")
            time.sleep(0.05)
        yield process, f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rss_mib(pid: int) -> float:
    """Resident memory of `pid` in MiB (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


# -- one call, driven by hand -------------------------------------------------------------------------------


def answer_for(tag: str, index: int, request: Any) -> Any:
    """The answer to one question ("TAG question N"): a sample gets "reply TAG N", a form index * 1000 + N."""
    if isinstance(request, types.CreateMessageRequest):
        text = "".join(b.text for b in request.params.messages[-1].content_as_list if b.type == "text")
        asked_tag, _, number = text.split()
        return types.CreateMessageResult(
            role="assistant",
            model="scripted",
            content=types.TextContent(type="text", text=f"reply {asked_tag} {number}"),
        )
    return types.ElicitResult(
        action="accept", content={"value": index * 1000 + int(request.params.message.split()[-1])}
    )


def expected(index: int, rounds: int) -> list[Any]:
    tag = f"call{index}"
    return [f"reply {tag} {n}" if n % 2 == 0 else index * 1000 + n for n in range(rounds)]


async def one_call(index: int, clients: list[Client], rounds: int, latencies: list[list[float]]) -> dict[str, Any]:
    """Call `index` to its end, round k on replica (index + k) % 2; its structured result (or AssertionError)."""
    tag = f"call{index}"
    arguments = {"tag": tag, "rounds": rounds}
    state, responses, k = None, None, 0
    while True:
        started = time.perf_counter()
        result = await clients[(index + k) % 2].session.call_tool(
            TOOL, arguments, input_responses=responses, request_state=state, allow_input_required=True
        )
        latencies[k].append(time.perf_counter() - started)
        k += 1
        if not isinstance(result, types.InputRequiredResult):
            break
        if k > rounds:
            raise AssertionError(f"{tag}: still asking after {rounds} rounds")
        responses = {key: answer_for(tag, index, request) for key, request in result.input_requests.items()}
        state = result.request_state
    if not isinstance(result, types.CallToolResult) or result.is_error:
        text = result.content[0].text if getattr(result, "content", None) else repr(result)
        raise AssertionError(f"{tag}: round {k - 1} failed: {text}")
    return result.structured_content


def check(index: int, rounds: int, data: Any, pids: list[int]) -> None:
    """The answers came in order, and round k (k >= 1) ran on replica (index + k) % 2."""
    tag = f"call{index}"
    assert data["tag"] == tag and data["answers"] == expected(index, rounds), data
    assert data["pids"] == [pids[(index + k) % 2] for k in range(1, rounds + 1)], (data["pids"], pids)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


async def unused(ctx: Any, params: Any) -> Any:
    raise AssertionError("the 2026-07-28 era has no back channel: the server asked mid-call")


@contextlib.asynccontextmanager
async def shared_client(url: str, connections: int):
    # keep-alive shorter than the server's (uvicorn closes a connection idle for 5 s): with both at 5 s, a POST
    # sent on a connection the server is closing at that moment fails with ReadError (a POST is not retried)
    limits = httpx2.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=KEEPALIVE
    )
    timeout = httpx2.Timeout(120.0)
    async with httpx2.AsyncClient(limits=limits, timeout=timeout) as http:
        # the callbacks declare the sampling and elicitation capabilities; in this era the server never calls
        # them (no back channel): its questions come back as InputRequiredResult, answered by one_call
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport, mode="2026-07-28", sampling_callback=unused, elicitation_callback=unused
        ) as client:
            yield client


async def load(urls: list[str], pids: list[int], calls: int, rounds: int) -> dict[str, Any]:
    latencies: list[list[float]] = [[] for _ in range(rounds + 1)]
    failures: list[str] = []
    async with shared_client(urls[0], calls + 4) as a, shared_client(urls[1], calls + 4) as b:
        clients = [a, b]
        check(0, rounds, await one_call(0, clients, rounds, [[] for _ in range(rounds + 1)]), pids)  # warm-up
        before = [rss_mib(pid) for pid in pids]

        async def run(index: int) -> None:
            try:
                check(index, rounds, await one_call(index, clients, rounds, latencies), pids)
            except Exception as error:  # every failure is counted and shown, the others go on
                failures.append(f"call {index}: {type(error).__name__}: {error}"[:500])

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for index in range(1, calls + 1):
                group.start_soon(run, index)
        wall = time.perf_counter() - started
        after = [rss_mib(pid) for pid in pids]
    return {"latencies": latencies, "failures": failures, "wall": wall, "before": before, "after": after}


def report(name: str, calls: int, rounds: int, outcome: dict[str, Any]) -> bool:
    wall, failures = outcome["wall"], outcome["failures"]
    ok = calls - len(failures)
    print(f"\n== {name}: {calls} concurrent calls x {rounds} questions ({rounds + 1} tools/call rounds each)")
    print(f"   {ok}/{calls} calls complete with the right result and alternating replicas")
    print(f"   wall {wall:.2f} s; {calls / wall:.1f} calls/s, {calls * (rounds + 1) / wall:.0f} rounds/s")
    print("   round   p50 ms   p99 ms   (round 0 starts the run; round k answers question k-1)")
    for k, values in enumerate(outcome["latencies"]):
        if values:
            print(f"   {k:>5} {percentile(values, 0.5) * 1000:8.1f} {percentile(values, 0.99) * 1000:8.1f}")
    every = [v for values in outcome["latencies"] for v in values]
    print(f"     all {percentile(every, 0.5) * 1000:8.1f} {percentile(every, 0.99) * 1000:8.1f}")
    for label, before, after in zip(("A", "B"), outcome["before"], outcome["after"], strict=True):
        print(f"   replica {label} RSS: {before:.1f} MiB before, {after:.1f} MiB after ({after - before:+.1f})")
    for failure in failures[:10]:
        print(f"   FAILED {failure}")
    return not failures


def bench(store_kind: str, folder: Path, calls: int, rounds: int) -> bool:
    cache = folder / "cache"
    with contextlib.ExitStack() as stack:
        if store_kind == "sqlite":
            store = f"sqlite:///{folder / 'runs.db'}"
        elif store_kind == "postgresql":
            store = stack.enter_context(postgres_server()) + f"?schema=bench{time.monotonic_ns()}"
        else:
            store = stack.enter_context(redis_server(folder)) + f"?prefix=bench{time.monotonic_ns()}:"
        log = folder / f"servers-{store_kind}.log"
        first, url_a = stack.enter_context(replica(store, cache, log, calls))
        second, url_b = stack.enter_context(replica(store, cache, log, calls))
        try:
            outcome = anyio.run(load, [url_a, url_b], [first.pid, second.pid], calls, rounds)
        except BaseException:
            print(f"the load failed; the servers' log:\n{log.read_text(errors='replace')[-5000:]}", file=sys.stderr)
            raise
        shown = re.sub(r"//([^:/@]*):[^@/]*@", r"//\1@", store.split("?")[0])  # without a password
        passed = report(f"{store_kind} ({shown})", calls, rounds, outcome)
    if log.exists() and "Traceback" in log.read_text(errors="replace"):
        print(f"   the servers logged tracebacks:\n{log.read_text(errors='replace')[-3000:]}")
        passed = False
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="concurrent calls (default 200)")
    parser.add_argument("--rounds", type=int, default=10, help="questions per call (default 10)")
    parser.add_argument("--store", choices=("sqlite", "redis", "postgresql", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20 calls")
    args = parser.parse_args()
    calls = 20 if args.quick else args.calls
    kinds = ("sqlite", "redis", "postgresql") if args.store == "all" else (args.store,)
    passed = True
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
            passed = bench(kind, Path(tmp), calls, args.rounds) and passed
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
