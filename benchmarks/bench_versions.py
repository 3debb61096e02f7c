"""Step cost on each Python version side by side: bench_splitter's cheap parts, run by each interpreter found.

The interpreters are the one running this script, each `.venv*/bin/python` beside the repository
root (as .ci/run makes them: `.venv` for 3.11, `.venv-3.12`, `.venv-3.13`) and each one in
$BRANCHC_PYTHONS (paths or command names, separated by os.pathsep); those that cannot import branchc
are left out, and of two with the same minor version the first found is kept. Each one runs

    bench_splitter.py --json --only steps,snapshot

as a subprocess, one after the other (never two at once), so every ratio is measured within one
interpreter's run against its own baseline. The interpreters take turns --rounds times (3 unless
given) and each figure in the table is the median over the rounds.

    python benchmarks/bench_versions.py [--quick] [--repeat N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPLITTER = HERE / "bench_splitter.py"
PROBE = "import sys, branchc; print('%d.%d.%d' % sys.version_info[:3])"


def candidates() -> list[str]:
    """Interpreters to try, in order of preference: this one, the repository's venvs, then $BRANCHC_PYTHONS."""
    found = [sys.executable]
    for pattern in (".venv*/bin/python", ".venv*/Scripts/python.exe"):
        found += [str(path) for path in sorted(ROOT.glob(pattern))]
    for entry in os.environ.get("BRANCHC_PYTHONS", "").split(os.pathsep):
        entry = entry.strip()
        if entry:
            found.append(shutil.which(entry) or entry)  # a command name is looked up on PATH
    return list(dict.fromkeys(found))


def shown(python: str) -> str:
    """The interpreter's path relative to the repository root when it lies inside it."""
    path = Path(python)
    try:
        return str(path.absolute().relative_to(ROOT))
    except ValueError:
        return python


def interpreters(progress: Console) -> list[tuple[str, str]]:
    """(version, python) of each interpreter that imports branchc, the first of each minor version, oldest first."""
    chosen: dict[tuple[int, int], tuple[str, str]] = {}
    for python in candidates():
        try:
            # from the benchmarks folder: the first entry of sys.path, as when the interpreter runs bench_splitter.py
            probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=HERE)
        except (OSError, subprocess.TimeoutExpired) as error:
            progress.print(f"skipped {shown(python)}: {error}")
            continue
        if probe.returncode:
            last = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
            progress.print(f"skipped {shown(python)}: {last}")
            continue
        try:
            version = probe.stdout.split()[-1]
            minor = tuple(int(part) for part in version.split(".")[:2])
        except (IndexError, ValueError):
            progress.print(f"skipped {shown(python)}: no version in {probe.stdout.strip()!r}")
            continue
        if minor in chosen:
            continue
        chosen[minor] = (version, python)
    return [chosen[minor] for minor in sorted(chosen)]


def run(python: str, args: argparse.Namespace) -> dict:
    command = [python, str(SPLITTER), "--json", "--only", "steps,snapshot"]
    if args.quick:
        command.append("--quick")
    if args.repeat:
        command += ["--repeat", str(args.repeat)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=HERE)
    if done.returncode:
        raise RuntimeError(done.stderr.strip() or f"exit status {done.returncode}")
    return json.loads(done.stdout)


def median_of(runs: list):
    """The median of each number over the runs (dicts of the same shape); anything else as the first run has it."""
    first = runs[0]
    if isinstance(first, dict):
        return {key: median_of([run[key] for run in runs]) for key in first}
    if isinstance(first, bool):
        return first
    if isinstance(first, int):
        return statistics.median_low(runs)  # a count stays a count
    if isinstance(first, float):
        return statistics.median(runs)
    return first


# (label, key in bench_splitter's figures, format)
STEP_ROWS = [
    ("native ns/step", "native_ns", "{:.1f}"),
    ("compiled ns/step", "compiled_ns", "{:.1f}"),
    ("compiled/native", "ratio", "{:.2f}x"),
]
SNAPSHOT_ROWS = [
    ("branchc µs", "branchc_us", "{:.1f}"),
    ("plain JSON µs", "json_us", "{:.1f}"),
    ("branchc/plain JSON", "ratio", "{:.2f}x"),
    ("size branchc/plain JSON", "size_ratio", "{:.2f}x"),
]


def table(figures: dict[str, dict]) -> Table:
    versions = list(figures)
    first = figures[versions[0]]
    grid = Table(title="Step cost on each Python version", box=box.SIMPLE_HEAD)
    grid.add_column("program")
    grid.add_column("figure")
    for version in versions:
        grid.add_column(version, justify="right")
    for name, program in first["steps"].items():
        for index, (label, key, form) in enumerate(STEP_ROWS):
            cells = [form.format(figures[version]["steps"][name][key]) for version in versions]
            grid.add_row(program["title"] if index == 0 else "", label, *cells)
        grid.add_section()
    for index, (label, key, form) in enumerate(SNAPSHOT_ROWS):
        cells = [form.format(figures[version]["snapshot"][key]) for version in versions]
        grid.add_row("snapshot+JSON+resume" if index == 0 else "", label, *cells)
    return grid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="bench_splitter's smaller sizes, for a smoke run")
    parser.add_argument("--repeat", type=int, help="samples per figure in each run (default: bench_splitter's)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per interpreter, taking turns (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures of every run as one JSON object")
    args = parser.parse_args()
    if (args.repeat is not None and args.repeat < 1) or args.rounds < 1:
        parser.error("--repeat and --rounds must be at least 1")
    console = Console(highlight=False)
    progress = Console(stderr=True, highlight=False)  # stdout holds the table or the JSON alone
    found = interpreters(progress)
    if not found:
        progress.print("no interpreter found that imports branchc")
        return 2
    runs: dict[str, list[dict]] = {version: [] for version, _ in found}
    failed: dict[str, str] = {}
    for round_ in range(args.rounds):
        for version, python in found:
            if version in failed:
                continue
            progress.print(f"round {round_ + 1}/{args.rounds}: Python {version} ({shown(python)})", style="dim")
            try:
                runs[version].append(run(python, args))
            except (RuntimeError, ValueError) as error:
                failed[version] = str(error).splitlines()[-1]
    figures = {version: median_of(done) for version, done in runs.items() if version not in failed}
    if args.json:
        print(
            json.dumps(
                {
                    "interpreters": {version: shown(python) for version, python in found},
                    "failed": failed,
                    "median": figures,
                    "runs": {version: done for version, done in runs.items() if version not in failed},
                },
                indent=2,
            )
        )
    else:
        for version, python in found:
            console.print(f"Python {version}: {shown(python)}")
        if figures:
            console.print(table(figures))
            some = next(iter(figures.values()))
            console.print(
                f"Each cell is the median of {args.rounds} {'runs' if args.rounds > 1 else 'run'} of that "
                "interpreter (the interpreters take turns). In a run, "
                f"a time is the median of {some['repeat']} samples ({some['steps_per_run']} steps, or 100 snapshots, "
                f"a sample; clock: {some['clock']}), and a ratio the median of the ratios of {some['repeat']} "
                f"interleaved pairs ({some['snapshot']['pairs']} for snapshots) against that run's own baseline."
            )
    for version, reason in failed.items():
        progress.print(f"Python {version} failed: {reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
