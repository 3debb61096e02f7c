"""The driver: runs before -> client -> after against a live client.

The client phase is a `Machine` (machine.py), which interprets every effect and drives
generators only through `send` / `throw`, so a compiled state machine drops in for a
native generator unchanged. This driver asks the client every pending request at once,
feeds each answer as it arrives, and enforces deadlines on the requests in flight.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any, Protocol

import anyio
from pydantic import BaseModel

from ..continuation.errors import NotSerializableError
from .calling import ToolCaller, apply, interrupt_started
from .client import Client
from .context import BranchState
from .errors import (
    InputClosedError,
    MissingCapabilityError,
    RunTakenOverError,
    ToolDefinitionError,
    ToolPhaseError,
)
from .limits import Limits
from .machine import Machine, Request
from .phases import finish_phases, handoff_of
from .runstate import RunStateError, dump_run, load_run
from .steps import StepElsewhereError
from .tool import Tool

__all__ = ["Checkpoint", "Event", "RunTakenOverError", "resume_tool", "run_tool"]

Event = dict[str, Any]


class Checkpoint(Protocol):
    """Where a durable driver writes its run down (a store: bridge/held.py). Either call raising
    RunTakenOverError ends this copy of the run without its cleanup: another process holds it now."""

    async def saved(self, text: str, machine: Machine) -> None:
        """The run's JSON text (runstate.dump_run) at a suspension, before any request of it is asked."""

    async def answering(self, key: str, how: str, value: Any) -> None:
        """An answer arrived (`how`: answer, error, closed or expired; `value`: the answer or the error) for
        request `key`: called before the run moves on with it, so a run taken over meanwhile does not."""


CLEANUP_SEND_TIMEOUT = 5.0  # what a halted run's last logs may take to send, all together


async def run_tool(
    tool: Tool,
    params: BaseModel | dict[str, Any] | None,
    client: Client,
    *,
    limits: Limits | None = None,
    call_id: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    portable: bool = False,
    checkpoint: Checkpoint | None = None,
    executor: Executor | None = None,
    tools: Mapping[str, Tool] | None = None,
) -> Any:
    """Run `tool` with `params` against `client`; return after()'s result.

    `limits` is the runtime policy, tightened with the tool's own limits.
    `call_id` names the MCP tool call (elicit exchanges use it in their ids).
    `on_event` receives a JSON-ready dict for each step (the timeline and traces).
    `portable`: at every suspension the run is saved as JSON text (runstate.dump_run), let go of,
    and continued from that text, as the 2026-07-28 era does between rounds; a value that cannot
    travel fails here, naming the variable and the line. Needs a compiled tool (runtime/compiled.py).
    `checkpoint`: told the run's text at every suspension, before its requests are asked, and told of each
    answer before the run moves on with it (a store keeps the run, so it outlives this process); needs a
    compiled tool too.
    `executor`: the steps of sub-branches run there, in parallel, with the same results, requests and
    order as without it (machine.py, steps.py); needs a compiled tool too.
    `tools`: the tools `ctx.call_tool(name)` may call on this side, by name (their before() and after() run
    here, their client phase as a sub-run of this one); any other call goes to `client.call_tool`.
    """
    if tool.client_fn is None:
        raise ToolDefinitionError(
            f"tool {tool.name!r} has no client phase; decorate a generator with @{tool.name}.client"
        )
    if (portable or checkpoint is not None) and not is_compiled_tool(tool):
        raise ToolDefinitionError(
            f"tool {tool.name!r}: a portable run needs the tool compiled (its client {tool.client_fn.__qualname__} "
            f"is not); load it with branchc.runtime.compiled.load_compiled_tool"
        )
    if executor is not None and not is_compiled_tool(tool):
        raise ToolDefinitionError(
            f"tool {tool.name!r}: branch steps run on an executor as snapshots, so the tool must be compiled (its "
            f"client {tool.client_fn.__qualname__} is not); load it with branchc.runtime.compiled.load_compiled_tool"
        )
    model = tool.validate_params(params)
    _check_capabilities(tool, client)
    run = _Run(tool, client, call_id or os.urandom(6).hex(), tool.limits.tighten(limits), on_event, portable)
    run.checkpoint = checkpoint
    run.executor = executor
    run.caller = ToolCaller(tools, client, limits)
    return await run.run(model)


