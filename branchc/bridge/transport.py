"""Running the server: stdio (what MCP hosts start as a subprocess) or streamable HTTP."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import anyio
import uvicorn
from mcp.server import Server
from mcp.server.auth.provider import TokenVerifier
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

from .auth import http_auth, transport_security
from .connection import ClientWatch
from .deadlines import deadline_protocol
from .operations import Drain, Operations, Readiness, drain
from .server import EPHEMERAL_KEY_WARNING
from .settings import ServeSettings

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
    server: Server, settings: ServeSettings, token_verifier: TokenVerifier | None = None, metrics: Any = None
) -> None:
    """Stateful streamable HTTP at /mcp on `settings.http` (the handshake era's back channel needs the
    session's stream). Warns when request_state is sealed with a key of this process only: replicas could
    not share rounds.

    Callers authenticate when `token_verifier` is given (the SDK's bearer middleware; auth.py); Host and
    Origin are checked wherever it binds (`auth.transport_security`). `ClientWatch` (connection.py) ends a
    call whose client went away, and fails the request an answer over `--max-message-mb` answers; a session
    nothing was sent on for `--session-timeout` seconds is closed (0: never); a request must arrive whole
    within `--request-timeout` seconds, and past `--max-connections` connections requests get 503. A token
    file is read again on SIGHUP.

    Besides /mcp (operations.py): /healthz, /readyz, and /metrics when `metrics` is given (`--metrics`). SIGTERM
    (and SIGINT) drains: new calls get 503, the calls in flight finish, handshake-era runs still waiting on a
    client are handed over to the store, and the server returns within `--drain-timeout` seconds."""
    _quiet()
    if getattr(server, "state_keys", None) is None:
        print(EPHEMERAL_KEY_WARNING, file=sys.stderr)
    host, port = settings.host_port or ("127.0.0.1", 8000)
    max_message_size = int(settings.max_message_mb * 2**20)
    routes = None
    if settings.console:  # the runs console at /console, behind the same auth (branchc/console: it imports bridge)
        from ..console.serving import console_routes

        routes = console_routes(server, settings, token_verifier)
        print(f"runs console at http://{settings.http}/console", file=sys.stderr)
    sdk_app = server.streamable_http_app(
        host=host,
        max_request_body_size=max_message_size,
        session_idle_timeout=settings.session_timeout or None,
        transport_security=transport_security(settings),
        custom_starlette_routes=routes,
        **http_auth(settings, token_verifier),
    )
    bridge = getattr(server, "bridge", None)
    state = Drain(settings.drain_timeout)
    app = Operations(
        ClientWatch(sdk_app, max_message_size),
        drain=state,
        readiness=Readiness(getattr(bridge, "store", None), getattr(server, "state_keys", None)),
        metrics=metrics,
        token_verifier=token_verifier,
        security=transport_security(settings),
        max_body=max_message_size,
    )
    # an idle connection is kept longer than clients keep theirs (httpx: 5 s), so a client never sends a request
    # on a connection this server is closing at that moment (the request would fail, not be retried)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        # --log-format json: uvicorn's loggers go to the JSON handler (logs.py), not its own formatters
        **({"log_config": None} if settings.log_format == "json" else {}),
        lifespan="on",
        timeout_keep_alive=KEEP_ALIVE,
        http=deadline_protocol(settings.request_timeout),  # deadlines.py: no client holds a connection for ever
        limit_concurrency=settings.max_connections,
    )
    http = _DrainingServer(config, state)

    def stop(grace: float) -> None:
        config.timeout_graceful_shutdown = grace
        http.should_exit = True

    with _reload_on_hangup(token_verifier):
        async with anyio.create_task_group() as group:
            group.start_soon(drain, state, bridge, stop)
            await http.serve()
            group.cancel_scope.cancel()


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, whose SIGTERM and first SIGINT begin the drain (operations.py) instead of closing at once;
    a second SIGINT closes at once, as uvicorn's. The process then exits normally (status 0), the signal
    handled."""

    def __init__(self, config: uvicorn.Config, state: Drain) -> None:
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: Any) -> None:
        if sig == signal.SIGINT and self.state.draining:
            self.force_exit = self.should_exit = True
            return
        self.state.begin()


@contextlib.contextmanager
def _reload_on_hangup(token_verifier: TokenVerifier | None) -> Iterator[None]:
    """SIGHUP reads a token file again (where signals can be handled: the main thread, not Windows)."""
    reload = getattr(token_verifier, "reload", None)
    if reload is None or not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGHUP, lambda number, frame: reload())
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)
