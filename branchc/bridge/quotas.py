"""What one caller, and all callers, may hold at once: waiting 2026-07-28 runs (count and bytes, in the
store, per principal and in all) and calls in progress (per authenticated principal, in this process).

A store holds what clients leave in it: a run waits there between rounds until it is answered or
expires. Without caps one client could fill it (40 calls with a 3 MB argument made a 615 MB store in
27 s), and everyone else would then be refused. The caps are checked before a new run's before() runs,
again when it is first saved (with its size), and whenever a round saves it grown; a round that would
go past one is refused, and the run waits on as it was (its client may send the round again later).
Across replicas the caps are checked, then written: two starts racing on the last slot may both fit.
A round that only grows a run reads the caller's own usage each time, and everyone's at most once a second
(EVERYONE_FOR seconds: counting every waiting run takes the longest, and a second's growth is small beside
the server-wide cap); a new run reads both.
All unauthenticated callers are one principal for the run caps; the calls-at-once cap applies to
authenticated ones (without authentication, `--max-connections` bounds what callers hold open).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import BranchcError
from ..store.base import RunStore
from .settings import ServeSettings

__all__ = ["CallSlots", "QuotaError", "RunCaps", "run_caps"]

WAITING = ("waiting", "running")  # a run being answered keeps its place


class QuotaError(BranchcError, RuntimeError):
    """A cap this server keeps was reached: the message names it, its flag, and what frees room."""


def _who(owner: str | None) -> str:
    return "unauthenticated callers" if owner is None else f"principal {owner!r}"


EVERYONE_FOR = 1.0


@dataclass(frozen=True)
class RunCaps:
    """Caps on the runs waiting in `store`: `max_runs` and `max_bytes` in all, `principal_runs` and
    `principal_bytes` per owner."""

    store: RunStore
    max_runs: int
    max_bytes: int
    principal_runs: int
    principal_bytes: int
    _everyone: list = field(default_factory=list, compare=False, repr=False)  # [(usage, read at)]: growth's

    def _usage_of_all(self, growth: bool) -> Any:
        """Everyone's usage: read now for a new run, at most EVERYONE_FOR seconds old for a run's growth."""
        now = time.monotonic()
        if growth and self._everyone and now - self._everyone[-1][1] < EVERYONE_FOR:
            return self._everyone[-1][0]
        usage = self.store.usage(*WAITING)
        self._everyone[:] = [(usage, now)]
        return usage

    def admit(self, owner: str | None, size: int = 0, *, grows_from: int | None = None) -> None:
        """Raise QuotaError unless a run of `owner` holding `size` bytes fits: a new one (one more run), or
        one already counted at `grows_from` bytes that now holds `size`. Blocking: call it on a worker thread."""
        more = 0 if grows_from is not None else 1
        added = size - (grows_from or 0)
        if added <= 0 and not more:
            return
        fix = "answer or cancel a waiting run, or try again when one expires"
        mine = self.store.usage(*WAITING, owner=owner)
        if mine.count + more > self.principal_runs:
            raise QuotaError(
                f"{_who(owner)} already has {mine.count} runs waiting for answers, the most one caller may have "
                f"(--principal-max-runs {self.principal_runs}); {fix}"
            )
        if mine.bytes + added > self.principal_bytes:
            raise QuotaError(
                f"{_who(owner)}'s waiting runs would hold {mine.bytes + added} bytes of saved state, past the most "
                f"one caller's may (--principal-max-mb, {self.principal_bytes} bytes); {fix}"
            )
        everyone = self._usage_of_all(growth=not more)
        if everyone.count + more > self.max_runs:
            raise QuotaError(
                f"this server holds {everyone.count} waiting runs, the most it holds (--max-runs {self.max_runs}); "
                f"try again when one is answered or expires"
            )
        if everyone.bytes + added > self.max_bytes:
            raise QuotaError(
                f"this server's waiting runs would hold {everyone.bytes + added} bytes of saved state, past the "
                f"most it holds (--max-runs-mb, {self.max_bytes} bytes); try again when one is answered or expires"
            )


class CallSlots:
    """At most `limit` calls in progress at once per authenticated principal, in this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._busy: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def slot(self, principal: str | None) -> Iterator[None]:
        """A slot for one call of `principal` (None: unauthenticated, not counted), or QuotaError."""
        if principal is None:
            yield
            return
        with self._lock:
            busy = self._busy.get(principal, 0)
            if busy >= self.limit:
                raise QuotaError(
                    f"principal {principal!r} has {busy} calls in progress, the most one caller may have at once "
                    f"(--principal-max-calls {self.limit}); wait for one to finish"
                )
            self._busy[principal] = busy + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._busy[principal] - 1
                if left:
                    self._busy[principal] = left
                else:
                    del self._busy[principal]


def run_caps(store: RunStore | None, settings: ServeSettings) -> RunCaps | None:
    """The caps `settings` put on the waiting runs of `store` (None without a store: request_state carries
    each run, and the client holds it)."""
    if store is None:
        return None
    mib = 2**20
    return RunCaps(
        store,
        settings.max_runs,
        int(settings.max_runs_mb * mib),
        settings.principal_max_runs,
        int(settings.principal_max_mb * mib),
    )
