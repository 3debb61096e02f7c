"""The continuation store (branchc.store): one contract over a real SQLite file, a real redis-server and a
real PostgreSQL, then what each backend adds (WAL and locks; TTLs, prefixes, a server stopped and started
again; schemas, a server killed and started again, row locks)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _bridge_support import KEY, free_port
from _postgres_support import PASSWORD, PostgresServer, needs_postgres, raw
from _postgres_support import url_of as postgres_url
from _redis_support import RedisServer, needs_redis

from branchc.bridge.guided import GuidedFullError, GuidedRunTooLargeError, WaitingRun
from branchc.bridge.waiting import StoreWaitingRuns
from branchc.store import (
    KeyRing,
    RunExistsError,
    RunMeta,
    RunNotFoundError,
    RunRecord,
    StaleRunError,
    StoreDataError,
    StoreUnavailableError,
    StoreURLError,
    Usage,
    WaitPoint,
    open_store,
)
from branchc.store.base import ENDING_GRACE
from branchc.store.postgres import CHECK_IDLE, PostgresStore, public_url
from branchc.store.redis import RedisStore
from branchc.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent
KEYS = KeyRing([KEY])  # what every store here seals its records with


BACKENDS = ["sqlite", pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    elif request.param == "redis":
        server = request.getfixturevalue("redis_server")
        made = RedisStore(server.url, keys=KEYS, prefix=f"t{time.monotonic_ns()}:")
    else:
        server = request.getfixturevalue("postgres_server")
        made = PostgresStore(server.url, keys=KEYS, schema=f"t{time.monotonic_ns()}")
    yield made
    made.close()


def url_of(store) -> str:
    if isinstance(store, PostgresStore):
        return postgres_url(store)
    return store.url if isinstance(store, SQLiteStore) else f"{store.url}?prefix={store.prefix}"


def corrupt(store, run_id: str, name: str, value) -> None:
    """Edit a stored field by hand, below the store's API."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(f"UPDATE runs SET {name} = ? WHERE run_id = ?", (value, run_id))
    elif isinstance(store, PostgresStore):
        with raw(store) as conn:
            conn.execute(f"UPDATE runs SET {name} = %s WHERE run_id = %s", (value, run_id))
    else:
        store.client.hset(f"{store.prefix}run:{run_id}", name, value)


META = RunMeta(
    era="2026-07-28",
    run_format=1,
    code_hash="c0ffee",
    waits=(WaitPoint("0", "pick_card.client", 14, "tools/pick_card.py"), WaitPoint("0.1", "analyze", 31)),
    pending=({"key": "sample-1", "kind": "sample", "summary": "Analyze these cards"},),
    answers_digest="ab12",
    response={"content": [{"type": "text", "text": "ok"}], "isError": False},
    extra={"tries": 1},
)


