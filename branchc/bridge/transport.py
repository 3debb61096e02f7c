"""Running the server: stdio (what MCP hosts start as a subprocess) or streamable HTTP."""

from __future__ import annotations

import sys
import warnings

import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

from .connection import DEFAULT_MAX_BODY, ClientWatch
from .server import EPHEMERAL_KEY_WARNING

__all__ = ["serve_http", "serve_stdio"]

KEEP_ALIVE = 30  # seconds an idle HTTP connection stays open


def _quiet() -> None:
    # Sampling is deprecated in 2026-07-28 (SEP-2577) but is what the handshake era speaks.
    warnings.simplefilter("ignore", MCPDeprecationWarning)


async def serve_stdio(server: Server) -> None:
    _quiet()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(
    server: Server,
    host: str,
    port: int,
    *,
    max_message_size: int = DEFAULT_MAX_BODY,
    session_timeout: float | None = 1800,
) -> None:
    """Stateful streamable HTTP at /mcp (the handshake era's back channel needs the session's stream).
    Warns when request_state is sealed with a key of this process only: replicas could not share rounds.

    `ClientWatch` (connection.py) ends a call whose client went away, and fails the request an answer
    over `max_message_size` bytes answers; a session nothing was sent on for `session_timeout` seconds
    is closed (None: never)."""
    _quiet()
    if getattr(server, "state_key_given", True) is False:
        print(EPHEMERAL_KEY_WARNING, file=sys.stderr)
    sdk_app = server.streamable_http_app(
        host=host, max_request_body_size=max_message_size, session_idle_timeout=session_timeout
    )
    app = ClientWatch(sdk_app, max_message_size)
    # an idle connection is kept longer than clients keep theirs (httpx: 5 s), so a client never sends a request
    # on a connection this server is closing at that moment (the request would fail, not be retried)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", timeout_keep_alive=KEEP_ALIVE
    )
    await uvicorn.Server(config).serve()
