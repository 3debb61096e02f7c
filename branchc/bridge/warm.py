"""Live runs kept between 2026-07-28 rounds, so the replica that saved a run continues it without loading it.

Each round still saves the whole run (in `request_state`, or in the store) before it answers: any replica
can continue it. But the replica that saved it holds the run machine it just saved, and that machine is
exactly what loading the saved text would rebuild (the codec's whole contract, tested at every suspension
point). So it keeps the machine here, under the key of what continues it: the request_state text it minted,
or the store record's (run id, version) it wrote. The next round that brings that key takes the machine
instead of decoding the text (as Temporal's sticky workflow cache skips a replay). A key is taken once: a
second round from the same state (a retry, a fork) finds nothing and loads the saved text, as any other
replica would. The oldest machines are released (never closed: their runs go on from the saved text, and
their cleanup belongs to wherever the run ends) once more than `size` are kept, or once their saved texts
come to more than `max_bytes` (a live run takes a few times its text in memory).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from ..runtime.machine import Machine

__all__ = ["WarmRuns"]


class WarmRuns:
    """At most `size` live runs (handoff, machine, and a `note` of the caller's: the store record as written, say),
    by the key that continues each, whose saved texts hold at most `max_bytes`; oldest released first."""

    def __init__(self, size: int = 256, max_bytes: int = 32 * 2**20) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0
        self._runs: OrderedDict[Hashable, tuple[Any, Machine, Any]] = OrderedDict()
        # dropped with the bridge, or at exit: released, so that no kept generator is closed (which would run
        # the tool's finally blocks where its run does not end)
        weakref.finalize(self, _release_all, self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def keep(self, key: Hashable, handoff: Any, machine: Machine, note: Any = None) -> None:
        """Keep a machine that was just saved under `key` (its saved copy is what continues the run)."""
        if self.size <= 0 or machine.saved_bytes > self.max_bytes:
            machine.release()
            return
        old = self.take(key)
        self._runs[key] = (handoff, machine, note)
        self.bytes += machine.saved_bytes
        if old is not None and old[1] is not machine:
            old[1].release()
        while len(self._runs) > self.size or self.bytes > self.max_bytes:
            _, (_, oldest, _) = self._runs.popitem(last=False)
            self.bytes -= oldest.saved_bytes
            oldest.release()

    def take(self, key: Hashable) -> tuple[Any, Machine, Any] | None:
        """The machine kept under `key`, now the caller's (None: load the saved copy)."""
        kept = self._runs.pop(key, None)
        if kept is not None:
            self.bytes -= kept[1].saved_bytes
        return kept

    def release_all(self) -> None:
        _release_all(self._runs)
        self.bytes = 0


def _release_all(runs: OrderedDict[Hashable, tuple[Any, Machine, Any]]) -> None:
    while runs:
        _, (_, machine, _) = runs.popitem(last=False)
        machine.release()
