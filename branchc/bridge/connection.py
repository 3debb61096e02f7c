"""A client that goes away over HTTP ends its runs: what the SDK's streamable HTTP transport does not tell a tool.

In the handshake era a `tools/call` over streamable HTTP answers on an SSE stream of its own, and the
server's samples and elicitations travel on it. When that stream's connection closes (the client was
killed, or dropped the connection without `notifications/cancelled`), the SDK (mcp 2.3) ends the stream
but tells nobody: the handler keeps waiting for an answer that can no longer come, its run never ends,
its `finally` blocks never run, and the session holds it until the session's idle timeout (30 minutes).
Without an event store nothing can resume that stream, so the call is over: `ClientWatch`, an ASGI
wrapper around the SDK's app, sees the `http.disconnect` of each request and cancels the scopes the call
registered (`ends_with_connection`), so the driver halts the run (its finally blocks run, once) and the
pending request is cancelled.

The SDK answers a POST body over its limit (4 MiB by default) with 413 before reading it. For a request
the client gets an error, but a client's *answer* to a sample or an elicitation is dropped by the SDK's
client on a 413, and the server goes on waiting for it. `ClientWatch` enforces the limit itself: of an
oversized body in a session (an `mcp-session-id` header) it reads at most SCAN_PREFIX bytes, for at most
SCAN_SECONDS, looking for the id the message answers at the top level of its object (the SDK's client
writes `{"jsonrpc": "2.0", "id": ..., "result": ...}`, the id within the first bytes); it stops at the
first nesting or array before that, and never reads the rest (the server discards it unparsed, as after
the SDK's own 413). An oversized answer found so fails the server's waiting request with a JSON-RPC error
naming the size and the limit, so the run fails at its yield with that error; any other oversized body
gets a 413 whose body is a JSON-RPC error the client shows.

`watch_clients(app)` is the same wrapper for an app the SDK serves itself (a mounted server's
`mcp.streamable_http_app()`, mounting.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ClientWatch", "Scopes", "connection_gone", "ends_with_connection", "watch_clients", "write_bounded"]

logger = logging.getLogger(__name__)

SCOPE_KEY = "branchc.connection"
DEFAULT_MAX_BODY = 4 * 2**20  # the SDK's own default (mcp.server.transport_security.DEFAULT_MAX_REQUEST_BODY_SIZE)
SCAN_PREFIX = 64 * 2**10  # an oversized body is read this far at most, looking for the id it answers
SCAN_SECONDS = 5.0  # and for this long at most (a client that sends slowly gets the plain 413)
CLEANUP_WRITE_TIMEOUT = 5.0  # what a run's cleanup may wait to send its logs to a client that does not read


class Scopes:
    """Cancel scopes that end together: `close()` cancels those open, and any opened after it."""

    def __init__(self) -> None:
        self.closed = False
        self.scopes: set[anyio.CancelScope] = set()

    def close(self) -> None:
        self.closed = True
        for scope in list(self.scopes):
            scope.cancel()

    @contextlib.contextmanager
    def scope(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that ends with the others; `scope.cancelled_caught` afterwards says `close()` ended it."""
        scope = anyio.CancelScope()
        if self.closed:
            scope.cancel()
        self.scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self.scopes.discard(scope)


class _Connection(Scopes):
    """One HTTP request's connection: whether it closed, and the cancel scopes that end with it."""


def _connection(ctx: Any) -> _Connection | None:
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    return scope.get(SCOPE_KEY) if isinstance(scope, dict) else None


def connection_gone(ctx: Any) -> bool:
    """Whether the HTTP connection of this request closed (False on stdio, and while it is open)."""
    connection = _connection(ctx)
    return connection is not None and connection.closed


@contextlib.contextmanager
def ends_with_connection(ctx: Any) -> Iterator[anyio.CancelScope]:
    """A cancel scope that is cancelled when the request's HTTP connection closes (never on stdio);
    `scope.cancelled_caught` afterwards says the client went away."""
    connection = _connection(ctx)
    if connection is None:
        with anyio.CancelScope() as scope:
            yield scope
        return
    with connection.scope() as scope:
        yield scope


async def write_bounded(ctx: Any, write: Any, what: str) -> None:
    """A notification to the client (a log, a progress note): dropped when its connection is gone, and
    given up after CLEANUP_WRITE_TIMEOUT seconds when the client does not read (notifications are
    fire-and-forget in MCP, and a run's cleanup must not wait forever on a client that is not there)."""
    if connection_gone(ctx):
        return
    with anyio.move_on_after(CLEANUP_WRITE_TIMEOUT) as timer:
        await write()
    if timer.cancelled_caught:
        logger.warning("branchc: %s dropped: the client took nothing for %.0f s", what, CLEANUP_WRITE_TIMEOUT)


