"""The MCP server: compiled tools served to real MCP clients, in both protocol eras.

One lowlevel `mcp.server.Server`. Each `tools/call` picks its era by the negotiated
protocol version: up to 2025-11-25 the run is driven live and samples and elicitations go
to the client mid-call (backchannel.py); on 2026-07-28 each call is one round of a
multi-round-trip request (rounds.py), whose `request_state` is the run's continuation,
sealed by the SDK's own `RequestStateBoundary`.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..runtime.driver import run_tool
from ..runtime.errors import BranchcError, MissingCapabilityError, ParamsError, ToolPhaseError
from ..runtime.limits import Limits
from ..runtime.tool import Tool
from .backchannel import BackchannelClient, client_capabilities
from .provider import ChatCompletionsProvider, SamplingMode

__all__ = ["Bridge", "create_server", "error_result", "where_it_failed"]

# Frames in these folders are not the tool's own code: branchc, the standard library, installed packages.
_NOT_TOOL_CODE = tuple(
    {str(Path(__file__).resolve().parents[1])} | {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
)


def error_result(message: str) -> types.CallToolResult:
    """A tool error the calling model can read (and the server goes on serving)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def result_of(value: Any) -> types.CallToolResult:
    """The tool's result as text (JSON), and as structured content when it is an object."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    structured = value if isinstance(value, dict) else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)


def where_it_failed(error: BaseException) -> str | None:
    """`file:line` of the innermost frame in the tool's own code (not branchc's, not a library's)."""
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        filename = frame.f_code.co_filename
        if not filename.startswith(_NOT_TOOL_CODE) and not filename.startswith("<"):
            found = f"{os.path.relpath(filename)}:{line}"
    return found


def describe_failure(error: BaseException) -> str:
    if isinstance(error, ToolPhaseError):
        cause = error.error
        place = where_it_failed(cause)
        at = f" at {place}" if place else ""
        return f"{error.tool}: {error.phase}() failed{at}: {type(cause).__name__}: {cause}"
    return f"{type(error).__name__}: {error}"


class Bridge:
    """The tools and the policy; `call_tool` dispatches each call to its era."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        *,
        name: str = "branchc",
        limits: Limits | None = None,
        sampling: SamplingMode = "client",
        provider: ChatCompletionsProvider | None = None,
    ) -> None:
        if sampling != "client" and provider is None:
            raise ValueError(f"sampling={sampling!r} needs a provider: give the model endpoint's URL and model")
        self.tools = dict(tools)
        self.name = name
        self.limits = limits
        self.sampling = sampling
        self.provider = provider

    def sampler(self, ctx: ServerRequestContext) -> ChatCompletionsProvider | None:
        """The provider when it answers this call's samples; None when the client does."""
        if self.sampling == "provider":
            return self.provider
        if self.sampling == "auto" and "sampling" not in client_capabilities(ctx)[0]:
            return self.provider
        return None

    async def list_tools(self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None):
        return types.ListToolsResult(
            tools=[
                types.Tool(name=tool.name, description=tool.description or None, input_schema=tool.input_schema)
                for tool in self.tools.values()
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        tool = self.tools.get(params.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return error_result(f"unknown tool {params.name!r}; this server has: {known}")
        try:
            model = tool.validate_params(params.arguments)
        except ParamsError as error:
            return error_result(str(error))
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            from .rounds import run_round

            return await run_round(self, ctx, tool, model, params)
        try:
            value = await run_tool(
                tool,
                model,
                BackchannelClient(ctx, tool.name, self.sampler(ctx)),
                limits=self.limits,
                call_id=str(ctx.request_id),
            )
        except MissingCapabilityError as error:
            return error_result(f"{error}; connect with a client that offers it")
        except BranchcError as error:
            return error_result(describe_failure(error))
        return result_of(value)


def state_security(key: str | None, ttl: float = 600) -> RequestStateSecurity:
    """Sealing for `request_state`: the configured key, else a key of this process only;
    a round must be continued within `ttl` seconds."""
    if key:
        return RequestStateSecurity(keys=[key], ttl=ttl)
    print(
        "branchc serve: no --state-key (or BRANCHC_STATE_KEY) given: request_state is sealed with a key of this "
        "process only, so a round can only be continued by this process; replicas need one shared key",
        file=sys.stderr,
    )
    return RequestStateSecurity.ephemeral(ttl=ttl)


def create_server(
    tools: Mapping[str, Tool],
    *,
    name: str = "branchc",
    state_key: str | None = None,
    state_ttl: float = 600,
    limits: Limits | None = None,
    sampling: SamplingMode = "client",
    provider: ChatCompletionsProvider | None = None,
) -> Server:
    """The lowlevel SDK server for `tools`, with the request-state boundary in place."""
    bridge = Bridge(tools, name=name, limits=limits, sampling=sampling, provider=provider)
    server = Server(name, version=__version__, on_list_tools=bridge.list_tools, on_call_tool=bridge.call_tool)
    server.middleware.append(RequestStateBoundary(state_security(state_key, state_ttl), default_audience=name))
    server.bridge = bridge  # type: ignore[attr-defined]
    return server
