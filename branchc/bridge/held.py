"""Runs held live by a process, written down in the store at every suspension.

In the handshake era (MCP up to 2025-11-25) a run lives in the server process for the whole call, waiting on
the client mid-call; `branchc runs resume` holds one the same way while it asks the terminal. With a store,
`HeldRun` is the driver's checkpoint (driver.Checkpoint): at every suspension, before any request of it is
asked, the run's text is written to its record (status "waiting", where each branch waits, what it asks),
marked as held by this process (meta.extra["held"]: host, pid and the process's start time), and each answer
is a compare-and-swap on the record before the run moves on with it. If the process
dies, the record stays, so the run can be listed and continued (`branchc runs resume`) or cancelled
(`branchc runs cancel`) from its last suspension. Those first check that the holder is gone (on this host,
by its pid and start time; a holder on another host needs --force); every write is a compare-and-swap, so a
holder that was in fact alive finds its run taken over at its next checkpoint and stops without its cleanup
(RunTakenOverError), which the taker runs: the run is never continued twice.

When the run ends, its record says how (done, failed or cancelled), with the result for `branchc runs show`,
and expires after the store's TTL like every ended run.

A server that drains (SIGTERM, operations.py) hands over the runs it holds that still wait on their client
(`release`): each record loses its holder's mark and says it was released (meta.extra["released"]), the waits on
the client are given up, and the live copy is let go of without its cleanup (RunTakenOverError, as for a run
taken over), so `branchc runs resume` continues it at once, from where it waited, and its `finally` blocks and
after() run once, there. A run that is stepping when asked is handed over at its next suspension, or ends here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import anyio
import anyio.to_thread

from ..runtime import tracing
from ..runtime.errors import RunTakenOverError
from ..runtime.machine import Machine
from ..runtime.tool import Tool
from ..store.base import RunNotFoundError, RunRecord, RunStore, StaleRunError, StoreError
from .auth import current_principal
from .connection import Scopes
from .durable import json_data, run_meta, store_io
from .holder import describe_holder, holder

__all__ = ["HELD_TTL", "HeldRun"]

HELD_TTL = 86400.0  # a held run's record outlives its last checkpoint by a day: time to resume it after a crash


class HeldRun:
    """One run's record while this process holds it. `record`: the record to continue (runs resume);
    None: one is created at the run's first suspension (a new handshake-era call)."""

    def __init__(
        self,
        store: RunStore,
        tool: Tool,
        era: str,
        *,
        record: RunRecord | None = None,
        ttl: float = HELD_TTL,
        registry: set[HeldRun] | None = None,
    ) -> None:
        self.store = store
        self.tool = tool
        self.era = era
        self.ttl = ttl
        self.record = record
        self.me = holder()
        self._answers: dict[str, Any] = {}  # since the run last came to wait: its history's next entry has them
        self.registry = registry  # the runs a server holds, which its drain hands over (operations.py)
        self._lock = anyio.Lock()  # one write at a time: the run's own, or its hand-over's
        self._waiting = False  # written down at a suspension and not answered since: it waits on its client
        self._handover: str | None = None  # why it is to be handed over (`release`), once asked
        self.released = False
        self._waits = Scopes()  # the waits on the client, given up when it is handed over

    @property
    def run_id(self) -> str | None:
        return None if self.record is None else self.record.run_id

    async def _io(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await store_io(fn, *args, **kwargs)

    def _meta(self, machine: Machine, extra: dict[str, Any]) -> Any:
        kept = {k: v for k, v in extra.items() if k not in ("held", "claim", "round", "build", "tool", "released")}
        mark = {"held": self.me} if self._handover is None else {"released": self._released_mark()}
        return run_meta(
            self.era if self.record is None else self.record.meta.era, self.tool, machine, extra=kept | mark
        )

    def _released_mark(self) -> dict[str, Any]:
        return {**holder(), "why": self._handover}

    def _handed_over(self) -> RunTakenOverError:
        run_id = self.run_id
        return RunTakenOverError(
            f"{self._handover}: run {run_id!r} was handed over to the store, waiting where it was; "
            f"`branchc runs resume {run_id} --tools PATH` continues it"
        )

    def _unregister(self) -> None:
        if self.registry is not None:
            self.registry.discard(self)

    async def take(self) -> None:
        """Mark the record as held by this process (runs resume), before anything of the run moves."""
        assert self.record is not None
        extra = {k: v for k, v in self.record.meta.extra.items() if k not in ("claim", "round", "released")}
        meta = dataclasses.replace(self.record.meta, extra=extra | {"held": self.me})
        self.record = await self._write(status="waiting", meta=meta)

    async def answering(self, key: str, how: str, value: Any) -> None:
        """An answer arrived: this process still holds the run (a compare-and-swap that refreshes its expiry),
        else RunTakenOverError, before the run moves on with it. Its meta and saved run are given as they stand
        (the record written at this version has them), so the store neither reads the record again nor parses
        it at every answer: it writes on the head it wrote last, only if the record still has it."""
        async with self._lock:
            self._waiting = False
            if self.released:  # handed over while it waited: the answer is not this copy's to take
                raise self._handed_over()
            record = self.record
            assert record is not None
            self.record = await self._write(saved=record.saved, meta=record.meta, expires=time.time() + self.ttl)
        self._answers[key] = json_data(value) if how == "answer" else {how: str(value) if value is not None else None}

    async def saved(self, saved: str, machine: Machine) -> None:
        """The run as it waits now, before its requests are asked; asked to be handed over meanwhile, it is written
        down released, and RunTakenOverError lets go of this copy."""
        async with self._lock:
            self._waiting = False
            if self.record is None:
                meta = self._meta(machine, {})
                record = RunRecord.new(self.tool.name, saved, ttl=self.ttl, meta=meta, owner=current_principal())
                await self._io(self.store.create, record)
                self.record = record
                if self.registry is not None:
                    self.registry.add(self)
            else:
                meta = self._meta(machine, self.record.meta.extra)
                answers, self._answers = self._answers, {}
                # a new wait (answers moved the run) is a new entry of its history; the wait a resume starts at is not
                moved = {"status": "waiting", "answers": answers, "by": current_principal()} if answers else {}
                self.record = await self._write(saved=saved, meta=meta, expires=time.time() + self.ttl, **moved)
            tracing.checkpoint_written(saved, self.tool.name, meta.era)
            if self._handover is not None:
                self.released = True
                self._unregister()
                raise self._handed_over()
            self._waiting = True

    async def release(self, why: str) -> bool:
        """Hand the run over to the store (a server that drains): when it waits on its client, its record is marked
        released (no holder: `branchc runs resume` takes it at once) and its waits are given up, so its driver lets
        go of it without its cleanup; True. A run that is stepping is handed over at its next suspension (or ends
        here first); False."""
        async with self._lock:
            if self.released or self._handover is not None:
                return False
            self._handover = why
            if not self._waiting or self.record is None:
                return False
            extra = {k: v for k, v in self.record.meta.extra.items() if k != "held"}
            meta = dataclasses.replace(self.record.meta, extra=extra | {"released": self._released_mark()})
            try:
                self.record = await self._write(status="waiting", meta=meta)
            except RunTakenOverError:
                pass  # taken over meanwhile (`branchc runs resume --force`): not ours to hand over any more
            self.released = True
            self._waiting = False
            self._unregister()
        self._waits.close()
        return True

    def waiting_on_client(self) -> contextlib.AbstractContextManager[anyio.CancelScope]:
        """A scope around a wait on the client, cancelled when the run is handed over (`release`): then
        `scope.cancelled_caught`, and the wait raises `handed_over()`."""
        return self._waits.scope()

    def handed_over(self) -> RunTakenOverError:
        """The error a wait given up by `release` raises."""
        return self._handed_over()

    async def end(self, status: str, response: dict[str, Any] | None) -> None:
        """The run ended here (done, failed, cancelled): say so, with its response; never raises. After its hand-over
        raced it (a call cancelled as the drain handed it over), this write wins: its cleanup ran here."""
        self._unregister()
        if self.record is None:
            return
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError, RunTakenOverError):
            async with self._lock:
                self._waiting = False
                drop = ("held", "released")
                extra = {k: v for k, v in self.record.meta.extra.items() if k not in drop} | {"ended_by": self.me}
                meta = dataclasses.replace(self.record.meta, waits=(), pending=(), response=response, extra=extra)
                self.record = await self._write(
                    status=status, saved="", meta=meta, expires=time.time() + min(self.ttl, 600.0)
                )

    async def let_go(self) -> None:
        """This process stops holding the run, which stays where it waits (a takeover, or a resume that
        could not start): its record loses the holder's mark; never raises."""
        self._unregister()
        if self.record is None:
            return
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError, RunTakenOverError):
            async with self._lock:
                self._waiting = False
                extra = {k: v for k, v in self.record.meta.extra.items() if k != "held"}
                self.record = await self._write(
                    status="waiting", meta=dataclasses.replace(self.record.meta, extra=extra)
                )

    async def _write(self, **changes: Any) -> RunRecord:
        record = self.record
        assert record is not None
        try:
            return await self._io(self.store.checkpoint, record.run_id, record.version, **changes)
        except RunNotFoundError:
            raise RunTakenOverError(
                f"run {record.run_id!r} is gone from the store (cancelled, deleted, or expired: held runs are kept "
                f"{self.ttl:.0f} s past their last suspension)"
            ) from None
        except StaleRunError:
            now = await self._io(self.store.load, record.run_id)
            how = "" if now is None else f" (it is {now.status} now)"
            raise RunTakenOverError(
                f"run {record.run_id!r} was taken over by another process while {describe_holder(self.me)} held "
                f"it{how}: `branchc runs resume` or `cancel` found this process gone; it stops here, without its "
                f"cleanup, which the other process runs"
            ) from None
