"""Store faults under a real server: a Redis or a PostgreSQL that goes down mid-run and comes back, damaged
rows, an SQLite file deleted or made read-only while `branchc serve --http` uses it.

What the issue asks of each: a clear tool error (naming the store or the run, and what to do) or a retry that
completes; no run silently lost or run twice. Real parts throughout: `branchc serve --http` subprocesses, a
real redis-server stopped and started again on the same port and data folder, real SQLite files, the real
`mcp` client in the 2026-07-28 era; a real PostgreSQL killed (SIGKILL, server and backends) and started
again on its data folder. The tool (tests/servers/durable_tools.py) notes every step, its finally and its
after() in a log file, so each test counts what ran.

Already covered elsewhere and not repeated here: every damaged field's StoreDataError at the store's API
(test_stores.py), a Redis stopped under the bare store (test_stores.py), `branchc runs list / show / cancel`
of an SQLite row with broken meta (test_runs_cli.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, KEYS, free_port, listening, within
from _postgres_support import BIN as POSTGRES
from _postgres_support import SKIP_REASON as POSTGRES_SKIP
from _postgres_support import PostgresServer, needs_postgres, raw
from _redis_support import REDIS_SERVER, SKIP_REASON, RedisServer, needs_redis
from mcp import Client
from test_durable_rounds import MODERN, TOOL_FILE, answer_all, args, call, error_text, expected, final, lines

from branchc.store import new_run_id, open_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("faults_cache"))


def serve(cache: str, store: str) -> tuple[Any, str]:
    """`branchc serve durable_tools.py --http` on a free loopback port over `store`: (its context, its URL)."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY]
    command += ["--http", f"127.0.0.1:{port}", "--store", store]
    return listening(command, port, {"BRANCHC_CACHE": cache}), f"http://127.0.0.1:{port}/mcp"


def run_id_of(url: str) -> str:
    (record,) = open_store(url, KEYS).list()
    return record.run_id


async def finish(session: Any, arguments: dict, state: str, responses: dict) -> Any:
    """Send rounds from (state, responses) to the end; the final result."""
    while True:
        result = await call(session, arguments, state, responses)
        if not isinstance(result, types.InputRequiredResult):
            return result
        state, responses = result.request_state, await answer_all(result)


async def wait_for_line(log: Path, line: str, seconds: float = 20) -> None:
    with anyio.fail_after(seconds):
        while line not in lines(log):
            await anyio.sleep(0.01)


# -- Redis or PostgreSQL stopped mid-run and started again ------------------------------------------------------


class Down:
    """A store's server that a test takes down and starts again (keeping what it wrote), and what a call that
    cannot reach it says."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        if kind == "redis":  # append-only, fsync always: restarts keep data
            self.server: Any = RedisServer(tmp_path / "redis", durable=True).start()
            self.unreachable = f"the Redis store at 127.0.0.1:{self.server.port}/0 cannot be reached"
        else:
            self.server = PostgresServer().start()
            where = f"postgresql://branchc@127.0.0.1:{self.server.port}/branchc"
            self.unreachable = f"the PostgreSQL store at {where} cannot be reached"
        self.store = f"{self.server.url}?timeout=1"

    def stop(self) -> None:
        """Redis stopped; PostgreSQL killed (SIGKILL: it recovers from its WAL when started again)."""
        if self.kind == "redis":
            self.server.stop()
        else:
            self.server.kill()

    def start(self) -> None:
        self.server.start()

    def remove(self) -> None:
        self.server.stop() if self.kind == "redis" else self.server.remove()


SERVERS = [pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]


@pytest.mark.parametrize("kind", SERVERS)
async def test_the_store_down_between_rounds_is_a_clear_error_and_the_same_round_retried_completes(
    cache, tmp_path, kind
):
    log = tmp_path / "log.txt"
    arguments = args(4, log)
    down = Down(kind, tmp_path)
    store = down.store
    try:
        served, url = serve(cache, store)
        with served:
            async with Client(url, **MODERN) as client:
                session = client.session
                first = await call(session, arguments)
                second = await call(session, arguments, first.request_state, await answer_all(first))
                run_id = run_id_of(store)
                before = open_store(store, KEYS).load(run_id)
                responses = await answer_all(second)
                down.stop()
                lost = await within(20, call(session, arguments, second.request_state, responses))
                text = error_text(lost)
                assert f"{down.unreachable} while loading run" in text, text
                assert run_id in text and "retry" in text, text
                fresh = await within(20, call(session, args(2, tmp_path / "other.txt")))  # a new call: the same
                assert down.unreachable in error_text(fresh)
                down.start()
                assert open_store(store, KEYS).load(run_id) == before  # nothing was written meanwhile
                result = await within(30, finish(session, arguments, second.request_state, responses))
        assert final(result) == expected(4)
        assert lines(log) == ["step 0", "step 1", "step 2", "step 3", "finally", "after"]  # each step once
        # the call started during the outage was refused before anything of it ran: the store could not count
        # the runs waiting (the caps, bridge/quotas.py), so neither could it keep this one
        assert lines(tmp_path / "other.txt") == []
        assert [r.run_id for r in open_store(store, KEYS).list()] == [run_id]  # one run, not two
    finally:
        down.remove()


async def stop_mid_round(down: Down, session: Any, arguments: dict, state: str, responses: dict, step: str):
    """Send a round and take the store's server down while it runs (once its step is logged, i.e. after its
    claim was written and before its outcome is); the round's answer."""
    outcome: list[Any] = []

    async def send() -> None:
        outcome.append(await call(session, arguments, state, responses))

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        await wait_for_line(Path(arguments["log"]), step)
        down.stop()
    return outcome[0]


