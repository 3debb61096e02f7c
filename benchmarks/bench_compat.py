"""`branchc compat` on the example tools, against compiling them (issue 23).

Two copies of examples/tools, the second edited (a reworded question, a renamed local, a dropped
warning), each compiled once into a build folder. Timed, in this process, each --repeat times,
interleaved:

- compile: `build()` of the edited sources into a fresh folder (the baseline: what a deploy pays anyway);
- compat, builds: `compare()` of the two builds' manifests, read from their folders;
- compat, sources: `manifest_of()` of both source folders (each build up to date: nothing recompiled)
  and `compare()`, as `branchc compat OLD NEW` on sources does;
- the command: `branchc compat OLD NEW --json` as a subprocess on the two builds (interpreter start
  included), for scale.

Printed: medians [min .. max] in ms, and each one's ratio to the compile of the same repeat.

    python benchmarks/bench_compat.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from branchc.splitter.build import build
from branchc.splitter.compat import compare
from branchc.splitter.manifests import manifest_of

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tools"
EDITS = {
    "pick_card.py": [("ask", "prompt_text"), ('f"Pick a card (1-', 'f"Which card (1-')],
    "book_flight.py": [('        yield ctx.log("warning", f"Unknown flight id {choice.content.flight_id!r}")\n', "")],
}


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} [{min(values):.2f} .. {max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="branchc-compat-") as name:
        folder = Path(name)
        os.environ["BRANCHC_CACHE"] = str(folder / "cache")
        old, new = folder / "old", folder / "new"
        shutil.copytree(EXAMPLES, old)
        shutil.copytree(EXAMPLES, new)
        for file, pairs in EDITS.items():
            text = (new / file).read_text()
            for before, after in pairs:
                text = text.replace(before, after)
            (new / file).write_text(text)
        old_build, new_build = folder / "old-build", folder / "new-build"
        for sources, out in ((old, old_build), (new, new_build)):
            assert not build([sources], out).errors
        manifest_of(old), manifest_of(new)  # the sources' own builds, up to date from here on
        read = lambda path: json.loads((path / "branchc.json").read_text())  # noqa: E731
        lines = compare(read(old_build), read(new_build))
        verdicts = statistics.multimode(line.verdict for line in lines)
        command = [sys.executable, "-m", "branchc", "compat", str(old_build), str(new_build), "--json"]
        times: dict[str, list[float]] = {"compile": [], "compat, builds": [], "compat, sources": [], "command": []}
        for index in range(args.repeat):
            fresh = folder / f"fresh-{index}"
            times["compile"].append(timed(lambda fresh=fresh: build([new], fresh)))
            times["compat, builds"].append(timed(lambda: compare(read(old_build), read(new_build))))
            times["compat, sources"].append(timed(lambda: compare(manifest_of(old), manifest_of(new))))
            times["command"].append(timed(lambda: subprocess.run(command, capture_output=True, check=False)))
        print(f"Python {sys.version.split()[0]}; {len(lines)} points; most common verdict: {', '.join(verdicts)}")
        print(f"{'':18} {'ms, median [min .. max]':>30}   ratio to compile")
        for label, values in times.items():
            ratios = [ours / base for ours, base in zip(values, times["compile"], strict=True)]
            print(f"{label:18} {spread(values):>30}   x{statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
