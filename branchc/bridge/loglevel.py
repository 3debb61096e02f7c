"""The client's log level: which `notifications/message` a tool's `ctx.log` may send.

Handshake era (up to 2025-11-25): the client sets a level for its session with
`logging/setLevel`; the server declares the `logging` capability and, from then on, sends only
messages at that level or above. Before any setLevel, every message is sent (the spec leaves
that to the server). The level lives in the SDK's per-connection state (`Connection.state`),
so each session has its own and it goes away with the session.

2026-07-28: `logging/setLevel` no longer exists (the SDK answers it "Method not found"); a
client asks for logs per request, with `_meta["io.modelcontextprotocol/logLevel"]`, and the
SDK's session drops every message below that level (and all of them when it is absent) for the
request. branchc adds nothing there: each round's logs go through that same gate.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp.server import ServerRequestContext

from ..runtime.effects import LOG_LEVELS

__all__ = ["log_allowed", "set_logging_level"]

_KEY = "branchc.log_level"


def _connection_state(ctx: ServerRequestContext) -> dict[str, Any] | None:
    """The SDK's per-connection scratch dict (`mcp.server.connection.Connection.state`). The lowlevel
    `ServerSession` keeps its connection private; this is the one place branchc reaches for it."""
    state = getattr(getattr(ctx.session, "_connection", None), "state", None)
    return state if isinstance(state, dict) else None


async def set_logging_level(ctx: ServerRequestContext, params: types.SetLevelRequestParams) -> types.EmptyResult:
    """The `logging/setLevel` handler: remember the level for this session."""
    state = _connection_state(ctx)
    if state is None:
        raise RuntimeError("this mcp SDK keeps no per-connection state where branchc can keep the log level")
    state[_KEY] = params.level
    return types.EmptyResult()


def log_allowed(ctx: ServerRequestContext, level: str) -> bool:
    """Whether a message at `level` may go to this session's client (its setLevel; all before one)."""
    state = _connection_state(ctx)
    threshold = None if state is None else state.get(_KEY)
    return threshold is None or LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)