@pytest.mark.parametrize("kind", SERVERS)
@pytest.mark.parametrize("final_round", [False, True], ids=["mid-run round", "final round"])
async def test_the_store_down_while_a_round_runs_keeps_its_outcome_and_the_retry_gets_it(
    cache, tmp_path, final_round, kind
):
    log = tmp_path / "log.txt"
    rounds = 2 if final_round else 3
    arguments = args(rounds, log, slow=1.0)
    down = Down(kind, tmp_path)
    store = down.store
    try:
        served, url = serve(cache, store)
        with served:
            async with Client(url, **MODERN) as client:
                session = client.session
                first = await call(session, arguments)
                second = await call(session, arguments, first.request_state, await answer_all(first))
                state, responses = second.request_state, await answer_all(second)
                run_id = run_id_of(store)
                step = "step 1"  # the round caught: the last one (2 rounds) or one more follows (3 rounds)
                caught = await within(30, stop_mid_round(down, session, arguments, state, responses, step))
                if final_round:  # the result is sent at once; the record is written once the store is back
                    assert final(caught) == expected(rounds)
                else:  # more to ask: its request_state may not leave before the run is saved, so an error
                    text = error_text(caught)
                    assert f"round 2 of run {run_id!r} ran" in text, text
                    assert down.unreachable in text, text
                    assert "ran, but the store could not save its outcome" in text, text
                    assert "send the same round again" in text and "it does not run again" in text, text
                down.start()
                started = time.monotonic()
                again = await within(30, call(session, arguments, state, responses))
                assert time.monotonic() - started < 10  # not held up by the claim of the interrupted round
                if final_round:
                    assert final(again) == expected(rounds)  # the retry: the same result, from the store
                    result = again
                else:
                    assert isinstance(again, types.InputRequiredResult), again
                    result = await within(30, finish(session, arguments, again.request_state, await answer_all(again)))
                (record,) = open_store(store, KEYS).list()
                assert record.status == "done" and record.meta.extra["answered"] == rounds
        assert final(result) == expected(rounds)
        # the interrupted round's step ran once: its outcome was kept and given to the retry, not run again
        assert lines(log) == [*(f"step {n}" for n in range(rounds)), "finally", "after"], lines(log)
    finally:
        down.remove()


