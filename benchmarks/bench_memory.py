"""Memory of suspended runs (issue 12, benchmark 3): 10,000 runs held in the store vs 10,000 suspended coroutines.

Every run is the same small chat: three sampling rounds answered (three user and three assistant messages), the
fourth asked and waiting for its answer. Three ways to hold 10,000 of them, each in a fresh subprocess of its own
(so that one side's garbage, arenas and caches never count against another's):

- coroutines (the baseline): what an SDK handler waiting on a sampling answer holds. One asyncio task per run
  builds its history of `Message`s (branchc's own pydantic message class, so both sides hold the same objects),
  sends each request through a stand-in for the SDK session (a request dict in a table of pending requests, and a
  future the handler awaits), and waits on the fourth future. One shared session, no transport: the cheapest form.
- store: branchc. A Machine of the compiled tool is stepped to the same suspension, its run's text
  (runstate.dump_run) is saved as a RunRecord (with the metadata the bridge writes: waits, pending, code hash) in
  an SQLite store file (WAL, synchronous=normal), and the machine is released. The process keeps only the run ids.
- machines (for reference): the same 10,000 runs as live Machines in memory, not saved.

Each side is measured twice, in two subprocesses: once for the process's resident memory (VmRSS from
/proc/self/status, before and after holding the runs, after gc.collect(); tracemalloc off, as its own tables
would count), once for the Python heap under tracemalloc (bytes traced after minus before). Before either, one run
is made and dropped (not counted), so imports, the compiled tool and the store's first write are in "before".
Disk: the store's files (the database, its -wal and -shm) while open, and the database alone once closed (closing
checkpoints the WAL into it and deletes it); both also as bytes per run, next to the run's saved text.

    python benchmarks/bench_memory.py [--quick] [--count N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

HISTORY = 3  # answered rounds before the one the run waits on
ENDLESS = 10**9  # the tool's round count: no run ends here
HANDOFF = {"turns": ENDLESS}
ERA = "2026-07-28"

TOOLS = textwrap.dedent(
    """
    from pydantic import BaseModel

    from branchc import Context, tool


    class Params(BaseModel):
        turns: int


    chat = tool("chat", params=Params, requires={"sampling"})


    @chat.client
    def chat_client(handoff: dict, ctx: Context):
        for i in range(handoff["turns"]):
            yield ctx.sample(prompt=f"Step {i}: go on.", max_tokens=64)
        return {"turns": len(ctx.messages) // 2}
    """
)

SIDES = ("coroutines", "store", "machines")


def answer(i: int) -> str:
    return f"Reply {i}: a short answer of about the length a model gives to a small step."


def status_kb(field: str) -> int:
    """A field of /proc/self/status, in kB (VmRSS: resident now; VmHWM: the peak)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class Probe:
    """Before/after readings of one side: RSS (kB -> bytes), or the traced Python heap when `heap`."""

    def __init__(self, heap: bool) -> None:
        self.heap = heap
        self.readings: dict[str, int] = {}

    def read(self, name: str) -> None:
        gc.collect()
        if self.heap:
            if not tracemalloc.is_tracing():
                tracemalloc.start()
            self.readings[name] = tracemalloc.get_traced_memory()[0]
        else:
            self.readings[name] = status_kb("VmRSS") * 1024
            self.readings["peak"] = status_kb("VmHWM") * 1024


# -- the coroutine baseline: an SDK-style handler awaiting a sampling answer ----------------------------------


class Session:
    """Stands for an SDK session: each request waits in a table for its response future."""

    def __init__(self) -> None:
        self.next_id = 0
        self.pending: dict[int, tuple[dict, asyncio.Future]] = {}

    async def create_message(self, messages: list, max_tokens: int) -> str:
        self.next_id += 1
        request = {"method": "sampling/createMessage", "params": {"messages": messages, "maxTokens": max_tokens}}
        future = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = (request, future)
        return await future


async def handler(session: Session, handoff: dict) -> dict:
    from branchc.runtime.messages import Message

    messages: list = []
    for i in range(handoff["turns"]):
        messages.append(Message(role="user", content=f"Step {i}: go on."))
        reply = await session.create_message(list(messages), max_tokens=64)
        messages.append(Message(role="assistant", content=reply))
    return {"turns": len(messages) // 2}


async def suspended_tasks(session: Session, count: int) -> list[asyncio.Task]:
    tasks = [asyncio.ensure_future(handler(session, dict(HANDOFF))) for _ in range(count)]
    for turn in range(HISTORY + 1):
        while len(session.pending) < count:
            await asyncio.sleep(0)
        if turn == HISTORY:
            break
        waiting, session.pending = session.pending, {}
        for _, future in waiting.values():
            future.set_result(answer(turn))
    return tasks


async def coroutines_side(count: int, probe: Probe) -> dict:
    warm = Session()
    for task in await suspended_tasks(warm, 1):
        task.cancel()
    await asyncio.sleep(0)
    del warm, task
    probe.read("before")
    session = Session()
    tasks = await suspended_tasks(session, count)
    probe.read("after")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {}


# -- branchc: machines of the compiled tool ------------------------------------------------------------------


def compiled_tool() -> Any:
    from branchc.splitter import load_source

    return load_source(TOOLS, "bench_memory_tools", "bench_memory_tools.py").chat


def suspended_machine(tool: Any) -> Any:
    from branchc.runtime.machine import Machine

    machine = Machine(tool.name, "call-1", tool.limits)
    machine.start(tool.client_fn, dict(HANDOFF), tool.client_fn.__qualname__)
    machine.advance()
    for i in range(HISTORY):
        (key,) = machine.requests
        machine.answer(key, answer(i))
        machine.advance()
        machine.take_outbox()
    assert len(machine.pending) == 1 and len(machine.pending[0].sample.messages) == 2 * HISTORY + 1
    return machine


def machines_side(count: int, probe: Probe) -> dict:
    tool = compiled_tool()
    suspended_machine(tool).release()
    probe.read("before")
    machines = [suspended_machine(tool) for _ in range(count)]
    probe.read("after")
    for machine in machines:
        machine.release()
    return {}


def store_files(path: Path) -> int:
    return sum(os.path.getsize(f"{path}{tail}") for tail in ("", "-wal", "-shm") if os.path.exists(f"{path}{tail}"))


def store_side(count: int, probe: Probe, folder: Path) -> dict:
    from branchc.bridge.durable import run_meta
    from branchc.runtime.runstate import dump_run
    from branchc.store import KeyRing, RunRecord, open_store

    tool = compiled_tool()
    path = folder / f"runs-{'heap' if probe.heap else 'rss'}.db"
    store = open_store(f"sqlite:///{path}", KeyRing.generate())

    def save() -> tuple[str, int]:
        machine = suspended_machine(tool)
        text = dump_run(HANDOFF, machine)
        record = RunRecord.new(tool.name, text, ttl=3600, meta=run_meta(ERA, tool, machine, extra={"round": 1}))
        machine.release()
        store.create(record)
        return record.run_id, record.size

    warm_id, _ = save()
    store.delete(warm_id)
    files_before = store_files(path)
    probe.read("before")
    run_ids, sizes = [], 0
    for _ in range(count):
        run_id, size = save()
        run_ids.append(run_id)
        sizes += size
    probe.read("after")
    files_open = store_files(path)
    usage = store.usage()
    assert usage == (count, sizes), (usage, count, sizes)
    store.close()
    return {
        "disk_open": files_open,
        "disk_open_before": files_before,
        "disk_closed": store_files(path),
        "saved_bytes": sizes,
        "held": len(run_ids),
    }


def child(side: str, count: int, heap: bool, folder: Path) -> None:
    probe = Probe(heap)
    started = time.perf_counter()
    if side == "coroutines":
        extra = asyncio.run(coroutines_side(count, probe))
    elif side == "machines":
        extra = machines_side(count, probe)
    else:
        extra = store_side(count, probe, folder)
    took = time.perf_counter() - started
    print(json.dumps({"side": side, "heap": heap, **probe.readings, **extra, "seconds": took}))


# -- the parent: one subprocess per side and pass, and the table -----------------------------------------------


def run_child(side: str, count: int, heap: bool, folder: Path) -> dict:
    argv = [sys.executable, __file__, "--child", side, "--count", str(count), "--folder", str(folder)]
    out = subprocess.run([*argv, "--heap"] if heap else argv, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_run(value: float, count: int) -> str:
    return f"{value / count:10,.0f}"


def mb(value: float) -> str:
    return f"{value / 2**20:8.1f}"


def ratio(top: float, bottom: float) -> str:
    return f"{top / bottom:.1f}x" if bottom > 0 else "n/a (no growth)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 runs a side instead of 10,000")
    parser.add_argument("--count", type=int, help="runs a side (overrides --quick)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--heap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    count = args.count or (1_000 if args.quick else 10_000)
    if args.child:
        child(args.child, count, args.heap, Path(args.folder))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="branchc-bench-") as name:
        folder = Path(name)
        rss = {side: run_child(side, count, False, folder) for side in SIDES}
        heap = {side: run_child(side, count, True, folder) for side in SIDES}
    grew = {side: rss[side]["after"] - rss[side]["before"] for side in SIDES}
    traced = {side: heap[side]["after"] - heap[side]["before"] for side in SIDES}
    labels = {
        "coroutines": "in-memory coroutines (baseline)",
        "store": "branchc, runs in the SQLite store",
        "machines": "branchc, live machines (no store)",
    }
    took = time.perf_counter() - started
    print(
        f"Memory of {count:,} suspended runs ({HISTORY} rounds answered, the next waiting), "
        f"a fresh process per side and pass ({took:.0f} s)"
    )
    print(
        f"{'':34} | {'RSS before':>10} {'after':>8} {'peak':>8} (MB) | {'RSS/run':>10} {'heap/run':>10} (bytes) | "
        f"{'child s':>7}"
    )
    for side in SIDES:
        row = rss[side]
        print(
            f"{labels[side]:34} | {mb(row['before']):>10} {mb(row['after'])} {mb(row['peak'])}      | "
            f"{per_run(grew[side], count)} {per_run(traced[side], count)}         | {row['seconds']:7.2f}"
        )
    store = rss["store"]
    print()
    print(f"store on disk, {count:,} runs (RSS pass):")
    print(
        f"  saved run text            {per_run(store['saved_bytes'], count)} bytes/run"
        f"  ({store['saved_bytes']:,} bytes in all)"
    )
    print(
        f"  files open (db+wal+shm)   {per_run(store['disk_open'], count)} bytes/run"
        f"  ({store['disk_open']:,} bytes; {store['disk_open_before']:,} before the runs)"
    )
    print(
        f"  db file once closed       {per_run(store['disk_closed'], count)} bytes/run"
        f"  ({store['disk_closed']:,} bytes; the WAL checkpointed into it)"
    )
    print()
    base = grew["coroutines"]
    print("Ratios (per run):")
    print(f"  coroutines RSS / branchc-in-store RSS delta:  {ratio(base, grew['store'])}")
    print(f"  coroutines heap / branchc-in-store heap:       {ratio(traced['coroutines'], traced['store'])}")
    print(f"  coroutines RSS / live machines RSS:            {ratio(base, grew['machines'])}")
    print(f"  store disk (files open) / coroutines RSS:      {store['disk_open'] / base:.2f}x")
    print(f"  store disk (db closed) / coroutines RSS:       {store['disk_closed'] / base:.2f}x")


if __name__ == "__main__":
    main()
