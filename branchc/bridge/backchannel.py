"""The handshake era (MCP up to 2025-11-25): the server asks the client mid-call.

`BackchannelClient` is the runtime's `Client` over one `tools/call`: a sample becomes
`sampling/createMessage`, an elicitation `elicitation/create` (form mode), a log
`notifications/message`, a notify `notifications/progress` under the call's progress token.
Every request is tied to the call (related_request_id), so on streamable HTTP it travels on
the call's own stream, and cancelling the call cancels it. Logs and progress notes are dropped once the
client's connection is gone and given up when it takes nothing for a while (connection.write_bounded), so
a run's cleanup never waits on a client that is not there; `answer_timeout` bounds the wait for an answer.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Awaitable
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from ..runtime import tracing
from ..runtime.client import ElicitRequest, SampleRequest
from ..runtime.errors import BranchcError
from ..runtime.messages import SampleResult
from .connection import write_bounded
from .elicitation import form_schema
from .loglevel import log_allowed
from .sampling import create_message, sample_params, sample_result

__all__ = ["AnswerTimeoutError", "BackchannelClient", "client_capabilities"]

# Sampling, elicitation's peers and logging are deprecated in 2026-07-28 (SEP-2577), yet they are what the
# handshake era speaks: the SDK's warnings for this module's own calls are noise (here, or mounted elsewhere).
warnings.filterwarnings("ignore", category=MCPDeprecationWarning, module=__name__)


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

    def __init__(
        self, ctx: ServerRequestContext, tool: str, provider: Any = None, *, answer_timeout: float | None = None
    ) -> None:
        self.ctx = ctx
        self.answer_timeout = answer_timeout
        self.tool = tool
        self.era = getattr(ctx, "protocol_version", None) or ""
        self.provider = provider
        self.capabilities, self.sampling_tools = client_capabilities(ctx)
        if provider is not None:
            self.capabilities |= {"sampling"}
        self.progress_token = (ctx.meta or {}).get("progress_token")
        self.notified = 0

    async def sample(self, request: SampleRequest) -> SampleResult:
        if self.provider is not None:
            return await self.provider.sample(request)
        params = sample_params(request, tools_supported=self.sampling_tools)
        messages = params.get("messages") or []
        asked = time.perf_counter()
        with tracing.span("branchc.sample", branchc__messages=len(messages), branchc__tool=self.tool) as current:
            if tracing.CONTENT:
                current.set_attribute("branchc.prompt", json.dumps(messages[-1:], default=str)[:4096])
            result = await self._answered("sample", create_message(self.ctx.session, params, self.ctx.request_id))
        tracing.effect_answered("sample", self.tool, self.era, time.perf_counter() - asked)
        return sample_result(result, request)  # judged as the 2026-07-28 era judges an answer

    async def elicit(self, request: ElicitRequest) -> dict[str, Any]:
        schema = form_schema(request.requested_schema, request.requested_schema.get("title", request.key))
        asked = self.ctx.session.elicit_form(request.message, schema, related_request_id=self.ctx.request_id)
        started = time.perf_counter()
        with tracing.span("branchc.elicit", branchc__key=request.key, branchc__tool=self.tool) as current:
            result = await self._answered(f"elicitation {request.key!r}", asked)
            current.set_attribute("branchc.action", result.action)
            if tracing.CONTENT:
                current.set_attribute("branchc.content", json.dumps(result.content, default=str)[:4096])
        tracing.effect_answered("elicit", self.tool, self.era, time.perf_counter() - started)
        return {"action": result.action, "content": result.content}

    async def log(self, level: str, message: str) -> None:
        if not log_allowed(self.ctx, level):
            return  # below the level the client set (loglevel.py)
        await write_bounded(
            self.ctx,
            lambda: self.ctx.session.send_log_message(
                level, message, logger=self.tool, related_request_id=self.ctx.request_id
            ),
            "a log",
        )

    async def notify(self, message: str, progress: float | None, total: float | None) -> None:
        self.notified += 1
        if self.progress_token is None:
            return  # the client asked for no progress
        await write_bounded(
            self.ctx,
            lambda: self.ctx.session.send_progress_notification(
                self.progress_token,
                self.notified if progress is None else progress,
                total,
                message,
                related_request_id=self.ctx.request_id,
            ),
            "a progress note",
        )

    async def _answered(self, what: str, asked: Awaitable[Any]) -> Any:
        """The client's answer, or AnswerTimeoutError after `answer_timeout` seconds (the SDK then sends
        the client notifications/cancelled for the request)."""
        if self.answer_timeout is None:
            return await asked
        with anyio.move_on_after(self.answer_timeout) as timer:
            return await asked
        assert timer.cancelled_caught
        raise AnswerTimeoutError(
            f"the client did not answer the {what} within {self.answer_timeout:g} s (branchc serve --answer-timeout)"
        )


class AnswerTimeoutError(BranchcError, TimeoutError):
    """The client took longer than `answer_timeout` to answer a sample or an elicitation."""
