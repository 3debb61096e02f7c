"""The 2026-07-28 era: each `tools/call` is one round of a multi-round-trip request.

Round 1 runs `before`, starts the run machine and steps it until every branch waits. The
pending samples and elicitations of all branches go back in one `InputRequiredResult`,
keyed by the machine's request keys, with the saved machine as `request_state` (compressed by
runstate.pack_run, then sealed on the way out and verified on the way back by the SDK's
`RequestStateBoundary`, so what arrives here is what this server minted, for this tool and
these arguments, unexpired; unpacking is bounded all the same).
Every later round restores the machine, checks the answers against what was asked, feeds
them, and steps again; when the client phase returns, `after` runs and the call completes.
Nothing stays in memory between rounds: any replica with the key serves any round. With a store
(the bridge's `durable`, durable.py) the run is checkpointed there instead, `request_state` is a short
run reference, and each round runs exactly once.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from opentelemetry import trace
from pydantic import BaseModel

from ..runtime import tracing
from ..runtime.calling import ToolCaller, apply
from ..runtime.driver import advance
from ..runtime.errors import BranchcError, ClientAnswerError, MissingCapabilityError, ToolPhaseError
from ..runtime.machine import Machine, Request
from ..runtime.phases import finish_phases, handoff_of
from ..runtime.runstate import RunStateError, dump_run, load_run, pack_run, unpack_run
from ..runtime.tool import Tool
from .backchannel import client_capabilities
from .connection import write_bounded
from .elicitation import ElicitSchemaError, form_schema
from .loglevel import log_allowed
from .results import describe_failure, error_result, result_of
from .sampling import SamplingToolsError, sample_params, sample_result
from .upstream import UpstreamCalls
from .warm import WarmRuns

__all__ = [
    "CallProgress",
    "check_answered",
    "feed",
    "guarded",
    "make_calls",
    "missing_capability",
    "released_unless_fed",
    "run_round",
    "start_run",
]

# logging is deprecated in 2026-07-28 (SEP-2577) but asked for per request there: the SDK's warning for this
# module's own calls is noise (in branchc serve, or mounted on another server)
warnings.filterwarnings("ignore", category=MCPDeprecationWarning, module=__name__)
logger = logging.getLogger("branchc.rounds")  # a failed round, as `--log-format json` logs it (bridge/logs.py)


class AnswerError(BranchcError, ValueError):
    """input_responses that do not answer what the last round asked."""


async def run_round(
    bridge: Any, ctx: ServerRequestContext, tool: Tool, model: BaseModel, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    if getattr(bridge, "durable", None) is not None:  # a store: request_state is a short run reference (durable.py)
        return await bridge.durable.run_round(bridge, ctx, tool, model, params)
    if params.request_state is None:
        if params.input_responses:
            return error_result("input_responses came without the request_state of the round they answer")
        with tracing.observed_round(tool.name, "2026-07-28", number=0) as round_:
            return round_.ended(
                await guarded(
                    start_run(bridge, ctx, tool, model), _asked_as_input_requests, bridge, ctx, tool, keep_as=_state_of
                )
            )

    async def restored() -> tuple[Any, Machine]:
        warm = bridge_warm(bridge)
        live = warm.take(params.request_state) if warm is not None else None
        handoff, machine = live[:2] if live is not None else load_run(unpack_run(params.request_state))
        try:
            if machine.tool != tool.name:
                raise AnswerError(f"this request_state belongs to tool {machine.tool!r}, not {tool.name!r}")
            responses = params.input_responses or {}
            check_answered(machine, responses.keys(), "input_responses")
            answers = {key: _answer(request, responses[key]) for key, request in machine.requests.items()}
        except BaseException:  # refused answers: the same request_state can be answered again
            if live is not None:
                warm.keep(params.request_state, handoff, machine)  # nothing was fed: still what the state holds
            else:
                machine.release()
            raise
        with released_unless_fed(machine):
            feed(machine, answers)
        return handoff, machine

    with tracing.observed_round(tool.name, "2026-07-28") as round_:
        return round_.ended(
            await guarded(restored(), _asked_as_input_requests, bridge, ctx, tool, resumable=True, keep_as=_state_of)
        )


def bridge_warm(bridge: Any) -> WarmRuns | None:
    return getattr(bridge, "warm", None)


def _state_of(response: Any) -> tuple[str, None]:
    return response.request_state, None


def _asked_as_input_requests(ctx: ServerRequestContext, handoff: Any, machine: Machine) -> Any:
    asked = _input_requests(ctx, machine)
    return (
        None
        if asked is None
        else types.InputRequiredResult(input_requests=asked, request_state=pack_run(dump_run(handoff, machine)))
    )


async def guarded(
    started: Awaitable[tuple[Any, Machine]],
    waiting: Callable[..., Any],
    bridge: Any,
    ctx: ServerRequestContext,
    tool: Tool,
    *,
    resumable: bool = False,
    keep_as: Callable[[Any], tuple[Hashable, Any] | None] | None = None,
    progress: CallProgress | None = None,
) -> Any:
    """Get the run (`started`), step it until it ends (the call's result) or `waiting(ctx, handoff,
    machine)` gives the answer for a run that waits; every failure is a tool error result.

    `resumable`: the run was restored from a request_state that stays good after this round (the
    2026-07-28 era). A round that is cancelled or fails then does not end the run (the client may
    send that round again), so its live copy is released, not halted.

    `waiting` saves the run in its answer (a request_state, a guided state id): the run goes on
    from there, so this live copy is then released, never closed, and its cleanup (the finally
    blocks of the tool's code) runs once, in the round where the run ends. A run that ends here
    some other way (cancelled, the connection lost, a failure while stepping or saving it) is
    halted: its finally blocks run now, and what they log is still sent if it can be.

    `keep_as(response)`: (key, note) under which the bridge's WarmRuns keeps the saved run's live machine
    for the round that continues it (warm.py); None, or no `keep_as`: the live copy is released.
    `progress`: where the round's tool calls are written down as they go (make_calls)."""
    machine: Machine | None = None
    try:
        try:
            handoff, machine = await started
            machine.executor = getattr(bridge, "executor", None)  # sub-branch steps run there (steps.py)
            provider = bridge.sampler(ctx)
            while True:
                await advance(machine)
                await _send_outbox(ctx, tool, machine)
                if machine.done:
                    break
                if machine.ready_calls():  # tool calls are made here, in the round, by the server
                    await make_calls(bridge, machine, progress)
                    continue
                if provider is not None and any(request.kind == "sample" for request in machine.pending):
                    await _sample_on_server(provider, machine)
                    continue
                response = waiting(ctx, handoff, machine)
                if inspect.isawaitable(response):  # one that writes to a store
                    response = await response
                if response is not None:
                    warm = bridge_warm(bridge)
                    kept = keep_as(response) if keep_as is not None and warm is not None else None
                    if kept is not None:
                        warm.keep(kept[0], handoff, machine, kept[1])
                    else:
                        machine.release()
                    return response
        except BaseException as error:
            if machine is not None and resumable and not machine.done and not machine.released:
                machine.release()
            elif machine is not None:
                await _halt(ctx, tool, machine, error)
            raise
        if not machine.ok:
            raise ToolPhaseError(tool.name, "client", machine.result) from machine.result
        result = await finish_phases(tool, handoff, machine)
    except (AnswerError, RunStateError, MissingCapabilityError) as error:
        tracing.failed(trace.get_current_span(), error)
        logger.info("round refused: %s", _first_line(error))
        return error_result(_noted(str(error), error))
    except BranchcError as error:
        tracing.failed(trace.get_current_span(), error.__cause__ or error)  # the tool's own error, where it was raised
        logger.info("round failed: %s", _first_line(error.__cause__ or error))
        return error_result(_noted(describe_failure(error), error))
    return result_of(result)


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _noted(text: str, error: BaseException) -> str:
    return "\n".join([text, *getattr(error, "__notes__", ())])


@contextlib.contextmanager
def released_unless_fed(machine: Machine) -> Iterator[None]:
    """A restored run whose answers are refused is let go of (released), not closed: its saved
    copy stays good, and its cleanup runs where the run really ends, not here."""
    try:
        yield
    except BaseException:
        machine.release()
        raise


async def _halt(ctx: ServerRequestContext, tool: Tool, machine: Machine, error: BaseException) -> None:
    """The run ends in this round without finishing (`error`): halt it, so its finally blocks run
    (once: nothing saved it), and send what they log while the connection still takes it."""
    if machine.released or machine.done:
        return
    with anyio.CancelScope(shield=True):
        machine.halt_after(error)
        with contextlib.suppress(Exception):
            # not to a client that is gone, nor for long to one that reads nothing: over HTTP the SDK's round
            # stream is not read any more once the client disconnected, and a shielded write to it never ends
            await write_bounded(ctx, lambda: _send_outbox(ctx, tool, machine), "a halted run's logs")


def missing_capability(tool: Tool, missing: Any) -> MissingCapabilityError:
    """The error for a client that lacks what `tool` requires (the same in both eras), with what would
    let the tool run anyway: guided mode, and for sampling, a model the server asks itself."""
    ways = [
        "connect with a client that offers it",
        "turn on guided mode (`branchc serve --guided`, or `mount(..., guided=True)`): the calling model then "
        "answers what the client cannot",
    ]
    if "sampling" in missing:
        ways.append(
            "answer samples on the server with `branchc serve --sampling provider` (or `--sampling auto`: the "
            "client when it can) and --provider-url, --provider-model (`mount(..., sampling=, provider=)`)"
        )
    needs = ", ".join(sorted(missing))
    return MissingCapabilityError(
        f"{tool.name} requires {needs}, which the client does not offer; {', or '.join(ways)}"
    )


async def start_run(
    bridge: Any, ctx: ServerRequestContext, tool: Tool, model: BaseModel, *, check: bool = True
) -> tuple[Any, Machine]:
    """Run before() and start the machine; `check`: first refuse a client that lacks what the tool requires."""
    if tool.client_fn is None:
        raise AnswerError(f"tool {tool.name!r} has no client phase")
    if check and (missing := tool.requires - bridge.offered(ctx)):
        raise missing_capability(tool, missing)
    handoff = await handoff_of(tool, model)
    handoff = json.loads(json.dumps(handoff))
    machine = Machine(tool.name, str(ctx.request_id), tool.limits.tighten(bridge.limits))
    try:
        machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
    except Exception as error:
        raise ToolPhaseError(tool.name, "client", error) from error
    return handoff, machine


def check_answered(machine: Machine, keys: Any, what: str) -> None:
    """Every waiting request answered, and nothing else (before anything is fed)."""
    if extra := sorted(set(keys) - machine.requests.keys()):
        raise AnswerError(f"{what} has answers to requests that were not asked: {', '.join(extra)}")
    if missing := sorted(machine.requests.keys() - set(keys)):
        raise AnswerError(f"{what} lacks answers to: {', '.join(missing)}; answer every request")


def feed(machine: Machine, answers: dict[str, Any]) -> None:
    """Give each waiting request its answer (a request past its deadline times out instead); an answer
    that is an exception (one refused as it was read) is raised at the yield that asked."""
    now = time.time()
    for key, answer in answers.items():
        request = machine.requests[key]
        if request.deadline is not None and now >= request.deadline:
            machine.expire(key)
        elif isinstance(answer, BaseException):
            machine.fail(key, answer)
        else:
            machine.answer(key, answer)


def _answer(request: Request, response: Any) -> Any:
    if request.kind == "sample":
        if not isinstance(response, (types.CreateMessageResult, types.CreateMessageResultWithTools)):
            raise AnswerError(f"input_responses[{request.key!r}]: expected a sampling result (role, content, model)")
        try:
            return sample_result(response, request.sample)
        except ClientAnswerError as error:
            return error  # raised at the sample's yield (feed), as the handshake era raises it
    if not isinstance(response, types.ElicitResult):
        raise AnswerError(f"input_responses[{request.key!r}]: expected an elicitation result (action, content)")
    return {"action": response.action, "content": response.content}


def _input_requests(ctx: ServerRequestContext, machine: Machine) -> dict[str, Any] | None:
    """The pending requests as MCP input requests; None when one cannot be asked (a sample with
    tools the client cannot take, a form MCP cannot express): its error was thrown into the
    branch that asked, and the machine must step again."""
    _, sampling_tools = client_capabilities(ctx)
    requests: dict[str, Any] = {}
    for request in machine.pending:
        try:
            if request.kind == "sample":
                params = sample_params(request.sample, tools_supported=sampling_tools)
                requests[request.key] = types.CreateMessageRequest(params=types.CreateMessageRequestParams(**params))
            else:
                ask = request.elicit
                schema = form_schema(ask.requested_schema, ask.requested_schema.get("title", ask.key))
                requests[request.key] = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(message=ask.message, requested_schema=schema)
                )
        except (SamplingToolsError, ElicitSchemaError) as error:
            machine.fail(request.key, error)
            return None
    return requests


class CallProgress(Protocol):
    """Where a round keeps how far its tool calls got, so that a round run again (its server died) neither calls
    a tool twice nor runs a tool's before() twice: a store (durable.py)."""

    def known(self, key: str) -> tuple[str, Any] | None: ...

    async def started(self, keys: list[str]) -> None: ...

    async def came_back(self, key: str, outcome: tuple[str, Any]) -> None: ...


async def make_calls(bridge: Any, machine: Machine, progress: CallProgress | None = None) -> None:
    """Make the run's ready tool calls, at once: a tool of this server runs its phases here (its client phase as
    a sub-run of the run), an upstream one goes to its server (upstream.py); each outcome is applied in the order
    the calls were made, then fed. With `progress`, each step of a call (its before(), its after(), each answer
    sent upstream) is written down as started before it goes out and with its outcome as it comes back; an
    outcome written down already is used as it is, and a step started and never come back (the round's server
    died) is a ToolCallInterruptedError at its yield."""
    caller = ToolCaller(bridge.tools, UpstreamCalls(getattr(bridge, "upstreams", None)), bridge.limits)
    entries = machine.ready_calls()
    steps = {entry.key: f"{entry.key}.{entry.call.step + 1}" for entry in entries}  # the step each one makes now
    outcomes: dict[str, Any] = {}
    if progress is not None:
        for entry in entries:
            known = progress.known(steps[entry.key])
            if known is not None and known[0] == "handoff":  # its before() ran: its client phase starts from there
                known = caller.client_outcome(entry, known[1])
            if known is not None:
                outcomes[entry.key] = known
    todo = [entry for entry in entries if entry.key not in outcomes]
    failures: list[BaseException] = []

    async def make(entry: Any) -> None:
        try:
            outcome = await caller.make(entry)
            if progress is not None:
                await progress.came_back(steps[entry.key], outcome)
        except Exception as error:  # raised once every call is back (a task group would wrap it in a group)
            failures.append(error)
            return
        outcomes[entry.key] = outcome

    for entry in entries:
        machine.start_call(entry.key)
    if progress is not None and todo:
        await progress.started([steps[entry.key] for entry in todo])
    async with anyio.create_task_group() as group:
        for entry in todo:
            group.start_soon(make, entry)
    if failures:
        raise failures[0]
    for entry in entries:
        apply(machine, entry.key, outcomes[entry.key])
    machine.settle_calls()


async def _sample_on_server(provider: Any, machine: Machine) -> None:
    """Answer this round's samples with the server's model, all at once; the rest wait for the client."""
    samples = [request for request in machine.pending if request.kind == "sample"]
    outcomes: dict[str, tuple[bool, Any]] = {}

    async def ask(request: Request) -> None:
        try:
            outcomes[request.key] = (True, await provider.sample(request.sample))
        except Exception as error:
            outcomes[request.key] = (False, error)

    async with anyio.create_task_group() as group:
        for request in samples:
            group.start_soon(ask, request)
    for request in samples:  # in the order they were asked, as the live driver would see them
        ok, value = outcomes[request.key]
        if request.key not in machine.requests:
            continue  # dropped meanwhile: a sibling's answer failed its group
        if ok:
            machine.answer(request.key, value)
        else:
            machine.fail(request.key, value)


async def _send_outbox(ctx: ServerRequestContext, tool: Tool, machine: Machine) -> None:
    """Logs and progress notes of this round (delivered as the client's requested log level allows: the
    request's logLevel in 2026-07-28, enforced by the SDK; the session's setLevel before, in guided mode)."""
    token = (ctx.meta or {}).get("progress_token")
    for item in machine.take_outbox():
        if item[0] == "log":
            if not log_allowed(ctx, item[1]):
                continue
            await ctx.session.send_log_message(item[1], item[2], logger=tool.name, related_request_id=ctx.request_id)
        elif token is not None and item[2] is not None:
            await ctx.session.send_progress_notification(
                token, item[2], item[3], item[1], related_request_id=ctx.request_id
            )
