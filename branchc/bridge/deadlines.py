"""What one HTTP client can hold of the server: a connection, for as long as its request takes to arrive.

uvicorn closes a keep-alive connection that stays idle, but any byte cancels that timer, and a new
connection that sends nothing has none: a client that trickles its headers or body (a byte every few
seconds), or opens connections and sends nothing, holds them for ever, and enough such clients hold
every connection the server has. Here each request must arrive whole, its headers and its body, within
`request_timeout` seconds of the connection's first byte (or of its opening); otherwise the connection
is closed and an application waiting on the body sees the client gone. Past `max_connections`
connections at once, uvicorn answers 503 (`limit_concurrency`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["deadline_protocol"]


class _RequestDeadline(H11Protocol):
    request_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arrival: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start()

    def data_received(self, data: bytes) -> None:
        if self._arrival is None and self.conn.their_state is h11.IDLE:
            self._start()  # the first byte of a new request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._stop()  # the whole request has arrived (or the connection is ending)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def _start(self) -> None:
        self._stop()
        self._arrival = self.loop.call_later(self.request_timeout, self._too_slow)

    def _stop(self) -> None:
        if self._arrival is not None:
            self._arrival.cancel()
            self._arrival = None

    def _too_slow(self) -> None:
        self._arrival = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet: say why
                try:
                    self.transport.write(
                        self.conn.send(h11.Response(status_code=408, headers=[(b"connection", b"close")]))
                        + self.conn.send(h11.EndOfMessage())
                    )
                except h11.LocalProtocolError:
                    pass
            self.transport.close()
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.disconnected = True
                self.cycle.message_event.set()


def deadline_protocol(request_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, with every request due within `request_timeout` seconds (`Config(http=...)`)."""
    return type("RequestDeadline", (_RequestDeadline,), {"request_timeout": request_timeout})
