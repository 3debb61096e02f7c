"""The MCP bridge: compiled tools served to MCP clients in both protocol eras (`branchc serve`,
server.py), or added to an existing SDK server beside its own tools (`mount`, mount.py)."""

from .mount import mount

__all__ = ["mount"]
