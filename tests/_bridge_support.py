"""Real MCP clients against `branchc serve`: scripted callbacks, server subprocesses, native baselines."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import yaml
from mcp import StdioServerParameters

from branchc import run_tool
from branchc.runtime.loader import load_tool
from branchc.store import KeyRing
from branchc.testing import MockClient

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "examples" / "tools"
EXAMPLES = {
    "pick_card": {"count": 5, "analyze": True, "seed": 7},
    "book_flight": {"destination": "LIS"},
    "tictactoe": {},
    "research": {"topic": "solid-state batteries"},
}
KEY = "k" * 40  # a state key shared by the servers of one test
KEYS = KeyRing([KEY])  # the ring the test servers' stores are sealed with (--state-key KEY)


def script(name: str) -> tuple[list[Any], list[Any]]:
    data = yaml.safe_load((ROOT / "examples" / "responses" / f"{name}.yaml").read_text())
    return data.get("sample", []), data.get("elicit", [])


async def native_run(name: str, env: dict[str, str]) -> tuple[Any, dict[str, str], list[Any]]:
    """The example run natively with its scripted answers: (result, prompt -> answer, elicit answers)."""
    samples, elicits = script(name)
    client = MockClient(samples, elicits)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        result = await run_tool(load_tool(TOOLS / f"{name}.py", name), EXAMPLES[name], client)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    prompts = {call.last_text: answer for call, answer in zip(client.sample_calls, samples, strict=True)}
    return result, prompts, elicits


class Scripted:
    """MCP client callbacks answering samples by prompt and elicitations in order; it records all."""

    def __init__(self, prompts: dict[str, str], elicits: list[Any]) -> None:
        self.prompts = prompts
        self.elicits = list(elicits)
        self.sampled: list[types.CreateMessageRequestParams] = []
        self.elicited: list[Any] = []
        self.logs: list[Any] = []
        self.progress: list[tuple[float, float | None, str | None]] = []

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampled.append(params)
        last = params.messages[-1].content_as_list
        text = "".join(block.text for block in last if block.type == "text")
        # the prompt ends the last message: a tool result rendered as text may come before it, in one user turn
        answer = next(a for prompt, a in self.prompts.items() if text == prompt or text.endswith("\n\n" + prompt))
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=answer)
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        self.elicited.append(params)
        answer = self.elicits[len(self.elicited) - 1]
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    def callbacks(self, *, sampling: bool = True, elicitation: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"logging_callback": self.logging}
        if sampling:
            out["sampling_callback"] = self.sampling
        if elicitation:
            out["elicitation_callback"] = self.elicitation
        return out


def stdio(path: Path | str, env: dict[str, str], *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "branchc", "serve", str(path), *args], env={**os.environ, **env}
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def listening(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """Run `command` until it listens on 127.0.0.1:`port`; kill it afterwards."""
    process = subprocess.Popen(
        command, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[2:4]} exited: {process.stderr.read().decode()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[2:4]} did not start listening in 30 s")
            time.sleep(0.05)
        yield process
    finally:
        process.kill()
        process.wait()
        process.stderr.close()


@contextlib.contextmanager
def http_server(path: Path | str, env: dict[str, str], *args: str) -> Iterator[str]:
    """`branchc serve PATH --http` in a subprocess on a free loopback port; yields its URL."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(path), "--http", f"127.0.0.1:{port}", *args]
    with listening(command, port, env):
        yield f"http://127.0.0.1:{port}/mcp"


@contextlib.contextmanager
def fake_llm(log: Path) -> Iterator[str]:
    """The OpenAI-compatible test server (tests/servers/fake_llm.py); yields its API base URL."""
    port = free_port()
    script = Path(__file__).parent / "servers" / "fake_llm.py"
    with listening([sys.executable, str(script), str(port), str(log)], port):
        yield f"http://127.0.0.1:{port}/v1"


async def within(seconds: float, coroutine: Any) -> Any:
    with anyio.fail_after(seconds):
        return await coroutine


def as_if_another_build(text: str, point: str) -> str:
    """A saved run as another build of its tools would have saved it: each suspended generator of other code
    (another hash), waiting at `point`."""
    data = json.loads(text)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("t") == "gen" and "point" in value:
                value["hash"], value["point"] = "0" * 16, point
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(data)
    return json.dumps(data)
