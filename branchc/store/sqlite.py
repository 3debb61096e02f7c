"""The embedded continuation store: one SQLite file in WAL mode, shared by threads and processes.

Each thread has its own connection (sqlite3 connections are not thread-safe); `:memory:` has one,
behind a lock. Every write is one statement in SQLite's own transaction, so a checkpoint's compare-and-swap
(`UPDATE ... WHERE version = ?  RETURNING`) is atomic across processes; a writer that finds the file
locked waits up to the busy timeout, then gets a StoreUnavailableError. `synchronous=NORMAL` (the
default) survives a killed process; `full` also survives a power cut, at a cost per write.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .base import (
    RunExistsError,
    RunNotFoundError,
    RunRecord,
    StaleRunError,
    StoreDataError,
    StoreUnavailableError,
    Usage,
    check_changes,
    checked_record,
    digest,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 1
COLUMNS = "run_id, fmt, tool, status, saved, digest, size, version, created, updated, expires, meta"
SCHEMA = """
CREATE TABLE IF NOT EXISTS branchc_schema (name TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    fmt INTEGER NOT NULL,
    tool TEXT NOT NULL,
    status TEXT NOT NULL,
    saved TEXT NOT NULL,
    digest TEXT NOT NULL,
    size INTEGER NOT NULL,
    version INTEGER NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    expires REAL NOT NULL,
    meta TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_updated ON runs (updated);
CREATE INDEX IF NOT EXISTS runs_by_expires ON runs (expires);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, expires);
"""
SYNCHRONOUS = ("off", "normal", "full", "extra")


MAX_IDLE = 4  # open connections kept between uses (more are opened while more threads use the store at once)


class SQLiteStore:
    """Runs in one SQLite file (or `:memory:`, for one process)."""

    def __init__(self, path: str | Path, *, timeout: float = 5.0, synchronous: str = "normal") -> None:
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

    def _open(self) -> sqlite3.Connection:
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
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                row = conn.execute("SELECT version FROM branchc_schema WHERE name = 'runs'").fetchone()
                if row is None:
                    conn.execute("INSERT INTO branchc_schema VALUES ('runs', ?)", (SCHEMA_VERSION,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise self._failure(error, "setting it up") from None
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

    def _record(self, row: tuple) -> RunRecord:
        run_id = row[0]
        raw = dict(zip(COLUMNS.split(", ")[1:], row[1:], strict=True))
        return checked_record(run_id, raw)

    # the store

    def create(self, record: RunRecord) -> RunRecord:
        record.check()
        row = (
            record.run_id,
            1,
            record.tool,
            record.status,
            record.saved,
            digest(record.saved),
            record.size,
            record.version,
            record.created,
            record.updated,
            record.expires,
            record.meta.to_json(),
        )
        with self._use(f"creating run {record.run_id!r}") as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                # an expired run of the same id is gone for every reader: it gives way
                conn.execute("DELETE FROM runs WHERE run_id = ? AND expires <= ?", (record.run_id, time.time()))
                conn.execute(f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * 12)})", row)
                conn.execute("COMMIT")
            except BaseException as error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(error, sqlite3.IntegrityError):
                    raise RunExistsError(f"the store already holds a run {record.run_id!r}") from None
                raise
        return record

    def load(self, run_id: str) -> RunRecord | None:
        with self._use(f"loading run {run_id!r}") as conn:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM runs WHERE run_id = ? AND expires > ?", (run_id, time.time())
            ).fetchone()
        return None if row is None else self._record(row)

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        check_changes(changes)
        sets = ["version = version + 1", "updated = ?"]
        values: list[Any] = [time.time()]
        if "status" in changes:
            sets.append("status = ?")
            values.append(changes["status"])
        if "saved" in changes:
            saved = changes["saved"]
            sets += ["saved = ?", "digest = ?", "size = ?"]
            values += [saved, digest(saved), len(saved.encode())]
        if "meta" in changes:
            sets.append("meta = ?")
            values.append(changes["meta"].to_json())
        if "expires" in changes:
            sets.append("expires = ?")
            values.append(float(changes["expires"]))
        now = values[0]
        with self._use(f"checkpointing run {run_id!r}") as conn:
            row = conn.execute(
                f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ? AND version = ? AND expires > ? "
                f"RETURNING {COLUMNS}",
                (*values, run_id, expected_version, now),
            ).fetchone()
            if row is None:
                found = conn.execute(
                    "SELECT version FROM runs WHERE run_id = ? AND expires > ?", (run_id, now)
                ).fetchone()
        if row is not None:
            return self._record(row)
        if found is None:
            raise RunNotFoundError(run_id)
        if type(found[0]) is not int:
            raise StoreDataError.bad_field(run_id, "version", f"is {found[0]!r:.60}, not an integer")
        raise StaleRunError(run_id, expected_version, found[0])

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        with self._use(f"deleting run {run_id!r}") as conn:
            if expected_version is None:
                return conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount > 0
            gone = conn.execute("DELETE FROM runs WHERE run_id = ? AND version = ?", (run_id, expected_version))
            if gone.rowcount:
                return True
            found = conn.execute(
                "SELECT version FROM runs WHERE run_id = ? AND expires > ?", (run_id, time.time())
            ).fetchone()
        if found is None:
            return False
        raise StaleRunError(run_id, expected_version, found[0])

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
                f"SELECT {COLUMNS} FROM runs WHERE {' AND '.join(where)} ORDER BY updated DESC, run_id LIMIT ?",
                (*values, int(limit)),
            ).fetchall()
        return [self._record(row) for row in rows]

    def gc(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        with self._use("removing expired runs") as conn:
            return conn.execute("DELETE FROM runs WHERE expires <= ?", (now,)).rowcount

    def usage(self, *statuses: str) -> Usage:
        where, values = "expires > ?", [time.time()]
        if statuses:
            where += f" AND status IN ({', '.join('?' * len(statuses))})"
            values += statuses
        with self._use("counting runs") as conn:
            count, size = conn.execute(
                f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM runs WHERE {where}", values
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
