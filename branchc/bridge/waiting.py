"""`StoreWaitingRuns`: guided mode's waiting runs (bridge.guided's `WaitingRuns`) held in a continuation store,
so they survive a restart and any replica sharing the store can continue them.

A waiting run is a record of status "waiting" under its state id; `take` moves it to "running" by a
compare-and-swap, so across processes and replicas exactly one taker gets it; while its round goes on
it keeps its place (count and bytes); `keep(..., taken=)` deletes that record and creates the next one
under a new id; `release` deletes it; `put_back` makes it "waiting" again. The caps count every run of
the store in those two statuses, so give guided runs a store of their own (a file, a Redis prefix, a PostgreSQL schema).
Across replicas the caps are checked, then written: two starts racing on the last slot may both fit.
A taken run is claimed by the taking process, and kept at least expiry.LEASE seconds more, so the sweeper
does not end it mid-round (expiry.py); put back, it has its own expiry again.

`WaitingCount`: the runs waiting in a store by tool and era, for the `branchc.runs.waiting` gauge.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter

from ..runtime import tracing
from ..store.base import RunMeta, RunNotFoundError, RunRecord, RunStore, StaleRunError
from .expiry import LEASE
from .guided import DEFAULT_MAX_RUN_BYTES, GuidedFullError, GuidedRunTooLargeError, WaitingRun
from .holder import holder

__all__ = ["StoreWaitingRuns", "WaitingCount"]

HELD = ("waiting", "running")
ERA = "guided"  # what a guided run's record says of its era: only such a record is taken by a state id


class StoreWaitingRuns:
    """WaitingRuns over a RunStore, with MemoryWaitingRuns' caps and messages."""

    blocking = True  # its calls wait on a file or the network: GuidedRuns makes them on a worker thread

    def __init__(
        self, store: RunStore, max_runs: int = 1000, max_bytes: int = 256 * 2**20, max_run_bytes: int | None = None
    ) -> None:
        if max_runs < 1 or max_bytes < 1 or (max_run_bytes is not None and max_run_bytes < 1):
            raise ValueError(
                "guided mode needs room for at least one waiting run: max_runs, max_bytes and max_run_bytes >= 1"
            )
        self.store = store
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.max_run_bytes = min(max_bytes, DEFAULT_MAX_RUN_BYTES if max_run_bytes is None else max_run_bytes)

    def __len__(self) -> int:
        return self.store.usage("waiting").count

    @property
    def reserved(self) -> int:
        return self.store.usage("running").count

    @property
    def bytes(self) -> int:
        return self.store.usage(*HELD).bytes

    def sweep(self) -> int:
        return self.store.gc()

    def admit(self, size: int = 0) -> None:
        self.sweep()
        self._fits_alone(size, new=True)
        waiting, taken = self.store.usage("waiting"), self.store.usage("running")
        if waiting.count + taken.count >= self.max_runs:
            answered = f" and {taken.count} are being answered" if taken.count else ""
            raise GuidedFullError(
                f"guided mode is full: {waiting.count} runs wait for answers{answered}, the most it holds "
                f"(--guided-max-runs {self.max_runs}); answer a waiting run, or try again when one expires"
            )
        held = waiting.bytes + taken.bytes
        if held + size > self.max_bytes:
            raise GuidedFullError(
                f"guided mode is full: its waiting runs hold {held} bytes"
                f"{f' and this one needs {size} more' if size else ''}, past the most it holds "
                f"(--guided-max-mb, {self.max_bytes} bytes); answer a waiting run, or try again when one expires"
            )

    def keep(self, run: WaitingRun, *, new: bool, taken: str | None = None) -> str:
        place = self._end(taken) if taken is not None else None
        self._fits_alone(run.size, new=new)
        if new or place is None:
            self.admit(run.size)
        else:
            self.sweep()
            held = self.store.usage(*HELD).bytes
            if held + run.size > self.max_bytes:
                raise GuidedFullError(
                    f"guided mode is full: this run's saved state grew to {run.size} bytes and the other waiting "
                    f"runs hold {held}, past the most it holds (--guided-max-mb, {self.max_bytes} bytes); "
                    f"the run cannot wait for more answers and was ended; call the tool again to start over"
                )
        meta = run.meta or RunMeta(era=ERA)
        record = RunRecord.new(run.tool, run.saved, ttl=0, meta=meta, owner=run.owner)
        # no history: the run's next round is a record of its own, under a new id
        self.store.create(dataclasses.replace(record, expires=run.expires), history=False)
        tracing.checkpoint_written(run.saved, run.tool, "guided")
        return record.run_id

    def take(self, ident: str, owner: str | None = None) -> WaitingRun | None:
        self.sweep()
        record = self.store.load(ident)
        if record is None or record.meta.era != ERA or record.owner != owner:
            return None  # unknown or expired; not a guided run's (a run id is not a state id); another's
        if record.status != "waiting" or record.meta.extra.get("held"):
            return None  # taken, or being continued by `branchc runs resume`
        try:  # claimed by this process, for a while past its expiry if need be (expiry.py: never ended mid-round)
            claimed = dataclasses.replace(record.meta, extra={**record.meta.extra, "claim": holder()})
            expires = max(record.expires, time.time() + LEASE)
            self.store.checkpoint(ident, record.version, status="running", meta=claimed, expires=expires)
        except (StaleRunError, RunNotFoundError):
            return None  # another process or replica took it first
        return WaitingRun(record.tool, record.saved, record.expires, record.meta, record.owner)

    def put_back(self, ident: str, run: WaitingRun) -> None:
        record = self.store.load(ident)
        if record is None:
            if run.expires > time.time():
                meta = run.meta or RunMeta(era=ERA)
                made = RunRecord.new(run.tool, run.saved, ttl=0, run_id=ident, meta=meta, owner=run.owner)
                self.store.create(dataclasses.replace(made, expires=run.expires), history=False)
            return
        meta = {"meta": run.meta} if run.meta is not None else {}  # as it was taken: unclaimed, its own expiry
        self.store.checkpoint(ident, record.version, status="waiting", saved=run.saved, expires=run.expires, **meta)

    def release(self, ident: str) -> None:
        self._end(ident)

    def _end(self, ident: str) -> int | None:
        """End the reservation of the run taken under `ident`: its size, or None when it had none. Even past its
        expiry: its round settled it, so no sweeper may end it afterwards (expiry.py)."""
        record = self.store.load(ident, expired=True)
        if record is None or record.status != "running":
            return None
        try:
            self.store.delete(ident, record.version)
        except StaleRunError:
            return None
        return record.size

    def _fits_alone(self, size: int, *, new: bool) -> None:
        if size > self.max_run_bytes:
            ended = "cannot start waiting" if new else "cannot wait for more answers"
            raise GuidedRunTooLargeError(
                f"this run's saved state is {size} bytes, past the most one waiting guided run may hold "
                f"({self.max_run_bytes} bytes); the run {ended} and was ended; call the tool again to start over "
                f"(a run that keeps what each round answered, in a loop, grows with every round)"
            )


