"""Continuation stores: suspended runs at rest, shared by processes and replicas.

`open_store(url, keys)` opens one (sqlite:///PATH, redis://HOST:PORT/DB, postgresql://USER@HOST:PORT/DB, or
none); base.py holds the record (`RunRecord`, `RunMeta`), the `RunStore` protocol and the errors; keys.py the
`KeyRing` every record is sealed with and `state_keys`, which finds it; sealed.py the sealed layout; sql.py
what the SQL stores share. The backends load on demand, so importing this package needs neither the redis
client, psycopg nor a database. The stores know nothing of
serving: guided mode's waiting runs in a store are the bridge's `StoreWaitingRuns` (bridge/waiting.py).
"""

from .base import (
    RECORD_FORMAT,
    STATUSES,
    Rekeyed,
    RunExistsError,
    RunMeta,
    RunNotFoundError,
    RunRecord,
    RunStore,
    StaleRunError,
    StoreDataError,
    StoreError,
    StoreUnavailableError,
    StoreURLError,
    Usage,
    WaitPoint,
    new_run_id,
)
from .keys import KeyRing, StoreKeyError, state_keys
from .url import open_store

__all__ = [
    "RECORD_FORMAT",
    "STATUSES",
    "KeyRing",
    "Rekeyed",
    "RunExistsError",
    "RunMeta",
    "RunNotFoundError",
    "RunRecord",
    "RunStore",
    "StaleRunError",
    "StoreDataError",
    "StoreError",
    "StoreKeyError",
    "StoreURLError",
    "StoreUnavailableError",
    "Usage",
    "WaitPoint",
    "new_run_id",
    "open_store",
    "state_keys",
]
