"""Continuation stores: suspended runs at rest, shared by processes and replicas.

`open_store(url)` opens one (sqlite:///PATH, redis://HOST:PORT/DB, or none); base.py holds the record
(`RunRecord`, `RunMeta`), the `RunStore` protocol and the errors. The backends load on demand, so
importing this package needs neither the redis client nor a database. The stores know nothing of
serving: guided mode's waiting runs in a store are the bridge's `StoreWaitingRuns` (bridge/waiting.py).
"""

from .base import (
    RECORD_FORMAT,
    STATUSES,
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
from .url import open_store

__all__ = [
    "RECORD_FORMAT",
    "STATUSES",
    "RunExistsError",
    "RunMeta",
    "RunNotFoundError",
    "RunRecord",
    "RunStore",
    "StaleRunError",
    "StoreDataError",
    "StoreError",
    "StoreURLError",
    "StoreUnavailableError",
    "Usage",
    "WaitPoint",
    "new_run_id",
    "open_store",
]