class WaitingCount:
    """The runs waiting in `store`, by (tool, era), read at a metrics scrape (runtime/tracing.py, `waiting_runs`).

    Read from the store, not kept in the process: a run waits between rounds in no process at all, any replica
    may start or end it, and a restarted replica would forget what it counted, so only the store knows; every
    replica on one store reports the same figures (aggregate replicas with max, not sum). Bounded: one count of
    the waiting runs (an index lookup) and the tools and eras of at most `scan` of them, the latest (opening each
    record's head), at most once every `every` seconds per process; waiting runs past `scan` are counted under
    tool and era "(unread)", so the figures always add up to the store's count."""

    def __init__(self, store: RunStore, *, scan: int = 1000, every: float = 5.0) -> None:
        self.store = store
        self.scan = scan
        self.every = every
        self._last: tuple[float, dict[tuple[str, str], int]] = (-every, {})
        self._lock = threading.Lock()

    def __call__(self) -> dict[tuple[str, str], int]:
        with self._lock:
            at, counts = self._last
            if time.monotonic() - at < self.every:
                return counts
            total = self.store.usage("waiting").count
            records = self.store.list(status="waiting", limit=self.scan) if total else []
            found = Counter((record.tool, record.meta.era or "unknown") for record in records)
            if total > len(records):
                found[("(unread)", "(unread)")] += total - len(records)
            self._last = (time.monotonic(), dict(found))
            return self._last[1]
