"""Operating a server (issue 24): /healthz, /readyz, /metrics for Prometheus, JSON logs, and the drain on SIGTERM.

Real parts: `branchc serve --http` subprocesses on 127.0.0.1 over real SQLite files (and a real redis-server),
the real `mcp` client in both eras, HTTP requests to the endpoints, and real signals. The tool
(tests/servers/durable_tools.py) logs each step, its finally and its after() to a file of each call's, so the drain
test counts what ran, and how often.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import mcp.types as types
import pytest
import yaml
from _bridge_support import KEY, KEYS, free_port, listening, within
from _redis_support import RedisServer, needs_redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_durable_rounds import MODERN, NAME, TOOL_FILE, answer_all, call, expected, final, lines
from test_held_runs import StopsAt

from branchc.store import open_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]

DRAIN = 6.0  # --drain-timeout of the drained replica: runs still waiting on a client are handed over at 4.5 s


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("operations_cache"))


def serve_command(port: int, store: str, *args: str) -> list[str]:
    base = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY, "--store", store]
    return [*base, "--http", f"127.0.0.1:{port}", *args]


def get(port: int, path: str, **headers: str) -> httpx2.Response:
    return httpx2.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=10)


SHUTTING_DOWN = "this server is shutting down; send the request to another replica"


def initialize(port: int) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    return httpx2.post(f"http://127.0.0.1:{port}/mcp", json=body, headers=headers, timeout=10)


def ran_once(log: Path, rounds: int) -> None:
    assert lines(log) == [*(f"step {n}" for n in range(rounds)), "finally", "after"], (log.name, lines(log))


# -- health, readiness, metrics and JSON logs -----------------------------------------------------------------


async def test_health_readiness_metrics_and_json_logs(cache, tmp_path) -> None:
    """One server with --metrics, --log-format json and a token file: /healthz and /readyz answer anyone and say
    nothing more; /metrics takes a token, and holds branchc's metrics by their Prometheus names; every stderr line
    is a JSON object, and a failed round's names its tool, run, round and principal."""
    tokens = tmp_path / "tokens"
    tokens.write_text("alice " + "a" * 32 + "\n")
    tokens.chmod(0o600)
    port, stderr = free_port(), tmp_path / "stderr.txt"
    command = serve_command(port, f"sqlite:///{tmp_path / 'runs.db'}", "--metrics", "--log-format", "json")
    command += ["--auth-tokens", str(tokens)]
    with stderr.open("w") as err:
        process = subprocess.Popen(command, env={**os.environ, "BRANCHC_CACHE": cache}, stderr=err)
    try:
        await within(30, _until_listening(port))
        assert (get(port, "/healthz").status_code, get(port, "/healthz").text) == (200, "ok\n")
        assert (get(port, "/readyz").status_code, get(port, "/readyz").text) == (200, "ready\n")
        assert get(port, "/metrics").status_code == 401  # no token
        assert get(port, "/metrics", Authorization="Bearer " + "b" * 32).status_code == 401  # a wrong one
        headers = {"Authorization": "Bearer " + "a" * 32}
        transport = streamable_http_client(
            f"http://127.0.0.1:{port}/mcp", http_client=create_mcp_http_client(headers=headers)
        )
        async with Client(transport, **MODERN) as client:
            waits = await call(client.session, {"rounds": 2, "log": str(tmp_path / "log.txt")})  # left waiting
            assert isinstance(waits, types.InputRequiredResult)
            folder = tmp_path / "folder"
            folder.mkdir()  # the tool's note() cannot open it: the round after the first answer fails
            asked = await call(client.session, {"rounds": 2, "log": str(folder)})
            failed = await call(client.session, {"rounds": 2, "log": str(folder)}, asked.request_state,
                                await answer_all(asked))  # fmt: skip
            assert failed.is_error
        scraped = get(port, "/metrics", **headers)
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
        text = scraped.text
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    shown = {"branchc_tool": NAME, "branchc_era": "2026-07-28"}
    assert _sample(text, "branchc_rounds_started_total", shown) == 3
    assert _sample(text, "branchc_rounds_total", {**shown, "branchc_outcome": "asked"}) == 2
    assert _sample(text, "branchc_rounds_total", {**shown, "branchc_outcome": "failed"}) == 1
    assert _sample(text, "branchc_round_duration_seconds_count", shown) == 3
    assert _sample(text, "branchc_round_duration_seconds_bucket", {**shown, "le": "+Inf"}) == 3
    assert _sample(text, "branchc_client_wait_seconds_count", {**shown, "branchc_kind": "sample"}) == 1
    assert _sample(text, "branchc_checkpoint_size_bytes_count", shown) == 2
    assert _sample(text, "branchc_store_duration_seconds_count", {"branchc_operation": "create"}) == 2
    assert _sample(text, "branchc_runs_waiting", shown) == 1  # read from the store: the run left waiting
    assert "# TYPE branchc_round_duration_seconds histogram" in text
    logged = [json.loads(line) for line in stderr.read_text().splitlines() if line.strip()]  # every line is JSON
    assert all({"time", "level", "message"} <= entry.keys() for entry in logged)
    (failure,) = [entry for entry in logged if entry["message"].startswith("round failed")]
    assert "IsADirectoryError" in failure["message"] and failure["level"] == "info"
    assert failure["tool"] == NAME and failure["principal"] == "alice" and failure["round"] == 1
    assert re.fullmatch(r"[A-Za-z0-9_-]{24}", failure["run_id"])
    assert any("serving 1 tool(s)" in entry["message"] for entry in logged)  # a line print()ed, wrapped as JSON


