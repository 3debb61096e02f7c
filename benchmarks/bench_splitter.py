"""The splitter's costs, as ratios against baselines measured in the same run.

1. Step cost, compiled vs native generator: (a) a tight loop yielding a counter,
   (b) a realistic tool loop (history appends and a small dict per step), and
   (c) a straight run of 200 yields, to show dispatch does not grow with the
   number of states. Native and compiled runs alternate; the ratio is the median
   of the pairs' ratios.
2. Snapshot + json.dumps + json.loads + resume of a suspended tool holding a
   20-message history, against json.dumps + json.loads of its live data alone;
   and the sizes of both.
3. Compile throughput on a generated tree of tools, against LibCST's own parse + codegen
   of the same tree: a cold build in CPU time (this process and the processes it starts:
   compile workers, and the one that imports the modules to read their tools) and in
   wall time (the workers run side by side, LibCST in one process); and a rebuild with
   nothing changed, by `build()` here and by `branchc compile` in a process of its own, as a
   ratio to the cold build and in seconds.

Parts 1 and 2 time the process's CPU time (wall time on Windows, where it is coarse), so
that time the system gives to other processes does not count.

    python benchmarks/bench_splitter.py [--quick] [--repeat N] [--only steps,snapshot,compile] [--json]

--only runs the named parts (the first two take seconds, compile the longest); --json prints
one JSON object of the figures instead of the text (benchmarks/bench_versions.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import libcst

from branchc import resume, snapshot
from branchc.continuation.generator import state
from branchc.splitter import load_source
from branchc.splitter.build import build, build_workers

PROGRAMS = textwrap.dedent(
    """
    from branchc import resumable


    @resumable
    def counter(n):
        i = 0
        while i < n:
            yield i
            i += 1


    @resumable
    def tool_loop(n):
        history = []
        state = None
        for i in range(n):
            prompt = f"step {i}"
            reply = yield {"kind": "sample", "prompt": prompt}
            history.append({"role": "user", "content": prompt})
            history.append({"role": "assistant", "content": reply})
            state = {"turn": i, "last": reply, "size": len(history)}
        return state
    """
)

STRAIGHT = 200
# CPU time of this process: a run preempted by other work on the machine is not charged for the wait.
# Windows counts it in clock ticks (about 16 ms), too coarse for a sample of a few milliseconds.
CLOCK = time.perf_counter if sys.platform == "win32" else time.process_time
PROGRAMS += "\n\n@resumable\ndef straight():\n" + "".join(f"    x{i} = yield {i}\n" for i in range(STRAIGHT))


def modules():
    native = type(sys)("bench_native")
    exec(compile(PROGRAMS, "bench_native", "exec"), native.__dict__)
    compiled = load_source(PROGRAMS, "bench_compiled", "bench_compiled.py")
    return native, compiled


def drive(generator, value=None) -> int:
    send = generator.send
    steps = 0
    try:
        send(None)
        while True:
            send(value)
            steps += 1
    except StopIteration:
        return steps


def per_step(make, value) -> float:
    generator = make()
    start = CLOCK()
    steps = drive(generator, value)
    return (CLOCK() - start) / max(steps, 1)


def paired(make_native, make_compiled, value, repeat: int) -> tuple[float, float, float]:
    """Median seconds per step of each side, and the median of their ratios over `repeat` interleaved pairs."""
    pairs = []
    for index in range(repeat):
        # interleaved, and each side first in turn, so that a slow spell of the machine hits both sides alike
        if index % 2:
            ours = per_step(make_compiled, value)
            base = per_step(make_native, value)
        else:
            base = per_step(make_native, value)
            ours = per_step(make_compiled, value)
        pairs.append((base, ours))
    base_time = statistics.median(b for b, _ in pairs)
    ours_time = statistics.median(o for _, o in pairs)
    return base_time, ours_time, statistics.median(o / b for b, o in pairs)


def bench_steps(repeat: int, n: int) -> dict:
    """Median ns per step of each program, native and compiled, keyed by the program's name."""
    native, compiled = modules()
    rows = [
        ("counter", "(a) counter loop", lambda m: lambda: m.counter(n), None),
        ("tool_loop", "(b) tool loop", lambda m: lambda: m.tool_loop(n), "an answer"),
        ("straight", f"(c) {STRAIGHT} straight yields", lambda m: m.straight, 5),
    ]
    figures = {}
    for name, title, factory, value in rows:
        base, ours, ratio = paired(factory(native), factory(compiled), value, repeat)
        figures[name] = {"title": title, "native_ns": base * 1e9, "compiled_ns": ours * 1e9, "ratio": ratio}
    return figures


def print_steps(figures: dict) -> None:
    print("1. step cost (median ns per step)")
    for row in figures.values():
        print(
            f"   {row['title']:24} native {row['native_ns']:7.1f}   compiled {row['compiled_ns']:7.1f}   "
            f"ratio {row['ratio']:5.2f}x"
        )


