"""`branchc serve`: the tools under a path, served as `ServeSettings` say, until the server is stopped.

Everything that can be refused is refused before the server starts: the settings, the tools, the store,
the executor, the result-handler engine, serving off loopback with no authentication. Each is one
BranchcError whose message names the flag and the fix (the CLI prints it as one line).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
from pathlib import Path
from typing import Any

import anyio

from ..errors import BranchcError
from .settings import ServeSettings, SettingsError

__all__ = ["serve"]


def serve(path: str | Path, settings: ServeSettings) -> None:
    """Serve the tools and workflows under `path` over stdio, or streamable HTTP with `settings.http`."""
    from ..executors import ExecutorSpecError, open_executor, parse_executor
    from .auth import check_exposure, verifier
    from .durable import serving_store
    from .handlers.wrap import add_result_handlers
    from .loading import load_served_tools
    from .server import create_server
    from .transport import serve_http, serve_stdio

    try:
        spec = parse_executor(settings.executor)
    except ExecutorSpecError as error:
        raise SettingsError(f"--executor {error}") from None
    token_verifier = verifier(settings) if settings.http is not None else None
    warning = check_exposure(settings, token_verifier)
    if settings.metrics and settings.http is None:
        raise SettingsError("--metrics serves /metrics over HTTP: give --http HOST:PORT too")
    from .logs import configure_logging

    configure_logging(settings.log_format)
    tools = load_served_tools(path, guided=settings.guided)
    store = executor = engine = tracer = meters = None
    if settings.otel:
        from .telemetry import configure_tracing

        tracer = configure_tracing(content=settings.trace_content, principal=settings.trace_principal)
    if settings.metrics:
        from .telemetry import configure_metrics

        meters = configure_metrics()
    try:
        keys = settings.key_ring()  # one ring seals request_state, the store's records and the workers' steps
        history = None if settings.history == "all" else settings.history
        store = serving_store(settings.store, http=settings.http is not None, keys=keys, history=history)
        try:
            executor = open_executor(spec, key=keys.secrets[0])
        except ExecutorSpecError as error:
            raise SettingsError(f"--executor {spec}: {error}") from None
        _keep_builds(tools, store)
        server = create_server(tools, settings, store=store, executor=executor, keys=keys)
        if meters is not None and store is not None:
            from ..runtime import tracing
            from .waiting import WaitingCount

            tracing.waiting_runs(WaitingCount(store))  # read from the store at each scrape (waiting.py)
        if settings.result_handlers:
            engine = _handler_engine(settings)
            upstreams = server.bridge.upstreams if settings.handler_upstreams else None
            add_result_handlers(server, engine, chaining=not settings.no_chaining, upstreams=upstreams)
    except BaseException:
        _close(store, executor)
        raise
    # start-up's objects (modules, the compiled tools, the SDK's schemas) live as long as the server: out of the
    # collector's sight, the full collections that many rounds of allocations set off no longer walk them all
    gc.freeze()

    async def serving(run: Any, *args: Any, **kwargs: Any) -> None:
        try:
            await run(*args, **kwargs)
        finally:
            if engine is not None:  # its workers stop with the server
                with anyio.CancelScope(shield=True):
                    await engine.aclose()

    try:
        if settings.http is None:
            anyio.run(serving, serve_stdio, server)
            return
        if warning is not None:
            print(warning, file=sys.stderr)
        kept = f"; runs kept in {store.url}" if store is not None else "; no store (--store none)"
        who = "; anyone may call" if token_verifier is None else "; callers authenticate"
        measured = f"; metrics at http://{settings.http}/metrics" if meters is not None else ""
        print(f"serving {len(tools)} tool(s) at http://{settings.http}/mcp{kept}{who}{measured}", file=sys.stderr)
        anyio.run(functools.partial(serving, serve_http, server, settings, token_verifier, meters))
    finally:
        _close(store, executor)
        if tracer is not None:
            tracer.shutdown()  # what is still batched goes out
        if meters is not None:
            meters.shutdown()


def _keep_builds(tools: dict[str, Any], store: Any) -> None:
    """Keep the served builds in the cache now, as imported (runtime/builds.py), noting the store their runs are in:
    `runs gc` of another store leaves them."""
    from ..runtime.builds import served_with
    from .durable import tool_build

    for ident in {tool_build(tool) for tool in tools.values()} - {""}:
        if store is not None:
            with contextlib.suppress(OSError):
                served_with(ident, store.url)


def _close(store: Any, executor: Any) -> None:
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)
    if store is not None:
        store.close()


def _handler_engine(settings: ServeSettings) -> Any:
    """The result-handler engine the settings name; a BranchcError when it cannot run here."""
    if settings.handler_engine == "monty":
        from .handlers.monty import MontyEngine

        return MontyEngine()
    from .handlers.sandbox import SandboxEngine, bubblewrap_available

    problem = bubblewrap_available()
    if problem is not None and not settings.unsafe_handlers:
        raise BranchcError(
            f"--handler-engine cpython runs each handler under bubblewrap, which cannot run here: {problem}. "
            f"Install bubblewrap (Debian: apt-get install bubblewrap) or use --handler-engine monty; "
            f"--unsafe-handlers runs them with resource limits only, in no sandbox"
        )
    if problem is not None:
        print(
            f"warning: bubblewrap cannot run here ({problem}): result handlers run with resource limits only, "
            f"IN NO SANDBOX (--unsafe-handlers)",
            file=sys.stderr,
        )
    return SandboxEngine(unsafe=problem is not None)
