"""Tools that call tools, served: `branchc serve` subprocesses driven by the real `mcp` client in both eras, whose
tools call a tool of their own server (its client phase a sub-run of the caller's run, its sample asked of the
same client) and tools of a real upstream server (`--upstream up=stdio:...` and `up=http://...`), one of which
elicits (its question passed through to this client and answered back); an upstream that dies mid-call; and a
server killed (-9) while it waits on an upstream, whose round, sent again to a new server on the same store,
does not call the tool a second time."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, Scripted, free_port, http_server, listening, stdio, within
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

SERVERS = Path(__file__).parent / "servers"
CALLER = SERVERS / "caller_tools.py"
UPSTREAM = SERVERS / "upstream_tools.py"
ERAS = ["legacy", "2026-07-28"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "BRANCHC_CACHE": str(tmp_path / "cache"),
        "BRANCHC_STATE_KEY": KEY,
        "UPSTREAM_MARKS": str(tmp_path / "marks"),
    }


def marks(env: dict[str, str]) -> list[str]:
    path = Path(env["UPSTREAM_MARKS"])
    return path.read_text().splitlines() if path.exists() else []


def upstream_stdio() -> str:
    return f"up=stdio:{sys.executable} -m branchc serve {UPSTREAM}"


def answers() -> Scripted:
    return Scripted({"double 21?": "sure"}, [{"action": "accept", "content": {"ok": True}}])


EXPECTED = {
    "here": {"doubled": 42, "said": "sure", "after": True},
    "found": {"found": "LISBON"},
    "sure": {"confirmed": True},
    "turns": 6,  # three tool_use / tool_result pairs in the caller's history
}


@pytest.mark.parametrize("era", ERAS)
async def test_tools_here_and_upstream_over_stdio_with_an_upstream_that_elicits(era, env):
    client = answers()
    async with Client(stdio(CALLER, env, "--upstream", upstream_stdio()), mode=era, **client.callbacks()) as session:
        result = await within(90, session.call_tool("use", {}))
    assert not result.is_error, result.content[0].text
    assert result.structured_content == EXPECTED
    (sampled,) = client.sampled  # the tool of this server asked its sample of this client
    assert sampled.messages[-1].content_as_list[0].text == "double 21?"
    (form,) = client.elicited  # the upstream's question, passed through
    assert form.message == "Really book it?" and form.requested_schema["properties"]["ok"]["type"] == "boolean"
    assert marks(env) == ["lookup lisbon", "confirm book it"]


@pytest.mark.parametrize("era", ERAS)
async def test_an_upstream_over_http_in_a_server_with_a_store(era, env, tmp_path):
    with http_server(UPSTREAM, env) as url:
        store = f"sqlite:///{tmp_path / 'runs.db'}"
        client = answers()
        target = stdio(CALLER, env, "--upstream", f"up={url}", "--store", store)
        async with Client(target, mode=era, **client.callbacks()) as session:
            result = await within(90, session.call_tool("use", {}))
    assert not result.is_error, result.content[0].text
    assert result.structured_content == EXPECTED
    assert marks(env) == ["lookup lisbon", "confirm book it"]


async def test_an_upstream_that_dies_mid_call_is_an_error_at_the_yield_and_the_next_call_starts_it_again(env):
    async with Client(stdio(CALLER, env, "--upstream", upstream_stdio()), mode="2026-07-28") as session:
        result = await within(90, session.call_tool("dies", {}))
    assert not result.is_error, result.content[0].text
    first, again = result.structured_content["first"], result.structured_content["again"]
    assert first.startswith("the call of 'up:crash' failed upstream:")
    assert again == {"found": "AFTER"}
    assert marks(env) == ["crash now", "lookup after"]


async def test_a_server_killed_while_it_waits_on_an_upstream_does_not_call_it_twice(env, tmp_path):
    env = {**env, "UPSTREAM_SLOW": "3"}
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    port = free_port()

    def serving(port: int) -> Any:
        command = [sys.executable, "-m", "branchc", "serve", str(CALLER), "--http", f"127.0.0.1:{port}"]
        return listening([*command, "--store", store, "--upstream", upstream_stdio()], port, env)

    with serving(port) as first:
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(url, mode="2026-07-28", **answers().callbacks()) as client:
            asked = await within(60, client.session.call_tool("waits", {}, allow_input_required=True))
        assert isinstance(asked, types.InputRequiredResult)
        (key,) = asked.input_requests
        responses = {key: types.ElicitResult(action="accept", content={"go": True})}

        async def second_round() -> Any:
            async with Client(url, mode="2026-07-28", **answers().callbacks()) as client:
                return await client.session.call_tool(
                    "waits", {}, input_responses=responses, request_state=asked.request_state, allow_input_required=True
                )

        async with anyio.create_task_group() as group:
            group.start_soon(second_round)
            with anyio.fail_after(60):
                while "slow once started" not in marks(env):  # the round is waiting on the upstream
                    await anyio.sleep(0.05)
            os.kill(first.pid, signal.SIGKILL)
            group.cancel_scope.cancel()
        first.wait()
    await anyio.sleep(4)  # the upstream it had started finishes on its own (its process was not killed)
    port = free_port()
    with serving(port):
        url = f"http://127.0.0.1:{port}/mcp"
        # the same round sent again: its claim is taken over
        async with Client(url, mode="2026-07-28", **answers().callbacks()) as client:
            result = await within(60, client.session.call_tool(
                "waits", {}, input_responses=responses, request_state=asked.request_state, allow_input_required=True
            ))  # fmt: skip
    assert not result.is_error, result.content[0].text
    assert result.structured_content["go"] is True
    assert result.structured_content["outcome"].startswith("ToolCallInterruptedError: tool call 'tool-1' was under way")
    assert [line for line in marks(env) if line.startswith("slow")].count("slow once started") == 1
