"""What `branchc serve --http` answers besides MCP: health, readiness, metrics, and the drain on SIGTERM.

`Operations` is an ASGI wrapper in front of the SDK's app (and ClientWatch, connection.py):

- `GET /healthz`: 200 "ok" while the process serves (draining too); outside auth, it says nothing else.
- `GET /readyz`: 200 "ready" when the store answers a cheap call (the load of a run id no run has, within
  READY_SECONDS; read at most once a READY_EVERY seconds, so probes cannot load the store) and the state key is
  loaded; else 503 naming which check failed, never why (the reason goes to stderr once). Draining: 503.
- `GET /metrics` (`--metrics`): the OpenTelemetry metrics in the Prometheus text format (bridge/telemetry.py).
  With auth it takes a caller's bearer token, as /mcp does (401 otherwise); without, a request whose Host is not
  one the server takes (DNS rebinding) is refused, as /mcp refuses it.
- While draining (`Drain`), a POST whose body is a JSON-RPC request (a new call, a new session, any method) gets
  503 with `Retry-After` and a JSON-RPC error the SDK's client raises: a 2026-07-28 client sends the round to
  another replica (any replica with the key and the store serves any round), a handshake-era client opens a new
  session there. Answers to the server's questions and notifications still pass, so the calls in flight finish.

The drain (`drain`): on SIGTERM the server stops taking calls, gives the calls in flight until `--drain-timeout`
less a margin (HANDOVER_MARGIN) to finish, then hands the handshake-era runs still waiting on their client over
to the store (held.py, `HeldRun.release`: each record marked released, the live copy let go of without its
cleanup, which `branchc runs resume` runs where the run goes on), and exits, within `--drain-timeout`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Drain", "Operations", "Readiness", "drain"]

logger = logging.getLogger("branchc")

READY_SECONDS = 2.0  # the store must answer readiness's call within this
READY_EVERY = 1.0  # readiness reads the store at most this often; probes in between get the last answer
RETRY_AFTER = "1"  # seconds a refused caller waits before sending again (to another replica, behind a balancer)
HANDOVER_MARGIN = 5.0  # seconds before the drain deadline at which waiting handshake-era runs are handed over
DRAINING = -32000  # the JSON-RPC error code of a request refused while draining


class Drain:
    """The drain of one server: whether it began, the POSTs in flight, and when it must be over."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.began: float | None = None  # time.monotonic() of the SIGTERM
        self.in_flight = 0  # POSTs to /mcp being answered (calls, answers to the server's questions)

    @property
    def draining(self) -> bool:
        return self.began is not None

    def begin(self) -> None:
        """Stop taking calls (a signal handler calls it: it only notes the time)."""
        if self.began is None:
            self.began = time.monotonic()

    @property
    def deadline(self) -> float:
        assert self.began is not None
        return self.began + self.timeout

    @property
    def handover_at(self) -> float:
        """When the runs still waiting on a client are handed over: the deadline less a margin for it."""
        return self.deadline - min(HANDOVER_MARGIN, self.timeout / 4)


class Readiness:
    """Whether the server can serve: its store answers and its state key is loaded (`check`, cached briefly)."""

    def __init__(self, store: Any, keys: Any) -> None:
        self.store = store
        self.keys = keys
        self._last: tuple[float, str | None] = (-READY_EVERY, None)
        self._lock = anyio.Lock()
        self._said: str | None = None

    async def check(self) -> str | None:
        """None when ready, else which check failed ("store", "state key")."""
        async with self._lock:
            at, problem = self._last
            if time.monotonic() - at < READY_EVERY:
                return problem
            problem = await self._check()
            self._last = (time.monotonic(), problem)
            return problem

    async def _check(self) -> str | None:
        if self.keys is None or not getattr(self.keys, "secrets", None):
            return "state key"
        if self.store is None:
            return None
        why = f"it did not answer within {READY_SECONDS:.0f} s"
        with anyio.move_on_after(READY_SECONDS):
            try:
                await anyio.to_thread.run_sync(self.store.load, "branchc-readiness-probe", abandon_on_cancel=True)
            except Exception as error:  # a store that is down says why: on stderr, not to the prober
                why = f"{type(error).__name__}: {error}"
            else:
                self._say(None)
                return None
        self._say(f"branchc: not ready: the store does not answer ({why})")
        return "store"

    def _say(self, text: str | None) -> None:
        if text != self._said:
            self._said = text
            if text is not None:
                print(text, file=sys.stderr, flush=True)


