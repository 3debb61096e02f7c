"""A run's history and forks (issue 23), as ratios against baselines measured in the same run.

1. Fork at checkpoint K = 10, 100 and 1,000 of a chat whose history grows (bench_resume's "growing" tool: each
   turn adds a prompt and a reply to `ctx.messages`), and take one step from there. The run was saved at every
   one of its 1,000 waits in branchc's SQLite store (history kept, as `branchc serve` keeps it by default):

   - branchc: `fork_run(store, run, K)` (read entry K and its segments, create the new run: its record and the
     first entry of its own history), `load_run` it, answer the pending sample, `dump_run`, checkpoint it;
   - replay: what replay engines do to go back to step K: run the tool's plain generator from the start with
     the first K recorded answers, then the new one, and write the log;
   - LangGraph: time travel, `graph.invoke(Command(resume=answer), config)` with the config of the thread's
     checkpoint at step K (found beforehand with `get_state_history`, not timed), which forks the thread there.
     Skipped, saying so, without langgraph (`pip install -e '.[bench]'`).

   The fork's cost should not grow with the number of checkpoints before K: what it reads is entry K alone.

2. What keeping the history costs a checkpoint, in SQLite and in Redis (a redis-server started here on a
   loopback port): 1,000 waits of the same chat, each saved by `checkpoint`, in a store that keeps every
   entry (history=all) and in one that keeps none (history=0). Time: median of the checkpoints; bytes: what
   each store holds for the run at the end, divided by the number of checkpoints.

    python benchmarks/bench_history.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_resume import HANDOFF, LangGraphRun, answer, langgraph_available, started, step, tools
from bench_store import start_redis

from branchc.bridge.runs import fork_run
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run, load_run
from branchc.store import RunRecord
from branchc.store.keys import KeyRing
from branchc.store.sqlite import SQLiteStore

KEYS = KeyRing([secrets.token_hex(32)])


def timed(fn: Any) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def saved_run(store: Any, tool: Any, waits: int) -> tuple[str, list[float]]:
    """A run of `tool` saved at each of its first `waits` waits; its id and each checkpoint's seconds."""
    machine = started(tool)
    record = store.create(RunRecord.new(tool.name, dump_run(HANDOFF, machine), ttl=3600))
    seconds = []
    for i in range(waits - 1):
        step(machine, answer(i))
        text = dump_run(HANDOFF, machine)
        start = time.perf_counter()
        record = store.checkpoint(record.run_id, record.version, status="waiting", saved=text, answers={"i": i})
        seconds.append(time.perf_counter() - start)
    machine.release()
    return record.run_id, seconds


def branchc_fork(store: SQLiteStore, run_id: str, k: int, reply: str) -> None:
    fork = fork_run(store, run_id, k)
    handoff, machine = load_run(fork.saved)
    step(machine, reply)
    text = dump_run(handoff, machine)
    machine.release()
    store.checkpoint(fork.run_id, fork.version, status="waiting", saved=text)


def replay(tool: Any, answers: list[str], log: sqlite3.Connection) -> None:
    machine = Machine(tool.name, "call-1", tool.limits)
    machine.start(tool.client_fn, dict(HANDOFF), tool.client_fn.__qualname__)
    machine.advance()
    for text in answers:
        step(machine, text)
    log.execute("INSERT OR REPLACE INTO runs VALUES ('fork', ?)", (json.dumps({"answers": answers}),))
    log.commit()


def forks(compiled: Any, native: Any, folder: Path, ks: list[int], rounds: int) -> list[dict]:
    store = SQLiteStore(folder / "history.db", keys=KEYS)
    run_id, _ = saved_run(store, compiled.growing, max(ks) + 1)
    log = sqlite3.connect(folder / "replay.db")
    log.executescript(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE runs (id TEXT PRIMARY KEY, data)"
    )
    missing = langgraph_available()
    graph = configs = None
    if missing is None:
        graph = LangGraphRun("growing", folder / "langgraph.db")
        graph.at("t", max(ks))  # the thread's 1,000 steps, then its checkpoint at each step K (not timed)
        configs = {}
        for snapshot in graph.graph.get_state_history({"configurable": {"thread_id": "t"}}):
            if snapshot.next == ("step",) and snapshot.values["turn"] in ks:
                configs.setdefault(snapshot.values["turn"], snapshot.config)
    rows = []
    for k in ks:
        times: dict[str, list[float]] = {"branchc": [], "replay": [], "langgraph": []}
        recorded = [answer(i) for i in range(k)]
        for r in range(rounds):
            reply = f"another answer {r}"
            times["branchc"].append(timed(lambda k=k, reply=reply: branchc_fork(store, run_id, k, reply)))
            answers = [*recorded, reply]
            times["replay"].append(timed(lambda answers=answers: replay(native.growing, answers, log)))
            if graph is not None:
                times["langgraph"].append(timed(lambda k=k, reply=reply: graph.resume(configs[k], reply)))
        rows.append({"k": k, **{name: statistics.median(ts) if ts else None for name, ts in times.items()}})
    store.close()
    return rows, missing


