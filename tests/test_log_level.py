"""The client's log level, with the real `mcp` client: `logging/setLevel` per session in the handshake
era (in process, and over HTTP with two sessions on one server subprocess), the per-request
`_meta` logLevel in 2026-07-28; and the `logging` capability."""

from __future__ import annotations

import warnings
from typing import Any

import mcp.types as types
import pytest
from _bridge_support import KEY, http_server
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.exceptions import MCPError as McpError

from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

LOUD = """
from pydantic import BaseModel
from branchc import Context, tool

class Name(BaseModel):
    name: str

loud = tool("loud", description="logs at four levels, around one question", requires={"elicitation"})

@loud.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "d")
    yield ctx.log("info", "i")
    who = yield ctx.elicit("name", message="Who?", schema=Name)
    yield ctx.log("warning", "w")
    yield ctx.log("error", "e")
    return who.content.name
"""
ALL = ["d", "i", "w", "e"]


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "loud_tool.py").write_text(LOUD)
    return folder


class Listener:
    def __init__(self) -> None:
        self.logs: list[Any] = []

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    def callbacks(self) -> dict[str, Any]:
        return {"logging_callback": self.logging, "elicitation_callback": self.elicitation}


async def call(session: Client, listener: Listener) -> list[Any]:
    listener.logs.clear()
    result = await session.call_tool("loud", {})
    assert not result.is_error, result.content[0].text
    return list(listener.logs)


async def test_set_level_filters_this_sessions_logs_only(source):
    server = create_server(load_served_tools(source), state_key=KEY)
    first, second = Listener(), Listener()
    async with Client(server, mode="legacy", **first.callbacks()) as one:
        assert one.server_capabilities.logging is not None
        assert await call(one, first) == ALL  # no setLevel yet: every level
        assert (await one.session.set_logging_level("warning")).model_dump(exclude_none=True) == {}
        assert await call(one, first) == ["w", "e"]
        async with Client(server, mode="legacy", **second.callbacks()) as two:
            assert await call(two, second) == ALL  # another session: its own level
            await two.session.set_logging_level("error")
            assert await call(two, second) == ["e"]
        assert await call(one, first) == ["w", "e"]
        await one.session.set_logging_level("debug")
        assert await call(one, first) == ALL


async def test_set_level_holds_per_http_session(source):
    with http_server(source, {}, "--state-key", KEY) as url:
        first, second = Listener(), Listener()
        async with Client(url, mode="legacy", **first.callbacks()) as one:
            async with Client(url, mode="legacy", **second.callbacks()) as two:
                await one.session.set_logging_level("warning")
                assert await call(one, first) == ["w", "e"]
                assert await call(two, second) == ALL


@pytest.mark.parametrize(("level", "expected"), [(None, []), ("info", ["i", "w", "e"]), ("error", ["e"])])
async def test_2026_logs_follow_each_requests_log_level(source, level, expected):
    server = create_server(load_served_tools(source), state_key=KEY)
    listener = Listener()
    async with Client(server, mode="2026-07-28", log_level=level, **listener.callbacks()) as session:
        assert await call(session, listener) == expected
        with pytest.raises(McpError, match="Method not found"):  # setLevel is gone in 2026-07-28
            await session.session.set_logging_level("debug")