def bench_snapshot(repeat: int) -> dict:
    """Snapshot + JSON + resume of a suspended tool vs JSON of its live data: times, sizes, ratios."""
    _, compiled = modules()
    generator = compiled.tool_loop(100)
    next(generator)
    for index in range(10):  # 20 messages of history
        generator.send(f"answer number {index} with a little text in it")
    live = state(generator)[2]
    baseline_data = {k: v for k, v in live.items() if not k.startswith("_bc_")}
    baseline_data["_bc_it"] = [10, 100]  # what the range iterator's position amounts to

    def ours():
        return resume(json.loads(json.dumps(snapshot(generator))))

    def base():
        return json.loads(json.dumps(baseline_data))

    def once(fn):
        start = CLOCK()
        for _ in range(100):
            fn()
        return (CLOCK() - start) / 100

    # interleaved, so that a slow spell of the machine hits both sides of a ratio alike
    pairs = [(once(ours), once(base)) for _ in range(repeat * 3)]
    ours_time = statistics.median(o for o, _ in pairs)
    base_time = statistics.median(b for _, b in pairs)
    ratio = statistics.median(o / b for o, b in pairs)
    ours_size = len(json.dumps(snapshot(generator), separators=(",", ":")))
    base_size = len(json.dumps(baseline_data, separators=(",", ":")))
    return {
        "branchc_us": ours_time * 1e6,
        "json_us": base_time * 1e6,
        "ratio": ratio,
        "pairs": len(pairs),
        "branchc_bytes": ours_size,
        "json_bytes": base_size,
        "size_ratio": ours_size / base_size,
    }


def print_snapshot(figures: dict) -> None:
    print("2. snapshot + JSON + resume of a tool holding 20 messages")
    print(
        f"   branchc {figures['branchc_us']:7.1f} µs   json of live data {figures['json_us']:7.1f} µs   "
        f"ratio {figures['ratio']:5.2f}x (median of {figures['pairs']} interleaved pairs)"
    )
    print(
        f"   size    {figures['branchc_bytes']:7d} B    json of live data {figures['json_bytes']:7d} B    "
        f"ratio {figures['size_ratio']:5.2f}x"
    )


TOOL_FILE = textwrap.dedent(
    '''
    """Generated tool module {index}."""
    from pydantic import BaseModel, Field

    from branchc import Context, resumable, tool


    class Params{index}(BaseModel):
        topic: str = Field(description="what to study")
        rounds: int = 3


    class Choice{index}(BaseModel):
        pick: int = Field(ge=0)


    study{index} = tool("study{index}", description="generated", params=Params{index}, requires={{"sampling"}})


    def summarize{index}(items):
        out = []
        for item in items:
            if item:
                out.append(str(item).strip())
        return ", ".join(out)


    @resumable
    def angle{index}(ctx: Context, topic, angle):
        reply = yield ctx.sample(prompt=f"{{topic}} from {{angle}}")
        notes = [reply.text]
        for extra in range(2):
            more = yield ctx.sample(prompt=f"more on {{angle}} #{{extra}}")
            notes.append(more.text)
        return summarize{index}(notes)


    @study{index}.client
    def client{index}(handoff, ctx: Context):
        findings = []
        for round_ in range(handoff["rounds"]):
            try:
                result = yield ctx.branch(angle{index}, handoff["topic"], f"angle {{round_}}")
                findings.append(result)
            except ValueError as error:
                yield ctx.log("warning", str(error))
            finally:
                yield ctx.notify("round done", progress=round_ + 1, total=handoff["rounds"])
        choice = yield ctx.elicit("pick", message=summarize{index}(findings), schema=Choice{index})
        if choice.accepted and choice.content.pick < len(findings):
            return {{"pick": findings[choice.content.pick]}}
        return {{"pick": None}}
    '''
)


def cpu_time() -> float:
    """CPU seconds of this process and of its children that have ended (a build waits for its workers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def cli_compile(source: Path, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of `branchc compile SOURCE -o OUT` in a process of its own (its CPU time
    does not count what other work on the machine takes from it)."""
    cpu, start = cpu_time(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "compile", str(source), "-o", str(out)], capture_output=True, text=True
    )
    wall, cpu = time.perf_counter() - start, cpu_time() - cpu
    assert done.returncode == 0, done.stderr
    return wall, cpu


