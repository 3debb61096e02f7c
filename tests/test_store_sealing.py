"""Runs at rest are authentic and private (branchc/store/keys.py, sealed.py; the `runs` CLI in bridge/runs.py).

Whoever holds the state key is trusted; someone who can only write the store (its file, a backup, a Redis
without a password) is not. So every record is sealed (AES-256-GCM, bound to its run id), and what such a
writer does to it (an edited byte, a record moved onto another run, rows swapped, a truncated value, an
older version put back where a handle names a newer one) is refused, naming the run, before anything of it
is decoded and before any code of the tool runs. Keys rotate through a ring (`--state-key NEW,OLD` and
`branchc runs rekey`); without a key one is made once in the state folder; the store's files are private and
hold no argument, handoff, question or answer in clear; `branchc runs cancel|resume` run only the code the
operator names with --tools.

Real parts: a real SQLite file, a real redis-server (tests/_redis_support.py) and a real PostgreSQL
(tests/_postgres_support.py), the tool
tests/servers/sealed_tools.py compiled and run by the real machine, `branchc serve --http` and `branchc
runs` subprocesses, the real `mcp` client. The tool writes a marker line from its kept object's __init__,
its finally and its after(): a test that refuses a record checks that the marker stays empty.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, free_port, listening, within
from _postgres_support import PostgresServer, needs_postgres, raw
from _postgres_support import url_of as postgres_url
from _redis_support import RedisServer, needs_redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp import Client

from branchc.bridge.durable import run_meta, serving_store
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.runtime.limits import Limits
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run, load_run
from branchc.store import (
    KeyRing,
    RunMeta,
    RunNotFoundError,
    RunRecord,
    StaleRunError,
    StoreDataError,
    StoreKeyError,
    StoreUnavailableError,
    open_store,
    state_keys,
)
from branchc.store.keys import KEY_FILE, SealError
from branchc.store.postgres import PostgresStore
from branchc.store.redis import RedisStore
from branchc.store.sqlite import SQLiteStore

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

TOOL_FILE = Path(__file__).parent / "servers" / "sealed_tools.py"
NAME = "sealed_secret"
SECRET = "q7Zx-sealed-secret-Vw3k"  # in the arguments, the handoff, the questions and the answers
OLD, NEW = "old-state-key-" + "o" * 32, "new-state-key-" + "n" * 32
KEYS = KeyRing([KEY])


@pytest.fixture(autouse=True)
def _no_state_key_in_env(monkeypatch):
    """The keys here are the tests' own: none from the environment (the subprocesses inherit it)."""
    monkeypatch.delenv("BRANCHC_STATE_KEY", raising=False)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("sealed_cache"))


@pytest.fixture(scope="module")
def tool(cache) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BRANCHC_CACHE", cache)
        return load_served_tools(TOOL_FILE, warn=None)[NAME]


@pytest.fixture(
    params=["sqlite", pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]
)
def store(request, tmp_path):
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    elif request.param == "redis":
        server = request.getfixturevalue("redis_server")
        made = RedisStore(server.url, keys=KEYS, prefix=f"s{time.monotonic_ns()}:")
    else:
        server = request.getfixturevalue("postgres_server")
        made = PostgresStore(server.url, keys=KEYS, schema=f"s{time.monotonic_ns()}")
    yield made
    made.close()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def waiting_run(tool: Any, store: Any, marker: Path, *, run_id: str | None = None) -> RunRecord:
    """A run of sealed_secret waiting on its second question, with its first answer, in `store` (version 1), as
    a server leaves it; the marker file is emptied afterwards (the run's start wrote "init")."""
    handoff = {"marker": str(marker), "secret": SECRET, "note": f"handoff-{SECRET}"}
    machine = Machine(tool.name, "1", Limits())
    machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
    machine.advance()
    (asked,) = machine.pending
    machine.answer(asked.key, {"action": "accept", "content": {"text": f"answer-{SECRET}"}})
    machine.advance()
    meta = run_meta("2026-07-28", tool, machine, extra={"round": 2})
    record = RunRecord.new(tool.name, dump_run(handoff, machine), ttl=600, meta=meta, run_id=run_id, owner="alice")
    machine.release()
    marker.unlink(missing_ok=True)
    return store.create(record)


def used(store: Any, tool: Any, run_id: str, min_version: int | None = None) -> Any:
    """What a server does with a run it continues: load it (at least at the version its handle names), load the
    saved run, answer it and run it to its end, then after(). The tool's result."""
    record = store.load(run_id, min_version=min_version)
    if record is None:
        return None
    handoff, machine = load_run(record.saved)
    (asked,) = machine.pending
    machine.answer(asked.key, {"action": "accept", "content": {"text": "second"}})
    machine.advance()
    assert machine.done
    return anyio.run(tool.after_fn, handoff, machine.result)


# -- the key ring -----------------------------------------------------------------------------------------------