def saved_text(size: int, tag: str = "x") -> str:
    """A run text of about `size` bytes, non-ASCII included."""
    body = ("é" + tag * 9) * (size // 11)
    return json.dumps({"branchc_run": 1, "graph": {"history": body}}, ensure_ascii=False)


# the shared contract


def test_a_record_round_trips_with_every_field(store):
    record = RunRecord.new("pick_card", saved_text(5000), ttl=60, meta=META)
    assert record.version == 1 and record.created == record.updated and len(record.run_id) >= 24
    assert store.create(record) == record
    assert store.load(record.run_id) == record
    assert store.load("no-such-run") is None
    with pytest.raises(RunExistsError, match=record.run_id):
        store.create(record)


def test_a_checkpoint_is_a_compare_and_swap_on_the_version(store):
    record = store.create(RunRecord.new("t", "one", ttl=60))
    moved = store.checkpoint(record.run_id, 1, status="running", saved="two", meta=META)
    assert (moved.version, moved.status, moved.saved, moved.meta) == (2, "running", "two", META)
    assert moved.created == record.created and moved.updated >= record.updated and moved.tool == "t"
    assert store.load(record.run_id) == moved
    with pytest.raises(StaleRunError, match="expected version 1, the store has 2") as caught:
        store.checkpoint(record.run_id, 1, saved="lost update")
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert store.load(record.run_id) == moved  # the stale write changed nothing
    later = store.checkpoint(record.run_id, 2, expires=record.expires + 100)
    assert later.saved == "two" and later.meta == META and later.expires == record.expires + 100
    with pytest.raises(RunNotFoundError, match="no run 'gone'"):
        store.checkpoint("gone", 1, status="done")
    with pytest.raises(TypeError, match=r"not \['tool'\]"):
        store.checkpoint(record.run_id, 3, tool="other")
    with pytest.raises(ValueError, match="not 'paused'"):
        store.checkpoint(record.run_id, 3, status="paused")
    with pytest.raises(TypeError, match="must be JSON data"):
        store.checkpoint(record.run_id, 3, meta=RunMeta(response={1, 2}))
    assert store.load(record.run_id).version == 3


def test_delete_and_a_delete_at_a_version(store):
    record = store.create(RunRecord.new("t", "x", ttl=60))
    store.checkpoint(record.run_id, 1, status="running")
    with pytest.raises(StaleRunError):
        store.delete(record.run_id, expected_version=1)
    # a version no writer ever made it to: what a writer sees when an older copy was put back
    with pytest.raises(StoreDataError, match="older copy of the record was put back"):
        store.delete(record.run_id, expected_version=5)
    assert store.delete(record.run_id, expected_version=2) is True
    assert store.delete(record.run_id) is False and store.load(record.run_id) is None


def test_list_newest_first_by_status_and_tool(store):
    made = []
    for index in range(5):
        made.append(store.create(RunRecord.new("a" if index % 2 else "b", f"s{index}", ttl=60)))
        time.sleep(0.002)
    store.checkpoint(made[0].run_id, 1, status="done")  # now the newest
    assert [r.run_id for r in store.list()] == [made[i].run_id for i in (0, 4, 3, 2, 1)]
    assert [r.run_id for r in store.list(limit=2)] == [made[0].run_id, made[4].run_id]
    assert [r.run_id for r in store.list(tool="a")] == [made[3].run_id, made[1].run_id]
    assert [r.run_id for r in store.list(status="done")] == [made[0].run_id]
    assert [r.run_id for r in store.list(status="waiting", tool="b", limit=1)] == [made[4].run_id]


def test_runs_expire_for_every_reader_and_gc_removes_the_ended_ones(store):
    short = store.create(RunRecord.new("t", "short", ttl=0.3, status="done"))
    long = store.create(RunRecord.new("t", "long-lived", ttl=60, status="done"))
    assert store.usage() == Usage(2, 15)
    time.sleep(0.4)
    assert store.load(short.run_id) is None
    assert [r.run_id for r in store.list()] == [long.run_id]
    with pytest.raises(RunNotFoundError):
        store.checkpoint(short.run_id, 1, status="done")
    assert store.gc() == 1 and store.gc() == 0
    assert store.usage() == Usage(1, 10)
    expired = store.create(RunRecord.new("t", "x" * 7, ttl=0.1, status="failed"))
    time.sleep(0.2)
    assert store.usage() == Usage(1, 10)  # gone for usage before any gc
    store.gc()
    assert store.load(expired.run_id) is None
    assert store.gc(now=time.time() + 120) == 1 and store.usage() == Usage(0, 0)
    again = store.create(RunRecord.new("t", "same id again", ttl=60, run_id=short.run_id))
    assert store.load(short.run_id) == again


def test_an_expired_waiting_run_is_kept_to_be_ended_and_gc_removes_it_only_after_the_grace(store):
    """Its finally blocks have not run: a sweeper or `runs gc --tools` ends it (bridge/expiry.py) first."""
    waiting = store.create(RunRecord.new("t", "abandoned", ttl=0.1))
    time.sleep(0.2)
    assert store.load(waiting.run_id) is None and store.list() == [] and store.usage() == Usage(0, 0)
    assert store.expired() == [waiting.run_id] and store.gc() == 0
    assert store.load(waiting.run_id, expired=True).saved == "abandoned"
    assert store.gc(now=time.time() + ENDING_GRACE + 1) == 1 and store.expired() == []


def test_usage_counts_runs_and_saved_bytes_by_status(store):
    store.history_kept = 0  # the saved runs alone (what a history adds: tests/test_history.py)
    a = store.create(RunRecord.new("t", "ééé", ttl=60))  # 6 bytes
    b = store.create(RunRecord.new("t", "1234", ttl=60))
    assert store.usage("waiting") == Usage(2, 10) and store.usage("running") == Usage(0, 0)
    store.checkpoint(a.run_id, 1, status="running", saved="12345678")
    assert store.usage("waiting") == Usage(1, 4) and store.usage("running") == Usage(1, 8)
    assert store.usage("waiting", "running") == store.usage() == Usage(2, 12)
    store.delete(b.run_id)
    assert store.usage() == Usage(1, 8)


def flipped(value: bytes, at: int) -> bytes:
    return value[:at] + bytes([value[at] ^ 0x01]) + value[at + 1 :]


DAMAGE = [
    ("status", lambda raw: "done", "seal", "its head does not match its seal"),
    ("tool", lambda raw: "other_tool", "seal", "its head does not match its seal"),
    ("version", lambda raw: 7, "seal", "its head does not match its seal"),
    ("expires", lambda raw: float(raw["expires"]) + 3600, "seal", "its head does not match its seal"),
    ("owner", lambda raw: "mallory", "seal", "its head does not match its seal"),
    ("head", lambda raw: flipped(raw["head"], 40), "seal", "its head does not match its seal"),
    ("head", lambda raw: raw["head"][:-3], "seal", "its head does not match its seal"),
    ("body", lambda raw: flipped(raw["body"], 20), "seal", "its saved run does not match its seal"),
    ("body", lambda raw: raw["body"][:-1], "seal", "its saved run does not match its seal"),
    ("key", lambda raw: "0" * 16, "key", "is sealed with a key this server does not hold (key id 0000000000000000"),
    ("fmt", lambda raw: 1, "fmt", "says record format 1, and this branchc reads format 2 (format 1 records were not"),
]


def raw_fields(store, run_id: str) -> dict:
    """A record's stored fields, below the store's API (text and blobs as bytes)."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.text_factory = bytes
            cursor = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,))
            return dict(zip([c[0] for c in cursor.description], cursor.fetchone(), strict=True))
    if isinstance(store, PostgresStore):
        with raw(store) as conn:
            cursor = conn.execute("SELECT * FROM runs WHERE run_id = %s", (run_id,))
            return dict(zip([c.name for c in cursor.description], cursor.fetchone(), strict=True))
    return {k.decode(): v for k, v in store.client.hgetall(f"{store.prefix}run:{run_id}").items()}


@pytest.mark.parametrize(
    ("name", "change", "field", "problem"), DAMAGE, ids=[f"{d[0]}:{d[2]}:{i}" for i, d in enumerate(DAMAGE)]
)
def test_a_damaged_record_is_a_clear_error_naming_the_run(store, name, change, field, problem):
    record = store.create(RunRecord.new("t", saved_text(2000), ttl=60, meta=META, owner="alice"))
    corrupt(store, record.run_id, name, change(raw_fields(store, record.run_id)))
    for read in (lambda: store.load(record.run_id), store.list, lambda: store.checkpoint(record.run_id, 1)):
        with pytest.raises(StoreDataError, match=re.escape(problem)) as caught:
            read()
        assert caught.value.run_id == record.run_id and caught.value.field == field
        assert f"stored run {record.run_id!r}" in str(caught.value)


def test_threads_sharing_a_store_never_lose_an_update(store):
    record = store.create(RunRecord.new("t", "[]", ttl=60))
    wins: list[int] = []
    errors: list[BaseException] = []

    def work(tag: int) -> None:
        try:
            done = 0
            while done < 30:
                current = store.load(record.run_id)
                try:
                    moved = store.checkpoint(
                        record.run_id, current.version, saved=json.dumps([*json.loads(current.saved), [tag, done]])
                    )
                except StaleRunError:
                    continue
                wins.append(moved.version)
                done += 1
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(tag,)) for tag in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    final = store.load(record.run_id)
    assert sorted(wins) == list(range(2, 122)) and final.version == 121
    entries = json.loads(final.saved)
    assert all([e[1] for e in entries if e[0] == tag] == list(range(30)) for tag in range(4))


WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    from branchc.store import KeyRing, StaleRunError, open_store
    url, run_id, tag, rounds, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    store = open_store(url, KeyRing([os.environ["TEST_STATE_KEY"]]))
    store.load(run_id)
    open(go + "." + tag, "w").close()  # ready: the store is open
    while not os.path.exists(go):
        pass
    wins, conflicts, done = [], 0, 0
    while done < rounds:
        current = store.load(run_id)
        entries = json.loads(current.saved)
        entries.append([tag, done])
        try:
            moved = store.checkpoint(run_id, current.version, saved=json.dumps(entries))
        except StaleRunError:
            conflicts += 1
            continue
        wins.append(moved.version)
        done += 1
    print(json.dumps({"wins": wins, "conflicts": conflicts}))
    """
)


