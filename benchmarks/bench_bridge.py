"""The bridge's costs, as ratios against baselines measured in the same run.

1. Sampling round trips per second through `branchc serve` (a compiled tool that samples in a
   loop) against a hand-written handler on the bare SDK making the same calls; both over stdio
   in a subprocess, handshake era, with the same client answering at once.
2. The same over streamable HTTP on 127.0.0.1 (stateful, handshake era): `branchc serve --http`
   (the SDK's app inside branchc's `ClientWatch` wrapper) against the same bare handler served by
   the SDK's own `streamable_http_app()` under uvicorn with the uvicorn settings branchc uses; all
   subprocesses, running at once, measured in turn. Over HTTP branchc keeps handshake-era runs in its
   default store (each suspension and each answer is a write), so it is measured with `--store none`
   too: the difference between the two lines is that store's cost.
3. The latency auth adds per call: a trivial tool call (no request to the client, nothing suspended) over
   streamable HTTP with the SDK's client, against `branchc serve --http` started without auth (the
   baseline), with `--auth-tokens FILE` (PRINCIPAL TOKEN lines; the client sends `Authorization: Bearer
   TOKEN`), and with `--auth-jwks FILE --auth-issuer --auth-audience` (an RS256 JWT of a local JWKS
   file). All three serve at once; each round measures them in turn, in a rotating order, in both eras.

4. What traces and metrics cost per round: 2026-07-28 rounds of the looping tool with a SQLite store, in
   process (the SDK's in-memory client), with no OpenTelemetry set up (the baseline: no span is made, no figure
   recorded), with a tracer provider whose spans go through the SDK's batch processor (as `serve --otel`
   exports) to an exporter that drops them, with a meter provider read by an in-memory reader (`--metrics`;
   never collected), and with both; and what branchc's own instrumentation points of a round take in each.
   A provider is set once per process, so each setup runs in a process of its own; the setups run in turn, in a
   rotating order, and each is given as a ratio to the baseline of the same turn.

The 2026-07-28 era's rounds, against a replaying handler, are benchmarks/bench_rounds.py.

    python benchmarks/bench_bridge.py [--quick] [--only auth] [--only tracing]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import anyio
import jwt
import mcp.types as types
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc.bridge.settings import ServeSettings
from branchc.bridge.transport import KEEP_ALIVE

warnings.simplefilter("ignore", MCPDeprecationWarning)

from bench_rounds import TOOL  # noqa: E402  (the same looping tool, beside this script)

BARE = textwrap.dedent(
    """
    import anyio
    import mcp.types as types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server


    async def list_tools(ctx, params):
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return types.ListToolsResult(tools=[types.Tool(name="loop", input_schema=schema)])


    async def call_tool(ctx, params):
        history, text = [], ""
        for i in range(params.arguments["n"]):
            prompt = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"step {i}"))
            result = await ctx.session.create_message(
                [*history, prompt], max_tokens=1, related_request_id=ctx.request_id
            )
            text = result.content.text
            history += [prompt, types.SamplingMessage(role="assistant", content=result.content)]
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content={"last": text}
        )


    async def main():
        server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


    anyio.run(main)
    """
)

# The same handlers, served over streamable HTTP by the SDK's own app (stateful: the back channel
# rides the session's stream; the SDK's defaults for body size and idle sessions are branchc's), under
# uvicorn with the settings `branchc serve --http` gives it (transport.py): keep-alive, the connection cap.
# Its HTTP protocol stays uvicorn's default: branchc's (h11 with request deadlines, deadlines.py) is its own.
BARE_HTTP = BARE.replace("from mcp.server.stdio import stdio_server\n", "import sys\n\nimport uvicorn\n").replace(
    """async def main():
    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
""",
    f"""async def main():
    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        lifespan="on",
        timeout_keep_alive={KEEP_ALIVE},
        limit_concurrency={ServeSettings.model_fields["max_connections"].default},
    )
    await uvicorn.Server(config).serve()
