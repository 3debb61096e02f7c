"""The splitter's costs, as ratios against baselines measured in the same run.

1. Step cost, compiled vs native generator: (a) a tight loop yielding a counter,
   (b) a realistic tool loop (history appends and a small dict per step), and
   (c) a straight run of 200 yields, to show dispatch does not grow with the
   number of states.
2. Snapshot + json.dumps + json.loads + resume of a suspended tool holding a
   20-message history, against json.dumps + json.loads of its live data alone;
   and the sizes of both.
3. Compile throughput on a generated tree of tools (cold, and a cached rebuild),
   against LibCST's own parse + codegen of the same tree.

    python benchmarks/bench_splitter.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
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


def per_step(make, value, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        generator = make()
        start = time.perf_counter()
        steps = drive(generator, value)
        times.append((time.perf_counter() - start) / max(steps, 1))
    return statistics.median(times)


def bench_steps(repeat: int, n: int) -> None:
    native, compiled = modules()
    print("1. step cost (median ns per step)")
    rows = [
        ("(a) counter loop", lambda m: lambda: m.counter(n), None),
        ("(b) tool loop", lambda m: lambda: m.tool_loop(n), "an answer"),
        (f"(c) {STRAIGHT} straight yields", lambda m: m.straight, 5),
    ]
    for title, factory, value in rows:
        base = per_step(factory(native), value, repeat)
        ours = per_step(factory(compiled), value, repeat)
        print(f"   {title:24} native {base * 1e9:7.1f}   compiled {ours * 1e9:7.1f}   ratio {ours / base:5.2f}x")


def bench_snapshot(repeat: int) -> None:
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
        start = time.perf_counter()
        for _ in range(100):
            fn()
        return (time.perf_counter() - start) / 100

    # interleaved, so that a slow spell of the machine hits both sides of a ratio alike
    pairs = [(once(ours), once(base)) for _ in range(repeat * 3)]
    ours_time = statistics.median(o for o, _ in pairs)
    base_time = statistics.median(b for _, b in pairs)
    ratio = statistics.median(o / b for o, b in pairs)
    ours_size = len(json.dumps(snapshot(generator), separators=(",", ":")))
    base_size = len(json.dumps(baseline_data, separators=(",", ":")))
    print("2. snapshot + JSON + resume of a tool holding 20 messages")
    print(
        f"   branchc {ours_time * 1e6:7.1f} µs   json of live data {base_time * 1e6:7.1f} µs   "
        f"ratio {ratio:5.2f}x (median of {len(pairs)} interleaved pairs)"
    )
    print(f"   size    {ours_size:7d} B    json of live data {base_size:7d} B    ratio {ours_size / base_size:5.2f}x")


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


def bench_compile(lines_target: int) -> None:
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
        libcst_times, cold_times = [], []
        for attempt in range(3):  # alternated, so that drift in the machine's speed hits both alike
            start = time.perf_counter()
            for text in texts:
                libcst.parse_module(text).code  # noqa: B018
            libcst_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            result = build([source], root / f"out{attempt}")
            cold_times.append(time.perf_counter() - start)
            assert not result.errors, result.errors[:3]
        start = time.perf_counter()
        again = build([source], root / "out0")
        cached = time.perf_counter() - start
        assert not again.compiled
        libcst_time, cold = statistics.median(libcst_times), statistics.median(cold_times)
        ratio = statistics.median(lt / ct for lt, ct in zip(libcst_times, cold_times, strict=True))
        print(f"3. compile throughput on {index} files, {lines} lines ({build_workers(len(texts))} processes)")
        print(f"   LibCST parse + codegen {lines / libcst_time:8.0f} lines/s")
        print(f"   branchc compile (cold) {lines / cold:8.0f} lines/s   ratio to LibCST {ratio:5.2f}")
        print(f"   no-change rebuild      {cached:8.3f} s")
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    repeat = 5 if args.quick else 11
    bench_steps(repeat, 2_000 if args.quick else 20_000)
    bench_snapshot(repeat)
    bench_compile(1_000 if args.quick else 10_000)


if __name__ == "__main__":
    main()
