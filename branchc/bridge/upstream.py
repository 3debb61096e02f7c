"""Upstream MCP servers: the tools `ctx.call_tool(name, arguments, server="NAME")` calls, declared at serve time.

    --upstream 'docs=stdio:python -m docs_server --root /srv/docs'   a command, split as a shell splits words
    --upstream 'search=http://127.0.0.1:9000/mcp'                      streamable HTTP

Each upstream is one long-lived session of the SDK's client, in the 2026-07-28 era, opened at its first call
and again after it broke (the upstream died, its connection closed): the call that met the break fails with
its error, the next one starts a new session. The session runs in an event loop of its own, in a thread (an
anyio BlockingPortal), so that it outlives any one call or round and is shared by all of them. A stdio
upstream runs with this server's environment, as the command would from the shell that started the server.

An upstream tool that asks for input answers with the SDK's `InputRequiredResult`: its questions become
requests of the calling run (machine.ask_for_call), asked of this server's client as part of the round (the
handshake era asks them live), and their answers go back with the upstream's `request_state` in the next
call, until the tool gives its result. Its samples and forms travel as MCP gives them: text messages, and
forms in MCP's flat shape.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
from mcp import Client, StdioServerParameters

from ..runtime.client import ElicitAnswer, ElicitRequest, SampleRequest
from ..runtime.errors import BranchcError, ToolCallError, ToolNotAllowedError
from ..runtime.machine import Call
from ..runtime.messages import Message, SampleResult
from ..runtime.toolcalls import ToolResult

__all__ = ["Upstream", "UpstreamCalls", "UpstreamError", "Upstreams", "parse_upstream"]

USAGE = "NAME=stdio:COMMAND ARGS... or NAME=http://HOST:PORT/PATH"
#: what a stdio upstream is not given of this server's environment: its secrets (who holds the state key can
#: seal runs, and so is this server as far as its runs can tell)
_SECRETS = frozenset({"BRANCHC_STATE_KEY", "BRANCHC_PROVIDER_KEY"})


class UpstreamError(BranchcError, ValueError):
    """An --upstream that names no server branchc can reach; the message says which part and the fix."""


@dataclass(frozen=True)
class Upstream:
    """One upstream server as declared: its name and how to reach it (a command, or a URL)."""

    name: str
    command: tuple[str, ...] | None = None
    url: str | None = None

    def __str__(self) -> str:
        return f"{self.name}=" + (f"stdio:{shlex.join(self.command)}" if self.command else str(self.url))

    def target(self) -> StdioServerParameters | str:
        if self.command:
            env = {name: value for name, value in os.environ.items() if name not in _SECRETS}
            return StdioServerParameters(command=self.command[0], args=list(self.command[1:]), env=env)
        assert self.url is not None
        return self.url


def parse_upstream(text: str) -> Upstream:
    """The upstream `text` declares; UpstreamError naming what is wrong and the form to give."""
    name, sep, where = str(text).partition("=")
    name = name.strip()
    if not sep or not name:
        raise UpstreamError(f"--upstream {text!r}: give it a name: {USAGE}")
    if not name.replace("_", "").replace("-", "").isalnum() or ":" in name:
        raise UpstreamError(f"--upstream {text!r}: the name {name!r} is letters, digits, _ and - only")
    where = where.strip()
    if where.startswith("stdio:"):
        try:
            words = shlex.split(where.removeprefix("stdio:"))
        except ValueError as error:
            raise UpstreamError(f"--upstream {text!r}: the command does not split into words: {error}") from None
        if not words:
            raise UpstreamError(f"--upstream {text!r}: stdio: needs a command: {USAGE}")
        return Upstream(name, command=tuple(words))
    if where.startswith(("http://", "https://")):
        return Upstream(name, url=where)
    raise UpstreamError(f"--upstream {text!r}: {where!r} is neither stdio:COMMAND nor an http(s) URL: {USAGE}")


class _Session:
    """One upstream's session of the SDK's client, in an event loop of its own (a thread), opened on demand. A
    session that broke (its connection closed, its process died) is closed, and the next call opens another; a
    call that failed for any other reason (the tool refused it, its answer did not fit) leaves it open."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._portal_cm: Any = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._client_cm: Any = None
        self._client: Client | None = None

    def _open(self) -> tuple[anyio.from_thread.BlockingPortal, Client]:
        """The portal and the open client (opened now if there is none); on a worker thread."""
        with self._lock:
            if self._client is None:
                self._portal_cm = anyio.from_thread.start_blocking_portal()
                self._portal = self._portal_cm.__enter__()
                try:
                    client = Client(
                        self.upstream.target(),
                        mode="2026-07-28",
                        # offered, as this server's client answers them: in this era they come back as questions
                        # (InputRequiredResult) for the round to pass on, never as requests to these callbacks
                        sampling_callback=_not_mid_call,
                        elicitation_callback=_not_mid_call,
                    )
                    client_cm = self._portal.wrap_async_context_manager(client)
                    self._client = client_cm.__enter__()
                    self._client_cm = client_cm
                except BaseException:
                    self._close_locked()
                    raise
            assert self._portal is not None and self._client is not None
            return self._portal, self._client

    def start(self, fn: Any) -> tuple[Any, Client]:
        """`fn(client)` started in the session's loop: (its future, the client it runs on); on a worker thread."""
        portal, client = self._open()
        return portal.start_task_soon(fn, client), client

    def broke(self, client: Client, error: BaseException) -> None:
        """A call on `client` failed with `error`: a broken connection closes the session (only that one)."""
        if not _broken(error):
            return
        with self._lock:
            if self._client is client:
                self._close_locked()

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        client_cm, portal_cm = self._client_cm, self._portal_cm
        self._client_cm = self._client = self._portal = self._portal_cm = None
        with contextlib.suppress(BaseException):  # a broken session closes as well as it can
            if client_cm is not None:
                client_cm.__exit__(None, None, None)
        with contextlib.suppress(BaseException):
            if portal_cm is not None:
                portal_cm.__exit__(None, None, None)


