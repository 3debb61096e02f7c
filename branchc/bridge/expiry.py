"""Abandoned runs: a waiting run whose client never comes back is ended when it expires, exactly once.

A 2026-07-28 run in a store (durable.py) or a guided run (waiting.py, guided.py) waits between calls for a
client that may never return. Ending it means running its `finally` blocks, once, in the code that saved it,
and saying so in its record. So when such a record expires, the store keeps it (base.ENDING_GRACE) instead of
dropping it, invisible to every read but `expired` and `load(..., expired=True)`, and `end_expired_runs`
ends each one it can:

- its tool comes from the tools given (a server's own; `branchc runs gc --tools PATH`), never from a path the
  record names, and must be the code that saved it (its code hash): a run of other tools or another build
  is left for a server or a gc that has them;
- a run being answered is left until its round ends: a round claimed by a process that still runs (a round
  claim stretches the record's expiry by LEASE, so a round in flight does not expire under itself), or held
  live (a handshake-era call, a `branchc runs resume`);
- it is marked "expired" by the store's compare-and-swap on the expired record (`end_expired`), so of
  replicas and `runs gc` sweeping at once exactly one wins, and only the winner halts the run: its `finally`
  blocks run once, there; the ended record is kept KEEP seconds, so `branchc runs show` says how it ended.

`Sweeper` does this periodically in a server (`branchc serve`, over stdio and HTTP, and any server made by
`create_server`: it starts with the server's lifespan; `attach_sweeper` adds it to a server `mount` was
given). Guided runs held in process memory (no store) have no record: `MemoryWaitingRuns` ends those itself
when it sweeps them (`end_saved_run`), and the sweeper sweeps it too.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..runtime.runstate import load_run
from ..runtime.tool import Tool
from ..store.base import UNENDED, RunStore, StoreDataError, StoreError
from .durable import store_io
from .holder import describe_holder, holder, holder_alive
from .runs import Cancelled, MovedOnError, RunsError, end_run, saved_by

__all__ = [
    "KEEP",
    "LEASE",
    "Left",
    "Swept",
    "Sweeper",
    "attach_sweeper",
    "end_abandoned",
    "end_expired_runs",
    "end_saved_run",
    "sweeping",
]

LEASE = 300.0  # seconds a round claimed on a host that cannot be checked counts as being answered (durable's)
KEEP = 86400.0  # seconds an ended run's record is kept, for `branchc runs list/show`
MOST_INTERVAL = 60.0  # the sweeper's default interval: a quarter of the shortest TTL, between these two
LEAST_INTERVAL = 0.5
BATCH = 1000  # expired runs looked at per sweep of a store


@dataclass(frozen=True)
class Left:
    """An expired run not ended by this sweep, and why (the fix, where there is one)."""

    run_id: str
    tool: str
    reason: str


@dataclass
class Swept:
    """What one sweep of a store did: the runs it ended (each a `Cancelled`: its record, what its finally
    blocks logged, the error they raised) and the expired runs it left."""

    ended: list[Cancelled] = field(default_factory=list)
    left: list[Left] = field(default_factory=list)


def end_expired_runs(
    store: RunStore, tools: Mapping[str, Tool], *, by: str, lease: float = LEASE, keep: float = KEEP
) -> Swept:
    """End every expired waiting run of `store` that `tools` saved (see the module's doc); `by` says who
    ended it, in its record. Synchronous: a server calls it on a worker thread."""
    swept = Swept()
    for ident in store.expired(limit=BATCH):
        try:
            record = store.load(ident, expired=True)
        except StoreDataError as error:
            swept.left.append(Left(ident, "", str(error)))
            continue
        if record is None or record.status not in UNENDED or record.expires > time.time():
            continue  # ended, or moved on, since it was listed
        reason = _busy(record, lease)
        if reason is None and not record.saved:
            reason = "its record holds no saved run, so its finally blocks cannot run"
        if reason is not None:
            swept.left.append(Left(ident, record.tool, reason))
            continue
        try:
            saved_by(record, tools)
        except RunsError as error:
            swept.left.append(Left(ident, record.tool, str(error)))
            continue
        now = time.time()
        note = {"expired": {"at": now, "by": by, "was": record.status, "expires": record.expires}}
        try:
            swept.ended.append(end_run(record, store.end_expired, "expired", note, expires=now + keep))
        except MovedOnError:
            continue  # another replica or `runs gc` ended it first: its cleanup ran there
        except (RunsError, StoreError) as error:
            swept.left.append(Left(ident, record.tool, str(error)))
    return swept


def _busy(record: Any, lease: float) -> str | None:
    """Why an expired run cannot be ended now (a round of it is being answered, or it is held live), or None."""
    extra, now = record.meta.extra, time.time()
    if record.status == "running":
        claim = extra.get("claim") if isinstance(extra.get("claim"), dict) else {}
        try:
            since = now - float(claim.get("at", record.updated))
        except (TypeError, ValueError):
            since = now - record.updated
        alive = holder_alive(claim) if claim.get("pid") else None
        if alive:
            return f"a round of it is being answered by {describe_holder(claim)}, which still runs"
        if alive is None and since < lease:
            where = describe_holder(claim) if claim.get("pid") else "a server"
            return f"a round of it is being answered by {where} (for {since:.0f} s; ended once that is {lease:.0f} s)"
    held = extra.get("held")
    if held:
        alive = holder_alive(held)
        if alive:
            return f"it is held by {describe_holder(held)}, which still runs (a server waiting on its client)"
        if alive is None:
            return (
                f"it is held by {describe_holder(held)}, another host, which cannot be checked from here; once that "
                f"process is gone, end it with `branchc runs cancel {record.run_id} --tools PATH --force`"
            )
    return None


def end_saved_run(tool: str, saved: str) -> list[tuple[Any, ...]]:
    """Halt a run held only as its saved text in this process (an in-memory guided run that expired), so its
    finally blocks run once, here; what they logged. Nothing else holds it, so nothing else ends it."""
    _, machine = load_run(saved)
    machine.halt()
    return machine.take_outbox()


def end_abandoned(run: Any) -> None:
    """End an in-memory guided run (a guided.WaitingRun) that expired unanswered, and say so on stderr."""
    try:
        end_saved_run(run.tool, run.saved)
    except Exception as error:  # its sweep goes on with the other runs
        say(f"a guided run of tool {run.tool!r} expired unanswered, and ending it failed: {error}")
        return
    say(f"a guided run of tool {run.tool!r} expired unanswered; it was ended here and its finally blocks ran once")


def say(text: str) -> None:
    """One line on the server's stderr (stdio serving keeps stdout for the protocol)."""
    print(f"branchc: {text}", file=sys.stderr, flush=True)


def default_interval(bridge: Any) -> float:
    """A quarter of the shortest TTL a run of `bridge` waits with, between LEAST_INTERVAL and MOST_INTERVAL s."""
    ttls = [getattr(getattr(bridge, name, None), "ttl", None) for name in ("durable", "guided")]
    shortest = min((float(ttl) for ttl in ttls if ttl), default=4 * MOST_INTERVAL)
    return min(MOST_INTERVAL, max(LEAST_INTERVAL, shortest / 4))


class Sweeper:
    """Ends the expired runs of a bridge (durable rounds' store, guided runs' store or memory) every `interval`
    seconds (default: `default_interval`), with the bridge's own tools; `report` gets one line per run ended, and
    once per run left, why."""

    def __init__(
        self, bridge: Any, *, interval: float | None = None, report: Callable[[str], None] | None = None
    ) -> None:
        self.bridge = bridge
        self.interval = default_interval(bridge) if interval is None else interval
        self.report = report or say
        self.by = f"the sweeper of {describe_holder(holder())}"
        self._told: set[str] = set()

    def stores(self) -> list[RunStore]:
        """The stores the bridge's runs wait in (each once)."""
        found: list[RunStore] = []
        durable = getattr(self.bridge, "durable", None)
        waiting = getattr(getattr(self.bridge, "guided", None), "store", None)
        for store in (getattr(durable, "store", None), getattr(waiting, "store", None)):
            if store is not None and all(store is not seen for seen in found):
                found.append(store)
        return found

    @property
    def needed(self) -> bool:
        """Whether any run of the bridge can wait between calls (a store, or guided runs)."""
        return bool(self.stores()) or getattr(self.bridge, "guided", None) is not None

    async def sweep(self) -> list[Swept]:
        """One sweep: each store's expired runs ended (then its gc), and the in-memory guided runs swept."""
        done = []
        for store in self.stores():
            swept = await store_io(end_expired_runs, store, self.bridge.tools, by=self.by)
            await store_io(store.gc)
            self._tell(swept)
            done.append(swept)
        guided = getattr(self.bridge, "guided", None)
        if guided is not None and not getattr(guided.store, "blocking", False):
            guided.store.sweep()  # in memory: MemoryWaitingRuns ends what expired (end_saved_run)
        return done

    def _tell(self, swept: Swept) -> None:
        for ended in swept.ended:
            record = ended.record
            failed = f"; its cleanup failed: {ended.cleanup_error}" if ended.cleanup_error is not None else ""
            self.report(
                f"run {record.run_id} of tool {record.tool!r} expired unanswered; it was ended here and its finally "
                f"blocks ran once{failed}"
            )
        for left in swept.left:
            if left.run_id not in self._told:
                self._told.add(left.run_id)
                self.report(f"run {left.run_id} expired but was not ended here: {left.reason}")

    async def run(self) -> None:
        """Sweep every `interval` seconds until cancelled; a failed sweep (the store down) is reported, and the
        next one tries again."""
        while True:
            await anyio.sleep(self.interval)
            try:
                await self.sweep()
            except Exception as error:  # a server goes on; the next sweep tries again
                self.report(f"sweeping expired runs failed ({type(error).__name__}: {error}); trying again later")


@contextlib.asynccontextmanager
async def sweeping(bridge: Any, interval: float | None = None) -> AsyncIterator[Sweeper | None]:
    """The bridge's sweeper running in the background while the block runs (None when no run of it can wait)."""
    sweeper = Sweeper(bridge, interval=interval)
    if not sweeper.needed:
        yield None
        return
    async with anyio.create_task_group() as group:
        group.start_soon(sweeper.run)
        try:
            yield sweeper
        finally:
            group.cancel_scope.cancel()


def attach_sweeper(server: Any, bridge: Any, interval: float | None = None) -> None:
    """Run `bridge`'s sweeper for as long as `server` (an SDK `Server` or `MCPServer`) runs: within its lifespan,
    which stdio serving enters per run and streamable HTTP once per app."""
    from .mounting import lowlevel_server

    lowlevel = lowlevel_server(server, "attach_sweeper() runs a sweeper beside")
    inner = lowlevel.lifespan

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with inner(app) as state, sweeping(bridge, interval):
            yield state

    lowlevel.lifespan = lifespan
