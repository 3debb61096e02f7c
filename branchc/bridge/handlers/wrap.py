"""`add_result_handlers`: the seed's generative invocation on any MCP server of the `mcp` SDK.

It wraps a server's `tools/list` and `tools/call` (a lowlevel `Server` or an `MCPServer`, branchc's own or
anyone's). Every listed tool's input schema gains an optional `result_handler` parameter in the seed's shape,
`{"language": "python", "script": str | [str, ...]}`. A call that gives one runs the tool as the server
would without it, then runs the script in a sandbox (engine.py) against the tool's output, and returns only
the script's value, with a note of how large the raw output was. A call without one is passed through
untouched; so is a round of a multi-round-trip call that still asks for input (the handler runs on the
result the call finally gives, as the client sends the same arguments every round).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any, Literal

import anyio
import mcp.types as types
from mcp.server import ServerRequestContext
from pydantic import BaseModel, ConfigDict, ValidationError

from ...runtime import tracing
from ...runtime.errors import format_validation_errors
from ..mounting import lowlevel_server
from ..upstream import Upstreams
from .chaining import ChainedCalls, render_wrappers
from .engine import HandlerError, Limits, ResultEngine

__all__ = ["ResultHandler", "ResultHandlers", "add_result_handlers"]

PARAMETER = "result_handler"
NOTE_KEY = "branchc/result_handler"

#: Calls with a handler that one server runs at once, by default (each holds a sandbox: a Monty worker, or a
#: process with its memory limit). A further call waits for a place up to WAIT_SECONDS, then is a tool error.
MAX_RUNNING = 4
WAIT_SECONDS = 10.0
#: Seconds an upstream server has to list its tools for the wrappers; one that does not is left out for now.
LIST_SECONDS = 5.0


class ResultHandler(BaseModel):
    """The seed's `result_handler` argument."""

    model_config = ConfigDict(extra="forbid")

    language: Literal["python"]
    script: str | list[str]

    @property
    def source(self) -> str:
        return self.script if isinstance(self.script, str) else "\n".join(self.script)


#: The tool whose description holds the typed wrappers a handler may call, once for the whole server (each
#: tool's result_handler parameter names it, rather than repeating them: that grew tools/list quadratically).
GUIDE = "result_handler_tools"


def _parameter(chaining: bool) -> dict[str, Any]:
    text = (
        "Optional. A Python script run on this tool's output, in a sandbox, on the server: the tool's result "
        "is then only the value of the script's last expression (JSON data), instead of the whole output. "
        "The script sees `tool_output` (the output as JSON data: the structured result, or the text) and "
        "`arguments` (this call's arguments)."
    )
    if chaining:
        text += (
            f" It may call this server's other tools as `tools.NAME(...)`, and the tools of its upstream servers as "
            f"`upstream.SERVER.NAME(...)`, which return their results as JSON data; the description of the tool "
            f"`{GUIDE}` gives their typed signatures."
        )
    return {
        "type": "object",
        "description": text,
        "properties": {
            "language": {"const": "python"},
            "script": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                "description": "The script, as one string or as a list of lines.",
            },
        },
        "required": ["language", "script"],
        "additionalProperties": False,
    }


def _guide(wrappers: str) -> types.Tool:
    return types.Tool(
        name=GUIDE,
        description=(
            "The tools a result_handler script may call, as the typed Python wrappers it sees (calling this tool "
            "returns them too):\n" + wrappers
        ),
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )


_HANDLED_OUTPUT = {
    "type": "object",
    "properties": {"result": {}, "raw_output_bytes": {"type": "integer"}},
    "required": ["result", "raw_output_bytes"],
}


def _output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    own = {key: value for key, value in schema.items() if key != "$defs"}
    listed: dict[str, Any] = {"type": "object", "anyOf": [own, _HANDLED_OUTPUT]}
    if "$defs" in schema:
        listed["$defs"] = schema["$defs"]
    return listed