""",
)
assert "stdio" not in BARE_HTTP and "uvicorn.Server" in BARE_HTTP


async def answer(ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))


QUIET = {"PYTHONWARNINGS": "ignore", "BRANCHC_STATE_KEY": "k" * 40}


async def round_trips(
    command: list[str] | str, n: int, repeat: int, cpu: Callable[[], float] | None = None
) -> tuple[float, float]:
    """(median sampling round trips per second of one tools/call making n samples, the server's CPU ms per
    round trip meanwhile, NaN without `cpu`); `command` is a server to start over stdio, or the URL of a
    streamable HTTP server already running, whose CPU seconds so far `cpu` tells."""
    if isinstance(command, str):
        target: StdioServerParameters | str = command
    else:
        target = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **QUIET})
    rates = []
    async with Client(target, mode="legacy", sampling_callback=answer) as client:
        await client.call_tool("loop", {"n": 2})  # warm up: imports, first compile of each path
        used = cpu() if cpu is not None else math.nan
        for _ in range(repeat):
            start = time.perf_counter()
            result = await client.call_tool("loop", {"n": n})
            rates.append(n / (time.perf_counter() - start))
            assert not result.is_error, result
        used = (cpu() if cpu is not None else math.nan) - used
    return statistics.median(rates), used * 1000 / (n * repeat)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process `pid` used so far, from /proc (Linux); NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_round_trips(folder: Path, n: int, repeat: int) -> None:
    (folder / "loop_tool.py").write_text(TOOL)
    (folder / "bare_server.py").write_text(BARE)
    branchc = [sys.executable, "-m", "branchc", "serve", str(folder / "loop_tool.py")]
    bare = [sys.executable, str(folder / "bare_server.py")]
    ours, base = [], []
    for _ in range(3):  # alternate, so drift in the machine's speed hits both alike
        base.append(anyio.run(round_trips, bare, n, repeat)[0])
        ours.append(anyio.run(round_trips, branchc, n, repeat)[0])
    ours_rate, base_rate = statistics.median(ours), statistics.median(base)
    print(f"1. sampling round trips over stdio, handshake era ({n} samples per call)")
    print(
        f"   bare SDK handler {base_rate:7.0f}/s   branchc serve {ours_rate:7.0f}/s   "
        f"overhead {base_rate / ours_rate:5.2f}x"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def http_server(command: list[str], port: int, log: Path) -> Iterator[tuple[str, int]]:
    """Runs `command` (a server listening on 127.0.0.1:port) until the block ends; yields its URL and
    pid once the port accepts connections (uvicorn binds only after the app's startup)."""
    with log.open("wb") as errors:
        process = subprocess.Popen(command, env={**os.environ, **QUIET}, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command} exited with {process.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command} did not listen on port {port} within 60 s:\n{log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def bench_http_round_trips(folder: Path, n: int, repeat: int, rounds: int = 3) -> None:
    (folder / "bare_http_server.py").write_text(BARE_HTTP)
    serve = [sys.executable, "-m", "branchc", "serve", str(folder / "loop_tool.py"), "--http"]
    servers = {
        "bare SDK handler": lambda port: [sys.executable, str(folder / "bare_http_server.py"), str(port)],
        "branchc serve --http": lambda port: [*serve, f"127.0.0.1:{port}"],
        "  with --store none": lambda port: [*serve, f"127.0.0.1:{port}", "--store", "none"],
    }
    names = list(servers)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        urls, pids = {}, {}
        for index, (name, command) in enumerate(servers.items()):
            port = free_port()
            urls[name], pids[name] = stack.enter_context(http_server(command(port), port, folder / f"http-{index}.log"))
        for index in range(rounds):  # in turn, who goes first rotating, so drift in the machine hits all alike
            for name in names[index % len(names) :] + names[: index % len(names)]:
                # with the rate, the server's own CPU time per round trip: what it costs, whatever else the machine runs
                rate, used = anyio.run(round_trips, urls[name], n, repeat, functools.partial(cpu_seconds, pids[name]))
                rates[name].append(rate)
                cpu[name].append(used)
    base = rates[names[0]]
    print(f"2. sampling round trips over streamable HTTP on 127.0.0.1, handshake era ({n} samples per call)")
    print("   round trips/s, overhead (bare rate / this rate, per round) and the server's CPU ms per round trip,")
    print(f"   each the median of {rounds} rounds [min .. max]")
    overheads = {name: "" for name in names}
    for name in names[1:]:
        ratio = [plain / ours for plain, ours in zip(base, rates[name], strict=True)]
        overheads[name] = f"overhead {spread(ratio, '.2f')}x"
    width = max(map(len, overheads.values()))
    for name in names:
        rate = f"{spread(rates[name], '5.0f')}/s"
        print(f"     {name:22} {rate}   {overheads[name]:{width}}   server CPU {spread(cpu[name], '.2f')} ms")


# -- the latency of auth ---------------------------------------------------------------------------------

PING = textwrap.dedent(
    """
    from branchc import Context, tool


    @tool
    def ping(ctx: Context, n: int = 0):
        \"\"\"Answer at once: no request to the client, nothing to suspend.\"\"\"
        if n < 0:
            yield ctx.log("info", "never reached")
        return {"pong": n}
    """
)
ISSUER = "https://issuer.example.test"
AUDIENCE = "https://tools.example.test/mcp"


def auth_setups(folder: Path) -> dict[str, tuple[list[str], str | None]]:
    """name -> (the serve flags, the bearer token the client sends): none, a token file, a JWKS file."""
    token = secrets.token_urlsafe(32)
    tokens = folder / "tokens"
    tokens.write_text(f"bench {token}\n")
    tokens.chmod(0o600)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (folder / "jwks.json").write_text(json.dumps({"keys": [{**public, "kid": "k0", "alg": "RS256", "use": "sig"}]}))
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "bench", "exp": now + 3600, "nbf": now - 5}
    signed = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k0"})
    jwt_flags = ["--auth-jwks", str(folder / "jwks.json"), "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE]
    return {
        "no auth": ([], None),
        "--auth-tokens": (["--auth-tokens", str(tokens)], token),
        "--auth-jwks (RS256)": (jwt_flags, signed),
    }


async def interleaved_calls(
    targets: dict[str, tuple[str, str | None]], mode: str, calls: int
) -> dict[str, list[float]]:
    """Seconds of each `ping` tools/call, per server: one client session to each (`targets`: name -> (URL, bearer
    token)), their calls taken in turn (a, b, c, a, b, c, ...), so a slow moment of the machine hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in targets}
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, (url, token) in targets.items():
            headers = {"Authorization": f"Bearer {token}"} if token else None
            transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
            clients[name] = await stack.enter_async_context(Client(transport, mode=mode))
        for index in range(calls // 5 + calls):  # the first fifth warms up
            for name, client in clients.items():
                start = time.perf_counter()
                result = await client.call_tool("ping", {"n": index})
                if index >= calls // 5:
                    times[name].append(time.perf_counter() - start)
                assert not result.is_error, result
    return times


def refused_without_token(url: str) -> bool:
    """Whether the server answers 401 to an initialize request without a token (so auth is on)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10):
            return False
    except urllib.error.HTTPError as error:
        return error.code == 401


def bench_auth(folder: Path, calls: int, rounds: int) -> None:
    (folder / "ping_tool.py").write_text(PING)
    setups = auth_setups(folder)
    serve = [sys.executable, "-m", "branchc", "serve", str(folder / "ping_tool.py"), "--http"]
    modes = {"handshake era": "legacy", "2026-07-28": "2026-07-28"}
    names = list(setups)
    medians: dict[tuple[str, str], list[float]] = {(name, era): [] for name in names for era in modes}
    added: dict[tuple[str, str], list[float]] = {(name, era): [] for name in names for era in modes}
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, (flags, _) in setups.items():
            port = free_port()
            log = folder / f"auth-{len(urls)}.log"
            urls[name], _ = stack.enter_context(http_server([*serve, f"127.0.0.1:{port}", *flags], port, log))
            assert refused_without_token(urls[name]) == bool(flags), f"{name}: auth is not as configured"
        for index in range(rounds):
            order = names[index % len(names) :] + names[: index % len(names)]  # rotate who goes first
            for era, mode in modes.items():
                targets = {name: (urls[name], setups[name][1]) for name in order}
                times = anyio.run(interleaved_calls, targets, mode, calls)
                for name in names:
                    medians[name, era].append(statistics.median(times[name]) * 1000)
                    paired = [ours - plain for ours, plain in zip(times[name], times["no auth"], strict=True)]
                    added[name, era].append(statistics.median(paired) * 1000)
    print("4. the latency of auth: a trivial tools/call over streamable HTTP on 127.0.0.1, the three servers' calls")
    print(f"   in turn ({calls} each per round); per round the median ms/call, and the median over the round's calls")
    print(f"   of (call with auth - the adjacent call without); figures: median of {rounds} rounds [min .. max]")
    for era in modes:
        print(f"   {era}:")
        base = medians["no auth", era]
        for name in names:
            line = f"     {name:20} {spread(medians[name, era], '.3f')} ms/call"
            if name != "no auth":
                ratio = [ours / plain for ours, plain in zip(medians[name, era], base, strict=True)]
                line += f"   added {spread(added[name, era], '+.3f')} ms   x{spread(ratio, '.3f')}"
            print(line)


# One setup of part 4, in a process of its own: argv = setup, rounds per call, calls; prints ms per round.
TRACED = textwrap.dedent(
    """
    import json
    import sys
    import warnings
    from pathlib import Path

    import anyio
    from mcp.shared.exceptions import MCPDeprecationWarning

    warnings.simplefilter("ignore", MCPDeprecationWarning)
    setup, n, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if setup in ("traces", "both"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Dropped(SpanExporter):  # an exporter that ships nothing: what spans cost up to the wire
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
        trace.set_tracer_provider(provider)
    if setup in ("metrics", "both"):
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server
    from branchc.store.keys import KeyRing
    from branchc.store.url import open_store

    folder = Path(sys.argv[4])
    keys = KeyRing.parse("k" * 40)
    database = folder / f"runs-{setup}.db"
    database.unlink(missing_ok=True)
    tools = load_served_tools(folder / "loop_tool.py")
    # no fsync (synchronous=off): the disk's noise is not what is measured here
    server = create_server(tools, store=open_store(f"sqlite:///{database}?synchronous=off", keys), keys=keys)


    async def main():
        import time

        from bench_rounds import one_call  # beside this script, on PYTHONPATH

        await one_call(server, n)  # first use of each path
        cpu = time.process_time()  # every thread's: the span processor exports on one of its own
        times = sorted([(await one_call(server, n))[0] for _ in range(calls)])
        rounds = calls * (n + 2)  # each call: a warm-up round, then n + 1 rounds
        cpu = (time.process_time() - cpu) * 1e6 / rounds
        from bench_bridge import points_ns

        # the median call's wall time per round, the process's CPU time per round over all calls, and what
        # branchc's own instrumentation points of one round take as this process is set up
        print(json.dumps({"ms": times[len(times) // 2], "cpu_us": cpu, "points_ns": points_ns(20_000)}))


    anyio.run(main)
    """
)
TRACE_SETUPS = ("off", "traces", "metrics", "both")


def points_ns(repeat: int = 200_000) -> float:
    """ns that one round's instrumentation points take, as this process is set up: the round, three store
    operations, a checkpoint, two answered questions, and the round's response noted."""
    from branchc.runtime import tracing

    asked = {"at": time.time_ns(), "trace": {}}
    requests = {"sample-1": SimpleNamespace(kind="sample", sample=None), "elicit-1": _ELICIT}
    start = time.perf_counter_ns()
    for _ in range(repeat):
        with tracing.observed_round("loop", "2026-07-28", number=1, run_id="r") as round_:
            for name in ("load_and_claim", "write", "checkpoint"):
                with tracing.store_operation(name):
                    pass
            tracing.checkpoint_written("x" * 2000, "loop", "2026-07-28")
            tracing.effects_answered(asked, requests, {}, "loop", "2026-07-28")
            round_.ended(None)
    return (time.perf_counter_ns() - start) / repeat


_ELICIT = SimpleNamespace(kind="elicit", elicit=SimpleNamespace(key="k"))


def bench_tracing(folder: Path, n: int, calls: int, rounds: int) -> None:
    script = folder / "traced.py"
    script.write_text(TRACED)
    paths = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]  # branchc, bench_rounds
    env = {**os.environ, **QUIET, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    times: dict[str, list[float]] = {setup: [] for setup in TRACE_SETUPS}
    ratios: dict[str, list[float]] = {setup: [] for setup in TRACE_SETUPS}
    cpus: dict[str, list[float]] = {setup: [] for setup in TRACE_SETUPS}
    points: dict[str, list[float]] = {setup: [] for setup in TRACE_SETUPS}
    cpu_ratios: dict[str, list[float]] = {setup: [] for setup in TRACE_SETUPS}
    for turn in range(rounds):
        order = TRACE_SETUPS[turn % len(TRACE_SETUPS) :] + TRACE_SETUPS[: turn % len(TRACE_SETUPS)]
        this: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for setup in order:
            done = subprocess.run(
                [sys.executable, str(script), setup, str(n), str(calls), str(folder)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            measured = json.loads(done.stdout)
            this[setup], cpu[setup] = measured["ms"], measured["cpu_us"]
            times[setup].append(this[setup])
            cpus[setup].append(cpu[setup])
            points[setup].append(measured["points_ns"] / 1000)
        for setup in TRACE_SETUPS:
            ratios[setup].append(this[setup] / this["off"])
            cpu_ratios[setup].append(cpu[setup] / cpu["off"])
    print(f"\n4. traces and metrics per 2026-07-28 round (SQLite store, in process; the median of {calls} calls of "
          f"{n} rounds per process, {rounds} turns; median [min .. max])")  # fmt: skip
    for setup in TRACE_SETUPS:
        line = f"   {setup:8} {spread(times[setup], '.3f')} ms/round"
        if setup != "off":
            added = [(t - o) * 1000 for t, o in zip(times[setup], times["off"], strict=True)]
            line += f"   added {spread(added, '+.0f')} us   x{spread(ratios[setup], '.3f')}"
        print(line)
    print("   CPU time per round (the process's, every thread; less moved by other load on the machine):")
    for setup in TRACE_SETUPS:
        line = f"   {setup:8} {spread(cpus[setup], '.0f')} us/round"
        if setup != "off":
            added = [c - o for c, o in zip(cpus[setup], cpus["off"], strict=True)]
            line += f"   added {spread(added, '+.0f')} us   x{spread(cpu_ratios[setup], '.3f')}"
        print(line)
    print(
        "   branchc's own instrumentation points of one round (a round, 3 store operations, a checkpoint, 2 answers):"
    )
    for setup in TRACE_SETUPS:
        print(f"   {setup:8} {spread(points[setup], '.1f')} us")


def spread(values: list[float], form: str) -> str:
    return f"{format(statistics.median(values), form)} [{format(min(values), form)} .. {format(max(values), form)}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parts = ["stdio", "http", "auth", "tracing"]
    parser.add_argument("--only", choices=parts, action="append", help="run only these parts")
    args = parser.parse_args()
    only = set(args.only or parts)
    with tempfile.TemporaryDirectory(prefix="branchc-bench-") as name:
        folder = Path(name)
        os.environ["BRANCHC_CACHE"] = str(folder / "cache")  # the servers compile into it
        os.environ["BRANCHC_STATE_DIR"] = str(folder / "state")  # HTTP serves keep runs.db here, not in $HOME
        (folder / "loop_tool.py").write_text(TOOL)
        if "stdio" in only:
            bench_round_trips(folder, 100 if args.quick else 300, 3 if args.quick else 5)
        if "http" in only:
            bench_http_round_trips(folder, 100 if args.quick else 300, 3 if args.quick else 5)
        if "auth" in only:
            bench_auth(folder, 100 if args.quick else 300, 3 if args.quick else 7)
        if "tracing" in only:
            bench_tracing(folder, 20, 5 if args.quick else 80, 3 if args.quick else 9)


if __name__ == "__main__":
    main()
