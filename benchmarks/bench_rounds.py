"""2026-07-28 rounds: a stored continuation against a replaying handler, as the history grows.

The workload of the 2026-07-28 era: a tool that loops N samples, each carrying the whole chat history
so far, driven by the SDK's client round by round (`call_tool(..., allow_input_required=True)`, the
answers sent back with the last `request_state`). Three servers serve it:

- **replay** (the baseline): a hand-written handler on the bare SDK that keeps its answers in
  `request_state` and re-runs the loop from the start each round, feeding them back (the approach of
  the SDK's resolvers and of replay engines; the resolvers themselves cannot express an N-round loop);
- **replay, sealed** (context): the same handler with its `request_state` sealed by the SDK's
  `RequestStateBoundary`, as `MCPServer` does by default and as branchc's always is; the ratios are
  to the unsealed one, the issue's baseline (a replaying handler may leave its state unsealed: it
  holds only what the client answered);
- **branchc**: the compiled tool under branchc's bridge with no store: `request_state` is the whole
  saved run, sealed;
- **branchc + SQLite**: the same with the default store, a SQLite file: `request_state` is a short run
  reference and each round is checkpointed in the file;
- **branchc, cold**: as branchc, with the warm runs off (bridge/warm.py): every round loads the run from
  its `request_state`, as a round that lands on another replica does;
- **floor, sealed + commit** (context): the sealed replaying handler that also commits its answers to a
  SQLite file each round (WAL, synchronous=normal, from a worker thread, as branchc's store does). A
  continuation must be sealed (its `request_state` is code state, bound to the caller), and a durable one
  must write each round at least once, so "replay, sealed" is a floor for branchc without a store and this
  row one for branchc + SQLite: no continuation, however it is encoded, goes below them.

Each is measured in process (the SDK's in-memory transport) and over stdio (a server subprocess:
`branchc serve`, `--store sqlite:///...`, and the replaying handler as a script). The figure is the
whole call's wall time divided by its rounds (below N=200, of several calls in one session: about
200 rounds in all); every configuration runs `--repeat` times, interleaved,
so drift in the machine's speed hits all alike. Printed: the median [min .. max] ms per round, and
branchc's ratio to the replaying handler of the same repeat, median [min .. max]. `--clock cpu` times
in-process calls by this process's CPU time instead (client and server share the process), which other
processes on a busy machine disturb far less; over stdio the clock is always the wall.

    python benchmarks/bench_rounds.py [--sizes 10 100 1000] [--repeat 3] [--only inproc|stdio] [--clock cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.server import Server
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.simplefilter("ignore", MCPDeprecationWarning)

TOOL = textwrap.dedent(
    """
    from pydantic import BaseModel

    from branchc import Context, tool


    class Params(BaseModel):
        n: int


    loop = tool("loop", params=Params, requires={"sampling"})


    @loop.client
    def client(handoff: dict, ctx: Context):
        text = ""
        for i in range(handoff["n"]):
            reply = yield ctx.sample(prompt=f"step {i}", max_tokens=1)
            text = reply.text
        return {"last": text, "turns": len(ctx.messages) // 2}
    """
)

# The flow of TOOL by replay, as a module: `replaying_server()` in process, `python replay.py` over stdio.
REPLAY = textwrap.dedent(
    """
    import json

    import anyio
    import mcp.types as types
    from mcp.server import Server


    async def list_tools(ctx, params):
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return types.ListToolsResult(tools=[types.Tool(name="loop", input_schema=schema)])


    async def call_tool(ctx, params):
        answers = json.loads(params.request_state) if params.request_state else []
        if params.input_responses:
            answers.append(params.input_responses["s"].content.text)
        history = []
        for i in range(params.arguments["n"]):
            prompt = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"step {i}"))
            if i == len(answers):
                request = types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(messages=[*history, prompt], max_tokens=1)
                )
                return types.InputRequiredResult(input_requests={"s": request}, request_state=json.dumps(answers))
            reply = types.TextContent(type="text", text=answers[i])
            history += [prompt, types.SamplingMessage(role="assistant", content=reply)]
        text = answers[-1] if answers else ""
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content={"last": text, "turns": len(history) // 2},
        )


    def committing(call_tool, database):
        # what a durable engine must do at least: one commit of the round's state, on a worker thread
        import sqlite3

        connection = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = normal")
        connection.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, state TEXT)")

        def commit(state):
            with connection:
                connection.execute("INSERT OR REPLACE INTO runs VALUES ('run', ?)", (state,))

        async def committed(ctx, params):
            result = await call_tool(ctx, params)
            if isinstance(result, types.InputRequiredResult):
                await anyio.to_thread.run_sync(commit, result.request_state)
            return result

        return committed


    def replaying_server(sealed_with=None, commit_to=None):
        handler = call_tool if commit_to is None else committing(call_tool, commit_to)
        server = Server("replay", on_list_tools=list_tools, on_call_tool=handler)
        if sealed_with is not None:  # as MCPServer does by default: request_state sealed, bound, expiring
            from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

            security = RequestStateSecurity(keys=[sealed_with])
            server.middleware.append(RequestStateBoundary(security, default_audience="replay"))
        return server


    async def main():
        import os
        import sys

        from mcp.server.stdio import stdio_server

        key = os.environ["BRANCHC_STATE_KEY"] if "--sealed" in sys.argv else None
        commit_to = sys.argv[sys.argv.index("--commit") + 1] if "--commit" in sys.argv else None
        server = replaying_server(key, commit_to)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


    if __name__ == "__main__":
        anyio.run(main)
    """
)

STATE_KEY = "k" * 40
SERVERS = ("replay", "replay, sealed", "branchc", "branchc+sqlite", "branchc, cold", "floor, sealed+commit")


async def answer(ctx: Any, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))


def calls_for(n: int) -> int:
    """Calls of n rounds per measurement: about 200 rounds in all (one call from N=200 up)."""
    return max(1, 200 // n)


async def one_call(target: Any, n: int, clock: Callable[[], float] = time.perf_counter) -> tuple[float, int]:
    """(ms per round of an n-round call, bytes of the last request_state) against `target`, timed by `clock`:
    the mean of `calls_for(n)` such calls in one session, so that a short call is not timed alone."""
    async with Client(target, mode="2026-07-28", sampling_callback=answer, input_required_max_rounds=n + 5) as c:
        session = c.session
        await session.call_tool("loop", {"n": 0})  # warm up: first use of each path
        size, rounds = 0, 0
        start = clock()
        for _ in range(calls_for(n)):
            state, responses = None, None
            while True:
                result = await session.call_tool(
                    "loop", {"n": n}, input_responses=responses, request_state=state, allow_input_required=True
                )
                rounds += 1
                if not isinstance(result, types.InputRequiredResult):
                    break
                state = result.request_state
                size = len(state)
                (key,) = result.input_requests
                responses = {key: await answer(None, None)}
            if result.is_error or result.structured_content["turns"] != n:
                raise RuntimeError(f"the call did not finish as expected: {result}")
        elapsed = clock() - start
    return elapsed * 1000 / rounds, size


def in_process(folder: Path) -> dict[str, Callable[[], Any]]:
    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server
    from branchc.store.keys import KeyRing
    from branchc.store.url import open_store

    sys.path.insert(0, str(folder))
    replaying_server: Callable[[], Server] = __import__("replay").replaying_server
    tools = load_served_tools(folder / "loop_tool.py")
    keys = KeyRing.parse(STATE_KEY)
    database = folder / "runs.db"

    def with_store() -> Server:
        database.unlink(missing_ok=True)
        return create_server(tools, store=open_store(f"sqlite:///{database}", keys), keys=keys)

    def cold() -> Server:
        with patched_warm_runs():
            return create_server(tools, keys=keys)

    def floor() -> Server:
        (folder / "floor.db").unlink(missing_ok=True)
        return replaying_server(STATE_KEY, str(folder / "floor.db"))

    return {
        "replay": replaying_server,
        "replay, sealed": lambda: replaying_server(STATE_KEY),
        "branchc": lambda: create_server(tools, keys=keys),
        "branchc+sqlite": with_store,
        "branchc, cold": cold,
        "floor, sealed+commit": floor,
    }


@contextlib.contextmanager
def patched_warm_runs() -> Iterator[None]:
    import branchc.bridge.server
    from branchc.bridge.warm import WarmRuns

    made = branchc.bridge.server.WarmRuns
    branchc.bridge.server.WarmRuns = lambda: WarmRuns(size=0)
    try:
        yield
    finally:
        branchc.bridge.server.WarmRuns = made


# `branchc serve` with the warm runs off, for the cold row over stdio
COLD_SERVE = (
    "import sys, branchc.bridge.server as server, branchc.bridge.warm as warm; "
    "server.WarmRuns = lambda: warm.WarmRuns(size=0); "
    "from branchc.cli import main; sys.argv[0] = 'branchc'; main()"
)


def over_stdio(folder: Path) -> dict[str, Callable[[], Any]]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BRANCHC_STATE_KEY": STATE_KEY}
    serve = [sys.executable, "-m", "branchc", "serve", str(folder / "loop_tool.py")]
    database = folder / "runs-stdio.db"

    def target(command: list[str]) -> StdioServerParameters:
        return StdioServerParameters(command=command[0], args=command[1:], env=env)

    def with_store() -> StdioServerParameters:
        database.unlink(missing_ok=True)
        return target([*serve, "--store", f"sqlite:///{database}"])

    def floor() -> StdioServerParameters:
        (folder / "floor-stdio.db").unlink(missing_ok=True)
        return target(
            [sys.executable, str(folder / "replay.py"), "--sealed", "--commit", str(folder / "floor-stdio.db")]
        )

    return {
        "replay": lambda: target([sys.executable, str(folder / "replay.py")]),
        "replay, sealed": lambda: target([sys.executable, str(folder / "replay.py"), "--sealed"]),
        "floor, sealed+commit": floor,
        "branchc": lambda: target([*serve, "--store", "none"]),
        "branchc+sqlite": with_store,
        "branchc, cold": lambda: target([sys.executable, "-c", COLD_SERVE, *serve[3:], "--store", "none"]),
    }


def spread(values: list[float], form: str) -> str:
    return f"{format(statistics.median(values), form)} [{format(min(values), form)} .. {format(max(values), form)}]"


def measure(
    where: str,
    targets: dict[str, Callable[[], Any]],
    sizes: list[int],
    repeat: int,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    print(f"{where}: ms per round, median [min .. max] of {repeat}; ratio to replay of the same repeat")
    for n in sizes:
        times: dict[str, list[float]] = {name: [] for name in SERVERS}
        sizes_seen: dict[str, int] = {}
        for index in range(repeat):
            turn = index % len(SERVERS)
            order = SERVERS[turn:] + SERVERS[:turn]  # rotated, so no server always runs first
            for name in order:
                ms, size = anyio.run(one_call, targets[name](), n, clock)
                times[name].append(ms)
                sizes_seen[name] = size
        line = f"  N={n:<5d} replay {spread(times['replay'], '.3f')} ms ({sizes_seen['replay']} B state)"
        print(line)
        for name in SERVERS[1:]:
            ratios = [ours / base for ours, base in zip(times[name], times["replay"], strict=True)]
            print(
                f"  {'':7} {name:20} {spread(times[name], '.3f')} ms  x{spread(ratios, '.2f')} "
                f"({sizes_seen[name]} B state)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000], help="rounds per call")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--only", choices=["inproc", "stdio"], action="append", help="measure only these")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="in process: wall or CPU time")
    args = parser.parse_args()
    only = set(args.only or ["inproc", "stdio"])
    with tempfile.TemporaryDirectory(prefix="branchc-rounds-") as name:
        folder = Path(name)
        os.environ["BRANCHC_CACHE"] = str(folder / "cache")  # the servers compile into it
        os.environ["BRANCHC_STATE_DIR"] = str(folder / "state")
        (folder / "loop_tool.py").write_text(TOOL)
        (folder / "replay.py").write_text(REPLAY)
        print(f"Python {sys.version.split()[0]}; {json.dumps({'sizes': args.sizes, 'repeat': args.repeat})}")
        if "inproc" in only:
            clock = time.process_time if args.clock == "cpu" else time.perf_counter
            measure(f"in process ({args.clock} time)", in_process(folder), args.sizes, args.repeat, clock)
        if "stdio" in only:
            measure("over stdio (wall time)", over_stdio(folder), args.sizes, args.repeat)


if __name__ == "__main__":
    main()