def test_a_key_ring_is_one_or_more_keys_of_32_bytes_or_more_the_first_seals():
    ring = KeyRing.parse(f"{NEW} , {OLD}")  # the --state-key form: comma-separated, spaces around ignored
    assert ring.secrets == (NEW.encode(), OLD.encode()) and len(ring) == 2
    assert ring.sealing_id == KeyRing([NEW]).ids[0] != KeyRing([OLD]).ids[0] == ring.ids[1]
    assert KeyRing([NEW.encode()]).ids == KeyRing([NEW]).ids  # bytes or str alike
    assert NEW not in repr(ring) and OLD not in repr(ring)
    with pytest.raises(StoreKeyError, match=r"state key 2 is 9 bytes, and a state key is at least 32 bytes"):
        KeyRing.parse(f"{NEW},too-short")
    with pytest.raises(StoreKeyError, match="an empty entry"):
        KeyRing.parse(f"{NEW},")
    with pytest.raises(StoreKeyError, match="state key 2 is given twice"):
        KeyRing([NEW, NEW])
    with pytest.raises(StoreKeyError, match="the state key is empty"):
        KeyRing.parse("  ")
    with pytest.raises(TypeError, match=r"KeyRing\.parse"):
        KeyRing(NEW)  # type: ignore[arg-type]  # one string is not a list of keys


def test_the_record_key_is_not_the_one_request_state_is_sealed_with():
    """The same secret seals request_state (the SDK) and records (branchc), under keys derived for each: a sealed
    record is no request_state, and the other way round."""
    from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState, _b64u, _b64u_decode

    codec = AESGCMRequestStateCodec([KEY])
    raw = _b64u_decode(codec.seal(b"payload")[len("v1.") :])  # kid (4) + nonce + ciphertext and tag
    assert codec.unseal("v1." + _b64u(raw)) == b"payload"
    with pytest.raises(SealError):  # the ring's key (same secret) does not open the SDK's token...
        KEYS.open(KEYS.sealing_id, raw[4:], b"v1." + raw[:4])
    sealed = KEYS.seal(b"payload", b"v1." + raw[:4])
    with pytest.raises(InvalidRequestState):  # ...nor does the SDK's key open the ring's
        codec.unseal("v1." + _b64u(raw[:4] + sealed))


def test_stores_refuse_to_open_without_a_key_ring(tmp_path):
    with pytest.raises(StoreKeyError, match="needs the key ring that seals its records"):
        SQLiteStore(tmp_path / "runs.db")
    with pytest.raises(StoreKeyError, match="needs the key ring"):
        open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    assert not (tmp_path / "runs.db").exists()


# -- without a key: one made once in the state folder --------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_without_a_state_key_one_is_made_once_in_the_state_folder_mode_0600(tmp_path):
    folder = tmp_path / "state" / "deep"
    ring = state_keys(None, folder)
    key_file = folder / KEY_FILE
    assert mode(folder) == 0o700 and mode(key_file) == 0o600
    assert state_keys(None, folder).ids == ring.ids  # kept: a restart opens what it sealed before
    assert state_keys("", folder).ids == ring.ids  # an empty --state-key is none
    named = state_keys(f"{NEW},{OLD}", tmp_path / "other")  # a key given: no file made
    assert named.ids == KeyRing([NEW, OLD]).ids and not (tmp_path / "other").exists()
    key_file.chmod(0o640)
    with pytest.raises(StoreKeyError, match=r"may be read by others \(mode 0640\).*Make a new key"):
        state_keys(None, folder)


def test_two_processes_making_the_key_at_once_keep_one(tmp_path):
    folder = tmp_path / "state"
    code = "import sys; from branchc.store import state_keys; print(state_keys(None, sys.argv[1]).sealing_id)"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True) for _ in range(4)
    ]
    ids = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert len(ids) == 1 and ids == {state_keys(None, folder).sealing_id}
    assert [p.name for p in folder.iterdir()] == [KEY_FILE]  # no temporary file left behind


def test_the_state_folder_is_made_private_when_it_is_ours_and_refused_when_not(tmp_path, monkeypatch):
    folder = tmp_path / "state"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    monkeypatch.setenv("BRANCHC_STATE_DIR", str(folder))
    monkeypatch.delenv("BRANCHC_STATE_KEY", raising=False)
    store = serving_store(None, http=True)  # the default store, in the state folder, sealed with its key
    store.close()
    assert mode(folder) == 0o700 and mode(folder / KEY_FILE) == 0o600
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        if (folder / name).exists():
            assert mode(folder / name) == 0o600, name
    if os.geteuid() == 0:  # a folder of another user: not ours to change
        other = tmp_path / "theirs"
        other.mkdir()
        other.chmod(0o755)
        os.chown(other, 4321, 4321)
        with pytest.raises(StoreKeyError, match=r"belongs to another user \(uid 4321\)"):
            state_keys(None, other)


