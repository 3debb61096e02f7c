"""The bridge's costs, as ratios against baselines measured in the same run.

1. Sampling round trips per second through `branchc serve` (a compiled tool that samples in a
   loop) against a hand-written handler on the bare SDK making the same calls; both over stdio
   in a subprocess, handshake era, with the same client answering at once.
2. The same over streamable HTTP on 127.0.0.1 (stateful, handshake era): `branchc serve --http`
   (the SDK's app inside branchc's `ClientWatch` wrapper) against the same bare handler served by
   the SDK's own `streamable_http_app()` under uvicorn; both subprocesses.
3. The 2026-07-28 era, as a tool's history grows (10, 100, 1,000 rounds): the size of
   `request_state` as the client gets it (the run text, format 2, packed by runstate.pack_run,
   then sealed by the SDK) and the server's time per round, against a replaying handler (the approach
   of the SDK's resolvers and of replay engines: the state records every answer so far, and
   each round runs the flow again from the start, feeding them back).
4. The latency auth adds per call: a trivial tool call (no request to the client, nothing suspended) over
   streamable HTTP with the SDK's client, against `branchc serve --http` started without auth (the
   baseline), with `--auth-tokens FILE` (PRINCIPAL TOKEN lines; the client sends `Authorization: Bearer
   TOKEN`), and with `--auth-jwks FILE --auth-issuer --auth-audience` (an RS256 JWT of a local JWKS
   file). All three serve at once; each round measures them in turn, in a rotating order, in both eras.

    python benchmarks/bench_bridge.py [--quick] [--only auth]
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
from collections.abc import Iterator
from pathlib import Path

import anyio
import jwt
import mcp.types as types
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.shared._httpx_utils import create_mcp_http_client
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
# rides the session's stream), under uvicorn with the settings `branchc serve --http` uses.
BARE_HTTP = BARE.replace("from mcp.server.stdio import stdio_server\n", "import sys\n\nimport uvicorn\n").replace(
    """async def main():
    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
""",
    """async def main():
    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
""",
)
assert "stdio" not in BARE_HTTP and "uvicorn.Server" in BARE_HTTP


async def answer(ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))


QUIET = {"PYTHONWARNINGS": "ignore", "BRANCHC_STATE_KEY": "k" * 40}


async def round_trips(command: list[str] | str, n: int, repeat: int) -> float:
    """Median sampling round trips per second of one tools/call making n samples; `command` is a
    server to start over stdio, or the URL of a streamable HTTP server already running."""
    if isinstance(command, str):
        target: StdioServerParameters | str = command
    else:
        target = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **QUIET})
    rates = []
    async with Client(target, mode="legacy", sampling_callback=answer) as client:
        await client.call_tool("loop", {"n": 2})  # warm up: imports, first compile of each path
        for _ in range(repeat):
            start = time.perf_counter()
            result = await client.call_tool("loop", {"n": n})
            rates.append(n / (time.perf_counter() - start))
            assert not result.is_error, result
    return statistics.median(rates)


def bench_round_trips(folder: Path, n: int, repeat: int) -> None:
    (folder / "loop_tool.py").write_text(TOOL)
    (folder / "bare_server.py").write_text(BARE)
    branchc = [sys.executable, "-m", "branchc", "serve", str(folder / "loop_tool.py")]
    bare = [sys.executable, str(folder / "bare_server.py")]
    ours, base = [], []
    for _ in range(3):  # alternate, so drift in the machine's speed hits both alike
        base.append(anyio.run(round_trips, bare, n, repeat))
        ours.append(anyio.run(round_trips, branchc, n, repeat))
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
def http_server(command: list[str], port: int, log: Path) -> Iterator[str]:
    """Runs `command` (a server listening on 127.0.0.1:port) until the block ends; yields its URL
    once the port accepts connections (uvicorn binds only after the app's startup)."""
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
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def bench_http_round_trips(folder: Path, n: int, repeat: int) -> None:
    (folder / "bare_http_server.py").write_text(BARE_HTTP)
    branchc = [sys.executable, "-m", "branchc", "serve", str(folder / "loop_tool.py"), "--http"]
    bare = [sys.executable, str(folder / "bare_http_server.py")]
    ours, base = [], []
    for _ in range(3):  # alternate, so drift in the machine's speed hits both alike
        port = free_port()
        with http_server([*bare, str(port)], port, folder / "bare_http.log") as url:
            base.append(anyio.run(round_trips, url, n, repeat))
        port = free_port()
        with http_server([*branchc, f"127.0.0.1:{port}"], port, folder / "branchc_http.log") as url:
            ours.append(anyio.run(round_trips, url, n, repeat))
    ours_rate, base_rate = statistics.median(ours), statistics.median(base)
    print(f"2. sampling round trips over streamable HTTP on 127.0.0.1, handshake era ({n} samples per call)")
    print(
        f"   bare SDK handler {base_rate:7.0f}/s   branchc serve {ours_rate:7.0f}/s   "
        f"overhead {base_rate / ours_rate:5.2f}x"
    )


# -- 2026-07-28 rounds -----------------------------------------------------------------------------


def replaying_server() -> Server:
    """The flow of TOOL by replay: request_state lists every answer; each round reruns the loop."""

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name="loop", input_schema={"type": "object"})])

    async def call_tool(ctx, params):
        answers = json.loads(params.request_state) if params.request_state else []
        if params.input_responses:
            answers.append(params.input_responses["s"].content.text)
        history: list[types.SamplingMessage] = []
        for i in range(params.arguments["n"]):
            prompt = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=f"step {i}"))
            if i == len(answers):
                request = types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(messages=[*history, prompt], max_tokens=1)
                )
                return types.InputRequiredResult(input_requests={"s": request}, request_state=json.dumps(answers))
            reply = types.TextContent(type="text", text=answers[i])
            history += [prompt, types.SamplingMessage(role="assistant", content=reply)]
        return types.CallToolResult(content=[types.TextContent(type="text", text=answers[-1])])

    return Server("replay", on_list_tools=list_tools, on_call_tool=call_tool)


