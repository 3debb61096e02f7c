"""The MCP server: compiled tools served to real MCP clients, in both protocol eras.

One lowlevel `mcp.server.Server`. Each `tools/call` picks its era by the negotiated
protocol version: up to 2025-11-25 the run is driven live and samples and elicitations go
to the client mid-call (backchannel.py); on 2026-07-28 each call is one round of a
multi-round-trip request (rounds.py), whose `request_state` is the run's continuation,
sealed by the SDK's own `RequestStateBoundary`.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..runtime import tracing
from ..runtime.client import ElicitRequest, SampleRequest
from ..runtime.driver import is_compiled_tool, run_tool
from ..runtime.errors import (
    BranchcError,
    InputClosedError,
    MissingCapabilityError,
    ParamsError,
    RunTakenOverError,
)
from ..runtime.limits import Limits
from ..runtime.messages import SampleResult
from ..runtime.tool import Tool
from ..store.base import RunStore
from ..store.keys import KeyRing
from ..workflows.runtime import workflow_of
from .auth import current_principal
from .backchannel import BackchannelClient, client_capabilities
from .connection import connection_gone, ends_with_connection
from .durable import DurableRounds, store_guided_runs, stored_response
from .expiry import attach_sweeper
from .guided import RESUME_TOOL, GuidedRuns, MemoryWaitingRuns, guided_output_schema, resume_tool
from .held import HeldRun
from .loglevel import set_logging_level
from .provider import ChatCompletionsProvider, SamplingMode
from .quotas import CallSlots, QuotaError, RunCaps, run_caps
from .results import describe_failure, error_result, result_of
from .rounds import missing_capability, run_round
from .settings import ServeSettings
from .upstream import UpstreamCalls, Upstreams
from .waiting import StoreWaitingRuns
from .warm import WarmRuns
from .workflow_tools import WorkflowTools

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
        guided_runs: GuidedRuns | None = None,
        answer_timeout: float | None = None,
        store: RunStore | None = None,
        state_ttl: float = 600,
        executor: Executor | None = None,
        caps: RunCaps | None = None,
        call_slots: CallSlots | None = None,
        upstreams: Upstreams | None = None,
    ) -> None:
        if sampling != "client" and provider is None:
            raise ValueError(f"sampling={sampling!r} needs a provider: give the model endpoint's URL and model")
        self.tools = dict(tools)
        self.name = name
        self.limits = limits
        self.sampling = sampling
        self.provider = provider
        self.workflows = WorkflowTools(self.tools)  # workflows are also served guided (workflow_tools.py)
        self.guided_mode = guided  # any tool the client cannot answer for is guided (branchc_resume)
        # the runs waiting for the calling model: those of guided mode and of guided workflows
        self.guided = (guided_runs or GuidedRuns()) if guided or self.workflows else None
        self.answer_timeout = answer_timeout  # seconds a client may take to answer a sample or form (None: no limit)
        self.store = store  # 2026-07-28 rounds checkpointed there, request_state a run reference (durable.py)
        self.durable = DurableRounds(store, ttl=state_ttl, caps=caps) if store is not None else None
        self.warm = WarmRuns()  # the live runs this replica saved last, continued without a load (warm.py)
        self.call_slots = call_slots  # calls at once per principal (quotas.py); None: no cap
        self.executor = executor  # where sub-branch steps run (branchc.executors); None: in this process
        self.upstreams = upstreams  # the servers ctx.call_tool(..., server=NAME) reaches (upstream.py)
        self.held: set[HeldRun] = set()  # handshake-era runs held here, in a store: a drain hands them over (held.py)
        if guided and RESUME_TOOL in self.tools:
            raise ValueError(f"a tool is named {RESUME_TOOL!r}, the name guided mode needs; rename it")
        if taken := sorted(self.workflows.names & self.tools.keys()):
            raise ValueError(f"{', '.join(taken)}: a tool has the name a workflow's guided tools need; rename it")

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
                title=tool.title,
                description=tool.description or None,
                input_schema=tool.input_schema,
                output_schema=self._output_schema(ctx, tool),
                annotations=tool.annotations and types.ToolAnnotations.model_validate(tool.annotations),
                icons=tool.icons and [types.Icon.model_validate(icon) for icon in tool.icons],
            )
            for tool in self.tools.values()
        ]
        tools += self.workflows.listed()
        if self.guided_mode:
            tools.append(resume_tool())
        return types.ListToolsResult(tools=tools)

    async def list_prompts(self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None):
        return types.ListPromptsResult(prompts=self.workflows.prompts())

    async def get_prompt(self, ctx: ServerRequestContext, params: types.GetPromptRequestParams):
        return self.workflows.prompt(params.name, params.arguments)

    def _output_schema(self, ctx: ServerRequestContext, tool: Tool) -> dict | None:
        """The tool's output schema; for a client guided mode answers for, one that admits the guide too."""
        schema = tool.output_schema
        if schema is not None and self.guided_mode and tool.requires - self.offered(ctx):
            return guided_output_schema(schema)
        return schema

    async def call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The call, in its era; refused when its principal has as many calls in progress as it may. What it is
        about (tool, principal; the rounds add run and round) goes with its spans and log lines (runtime/tracing.py)."""
        principal = current_principal()
        with tracing.call_context(tool=params.name, principal=principal):
            if self.call_slots is None:
                return await self._call_tool(ctx, params)
            try:
                with self.call_slots.slot(principal):
                    return await self._call_tool(ctx, params)
            except QuotaError as error:
                return error_result(str(error))

    async def _call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if self.guided is not None:
            # runs that expired are let go of, whether or not they are asked for
            await self.guided.io(self.guided.store.sweep)
        if self.guided_mode and params.name == RESUME_TOOL:
            return await self.guided.resume(self, ctx, params.arguments)
        if params.name in self.workflows.names:
            return await self.workflows.call(self, ctx, params)
        tool = self.tools.get(params.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return error_result(f"unknown tool {params.name!r}; this server has: {known}")
        try:
            model = tool.validate_params(params.arguments)
        except ParamsError as error:
            return error_result(str(error))
        if self.guided_mode and tool.requires - self.offered(ctx):
            return await self.guided.start(self, ctx, tool, model)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await run_round(self, ctx, tool, model, params)
        # the whole call is its one round (its span is the SDK's request span: no branchc.round of its own)
        with tracing.observed_round(tool.name, ctx.protocol_version or "", spanned=False) as round_:
            return round_.ended(await self._live_call(ctx, tool, model))

    async def _live_call(self, ctx: ServerRequestContext, tool: Tool, model: Any) -> types.CallToolResult:
        """A handshake-era call: the run driven live, asking the client mid-call; with a store, written down at every
        suspension (held.py)."""
        held = None
        if self.store and is_compiled_tool(tool):
            held = HeldRun(self.store, tool, ctx.protocol_version or "", registry=self.held)
        try:
            client = _WatchedClient(ctx, tool.name, self.sampler(ctx), answer_timeout=self.answer_timeout, held=held)
            client.upstream_calls = UpstreamCalls(self.upstreams)
            value = await run_tool(
                tool,
                model,
                client,
                limits=self.limits,
                call_id=str(ctx.request_id),
                checkpoint=held,  # with a store, the run is written down before each request it asks
                executor=self.executor,
                tools=self.tools,  # ctx.call_tool of a tool of this server: run here, its client phase in the run
            )
        except MissingCapabilityError:  # the same words as the 2026-07-28 era's (rounds.missing_capability)
            return error_result(str(missing_capability(tool, tool.requires - self.offered(ctx))))
        except RunTakenOverError as error:  # `branchc runs` resumed or cancelled it: it goes on (or ended) there
            return error_result(f"{tool.name}: {error}")
        except BranchcError as error:
            if connection_gone(ctx):  # nobody reads this: the run was halted, its finally blocks ran
                result = error_result(f"{tool.name}: the client's connection closed; the run was cancelled")
                status = "cancelled"
            else:
                result, status = error_result(describe_failure(error)), "failed"
            if held is not None:
                await held.end(status, stored_response(result))
            return result
        except BaseException:
            if held is not None:  # the call was cancelled: the driver halted the run, its finally blocks ran
                await held.end("cancelled", None)
            raise
        result = result_of(value)
        if held is not None:
            await held.end("done", stored_response(result))
        return result


class _WatchedClient(BackchannelClient):
    """A client gone over HTTP ends the run (connection.py), but only where the run waits on it: a sample or
    an elicitation in flight (or asked after it went) ends with InputClosedError, so the driver halts the run
    and its finally blocks run once. before() and after() are never cancelled by it (an after() committing
    to a database finishes; its result is then read by nobody)."""

    def __init__(self, *args: Any, held: HeldRun | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = held  # its waits are given up when a drain hands the run over (held.py)

    upstream_calls: UpstreamCalls | None = None

    async def make_call(self, entry: Any) -> Any:
        """A call of an upstream tool (its questions are then asked of this client, live, like any request)."""
        calls = self.upstream_calls or UpstreamCalls(None)
        with ends_with_connection(self.ctx) as connection, self._handover() as handed:
            return await calls.make_call(entry)
        raise self._ended(connection, handed)

    async def sample(self, request: SampleRequest) -> SampleResult:
        with ends_with_connection(self.ctx) as connection, self._handover() as handed:
            return await super().sample(request)
        raise self._ended(connection, handed)

    async def elicit(self, request: ElicitRequest) -> dict[str, Any]:
        with ends_with_connection(self.ctx) as connection, self._handover() as handed:
            return await super().elicit(request)
        raise self._ended(connection, handed)

    def _handover(self) -> Any:
        return self.held.waiting_on_client() if self.held is not None else contextlib.nullcontext()

    def _ended(self, connection: anyio.CancelScope, handed: Any) -> Exception:
        if handed is not None and handed.cancelled_caught:
            return self.held.handed_over()
        return InputClosedError(self._gone(connection))

    def _gone(self, connection: anyio.CancelScope) -> str:
        assert connection.cancelled_caught
        return f"{self.tool}: the client's connection closed"


EPHEMERAL_KEY_WARNING = (
    "branchc: no state key given: request_state is sealed with a key of this process only, so a round can only "
    "be continued by this process; replicas need one shared key (--state-key, or BRANCHC_STATE_KEY)"
)


def state_security(keys: KeyRing | None, ttl: float = 600, *, warn: bool = True) -> RequestStateSecurity:
    """Sealing for `request_state`: under the state key ring (the SDK derives a key of its own from each
    secret, apart from the stores'), else a key of this process only (`warn`: say so on stderr); a round
    must be continued within `ttl` seconds. With authentication the SDK binds each state to its principal."""
    if keys is not None:
        return RequestStateSecurity(keys=list(keys.secrets), ttl=ttl)
    if warn:
        print(EPHEMERAL_KEY_WARNING, file=sys.stderr)
    return RequestStateSecurity.ephemeral(ttl=ttl)


def bridge_for(
    tools: Mapping[str, Tool],
    settings: ServeSettings,
    *,
    name: str,
    limits: Limits | None = None,
    provider: ChatCompletionsProvider | None = None,
    store: RunStore | None = None,
    guided_store: RunStore | None = None,
    executor: Executor | None = None,
    upstreams: Upstreams | None = None,
) -> Bridge:
    """The Bridge `settings` describe, for `create_server` and `mount` alike: guided runs held in
    `guided_store` (else `store`, else this process's memory) under the guided TTL and caps, 2026-07-28 runs
    capped in `store`, calls at once capped per principal, and the upstream servers `ctx.call_tool` reaches
    (`upstreams`, else `settings.upstream`)."""
    if provider is None and settings.sampling != "client":
        provider = settings.provider()
    runs = None
    if settings.guided or any(workflow_of(tool) is not None for tool in tools.values()):
        held = guided_store if guided_store is not None else store
        caps = (settings.guided_max_runs, int(settings.guided_max_mb * 2**20))
        waiting = StoreWaitingRuns(held, *caps) if held is not None else MemoryWaitingRuns(*caps)
        runs = GuidedRuns(settings.guided_ttl, waiting)
        if held is not None:
            store_guided_runs(runs, tools)
    return Bridge(
        tools,
        name=name,
        limits=limits,
        sampling=settings.sampling,
        provider=provider,
        guided=settings.guided,
        guided_runs=runs,
        answer_timeout=settings.answer_timeout or None,
        store=store,
        state_ttl=settings.state_ttl,
        executor=executor,
        caps=run_caps(store, settings),
        call_slots=CallSlots(settings.principal_max_calls),
        upstreams=upstreams if upstreams is not None else Upstreams(settings.upstream),
    )


def create_server(
    tools: Mapping[str, Tool],
    settings: ServeSettings | None = None,
    *,
    limits: Limits | None = None,
    provider: ChatCompletionsProvider | None = None,
    store: RunStore | None = None,
    guided_store: RunStore | None = None,
    executor: Executor | None = None,
    keys: KeyRing | None = None,
    **given: Any,
) -> Server:
    """The lowlevel SDK server for `tools`, with the request-state boundary in place, as `settings` say
    (`ServeSettings`: by default the environment's `BRANCHC_*`; keywords such as `state_key=` or `guided=`
    override single settings). Guided mode's waiting runs expire after `guided_ttl` seconds; at most
    `guided_max_runs` runs, holding at most `guided_max_mb` MiB of saved state, wait at once (a new start past
    either is refused). In the handshake era a client that has not answered a sample or an elicitation after
    `answer_timeout` seconds (0: no limit) fails it (the run sees the error at its yield).

    `store` (a RunStore, `stores.open_store(url)`): 2026-07-28 rounds are checkpointed there before they
    leave, `request_state` is a short run reference and each round runs exactly once (durable.py); guided
    runs wait there too (or in `guided_store` when given), under the same caps. None: today's stateless
    rounds (request_state is the whole sealed run) and guided runs in this process's memory.

    `executor` (a `concurrent.futures.Executor`, `branchc.executors.open_executor(spec)`): the steps of
    sub-branches run there, in parallel, in every era; the caller shuts it down. None: in this process.
    `provider`: who answers samples when `sampling` is not "client" (else one is made from `provider_url`).
    `keys` (a KeyRing, `settings.key_ring()`): what seals `request_state` (and what `store` was opened with);
    default: `state_key`'s keys, else a key of this process only."""
    settings = ServeSettings.load(**given) if settings is None else settings.with_changes(**given)
    name, state_ttl = settings.name, settings.state_ttl
    if keys is None and settings.state_key_text is not None:
        keys = KeyRing.parse(settings.state_key_text)
    bridge = bridge_for(
        tools,
        settings,
        name=name,
        limits=limits,
        provider=provider,
        store=store,
        guided_store=guided_store,
        executor=executor,
    )
    with warnings.catch_warnings():  # logging is deprecated in 2026-07-28 (SEP-2577), yet the handshake era has it
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = Server(
            name,
            version=__version__,
            on_list_tools=bridge.list_tools,
            on_call_tool=bridge.call_tool,
            on_set_logging_level=set_logging_level,  # declares the logging capability (loglevel.py)
            **(dict(on_list_prompts=bridge.list_prompts, on_get_prompt=bridge.get_prompt) if bridge.workflows else {}),
        )
    # without a key only this process can continue a round: that matters where replicas may share one address,
    # so serve_http warns of it (transport.py); on stdio one process serves its one client anyway
    security = state_security(keys, state_ttl, warn=False)
    server.middleware.append(RequestStateBoundary(security, default_audience=name))
    server.state_keys = keys  # type: ignore[attr-defined]  # None: serve_http warns that only this process can continue
    server.bridge = bridge  # type: ignore[attr-defined]
    attach_sweeper(server, bridge)  # expired waiting runs are ended, once, while the server runs (expiry.py)
    server.settings = settings  # type: ignore[attr-defined]  # what serve_http reads: auth, hosts, HTTP limits
    return server