def _broken(error: BaseException) -> bool:
    """Whether `error` says the session's connection is gone (not that one call failed)."""
    from mcp.shared.exceptions import MCPError

    if isinstance(error, MCPError):
        return (
            getattr(getattr(error, "error", None), "code", None) == types.CONNECTION_CLOSED
            or "closed" in str(error).lower()
        )
    return isinstance(error, (OSError, EOFError, anyio.ClosedResourceError, anyio.BrokenResourceError, TimeoutError))


async def _not_mid_call(ctx: Any, params: Any) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message="ask in the tool's result (InputRequiredResult)")


class Upstreams:
    """The upstream servers of one bridge, by name; `close()` ends their sessions."""

    def __init__(self, upstreams: Iterable[Upstream | str] = ()) -> None:
        declared = [parse_upstream(u) if isinstance(u, str) else u for u in upstreams]
        names = [u.name for u in declared]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise UpstreamError(f"--upstream: {', '.join(twice)} declared more than once; give each server one name")
        self.declared: dict[str, Upstream] = {u.name: u for u in declared}
        self._sessions = {name: _Session(u) for name, u in self.declared.items()}
        # their threads and processes end with the bridge, or at exit at the latest (a portal's thread would
        # otherwise keep the interpreter from exiting)
        weakref.finalize(self, _close_all, list(self._sessions.values()))

    def __bool__(self) -> bool:
        return bool(self.declared)

    def __contains__(self, name: object) -> bool:
        return name in self.declared

    async def call(
        self, server: str, name: str, arguments: dict[str, Any], state: str | None, responses: dict[str, Any] | None
    ) -> types.CallToolResult | types.InputRequiredResult:
        async def call(client: Client) -> Any:
            return await client.session.call_tool(
                name, arguments, input_responses=responses, request_state=state, allow_input_required=True
            )

        return await self._run(server, call)

    async def tools(self, server: str) -> list[types.Tool]:
        async def listed(client: Client) -> Any:
            return list((await client.session.list_tools()).tools)

        return await self._run(server, listed)

    async def _run(self, server: str, fn: Any) -> Any:
        """`fn(client)` in the upstream's session. Cancelled (the call's time is up, the round was cancelled), it is
        cancelled there too, so the SDK cancels the request upstream and no thread is left waiting on it."""
        session = self._sessions[server]
        future, client = await anyio.to_thread.run_sync(session.start, fn, abandon_on_cancel=True)
        try:
            return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        except BaseException as error:
            future.cancel()
            session.broke(client, error)
            raise

    def close(self) -> None:
        _close_all(self._sessions.values())


