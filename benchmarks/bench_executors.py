"""Branch steps elsewhere: wall time of ctx.all of 4 CPU-bound branches, inline vs a process pool vs dask.

The tool is `crunch` of tests/servers/executor_tools.py, compiled: ctx.all of `--branches` branches,
each summing squares in pure Python for about `--seconds` (calibrated here, inline, first). Inline
they run one after another in this process; on a process pool (branchc.executors.ProcessPool) and on
a dask.distributed LocalCluster (loopback, one thread per worker process) each branch's steps travel
as snapshots and run in parallel, as far as the machine's cores allow. Every mode gets a warm-up run
first (workers started, tool modules imported), then `--repeat` timed runs; medians and ratios against
inline are measured in the same run.

    pip install -e '.[dask]' && python benchmarks/bench_executors.py [--workers 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from branchc import run_tool
from branchc.executors import DaskExecutor, ProcessPool
from branchc.runtime.compiled import load_compiled_tool
from branchc.testing import MockClient

TOOLS = Path(__file__).resolve().parent.parent / "tests" / "servers" / "executor_tools.py"


def calibrate(seconds: float) -> int:
    """The spin count whose busy() takes about `seconds` here."""
    from executor_tools import busy  # the compiled module: imported from the build by load_compiled_tool

    spin = 200_000
    started = time.perf_counter()
    busy(spin)
    took = time.perf_counter() - started
    return max(1, int(spin * seconds / took))


def timed(tool, params: dict, executor, repeat: int) -> tuple[float, dict]:
    async def once() -> dict:
        return await run_tool(tool, params, MockClient(), executor=executor)

    result = anyio.run(once)  # warm-up: workers started, modules imported
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        again = anyio.run(once)
        times.append(time.perf_counter() - started)
        assert again["totals"] == result["totals"]
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=0.4, help="CPU seconds of each branch, inline")
    parser.add_argument("--workers", type=int, default=4, help="worker processes of the pool and of the cluster")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("BRANCHC_CACHE", tempfile.mkdtemp(prefix="bench-executors-"))
    tool = load_compiled_tool(TOOLS, "crunch", warn=lambda *_: None)  # (a test tool there holds a lock)
    spin = calibrate(args.seconds)
    params = {"branches": args.branches, "spin": spin}
    print(f"ctx.all of {args.branches} CPU-bound branches (~{args.seconds} s each inline), {os.cpu_count()} cores")
    print(f"median of {args.repeat} runs after a warm-up; {args.workers} worker processes for pool and cluster\n")

    rows = []
    inline, expected = timed(tool, params, None, args.repeat)
    rows.append(("inline", inline, len(expected["pids"])))
    pool = ProcessPool(args.workers)
    try:
        took, result = timed(tool, params, pool, args.repeat)
        assert result["totals"] == expected["totals"]
        rows.append((f"process pool ({args.workers})", took, len(result["pids"])))
    finally:
        pool.shutdown()
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        print("(dask skipped: pip install -e '.[dask]')")
    else:
        cluster = LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
        )
        client = Client(cluster, set_as_default=False)
        executor = DaskExecutor(client)
        try:
            took, result = timed(tool, params, executor, args.repeat)
            assert result["totals"] == expected["totals"]
            rows.append((f"dask LocalCluster ({args.workers})", took, len(result["pids"])))
        finally:
            executor.shutdown()
            client.close()
            cluster.close()

    print(f"{'executor':<24} {'wall time':>10} {'vs inline':>10} {'processes used':>15}")
    for name, took, processes in rows:
        print(f"{name:<24} {took * 1000:>8.0f} ms {inline / took:>9.2f}x {processes:>15}")


if __name__ == "__main__":
    main()