async def per_round(server: Server, n: int) -> tuple[float, int]:
    """(median server time per round in ms, size of the last request_state in bytes), in process."""
    times: list[float] = []
    sizes: list[int] = []

    async def sampling(ctx, params):
        return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="ok"))

    async with Client(server, mode="2026-07-28", sampling_callback=sampling, input_required_max_rounds=n + 5) as c:
        session = c.session
        state, responses = None, None
        while True:
            start = time.perf_counter()
            result = await session.call_tool(
                "loop", {"n": n}, input_responses=responses, request_state=state, allow_input_required=True
            )
            times.append(time.perf_counter() - start)
            if not isinstance(result, types.InputRequiredResult):
                break
            state = result.request_state
            sizes.append(len(state))
            (key,) = result.input_requests
            responses = {key: await sampling(None, None)}
    return statistics.median(times[-10:]) * 1000, sizes[-1] if sizes else 0


def bench_rounds(folder: Path, sizes: list[int]) -> None:
    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server

    tools = load_served_tools(folder / "loop_tool.py")
    print("3. 2026-07-28 rounds as the history grows (time per round: median of the last 10)")
    for n in sizes:
        ours_ms, ours_size = anyio.run(per_round, create_server(tools, state_key="k" * 40), n)
        base_ms, base_size = anyio.run(per_round, replaying_server(), n)
        print(
            f"   {n:5d} rounds: branchc {ours_ms:7.2f} ms/round, request_state {ours_size:8d} B   "
            f"replay {base_ms:7.2f} ms/round, request_state {base_size:8d} B"
        )


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
            urls[name] = stack.enter_context(http_server([*serve, f"127.0.0.1:{port}", *flags], port, log))
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


def spread(values: list[float], form: str) -> str:
    return f"{format(statistics.median(values), form)} [{format(min(values), form)} .. {format(max(values), form)}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--only", choices=["stdio", "http", "rounds", "auth"], action="append", help="run only these parts"
    )
    args = parser.parse_args()
    only = set(args.only or ["stdio", "http", "rounds", "auth"])
    with tempfile.TemporaryDirectory(prefix="branchc-bench-") as name:
        folder = Path(name)
        os.environ["BRANCHC_CACHE"] = str(folder / "cache")  # the servers compile into it
        os.environ["BRANCHC_STATE_DIR"] = str(folder / "state")  # HTTP serves keep runs.db here, not in $HOME
        (folder / "loop_tool.py").write_text(TOOL)
        if "stdio" in only:
            bench_round_trips(folder, 100 if args.quick else 300, 3 if args.quick else 5)
        if "http" in only:
            bench_http_round_trips(folder, 100 if args.quick else 300, 3 if args.quick else 5)
        if "rounds" in only:
            bench_rounds(folder, [10, 100] if args.quick else [10, 100, 1000])
        if "auth" in only:
            bench_auth(folder, 100 if args.quick else 300, 3 if args.quick else 7)


if __name__ == "__main__":
    main()
