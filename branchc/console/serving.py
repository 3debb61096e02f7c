"""Where the console runs: on its own (`branchc console`), or mounted at /console in `branchc serve --http --console`.

On its own it opens the store as `branchc runs` does (`--store`, else the store `serve --http` uses; the state key
as `serve` finds it), and cancels runs with the tools `--tools PATH` names (without them, cancel is shown disabled,
with the reason). Mounted, it shares the server's store, key ring, served tools, auth and Host checks. Either way,
without authentication it serves loopback only (`--console` and `branchc console` refuse any other address), and
the local user is an operator.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from ..bridge.settings import ServeSettings, SettingsError, is_loopback
from .app import console_app
from .pages import Console

__all__ = ["DEFAULT_HTTP", "console_routes", "serve_console"]

DEFAULT_HTTP = "127.0.0.1:8766"


def check_console_exposure(settings: ServeSettings, verifier: Any) -> None:
    """A console off loopback needs authentication (SettingsError), whatever `--allow-anonymous` says: it shows
    every run to whoever reaches it, and ends them."""
    from ..bridge.auth import check_exposure

    host, _ = settings.host_port or ("127.0.0.1", 0)
    if verifier is None and not is_loopback(host):
        raise SettingsError(
            f"--http {settings.http}: the runs console shows and ends every run, and no one would be asked who they "
            f"are; give --auth-tokens FILE or --auth-jwks URL --auth-issuer ISS --auth-audience AUD, or bind 127.0.0.1"
        )
    check_exposure(settings.with_changes(allow_anonymous=True), verifier)  # every address: --allowed-hosts


def console_routes(server: Any, settings: ServeSettings, verifier: Any) -> list[Any]:
    """The console mounted at /console in a server `create_server` made (`serve --http --console`): its store, key
    ring and tools, with the server's auth. SettingsError when the server keeps no store."""
    from starlette.routing import Mount

    from ..store.keys import KeyRing

    bridge = server.bridge
    if bridge.store is None:
        raise SettingsError("--console shows the runs a store holds: give --store URL (not none)")
    keys = getattr(server, "state_keys", None) or KeyRing.generate()
    console = Console(bridge.store, keys, settings, tools=bridge.tools, verifier=verifier)
    return [Mount("/console", app=console_app(console))]


def serve_console(settings: ServeSettings, tools: str | Path | None = None) -> None:
    """`branchc console`: the console on `settings.http` (default DEFAULT_HTTP) until stopped."""
    import uvicorn

    from ..bridge.auth import verifier as make_verifier
    from ..bridge.deadlines import deadline_protocol
    from ..bridge.runs import load_tools, open_runs_store
    from ..bridge.transport import _reload_on_hangup  # SIGHUP reads a token file again, as serve does

    if settings.http is None:
        settings = settings.with_changes(http=DEFAULT_HTTP)
    verifier = make_verifier(settings)
    check_console_exposure(settings, verifier)
    keys = settings.key_ring()
    served = load_tools(tools) if tools is not None else None
    store = open_runs_store(settings.store, keys)
    try:
        console = Console(store, keys, settings, tools=served, verifier=verifier)
        host, port = settings.host_port  # type: ignore[misc]
        config = uvicorn.Config(
            console_app(console),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            http=deadline_protocol(settings.request_timeout),
            limit_concurrency=settings.max_connections,
        )
        who = "callers sign in" if verifier is not None else "the local user is an operator"
        cancel = f"cancel runs the tools of {tools}" if tools is not None else "cancel is off (no --tools)"
        shown = f"[{host}]" if ":" in host else host
        print(f"runs console at http://{shown}:{port}/ for {store.url}; {who}; {cancel}", file=sys.stderr)
        with _reload_on_hangup(verifier):
            anyio.run(uvicorn.Server(config).serve)
    finally:
        store.close()
