"""Making the tool calls a run waits on (`ctx.call_tool`), for every driver alike.

A tool of this server (in `tools`) is called the way a tools/call runs it: its params validated, its
`before()` on the server, then its client phase as a sub-run of the calling run (the machine's
`run_tool_client`: a branch of the run, with the tool's own limits, whose samples and elicitations go to
this run's client), then its `after()`; what fails in any of them is the tool's error result, as MCP gives
one. Any other tool goes to the client: its `call_tool(name, arguments, server)` (a MockClient's script)
returns a ToolResult, a dict of one, or its text; a client with `make_call(call)` (the bridge's upstream
servers) is given the call itself, and may answer its questions first (`("asks", ...)`). A call past its deadline is a
ToolTimeoutError at its yield; a call no one here can make is a ToolNotAllowedError.

`make` gives what a driver applies to the machine (`apply`): `("client", ...)` starts the sub-run,
`("result", ToolResult)` and `("error", exception)` are the call's outcome.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic import ValidationError

from .errors import (
    BranchcError,
    ClientAnswerError,
    InputClosedError,
    ToolCallError,
    ToolCallInterruptedError,
    ToolNotAllowedError,
    ToolTimeoutError,
)
from .limits import Limits
from .machine import Call, Machine
from .phases import finish_with, handoff_of
from .tool import Tool
from .toolcalls import ToolResult

__all__ = ["ToolCaller", "apply", "as_tool_result", "interrupt_started"]

Outcome = tuple[str, Any]


class ToolCaller:
    """Makes tool calls: `tools` (this server's, by name) run here; the rest go to `client.call_tool`."""

    def __init__(self, tools: Mapping[str, Tool] | None, client: Any, policy: Limits | None = None) -> None:
        self.tools = tools
        self.client = client
        self.policy = policy  # the runtime's limits, which also bound a called tool's own

    async def make(self, entry: Call) -> Outcome:
        """The call's next step, within its deadline (its outcome, or the sub-run to start)."""
        call = entry.call
        scope = anyio.CancelScope()
        if call.deadline is not None:
            scope.deadline = anyio.current_time() + (call.deadline - time.time())
        with scope:
            try:
                if call.server is None and self.tools is not None and call.name in self.tools:
                    return await self._here(self.tools[call.name], entry)
                return await self._elsewhere(entry)
            except InputClosedError:
                raise  # the client went away: not the call's failure, the run's end
            except BranchcError as error:
                return "error", error
            except Exception as error:  # the client or server upstream failed: the call was not made (or is lost)
                return "error", ToolCallError(
                    f"the call of tool {_shown(entry)!r} failed: {type(error).__name__}: {error}"
                )
        return "error", ToolTimeoutError(f"the call of tool {_shown(entry)!r} ran past its deadline")

    async def _here(self, tool: Tool, entry: Call) -> Outcome:
        call = entry.call
        if call.phase == "after":
            try:
                value = await finish_with(tool, call.handoff, call.result, None)
            except BranchcError as error:  # after() failed, or what it gave is not the tool's result
                return "result", ToolResult.failed(str(error))
            return "result", ToolResult.of(value)
        if tool.client_fn is None:
            return "result", ToolResult.failed(f"{tool.name}: the tool has no client phase to run")
        try:
            params = tool.validate_params(call.arguments)
            handoff = await handoff_of(tool, params)
        except BranchcError as error:  # bad arguments, or before() failed: the tool's error, as a tools/call gives it
            return "result", ToolResult.failed(str(error))
        return self.client_outcome(entry, json.loads(json.dumps(handoff)))

    def client_outcome(self, entry: Call, handoff: Any) -> Outcome:
        """The outcome that starts the client phase of the tool of this server `entry` calls, from `handoff`
        (what its before() gave: now, or in a round that ran before, written down)."""
        assert self.tools is not None
        tool = self.tools[entry.call.name]
        return "client", (tool.client_fn, handoff, tool.limits.tighten(self.policy), tool.client_fn.__qualname__)

    async def _elsewhere(self, entry: Call) -> Outcome:
        call = entry.call
        maker = getattr(self.client, "make_call", None)
        if maker is not None:  # a client that keeps calls across rounds (the bridge's upstreams): it says what's next
            return await maker(entry)
        caller = getattr(self.client, "call_tool", None)
        if caller is None:
            where = "this server has no such tool" if call.server is None else f"no server {call.server!r} is known"
            return "error", ToolNotAllowedError(f"ctx.call_tool({_shown(entry)!r}): {where}")
        return "result", as_tool_result(await caller(call.name, call.arguments, call.server), _shown(entry))


def apply(machine: Machine, key: str, outcome: Outcome) -> bool:
    """Apply a call's outcome to the machine; True when it is the call's end (recorded, to be settled)."""
    kind, value = outcome
    if kind == "client":
        machine.run_tool_client(key, *value)
        return False
    if kind == "asks":
        machine.ask_for_call(key, *value)
        return False
    machine.record_call(key, kind == "result", value)
    return True


def interrupt_started(machine: Machine) -> None:
    """A run restored from where it was kept: a tool call that had gone out and not come back may have taken
    effect, so it is not made again; its yield gets ToolCallInterruptedError instead."""
    for entry in list(machine.calls.values()):
        call = entry.call
        if call.started and call.outcome is None:
            error = ToolCallInterruptedError(
                f"the call of tool {_shown(entry)!r} was under way when the process running it stopped; whether "
                f"it took effect is unknown, so it is not made again"
            )
            machine.record_call(entry.key, False, error)
    machine.settle_calls()


def as_tool_result(value: Any, name: str) -> ToolResult:
    """What a client's call_tool gave, as a ToolResult (one, a dict of its fields, or a str: its text)."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=[{"type": "text", "text": value}])
    if isinstance(value, dict):
        try:
            return ToolResult.model_validate(value)
        except ValidationError as error:
            raise ClientAnswerError(f"call_tool({name!r}) gave a dict that is no ToolResult: {error}") from None
    raise ClientAnswerError(
        f"call_tool({name!r}) gave a {type(value).__name__}; give a ToolResult, a dict of one, or a str"
    )


def _shown(entry: Call) -> str:
    call = entry.call
    return call.name if call.server is None else f"{call.server}:{call.name}"
