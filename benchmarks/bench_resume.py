"""Resume cost against history length (issue 12, benchmark 1), as ratios against baselines measured in the same run.

A run suspended at step N (N samples answered, the next one asked) is resumed with the next answer and stepped
to its next suspension, at N = 10, 100 and 1,000, on two tools:

- bounded: the live state stays bounded (a running summary, at most 400 characters, sent with each sample
  through `ctx.sample(messages=...)`, which `ctx.messages` does not track);
- growing: the live state is the growing chat history (`ctx.sample(prompt=...)`, each answer tracked in
  `ctx.messages`, and every sample sends the whole history).

One resume, by each method (all three read the saved state from, and write it back to, SQLite: one file, WAL,
a commit per write, as LangGraph's SqliteSaver does):

- branchc: read the run's JSON text (runstate.dump_run of its Machine), `load_run` it, answer the pending sample,
  `advance()` to the next suspension, `dump_run` it again, `release()` the live copy, write the text back. The
  same without the SQLite read and write is shown too (column "no store").
- replay: what replay engines do: read the answer log, run the tool's plain (uncompiled) generator from the start
  through the same runtime Machine, feeding the N recorded answers and then the new one, and write the log back.
- LangGraph: a StateGraph whose one node loops on itself, calling `interrupt()` once a step (bounded: the state
  holds the summary; growing: it holds the message list, `Annotated[list, operator.add]`), compiled with
  `langgraph.checkpoint.sqlite.SqliteSaver`; one resume is `graph.invoke(Command(resume=answer), config)` with the
  config of the thread's checkpoint at step N. Skipped, saying so, when langgraph is not installed
  (`pip install -e '.[bench]'`).

Two floors, what any resume kept in the same store must pay at least: the store's bare read of the run's bytes
and a commit of them back ("floor"), and for the growing history that plus json.loads and json.dumps of the
history as plain {role, content} messages ("floor + JSON").

Each run is brought to step N once (not timed); every timed resume starts from that same step-N state (LangGraph
forks from the step-N checkpoint), and its result is checked. The methods run interleaved, one resume each per
round, so that a slow spell of the machine hits all of them alike; figures are medians. Sizes are the saved state
at step N: branchc's run text, replay's answer log, LangGraph's checkpoint row (checkpoint, metadata and the
pending writes, the interrupt among them).

    python benchmarks/bench_resume.py [--quick] [--profile]

`--profile` also prints a cProfile of branchc's resume at the largest size on the growing tool.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import operator
import pstats
import sqlite3
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run, load_run
from branchc.splitter import load_source

SUMMARY_CHARS = 400
ENDLESS = 10**9  # the tools' step count: no run ends during the benchmark

TOOLS = textwrap.dedent(
    f"""
    from pydantic import BaseModel

    from branchc import Context, tool


    class Params(BaseModel):
        n: int


    bounded = tool("bounded", params=Params, requires={{"sampling"}})
    growing = tool("growing", params=Params, requires={{"sampling"}})


    @bounded.client
    def bounded_client(handoff: dict, ctx: Context):
        summary = ""
        for i in range(handoff["n"]):
            prompt = f"Summary so far: {{summary}}\\nStep {{i}}: update the summary."
            reply = yield ctx.sample(messages=[{{"role": "user", "content": prompt}}], max_tokens=64)
            summary = (summary + " " + reply.text)[-{SUMMARY_CHARS}:]
        return {{"summary": summary}}


    @growing.client
    def growing_client(handoff: dict, ctx: Context):
        for i in range(handoff["n"]):
            yield ctx.sample(prompt=f"Step {{i}}: go on.", max_tokens=64)
        return {{"turns": len(ctx.messages) // 2}}
    """
)

WORKLOADS = ("bounded", "growing")
HANDOFF = {"n": ENDLESS}


def answer(i: int) -> str:
    return f"Reply {i}: a short answer of about the length a model gives to a small step."


# -- a store: one SQLite file, WAL, one commit per write (as SqliteSaver) -------------------------------------

# Both stores use these settings: WAL (as SqliteSaver sets), synchronous=NORMAL (a commit survives the process
# being killed, not a power cut; with FULL, an fsync per commit made every figure the disk's latency, and noisy)
PRAGMAS = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.executescript(PRAGMAS)
    return conn


class Store:
    def __init__(self, path: Path) -> None:
        self.conn = connect(path)
        self.conn.executescript("CREATE TABLE runs (id TEXT PRIMARY KEY, data TEXT)")

    def get(self, key: str) -> str:
        (row,) = self.conn.execute("SELECT data FROM runs WHERE id = ?", (key,)).fetchall()
        return row[0]

    def put(self, key: str, data: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO runs (id, data) VALUES (?, ?)", (key, data))
        self.conn.commit()


# -- branchc and replay ----------------------------------------------------------------------------------------


def tools() -> tuple[Any, Any]:
    """(compiled, native) modules of TOOLS."""
    compiled = load_source(TOOLS, "bench_resume_tools", "bench_resume_tools.py")
    native = type(sys)("bench_resume_native")
    exec(compile(TOOLS, "bench_resume_native.py", "exec"), native.__dict__)
    return compiled, native


def started(tool: Any) -> Machine:
    machine = Machine(tool.name, "call-1", tool.limits)
    machine.start(tool.client_fn, dict(HANDOFF), tool.client_fn.__qualname__)
    machine.advance()
    return machine


def step(machine: Machine, text: str) -> None:
    (key,) = machine.requests
    machine.answer(key, text)
    machine.advance()
    machine.take_outbox()


def branchc_at(tool: Any, n: int) -> str:
    """The run's text at step n (not timed)."""
    machine = started(tool)
    for i in range(n):
        step(machine, answer(i))
    text = dump_run(HANDOFF, machine)
    machine.release()
    return text


def branchc_resume(text: str, reply: str) -> str:
    handoff, machine = load_run(text)
    step(machine, reply)
    out = dump_run(handoff, machine)
    machine.release()
    return out


def branchc_stored(store: Store, key: str, reply: str) -> str:
    out = branchc_resume(store.get(key), reply)
    store.put("scratch", out)
    return out


def replay_stored(store: Store, key: str, reply: str, tool: Any) -> tuple[str, Machine]:
    log = json.loads(store.get(key))
    log["answers"].append(reply)
    machine = Machine(tool.name, "call-1", tool.limits)
    machine.start(tool.client_fn, log["handoff"], tool.client_fn.__qualname__)
    machine.advance()
    for text in log["answers"]:
        step(machine, text)
    out = json.dumps(log, separators=(",", ":"), ensure_ascii=False)
    store.put("scratch", out)
    return out, machine


def pending_prompt(machine: Machine) -> Any:
    (request,) = machine.pending
    return request.sample.model_dump(mode="json")


# -- LangGraph -------------------------------------------------------------------------------------------------


def langgraph_available() -> str | None:
    """None when LangGraph and its SQLite checkpointer import; else why not."""
    try:
        import langgraph.checkpoint.sqlite
        import langgraph.graph
        import langgraph.types  # noqa: F401
    except ImportError as error:
        return str(error)
    return None


class BoundedState(TypedDict):
    turn: int
    summary: str


class GrowingState(TypedDict):
    turn: int
    messages: Annotated[list, operator.add]


def bounded_node(state: BoundedState) -> dict:
    from langgraph.types import interrupt

    turn, summary = state["turn"], state["summary"]
    reply = interrupt({"prompt": f"Summary so far: {summary}\nStep {turn}: update the summary."})
    return {"turn": turn + 1, "summary": (summary + " " + reply)[-SUMMARY_CHARS:]}


def growing_node(state: GrowingState) -> dict:
    from langgraph.types import interrupt

    turn = state["turn"]
    prompt = f"Step {turn}: go on."
    reply = interrupt({"prompt": prompt})  # the client reads the history from the state: the cheapest request
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
    return {"turn": turn + 1, "messages": messages}


class LangGraphRun:
    def __init__(self, workload: str, path: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, StateGraph

        self.conn = connect(path)
        self.saver = SqliteSaver(self.conn)
        state, node = (BoundedState, bounded_node) if workload == "bounded" else (GrowingState, growing_node)
        builder = StateGraph(state)
        builder.add_node("step", node)
        builder.add_edge(START, "step")
        builder.add_edge("step", "step")
        self.graph = builder.compile(checkpointer=self.saver)
        self.start = {"turn": 0, "summary": ""} if workload == "bounded" else {"turn": 0, "messages": []}

    def at(self, thread: str, n: int) -> dict:
        """The config of `thread`'s checkpoint at step n (not timed)."""
        from langgraph.types import Command

        config: dict = {"configurable": {"thread_id": thread}}
        self.graph.invoke(self.start, config)
        for i in range(n):
            self.graph.invoke(Command(resume=answer(i)), config)
        snapshot = self.graph.get_state(config)
        assert snapshot.values["turn"] == n and snapshot.next == ("step",), snapshot
        return snapshot.config

    def resume(self, config: dict, reply: str) -> dict:
        from langgraph.types import Command

        return self.graph.invoke(Command(resume=reply), config)

    def size(self, config: dict) -> int:
        c = config["configurable"]
        keys = (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])
        where = "thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        (row,) = self.conn.execute(f"SELECT length(checkpoint) + length(metadata) FROM checkpoints WHERE {where}", keys)
        (writes,) = self.conn.execute(f"SELECT coalesce(sum(length(value)), 0) FROM writes WHERE {where}", keys)
        return row[0] + writes[0]


# -- the benchmark ---------------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()  # each resume starts on a clean heap: no method pays for the garbage another one left
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(workload: str, n: int, rounds: int, compiled: Any, native: Any, folder: Path, lg: bool) -> dict:
    ours_tool, plain_tool = getattr(compiled, workload), getattr(native, workload)
    store = Store(folder / f"store-{workload}-{n}.db")
    text = branchc_at(ours_tool, n)
    store.put("run", text)
    log = json.dumps({"handoff": HANDOFF, "answers": [answer(i) for i in range(n)]}, separators=(",", ":"))
    store.put("log", log)
    reply = answer(n)

    # once, untimed: each method's resume gives the same next request
    _, resumed = load_run(branchc_stored(store, "run", reply))
    expected = pending_prompt(resumed)
    resumed.release()
    _, replayed = replay_stored(store, "log", reply, plain_tool)
    assert pending_prompt(replayed) == expected, "replay and branchc disagree on the next request"
    del replayed
    graph = config = None
    if lg:
        graph = LangGraphRun(workload, folder / f"langgraph-{workload}-{n}.db")
        config = graph.at("t", n)
        values = graph.resume(config, reply)
        assert values["turn"] == n + 1, values["turn"]
        if workload == "growing":
            assert len(values["messages"]) == 2 * (n + 1) and values["messages"][-1]["content"] == reply
        else:
            assert values["summary"] == _summary_of(ours_tool, n + 1)

    history = json.dumps(history_at(n), separators=(",", ":"), ensure_ascii=False)

    def floor() -> None:  # the store alone: read the run's bytes, write them back, commit
        store.put("scratch", store.get("run"))

    def floor_json() -> None:  # ... and decode and encode the history as plain JSON between the two
        text = store.get("run")
        json.dumps(json.loads(history), separators=(",", ":"), ensure_ascii=False)
        store.put("scratch", text)

    times: dict[str, list[float]] = {
        "branchc": [], "nostore": [], "floor": [], "floor_json": [], "replay": [], "langgraph": []
    }  # fmt: skip
    for _ in range(rounds):
        times["floor"].append(timed(floor))
        times["floor_json"].append(timed(floor_json))
        times["branchc"].append(timed(lambda: branchc_stored(store, "run", reply)))
        times["nostore"].append(timed(lambda: branchc_resume(text, reply)))
        times["replay"].append(timed(lambda: replay_stored(store, "log", reply, plain_tool)))
        if graph is not None:
            times["langgraph"].append(timed(lambda: graph.resume(config, reply)))
    ours = times["branchc"]
    return {
        "workload": workload,
        "n": n,
        "ms": {name: statistics.median(values) * 1000 if values else None for name, values in times.items()},
        # each round's baseline time over branchc's in the same round, the median of those
        "ratio": {
            name: statistics.median(b / o for b, o in zip(times[name], ours, strict=True)) if times[name] else None
            for name in ("replay", "langgraph")
        },
        # branchc's time over each floor's in the same round (the floors: what any stored resume must do)
        "over": {
            name: statistics.median(o / b for b, o in zip(times[name], ours, strict=True))
            for name in ("floor", "floor_json")
        },
        "rounds": rounds,
        "size": {
            "branchc": len(text.encode()),
            "replay": len(log.encode()),
            "langgraph": graph.size(config) if graph is not None else None,
        },
    }


def history_at(n: int) -> list[dict[str, str]]:
    """The growing tool's chat history at step n, as plain messages."""
    out = []
    for i in range(n):
        out += [{"role": "user", "content": f"Step {i}: go on."}, {"role": "assistant", "content": answer(i)}]
    return out


def _summary_of(tool: Any, steps: int) -> str:
    """The bounded tool's summary after `steps` answers, read from a live run (for checking LangGraph's)."""
    machine = started(tool)
    for i in range(steps):
        step(machine, answer(i))
    (request,) = machine.pending
    prompt = request.sample.messages[0].content
    machine.release()
    return prompt.removeprefix("Summary so far: ").rsplit("\nStep ", 1)[0]


def fmt_ms(value: float | None) -> str:
    return "      -" if value is None else f"{value:7.3f}" if value < 10 else f"{value:7.1f}"


def fmt_ratio(ratio: float | None) -> str:
    return "     -" if ratio is None else f"{ratio:6.1f}"


def report(rows: list[dict], lg_missing: str | None) -> None:
    print(
        f"{'workload':8} {'steps':>5} {'rounds':>6} | {'floor':>7} {'+ JSON':>7} {'branchc':>7} {'no store':>8} "
        f"{'replay':>7} {'LangGraph':>9} (ms/resume) | {'replay/':>7} {'LG/':>6} | {'branchc':>9} {'replay':>9} "
        f"{'LangGraph':>9} (saved bytes)"
    )
    print(
        f"{'':8} {'':>5} {'':>6} | {'':>7} {'':>7} {'':>7} {'':>8} {'':>7} {'':>9} {'':11} | {'branchc':>7} "
        f"{'branchc':>6} |"
    )
    for row in rows:
        ms, size = row["ms"], row["size"]
        print(
            f"{row['workload']:8} {row['n']:5d} {row['rounds']:6d} | "
            f"{fmt_ms(ms['floor'])} {fmt_ms(ms['floor_json'])} {fmt_ms(ms['branchc'])} {fmt_ms(ms['nostore']):>8} "
            f"{fmt_ms(ms['replay'])} {fmt_ms(ms['langgraph']):>9} {'':11} | "
            f"{fmt_ratio(row['ratio']['replay']):>7} {fmt_ratio(row['ratio']['langgraph'])} | "
            f"{size['branchc']:9d} {size['replay']:9d} {size['langgraph'] if size['langgraph'] is not None else '-':>9}"
        )
    if lg_missing:
        print(f"LangGraph column skipped: langgraph / langgraph-checkpoint-sqlite not installed ({lg_missing}); "
              "pip install -e '.[bench]'")  # fmt: skip
    print()
    targets(rows, lg_missing is None)


def targets(rows: list[dict], lg: bool) -> None:
    def row(workload: str, n: int) -> dict:
        return next(r for r in rows if r["workload"] == workload and r["n"] == n)

    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"

    def beside(r: dict) -> str:
        lg_ratio = r["ratio"]["langgraph"]
        lg_text = f"LangGraph/branchc {lg_ratio:.1f}x" if lg_ratio is not None else "LangGraph not measured"
        return f"(replay/branchc {r['ratio']['replay']:.1f}x, {lg_text})"

    sizes = sorted({r["n"] for r in rows})
    small, large = sizes[0], sizes[-1]
    first, last = row("bounded", small), row("bounded", large)
    growth = last["ms"]["branchc"] / first["ms"]["branchc"]
    growth_bare = last["ms"]["nostore"] / first["ms"]["nostore"]
    print("Targets (branchc = the column with the SQLite round trip; ratios: medians of same-round ratios):")
    print(
        f"  bounded: flat per-resume cost, {small} -> {large} steps: x{growth:.2f} "
        f"(x{growth_bare:.2f} without the store; flat = at most x1.5): {verdict(growth <= 1.5)}"
    )
    for n in sizes:
        r = row("bounded", n)
        over = r["over"]["floor"]
        print(
            f"  bounded, {n:4d} steps: <= 1.5x the store's bare read + commit of the same bytes: {over:.2f}x: "
            f"{verdict(over <= 1.5)} {beside(r)}"
        )
    for n in sizes:
        r = row("growing", n)
        over = r["over"]["floor_json"]
        print(
            f"  growing, {n:4d} steps: <= 1.5x that plus decoding and encoding the history's JSON: {over:.2f}x: "
            f"{verdict(over <= 1.5)} {beside(r)}"
        )
    if not lg:
        print("  (LangGraph not installed: pip install -e '.[bench]')")


def profile(compiled: Any, n: int, repeat: int = 20) -> None:
    text = branchc_at(compiled.growing, n)
    reply = answer(n)
    branchc_resume(text, reply)  # warm
    phases: dict[str, list[float]] = {"load_run": [], "answer + advance": [], "dump_run": [], "release": []}
    for _ in range(repeat // 2):
        gc.collect()
        start = time.perf_counter()
        handoff, machine = load_run(text)
        loaded = time.perf_counter()
        step(machine, reply)
        stepped = time.perf_counter()
        dump_run(handoff, machine)
        dumped = time.perf_counter()
        machine.release()
        released = time.perf_counter()
        took_each = (loaded - start, stepped - loaded, dumped - stepped, released - dumped)
        for name, took in zip(phases, took_each, strict=True):
            phases[name].append(took)
    split = ", ".join(f"{name} {statistics.median(values) * 1000:.2f} ms" for name, values in phases.items())
    print(f"\nbranchc's resume at {n} steps, growing workload, by phase (medians of {repeat // 2}): {split}")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        branchc_resume(text, reply)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    print(f"\ncProfile of {repeat} branchc resumes (no store) at {n} steps, growing workload")
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(20)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="cProfile branchc's resume at the largest size")
    args = parser.parse_args()
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    rounds = {10: 5, 100: 5} if args.quick else {10: 21, 100: 15, 1000: 11}
    lg_missing = langgraph_available()
    compiled, native = tools()
    started_at = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="branchc-bench-") as name:
        folder = Path(name)
        rows = []
        for workload in WORKLOADS:
            for n in sizes:
                rows.append(measure(workload, n, rounds[n], compiled, native, folder, lg_missing is None))
    print(f"Resume cost against history length (median ms per resume; {time.perf_counter() - started_at:.0f} s)")
    report(rows, lg_missing)
    if args.profile:
        with contextlib.redirect_stderr(sys.stdout):
            profile(compiled, sizes[-1])


if __name__ == "__main__":
    main()