# -- the ASGI wrapper -------------------------------------------------------------------------------------


def watch_clients(app: ASGIApp, max_body: int = DEFAULT_MAX_BODY) -> ASGIApp:
    """`app` (the SDK's streamable HTTP app) wrapped so a handshake-era branchc call ends when its client goes
    away, and an answer over `max_body` bytes fails the request it answers (see ClientWatch). For a server
    branchc tools are mounted on (mounting.py), served by the SDK's own HTTP app:

        app = watch_clients(mcp.streamable_http_app())
        uvicorn.run(app, host="127.0.0.1", port=8000)

    Give `max_body` the limit the app was made with (`max_request_body_size`, 4 MiB by default)."""
    return ClientWatch(app, max_body)


class ClientWatch:
    """Wraps the SDK's Starlette app: marks each HTTP request's connection closed on `http.disconnect`
    (cancelling what registered with `ends_with_connection`), and enforces `max_body` on POST bodies
    so an oversized answer fails the request it answers instead of being dropped."""

    def __init__(self, app: ASGIApp, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = scope[SCOPE_KEY] = _Connection()

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                connection.close()
            return message

        if scope.get("method") != "POST":
            await self.app(scope, watched, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_body:
                await self._oversized(scope, watched, send, [], True, int(declared))
            else:
                await self.app(scope, watched, send)
            return
        # no Content-Length (a chunked body): read it up to the limit first, as the SDK would
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await watched()
            if message["type"] != "http.request":
                await self.app(scope, _replay(chunks, watched, message), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_body:
                await self._oversized(scope, watched, send, chunks, more, None)
                return
            if not more:
                await self.app(scope, _replay(chunks, watched), send)
                return

    async def _oversized(
        self, scope: Scope, receive: Receive, send: Send, chunks: list[bytes], more: bool, declared: int | None
    ) -> None:
        """A 413; for an answer in a session, found in the body's first SCAN_PREFIX bytes within SCAN_SECONDS,
        the server's request it answers fails too. The rest of the body is never read."""
        envelope = _Envelope()
        if _header(scope, b"mcp-session-id"):  # no answer is outside a session (the SDK checks the session itself)
            with anyio.move_on_after(SCAN_SECONDS):
                await _scan(envelope, chunks, more, receive)
        how_big = f"{declared} bytes" if declared is not None else f"more than {self.max_body} bytes"
        limit = f"this server takes at most {self.max_body} bytes (branchc serve --max-message-mb)"
        if envelope.decided and envelope.is_response and envelope.id is not None:
            text = f"the client's answer to request {envelope.id!r} was {how_big}, and {limit}"
            logger.warning("branchc: %s", text)
            await self._fail_waiting_request(scope, envelope.id, text)
            await _json_response(send, 413, {"error": text})
            return
        text = f"the request body was {how_big}, and {limit}"
        error = {"code": -32600, "message": text}
        request_id = envelope.id if envelope.decided else None
        await _json_response(send, 413, {"jsonrpc": "2.0", "id": request_id, "error": error})

    async def _fail_waiting_request(self, scope: Scope, request_id: Any, text: str) -> None:
        """Hand the SDK, in place of the oversized answer, a JSON-RPC error for the request it answers:
        the server's waiting request raises it (its 202 Accepted is not sent; the client gets the 413)."""
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32600, "message": text}}).encode()
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-length", b"transfer-encoding")]
        inner = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        sent = False

        async def receive_once() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await anyio.sleep_forever()
            raise AssertionError  # pragma: no cover

        async def swallow(message: Message) -> None:
            pass

        with anyio.move_on_after(CLEANUP_WRITE_TIMEOUT):
            await self.app(inner, receive_once, swallow)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1").strip()
    return None


async def _scan(envelope: _Envelope, chunks: list[bytes], more: bool, receive: Receive) -> None:
    """Feed `envelope` the body's first SCAN_PREFIX bytes at most (those read already, then more), until it decides."""
    seen = 0
    for chunk in chunks:
        envelope.feed(chunk[: SCAN_PREFIX - seen])
        seen += len(chunk)
        if envelope.decided or seen >= SCAN_PREFIX:
            return
    while more and not envelope.decided and seen < SCAN_PREFIX:
        message = await receive()
        if message["type"] != "http.request":
            return
        body = message.get("body", b"")
        envelope.feed(body[: SCAN_PREFIX - seen])
        seen += len(body)
        more = message.get("more_body", False)


