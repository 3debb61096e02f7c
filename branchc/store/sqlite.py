"""The embedded continuation store: one SQLite file in WAL mode, shared by threads and processes.

Each thread has its own connection (sqlite3 connections are not thread-safe); `:memory:` has one,
behind a lock. Records are sealed (sealed.py): a row holds the clear columns the queries use, a sealed head
and a sealed body. Every write is one statement in SQLite's own transaction, so a checkpoint's
compare-and-swap (read the record, check its seal, `UPDATE ... WHERE version = ?` with the record sealed
anew) is atomic across processes; a writer that finds the file locked waits up to the busy timeout, then
gets a StoreUnavailableError. `synchronous=NORMAL` (the default) survives a killed process; `full` also
survives a power cut, at a cost per write. The file and its -wal and -shm files are mode 0600.
An unended run (waiting, running) that expired keeps its row, unseen by every read but `expired` and
`load(..., expired=True)`, until it is ended (`end_expired`) or, ENDING_GRACE seconds on, gc removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .base import (
    ANYONE,
    ENDING_GRACE,
    UNENDED,
    Rekeyed,
    RunExistsError,
    RunRecord,
    StoreDataError,
    StoreUnavailableError,
    Usage,
    _Anyone,
)
from .history import (
    Appended,
    Checkpoint,
    HistoryEntry,
    appends,
    checkpoint_of,
    join_saved,
    new_segments,
    opened_segments,
    parts_of,
    refs_of,
    reseal_segment,
    retention,
    segment_name,
    segment_names,
)
from .keys import KeyRing
from .sealed import (
    Heads,
    Sealed,
    checkpoint_sealed,
    open_record,
    rekey_sealed,
    sealed_head,
    stale_or_older,
    store_keys,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 2  # 1: records not sealed (refused: its runs cannot be trusted)
NAMES = ("fmt", "tool", "status", "owner", "version", "created", "updated", "expires", "size", "key", "head", "body")
COLUMNS = ", ".join(("run_id", *NAMES))
# what a read selects: text as its bytes (checked by the seal before it is decoded); the body last, so a read
# that leaves it out does not go through its pages
HEAD = "run_id, fmt, CAST(tool AS BLOB), CAST(status AS BLOB), CAST(owner AS BLOB), version, created, updated, "
HEAD += "expires, size, CAST(key AS BLOB), head"
WHOLE = HEAD + ", body"
SCHEMA = """
CREATE TABLE IF NOT EXISTS branchc_schema (name TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    fmt INTEGER NOT NULL,
    tool TEXT NOT NULL,
    status TEXT NOT NULL,
    owner TEXT,
    version INTEGER NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    expires REAL NOT NULL,
    size INTEGER NOT NULL,
    key TEXT NOT NULL,
    head BLOB NOT NULL,
    body BLOB NOT NULL,
    hbytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_updated ON runs (updated);
CREATE INDEX IF NOT EXISTS runs_by_expires ON runs (expires);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, expires, size);
CREATE INDEX IF NOT EXISTS runs_by_owner ON runs (owner, status, expires, size);
CREATE TABLE IF NOT EXISTS history (
    run_id TEXT NOT NULL,
    k INTEGER NOT NULL,
    at REAL NOT NULL,
    key TEXT NOT NULL,
    info BLOB NOT NULL,
    head BLOB NOT NULL,
    PRIMARY KEY (run_id, k)
);
CREATE TABLE IF NOT EXISTS segments (
    run_id TEXT NOT NULL,
    ref TEXT NOT NULL,
    key TEXT NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (run_id, ref)
);
"""
SYNCHRONOUS = ("off", "normal", "full", "extra")
# an unended run that expired is kept ENDING_GRACE seconds, to be ended (base.py): what gc and create leave alone
KEPT = f"status IN ({', '.join(repr(s) for s in UNENDED)}) AND expires > ?"
PRIVATE = 0o600


MAX_IDLE = 4  # open connections kept between uses (more are opened while more threads use the store at once)


class SQLiteStore:
    """Runs in one SQLite file (or `:memory:`, for one process), sealed with `keys` (keys.py). The file and
    its -wal and -shm files are private (mode 0600): made so, or made so when they are this user's; a file
    of another user that others may read is refused."""

    def __init__(
        self,
        path: str | Path,
        *,
        keys: KeyRing | None = None,
        timeout: float = 5.0,
        synchronous: str = "normal",
        history: int | str | None = None,
    ) -> None:
        self.keys = store_keys(keys, f"the SQLite store {path}")
        self.history_kept = retention(history)
        self._appended = Appended()
        self._heads = Heads()
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous is one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}")
        if not timeout >= 0:
            raise ValueError(f"the busy timeout is seconds >= 0, not {timeout!r}")
        self.path = str(path)
        self.memory = self.path == ":memory:"
        self.url = "sqlite:///" + self.path
        self.timeout = float(timeout)
        self.synchronous = synchronous
        self._lock = threading.Lock()
        self._idle: list[tuple[sqlite3.Connection, tuple[int, int] | None]] = []  # (connection, its file)
        self._shared: sqlite3.Connection | None = None
        self._closed = False
        self._file: tuple[int, int] | None = None  # (device, inode) of the file the schema was set up in
        if not self.memory:
            folder = Path(self.path).resolve().parent
            if not folder.is_dir():
                raise StoreUnavailableError(
                    f"the SQLite store {self.path} cannot be created: its folder {folder} does not exist (create it)"
                )
            if Path(self.path).is_dir():
                raise StoreUnavailableError(f"the SQLite store {self.path} is a folder: name a file in it")
        with self._connection() as conn:
            if self.memory:
                self._setup(conn)

    # connections

    def _private(self) -> None:
        """The store's file made (empty, mode 0600) if missing, and it and its -wal and -shm files private: SQLite
        makes those two with the mode of the file."""
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE))
        for path in (self.path, self.path + "-wal", self.path + "-shm"):
            try:
                found = os.stat(path)
            except FileNotFoundError:
                continue
            if found.st_mode & 0o077:
                if found.st_uid != os.geteuid():
                    raise StoreUnavailableError(
                        f"the SQLite store's file {path} may be read by others (mode {found.st_mode & 0o777:04o}) "
                        f"and belongs to another user (uid {found.st_uid}), so branchc cannot make it private: "
                        f"`chmod 600` it (and its -wal and -shm files) as its owner"
                    )
                os.chmod(path, PRIVATE)

    def _open(self) -> sqlite3.Connection:
        if not self.memory:
            try:
                self._private()
            except OSError as error:
                raise StoreUnavailableError(f"the SQLite store {self.path} cannot be opened: {error}") from None
        try:
            # one connection per thread (or one behind a lock); not checked, so close() may run on any thread
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA cache_size = -512")  # KiB: runs are read whole, once; a cache helps little
        except sqlite3.Error as error:
            raise self._failure(error, "opening it") from None
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise StoreUnavailableError(f"the SQLite store {self.path} was closed")
        if self.memory:
            if self._shared is None:
                self._shared = self._open()
            with self._lock:
                yield self._shared
            return
        with self._lock:
            conn, file = self._idle.pop() if self._idle else (None, None)
        if conn is not None and file != self._identity():
            # the file was deleted or replaced under this connection, which would go on in the old one unseen by
            # any other process: let go of it, and go on in the file at the path (created anew if missing)
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            conn = None
        if conn is None:
            conn = self._open()
            file = self._identity()
            if file != self._file:  # a file this store has not set up (the first, or one made anew): the schema
                try:
                    self._setup(conn)
                except BaseException:
                    conn.close()
                    raise
                self._file = file
        try:
            yield conn
        finally:
            # back to the idle ones, at most MAX_IDLE of them: a connection per worker thread, kept for good,
            # would hold a page cache each and grow with every thread a pool ever started
            with self._lock:
                keep = not self._closed and len(self._idle) < MAX_IDLE and not conn.in_transaction
                if keep:
                    self._idle.append((conn, file))
            if not keep:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def _identity(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    def _setup(self, conn: sqlite3.Connection) -> None:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if not self.memory and mode != "wal":
                raise StoreUnavailableError(f"the SQLite store {self.path} cannot use WAL mode (it reports {mode!r})")
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = None
                if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'branchc_schema'").fetchone():
                    row = conn.execute("SELECT version FROM branchc_schema WHERE name = 'runs'").fetchone()
                if row is None or row[0] == SCHEMA_VERSION:
                    for statement in SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    columns = {info[1] for info in conn.execute("PRAGMA table_info(runs)")}
                    if "hbytes" not in columns:  # a store of before histories: what its runs' histories hold
                        conn.execute("ALTER TABLE runs ADD COLUMN hbytes INTEGER NOT NULL DEFAULT 0")
                if row is None:
                    conn.execute("INSERT INTO branchc_schema VALUES ('runs', ?)", (SCHEMA_VERSION,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise self._failure(error, "setting it up") from None
        if row is not None and row[0] == 1:
            raise StoreDataError(
                f"the SQLite store {self.path} was written by an older branchc (schema version 1), whose records are "
                f"not sealed: its runs cannot be trusted, and this branchc (schema version {SCHEMA_VERSION}) does not "
                f"open it. End its runs with the branchc that wrote it, or remove the file (with its -wal and -shm "
                f"files) to start an empty store"
            )
        if row is not None and row[0] != SCHEMA_VERSION:
            raise StoreDataError(
                f"the SQLite store {self.path} has schema version {row[0]!r}, and this branchc knows version "
                f"{SCHEMA_VERSION}; use the branchc that wrote it, or another store file"
            )

    def _failure(self, error: sqlite3.Error, doing: str) -> Exception:
        text = str(error)
        if "not a database" in text or "malformed" in text:
            return StoreDataError(
                f"{self.path} is not a branchc SQLite store ({text}); point the store at another file"
            )
        if "locked" in text or "busy" in text:
            return StoreUnavailableError(
                f"the SQLite store {self.path} stayed locked by another connection for more than its busy "
                f"timeout ({self.timeout:g} s) while {doing}; nothing was written. Retry, or raise the timeout "
                f"(sqlite:///PATH?timeout=SECONDS)"
            )
        if "readonly" in text or "disk I/O" in text or "full" in text:
            return StoreUnavailableError(
                f"the SQLite store {self.path} cannot be written while {doing} ({text}): the file, its -wal or -shm "
                f"file or their folder is read-only, or the disk is full; retry once it can be written"
            )
        return StoreUnavailableError(f"the SQLite store {self.path} failed while {doing}: {text}")

    @contextlib.contextmanager
    def _use(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._connection() as conn:
            try:
                yield conn
            except sqlite3.IntegrityError:
                raise
            except sqlite3.Error as error:
                raise self._failure(error, doing) from None

    @staticmethod
    def _raw(row: tuple) -> dict[str, Any]:
        return dict(zip(NAMES, row[1:], strict=False))

    def _record(self, row: tuple, min_version: int | None = None) -> RunRecord:
        return open_record(self.keys, row[0], self._raw(row), min_version=min_version, cache=self._heads)

    # the store

    def create(
        self, record: RunRecord, *, forked_from: tuple[str, int] | None = None, history: bool = True
    ) -> RunRecord:
        record.check()
        made = sealed_head(self.keys, record)
        row = (record.run_id, *made.sealed.columns().values())
        with self._use(f"creating run {record.run_id!r}") as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                # an expired run of the same id is gone for every reader: it gives way, unless it is kept to be ended
                now = time.time()
                gone = conn.execute(
                    f"DELETE FROM runs WHERE run_id = ? AND expires <= ? AND NOT ({KEPT})",
                    (record.run_id, now, now - ENDING_GRACE),
                )
                if gone.rowcount:
                    self._forget(conn, record.run_id)
                conn.execute(f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * len(row))})", row)
                appended = None
                if history and record.status == "waiting" and self.history_kept != 0:
                    appended = self._append(conn, record, {"forked_from": forked_from}, now, None)
                conn.execute("COMMIT")
            except BaseException as error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(error, sqlite3.IntegrityError):
                    raise RunExistsError(f"the store already holds a run {record.run_id!r}") from None
                raise
        self._heads.put(made)
        self._appended.wrote(record.run_id, made.sealed.head, *(appended or (None, frozenset())))
        return record

    def load(self, run_id: str, *, min_version: int | None = None, expired: bool = False) -> RunRecord | None:
        now = time.time()
        where, values = "expires > ?", [now]
        if expired:  # also an unended run kept to be ended
            where, values = f"(expires > ? OR ({KEPT}))", [now, now - ENDING_GRACE]
        with self._use(f"loading run {run_id!r}") as conn:
            row = conn.execute(f"SELECT {WHOLE} FROM runs WHERE run_id = ? AND {where}", (run_id, *values)).fetchone()
        return None if row is None else self._record(row, min_version)

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        appending = appends(changes, self.history_kept)
        with self._use(f"checkpointing run {run_id!r}") as conn:  # one connection for the read and the write

            def read(body: bool, now: float) -> dict[str, Any] | None:
                row = conn.execute(
                    f"SELECT {WHOLE if body else HEAD} FROM runs WHERE run_id = ? AND expires > ?", (run_id, now)
                ).fetchone()
                return None if row is None else self._raw(row)

            def write(sealed: Sealed, kept: str | None, on: bytes | None, now: float, record: RunRecord) -> bool:
                columns = sealed.columns()
                where, values = "run_id = ? AND version = ? AND expires > ?", [run_id, expected_version, now]
                if kept is not None:
                    del columns["body"]  # kept as it is: the record must still be sealed with its key
                    where, values = where + " AND key = ?", [*values, kept]
                if on is not None:  # written on a head known (Heads): the record must still have it
                    where, values = where + " AND head = ?", [*values, on]
                sets = ", ".join(f"{name} = ?" for name in columns)
                update = f"UPDATE runs SET {sets} WHERE {where}"
                if not appending:
                    done = conn.execute(update, [*columns.values(), *values]).rowcount == 1
                    if done:
                        self._appended.carry(run_id, on, sealed.head)
                    return done
                with self._transaction(conn):  # the record and its history entry, or neither
                    done = conn.execute(update, [*columns.values(), *values]).rowcount == 1
                    appended = self._append(conn, record, changes, now, on) if done else None
                if appended is not None:
                    self._appended.wrote(run_id, sealed.head, *appended)
                return done

            return checkpoint_sealed(self.keys, run_id, expected_version, changes, read, write, self._heads)

    @staticmethod
    @contextlib.contextmanager
    def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # history (history.py)

    def _append(
        self, conn: sqlite3.Connection, record: RunRecord, notes: dict[str, Any], now: float, on: bytes | None
    ) -> tuple[int, frozenset[str]]:
        """Entry K of the run's history, with the segments it adds; then only the last `history_kept` kept.
        What this store appended last need not be read again when the write is made on the head it wrote
        then (Appended). The new K and the segments the run holds."""
        run_id = record.run_id
        wanted = list(dict.fromkeys(parts_of(record.saved)[1]))
        known = self._appended.on(run_id, on)
        if known is not None:
            last, refs = known
        else:
            (last,) = conn.execute("SELECT MAX(k) FROM history WHERE run_id = ?", (run_id,)).fetchone()
            names = {segment_name(self.keys, run_id, ref): ref for ref in wanted}
            refs = frozenset(names[name] for (name,) in self._segment_rows(conn, "ref", run_id, names))
        k = 0 if last is None else last + 1
        entry = HistoryEntry.seal(self.keys, run_id, checkpoint_of(record, k, now, notes), record.saved)
        forked, copied = notes.get("forked_from"), {}
        if forked is not None:  # the parent's segments as they are sealed (a seal names no run), named anew
            theirs = segment_names(self.keys, forked[0], [ref for ref in wanted if ref not in refs])
            rows = self._segment_rows(conn, "ref, CAST(key AS BLOB), sealed", forked[0], theirs)
            copied = {theirs[name]: (key.decode(), sealed) for name, key, sealed in rows}
            conn.executemany(
                "INSERT OR IGNORE INTO segments VALUES (?, ?, ?, ?)",
                [(run_id, segment_name(self.keys, run_id, ref), *kept) for ref, kept in copied.items()],
            )
            refs = refs | copied.keys()
        made = new_segments(record.saved, refs, self.keys, run_id)
        conn.executemany("INSERT OR IGNORE INTO segments VALUES (?, ?, ?, ?)", [(run_id, *m[1:]) for m in made])
        conn.execute(
            "INSERT INTO history VALUES (?, ?, ?, ?, ?, ?)", (run_id, k, now, entry.key, entry.info, entry.head)
        )
        added = len(entry.info) + len(entry.head) + sum(len(m[3]) for m in made)
        added += sum(len(sealed) for _, sealed in copied.values())
        if self.history_kept is not None:
            dropped = "FROM history WHERE run_id = ? AND k <= ?"
            (freed,) = conn.execute(
                f"SELECT COALESCE(SUM(length(info) + length(head)), 0) {dropped}", (run_id, k - self.history_kept)
            ).fetchone()
            conn.execute(f"DELETE {dropped}", (run_id, k - self.history_kept))
            added -= freed
        # what the run's history holds, counted with its saved run by usage (the caps); segments stay with the run
        conn.execute("UPDATE runs SET hbytes = hbytes + ? WHERE run_id = ?", (added, run_id))
        return k, refs | {m[0] for m in made}

    @staticmethod
    def _segment_rows(conn: sqlite3.Connection, columns: str, run_id: str, names: Any) -> list[tuple]:
        """`columns` of the run's segments stored under `names`."""
        return conn.execute(
            f"SELECT {columns} FROM segments WHERE run_id = ? AND ref IN (SELECT value FROM json_each(?))",
            (run_id, json.dumps(list(names))),
        ).fetchall()

    @staticmethod
    def _forget(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute("DELETE FROM history WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM segments WHERE run_id = ?", (run_id,))

    def _entries(self, run_id: str, k: int | None = None, *, heads: bool = True) -> list[HistoryEntry]:
        """The run's kept entries (or entry `k`); without their saved runs' heads unless `heads`."""
        where, values = ("run_id = ?", [run_id]) if k is None else ("run_id = ? AND k = ?", [run_id, k])
        head = "head" if heads else "x''"
        with self._use(f"reading the history of run {run_id!r}") as conn:
            rows = conn.execute(
                f"SELECT k, at, CAST(key AS BLOB), info, {head} FROM history WHERE {where} ORDER BY k", values
            ).fetchall()
        return [HistoryEntry(k, at, key.decode(), info, head) for k, at, key, info, head in rows]

    def history(self, run_id: str) -> list[Checkpoint]:
        return [entry.checkpoint(self.keys, run_id) for entry in self._entries(run_id, heads=False)]

    def saved_at(self, run_id: str, k: int) -> tuple[Checkpoint, str]:
        with self._use(f"reading the history of run {run_id!r}") as conn:
            conn.execute("BEGIN")  # one snapshot: the entry and its segments, whatever is written meanwhile
            try:
                row = conn.execute(
                    "SELECT CAST(key AS BLOB), at, info, head FROM history WHERE run_id = ? AND k = ?", (run_id, int(k))
                ).fetchone()
                if row is None:
                    raise KeyError(k)
                entry = HistoryEntry(int(k), row[1], row[0].decode(), row[2], row[3])
                pieces, refs = entry.parts(self.keys, run_id)

                def fetch(names: list[str]) -> dict[str, tuple[str, bytes]]:
                    rows = self._segment_rows(conn, "ref, CAST(key AS BLOB), sealed", run_id, names)
                    return {name: (key.decode(), sealed) for name, key, sealed in rows}

                texts = opened_segments(self.keys, run_id, refs, fetch)
            finally:
                conn.execute("COMMIT")
        return entry.checkpoint(self.keys, run_id), join_saved(run_id, pieces, refs, texts)

    def end_expired(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        with self._use(f"ending the expired run {run_id!r}") as conn:
            expired = f"expires <= ? AND {KEPT}"  # only while it is expired, unended and kept

            def read(body: bool, now: float) -> dict[str, Any] | None:
                row = conn.execute(
                    f"SELECT {WHOLE if body else HEAD} FROM runs WHERE run_id = ? AND {expired}",
                    (run_id, now, now - ENDING_GRACE),
                ).fetchone()
                return None if row is None else self._raw(row)

            def write(sealed: Sealed, kept: str | None, on: bytes | None, now: float, record: RunRecord) -> bool:
                columns = sealed.columns()
                where = f"run_id = ? AND version = ? AND {expired}"
                values: list[Any] = [run_id, expected_version, now, now - ENDING_GRACE]
                if kept is not None:
                    del columns["body"]
                    where, values = where + " AND key = ?", [*values, kept]
                if on is not None:
                    where, values = where + " AND head = ?", [*values, on]
                sets = ", ".join(f"{name} = ?" for name in columns)
                return conn.execute(f"UPDATE runs SET {sets} WHERE {where}", [*columns.values(), *values]).rowcount == 1

            return checkpoint_sealed(self.keys, run_id, expected_version, changes, read, write, self._heads)

    def expired(self, now: float | None = None, limit: int = 100) -> list[str]:
        now = time.time() if now is None else now
        with self._use("finding the expired runs to end") as conn:
            rows = conn.execute(
                f"SELECT run_id FROM runs WHERE expires <= ? AND {KEPT} ORDER BY expires, run_id LIMIT ?",
                (now, now - ENDING_GRACE, int(limit)),
            ).fetchall()
        return [row[0] for row in rows]

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        self._heads.drop(run_id)
        self._appended.drop(run_id)
        with self._use(f"deleting run {run_id!r}") as conn:
            with self._transaction(conn):
                if expected_version is None:
                    gone = conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                else:
                    gone = conn.execute("DELETE FROM runs WHERE run_id = ? AND version = ?", (run_id, expected_version))
                if gone.rowcount:
                    self._forget(conn, run_id)
            if gone.rowcount or expected_version is None:
                return gone.rowcount > 0
            found = conn.execute(
                "SELECT version FROM runs WHERE run_id = ? AND expires > ?", (run_id, time.time())
            ).fetchone()
        if found is None:
            return False
        if type(found[0]) is not int:
            raise StoreDataError.bad_field(run_id, "version", f"is {found[0]!r:.60}, not an integer")
        raise stale_or_older(run_id, expected_version, found[0])

    def list(self, status: str | None = None, tool: str | None = None, limit: int = 100) -> list[RunRecord]:
        where, values = ["expires > ?"], [time.time()]
        if status is not None:
            where.append("status = ?")
            values.append(status)
        if tool is not None:
            where.append("tool = ?")
            values.append(tool)
        with self._use("listing runs") as conn:
            rows = conn.execute(
                f"SELECT {WHOLE} FROM runs WHERE {' AND '.join(where)} ORDER BY updated DESC, run_id LIMIT ?",
                (*values, int(limit)),
            ).fetchall()
        return [self._record(row) for row in rows]

    def rekey(self) -> Rekeyed:
        with self._use("finding the runs to seal anew") as conn:
            (current,) = conn.execute(
                "SELECT COUNT(*) FROM runs WHERE expires > ? AND key = ?", (time.time(), self.keys.sealing_id)
            ).fetchone()
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT run_id FROM runs WHERE expires > ? AND key IS NOT ? ORDER BY run_id",
                    (time.time(), self.keys.sealing_id),
                )
            ]

        def read(run_id: str, now: float) -> dict[str, Any] | None:
            with self._use(f"sealing run {run_id!r} anew") as conn:
                row = conn.execute(
                    f"SELECT {WHOLE} FROM runs WHERE run_id = ? AND expires > ?", (run_id, now)
                ).fetchone()
            return None if row is None else self._raw(row)

        def write(sealed: Sealed, old_key: str) -> bool:
            with self._use(f"sealing run {sealed.run_id!r} anew") as conn:
                done = conn.execute(
                    "UPDATE runs SET key = ?, head = ?, body = ? WHERE run_id = ? AND version = ? AND key = ?",
                    (sealed.key, sealed.head, sealed.body, sealed.run_id, sealed.version, old_key),
                )
                return done.rowcount == 1

        done = rekey_sealed(self.keys, ids, read, write, current)
        return done._replace(refused=done.refused + self._rekey_history())

    def _rekey_segments(self, conn: sqlite3.Connection, run_id: str) -> list[StoreDataError]:
        """The run's segments sealed and named anew with the first key; those no kept entry names, dropped."""
        try:
            names = segment_names(self.keys, run_id, refs_of(self.keys, run_id, self._entries(run_id)))
        except StoreDataError as error:
            return [error]
        sealing, refused = self.keys.sealing_id, []
        rows = conn.execute(
            "SELECT ref, CAST(key AS BLOB), sealed FROM segments WHERE run_id = ?", (run_id,)
        ).fetchall()
        for name, key, sealed in rows:
            ref, key = names.get(name), key.decode()
            if ref is None:  # of entries dropped (history=N): nothing reads it
                conn.execute("DELETE FROM segments WHERE run_id = ? AND ref = ?", (run_id, name))
                continue
            new_name = segment_name(self.keys, run_id, ref)
            if key == sealing and name == new_name:
                continue
            try:
                new_key, new_sealed = reseal_segment(self.keys, run_id, ref, key, sealed)
            except StoreDataError as error:
                refused.append(error)
                continue
            with self._transaction(conn):
                conn.execute(
                    "INSERT OR REPLACE INTO segments VALUES (?, ?, ?, ?)", (run_id, new_name, new_key, new_sealed)
                )
                if name != new_name:
                    conn.execute("DELETE FROM segments WHERE run_id = ? AND ref = ?", (run_id, name))
        return refused

    def _rekey_history(self) -> tuple[StoreDataError, ...]:
        """History entries and segments sealed anew with the first key, each by a compare-and-swap on its key."""
        refused: list[StoreDataError] = []
        sealing = self.keys.sealing_id
        with self._use("sealing run histories anew") as conn:
            rows = conn.execute(
                "SELECT run_id, k, at, CAST(key AS BLOB), info, head FROM history WHERE key IS NOT ?", (sealing,)
            ).fetchall()
            for run_id, k, at, key, info, head in rows:
                try:
                    new = HistoryEntry(k, at, key.decode(), info, head).resealed(self.keys, run_id)
                except StoreDataError as error:
                    refused.append(error)
                    continue
                conn.execute(
                    "UPDATE history SET key = ?, info = ?, head = ? WHERE run_id = ? AND k = ? AND key = ?",
                    (new.key, new.info, new.head, run_id, k, key.decode()),
                )
            runs = [run for (run,) in conn.execute("SELECT DISTINCT run_id FROM segments ORDER BY run_id")]
            for run_id in runs:
                refused += self._rekey_segments(conn, run_id)
        return tuple(refused)

    def gc(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        with self._use("removing expired runs") as conn, self._transaction(conn):
            expired = f"expires <= ? AND NOT ({KEPT})"
            ids = [
                run for (run,) in conn.execute(f"SELECT run_id FROM runs WHERE {expired}", (now, now - ENDING_GRACE))
            ]
            conn.execute(f"DELETE FROM runs WHERE {expired}", (now, now - ENDING_GRACE))
            for run_id in ids:  # and their histories
                self._forget(conn, run_id)
            return len(ids)

    def usage(self, *statuses: str, owner: str | _Anyone | None = ANYONE) -> Usage:
        where, values = "expires > ?", [time.time()]
        if statuses:
            where += f" AND status IN ({', '.join('?' * len(statuses))})"
            values += statuses
        if owner is not ANYONE:
            where += " AND owner IS ?"
            values.append(owner)
        with self._use("counting runs") as conn:
            count, size = conn.execute(  # a run holds its saved run and its history
                f"SELECT COUNT(*), COALESCE(SUM(size + hbytes), 0) FROM runs WHERE {where}", values
            ).fetchone()
        return Usage(count, size)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conns, self._idle = [conn for conn, _ in self._idle], []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