async def resume_tool(
    tool: Tool,
    saved: str,
    client: Client,
    *,
    on_event: Callable[[Event], None] | None = None,
    checkpoint: Checkpoint | None = None,
    executor: Executor | None = None,
    tools: Mapping[str, Tool] | None = None,
) -> Any:
    """Continue the run saved as `saved` (runstate.dump_run's text, at a suspension) against `client`: the
    rest of its client phase, then after(); return after()'s result. The run keeps the limits and call id
    it was saved with. RunStateError when the text is not a run this tool's code can continue. A tool call
    that was under way when the run was saved is not made again (ToolCallInterruptedError at its yield)."""
    handoff, machine = load_run(saved, emit=on_event and _Run.emit_to(on_event))
    if machine.tool != tool.name:
        machine.release()
        raise RunStateError(f"the saved run belongs to tool {machine.tool!r}, not {tool.name!r}")
    try:
        _check_capabilities(tool, client)
    except MissingCapabilityError:
        machine.release()  # the run stays where it was saved; nothing of it ran here
        raise
    run = _Run(tool, client, machine.call_id, machine.limits, on_event)
    run.checkpoint = checkpoint
    run.executor = executor
    run.caller = ToolCaller(tools, client, machine.limits)
    interrupt_started(machine)
    return await run.finish(handoff, machine)


async def advance(machine: Machine) -> None:
    """`machine.advance()`; with an executor in a worker thread, so that waiting for its steps never blocks
    the event loop (a cancellation waits for the batch to be applied: the machine is never left mid-step)."""
    if machine.executor is None:
        machine.advance()
    else:
        await anyio.to_thread.run_sync(machine.advance)


def is_compiled_tool(tool: Tool) -> bool:
    """Whether the tool's client phase is compiled, so its runs can be saved at their suspensions."""
    return getattr(tool.client_fn, "__branchc_meta__", None) is not None


def _check_capabilities(tool: Tool, client: Client) -> None:
    if missing := tool.requires - frozenset(getattr(client, "capabilities", ())):
        raise MissingCapabilityError(
            f"{tool.name} requires {', '.join(sorted(missing))}, which the client does not offer"
        )