def _sample(text: str, name: str, labels: dict[str, str]) -> float:
    """The sum of the samples of metric `name` whose labels include `labels` (there is one at least)."""
    found = []
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match.group(1) != name:
            continue
        have = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if labels.items() <= have.items():
            found.append(float(match.group(3)))
    assert found, (name, labels)
    return sum(found)


async def _until_listening(port: int) -> None:
    while True:
        with contextlib.suppress(httpx2.HTTPError):
            if (await anyio.to_thread.run_sync(get, port, "/healthz")).status_code == 200:
                return
        await anyio.sleep(0.1)


@needs_redis
async def test_readyz_says_not_ready_once_the_store_is_gone(cache, tmp_path) -> None:
    redis = RedisServer(tmp_path / "redis").start()
    port = free_port()
    try:
        with listening(serve_command(port, f"{redis.url}?prefix=ready:"), port, {"BRANCHC_CACHE": cache}):
            assert get(port, "/readyz").text == "ready\n"
            redis.stop()
            time.sleep(1.1)  # readiness reads the store at most once a second
            refused = get(port, "/readyz")
            assert (refused.status_code, refused.text) == (503, "not ready: store\n")  # why goes to stderr only
            assert get(port, "/healthz").status_code == 200  # the process is up all the same
    finally:
        redis.stop()


# -- the drain: two replicas, one sent SIGTERM mid-load -----------------------------------------------------


def legacy(answers: StopsAt) -> dict[str, Any]:
    """A handshake-era client's options, answering as `answers` does."""
    return {"mode": "legacy", "sampling_callback": answers.sampling, "elicitation_callback": answers.elicitation}


class Replicas:
    """Sessions to both replicas; `call(fn, at)` runs `fn(session)` on replica `at`, and on replica 1 instead once
    replica 0 refused a request (503 while draining) or is gone."""

    def __init__(self, urls: list[str], options: dict[str, Any]) -> None:
        self.clients = [_Quiet(Client(url, **options)) for url in urls]
        self.sessions: list[Any] = []
        self.left = False  # replica 0 refused us: it drains

    async def __aenter__(self) -> Replicas:
        self.sessions = [(await client.__aenter__()).session for client in self.clients]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for client in reversed(self.clients):
            await client.__aexit__(*exc)

    async def call(self, fn: Any, at: int = 0) -> Any:
        if at == 0 and not self.left:
            try:
                return await fn(self.sessions[0])
            except Exception as error:  # refused while draining (503), or the replica is gone: the other one takes it
                assert "shutting down" in str(error) or "onnect" in repr(error), repr(error)
                self.left = True
        return await fn(self.sessions[1])