def stored_bytes_sqlite(path: Path, run_id: str) -> int:
    with sqlite3.connect(path) as conn:
        total = 0
        for table, column in (("runs", "length(head) + length(body)"), ("history", "length(info) + length(head)")):
            (n,) = conn.execute(
                f"SELECT COALESCE(SUM({column}), 0) FROM {table} WHERE run_id = ?", (run_id,)
            ).fetchone()
            total += n
        (n,) = conn.execute(
            "SELECT COALESCE(SUM(length(sealed)), 0) FROM segments WHERE run_id = ?", (run_id,)
        ).fetchone()
        return total + n


def stored_bytes_redis(store: Any, run_id: str) -> int:
    total = 0
    for key in (f"{store.prefix}run:{run_id}", f"{store.prefix}hist:{run_id}", f"{store.prefix}seg:{run_id}"):
        total += sum(len(v) for v in store.client.hvals(key))
    return total


def keeping(compiled: Any, folder: Path, waits: int, redis_url: str | None) -> list[dict]:
    from branchc.store.redis import RedisStore

    rows = []
    backends = [("SQLite", lambda kept, tag: SQLiteStore(folder / f"keep-{tag}.db", keys=KEYS, history=kept))]
    if redis_url:
        backends.append(("Redis", lambda kept, tag: RedisStore(redis_url, keys=KEYS, prefix=f"b{tag}:", history=kept)))
    for name, make in backends:
        row: dict[str, Any] = {"store": name}
        for label, kept in (("all", None), ("none", 0)):
            store = make(kept, label)
            run_id, seconds = saved_run(store, compiled.growing, waits)
            size = stored_bytes_sqlite(store.path, run_id) if name == "SQLite" else stored_bytes_redis(store, run_id)
            row[label] = {
                "ms": statistics.median(seconds) * 1e3,
                "bytes": size / waits,
                "last": store.load(run_id).size,
            }
            store.close()
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and checkpoints")
    args = parser.parse_args()
    compiled, native = tools()
    ks = [10, 100, 1000]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proc, redis_url = start_redis(folder)
        try:
            rows, missing = forks(compiled, native, folder, ks, 5 if args.quick else 15)
            kept = keeping(compiled, folder, 300 if args.quick else 1000, redis_url)
        finally:
            if proc is not None:
                proc.kill()
    print("1. fork at checkpoint K, then one step (median ms; ratio: the other / branchc)")
    print(f"{'K':>6} {'branchc':>9} {'replay':>9} {'LangGraph':>10} | {'replay/b':>9} {'LG/b':>7}")
    for row in rows:
        ours, lg = row["branchc"], row["langgraph"]
        lg_ms, lg_ratio = (f"{lg * 1e3:.2f}", f"{lg / ours:.1f}") if lg else ("-", "-")
        print(
            f"{row['k']:>6} {ours * 1e3:9.2f} {row['replay'] * 1e3:9.2f} {lg_ms:>10} | "
            f"{row['replay'] / ours:9.1f} {lg_ratio:>7}"
        )
    growth = rows[-1]["branchc"] / rows[0]["branchc"]
    print(
        f"branchc's fork at K={ks[-1]} / at K={ks[0]}: {growth:.2f}x (the state at K grows with K; nothing else does)"
    )
    if missing:
        print(f"LangGraph skipped: {missing}")
    print("\n2. what keeping the history costs a checkpoint (median ms per checkpoint; stored bytes per checkpoint)")
    print(
        f"{'store':8} {'ms all':>8} {'ms none':>8} {'ratio':>6} | {'B/ckpt all':>10} {'B/ckpt none':>11} "
        f"{'last run B':>10}"
    )
    for row in kept:
        a, n = row["all"], row["none"]
        print(
            f"{row['store']:8} {a['ms']:8.3f} {n['ms']:8.3f} {a['ms'] / n['ms']:6.2f} | {a['bytes']:10.0f} "
            f"{n['bytes']:11.0f} {a['last']:10d}"
        )
    if not redis_url:
        print("(redis-server not installed: Redis not measured)")


if __name__ == "__main__":
    main()