class _Run:
    def __init__(
        self, tool: Tool, client: Client, call_id: str, limits: Limits, on_event, portable: bool = False
    ) -> None:
        self.tool = tool
        self.portable = portable
        self.client = client
        self.call_id = call_id
        self.limits = limits
        self.on_event = on_event
        self.samples = 0
        self.elicits = 0
        self.checkpoint: Checkpoint | None = None
        self.executor: Executor | None = None
        self.caller = ToolCaller(None, client)

    @staticmethod
    def emit_to(on_event: Callable[[Event], None]) -> Callable[..., None]:
        """The machine's emit for a restored run: events as run_tool's observer gets them."""
        run = _Run.__new__(_Run)
        run.on_event = on_event
        return run.emit

    def emit(self, event: str, branch: BranchState | None = None, **data: Any) -> None:
        """Tell the observer; an observer that fails is reported, never fatal to the run."""
        if self.on_event is not None:
            if branch is not None:
                data = {"branch": branch.id, "depth": branch.depth, **data}
            try:
                self.on_event({"event": event, **data})
            except Exception as error:
                warnings.warn(f"on_event failed on a {event!r} event: {error!r}", RuntimeWarning, stacklevel=2)

    # -- phases ---------------------------------------------------------------------------

    async def run(self, params: BaseModel) -> Any:
        tool = self.tool
        self.emit("start", tool=tool.name, call_id=self.call_id, params=params.model_dump(mode="json"))
        handoff = await handoff_of(tool, params)
        self.emit("handoff", handoff=handoff)
        return await self.finish(handoff)

    async def finish(self, handoff: Any, machine: Machine | None = None) -> Any:
        """The client phase (started here on a JSON copy of the handoff, or `machine`, restored where it
        waits), then after() with the handoff itself."""
        machine = await self._client_phase(json.loads(json.dumps(handoff)) if machine is None else handoff, machine)
        result = await finish_phases(self.tool, handoff, machine, self.emit)
        self.emit("result", result=result)
        return result

    async def _client_phase(self, handoff: Any, machine: Machine | None = None) -> Machine:
        """The machine, its client phase returned (a failure of it is a ToolPhaseError)."""
        try:
            if machine is None:
                machine = Machine(self.tool.name, self.call_id, self.limits, self.emit if self.on_event else None)
                machine.start(self.tool.client_fn, handoff, self.tool.client_fn.__qualname__)
            machine = await self._answer_all(machine, handoff)
        except (NotSerializableError, RunStateError, RunTakenOverError, StepElsewhereError):
            raise  # the run cannot be saved where it waits (the error names the variable and the line), or
            # another process took it over: its cleanup is not this copy's to run
        except InputClosedError:
            raise  # no failure of the tool's: the run was cancelled (halted) where it waited
        except Exception as error:
            raise ToolPhaseError(self.tool.name, "client", error) from error
        if not machine.ok:
            raise ToolPhaseError(self.tool.name, "client", machine.result) from machine.result
        return machine

    async def _answer_all(self, machine: Machine, handoff: Any) -> Machine:
        """Step the machine; ask the client every pending request at once, feed answers as they come.
        Returns the machine that finished (a portable run continues from a new one at each suspension)."""
        send, receive = anyio.create_memory_object_stream[tuple[str, str, Any]](math.inf)
        asked: dict[str, anyio.CancelScope] = {}
        unsaved: BaseException | None = None  # raised as itself, not in the task group's ExceptionGroup
        async with anyio.create_task_group() as group:
            try:
                while True:
                    machine.executor = self.executor  # (a portable run's machine is a new one at each suspension)
                    try:
                        await advance(machine)
                    except StepElsewhereError as error:
                        unsaved = error  # the failed step never ran here: halt the run, its finally blocks run once
                        with anyio.CancelScope(shield=True):
                            machine.halt_after(error)
                            await self._send_cleanup(machine)
                        break
                    await self._send_outbox(machine)
                    for key in machine.take_cancelled():
                        if key in asked:  # else it was made and dropped in the same step
                            asked.pop(key).cancel()
                    if machine.done:
                        break
                    for entry in machine.ready_calls():
                        if entry.key not in asked:
                            machine.start_call(entry.key)  # saved so: a run restored mid-call is not called again
                    if self.portable or self.checkpoint is not None:
                        try:
                            machine = await self._travel(handoff, machine)
                        except RunTakenOverError as error:
                            unsaved = error  # released: the process that took it over runs the rest
                            break
                        except (NotSerializableError, RunStateError) as error:
                            unsaved = error  # the run ends here, unsaved: halt it, its finally blocks run once
                            with anyio.CancelScope(shield=True):
                                machine.halt_after(error)
                                await self._send_cleanup(machine)
                            break
                    pending = machine.pending
                    if len(pending) == 1 and not asked:  # the common case: one question, asked inline
                        asked[pending[0].key] = anyio.CancelScope()
                        await self._ask(pending[0], asked[pending[0].key], send)
                    for request in pending:
                        if request.key not in asked:
                            asked[request.key] = anyio.CancelScope()
                            group.start_soon(self._ask, request, asked[request.key], send)
                    for entry in machine.ready_calls():
                        if entry.key not in asked:
                            asked[entry.key] = anyio.CancelScope()
                            group.start_soon(self._call, entry, asked[entry.key], send)
                    # answered requests are not held here past their answer: their sample's message list would
                    # hold every message of the history once more when the run is next saved (runstate._history)
                    pending = request = None
                    key, how, value = await receive.receive()
                    if asked.pop(key, None) is None or (key not in machine.requests and key not in machine.calls):
                        continue  # dropped (a sibling failed) after its answer was on its way: nothing wants it
                    if how == "call":
                        if not apply(machine, key, value):
                            continue  # a tool of this side runs its client phase now, or waits on its questions
                        if self.checkpoint is not None:  # the outcome is written down before the run moves on
                            kind, outcome = value
                            shown = outcome.model_dump(mode="json") if kind == "result" else outcome
                            try:
                                await self.checkpoint.answering(key, "answer" if kind == "result" else "error", shown)
                                machine = await self._travel(handoff, machine)
                            except RunTakenOverError as error:
                                unsaved = error
                                break
                        machine.settle_calls()
                        continue
                    if self.checkpoint is not None:
                        try:
                            await self.checkpoint.answering(key, how, value)
                        except RunTakenOverError as error:
                            machine.release()
                            unsaved = error  # released: the process that took it over runs the rest
                            break
                    if how == "answer":
                        machine.answer(key, value)
                    elif how == "error":
                        machine.fail(key, value)
                    elif how == "closed":  # the client can answer no more: cancel the run, its finally blocks run
                        what = _asked(machine.requests[key]) if key in machine.requests else f"tool call {key!r}"
                        unsaved = InputClosedError(f"input ended while answering {what}; the run was cancelled")
                        with anyio.CancelScope(shield=True):
                            machine.halt_after(unsaved)
                            await self._send_cleanup(machine)
                        break
                    else:
                        machine.expire(key)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    machine.halt()
                    await self._send_cleanup(machine)  # a failed send does not replace the cancellation
                raise
            except Exception as error:
                # the run ends unfinished (the client could not take a log, say): halt it now, so its
                # finally blocks run once, at their yields, not when the collector closes its generators
                with anyio.CancelScope(shield=True):
                    machine.halt_after(error)
                    await self._send_cleanup(machine)
                raise
            finally:
                for scope in asked.values():
                    scope.cancel()
        if unsaved is not None:
            raise unsaved
        return machine

    async def _travel(self, handoff: Any, machine: Machine) -> Machine:
        """The run as JSON text, handed to `checkpoint`; `portable`: and back: the live machine is released
        (none of its cleanup runs; the run goes on from the text), and a machine restored from the text takes
        its place. Requests in flight are answered into the new machine by key (keys are stable across saves).
        A checkpoint that finds the run taken over (RunTakenOverError) gets the live machine released."""
        text = dump_run(handoff, machine)
        if self.checkpoint is not None:
            try:
                await self.checkpoint.saved(text, machine)
            except RunTakenOverError:
                machine.release()
                raise
        if not self.portable:
            return machine
        machine.release()
        return load_run(text, emit=self.emit if self.on_event else None)[1]

    async def _ask(self, request: Request, dropped: anyio.CancelScope, send: Any) -> None:
        """Ask one request; `dropped` is cancelled when the machine no longer needs the answer."""
        with dropped:
            timer = anyio.CancelScope()
            if request.deadline is not None:
                timer.deadline = anyio.current_time() + (request.deadline - time.time())
            with timer:
                try:
                    if request.kind == "sample":
                        outcome = ("answer", await self.client.sample(request.sample))
                    else:
                        outcome = ("answer", await self.client.elicit(request.elicit))
                except InputClosedError as error:
                    outcome = ("closed", error)
                except Exception as error:
                    outcome = ("error", error)
            if timer.cancelled_caught:
                outcome = ("timeout", None)
            await send.send((request.key, *outcome))

    async def _call(self, entry: Any, dropped: anyio.CancelScope, send: Any) -> None:
        """Make one tool call's next step; `dropped` is cancelled when the machine no longer needs it."""
        with dropped:
            try:
                outcome: Any = ("call", await self.caller.make(entry))
            except InputClosedError as error:  # the client went away while the call was made: the run ends
                outcome = ("closed", error)
            await send.send((entry.key, *outcome))

    async def _send_cleanup(self, machine: Machine) -> None:
        """A halted run's last logs and notes: given CLEANUP_SEND_TIMEOUT seconds in all (not each: a client
        that takes nothing must not hold the run's end for long), and what fails to send is dropped, so it
        never replaces why the run ended. Called in a shielded scope."""
        with anyio.move_on_after(CLEANUP_SEND_TIMEOUT), contextlib.suppress(Exception):
            await self._send_outbox(machine)

    async def _send_outbox(self, machine: Machine) -> None:
        for item in machine.take_outbox():
            if item[0] == "log":
                await self.client.log(item[1], item[2])
            else:
                await self.client.notify(*item[1:])


def _asked(request: Request) -> str:
    """A request as a person knows it: `sample #2`, `elicit 'pick'`."""
    return f"sample #{request.number}" if request.kind == "sample" else f"elicit {request.elicit.key!r}"
