"""The MCP server: compiled tools served to real MCP clients, in both protocol eras.

One lowlevel `mcp.server.Server`. Each `tools/call` picks its era by the negotiated
protocol version: up to 2025-11-25 the run is driven live and samples and elicitations go
to the client mid-call (backchannel.py); on 2026-07-28 each call is one round of a
multi-round-trip request (rounds.py), whose `request_state` is the run's continuation,
sealed by the SDK's own `RequestStateBoundary`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..runtime.driver import run_tool
from ..runtime.errors import BranchcError, MissingCapabilityError, ParamsError
from ..runtime.limits import Limits
from ..runtime.tool import Tool
from .backchannel import BackchannelClient, client_capabilities
from .guided import RESUME_TOOL, GuidedRuns, resume_tool
from .provider import ChatCompletionsProvider, SamplingMode
from .results import describe_failure, error_result, result_of
from .rounds import run_round

__all__ = ["Bridge", "create_server"]


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
        guided: bool = False,
    ) -> None:
        if sampling != "client" and provider is None:
            raise ValueError(f"sampling={sampling!r} needs a provider: give the model endpoint's URL and model")
        self.tools = dict(tools)
        self.name = name
        self.limits = limits
        self.sampling = sampling
        self.provider = provider
        self.guided = GuidedRuns() if guided else None
        if guided and RESUME_TOOL in self.tools:
            raise ValueError(f"a tool is named {RESUME_TOOL!r}, the name guided mode needs; rename it")

    def sampler(self, ctx: ServerRequestContext) -> ChatCompletionsProvider | None:
        """The provider when it answers this call's samples; None when the client does."""
        if self.sampling == "provider":
            return self.provider
        if self.sampling == "auto" and "sampling" not in client_capabilities(ctx)[0]:
            return self.provider
        return None

    def offered(self, ctx: ServerRequestContext) -> frozenset[str]:
        """What this call's samples and elicitations can rely on: the client's capabilities, and the provider."""
        return client_capabilities(ctx)[0] | ({"sampling"} if self.sampler(ctx) is not None else frozenset())

    async def list_tools(self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None):
        tools = [
            types.Tool(
                name=tool.name,
                description=tool.description or None,
                input_schema=tool.input_schema,
                output_schema=tool.output_schema,
            )
            for tool in self.tools.values()
        ]
        if self.guided is not None:
            tools.append(resume_tool())
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if self.guided is not None and params.name == RESUME_TOOL:
            return await self.guided.resume(self, ctx, params.arguments)
        tool = self.tools.get(params.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return error_result(f"unknown tool {params.name!r}; this server has: {known}")
        try:
            model = tool.validate_params(params.arguments)
        except ParamsError as error:
            return error_result(str(error))
        if self.guided is not None and tool.requires - self.offered(ctx):
            return await self.guided.start(self, ctx, tool, model)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
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
    guided: bool = False,
) -> Server:
    """The lowlevel SDK server for `tools`, with the request-state boundary in place."""
    bridge = Bridge(tools, name=name, limits=limits, sampling=sampling, provider=provider, guided=guided)
    server = Server(name, version=__version__, on_list_tools=bridge.list_tools, on_call_tool=bridge.call_tool)
    server.middleware.append(RequestStateBoundary(state_security(state_key, state_ttl), default_audience=name))
    server.bridge = bridge  # type: ignore[attr-defined]
    return server
