"""Abandoned runs end exactly once (branchc/bridge/expiry.py, the stores' kept expired runs, `branchc runs gc`).

A client starts a run and never comes back: when the run expires, the server's sweeper (or `branchc runs gc
--tools PATH`) ends it, its finally blocks running once, in the code that saved it, and its record says so.

Real parts: `branchc serve --http` subprocesses with short TTLs, the real `mcp` client (2026-07-28 era, and a
client that can neither sample nor elicit, for guided mode), real SQLite files and a real redis-server shared
by replicas, a server killed with SIGKILL, and `branchc runs` subprocesses. The tools are
tests/servers/cleanup_tools.py: `cleanup_flat`'s finally appends "client" to the file its `marker` names.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
from _bridge_support import KEY, free_port
from _postgres_support import needs_postgres
from _redis_support import needs_redis
from mcp import Client

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

TOOL_FILE = Path(__file__).parent / "servers" / "cleanup_tools.py"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One compile cache for every server and `branchc runs` of this module (the same build, the same code)."""
    return tmp_path_factory.mktemp("abandoned_cache")


def env_of(cache: Path) -> dict[str, str]:
    return {**os.environ, "BRANCHC_CACHE": str(cache), "BRANCHC_STATE_KEY": KEY}


@contextlib.contextmanager
def serving(cache: Path, log: Path, *args: str, tools: Path = TOOL_FILE) -> Iterator[tuple[str, subprocess.Popen]]:
    """`branchc serve cleanup_tools.py --http` (or `tools`) with `args` until it listens; its URL and process;
    killed after. Its stderr goes to `log` (what the sweeper says)."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(tools), "--http", f"127.0.0.1:{port}", *args]
    with log.open("ab") as err:
        process = subprocess.Popen(command, env=env_of(cache), stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"branchc serve exited: {log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            assert time.monotonic() < deadline, f"branchc serve did not listen in 60 s: {log.read_text()}"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.kill()
        process.wait()


def runs(cache: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchc", "runs", *arguments],
        env=env_of(cache),
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok_json(cache: Path, *arguments: str) -> Any:
    done = runs(cache, *arguments, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def lines(marker: Path) -> list[str]:
    return marker.read_text().splitlines() if marker.exists() else []


def wait_for_line(marker: Path, log: Path, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not lines(marker):
        assert time.monotonic() < deadline, f"the run's finally blocks never ran; the server said: {log.read_text()}"
        time.sleep(0.1)


async def _answer(ctx: Any, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="x", content=types.TextContent(type="text", text="x"))


async def _form(ctx: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"value": 1})


async def start_and_abandon(url: str, marker: Path) -> None:
    """A 2026-07-28 run of cleanup_flat waiting for its first answer, whose client goes away for good."""
    async with Client(url, mode="2026-07-28", sampling_callback=_answer, elicitation_callback=_form) as client:
        first = await client.session.call_tool(
            "cleanup_flat", {"rounds": 2, "marker": str(marker), "log": True}, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult), first


async def start_guided_and_abandon(url: str, marker: Path) -> str:
    """A guided run of cleanup_flat (the client can neither sample nor elicit), never resumed: its state id."""
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool("cleanup_flat", {"rounds": 2, "marker": str(marker), "log": True})
        assert not result.is_error, result
        return result.structured_content["state_id"]


def the_run(cache: Path, store: str) -> dict[str, Any]:
    (only,) = ok_json(cache, "list", "--store", store)
    return only


def test_an_abandoned_2026_07_28_run_is_ended_once_by_the_servers_sweeper(cache, tmp_path):
    marker, log, store = tmp_path / "marker.txt", tmp_path / "serve.log", f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(cache, log, "--store", store, "--state-ttl", "2") as (url, _):
        anyio.run(start_and_abandon, url, marker)
        assert lines(marker) == []  # it waits
        run = the_run(cache, store)
        assert run["status"] == "waiting" and run["era"] == "2026-07-28"
        wait_for_line(marker, log)
        time.sleep(2)  # several sweeps more: none ends it again
    assert lines(marker) == ["client"]
    shown = ok_json(cache, "show", run["run_id"], "--store", store)
    assert shown["status"] == "expired" and shown["waits"] == [] and shown["pending"] == []
    assert "the sweeper of process" in shown["extra"]["expired"]["by"] and shown["extra"]["expired"]["was"] == "waiting"
    assert shown["expires_in"] > 3600  # kept for `runs show`, well past the run's own expiry
    assert f"run {run['run_id']} of tool 'cleanup_flat' expired unanswered" in log.read_text()


def test_an_abandoned_guided_run_in_a_store_is_ended_once(cache, tmp_path):
    marker, log, store = tmp_path / "marker.txt", tmp_path / "serve.log", f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(cache, log, "--store", store, "--guided", "--guided-ttl", "1") as (url, _):
        state_id = anyio.run(start_guided_and_abandon, url, marker)
        assert lines(marker) == []
        wait_for_line(marker, log)
        time.sleep(2)
    assert lines(marker) == ["client"]
    shown = ok_json(cache, "show", state_id, "--store", store)  # the state id is the run id
    assert shown["status"] == "expired" and shown["era"] == "guided"


def test_an_abandoned_guided_run_in_memory_is_ended_once(cache, tmp_path):
    marker, log = tmp_path / "marker.txt", tmp_path / "serve.log"
    with serving(cache, log, "--store", "none", "--guided", "--guided-ttl", "1") as (url, _):
        anyio.run(start_guided_and_abandon, url, marker)
        assert lines(marker) == []
        wait_for_line(marker, log)  # no call comes after it: the sweeper alone ends it
        time.sleep(2)
    assert lines(marker) == ["client"]
    assert "a guided run of tool 'cleanup_flat' expired unanswered; it was ended here" in log.read_text()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]
)
def test_replicas_sweeping_one_store_end_an_abandoned_run_once(backend, cache, tmp_path, request):
    if backend == "sqlite":
        store = f"sqlite:///{tmp_path / 'runs.db'}"
    elif backend == "redis":
        store = f"{request.getfixturevalue('redis_server').url}?prefix=abandoned{time.monotonic_ns()}:"
    else:
        store = f"{request.getfixturevalue('postgres_server').url}?schema=abandoned{time.monotonic_ns()}"
    marker = tmp_path / "marker.txt"
    logs = [tmp_path / f"replica{n}.log" for n in range(3)]
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serving(cache, log, "--store", store, "--state-ttl", "2"))[0] for log in logs]
        for url in urls:  # a run started on each replica, every one abandoned
            anyio.run(start_and_abandon, url, marker)
        deadline = time.monotonic() + 40
        while len(lines(marker)) < 3:
            assert time.monotonic() < deadline, [log.read_text() for log in logs]
            time.sleep(0.1)
        time.sleep(2)  # every replica sweeps a few times more
    assert lines(marker) == ["client"] * 3  # three runs, each ended once
    ended = [log.read_text().count("expired unanswered; it was ended here") for log in logs]
    assert sum(ended) == 3, [log.read_text() for log in logs]
    listed = ok_json(cache, "list", "--store", store)
    assert [entry["status"] for entry in listed] == ["expired"] * 3


def test_runs_gc_ends_the_run_of_a_killed_server_once_and_only_with_its_tools(cache, tmp_path):
    marker, log, store = tmp_path / "marker.txt", tmp_path / "serve.log", f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(cache, log, "--store", store, "--state-ttl", "3") as (url, process):
        anyio.run(start_and_abandon, url, marker)
        os.kill(process.pid, signal.SIGKILL)  # before its run expires: no sweeper is left to end it
        process.wait()
    run = the_run(cache, store)
    time.sleep(max(0.0, run["expires"] - time.time()) + 0.2)
    assert ok_json(cache, "list", "--store", store) == []  # expired: gone for every read
    # without --tools: nothing ended, nothing of it deleted, and the way to end it named
    plain = runs(cache, "gc", "--store", store)
    assert plain.returncode == 0, plain.stderr
    assert "left 1 expired waiting run(s)" in plain.stdout and run["run_id"] in plain.stderr
    assert "--tools PATH" in plain.stderr
    data = ok_json(cache, "gc", "--store", store)
    assert data["removed"] == 0 and data["ended"] == [] and [e["run_id"] for e in data["left"]] == [run["run_id"]]
    assert lines(marker) == []
    # with its tools: ended here, once, with what its finally blocks logged
    data = ok_json(cache, "gc", "--store", store, "--tools", str(TOOL_FILE))
    assert [(e["run_id"], e["logs"], e["cleanup_error"]) for e in data["ended"]] == [
        (run["run_id"], [["log", "info", "client cleaned up"]], None)
    ]
    assert data["left"] == [] and lines(marker) == ["client"]
    again = ok_json(cache, "gc", "--store", store, "--tools", str(TOOL_FILE))
    assert again == {"removed": 0, "ended": [], "left": [], "builds_dropped": []} and lines(marker) == ["client"]
    shown = ok_json(cache, "show", run["run_id"], "--store", store)
    assert shown["status"] == "expired" and "branchc runs gc" in shown["extra"]["expired"]["by"]


def _left_by_a_killed_server(cache: Path, tmp_path: Path) -> tuple[Path, str, dict[str, Any], Path]:
    """A run waiting in a SQLite store (3 s to live) whose server was killed: (its marker file, the store's URL, the
    run as `runs list` shows it, where the tests write the tools' next build)."""
    marker, log, store = tmp_path / "marker.txt", tmp_path / "serve.log", f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(cache, log, "--store", store, "--state-ttl", "3") as (url, process):
        anyio.run(start_and_abandon, url, marker)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    changed = tmp_path / "tools" / "cleanup_tools.py"
    changed.parent.mkdir()
    return marker, store, the_run(cache, store), changed


def test_runs_gc_leaves_a_run_other_code_cannot_take_and_ends_one_it_can(cache, tmp_path):
    """`--tools` naming another build than saved the run: a run waiting where that build carries other variables is
    left, naming the point; where the point is compatible, the run is ended on that build (its finally runs there)."""
    marker, store, run, changed = _left_by_a_killed_server(cache, tmp_path)
    changed.write_text(TOOL_FILE.read_text().replace("answers", "collected"))  # carried across every yield
    time.sleep(max(0.0, run["expires"] - time.time()) + 0.2)
    with builds_aside(cache):  # nor is the build that saved it kept here
        data = ok_json(cache, "gc", "--store", store, "--tools", str(changed))
    assert data["ended"] == [] and [e["run_id"] for e in data["left"]] == [run["run_id"]]
    reason = data["left"][0]["reason"]
    assert "waits at point 'try:body/for/if:then/sample:reply', saved by another build" in reason, reason
    assert "no longer carries answers" in reason and lines(marker) == []
    changed.write_text(
        TOOL_FILE.read_text().replace('mark(handoff["marker"], "client")', 'mark(handoff["marker"], "new")')
    )
    data = ok_json(cache, "gc", "--store", store, "--tools", str(changed))
    assert [e["run_id"] for e in data["ended"]] == [run["run_id"]] and lines(marker) == ["new"]


@contextlib.contextmanager
def builds_aside(cache: Path) -> Iterator[None]:
    """The builds kept in the cache set aside (as on a machine that never served them), and put back after."""
    kept, aside = cache / "builds", cache.parent / f"{cache.name}-builds-aside"
    kept.rename(aside)
    try:
        yield
    finally:
        for build in aside.iterdir():
            if not (kept / build.name).exists():
                kept.mkdir(exist_ok=True)
                build.rename(kept / build.name)
        shutil.rmtree(aside)


def test_runs_gc_ends_a_run_other_code_cannot_take_on_its_own_kept_build(cache, tmp_path):
    """`--tools` naming a build that cannot take the run: it is ended on the build that saved it, kept in the
    cache, whose finally runs (its mark is the old code's)."""
    marker, store, run, changed = _left_by_a_killed_server(cache, tmp_path)
    changed.write_text(
        TOOL_FILE.read_text()
        .replace("answers", "collected")
        .replace('handoff["marker"], "client")', 'handoff["marker"], "new")')
    )
    time.sleep(max(0.0, run["expires"] - time.time()) + 0.2)
    data = ok_json(cache, "gc", "--store", store, "--tools", str(changed))
    assert [e["run_id"] for e in data["ended"]] == [run["run_id"]] and data["left"] == []
    assert lines(marker) == ["client"]  # the old code's finally, once


def test_two_enders_racing_on_one_expired_run_end_it_once(cache, tmp_path, monkeypatch):
    """The other ender (a replica, `runs gc`) ends the run between this one's load and its write: this one's
    compare-and-swap loses, and it lets go of its copy without running the cleanup again."""
    from branchc.bridge.expiry import end_expired_runs
    from branchc.bridge.runs import load_tools
    from branchc.store import KeyRing, open_store

    marker, log, url = tmp_path / "marker.txt", tmp_path / "serve.log", f"sqlite:///{tmp_path / 'runs.db'}"
    # the tools under a name of their own: this process imports them, and other test modules import
    # cleanup_tools.py from caches of their own (a module name is imported once per process)
    race_tools = tmp_path / "tools" / "race_cleanup_tools.py"
    race_tools.parent.mkdir()
    race_tools.write_text(TOOL_FILE.read_text())
    with serving(cache, log, "--store", url, "--state-ttl", "4", tools=race_tools) as (server_url, process):
        anyio.run(start_and_abandon, server_url, marker)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    run = the_run(cache, url)
    time.sleep(max(0.0, run["expires"] - time.time()) + 0.2)
    monkeypatch.setenv("BRANCHC_CACHE", str(cache))
    tools = load_tools(race_tools)
    store = open_store(url, KeyRing([KEY]))
    theirs = []

    class Racing:
        """The store, with another ender ending the run just before this ender's compare-and-swap."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def end_expired(self, run_id: str, version: int, **changes: Any) -> Any:
            theirs.append(end_expired_runs(store, tools, by="the other ender"))
            return store.end_expired(run_id, version, **changes)

    mine = end_expired_runs(Racing(), tools, by="this ender")  # type: ignore[arg-type]
    assert mine.ended == [] and mine.left == []
    assert [done.record.run_id for done in theirs[0].ended] == [run["run_id"]]
    assert lines(marker) == ["client"]
    record = store.load(run["run_id"])
    assert record.status == "expired" and record.meta.extra["expired"]["by"] == "the other ender"
    store.close()
