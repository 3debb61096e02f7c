"""The embedded continuation store: one SQLite file in WAL mode, shared by threads and processes.

Each thread has its own connection (sqlite3 connections are not thread-safe); `:memory:` has one,
behind a lock. The rows and every operation on them are sql.py's; a write is one statement or one
`BEGIN IMMEDIATE` transaction, so a checkpoint's compare-and-swap (read the record, check its seal,
`UPDATE ... WHERE version = ?` with the record sealed anew) is atomic across processes; a writer that finds
the file locked waits up to the busy timeout, then gets a StoreUnavailableError. `synchronous=NORMAL` (the
default) survives a killed process; `full` also survives a power cut, at a cost per write. The file and its
-wal and -shm files are mode 0600.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from .base import StoreDataError, StoreUnavailableError
from .history import Appended, retention
from .keys import KeyRing
from .sealed import Heads, store_keys
from .sql import SQLStore

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 2  # 1: records not sealed (refused: its runs cannot be trusted)
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
PRIVATE = 0o600


MAX_IDLE = 4  # open connections kept between uses (more are opened while more threads use the store at once)


class SQLiteStore(SQLStore):
    """Runs in one SQLite file (or `:memory:`, for one process), sealed with `keys` (keys.py). The file and
    its -wal and -shm files are private (mode 0600): made so, or made so when they are this user's; a file
    of another user that others may read is refused."""

    DUPLICATE = (sqlite3.IntegrityError,)

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

    @staticmethod
    def _bytes(column: str) -> str:
        return f"CAST({column} AS BLOB)"

    @staticmethod
    def _among(column: str) -> str:
        return f"{column} IN (SELECT value FROM json_each(?))"

    @staticmethod
    def _listed(values: list[str]) -> str:
        return json.dumps(values)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conns, self._idle = [conn for conn, _ in self._idle], []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
