"""`open_store(url)`: a continuation store from the URL `branchc serve --store` and `branchc runs` take.

    sqlite:///runs.db              a file, relative to the working folder
    sqlite:////var/lib/branchc.db  an absolute path (four slashes)
    sqlite:///:memory:             this process only (tests)
    redis://127.0.0.1:6379/0       Redis (rediss:// for TLS; redis://:PASSWORD@HOST:PORT/DB)
    postgresql://USER:PASSWORD@HOST:5432/DB   PostgreSQL (postgres:// too; libpq's URL: several HOST:PORT,
                                   ?host=/run/postgresql for a socket, ?sslmode=..., PGPASSWORD or .pgpass)
    none                           no store: runs live in request_state or in memory

Options go in the query: sqlite `?timeout=SECONDS` (busy timeout, 5) and `&synchronous=normal|full`;
redis `?prefix=branchc:` (key prefix) and `&timeout=SECONDS` (5); postgresql `?schema=branchc` (the schema
of its tables), `&timeout=SECONDS` (5: connecting, waiting for a connection or a row's lock) and `&pool=N`
(connections per process, 10), beside libpq's own (LIBPQ); all three `history=N|all`, how many of each run's
past checkpoints to keep (all, by default; 0 keeps none; `branchc serve --history`).

Every store seals its records with a key ring (keys.py): `open_store(url, keys=state_keys(KEY, STATE_DIR))`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from .base import RunStore, StoreURLError
from .history import retention
from .sql import SQL_NAME

if TYPE_CHECKING:
    from .keys import KeyRing

__all__ = ["open_store"]

FORMS = "sqlite:///PATH.db, sqlite:///:memory:, redis://HOST:PORT/DB, postgresql://USER@HOST:PORT/DB or none"
# libpq's options a postgresql:// URL may carry beside branchc's (its password goes in the URL's user part, or
# PGPASSWORD, or a .pgpass file: not an option, so it is never shown with them)
LIBPQ = {
    "host": "a host or a socket folder, e.g. /run/postgresql",
    "hostaddr": "an IP address",
    "port": "a port",
    "user": "the role",
    "sslmode": "disable, prefer, require, verify-ca or verify-full",
    "sslrootcert": "a CA file",
    "sslcert": "a client certificate file",
    "sslkey": "its key file",
    "passfile": "a .pgpass file",
    "channel_binding": "prefer or require",
    "target_session_attrs": "read-write, primary, any...",
    "application_name": "what pg_stat_activity shows, branchc",
}


def _bad(url: str, part: str, fix: str) -> StoreURLError:
    return StoreURLError(f"store URL {url!r}: {part}; {fix} (a store URL is one of {FORMS})")


def _options(url: str, query: str, allowed: dict[str, str]) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _bad(url, f"the query {query!r} is not NAME=VALUE pairs", "write ?name=value&name=value") from None
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(f"{k} ({v})" for k, v in allowed.items())
            raise _bad(url, f"the option {name!r} is unknown", f"use {known}")
        if name in options:
            raise _bad(url, f"the option {name!r} is given twice", "give it once")
        options[name] = value
    return options


def _seconds(url: str, name: str, value: str | None, default: float) -> float:
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise _bad(url, f"{name}={value!r} is not a number of seconds >= 0", f"write e.g. {name}=5")
    return seconds


def open_store(url: str, keys: KeyRing | None = None, *, history: int | str | None = None) -> RunStore | None:
    """The store `url` names (None for "none"), sealing its records with `keys` (which every store needs) and
    keeping `history` past checkpoints of each run (None: all, unless the URL says); StoreURLError naming the
    part that is wrong and the fix, MissingExtraError naming the extra a backend needs (redis: `pip install
    'branchc[redis]'`; postgresql: 'branchc[postgres]'), StoreKeyError without keys."""
    if not isinstance(url, str) or not url.strip():
        raise _bad(str(url), "it is empty", "name a store")
    text = url.strip()
    if text.lower() == "none":
        return None
    scheme, sep, _ = text.partition("://")
    if not sep:
        raise _bad(url, "it has no scheme", "start it with sqlite:///, redis:// or postgresql://, or write none")
    scheme = scheme.lower()
    if scheme == "sqlite":
        return _sqlite(url, text, keys, history)
    if scheme in ("redis", "rediss"):
        return _redis(url, text, keys, history)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url, text, keys, history)
    if scheme in ("mysql", "file"):
        raise _bad(url, f"the scheme {scheme!r} is not a store branchc has", "use sqlite:/// for a file")
    raise _bad(url, f"the scheme {scheme!r} is unknown", "use sqlite, redis or postgresql")


HISTORY = "checkpoints kept per run, a number or all"


def _history(url: str, options: dict[str, str], given: int | str | None) -> int | None:
    if "history" in options and given is not None:
        raise _bad(url, "history= is given in the URL and apart from it", "give it once")
    value = options.get("history", given)
    try:
        return retention(value)
    except ValueError:
        raise _bad(
            url, f"history={value!r} is not a number of checkpoints or all", "write history=all or history=10"
        ) from None


def _sqlite(url: str, text: str, keys: KeyRing | None, history: int | str | None) -> RunStore:
    from .sqlite import SYNCHRONOUS, SQLiteStore

    rest = text[len("sqlite://") :]
    path, _, query = rest.partition("?")
    if not path.startswith("/"):
        raise _bad(
            url,
            f"the host part {path.split('/')[0]!r} has no meaning for SQLite",
            "write sqlite:///relative/path.db (three slashes) or sqlite:////absolute/path.db",
        )
    path = path[1:]
    if not path:
        raise _bad(url, "it names no file", "write sqlite:///runs.db, or sqlite:///:memory: for this process only")
    options = _options(
        url,
        query,
        {
            "timeout": "busy timeout in seconds, 5",
            "synchronous": f"one of {', '.join(SYNCHRONOUS)}",
            "history": HISTORY,
        },
    )
    synchronous = options.get("synchronous", "normal").lower()
    if synchronous not in SYNCHRONOUS:
        raise _bad(url, f"synchronous={synchronous!r} is not a mode", f"use one of {', '.join(SYNCHRONOUS)}")
    timeout = _seconds(url, "timeout", options.get("timeout"), 5.0)
    kept = _history(url, options, history)
    return SQLiteStore(path, keys=keys, timeout=timeout, synchronous=synchronous, history=kept)


def _redis(url: str, text: str, keys: KeyRing | None, history: int | str | None) -> RunStore:
    parts = urlsplit(text)
    if not parts.hostname:
        raise _bad(url, "it names no host", "write redis://HOST:PORT/DB, e.g. redis://127.0.0.1:6379/0")
    try:
        parts.port  # noqa: B018 - raises for a port that is no number
    except ValueError:
        raise _bad(url, f"the port in {parts.netloc!r} is not a number", "write redis://HOST:6379/0") from None
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise _bad(url, f"the database {db!r} is not a number", "write the database index, e.g. /0")
    options = _options(
        url, parts.query, {"prefix": "key prefix, branchc:", "timeout": "seconds, 5", "history": HISTORY}
    )
    prefix = options.get("prefix", "branchc:")
    if not prefix:
        raise _bad(url, "prefix= is empty", "give a key prefix such as branchc: or leave the option out")
    timeout = _seconds(url, "timeout", options.get("timeout"), 5.0)
    if timeout == 0:
        raise _bad(url, "timeout=0 would fail every call", "give seconds > 0")
    plain = urlunsplit((parts.scheme, parts.netloc, parts.path or "/0", "", ""))
    kept = _history(url, options, history)
    from .redis import RedisStore  # the URL is checked first, with or without the redis package

    return RedisStore(plain, keys=keys, prefix=prefix, timeout=timeout, history=kept)


def _postgres(url: str, text: str, keys: KeyRing | None, history: int | str | None) -> RunStore:
    parts = urlsplit(text)
    hosts = parts.netloc.rpartition("@")[2]
    for host in hosts.split(",") if hosts else ():  # libpq's several HOST:PORT, tried in turn
        port = host.rpartition("]")[2].partition(":")[2]  # after an IPv6 address's brackets
        if port and not port.isdigit():
            raise _bad(url, f"the port in {host!r} is not a number", "write postgresql://USER@HOST:5432/DB")
    database = parts.path[1:]
    if "/" in database:
        raise _bad(url, f"the database {database!r} has a slash", "write one database name, e.g. /branchc")
    options = _options(
        url,
        parts.query,
        {
            "schema": "the schema of its tables, branchc",
            "timeout": "seconds, 5",
            "pool": "connections per process, 10",
            "history": HISTORY,
            **LIBPQ,
        },
    )
    schema = options.pop("schema", "branchc")
    if not SQL_NAME.fullmatch(schema):
        raise _bad(
            url, f"schema={schema!r} is not a lower-case SQL name", "write letters, digits and _, e.g. schema=branchc"
        )
    timeout = _seconds(url, "timeout", options.pop("timeout", None), 5.0)
    if timeout == 0:
        raise _bad(url, "timeout=0 would fail every call", "give seconds > 0")
    pool = options.pop("pool", "10")
    if not (pool.isdigit() and 0 < int(pool) <= 1000):
        raise _bad(url, f"pool={pool!r} is not a number of connections from 1 to 1000", "write e.g. pool=10")
    kept = _history(url, options, history)
    options.pop("history", None)
    query = "&".join(f"{name}={quote(value, safe='/:,')}" for name, value in options.items())
    plain = f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")  # // kept, host or not
    from .postgres import PostgresStore  # the URL is checked first, with or without psycopg

    return PostgresStore(plain, keys=keys, schema=schema, timeout=timeout, pool=int(pool), history=kept)
