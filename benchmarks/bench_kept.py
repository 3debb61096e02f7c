"""A run finishing on a kept build, against one the served build takes (issue 23, worker versioning).

Two builds of one tool under the same module names: the old one kept in the cache (runtime/builds.py), the new
one served, with the loop's variable renamed so no run waiting in the loop can move. Timed in this process,
interleaved, each --repeat times (the median of --number loads each):

- served: `load_run` of a run the served build saved, waiting in the loop (what every round pays);
- kept: `load_run_or_kept` of a run the old build saved at the same place: a refused read in the served build,
  then the read in the kept one (what a round of a run finishing on its own build pays);
- keeping: once per build and process, copying the build into the cache and importing it (`keep_build` into a
  fresh cache, then `kept_build`), against compiling the same sources (what a deploy pays anyway).

Printed: medians [min .. max], and each one's ratio to its baseline of the same repeat.

    python benchmarks/bench_kept.py [--repeat 5] [--number 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from branchc.runtime import builds
from branchc.runtime.builds import keep_build, kept_build, load_run_or_kept
from branchc.runtime.compiled import import_build
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run, load_run
from branchc.splitter.build import build

SOURCE = textwrap.dedent(
    """
    from pydantic import BaseModel

    from branchc import Context, tool


    class Params(BaseModel):
        topic: str


    plan = tool("plan", params=Params, requires={"sampling"})


    @plan.client
    def client(handoff: dict, ctx: Context):
        notes = []
        for step in range(40):
            reply = yield ctx.sample(prompt=f"step {step} of {handoff['topic']}")
            notes.append(reply.text)
        return {"notes": notes}
    """
)
NEW = SOURCE.replace("notes", "items")
WAITS = 20  # the run is saved in the loop, after this many answers


def saved(tool: object) -> str:
    handoff, machine = {"topic": "t"}, Machine(tool.name, "call-1", tool.limits)
    machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
    machine.advance()
    for _ in range(WAITS):
        machine.take_outbox()
        for request in list(machine.pending):
            machine.answer(request.key, f"reply {request.number}")
        machine.advance()
    text = dump_run(handoff, machine)
    machine.release()
    return text


def compiled(folder: Path, source: str) -> Path:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "bench_kept_tool.py").write_text(source)
    result = build([folder / "src"], folder / "build")
    assert not result.errors, result.errors
    return folder / "build"


def per_load(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) * 1e6 / number


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):9.1f} [{min(values):.1f} .. {max(values):.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="branchc-kept-") as name:
        folder = Path(name)
        os.environ["BRANCHC_CACHE"] = str(folder / "cache")
        old = compiled(folder / "old", SOURCE)
        ident = keep_build(old)
        kept = kept_build(ident)
        with kept.reading():
            old_text = saved(kept.tools["plan"])
        served = import_build(compiled(folder / "new", NEW))
        new_text = saved(served.tools["plan"])

        def release(loaded: tuple) -> None:
            loaded[1].release()

        rows: dict[str, list[float]] = {"served": [], "kept": [], "compile": [], "keeping": []}
        for repeat in range(args.repeat):
            rows["served"].append(per_load(lambda: release(load_run(new_text)), args.number))
            rows["kept"].append(per_load(lambda: release(load_run_or_kept(old_text, ident)), args.number))
            start = time.perf_counter()
            compiled(folder / f"again-{repeat}", SOURCE)
            rows["compile"].append((time.perf_counter() - start) * 1e3)
            os.environ["BRANCHC_CACHE"] = str(folder / f"cache-{repeat}")
            builds._KEPT.pop(ident, None)  # a process that has not imported it yet
            start = time.perf_counter()
            kept_build(keep_build(old))
            rows["keeping"].append((time.perf_counter() - start) * 1e3)
        print(f"Python {sys.version.split()[0]}, a run of {WAITS} answers, {args.repeat} repeats x {args.number} loads")
        print(f"  load, served build (us)       {spread(rows['served'])}")
        ratios = [k / s for k, s in zip(rows["kept"], rows["served"], strict=True)]
        print(f"  load, kept build (us)         {spread(rows['kept'])}   x{statistics.median(ratios):.2f} served")
        print(f"  compile the build (ms)        {spread(rows['compile'])}")
        ratios = [k / c for k, c in zip(rows["keeping"], rows["compile"], strict=True)]
        print(f"  keep + import the build (ms)  {spread(rows['keeping'])}   x{statistics.median(ratios):.2f} compile")


if __name__ == "__main__":
    main()