def bench_compile(lines_target: int, repeat: int) -> dict:
    """LibCST alone against a cold build (CPU and wall), and a no-change rebuild against the cold build."""
    root = Path(tempfile.mkdtemp(prefix="branchc-bench-"))
    try:
        source = root / "src"
        source.mkdir()
        index, lines = 0, 0
        while lines < lines_target:
            text = TOOL_FILE.format(index=index)
            (source / f"tools_{index:04d}.py").write_text(text)
            lines += text.count("\n")
            index += 1
        texts = [p.read_text() for p in sorted(source.glob("*.py"))]
        samples = []  # (LibCST CPU, LibCST wall, cold build CPU, cold build wall), alternated
        for attempt in range(3):  # so that drift in the machine's speed hits both alike
            cpu, wall = cpu_time(), time.perf_counter()
            for text in texts:
                libcst.parse_module(text).code  # noqa: B018
            libcst_cpu, libcst_wall = cpu_time() - cpu, time.perf_counter() - wall
            cpu, wall = cpu_time(), time.perf_counter()
            result = build([source], root / f"out{attempt}")
            samples.append((libcst_cpu, libcst_wall, cpu_time() - cpu, time.perf_counter() - wall))
            assert not result.errors, result.errors[:3]
        rebuilds = []
        for _ in range(repeat):
            start = time.perf_counter()
            again = build([source], root / "out0")
            rebuilds.append(time.perf_counter() - start)
            assert not again.compiled
        # the command line: a cold build, then no-change rebuilds, each in a process of its own
        cli_cold, _ = cli_compile(source, root / "cli")
        cli_rebuilds = [cli_compile(source, root / "cli") for _ in range(max(3, repeat // 2))]
        medians = [statistics.median(column) for column in zip(*samples, strict=True)]
        libcst_cpu, libcst_wall, cold_cpu, cold_wall = medians
        rebuild = statistics.median(rebuilds)
        cli_rebuild, cli_rebuild_cpu = (statistics.median(column) for column in zip(*cli_rebuilds, strict=True))
        return {
            "files": index,
            "lines": lines,
            "processes": build_workers(len(texts)),
            "libcst_lines_per_s": lines / libcst_cpu,
            "cold_lines_per_s": lines / cold_cpu,
            "ratio_to_libcst": statistics.median(lc / cc for lc, _, cc, _ in samples),
            "ratio_spread": [min(lc / cc for lc, _, cc, _ in samples), max(lc / cc for lc, _, cc, _ in samples)],
            "wall_ratio_to_libcst": statistics.median(lw / cw for _, lw, _, cw in samples),
            "cold_wall_s": cold_wall,
            "rebuild_s": rebuild,
            "rebuild_ratio_to_cold": rebuild / cold_wall,
            "cli_cold_s": cli_cold,
            "cli_rebuild_s": cli_rebuild,
            "cli_rebuild_spread": [min(wall for wall, _ in cli_rebuilds), max(wall for wall, _ in cli_rebuilds)],
            "cli_rebuild_cpu_s": cli_rebuild_cpu,
            "cli_rebuild_ratio_to_cold": cli_rebuild / cli_cold,
        }
    finally:
        shutil.rmtree(root)


def print_compile(figures: dict) -> None:
    print(
        f"3. compile throughput on {figures['files']} files, {figures['lines']} lines "
        f"({figures['processes']} processes)"
    )
    low, high = figures["ratio_spread"]
    print(f"   LibCST parse + codegen {figures['libcst_lines_per_s']:8.0f} lines/s of CPU")
    print(
        f"   branchc compile (cold) {figures['cold_lines_per_s']:8.0f} lines/s of CPU   "
        f"ratio to LibCST {figures['ratio_to_libcst']:5.2f} ({low:.2f}-{high:.2f}); "
        f"in wall time {figures['wall_ratio_to_libcst']:5.2f}"
    )
    print(
        f"   no-change rebuild      {figures['rebuild_s']:8.3f} s    "
        f"{figures['rebuild_ratio_to_cold']:6.3f} of the cold build ({figures['cold_wall_s']:.2f} s)"
    )
    low, high = figures["cli_rebuild_spread"]
    print(
        f"   branchc compile again  {figures['cli_rebuild_s']:8.3f} s    "
        f"{figures['cli_rebuild_ratio_to_cold']:6.3f} of its cold build ({figures['cli_cold_s']:.2f} s); "
        f"{low:.3f}-{high:.3f} s; CPU {figures['cli_rebuild_cpu_s']:.3f} s"
    )


PARTS = ("steps", "snapshot", "compile")


def parts(text: str) -> list[str]:
    """The --only value: part names separated by commas, run in PARTS order whatever order they are given in."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(PARTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(PARTS)}, got {text!r}")
    return [name for name in PARTS if name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--repeat", type=int, help="samples per figure (default 11, 5 with --quick)")
    parser.add_argument(
        "--only", type=parts, default=list(PARTS), metavar="PARTS", help=f"run only these parts, of {','.join(PARTS)}"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    repeat = args.repeat or (5 if args.quick else 11)
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    steps_per_run = 2_000 if args.quick else 20_000
    benches = {
        "steps": (lambda: bench_steps(repeat, steps_per_run), print_steps),
        "snapshot": (lambda: bench_snapshot(repeat), print_snapshot),
        "compile": (lambda: bench_compile(1_000 if args.quick else 10_000, repeat), print_compile),
    }
    figures = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "quick": args.quick,
        "repeat": repeat,
        "steps_per_run": steps_per_run,
        "clock": CLOCK.__name__,
    }
    for name in args.only:
        measure, show = benches[name]
        figures[name] = measure()
        if not args.json:
            show(figures[name])
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