class _Quiet:
    """A client whose closing never fails (its server may be gone by then)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aenter__(self) -> Any:
        return await self.inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            await self.inner.__aexit__(*exc)


async def test_sigterm_drains_a_replica_mid_load_and_no_call_is_lost(cache, tmp_path) -> None:
    await within(90, _drained_mid_load(cache, tmp_path, f"sqlite:///{tmp_path / 'runs.db'}"))


@needs_redis
async def test_sigterm_drains_a_replica_of_two_on_one_redis(cache, tmp_path) -> None:
    redis = RedisServer(tmp_path / "redis").start()
    try:
        await within(90, _drained_mid_load(cache, tmp_path, f"{redis.url}?prefix=drain:"))
    finally:
        redis.stop()


async def _drained_mid_load(cache: str, tmp_path: Path, store: str) -> None:
    """Replicas 0 and 1 on one store; replica 0 (--drain-timeout 6) gets SIGTERM while 2026-07-28 runs alternate
    between the two, handshake-era calls run on it, and one handshake-era client holds an answer back. Every
    2026-07-28 round refused while it drains goes to replica 1; so does every handshake-era call it refuses; the
    calls in flight finish there; the run whose client holds back is handed over to the store and finishes under
    `branchc runs resume`; the drained process exits, status 0, within the drain timeout; and in every run each
    step, its finally and its after() ran once."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}/mcp" for port in ports]
    env = {"BRANCHC_CACHE": cache}
    drained = serve_command(ports[0], store, "--drain-timeout", str(DRAIN), "--metrics")
    with listening(drained, ports[0], env) as zero, listening(serve_command(ports[1], store), ports[1], env):
        results: dict[str, Any] = {}
        logs: dict[str, tuple[Path, int]] = {}
        started = anyio.Event()
        moved: list[bool] = []  # whether each handshake-era worker was refused by replica 0, and went on on 1
        held = StopsAt(2)  # its client never answers question 2

        async def modern(worker: int) -> None:
            """2026-07-28 calls, round k of call i on replica (i + k) % 2 while it serves."""
            async with Replicas(urls, MODERN) as replicas:
                for index in range(3):
                    name = f"modern-{worker}-{index}"
                    logs[name] = (tmp_path / f"{name}.txt", 6)
                    arguments = {"rounds": 6, "log": str(logs[name][0])}
                    state = responses = None
                    for k in range(8):
                        result = await replicas.call(
                            lambda s, a=arguments, st=state, r=responses: call(s, a, st, r), (worker + k) % 2
                        )
                        if not isinstance(result, types.InputRequiredResult):
                            break
                        state, responses = result.request_state, await answer_all(result)
                        await anyio.sleep(0.1)
                    results[name] = result

        async def handshake(worker: int) -> None:
            """Handshake-era calls on replica 0 while it takes them, then on replica 1; each answer takes 0.2 s."""
            async with Replicas(urls, legacy(StopsAt(None, delay=0.2))) as replicas:
                for index in range(5):
                    name = f"handshake-{worker}-{index}"
                    logs[name] = (tmp_path / f"{name}.txt", 4)
                    arguments = {"rounds": 4, "log": str(logs[name][0])}
                    results[name] = await replicas.call(lambda s, a=arguments: s.call_tool(NAME, a))
                    started.set()
                moved.append(replicas.left)

        async def held_back() -> None:
            logs["held"] = (tmp_path / "held.txt", 4)
            async with Client(urls[0], **legacy(held)) as client:
                results["held"] = await client.session.call_tool(NAME, {"rounds": 4, "log": str(logs["held"][0])})

        async with anyio.create_task_group() as group:
            group.start_soon(held_back)
            for worker in range(4):
                group.start_soon(modern, worker)
            for worker in range(3):
                group.start_soon(handshake, worker)
            await held.asked.wait()
            await started.wait()
            await anyio.sleep(0.5)  # mid-load: every kind of call in flight
            zero.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            readiness = await anyio.to_thread.run_sync(get, ports[0], "/readyz")
            assert (readiness.status_code, readiness.text) == (503, "not ready: draining\n")
            assert (await anyio.to_thread.run_sync(get, ports[0], "/healthz")).status_code == 200
            refused = await anyio.to_thread.run_sync(initialize, ports[0])  # a new session: refused, told to retry
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json() == {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": SHUTTING_DOWN}}
            assert (
                await anyio.to_thread.run_sync(lambda: get(ports[0], "/metrics", Host="evil.example"))
            ).status_code == 421
            status = await anyio.to_thread.run_sync(zero.wait)
            took = time.monotonic() - signalled
    assert status == 0 and took < DRAIN + 1.0, (status, took)
    handed = results.pop("held")
    assert handed.is_error and "handed over to the store" in handed.content[0].text
    run_id = re.search(r"branchc runs resume (\S+)", handed.content[0].text).group(1)
    assert lines(logs["held"][0]) == ["step 0", "step 1"]  # no finally: the run goes on elsewhere
    record = open_store(store, KEYS).load(run_id)
    assert record.status == "waiting" and "held" not in record.meta.extra and record.meta.extra["released"]["why"]
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        yaml.safe_dump({"sample": ["reply 2"], "elicit": [{"action": "accept", "content": {"value": 3}}]})
    )
    resumed = subprocess.run(
        [sys.executable, "-m", "branchc", "runs", "resume", run_id, "--tools", str(TOOL_FILE), "--store", store,
         "--responses", str(answers)],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == expected(4)
    for name, result in results.items():
        assert final(result) == expected(logs[name][1]), name
    for log, rounds in logs.values():
        ran_once(log, rounds)
    assert len(results) == 4 * 3 + 3 * 5 and all(moved)  # each handshake-era worker had a call refused, and retried
    records = open_store(store, KEYS).list(limit=1000)
    assert {record.status for record in records} == {"done"} and len(records) == len(logs)