def tool_output(result: types.CallToolResult) -> Any:
    """What a handler sees of a tool's result: its structured content, else its text (blocks joined by a
    newline), else its content blocks as JSON data."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if texts and len(texts) == len(result.content):
        return "\n".join(texts)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]


def _size(result: types.CallToolResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


class ResultHandlers:
    """The handlers of one server: its engine, their limits, whether they may call the server's tools, and how
    many calls with a handler run at once (`max_running`; a further one waits up to `wait_seconds` for a place,
    then is refused with a tool error, before its tool runs)."""

    def __init__(
        self,
        engine: ResultEngine,
        *,
        limits: Limits | None = None,
        chaining: bool = True,
        max_running: int = MAX_RUNNING,
        wait_seconds: float = WAIT_SECONDS,
        upstreams: Upstreams | None = None,
    ) -> None:
        if max_running < 1 or wait_seconds < 0:
            raise ValueError("result handlers need max_running >= 1 and wait_seconds >= 0")
        self.engine = engine
        self.limits = limits or Limits()
        self.chaining = chaining
        self.upstreams = upstreams if chaining else None  # their tools: `upstream.SERVER.NAME(...)`
        self.wrappers = ""  # the typed wrappers as last listed (the guide tool's text)
        self._upstream_tools: dict[str, tuple[dict[str, Any], str]] | None = None  # "SERVER:NAME" -> schema, text
        self.max_running = max_running
        self.wait_seconds = wait_seconds
        self._places: anyio.Semaphore | None = None  # made in the server's event loop, on the first call

    async def upstream_tools(self) -> dict[str, tuple[dict[str, Any], str]]:
        """The upstream servers' tools, "SERVER:NAME" -> (input schema, description), listed once (a server that
        cannot be listed now is left out, and asked again next time)."""
        if self.upstreams is None:
            return {}
        if self._upstream_tools is None:
            found: dict[str, tuple[dict[str, Any], str]] = {}
            complete = True
            for server in sorted(self.upstreams.declared):
                listed = None
                with anyio.move_on_after(LIST_SECONDS), contextlib.suppress(Exception):
                    listed = await self.upstreams.tools(server)
                if listed is None:  # down or slow for now: its wrappers come once it answers
                    complete = False
                    continue
                found |= {f"{server}:{t.name}": (dict(t.input_schema), t.description or "") for t in listed}
            if not complete:
                return found
            self._upstream_tools = found
        return self._upstream_tools

    def listed(
        self, listed: types.ListToolsResult, upstream: dict[str, tuple[dict[str, Any], str]] | None = None
    ) -> types.ListToolsResult:
        """`listed` with the `result_handler` parameter on every tool (and output schemas that admit what a
        handled call returns), and the guide tool holding the typed wrappers, once."""
        schemas = {tool.name: dict(tool.input_schema) for tool in listed.tools}
        if self.chaining:
            described = {t.name: t.description or "" for t in listed.tools}
            every = {**schemas, **{name: schema for name, (schema, _) in (upstream or {}).items()}}
            described |= {name: text for name, (_, text) in (upstream or {}).items()}
            self.wrappers = render_wrappers(every, described)
        tools = []
        for tool in listed.tools:
            schema = dict(tool.input_schema)
            properties = dict(schema.get("properties") or {})
            if PARAMETER in properties:
                tools.append(tool)  # the tool has a parameter of that name: it keeps it, without handlers
                continue
            properties[PARAMETER] = _parameter(self.chaining)
            update: dict[str, Any] = {"input_schema": {**schema, "properties": properties}}
            if tool.output_schema is not None:
                update["output_schema"] = _output_schema(dict(tool.output_schema))
            tools.append(tool.model_copy(update=update))
        if self.chaining and GUIDE not in schemas:
            tools.append(_guide(self.wrappers))
        return listed.model_copy(update={"tools": tools})

    async def call(
        self,
        ctx: ServerRequestContext,
        params: types.CallToolRequestParams,
        run: Any,
        schemas: Mapping[str, dict[str, Any]],
    ) -> Any:
        """The call with its handler: `run(ctx, params)` is the server's own `tools/call`; `schemas` the
        input schemas of the tools a handler may call."""
        arguments = dict(params.arguments or {})
        if params.name == GUIDE and self.chaining and GUIDE not in schemas:
            return types.CallToolResult(content=[types.TextContent(type="text", text=self.wrappers)])
        if PARAMETER not in arguments or PARAMETER in (schemas.get(params.name, {}).get("properties") or {}):
            return await run(ctx, params)
        raw = arguments.pop(PARAMETER)
        try:
            handler = ResultHandler.model_validate(raw)
        except ValidationError as error:
            lines = "\n".join(f"  {line}" for line in format_validation_errors(error))
            return _error(f"{PARAMETER}: expected {{language: 'python', script: str | [str, ...]}}:\n{lines}")
        if self._places is None:
            self._places = anyio.Semaphore(self.max_running)
        places = self._places
        try:
            places.acquire_nowait()
        except anyio.WouldBlock:
            placed = False
            with anyio.move_on_after(self.wait_seconds):
                await places.acquire()
                placed = True
            if not placed:
                return _error(
                    f"{PARAMETER} refused: this server runs at most {self.max_running} calls with a result handler "
                    f"at once, and none finished within {self.wait_seconds:g} s; the tool did not run, try again"
                )
        try:
            return await self._run_handled(ctx, params, run, schemas, arguments, handler)
        finally:
            places.release()

    async def _run_handled(
        self,
        ctx: ServerRequestContext,
        params: types.CallToolRequestParams,
        run: Any,
        schemas: Mapping[str, dict[str, Any]],
        arguments: dict[str, Any],
        handler: ResultHandler,
    ) -> Any:
        """The tool, then its handler on the tool's result."""
        result = await run(ctx, params.model_copy(update={"arguments": arguments}))
        if not isinstance(result, types.CallToolResult) or result.is_error:
            return result  # a round that asks for more input, or a failed tool: the handler waits, or has nothing
        calls = None
        if self.chaining:
            upstream = await self.upstream_tools()

            async def chained(name: str, args: dict[str, Any]) -> Any:
                if ":" in name:  # a tool of an upstream server
                    server, tool = name.split(":", 1)
                    shown = f"upstream.{server}.{tool}"
                    assert self.upstreams is not None
                    try:
                        inner = await self.upstreams.call(server, tool, args, None, None)
                    except Exception as error:
                        raise HandlerError(f"{shown} failed upstream: {type(error).__name__}: {error}") from None
                else:
                    shown = f"tools.{name}"
                    inner = await run(ctx, types.CallToolRequestParams(name=name, arguments=args))
                if not isinstance(inner, types.CallToolResult):
                    raise HandlerError(f"{shown}: the tool asks for input, which a handler cannot give")
                if inner.is_error:
                    text = " ".join(b.text for b in inner.content if isinstance(b, types.TextContent))
                    raise HandlerError(f"{shown} failed: {text}")
                return tool_output(inner)

            reachable = {**schemas, **{name: schema for name, (schema, _) in upstream.items()}}
            calls = ChainedCalls(reachable, chained, self.limits.tool_calls)
        attributes = {"branchc.engine": self.engine.name, "branchc.tool": params.name}
        with tracing.span("branchc.result_handler", **attributes, branchc__script_bytes=len(handler.source)) as current:
            try:
                value = await self.engine.run(
                    handler.source,
                    tool_output(result),
                    arguments,
                    limits=self.limits,
                    tools=dict(calls.tools) if calls is not None else None,
                    call=calls,
                )
            except HandlerError as error:
                tracing.failed(current, error)
                tracing.handler_ran(self.engine.name, ok=False)
                return _error(f"{PARAMETER} failed ({self.engine.name}): {error}")
        tracing.handler_ran(self.engine.name, ok=True)
        raw_bytes = _size(result)
        text = json.dumps(value, ensure_ascii=False)
        note = f"[{PARAMETER}: {len(text.encode())} bytes of result from {raw_bytes} bytes of raw tool output]"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text), types.TextContent(type="text", text=note)],
            structured_content={"result": value, "raw_output_bytes": raw_bytes},
            _meta={NOTE_KEY: {"raw_output_bytes": raw_bytes, "engine": self.engine.name}},
        )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def add_result_handlers(
    server: Any,
    engine: ResultEngine,
    *,
    limits: Limits | None = None,
    chaining: bool = True,
    max_running: int = MAX_RUNNING,
    wait_seconds: float = WAIT_SECONDS,
    upstreams: Upstreams | None = None,
) -> ResultHandlers:
    """Give every tool of `server` (an `MCPServer` or a lowlevel `Server`) the optional `result_handler`
    parameter, run in `engine`, at most `max_running` calls with a handler at once (a further one waits up to
    `wait_seconds` for a place, then is a tool error). `upstreams`: upstream servers whose tools handlers may call
    too (`upstream.SERVER.NAME`); none unless given, as they are not the server's own tools. Call it after the
    server's tools are in place (and after `mount`)."""
    lowlevel = lowlevel_server(server, "add_result_handlers() wraps")
    handlers = ResultHandlers(
        engine,
        limits=limits,
        chaining=chaining,
        max_running=max_running,
        wait_seconds=wait_seconds,
        upstreams=upstreams,
    )
    own_list = lowlevel.get_request_handler("tools/list")
    own_call = lowlevel.get_request_handler("tools/call")
    if own_list is None or own_call is None:
        raise ValueError("add_result_handlers(): the server has no tools/list or tools/call handler: add tools first")
    schemas: dict[str, dict[str, Any]] = {}

    async def list_tools(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None):
        listed = await own_list.handler(ctx, params)
        schemas.update({tool.name: dict(tool.input_schema) for tool in listed.tools})
        return handlers.listed(listed, await handlers.upstream_tools() if handlers.chaining else None)

    async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams):
        if not schemas:  # a client may call without listing first
            listed = await own_list.handler(ctx, None)
            schemas.update({tool.name: dict(tool.input_schema) for tool in listed.tools})
            handlers.listed(listed, await handlers.upstream_tools() if handlers.chaining else None)
        return await handlers.call(ctx, params, own_call.handler, schemas)

    lowlevel.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)
    lowlevel.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    own_schema = lowlevel.get_tool_input_schema
    if own_schema is not None:

        def input_schema(name: str) -> Mapping[str, Any] | None:
            schema = own_schema(name)
            if schema is None or PARAMETER in (schema.get("properties") or {}):
                return schema
            return {**schema, "properties": {**(schema.get("properties") or {}), PARAMETER: _parameter(False)}}

        lowlevel.get_tool_input_schema = input_schema
    server.result_handlers = handlers
    return handlers