def _replay(chunks: list[bytes], receive: Receive, last: Message | None = None) -> Receive:
    """A receive that gives the body read so far as one message, then goes on with `receive`."""
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": last is not None}]
    if last is not None:
        pending.append(last)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _json_response(send: Send, status: int, data: Any) -> None:
    body = json.dumps(data).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_SPECIAL = re.compile(rb'["{}\[\],:]')
_STRING_END = re.compile(rb'["\\]')


class _Envelope:
    """The top-level keys of a JSON-RPC message, read as its bytes arrive (nothing is kept but the
    top-level keys and the id): its id, and whether it is a response (result / error) or not (method).
    Decided as soon as the id and one of those keys were seen, usually within the first bytes; broken
    (given up) at the first nested value before that, a top-level array, or a key or id over 4 KiB."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.token: bytearray | None = None  # a top-level key, or the id's value, being read
        self.reading = ""  # "key" | "id" | ""
        self.expect_key = False
        self.key: str | None = None
        self.keys: set[str] = set()
        self.id: Any = None
        self.seen_id = False
        self.broken = False

    @property
    def is_response(self) -> bool:
        return bool(self.keys & {"result", "error"}) and "method" not in self.keys

    @property
    def decided(self) -> bool:
        return self.broken or (self.seen_id and bool(self.keys & {"result", "error", "method"}))

    def feed(self, data: bytes) -> None:
        at = 0
        while at < len(data) and not self.decided:
            if self.escaped:  # the byte after a backslash, in a string
                self._keep(data[at : at + 1])
                self.escaped = False
                at += 1
            elif self.in_string:
                found = _STRING_END.search(data, at)
                if found is None:
                    self._keep(data[at:])
                    return
                self._keep(data[at : found.start()])
                at = found.end()
                if data[found.start()] == 0x5C:  # a backslash
                    self._keep(b"\\")
                    self.escaped = True
                else:
                    self.in_string = False
                    self._end_string()
            elif self.reading == "id" and self.token is None and data[at : at + 1] != b'"':
                if data[at : at + 1].isspace():
                    at += 1
                else:
                    self.token = bytearray()  # a number (or true, false, null): up to the next , or }
            elif self.reading == "id" and self.token is not None:
                end = _SPECIAL.search(data, at)
                stop = len(data) if end is None else end.start()
                self._keep(data[at:stop])
                at = stop
                if end is not None:
                    self._end_scalar()
            else:
                found = _SPECIAL.search(data, at)
                if found is None:
                    return
                at = found.end()
                char = data[found.start()]
                if char == 0x22:  # a quote
                    self.in_string = True
                    if self.depth == 1 and (self.expect_key or self.reading == "id"):
                        self.token = bytearray()
                elif char in b"{[":
                    if self.depth >= 1 or char == 0x5B:
                        # undecided at a nested value (or the id is one, or a batch): the SDK's client writes
                        # the id first, so whatever follows is not looked into
                        self.broken = True
                        return
                    self.depth = 1
                    self.expect_key = True  # the object's first key
                elif char in b"}]":
                    self.broken = True  # the message ended undecided
                    return
                elif char == 0x2C and self.depth == 1:  # a comma
                    self.expect_key = True
                elif char == 0x3A and self.depth == 1 and self.key == "id" and not self.seen_id:  # a colon
                    self.reading = "id"
                    self.token = None

    def _keep(self, data: bytes) -> None:
        if self.token is not None:
            if len(self.token) + len(data) > 4096:
                self.broken = True  # no id or key is that long
                self.token = None
            else:
                self.token += data

    def _end_string(self) -> None:
        if self.token is None or self.depth != 1:
            return
        text = bytes(self.token)
        self.token = None
        try:
            value = json.loads(b'"' + text + b'"')
        except ValueError:
            self.broken = True
            return
        if self.reading == "id":
            self.id, self.seen_id, self.reading = value, True, ""
        elif self.expect_key:
            self.key = value
            self.keys.add(value)
            self.expect_key = False

    def _end_scalar(self) -> None:
        text = bytes(self.token or b"").strip()
        self.token = None
        self.reading = ""
        try:
            value = json.loads(text)
        except ValueError:
            self.broken = True
            return
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            self.id, self.seen_id = value, True
        else:
            self.broken = True