@needs_redis
async def test_a_run_lost_with_a_redis_restart_without_persistence_says_so(cache, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    redis = RedisServer(tmp_path / "redis", durable=False).start()
    store = f"{redis.url}?timeout=1"
    try:
        served, url = serve(cache, store)
        with served:
            async with Client(url, **MODERN) as client:
                session = client.session
                first = await call(session, arguments)
                run_id = run_id_of(store)
                redis.stop()
                redis.start()  # same port, nothing kept
                lost = await within(20, call(session, arguments, first.request_state, await answer_all(first)))
                text = error_text(lost)
                assert f"run {run_id!r} is not in the store" in text and "the store lost it" in text, text
                assert "call the tool again" in text
                redo = await within(30, finish(session, arguments, None, None))
        assert final(redo) == expected(3)
        assert lines(log) == ["step 0", "step 1", "step 2", "finally", "after"]  # the lost run never half-resumed
    finally:
        redis.stop()


# -- a damaged row, loaded by a server's round and by `branchc runs` ----------------------------------------------


def runs_cli(*argv: str, cache: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchc", "runs", *argv],
        env={**os.environ, "BRANCHC_CACHE": cache},
        capture_output=True,
        text=True,
        timeout=60,
    )


def damage(store_url: str, run_id: str, field: str) -> None:
    """Garbage in one stored field, written below the store's API (as a disk error or a hand edit would)."""
    store = open_store(store_url, KEYS)
    if store.url.startswith("sqlite"):
        with sqlite3.connect(store.path) as conn:
            conn.execute(f"UPDATE runs SET {field} = ? WHERE run_id = ?", ("\x00garbage{", run_id))
    elif store.url.startswith("postgresql"):
        with raw(store) as conn:
            conn.execute(f"UPDATE runs SET {field} = %s WHERE run_id = %s", (b"\xff\xfegarbage", run_id))
    else:
        store.client.hset(f"{store.prefix}run:{run_id}", field, b"\xff\xfegarbage")
    store.close()


DAMAGED = [
    ("sqlite", "body", "is damaged: its saved run does not match its seal"),
    ("sqlite", "version", "is damaged: its field 'version' is "),
    ("redis", "body", "is damaged: its saved run does not match its seal"),
    ("redis", "head", "is damaged: its head does not match its seal"),
    ("postgres", "body", "is damaged: its saved run does not match its seal"),
    ("postgres", "head", "is damaged: its head does not match its seal"),
]


@pytest.mark.parametrize(("kind", "field", "problem"), DAMAGED, ids=[f"{k}-{f}" for k, f, _ in DAMAGED])
async def test_a_damaged_row_is_a_clear_error_naming_the_run_for_a_round_and_for_runs_show_and_cancel(
    cache, tmp_path, kind, field, problem, request
):
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    redis = None
    if kind == "redis":
        if REDIS_SERVER is None:
            pytest.skip(SKIP_REASON)
        redis = RedisServer(tmp_path / "redis").start()
        store = f"{redis.url}?prefix=faults:"
    elif kind == "postgres":
        if POSTGRES is None:
            pytest.skip(POSTGRES_SKIP)
        store = f"{request.getfixturevalue('postgres_server').url}?schema=faults{time.monotonic_ns()}"
    else:
        store = f"sqlite:///{tmp_path / 'runs.db'}"
    try:
        served, url = serve(cache, store)
        with served:
            async with Client(url, **MODERN) as client:
                session = client.session
                first = await call(session, arguments)
                run_id = run_id_of(store)
                responses = await answer_all(first)
                damage(store, run_id, field)
                refused = await within(20, call(session, arguments, first.request_state, responses))
                text = error_text(refused)
                assert f"stored run {run_id!r} {problem}" in text, text
                assert f"branchc runs cancel {run_id}" in text, text
                # the server goes on serving: another call runs to its end
                other = await within(30, finish(session, args(2, tmp_path / "other.txt"), None, None))
                assert final(other) == expected(2)
                shown = runs_cli("show", run_id, "--store", store, cache=cache)
                assert shown.returncode == 1 and f"stored run {run_id!r} is damaged" in shown.stderr, shown.stderr
                assert "Traceback" not in shown.stderr
                cancelled = runs_cli("cancel", run_id, "--tools", str(TOOL_FILE), "--store", store, cache=cache)
                assert cancelled.returncode == 0 and f"deleted the damaged run {run_id}" in cancelled.stderr
                gone = await within(20, call(session, arguments, first.request_state, responses))
                assert f"run {run_id!r} is not in the store" in error_text(gone)
        assert lines(log) == []  # the damaged run never ran a step, nor half-resumed
    finally:
        if redis is not None:
            redis.stop()


async def test_a_row_whose_saved_run_is_not_a_run_is_refused_naming_the_run(cache, tmp_path):
    """Damage the digest cannot see (the saved text rewritten through the store, digest and all): the round
    still refuses it, naming the run, and the record stays for `branchc runs` to deal with."""
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    served, url = serve(cache, store)
    with served:
        async with Client(url, **MODERN) as client:
            first = await call(client.session, arguments)
            run_id = run_id_of(store)
            opened = open_store(store, KEYS)
            record = opened.load(run_id)
            opened.checkpoint(run_id, record.version, saved=json.dumps({"branchc_run": 2, "not": "a run"}))
            refused = await within(20, call(client.session, arguments, first.request_state, await answer_all(first)))
    text = error_text(refused)
    assert f"stored run {run_id!r} cannot be continued" in text, text
    assert opened.load(run_id).status == "waiting"  # refused before the claim: nothing written
    assert lines(log) == []
    opened.close()


def test_run_ids_never_start_with_a_dash_so_the_cli_takes_them_as_ids():
    """`branchc runs show -Xy...` parsed the id as an option (found by the damaged-row test above, 1 run in 64)."""
    assert not any(new_run_id().startswith("-") for _ in range(5000))


# -- the SQLite file deleted or made read-only while a server uses it ---------------------------------------------


def immutable(paths: list[Path], on: bool) -> bool:
    """`chattr +i` / `-i` (root ignores file modes, so read-only is made this way); False when it cannot."""
    done = subprocess.run(["chattr", "+i" if on else "-i", *map(str, paths)], capture_output=True)
    return done.returncode == 0


async def test_the_sqlite_file_deleted_mid_serve_is_a_clear_error_and_the_server_goes_on(cache, tmp_path):
    """Before: each server thread's connection went on in the deleted file, unseen by any other process (a
    replica, `branchc runs`), while threads opening anew made an empty file without tables: rounds went on in
    a ghost store, or failed with "no such table". Now the store goes on in the file at the path, made anew."""
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    path = tmp_path / "runs.db"
    store = f"sqlite:///{path}"
    served, url = serve(cache, store)
    with served as process:
        async with Client(url, **MODERN) as client:
            session = client.session
            first = await call(session, arguments)
            run_id = run_id_of(store)
            for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
                (tmp_path / name).unlink()
            lost = await within(20, call(session, arguments, first.request_state, await answer_all(first)))
            text = error_text(lost)
            assert f"run {run_id!r} is not in the store" in text and "a store file replaced" in text, text
            other = tmp_path / "other.txt"
            fresh = await within(30, finish(session, args(2, other), None, None))
            assert final(fresh) == expected(2) and process.poll() is None
    assert lines(log) == [] and lines(other)[-1] == "after"
    (record,) = open_store(store, KEYS).list()  # the new run is in the file at the path, for everyone to see
    assert record.status == "done" and record.run_id != run_id


async def test_the_sqlite_file_made_read_only_mid_serve_is_a_clear_error_and_the_server_goes_on(cache, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    served, url = serve(cache, store)
    # the database and its log immutable (root ignores file modes); not -shm, which SQLite maps into memory and
    # grows: a file it cannot grow is a SIGBUS in SQLite itself, as a full disk would be
    files = [tmp_path / "runs.db", tmp_path / "runs.db-wal"]
    with served as process:
        async with Client(url, **MODERN) as client:
            session = client.session
            first = await call(session, arguments)
            responses = await answer_all(first)
            if not immutable(files, True):
                pytest.skip("chattr +i is not available here")
            try:
                stuck = await within(20, call(session, arguments, first.request_state, responses))
                text = error_text(stuck)
                assert f"the SQLite store {tmp_path / 'runs.db'} cannot be written" in text, text
                assert "read-only" in text and "retry" in text, text
                fresh = await within(20, call(session, args(2, tmp_path / "other.txt")))
                assert "cannot be written while creating run" in error_text(fresh)
                assert process.poll() is None
            finally:
                immutable(files, False)
            result = await within(30, finish(session, arguments, first.request_state, responses))
    assert final(result) == expected(3)
    assert lines(log) == ["step 0", "step 1", "step 2", "finally", "after"]  # the refused round never ran twice
