"""The MCP bridge: compiled tools served to MCP clients in both protocol eras (`branchc serve`,
server.py), or added to an existing SDK server beside its own tools (`mount`, mounting.py); served over
streamable HTTP by the SDK's own app, `watch_clients` wraps that app (connection.py). What a server is
told (auth, limits, store, keys, ...) is one `ServeSettings` (settings.py).

The names below are imported when first used, so that a light module of the package (its settings, say)
does not bring the SDK server with it."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ServeSettings", "mount", "watch_clients"]

_WHERE = {"mount": ".mounting", "watch_clients": ".connection", "ServeSettings": ".settings"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