# -- the SQLite files ------------------------------------------------------------------------------------------


def test_the_sqlite_files_are_0600_and_an_open_file_is_made_private_or_refused(tmp_path):
    path = tmp_path / "runs.db"
    store = SQLiteStore(path, keys=KEYS)
    store.create(RunRecord.new("t", "x", ttl=60))
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        assert mode(tmp_path / name) == 0o600, name
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):  # (the first store is open: its -wal and -shm stay)
        (tmp_path / name).chmod(0o644)  # as an older branchc left them
    again = SQLiteStore(path, keys=KEYS)
    assert [r.saved for r in again.list()] == ["x"]
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        assert mode(tmp_path / name) == 0o600, name
    again.close()
    store.close()
    if os.geteuid() == 0:
        path.chmod(0o644)
        os.chown(path, 4321, 4321)
        with pytest.raises(StoreUnavailableError, match=r"belongs to another user \(uid 4321\).*chmod 600"):
            SQLiteStore(path, keys=KEYS)


# -- what a writer without the key does, refused naming the run ---------------------------------------------------


def raw_row(store: Any, run_id: str) -> dict[str, Any] | None:
    """A record's stored fields, below the store's API: name -> bytes (text and numbers as their text)."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.text_factory = bytes
            cursor = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,))
            row = cursor.fetchone()
            if row is None:
                return None
            names = [column[0] for column in cursor.description]
        out = {}
        for name, value in zip(names, row, strict=True):
            if name != "run_id" and value is not None:
                out[name] = (
                    value if isinstance(value, bytes) else (repr if type(value) is float else str)(value).encode()
                )
        return out
    if isinstance(store, PostgresStore):
        with raw(store) as conn:
            cursor = conn.execute("SELECT * FROM runs WHERE run_id = %s", (run_id,))
            row = cursor.fetchone()
            names = [column.name for column in cursor.description]
        if row is None:
            return None
        return {
            name: value if isinstance(value, bytes) else (repr if type(value) is float else str)(value).encode()
            for name, value in zip(names, row, strict=True)
            if name not in ("run_id", "hbytes") and value is not None
        }
    found = store.client.hgetall(f"{store.prefix}run:{run_id}")
    return {name.decode(): value for name, value in found.items()} or None


def put_row(store: Any, run_id: str, row: dict[str, bytes] | None) -> None:
    """Write a record's fields as they are (or remove it), below the store's API, as a writer without the key."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            if row is not None:
                values = {}
                for name, value in row.items():
                    if name in ("head", "body"):
                        values[name] = value
                    else:
                        try:
                            values[name] = value.decode()  # as text: numbers take their column's type back
                        except UnicodeDecodeError:
                            values[name] = value
                names = ["run_id", *values]
                marks = ", ".join("?" * len(names))
                conn.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES ({marks})", [run_id, *values.values()])
        return
    if isinstance(store, PostgresStore):
        _put_postgres_row(store, run_id, row)
        return
    key = f"{store.prefix}run:{run_id}"
    store.client.delete(key)
    if row is not None:
        store.client.hset(key, mapping=row)
        store.client.expire(key, 600)


def _put_postgres_row(store: PostgresStore, run_id: str, row: dict[str, bytes] | None) -> None:
    """The row as it is, in one transaction; a value its column's type cannot hold (a number's text with a bit
    flipped, text that is not UTF-8, a field left out) no writer can store there either: not a mutation."""
    import psycopg

    with raw(store) as conn:
        try:
            with conn.transaction():
                conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))
                if row is not None:
                    values = {
                        name: value if name in ("head", "body") else value.decode() for name, value in row.items()
                    }
                    names = ["run_id", *values]
                    marks = ", ".join(["%s"] * len(names))
                    conn.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES ({marks})", [run_id, *values.values()])
        except (psycopg.DataError, psycopg.IntegrityError, UnicodeDecodeError):
            assume(False)


def versions(tool: Any, store: Any, marker: Path) -> tuple[RunRecord, list[dict[str, bytes]]]:
    """A waiting run at version 3 (created, claimed, put back as a server does) and its raw rows at 1, 2, 3."""
    record = waiting_run(tool, store, marker)
    rows = [raw_row(store, record.run_id)]
    claimed = store.checkpoint(record.run_id, 1, status="running")
    rows.append(raw_row(store, record.run_id))
    record = store.checkpoint(record.run_id, 2, status="waiting", meta=claimed.meta)
    rows.append(raw_row(store, record.run_id))
    return record, rows


def refused(store: Any, tool: Any, run_id: str, marker: Path, match: str, min_version: int | None = None) -> None:
    with pytest.raises(StoreDataError, match=match) as caught:
        used(store, tool, run_id, min_version)
    assert caught.value.run_id == run_id and f"stored run {run_id!r}" in str(caught.value)
    assert lines(marker) == []  # no code of the tool ran


