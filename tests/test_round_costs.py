"""What a round reads besides its run: the caps' counts (bridge/quotas.py), on a real SQLite store."""

from __future__ import annotations

from typing import Any

import pytest
from _bridge_support import KEYS

from branchc.bridge.quotas import EVERYONE_FOR, QuotaError, RunCaps
from branchc.store.base import RunRecord
from branchc.store.sqlite import SQLiteStore


class Counted(SQLiteStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str | None] = []

    def usage(self, *statuses: str, **owner: Any) -> Any:
        self.reads.append(owner.get("owner", "everyone"))
        return super().usage(*statuses, **owner)


def test_a_growing_run_reads_everyones_usage_at_most_once_a_second(tmp_path, monkeypatch):
    store = Counted(tmp_path / "runs.db", keys=KEYS)
    store.create(RunRecord.new("tool", "x" * 1000, ttl=600, owner="alice"))
    caps = RunCaps(store, max_runs=10, max_bytes=1500, principal_runs=5, principal_bytes=10_000)
    clock = [100.0]
    monkeypatch.setattr("branchc.bridge.quotas.time.monotonic", lambda: clock[0])
    caps.admit("alice", 1100, grows_from=1000)
    caps.admit("alice", 1200, grows_from=1100)  # within the second: everyone's usage as read above
    assert store.reads == ["alice", "everyone", "alice"]
    caps.admit("bob")  # a new run: both read, always
    assert store.reads[-2:] == ["bob", "everyone"]
    clock[0] += EVERYONE_FOR
    with pytest.raises(QuotaError, match="--max-runs-mb"):  # read again: 1000 stored + 600 more is past 1500
        caps.admit("alice", 1600, grows_from=1000)
    assert store.reads[-2:] == ["alice", "everyone"]
    store.close()
