"""Running the server: stdio (what MCP hosts start as a subprocess) or streamable HTTP."""

from __future__ import annotations

import warnings

import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

__all__ = ["serve_http", "serve_stdio"]


def _quiet() -> None:
    # Sampling is deprecated in 2026-07-28 (SEP-2577) but is what the handshake era speaks.
    warnings.simplefilter("ignore", MCPDeprecationWarning)


async def serve_stdio(server: Server) -> None:
    _quiet()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(server: Server, host: str, port: int) -> None:
    """Stateful streamable HTTP at /mcp (the handshake era's back channel needs the session's stream)."""
    _quiet()
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