class Operations:
    """ASGI wrapper: /healthz, /readyz and /metrics, and the drain's gate, in front of `app` (the MCP app)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        drain: Drain,
        readiness: Readiness,
        metrics: Any = None,
        token_verifier: Any = None,
        security: TransportSecuritySettings | None = None,
        max_body: int = 4 * 2**20,
    ) -> None:
        self.app = app
        self.drain = drain
        self.readiness = readiness
        self.metrics = metrics
        self.token_verifier = token_verifier
        self.hosts = TransportSecurityMiddleware(security) if security is not None else None
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "")
        if path == "/healthz" and method == "GET":
            await _text(send, 200, "ok")
        elif path == "/readyz" and method == "GET":
            problem = "draining" if self.drain.draining else await self.readiness.check()
            await _text(send, 200 if problem is None else 503, "ready" if problem is None else f"not ready: {problem}")
        elif path == "/metrics" and self.metrics is not None and method == "GET":
            await self._metrics(scope, send)
        elif method == "POST" and self.drain.draining:
            await self._gated(scope, receive, send)
        elif method == "POST":
            self.drain.in_flight += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.drain.in_flight -= 1
        else:
            await self.app(scope, receive, send)

    async def _metrics(self, scope: Scope, send: Send) -> None:
        request = Request(scope)
        if self.token_verifier is not None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token or await self.token_verifier.verify_token(token.strip()) is None:
                await _text(send, 401, "unauthorized", [(b"www-authenticate", b"Bearer")])
                return
        elif self.hosts is not None and (refused := await self.hosts.validate_request(request)) is not None:
            await refused(scope, _no_body, send)
            return
        accept = request.headers.get("accept")
        body, content_type = await anyio.to_thread.run_sync(self.metrics.exposition, accept)  # it reads the store
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _gated(self, scope: Scope, receive: Receive, send: Send) -> None:
        """While draining: a JSON-RPC request is refused with 503; anything else (an answer, a notification) is
        served, the body read here given again to the app."""
        chunks: list[bytes] = []
        size, more, last = 0, True, None
        while more and size <= self.max_body:
            message = await receive()
            if message["type"] != "http.request":
                last = message
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        request_id = _request_id(b"".join(chunks)) if not more and last is None else None
        if request_id is not _NOT_A_REQUEST:
            error = {"code": DRAINING, "message": "this server is shutting down; send the request to another replica"}
            body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", RETRY_AFTER.encode()),
                (b"connection", b"close"),
            ]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        self.drain.in_flight += 1
        try:
            await self.app(scope, replay, send)
        finally:
            self.drain.in_flight -= 1


_NOT_A_REQUEST = object()


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _request_id(body: bytes) -> Any:
    """The id of the JSON-RPC request `body` is (None when it has none readable: refused all the same);
    _NOT_A_REQUEST for a response or a notification."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    messages = message if isinstance(message, list) else [message]
    for item in messages:
        if not isinstance(item, dict) or ("method" in item and "id" in item):
            return item.get("id") if isinstance(item, dict) and isinstance(item.get("id"), (int, str)) else None
    return _NOT_A_REQUEST


async def _text(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    base = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": base + (headers or [])})
    await send({"type": "http.response.body", "body": body})


async def drain(state: Drain, bridge: Any, stop: Callable[[float], None]) -> None:
    """Once `state` began (SIGTERM): wait for the POSTs in flight until the hand-over time, hand the handshake-era
    runs still waiting on a client over (`HeldRun.release`), wait for their calls to return, then `stop(seconds)`:
    the HTTP server closes what is left (idle connections, event streams) within `seconds`, inside the deadline."""
    while not state.draining:
        await anyio.sleep(0.1)
    print(f"branchc: draining: new calls get 503; {state.in_flight} in flight", file=sys.stderr, flush=True)
    held = getattr(bridge, "held", None) if bridge is not None else None
    while state.in_flight and time.monotonic() < state.handover_at:
        await anyio.sleep(0.05)
    if held:
        runs = list(held)
        handed = 0
        with anyio.move_on_after(max(0.1, state.deadline - time.monotonic() - 1.0)):
            for run in runs:
                with contextlib.suppress(Exception):
                    handed += bool(await run.release("the server is shutting down (drained)"))
        if handed:
            print(f"branchc: draining: {handed} handshake-era run(s) handed over to the store", file=sys.stderr)
    while state.in_flight and time.monotonic() < state.deadline - 0.5:
        await anyio.sleep(0.05)
    stop(max(0.1, min(1.0, state.deadline - time.monotonic())))