def _close_all(sessions: Iterable[_Session]) -> None:
    for session in sessions:
        session.close()


class UpstreamCalls:
    """Makes a run's calls of upstream tools (the `make_call` runtime/calling.py's ToolCaller asks for): the call,
    or its answered questions sent back; its result, or its next questions for the run to ask."""

    def __init__(self, upstreams: Upstreams | None) -> None:
        self.upstreams = upstreams

    async def make_call(self, entry: Call) -> tuple[str, Any]:
        call = entry.call
        shown = call.name if call.server is None else f"{call.server}:{call.name}"
        if call.server is None or self.upstreams is None or call.server not in self.upstreams:
            known = ", ".join(sorted(self.upstreams.declared)) if self.upstreams else ""
            where = (
                "this server has no such tool" if call.server is None else f"no upstream {call.server!r} is declared"
            )
            also = f" (upstreams: {known})" if known else " (declare one with --upstream NAME=...)"
            return "error", ToolNotAllowedError(f"ctx.call_tool({shown!r}): {where}{also if call.server else ''}")
        responses = _responses(call.replies) if call.upstream_state is not None else None
        try:
            result = await self.upstreams.call(call.server, call.name, call.arguments, call.upstream_state, responses)
        except BranchcError:
            raise
        except Exception as error:  # the upstream died, its connection broke, it refused the call
            return "error", ToolCallError(f"the call of {shown!r} failed upstream: {type(error).__name__}: {error}")
        if isinstance(result, types.InputRequiredResult):
            if not result.input_requests:
                return "error", ToolCallError(f"{shown!r}: the upstream asked for input but asked nothing")
            return "asks", (result.request_state or "", _questions(result.input_requests, shown))
        return "result", tool_result(result)


def tool_result(result: types.CallToolResult) -> ToolResult:
    """An MCP tools/call result as the runtime's ToolResult."""
    return ToolResult(
        content=[block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content],
        structured_content=result.structured_content,
        is_error=bool(result.is_error),
    )


def _questions(asked: Mapping[str, Any], shown: str) -> dict[str, SampleRequest | ElicitRequest]:
    """An upstream's input requests as the runtime's requests, by its keys."""
    out: dict[str, SampleRequest | ElicitRequest] = {}
    for key, request in asked.items():
        if isinstance(request, types.CreateMessageRequest):
            params = request.params
            messages = []
            for message in params.messages:
                texts = [block for block in message.content_as_list if isinstance(block, types.TextContent)]
                if len(texts) != len(message.content_as_list):
                    raise ToolCallError(f"{shown!r} asks a sample with content other than text, which is not passed on")
                messages.append(Message(role=message.role, content="\n".join(block.text for block in texts)))
            out[key] = SampleRequest(
                messages=messages,
                system_prompt=params.system_prompt,
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                stop_sequences=params.stop_sequences,
            )
        elif isinstance(request, types.ElicitRequest) and isinstance(request.params, types.ElicitRequestFormParams):
            out[key] = ElicitRequest(
                key=key, message=request.params.message, requested_schema=dict(request.params.requested_schema)
            )
        else:
            raise ToolCallError(f"{shown!r} asks for {type(request).__name__}, which is not passed on")
    return out


def _responses(replies: Mapping[str, Any]) -> dict[str, Any]:
    """The run's answers to an upstream's questions, as the MCP results it sends back."""
    out: dict[str, Any] = {}
    for key, reply in replies.items():
        if isinstance(reply, SampleResult):
            out[key] = types.CreateMessageResult(
                role="assistant",
                model=reply.model or "unknown",
                content=types.TextContent(type="text", text=reply.text),
                stop_reason=reply.stop_reason,
            )
        elif isinstance(reply, ElicitAnswer):
            out[key] = types.ElicitResult(action=reply.action, content=reply.content)
        else:
            raise ToolCallError(f"an answer to the upstream's question {key!r} is a {type(reply).__name__}")
    return out
