"""The driver: runs before -> client -> after against a live client.

The client phase is a `Machine` (machine.py), which interprets every effect and drives
generators only through `send` / `throw`, so a compiled state machine drops in for a
native generator unchanged. This driver asks the client every pending request at once,
feeds each answer as it arrives, and enforces deadlines on the requests in flight.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import anyio
from pydantic import BaseModel

from ..continuation.errors import NotSerializableError
from .client import Client
from .context import BranchState
from .errors import InputClosedError, MissingCapabilityError, ToolDefinitionError, ToolPhaseError
from .jsondata import check_phase_data
from .limits import Limits
from .machine import Machine, Request
from .runstate import RunStateError, dump_run, load_run
from .tool import Tool

__all__ = ["Event", "run_tool"]

Event = dict[str, Any]

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
) -> Any:
    """Run `tool` with `params` against `client`; return after()'s result.

    `limits` is the runtime policy, tightened with the tool's own limits.
    `call_id` names the MCP tool call (elicit exchanges use it in their ids).
    `on_event` receives a JSON-ready dict for each step (the timeline and traces).
    `portable`: at every suspension the run is saved as JSON text (runstate.dump_run), let go of,
    and continued from that text, as the 2026-07-28 era does between rounds; a value that cannot
    travel fails here, naming the variable and the line. Needs a compiled tool (runtime/compiled.py).
    """
    if tool.client_fn is None:
        raise ToolDefinitionError(
            f"tool {tool.name!r} has no client phase; decorate a generator with @{tool.name}.client"
        )
    if portable and getattr(tool.client_fn, "__branchc_meta__", None) is None:
        raise ToolDefinitionError(
            f"tool {tool.name!r}: a portable run needs the tool compiled (its client {tool.client_fn.__qualname__} "
            f"is not); load it with branchc.runtime.compiled.load_compiled_tool"
        )
    model = tool.validate_params(params)
    if missing := tool.requires - frozenset(getattr(client, "capabilities", ())):
        raise MissingCapabilityError(
            f"{tool.name} requires {', '.join(sorted(missing))}, which the client does not offer"
        )
    run = _Run(tool, client, call_id or os.urandom(6).hex(), tool.limits.tighten(limits), on_event, portable)
    return await run.run(model)


async def server_phase(tool: Tool, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run before() or after(), sync or async; what escapes it is a ToolPhaseError."""
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
    except Exception as error:
        raise ToolPhaseError(tool.name, phase, error) from error
    return value


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
        if tool.before_fn is None:
            handoff = params.model_dump(mode="json", round_trip=True)  # JSON that validates back to params
        else:
            handoff = await self._server_phase("before", tool.before_fn, params)
            check_phase_data(handoff, "handoff", "before", tool.before_fn)
        self.emit("handoff", handoff=handoff)

        result = await self._client_phase(json.loads(json.dumps(handoff)))
        check_phase_data(result, "client_result", "client", tool.client_fn)
        self.emit("client_result", result=result)

        if tool.after_fn is not None:
            result = await self._server_phase("after", tool.after_fn, handoff, result)
            check_phase_data(result, "result", "after", tool.after_fn)
        result = tool.check_output(result)
        self.emit("result", result=result)
        return result

    async def _server_phase(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        return await server_phase(self.tool, phase, fn, *args)

    async def _client_phase(self, handoff: Any) -> Any:
        machine = Machine(self.tool.name, self.call_id, self.limits, self.emit if self.on_event else None)
        try:
            machine.start(self.tool.client_fn, handoff, self.tool.client_fn.__qualname__)
            machine = await self._answer_all(machine, handoff)
        except (NotSerializableError, RunStateError):
            raise  # the run cannot be saved where it waits: the error names the variable and the line
        except InputClosedError:
            raise  # no failure of the tool's: the run was cancelled (halted) where it waited
        except Exception as error:
            raise ToolPhaseError(self.tool.name, "client", error) from error
        if not machine.ok:
            raise ToolPhaseError(self.tool.name, "client", machine.result) from machine.result
        return machine.result

    async def _answer_all(self, machine: Machine, handoff: Any) -> Machine:
        """Step the machine; ask the client every pending request at once, feed answers as they come.
        Returns the machine that finished (a portable run continues from a new one at each suspension)."""
        send, receive = anyio.create_memory_object_stream[tuple[str, str, Any]](math.inf)
        asked: dict[str, anyio.CancelScope] = {}
        unsaved: BaseException | None = None  # raised as itself, not in the task group's ExceptionGroup
        async with anyio.create_task_group() as group:
            try:
                while True:
                    machine.advance()
                    await self._send_outbox(machine)
                    for key in machine.take_cancelled():
                        if key in asked:  # else it was made and dropped in the same step
                            asked.pop(key).cancel()
                    if machine.done:
                        break
                    if self.portable:
                        try:
                            machine = self._travel(handoff, machine)
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
                    key, how, value = await receive.receive()
                    del asked[key]
                    if how == "answer":
                        machine.answer(key, value)
                    elif how == "error":
                        machine.fail(key, value)
                    elif how == "closed":  # the client can answer no more: cancel the run, its finally blocks run
                        what = _asked(machine.requests[key])
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

    def _travel(self, handoff: Any, machine: Machine) -> Machine:
        """The run as JSON text and back: the live machine is released (none of its cleanup runs; the
        run goes on from the text), and a machine restored from the text takes its place. Requests in
        flight are answered into the new machine by key (keys are stable across saves)."""
        text = dump_run(handoff, machine)
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
