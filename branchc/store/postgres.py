"""The continuation store on PostgreSQL: the database platform teams run, shared by replicas on several hosts.

Its tables live in a schema of their own (`branchc`, or `?schema=NAME`: several stores can share a
database), laid out as SQLite's, and every operation on them is sql.py's. Each store keeps a pool of
connections (psycopg_pool), shared by the threads that call it (the bridge calls the store from worker
threads). A write is one statement or one transaction at READ COMMITTED: its `UPDATE ... WHERE version = ?`
waits for a concurrent writer of the same row, then finds the version moved on, so exactly one writer wins
each version, in any thread, process or host, and a checkpoint's history entry commits with it or not at all.
A write that waits for a row's lock longer than the timeout gives up (lock_timeout), as SQLite's busy timeout.

The schema is made on open (idempotent, under an advisory lock, so replicas starting at once make it once)
and its version checked. A server that is down, restarting or unreachable is a StoreUnavailableError naming
the store's URL without its password; the pool reconnects by itself, checking a connection that sat idle
before it is used, and until it has, a call connects by itself (so it fails at once while the server is away,
and works at once when it is back). It needs psycopg and psycopg-pool (`pip install 'branchc[postgres]'`): without them,
importing this module is a MissingExtraError saying so.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from ..extras import missing_extra

try:
    import psycopg
    from psycopg import errors
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.pq import TransactionStatus
except ImportError as error:
    raise missing_extra("postgres", error) from None
try:
    from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout
except ImportError as error:
    raise missing_extra("postgres", error, part=("the PostgreSQL store", "psycopg-pool", "psycopg_pool")) from None

from .base import RunNotFoundError, RunRecord, StoreDataError, StoreUnavailableError
from .history import Appended, Checkpoint, retention
from .keys import KeyRing
from .sealed import Heads, store_keys
from .sql import SQL_NAME, SQLStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

SCHEMA_VERSION = 1
# the layout: SQLite's (sqlite.py) in PostgreSQL's types; text compared byte by byte (COLLATE "C", as SQLite
# does), sealed values stored as they are (STORAGE EXTERNAL: ciphertext does not compress)
SCHEMA = """
CREATE TABLE {s}.branchc_schema (name TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE {s}.runs (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    fmt INTEGER NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    owner TEXT COLLATE "C",
    version BIGINT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    updated DOUBLE PRECISION NOT NULL,
    expires DOUBLE PRECISION NOT NULL,
    size BIGINT NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    head BYTEA NOT NULL,
    body BYTEA NOT NULL,
    hbytes BIGINT NOT NULL DEFAULT 0
);
ALTER TABLE {s}.runs ALTER COLUMN head SET STORAGE EXTERNAL, ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE INDEX runs_by_updated ON {s}.runs (updated);
CREATE INDEX runs_by_expires ON {s}.runs (expires);
CREATE INDEX runs_by_status ON {s}.runs (status, expires, size);
CREATE INDEX runs_by_owner ON {s}.runs (owner, status, expires, size);
CREATE TABLE {s}.history (
    run_id TEXT COLLATE "C" NOT NULL,
    k INTEGER NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    info BYTEA NOT NULL,
    head BYTEA NOT NULL,
    PRIMARY KEY (run_id, k)
);
ALTER TABLE {s}.history ALTER COLUMN info SET STORAGE EXTERNAL, ALTER COLUMN head SET STORAGE EXTERNAL;
CREATE TABLE {s}.segments (
    run_id TEXT COLLATE "C" NOT NULL,
    ref TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    sealed BYTEA NOT NULL,
    PRIMARY KEY (run_id, ref)
);
ALTER TABLE {s}.segments ALTER COLUMN sealed SET STORAGE EXTERNAL;
"""
TABLES = ("branchc_schema", "runs", "history", "segments")
CHECK_IDLE = 1.0  # seconds a pooled connection may sit idle before it is checked (one round trip) on its next use
RECONNECT = 10.0  # seconds the pool retries (backing off) to replace a lost connection before it starts anew
IDLE_IN_TRANSACTION = 60_000  # ms: a session that holds a run's row locked and sits idle (a stopped client) ends


@functools.lru_cache(maxsize=1024)
def _marks(query: str) -> str:
    """sql.py's `?` marks as psycopg's `%s` (sql.py writes no `%` and no `?` of its own)."""
    return query.replace("?", "%s")


class _Connection:
    """A pooled psycopg connection as sql.py uses one: `execute` and `executemany` with `?` marks, results in
    binary (bytea as bytes, numbers as numbers, nothing to parse)."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw

    def execute(self, query: str, params: Any = ()) -> psycopg.Cursor:
        return self.raw.execute(_marks(query), params, binary=True)

    def executemany(self, query: str, rows: Any) -> None:
        rows = list(rows)
        if rows:
            with self.raw.cursor() as cursor:
                cursor.executemany(_marks(query), rows)


def _storable(text: Any) -> bool:
    """Whether PostgreSQL's text can hold `text`: no NUL, valid UTF-8. A run id that cannot is no run's (a
    guided state_id is a client's text), not a failure of the store."""
    if type(text) is not str or "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def public_url(url: str) -> str:
    """`url` without its password (libpq's other options, in its query, are kept)."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}@{hosts}" if at else hosts
    query = "&".join(o for o in parts.query.split("&") if o and o.partition("=")[0] not in ("password", "sslpassword"))
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


class PostgresStore(SQLStore):
    """Runs in a PostgreSQL database, in the tables of `schema` (made on open), sealed with `keys`. `url` is
    libpq's (postgresql://USER:PASSWORD@HOST:PORT/DATABASE, libpq's options in its query; a password may as
    well come from PGPASSWORD or a .pgpass file); `pool`: at most that many connections at once."""

    DUPLICATE = (errors.UniqueViolation,)
    SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

    def __init__(
        self,
        url: str = "postgresql://127.0.0.1:5432/branchc",
        *,
        keys: KeyRing | None = None,
        schema: str = "branchc",
        timeout: float = 5.0,
        pool: int = 10,
        history: int | str | None = None,
    ) -> None:
        self.url = public_url(url)
        self.keys = store_keys(keys, f"the PostgreSQL store {self.url}")
        self.history_kept = retention(history)
        self._appended = Appended()
        self._heads = Heads()
        if not isinstance(schema, str) or not SQL_NAME.fullmatch(schema):
            raise ValueError(f"a schema is a lower-case SQL name (letters, digits, _; 63 at most), not {schema!r}")
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"the timeout is seconds > 0, not {timeout!r}")
        if type(pool) is not int or pool < 1:
            raise ValueError(f"the pool is a number of connections >= 1, not {pool!r}")
        self.schema, self.timeout, self.pool_size = schema, float(timeout), pool
        try:
            given = conninfo_to_dict(url)
        except psycopg.ProgrammingError as error:
            raise ValueError(f"{self.url} is not a PostgreSQL connection URL libpq takes: {error}") from None
        options = f"-c search_path={schema} -c lock_timeout={math.ceil(self.timeout * 1000)}"
        options += f" -c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION}"
        given.setdefault("application_name", "branchc")
        given["options"] = options
        given["connect_timeout"] = max(2, math.ceil(self.timeout))  # libpq's least
        given["tcp_user_timeout"] = math.ceil(self.timeout * 1000)  # a host gone silent fails a call, not hangs it
        self._conninfo = make_conninfo(**given)
        self._closed = False
        self._lock = threading.Lock()
        self._idle_since: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()
        self._lent = 0  # the pool's connections in use
        self._own = threading.BoundedSemaphore(pool)  # connections made here, beside the pool's (see _take)
        self._down = False  # a connection was lost: the next call connects itself rather than wait on the pool
        conn = self._connect("opening it")  # the reason at once when it cannot connect, not a pool's wait
        try:
            self._setup(conn)
        except psycopg.Error as error:
            raise self._failure(error, "opening it") from None
        finally:
            conn.close()
        self._pool = ConnectionPool(
            self._conninfo,
            kwargs={"autocommit": True},
            min_size=1,
            max_size=pool,
            open=False,
            timeout=self.timeout,
            configure=self._idle,
            name=f"branchc {self.url} {schema}",
            num_workers=2,
            reconnect_timeout=RECONNECT,
        )
        self._pool.open(wait=False)

    # connections

    def _connect(self, doing: str) -> psycopg.Connection:
        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as error:
            raise self._failure(error, doing) from None

    def _idle(self, conn: psycopg.Connection) -> None:
        with self._lock:
            self._idle_since[conn] = time.monotonic()

    def _alive(self, conn: psycopg.Connection) -> bool:
        """Whether a pooled connection may be used: one that sat idle is checked first (a round trip), since a
        server restarted meanwhile closed it."""
        with self._lock:
            since = self._idle_since.get(conn, 0.0)
        if time.monotonic() - since <= CHECK_IDLE:
            return not conn.closed
        try:
            conn.execute("")
        except psycopg.Error:
            conn.close()
            return False
        return True

    def _take(self, doing: str) -> tuple[psycopg.Connection, bool]:
        """A connection for one operation, and whether it is the pool's. The pool reconnects in the background
        and backs off while the server is away; so after a connection was lost (or the pool had none to give
        in time though it is not all in use), a call makes one of its own: it fails at once with the reason
        while the server is away, and works at once when it is back, until the pool has reconnected."""
        wait = 0.05 if self._down else self.timeout
        for _ in range(self.pool_size + 1):  # idle ones a restart closed are let go, each at once
            try:
                conn = self._pool.getconn(timeout=wait)
            except PoolTimeout:
                break
            except PoolClosed:
                raise StoreUnavailableError(f"the PostgreSQL store {self.url} was closed") from None
            if self._alive(conn):
                with self._lock:
                    self._lent += 1
                self._down = False
                return conn, True
            self._pool.putconn(conn)  # closed: the pool makes another
            wait = 0.05  # the server restarted, or is away: not a wait for the pool's reconnection
        with self._lock:
            exhausted = self._lent >= self.pool_size
        if exhausted or not self._own.acquire(timeout=self.timeout):
            raise StoreUnavailableError(
                f"the PostgreSQL store at {self.url} had no free connection for {self.timeout:g} s while {doing}: "
                f"all {self.pool_size} of this process's connections stayed busy; nothing was written. Retry, or "
                f"allow more (?pool=N) or a longer wait (?timeout=SECONDS)"
            )
        try:
            conn = self._connect(doing)
        except BaseException:
            self._own.release()
            self._down = True
            raise
        return conn, False

    @contextlib.contextmanager
    def _use(self, doing: str) -> Iterator[_Connection]:
        if self._closed:
            raise StoreUnavailableError(f"the PostgreSQL store {self.url} was closed")
        conn, pooled = self._take(doing)
        try:
            yield _Connection(conn)
        except self.DUPLICATE:
            raise
        except psycopg.Error as error:
            if conn.broken or conn.closed:
                self._down = True  # the server went away (or this connection did): see _take
            raise self._failure(error, doing) from None
        finally:
            if pooled:
                self._idle(conn)
                with self._lock:
                    self._lent -= 1
                self._pool.putconn(conn)
            else:
                conn.close()
                self._own.release()

    @staticmethod
    @contextlib.contextmanager
    def _transaction(conn: _Connection) -> Iterator[None]:
        conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            if conn.raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                with contextlib.suppress(psycopg.Error):
                    conn.raw.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _bytes(column: str) -> str:
        return f"pg_catalog.convert_to({column}, 'UTF8')"  # (a function of the schema's cannot stand in)

    @staticmethod
    def _among(column: str) -> str:
        return f"{column} = ANY(?)"

    @staticmethod
    def _listed(values: list[str]) -> list[str]:
        return values

    def _setup(self, conn: psycopg.Connection) -> None:
        """The schema's tables made if missing, under a lock of this schema's (replicas open at once), and
        their version checked."""
        s = self.schema
        with conn.transaction():
            conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s))", (f"branchc schema {s}",))
            found = {
                name
                for (name,) in conn.execute("SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s", (s,))
            }
            version = None
            if "branchc_schema" in found:
                row = conn.execute(f"SELECT version FROM {s}.branchc_schema WHERE name = 'runs'").fetchone()
                version = None if row is None else row[0]
            elif found & set(TABLES):
                raise StoreDataError(
                    f"the schema {s!r} of the PostgreSQL store {self.url} holds tables branchc did not make "
                    f"({', '.join(sorted(found & set(TABLES)))}, but no branchc_schema): name a schema of "
                    f"branchc's own (?schema=NAME)"
                )
            if version is None:
                exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (s,)).fetchone()
                if exists is None:  # made only when missing: a schema an administrator made needs no CREATE right
                    conn.execute(f"CREATE SCHEMA {s}")
                if "branchc_schema" not in found:
                    for statement in SCHEMA.format(s=s).split(";"):
                        if statement.strip():
                            conn.execute(statement)
                conn.execute(f"INSERT INTO {s}.branchc_schema VALUES ('runs', %s)", (SCHEMA_VERSION,))
        if version is not None and version != SCHEMA_VERSION:
            raise StoreDataError(
                f"the PostgreSQL store {self.url} (schema {s!r}) has schema version {version!r}, and this branchc "
                f"knows version {SCHEMA_VERSION}; use the branchc that wrote it, or another schema (?schema=NAME)"
            )

    def _failure(self, error: psycopg.Error, doing: str) -> Exception:
        text = " ".join(str(error).split()) or type(error).__name__
        where = f"the PostgreSQL store at {self.url}"
        if isinstance(error, errors.LockNotAvailable):
            return StoreUnavailableError(
                f"{where} kept a row locked by another connection for more than its lock timeout "
                f"({self.timeout:g} s) while {doing}; nothing was written. Retry, or raise the timeout "
                f"(?timeout=SECONDS)"
            )
        if isinstance(error, errors.ReadOnlySqlTransaction):
            return StoreUnavailableError(
                f"{where} is read-only while {doing} ({text}): a standby, or a read-only database; point the "
                f"store at the primary (or add target_session_attrs=read-write with every host)"
            )
        if isinstance(error, errors.InsufficientPrivilege):
            return StoreUnavailableError(
                f"{where} refused {doing}: its role may not use the schema {self.schema!r} ({text}); grant it "
                f"(GRANT USAGE, CREATE ON SCHEMA {self.schema} ...; or CREATE ON DATABASE to let it make the schema)"
            )
        if isinstance(error, errors.UndefinedTable | errors.UndefinedColumn):
            return StoreDataError(
                f"{where} (schema {self.schema!r}) does not have branchc's tables as it made them ({text}): were "
                f"they dropped or altered? Open the store again to make them anew, or restore the database"
            )
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return StoreUnavailableError(
                f"{where} cannot be reached while {doing} ({text}); nothing is known to be written. Check that "
                f"PostgreSQL runs there and takes this role's connections, and retry once it answers (the store "
                f"reconnects by itself)"
            )
        return StoreUnavailableError(f"{where} failed while {doing}: {text}")

    # ids PostgreSQL's text cannot hold (a client's state_id) are no run's

    def load(self, run_id: str, *, min_version: int | None = None, expired: bool = False) -> RunRecord | None:
        return super().load(run_id, min_version=min_version, expired=expired) if _storable(run_id) else None

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        if not _storable(run_id):
            raise RunNotFoundError(run_id)
        return super().checkpoint(run_id, expected_version, **changes)

    def end_expired(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        if not _storable(run_id):
            raise RunNotFoundError(run_id)
        return super().end_expired(run_id, expected_version, **changes)

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        return _storable(run_id) and super().delete(run_id, expected_version)

    def history(self, run_id: str) -> list[Checkpoint]:
        return super().history(run_id) if _storable(run_id) else []

    def saved_at(self, run_id: str, k: int) -> tuple[Checkpoint, str]:
        if not _storable(run_id):
            raise KeyError(k)
        return super().saved_at(run_id, k)

    def create(
        self, record: RunRecord, *, forked_from: tuple[str, int] | None = None, history: bool = True
    ) -> RunRecord:
        if not _storable(record.run_id):
            raise ValueError(f"a run id in PostgreSQL is UTF-8 text without NUL characters, not {record.run_id!r}")
        return super().create(record, forked_from=forked_from, history=history)

    def close(self) -> None:
        self._closed = True
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, schema={self.schema!r})"