def test_a_sealed_run_is_used_as_a_server_would(tool, store, tmp_path):
    marker = tmp_path / "marker.txt"
    record, _ = versions(tool, store, marker)
    assert record.version == 3 and record.owner == "alice" and store.load(record.run_id) == record
    assert used(store, tool, record.run_id, min_version=3) == {
        "answers": [f"answer-{SECRET}", "second"],
        "kept": SECRET,
    }
    assert lines(marker) == ["finally", "after"]  # the kept object was restored, not constructed again


def test_rows_swapped_between_runs_and_a_record_moved_onto_another_run_are_refused(tool, store, tmp_path):
    marker = tmp_path / "marker.txt"
    one, two = waiting_run(tool, store, marker), waiting_run(tool, store, marker)
    first, second = raw_row(store, one.run_id), raw_row(store, two.run_id)
    put_row(store, one.run_id, second)
    put_row(store, two.run_id, first)
    refused(store, tool, one.run_id, marker, "its head does not match its seal")
    refused(store, tool, two.run_id, marker, "its head does not match its seal")
    # only the bodies swapped: each head names its own body
    put_row(store, one.run_id, {**first, "body": second["body"]})
    put_row(store, two.run_id, {**second, "body": first["body"]})
    refused(store, tool, one.run_id, marker, "its saved run does not match its seal")
    # a record copied under an id of its own choosing (the first run's, deleted)
    put_row(store, "planted", first)
    refused(store, tool, "planted", marker, "its head does not match its seal")


def test_an_older_version_put_back_is_refused_where_a_handle_names_the_newer(tool, store, tmp_path):
    marker = tmp_path / "marker.txt"
    record, rows = versions(tool, store, marker)
    put_row(store, record.run_id, rows[0])  # version 1 put back: authentic, but older than the handle's 3
    assert store.load(record.run_id).version == 1  # nothing names a version: an authentic record
    refused(store, tool, record.run_id, marker, r"at version 1, older than version 3 .* put back", min_version=3)
    # a writer that loaded version 3 (a held run, a round's claim) finds it too, at its compare-and-swap
    with pytest.raises(StoreDataError, match="older than version 3 it was loaded at") as caught:
        store.checkpoint(record.run_id, 3, status="running")
    assert caught.value.run_id == record.run_id and caught.value.field == "version"
    put_row(store, record.run_id, rows[2])
    assert used(store, tool, record.run_id, min_version=3)["kept"] == SECRET


