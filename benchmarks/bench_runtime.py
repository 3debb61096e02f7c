"""Runtime overhead per effect: run_tool against a hand-written loop doing the same client calls.

Both sides answer N samples from an instant in-process client, in the same process and run,
so the ratio is what the driver adds (effect dispatch, history tracking, token accounting,
answer validation) on top of the bare calls.

    python benchmarks/bench_runtime.py [--samples 2000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio

from branchc import Context, run_tool, tool
from branchc.runtime.client import SampleRequest
from branchc.runtime.messages import Message, SampleResult


class InstantClient:
    capabilities = frozenset({"sampling", "elicitation"})

    async def sample(self, request):
        return SampleResult(text="ok")

    async def elicit(self, request):
        return {"action": "decline"}

    async def log(self, level, message):
        return None

    async def notify(self, message, progress, total):
        return None


def make_tool(samples: int):
    loop = tool("loop", requires={"sampling"})

    @loop.client
    def client(handoff, ctx: Context):
        for index in range(samples):
            yield ctx.sample(messages=[Message(role="user", content=f"step {index}")])
        return samples

    return loop


async def baseline(client: InstantClient, samples: int) -> int:
    for index in range(samples):
        request = SampleRequest(messages=[Message(role="user", content=f"step {index}")], max_tokens=1024)
        await client.sample(request)
    return samples


def measure(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        anyio.run(fn)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    client, loop = InstantClient(), make_tool(args.samples)
    base = measure(lambda: baseline(client, args.samples), args.repeat)
    runtime = measure(lambda: run_tool(loop, {}, client, call_id="bench"), args.repeat)
    per_base = base / args.samples * 1e6
    per_runtime = runtime / args.samples * 1e6
    print(f"samples per run: {args.samples}, repeats: {args.repeat} (medians)")
    print(f"bare client loop : {per_base:8.1f} µs per sample")
    print(f"branchc run_tool : {per_runtime:8.1f} µs per sample")
    print(f"ratio            : {runtime / base:8.2f}x")


if __name__ == "__main__":
    main()
