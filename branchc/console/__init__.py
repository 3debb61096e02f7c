"""The runs console: the runs a store holds, in a browser (`branchc console`, or `/console` in `branchc serve
--http --console`).

Server-rendered pages (Starlette, Jinja2, one stylesheet and a few lines of plain script) over what `branchc runs`
reads: the runs, filtered by tool, status, owner, age and build; a run's split graph with where each branch
waits, its live variables (names and kinds; values for operators who ask), its history of rounds, its trace id,
and cancel and fork; a tool's graph with how many runs wait at each point. Who may see and do what, and the
checks every request passes, are in access.py; the package depends on bridge, store, runtime and viz, and
nothing but the CLI and `serve --http --console` (bridge/transport.py) imports it.
"""

from __future__ import annotations

from .app import CONTENT_SECURITY_POLICY, console_app
from .pages import Console
from .serving import console_routes, serve_console

__all__ = ["CONTENT_SECURITY_POLICY", "Console", "console_app", "console_routes", "serve_console"]
