"""The handshake era (MCP up to 2025-11-25): the server asks the client mid-call.

`BackchannelClient` is the runtime's `Client` over one `tools/call`: a sample becomes
`sampling/createMessage`, an elicitation `elicitation/create` (form mode), a log
`notifications/message`, a notify `notifications/progress` under the call's progress token.
Every request is tied to the call (related_request_id), so on streamable HTTP it travels on
the call's own stream, and cancelling the call cancels it.
"""

from __future__ import annotations

from typing import Any

from mcp.server import ServerRequestContext

from ..runtime.client import ElicitRequest, SampleRequest
from ..runtime.messages import SampleResult
from .elicitation import form_schema
from .sampling import sample_params, sample_result

__all__ = ["BackchannelClient", "client_capabilities"]


def client_capabilities(ctx: ServerRequestContext) -> tuple[frozenset[str], bool]:
    """(the runtime capabilities the client declared, whether it takes tools in sampling)."""
    declared = ctx.session.client_capabilities
    if declared is None:
        return frozenset(), False
    found = {name for name in ("sampling", "elicitation") if getattr(declared, name) is not None}
    tools = declared.sampling is not None and declared.sampling.tools is not None
    return frozenset(found), tools


class BackchannelClient:
    """`provider`, when given, answers the samples instead of the client (server-side sampling)."""

    def __init__(self, ctx: ServerRequestContext, tool: str, provider: Any = None) -> None:
        self.ctx = ctx
        self.tool = tool
        self.provider = provider
        self.capabilities, self.sampling_tools = client_capabilities(ctx)
        if provider is not None:
            self.capabilities |= {"sampling"}
        self.progress_token = (ctx.meta or {}).get("progress_token")
        self.notified = 0
        self.converted: dict[int, tuple[Any, Any]] = {}  # message id -> (message, its MCP form)

    async def sample(self, request: SampleRequest) -> SampleResult:
        if self.provider is not None:
            return await self.provider.sample(request)
        params = sample_params(request, tools_supported=self.sampling_tools, converted=self.converted)
        result = await self.ctx.session.create_message(**params, related_request_id=self.ctx.request_id)
        return sample_result(result)

    async def elicit(self, request: ElicitRequest) -> dict[str, Any]:
        schema = form_schema(request.requested_schema, request.requested_schema.get("title", request.key))
        result = await self.ctx.session.elicit_form(request.message, schema, related_request_id=self.ctx.request_id)
        return {"action": result.action, "content": result.content}

    async def log(self, level: str, message: str) -> None:
        await self.ctx.session.send_log_message(
            level, message, logger=self.tool, related_request_id=self.ctx.request_id
        )

    async def notify(self, message: str, progress: float | None, total: float | None) -> None:
        self.notified += 1
        if self.progress_token is None:
            return  # the client asked for no progress
        await self.ctx.session.send_progress_notification(
            self.progress_token,
            self.notified if progress is None else progress,
            total,
            message,
            related_request_id=self.ctx.request_id,
        )
