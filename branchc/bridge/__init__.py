"""The MCP bridge: compiled tools served to MCP clients in both protocol eras (`branchc serve`,
server.py), or added to an existing SDK server beside its own tools (`mount`, mount.py); served over
streamable HTTP by the SDK's own app, `watch_clients` wraps that app (connection.py)."""

from .connection import watch_clients
from .mount import mount

__all__ = ["mount", "watch_clients"]