def test_two_processes_doing_cas_on_one_run_exactly_one_wins_each_version(store, tmp_path):
    rounds = 400
    record = store.create(RunRecord.new("t", "[]", ttl=120))
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url_of(store), record.run_id, tag, str(rounds), str(go)],
            env={**os.environ, "TEST_STATE_KEY": KEY},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for tag in ("a", "b")
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.{tag}").exists() for tag in "ab") and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both start at once
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    wins = results[0]["wins"] + results[1]["wins"]
    assert sorted(wins) == list(range(2, 2 * rounds + 2))  # each version was won by exactly one process
    final = store.load(record.run_id)
    assert final.version == 2 * rounds + 1
    entries = json.loads(final.saved)
    for tag in ("a", "b"):
        assert [e[1] for e in entries if e[0] == tag] == list(range(rounds))  # no lost update
    assert results[0]["conflicts"] + results[1]["conflicts"] > 0  # they really raced


# guided mode's waiting runs in a store


def waiting(size: int, expires: float | None = None) -> WaitingRun:
    return WaitingRun("t", json.dumps("x" * (size - 2)), time.time() + 60 if expires is None else expires)


def test_waiting_runs_in_a_store_cap_count_and_bytes_like_memory(store):
    runs = StoreWaitingRuns(store, max_runs=3, max_bytes=1000)
    a = runs.keep(waiting(400), new=True)
    runs.keep(waiting(400), new=True)
    with pytest.raises(GuidedFullError, match="hold 800 bytes and this one needs 400 more"):
        runs.keep(waiting(400), new=True)
    assert len(runs) == 2 and runs.bytes == 800
    taken = runs.take(a)
    assert taken is not None and taken.size == 400 and runs.take(a) is None
    assert len(runs) == 1 and runs.reserved == 1 and runs.bytes == 800  # taken, it keeps its place
    runs.put_back(a, taken)
    assert len(runs) == 2 and runs.reserved == 0 and runs.bytes == 800
    assert runs.take(a) == taken
    c = runs.keep(waiting(500), new=False, taken=a)  # a continuing run takes its own place over, under a new id
    assert c != a and runs.take(a) is None
    assert len(runs) == 2 and runs.reserved == 0 and runs.bytes == 900
    with pytest.raises(GuidedFullError):
        runs.admit(200)
    assert runs.take(c) is not None
    with pytest.raises(GuidedFullError, match="grew to 700 bytes and the other waiting runs hold 400"):
        runs.keep(waiting(700), new=False, taken=c)
    assert len(runs) == 1 and runs.reserved == 0 and runs.bytes == 400
    with pytest.raises(GuidedRunTooLargeError, match="past the most one waiting guided run may hold"):
        StoreWaitingRuns(store, max_bytes=1000, max_run_bytes=300).keep(waiting(301), new=True)
    small = StoreWaitingRuns(store, max_runs=2)
    small.keep(waiting(10, expires=time.time() + 0.2), new=True)
    with pytest.raises(GuidedFullError, match="2 runs wait for answers"):  # the 400-byte one and this one
        small.admit()
    time.sleep(0.3)
    small.admit()  # the expired run was swept to make room
    assert len(small) == 1