def test_a_truncated_record_is_refused(tool, store, tmp_path):
    marker = tmp_path / "marker.txt"
    record = waiting_run(tool, store, marker)
    row = raw_row(store, record.run_id)
    for name, cut in (("head", 1), ("head", 40), ("body", 1), ("body", len(row["body"]) // 2), ("tool", 1)):
        put_row(store, record.run_id, {**row, name: row[name][:-cut]})
        refused(store, tool, record.run_id, marker, "does not match its seal")
    put_row(store, record.run_id, {**row, "body": b""})
    refused(store, tool, record.run_id, marker, "its saved run does not match its seal")
    if isinstance(store, RedisStore):  # (a column of SQLite's or PostgreSQL's is never missing)
        put_row(store, record.run_id, {k: v for k, v in row.items() if k != "body"})
        refused(store, tool, record.run_id, marker, "its saved run does not match its seal")
    put_row(store, record.run_id, row)
    assert store.load(record.run_id) == record


# -- rotation: old key first, then new key first, rekey, drop the old key -------------------------------------------


def runs_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("BRANCHC_STORE", "BRANCHC_STATE_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "branchc", "runs", *argv],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_keys_rotate_through_the_ring_and_rekey(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with closing(open_store(url, KeyRing([OLD]))) as old:
        made = [old.create(RunRecord.new("t", f"run {n}", ttl=600, owner="alice")) for n in range(3)]
    # 1. the new key goes in second... then first, on every server: all runs open, new writes seal with NEW
    with closing(open_store(url, KeyRing([NEW, OLD]))) as both:
        assert [both.load(r.run_id) for r in made] == made
        moved = both.checkpoint(made[0].run_id, 1, status="running")
    with closing(open_store(url, KeyRing([NEW]))) as new_only:
        assert new_only.load(made[0].run_id) == moved  # sealed anew with NEW by its write
    # 2. rekey (as the CLI; a server may run meanwhile): every run sealed with the first key
    done = runs_cli("rekey", "--store", url, "--json", env={"BRANCHC_STATE_KEY": f"{NEW}, {OLD}"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"resealed": 2, "current": 1, "refused": []}
    # 3. the old key dropped: every run still opens, at the version it had
    with closing(open_store(url, KeyRing([NEW]))) as new_only:
        assert [new_only.load(r.run_id) for r in made] == [moved, *made[1:]]
        # a run sealed only with the dropped key (a server still on the old key wrote it) is refused by name
        with closing(open_store(url, KeyRing([OLD]))) as straggler:
            late = straggler.create(RunRecord.new("t", "late", ttl=600))
        with pytest.raises(StoreDataError, match=r"is sealed with a key this server does not hold") as caught:
            new_only.load(late.run_id)
        assert caught.value.run_id == late.run_id and caught.value.field == "key"
    listed = runs_cli("list", "--store", url, "--state-key", NEW)
    assert listed.returncode == 1 and f"stored run {late.run_id!r} is sealed with a key" in listed.stderr
    again = runs_cli("rekey", "--store", url, "--state-key", NEW)
    assert again.returncode == 1
    assert f"stored run {late.run_id!r} is sealed with a key this server does not hold" in again.stderr
    assert "sealed 0 run(s) anew with the first key" in again.stdout and "3 already were" in again.stdout
    table = runs_cli("list", "--store", url, "--state-key", f"{NEW},{OLD}").stdout
    header = next(line for line in table.splitlines() if "tool" in line and "status" in line)
    assert "owner" in header and table.count("alice") == 3  # a column of its own
    shown = runs_cli("list", "--store", url, "--json", "--state-key", f"{NEW},{OLD}")
    assert {entry["run_id"]: entry["owner"] for entry in json.loads(shown.stdout)} == {
        **{r.run_id: "alice" for r in made},
        late.run_id: None,
    }


def test_rekey_while_writers_checkpoint_loses_no_update_and_breaks_no_record(store):
    """Writers seal with OLD first (a server not yet rolled over), rekey with NEW first, over and over: every
    checkpoint lands once, in order, and every record opens under either key at the end."""
    writer = _with_keys(store, KeyRing([OLD, NEW]))
    rekeyer = _with_keys(store, KeyRing([NEW, OLD]))
    ids = [writer.create(RunRecord.new("t", "[]", ttl=600)).run_id for _ in range(3)]
    stop = threading.Event()
    errors: list[BaseException] = []
    rekeys = 0

    def rekeying() -> None:
        nonlocal rekeys
        try:
            while not stop.is_set():
                done = rekeyer.rekey()
                assert done.refused == (), done.refused
                rekeys += 1
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=rekeying)
    thread.start()
    try:
        for count in range(60):
            for run_id in ids:
                while True:
                    current = writer.load(run_id)
                    try:
                        if count % 2:
                            saved = json.dumps([*json.loads(current.saved), count])
                            writer.checkpoint(run_id, current.version, saved=saved)
                        else:  # the body kept as it is (when its key is the writer's)
                            writer.checkpoint(run_id, current.version, status=("waiting", "running")[count % 4 // 2])
                        break
                    except StaleRunError:
                        continue
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert not errors and rekeys > 0
    for run_id in ids:
        final = rekeyer.load(run_id)
        assert final.version == 61 and json.loads(final.saved) == list(range(1, 60, 2))
    rekeyer.close()


def _with_keys(store: Any, keys: KeyRing) -> Any:
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path, keys=keys)
    if isinstance(store, PostgresStore):
        return open_store(postgres_url(store), keys)
    return RedisStore(store.url, keys=keys, prefix=store.prefix)


# -- every mutation of a sealed record is refused before any code of the tool runs ---------------------------------


COLUMNS = ("fmt", "tool", "status", "owner", "version", "created", "updated", "expires", "size", "key", "head", "body")


MUTATIONS = ("flip", "swap_fields", "swap_rows", "move", "rollback", "truncate", "rename")


@st.composite
def mutations(draw: Any) -> dict[str, Any]:
    """A mutation a writer without the key makes to the two records of `sealed_runs` (see `mutated`): its
    kind and choices, positions as fractions of the field they fall in."""
    return {
        "kind": draw(st.sampled_from(MUTATIONS)),
        "run": draw(st.integers(0, 1)),
        "names": draw(st.lists(st.sampled_from(COLUMNS), min_size=2, max_size=4, unique=True)),
        "at": draw(st.floats(0, 1, exclude_max=True)),
        "bit": draw(st.integers(0, 7)),
        "older": draw(st.integers(0, 1)),
    }


def mutated(plan: dict[str, Any], pristine: dict[str, dict[str, bytes]], older: list[dict[str, bytes]]) -> Any:
    """(run id -> the fields to write, or None to remove it; the run ids to use afterwards) for `plan`."""
    one, two = ids = list(pristine)
    run_id, kind, names = ids[plan["run"]], plan["kind"], plan["names"]
    row = dict(pristine[run_id])
    if kind == "flip":  # any bit of any byte of any field
        name = names[0] if names[0] in row else "head"
        at = int(plan["at"] * len(row[name]))
        row[name] = row[name][:at] + bytes([row[name][at] ^ (1 << plan["bit"])]) + row[name][at + 1 :]
        return {run_id: row}, [run_id]
    if kind == "swap_fields":  # two fields of one record trade places
        a, b = names[:2]
        row[a], row[b] = pristine[run_id].get(b), pristine[run_id].get(a)
        return {run_id: _present(row)}, [run_id]
    if kind == "swap_rows":  # some fields of the two runs trade places
        first, second = dict(pristine[one]), dict(pristine[two])
        for name in names:
            first[name], second[name] = pristine[two].get(name), pristine[one].get(name)
        return {one: _present(first), two: _present(second)}, [one, two]
    if kind == "move":  # one run's record under the other's id
        return {ids[1 - plan["run"]]: row}, [ids[1 - plan["run"]]]
    if kind == "rollback":  # an older version of the first run put back
        return {one: dict(older[plan["older"]])}, [one]
    if kind == "truncate":
        name = names[0] if names[0] in row else "body"
        row[name] = row[name][: int(plan["at"] * len(row[name]))]
        return {run_id: row}, [run_id]
    # rename: a record under a run id one bit away from its own
    at = int(plan["at"] * len(run_id))
    renamed = run_id[:at] + chr(ord(run_id[at]) ^ (1 << min(plan["bit"], 5))) + run_id[at + 1 :]
    assume(renamed.isprintable() and renamed not in ids)
    return {run_id: None, renamed: row}, [renamed]


def _present(row: dict[str, Any]) -> dict[str, bytes]:
    return {name: value for name, value in row.items() if value is not None}


@pytest.fixture
def sealed_runs(tool, store, tmp_path) -> Any:
    """Two runs (the first at version 3): their raw rows, the older versions of the first, and the records."""
    marker = tmp_path / "marker.txt"
    record, rows = versions(tool, store, marker)
    other = waiting_run(tool, store, marker)
    pristine = {record.run_id: rows[2], other.run_id: raw_row(store, other.run_id)}
    return store, marker, pristine, rows[:2], {record.run_id: record, other.run_id: other}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_mutation_of_a_sealed_record_is_refused_before_any_code_runs(tool, sealed_runs, data, monkeypatch):
    """Each mutation, made after a server loaded both records: loading a mutated record (at the version its
    handle names) is refused naming it, before its meta is parsed and before any code of the tool runs; a
    checkpoint of it (the server goes on, on the record it loaded) is refused, or writes the record the server
    had, never a value the mutation brought."""
    store, marker, pristine, older, records = sealed_runs
    for run_id in pristine:
        assert store.load(run_id) == records[run_id]  # what the server knows (its store keeps the heads)
    change, targets = mutated(data.draw(mutations()), pristine, older)
    decoded: list[str] = []
    real = RunMeta.from_json.__func__

    def spy(cls: Any, run_id: str, text: Any) -> RunMeta:
        decoded.append(run_id)
        return real(cls, run_id, text)

    monkeypatch.setattr(RunMeta, "from_json", classmethod(spy))
    try:
        for run_id, row in change.items():
            put_row(store, run_id, row)
        changed = [run_id for run_id in targets if raw_row(store, run_id) != pristine.get(run_id)]
        assume(changed)  # a mutation that left every byte as it was is no mutation
        for run_id in changed:
            known = records.get(run_id)
            try:
                outcome = used(store, tool, run_id, known and known.version)
            except StoreDataError as error:
                assert error.run_id == run_id and f"stored run {run_id!r}" in str(error), (error, change)
            else:  # only a record that reads as expired is not there at all: nothing of it runs either
                assert outcome is None and _expired(raw_row(store, run_id)), (run_id, change)
            assert run_id not in decoded  # refused before its meta was parsed
        assert lines(marker) == []  # no __init__, finally or after() of the tool ran
        for run_id in changed:
            known = records.get(run_id)
            try:
                store.checkpoint(run_id, known.version if known else 1, saved="[]", meta=RunMeta(era="x"))
            except (StoreDataError, StaleRunError, RunNotFoundError):
                continue
            now = store.load(run_id)
            assert known is not None and (now.tool, now.owner, now.status, now.created, now.expires) == (
                known.tool,
                known.owner,
                known.status,
                known.created,
                known.expires,
            ), (run_id, change)
    finally:
        for run_id in {*change, *pristine}:
            put_row(store, run_id, pristine.get(run_id))


def _expired(row: dict[str, bytes] | None) -> bool:
    try:
        return row is None or float(row["expires"]) <= time.time()
    except (KeyError, ValueError):
        return False


# -- a 2026-07-28 round names the version it continues ----------------------------------------------------------------


async def _elicited(ctx: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"text": f"answer-{SECRET}"})


MODERN = {"mode": "2026-07-28", "elicitation_callback": _elicited}


async def _call(session: Any, arguments: dict, state: str | None = None, asked: Any = None) -> Any:
    responses = None
    if asked is not None:
        responses = {key: await _elicited(None, None) for key in asked.input_requests}
    return await session.call_tool(
        NAME, arguments, request_state=state, input_responses=responses, allow_input_required=True
    )


@pytest.mark.anyio
async def test_a_round_refuses_a_record_older_than_its_request_state_names(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", cache)
    tools = load_served_tools(TOOL_FILE, warn=None)
    marker = tmp_path / "marker.txt"
    arguments = {"marker": str(marker), "secret": SECRET}
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    async with Client(create_server(tools, state_key=KEY, store=store), **MODERN) as client:
        first = await within(30, _call(client.session, arguments))
        (record,) = store.list()
        round_one = raw_row(store, record.run_id)
        second = await within(30, _call(client.session, arguments, first.request_state, first))
        assert isinstance(second, types.InputRequiredResult) and store.load(record.run_id).version == 3
        marker.unlink()  # "init", from round 1
        put_row(store, record.run_id, round_one)  # the row of round 1 put back: authentic, and older
        refused = await within(30, _call(client.session, arguments, second.request_state, second))
    assert refused.is_error, refused
    text = refused.content[0].text
    assert f"stored run {record.run_id!r} is at version 1, older than version 3" in text, text
    assert "put back" in text and lines(marker) == []  # nothing of the run ran
    store.close()


# -- runs cancel | resume run only the code the operator names ----------------------------------------------------


def test_runs_cancel_loads_only_the_tools_given_and_refuses_a_build_that_cannot_take_the_run(tool, cache, tmp_path):
    marker, planted = tmp_path / "marker.txt", tmp_path / "planted.txt"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_store(url, KEYS)
    record = waiting_run(tool, store, marker)
    # a build folder whose module of the tool's name writes `planted` when imported, named by the record (as a
    # planted row did: the record is sealed now, so only a key holder could write this one)
    attack = tmp_path / "attack"
    attack.mkdir()
    (attack / "branchc.json").write_text(json.dumps({"modules": {"sealed_tools": {"tools": [NAME], "functions": {}}}}))
    (attack / "sealed_tools.py").write_text(f"open({str(planted)!r}, 'w').write('imported')\n")
    extra = {**record.meta.extra, "build": str(attack)}
    record = store.checkpoint(record.run_id, 1, meta=dataclasses.replace(record.meta, extra=extra))
    store.close()
    env = {"BRANCHC_CACHE": cache, "BRANCHC_STATE_KEY": KEY}
    # another build of the tool, where what the run carries at its point changed: refused, naming the run and the point
    changed = tmp_path / "changed" / "sealed_tools.py"
    changed.parent.mkdir()
    changed.write_text(TOOL_FILE.read_text().replace("kept", "held"))
    other = runs_cli("cancel", record.run_id, "--tools", str(changed), "--store", url, env=env)
    assert other.returncode == 1, other.stderr
    assert f"stored run {record.run_id!r} cannot be loaded to end it" in other.stderr
    assert "waits at point" in other.stderr and "no longer carries kept" in other.stderr and lines(marker) == []
    done = runs_cli("cancel", record.run_id, "--tools", str(TOOL_FILE), "--store", url, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
    assert lines(marker) == ["finally"]  # its cleanup ran once, from the tools given
    assert not planted.exists()  # the build the record names was never imported


# -- nothing in clear at rest: a real server's store files, a real Redis's values and dump ----------------------------


def serve_http(cache: str, state: Path, *options: str, key: str | None = KEY) -> tuple[Any, str]:
    """`branchc serve sealed_tools.py --http` on a free port, its state folder `state` (and, with `key`, that
    state key): (its context, its URL)."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--http", f"127.0.0.1:{port}", *options]
    env = {"BRANCHC_CACHE": cache, "BRANCHC_STATE_DIR": str(state)}
    if key is not None:
        command += ["--state-key", key]
        env["BRANCHC_STATE_KEY"] = key  # (what `serve` seals its store with until it passes --state-key itself)
    return listening(command, port, env), f"http://127.0.0.1:{port}/mcp"


async def _two_rounds(url: str, marker: Path) -> types.InputRequiredResult:
    """Call the tool (secret arguments), answer its first question (a secret answer): it waits on the second."""
    arguments = {"marker": str(marker), "secret": SECRET}
    async with Client(url, **MODERN) as client:
        first = await within(30, _call(client.session, arguments))
        second = await within(30, _call(client.session, arguments, first.request_state, first))
    assert isinstance(second, types.InputRequiredResult), second
    return second


def clear_in(folder: Path) -> list[str]:
    """The files under `folder` that hold the secret (or a piece of the run around it) in clear."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if any(word.encode() in data for word in (SECRET, SECRET[:12], "question about", "again about")):
                found.append(path.name)
    return found


@pytest.mark.anyio
async def test_no_argument_handoff_question_or_answer_is_in_clear_in_the_sqlite_files(cache, tmp_path):
    state = tmp_path / "state"
    served, url = serve_http(cache, state)
    with served as process:
        await _two_rounds(url, tmp_path / "marker.txt")
        names = sorted(path.name for path in state.iterdir())
        assert names == ["runs.db", "runs.db-shm", "runs.db-wal"], names  # the WAL is in use: it is looked at too
        assert clear_in(state) == []  # while the server runs
        assert mode(state) == 0o700 and all(mode(state / name) == 0o600 for name in names)
        process.kill()
        process.wait()
    assert clear_in(state) == []  # as a killed server leaves them
    with closing(open_store(f"sqlite:///{state / 'runs.db'}", KEYS)) as store:
        (record,) = store.list()  # and it is all there, for the key holder
    assert SECRET in record.saved and f"answer-{SECRET}" in record.saved
    assert record.meta.pending[0]["summary"] == f"again about {SECRET}"


@needs_redis
@pytest.mark.anyio
async def test_no_argument_handoff_question_or_answer_is_in_clear_in_redis(cache, tmp_path):
    redis = RedisServer(tmp_path / "redis", durable=True).start()  # append-only file too
    try:
        served, url = serve_http(cache, tmp_path / "state", "--store", f"{redis.url}?prefix=sealed:")
        with served:
            await _two_rounds(url, tmp_path / "marker.txt")
        store = open_store(f"{redis.url}?prefix=sealed:", KEYS)
        try:
            keys = store.client.keys("sealed:*")
            assert any(key.startswith(b"sealed:run:") for key in keys)
            for key in keys:  # every value, raw, as redis-cli would show it
                kind = store.client.type(key)
                values = {
                    b"hash": lambda key: b"".join(k + v for k, v in store.client.hgetall(key).items()),
                    b"zset": lambda key: b"".join(m for m, _ in store.client.zrange(key, 0, -1, withscores=True)),
                    b"string": store.client.get,
                }[kind](key)
                assert SECRET.encode() not in values and SECRET.encode() not in store.client.dump(key), key
            store.client.save()  # the RDB snapshot, beside the append-only file
            assert (tmp_path / "redis" / "dump.rdb").is_file()
            assert clear_in(tmp_path / "redis") == []
            (record,) = store.list()
            assert f"answer-{SECRET}" in record.saved
        finally:
            store.close()
    finally:
        redis.stop()


@needs_postgres
@pytest.mark.anyio
async def test_no_argument_handoff_question_or_answer_is_in_clear_in_postgresql(cache, tmp_path):
    server = PostgresServer().start()
    try:
        url = f"{server.url}?schema=sealed"
        served, address = serve_http(cache, tmp_path / "state", "--store", url)
        with served:
            await _two_rounds(address, tmp_path / "marker.txt")
        store = open_store(url, KEYS)
        try:
            with raw(store) as conn:  # every table, raw, as psql would show it
                tables = [
                    name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'sealed'")
                ]
                assert sorted(tables) == ["branchc_schema", "history", "runs", "segments"]
                for table in tables:
                    text = "".join(str(row) for row in conn.execute(f"SELECT * FROM {table}"))
                    assert SECRET not in text and SECRET.encode().hex() not in text, table
            with server.admin() as conn:
                conn.execute("CHECKPOINT")  # what its buffers hold, in its files too
            assert clear_in(server.data / "base") == [] and clear_in(server.data / "pg_wal") == []
            (record,) = store.list()
            assert f"answer-{SECRET}" in record.saved
        finally:
            store.close()
    finally:
        server.remove()


@pytest.mark.anyio
async def test_without_a_state_key_a_restarted_server_continues_its_guided_runs(cache, tmp_path):
    """The key is made once in the state folder, so a server started again opens the runs it sealed before."""
    state = tmp_path / "state"
    marker = tmp_path / "marker.txt"
    served, url = serve_http(cache, state, "--guided", key=None)
    with served as process:
        async with Client(url, mode="2026-07-28") as client:  # it cannot elicit: the calling model answers
            guide = (await client.session.call_tool(NAME, {"marker": str(marker), "secret": SECRET})).structured_content
        process.kill()
        process.wait()
    assert guide["status"] == "waiting_for_answers" and mode(state / KEY_FILE) == 0o600
    key = (state / KEY_FILE).read_bytes()
    served, url = serve_http(cache, state, "--guided", key=None)
    with served:
        async with Client(url, mode="2026-07-28") as client:
            (key_one,) = guide["requests"]
            more = await client.session.call_tool(
                "branchc_resume", {"state_id": guide["state_id"], "answers": {key_one["key"]: {"text": "one"}}}
            )
            assert not more.is_error, more.content[0].text
            (key_two,) = more.structured_content["requests"]
            done = await client.session.call_tool(
                "branchc_resume",
                {"state_id": more.structured_content["state_id"], "answers": {key_two["key"]: {"text": "two"}}},
            )
    assert not done.is_error and done.structured_content == {"answers": ["one", "two"], "kept": SECRET}
    assert lines(marker) == ["init", "finally", "after"] and (state / KEY_FILE).read_bytes() == key