def test_a_waiting_run_is_taken_by_exactly_one_of_two_stores_on_the_same_data(store):
    other = open_store(url_of(store), KEYS)
    try:
        mine, theirs = StoreWaitingRuns(store), StoreWaitingRuns(other)
        idents = [mine.keep(waiting(50), new=True) for _ in range(20)]
        got: list[tuple[str, str]] = []
        barrier = threading.Barrier(2)

        def race(name: str, runs: StoreWaitingRuns) -> None:
            barrier.wait()
            for ident in idents:
                if runs.take(ident) is not None:
                    got.append((name, ident))

        threads = [threading.Thread(target=race, args=pair) for pair in (("a", mine), ("b", theirs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(ident for _, ident in got) == sorted(idents)  # every run taken once, none twice
    finally:
        other.close()


# SQLite


def test_sqlite_is_one_wal_file_with_a_schema_version(tmp_path):
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    store.create(RunRecord.new("t", "x", ttl=60))
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT name, version FROM branchc_schema").fetchall() == [("runs", 2)]
        conn.execute("UPDATE branchc_schema SET version = 3")
    store.close()
    with pytest.raises(StoreDataError, match="has schema version 3, and this branchc knows version 2"):
        SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        conn.execute("UPDATE branchc_schema SET version = 1")  # an older branchc's: records not sealed
    with pytest.raises(StoreDataError, match=r"written by an older branchc .* not sealed: its runs cannot be trusted"):
        SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    (tmp_path / "junk.db").write_bytes(b"not a database at all, " * 100)
    with pytest.raises(StoreDataError, match="is not a branchc SQLite store"):
        SQLiteStore(tmp_path / "junk.db", keys=KEYS)
    with pytest.raises(StoreUnavailableError, match=r"its folder .* does not exist"):
        SQLiteStore(tmp_path / "missing" / "runs.db", keys=KEYS)


def test_sqlite_locked_past_its_busy_timeout_is_a_clear_error(tmp_path):
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS, timeout=0.2)
    record = store.create(RunRecord.new("t", "x", ttl=60))
    holder = sqlite3.connect(tmp_path / "runs.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match=r"locked .* busy timeout \(0.2 s\) while checkpointing"):
            store.checkpoint(record.run_id, 1, status="done")
        assert time.monotonic() - started >= 0.2
        assert store.load(record.run_id) == record  # WAL: readers go on
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.checkpoint(record.run_id, 1, status="done").version == 2
    store.close()


def test_sqlite_keeps_a_checkpoint_of_a_process_killed_right_after(tmp_path):
    path = tmp_path / "runs.db"
    code = textwrap.dedent(
        f"""
        import os, signal
        from branchc.store import KeyRing, RunRecord, open_store
        store = open_store("sqlite:///{path}", KeyRing([{KEY!r}]))
        record = store.create(RunRecord.new("t", "first", ttl=60, run_id="r1"))
        store.checkpoint("r1", 1, saved="second", status="running")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    record = SQLiteStore(path, keys=KEYS).load("r1")
    assert (record.version, record.saved, record.status) == (2, "second", "running")


# Redis


@needs_redis
def test_redis_expires_keys_itself_and_prefixes_keep_stores_apart(redis_server):
    one = RedisStore(redis_server.url, keys=KEYS, prefix="one:")
    two = RedisStore(redis_server.url, keys=KEYS, prefix="two:")
    record = one.create(RunRecord.new("t", "x", ttl=30, status="done"))
    ttl_ms = one.client.pttl(f"one:run:{record.run_id}")
    assert 29_000 < ttl_ms <= 30_000
    waiting = one.create(RunRecord.new("t", "x", ttl=30))  # kept past its expiry, to be ended (ENDING_GRACE)
    assert (ENDING_GRACE + 29) * 1000 < one.client.pttl(f"one:run:{waiting.run_id}") <= (ENDING_GRACE + 31) * 1000
    assert two.load(record.run_id) is None and two.list() == [] and two.usage() == Usage(0, 0)
    one.checkpoint(record.run_id, 1, expires=record.expires + 60)
    assert 89_000 < one.client.pttl(f"one:run:{record.run_id}") <= 90_000
    one.client.hset(f"one:run:{record.run_id}", "tool", b"\xff\xfe")
    with pytest.raises(StoreDataError, match="its head does not match its seal"):
        one.load(record.run_id)
    one.close()
    two.close()


def each_kind_of_call(store, record: RunRecord) -> list:
    """A load, a checkpoint (of `record` at version 2), a create and a count (the caps): what a server asks."""
    return [
        lambda: store.load(record.run_id),
        lambda: store.checkpoint(record.run_id, 2, status="waiting"),
        lambda: store.create(RunRecord.new("t", "x", ttl=60)),
        store.usage,
    ]


@needs_redis
def test_redis_stopped_mid_use_is_a_clear_error_and_works_again_after_a_restart(tmp_path):
    server = RedisServer(tmp_path / "redis", durable=True).start()
    try:
        store = open_store(f"{server.url}?prefix=r:&timeout=2&history=0", KEYS)  # the saved run alone in usage
        record = store.create(RunRecord.new("t", saved_text(5000), ttl=60, meta=META))
        moved = store.checkpoint(record.run_id, 1, status="running")
        server.stop()
        started = time.monotonic()
        for call in each_kind_of_call(store, record):
            with pytest.raises(StoreUnavailableError, match=r"Redis store at 127.0.0.1:\d+/0 cannot be reached"):
                call()
        assert time.monotonic() - started < 10  # fails fast, not after long retries
        server.start()
        assert store.load(record.run_id) == moved  # same client: it reconnects by itself
        assert store.checkpoint(record.run_id, 2, status="waiting").version == 3
        assert store.usage("waiting") == Usage(1, record.size)
        store.close()
    finally:
        server.stop()


# PostgreSQL


@needs_postgres
def test_postgres_makes_its_schema_once_checks_its_version_and_keeps_schemas_apart(postgres_server):
    schema = f"fresh{time.monotonic_ns()}"
    opened: list[PostgresStore] = []
    failed: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_it() -> None:  # replicas starting at once on an empty schema: made once, by one of them
        barrier.wait()
        try:
            opened.append(PostgresStore(postgres_server.url, keys=KEYS, schema=schema))
        except BaseException as error:  # pragma: no cover - reported below
            failed.append(error)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed, failed
    one, other = opened[0], PostgresStore(postgres_server.url, keys=KEYS, schema=f"other{time.monotonic_ns()}")
    record = one.create(RunRecord.new("t", "x", ttl=60))
    assert all(store.load(record.run_id) == record for store in opened)
    assert other.load(record.run_id) is None and other.list() == [] and other.usage() == Usage(0, 0)
    with raw(one) as conn:
        assert conn.execute("SELECT name, version FROM branchc_schema").fetchall() == [("runs", 1)]
        conn.execute("UPDATE branchc_schema SET version = 2")
    with pytest.raises(StoreDataError, match=f"schema {schema!r}.* has schema version 2, and this branchc knows ver"):
        PostgresStore(postgres_server.url, keys=KEYS, schema=schema)
    with raw(other) as conn:  # a schema holding another application's table of the same name
        conn.execute("CREATE SCHEMA theirs")
        conn.execute("CREATE TABLE theirs.runs (id INTEGER)")
    with pytest.raises(StoreDataError, match=r"holds tables branchc did not make \(runs, but no branchc_schema\)"):
        PostgresStore(postgres_server.url, keys=KEYS, schema="theirs")
    for store in (*opened, other):
        store.close()


@needs_postgres
def test_postgres_killed_mid_use_is_a_clear_error_without_its_password_and_works_again_after_a_restart():
    server = PostgresServer().start()
    try:
        store = open_store(f"{server.url}?schema=r&timeout=2&history=0", KEYS)  # the saved run alone in usage
        record = store.create(RunRecord.new("t", saved_text(5000), ttl=60, meta=META))
        moved = store.checkpoint(record.run_id, 1, status="running")
        assert store.url == f"postgresql://branchc@127.0.0.1:{server.port}/branchc"  # no password
        server.stop()  # restarted while the store is idle: the connections it closed are let go unseen
        server.start()
        time.sleep(CHECK_IDLE + 0.1)
        assert store.load(record.run_id) == moved
        server.kill()  # SIGKILL: the server and its backends
        started = time.monotonic()
        for call in each_kind_of_call(store, record):
            with pytest.raises(StoreUnavailableError, match=re.escape(f"PostgreSQL store at {store.url} cannot be")):
                call()
        assert time.monotonic() - started < 1.5  # at once: a lost connection makes the next call connect itself
        server.start()  # crash recovery from its WAL: what was committed is there
        assert store.load(record.run_id) == moved  # the same store: its pool reconnects by itself
        assert store.checkpoint(record.run_id, 2, status="waiting").version == 3
        assert store.usage("waiting") == Usage(1, record.size)
        server.stop()  # a fast shutdown ends every session
        with pytest.raises(StoreUnavailableError, match="cannot be reached while loading run") as caught:
            store.load(record.run_id)
        assert PASSWORD not in str(caught.value)
        server.start()
        assert store.load(record.run_id).version == 3
        store.close()
        with pytest.raises(StoreUnavailableError, match="was closed"):
            store.load(record.run_id)
    finally:
        server.remove()


@needs_postgres
def test_postgres_stopped_while_the_store_is_idle_is_a_clear_error_at_once():
    """Its pooled connections, checked before use, are found closed: the call does not wait the timeout out
    for the pool to make new ones."""
    server = PostgresServer().start()
    try:
        store = open_store(f"{server.url}?schema=idle&timeout=5", KEYS)
        record = store.create(RunRecord.new("t", "x", ttl=60))
        server.stop()
        time.sleep(CHECK_IDLE + 0.1)
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="Connection refused"):
            store.load(record.run_id)
        assert time.monotonic() - started < 2
        server.start()
        assert store.load(record.run_id) == record
        store.close()
    finally:
        server.remove()


@needs_postgres
def test_postgres_that_cannot_be_reached_or_refuses_the_role_is_a_clear_error_at_open(postgres_server):
    nobody = postgres_server.url.replace(f":{postgres_server.port}/", f":{free_port()}/")
    with pytest.raises(
        StoreUnavailableError, match=r"at postgresql://branchc@127\.0\.0\.1:\d+/branchc cannot be"
    ) as one:
        open_store(nobody, KEYS)
    assert "Connection refused" in str(one.value) and PASSWORD not in str(one.value)
    wrong = postgres_server.url.replace(PASSWORD, "not-the-password")
    with pytest.raises(StoreUnavailableError, match='password authentication failed for user "branchc"') as two:
        open_store(wrong, KEYS)
    assert "not-the-password" not in str(two.value)


@needs_postgres
def test_postgres_holds_at_most_its_pool_of_connections_and_says_so_when_all_stay_busy(postgres_server):
    name = f"pool{time.monotonic_ns()}"
    store = open_store(f"{postgres_server.url}?schema={name}&pool=2&timeout=5&application_name={name}", KEYS)
    record = store.create(RunRecord.new("t", "[]", ttl=60))
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def count() -> None:
        with raw(store) as conn:
            while not done.is_set():
                (found,) = conn.execute("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = %s", (name,))
                seen.append(found[0])

    def work(tag: int) -> None:
        try:
            for n in range(15):
                while True:
                    current = store.load(record.run_id)
                    try:
                        store.checkpoint(
                            record.run_id, current.version, saved=json.dumps([*json.loads(current.saved), n])
                        )
                        break
                    except StaleRunError:
                        continue
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    counter = threading.Thread(target=count)
    counter.start()
    threads = [threading.Thread(target=work, args=(tag,)) for tag in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    counter.join()
    assert not errors and store.load(record.run_id).version == 91
    assert seen and max(seen) <= 2, max(seen)  # six threads, two connections
    store.close()
    store = open_store(f"{postgres_server.url}?schema={name}&pool=2&timeout=0.5", KEYS)
    with store._use("holding one"), store._use("holding the other"):
        started = time.monotonic()
        with pytest.raises(
            StoreUnavailableError,
            match=r"no free connection for 0\.5 s while loading run .*: all 2 of this process's connections stayed",
        ):
            store.load(record.run_id)
        assert time.monotonic() - started >= 0.5
    assert store.load(record.run_id).version == 91
    store.close()


@needs_postgres
def test_postgres_row_locked_past_its_timeout_is_a_clear_error(postgres_server):
    store = open_store(f"{postgres_server.url}?schema=locked{time.monotonic_ns()}&timeout=0.3", KEYS)
    record = store.create(RunRecord.new("t", "x", ttl=60))
    with raw(store) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (record.run_id,))  # a long transaction
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match=r"row locked .* lock timeout \(0.3 s\) while checkpointing"):
            store.checkpoint(record.run_id, 1, status="done")
        assert time.monotonic() - started >= 0.3
        assert store.load(record.run_id) == record  # readers go on
        holder.execute("ROLLBACK")
    assert store.checkpoint(record.run_id, 1, status="done").version == 2
    store.close()


@needs_postgres
def test_postgres_takes_ids_its_text_cannot_hold_for_no_run(postgres_server):
    """A guided state_id is a client's text: one with a NUL is no run's, as in the other stores."""
    store = PostgresStore(postgres_server.url, keys=KEYS, schema=f"ids{time.monotonic_ns()}")
    for ident in ("a\x00b", "\udc80"):
        assert store.load(ident) is None and store.history(ident) == [] and store.delete(ident) is False
        with pytest.raises(RunNotFoundError):
            store.checkpoint(ident, 1, status="done")
        with pytest.raises(RunNotFoundError):
            store.end_expired(ident, 1, status="expired")
        with pytest.raises(KeyError):
            store.saved_at(ident, 0)
        with pytest.raises(ValueError, match="without NUL characters"):
            store.create(RunRecord.new("t", "x", ttl=60, run_id=ident))
    store.close()


# URLs


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s%40cret@db:5432/runs", "postgresql://app@db:5432/runs"),
        (
            "postgres://app:pw@h1:5432,h2:5433/runs?sslmode=require",
            "postgres://app@h1:5432,h2:5433/runs?sslmode=require",
        ),
        (
            "postgresql:///runs?host=/run/postgresql&password=pw&sslpassword=k",
            "postgresql:///runs?host=/run/postgresql",
        ),
        ("postgresql://app@db/runs", "postgresql://app@db/runs"),
    ],
)
def test_a_postgresql_store_shows_its_url_without_its_password(url, shown):
    assert public_url(url) == shown


@needs_postgres
def test_open_store_by_a_postgresql_url(postgres_server):
    schema = f"app{time.monotonic_ns()}"
    store = open_store(f"{postgres_server.url}?schema={schema}&timeout=2&pool=3&application_name=ours", KEYS)
    assert isinstance(store, PostgresStore) and (store.schema, store.timeout, store.pool_size) == (schema, 2.0, 3)
    assert store.url == f"postgresql://branchc@127.0.0.1:{postgres_server.port}/branchc?application_name=ours"
    record = store.create(RunRecord.new("t", "x", ttl=60))
    with raw(store) as conn:
        names = {row[0] for row in conn.execute("SELECT application_name FROM pg_stat_activity")}
    assert "ours" in names
    # postgres:// too, and libpq's own options: here its unix socket, as the superuser it trusts there
    socket = open_store(
        f"postgres:///branchc?host={postgres_server.folder}&port={postgres_server.port}&user=postgres&schema={schema}",
        KEYS,
    )
    assert socket.load(record.run_id) == record
    for each in (store, socket):
        each.close()


def test_open_store_by_url(tmp_path, monkeypatch, redis_server):
    monkeypatch.chdir(tmp_path)
    assert open_store("none") is None and open_store(" NONE ") is None
    relative = open_store("sqlite:///runs.db?timeout=1.5&synchronous=full", KEYS)
    assert isinstance(relative, SQLiteStore) and (tmp_path / "runs.db").exists()
    assert (relative.timeout, relative.synchronous) == (1.5, "full")
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db", KEYS)
    assert absolute.path == f"{tmp_path}/abs.db"
    memory = open_store("sqlite:///:memory:", KEYS)
    memory.create(RunRecord.new("t", "x", ttl=60, run_id="m"))
    assert memory.load("m").saved == "x"
    remote = open_store(f"{redis_server.url}?prefix=app:", KEYS)
    assert isinstance(remote, RedisStore) and remote.prefix == "app:" and remote.usage() == Usage(0, 0)
    for store in (relative, absolute, memory, remote):
        store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "it is empty"),
        ("runs.db", "it has no scheme; start it with sqlite:///, redis:// or postgresql://"),
        ("mongodb://x", "the scheme 'mongodb' is unknown; use sqlite, redis or postgresql"),
        ("mysql://h/db", "the scheme 'mysql' is not a store branchc has"),
        ("sqlite://runs.db", "the host part 'runs.db' has no meaning for SQLite; write sqlite:///relative"),
        ("sqlite:///", "it names no file"),
        ("sqlite:///r.db?busy=3", "the option 'busy' is unknown; use timeout"),
        ("sqlite:///r.db?timeout=soon", "timeout='soon' is not a number of seconds"),
        ("sqlite:///r.db?synchronous=fast", "synchronous='fast' is not a mode"),
        ("redis://", "it names no host"),
        ("redis://127.0.0.1:port/0", "the port in '127.0.0.1:port' is not a number"),
        ("redis://127.0.0.1:6379/zero", "the database 'zero' is not a number"),
        ("redis://127.0.0.1:6379/0?prefix=", "prefix= is empty"),
        ("redis://127.0.0.1:6379/0?timeout=0", "timeout=0 would fail every call"),
        ("postgresql://h:port/db", "the port in 'h:port' is not a number"),
        ("postgres://u@h1:5432,h2:x/db", "the port in 'h2:x' is not a number"),
        ("postgresql://h/runs/db", "the database 'runs/db' has a slash"),
        ("postgresql://h/db?schema=Runs", "schema='Runs' is not a lower-case SQL name; write letters, digits"),
        ("postgresql://h/db?schema=a;drop", "schema='a;drop' is not a lower-case SQL name"),
        ("postgresql://h/db?timeout=0", "timeout=0 would fail every call"),
        ("postgresql://h/db?timeout=-1", "timeout='-1' is not a number of seconds"),
        ("postgresql://h/db?pool=0", "pool='0' is not a number of connections from 1 to 1000"),
        ("postgresql://h/db?options=-c%20x", "the option 'options' is unknown; use schema"),
        ("postgresql://h/db?sslmod=require", "the option 'sslmod' is unknown; use schema (the schema of its tables"),
        ("postgresql://h/db?schema=a&schema=b", "the option 'schema' is given twice"),
    ],
)
def test_a_bad_store_url_names_the_part_and_the_fix(url, message):
    with pytest.raises(StoreURLError, match="a store URL is one of") as caught:
        open_store(url, KEYS)
    assert message in str(caught.value)
