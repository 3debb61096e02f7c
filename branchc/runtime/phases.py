"""The server phases around a client phase: before() gives the handoff, after() the result, each checked where
it crosses over (JSON data; a tool's `output=` model), every error about a value naming the `return` that gave
it (returns.py). The same for a run's own tool and for a tool of this server that it calls (calling.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from .errors import ToolPhaseError
from .jsondata import check_phase_data
from .machine import Machine
from .returns import frame_of, returned_from, returned_place
from .tool import Tool

__all__ = ["finish_phases", "finish_with", "handoff_of", "run_phase"]


async def handoff_of(tool: Tool, params: BaseModel) -> Any:
    """What the client phase starts from: before()'s value, checked (an error names its `return`), or else
    the params as JSON that validates back to them."""
    if tool.before_fn is None:
        return params.model_dump(mode="json", round_trip=True)
    handoff, returned_at = await run_phase(tool, "before", tool.before_fn, params)
    check_phase_data(handoff, "handoff", "before", tool.before_fn, returned_at)
    return handoff


async def run_phase(tool: Tool, phase: str, fn: Callable[..., Any], *args: Any) -> tuple[Any, Callable[[], Any]]:
    """Run before() or after(), sync or async: (what it returned, a function giving the file:line of the `return`
    that gave it); what escapes it is a ToolPhaseError."""
    frame = None
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            frame = frame_of(value)
            value = await value
    except Exception as error:
        raise ToolPhaseError(tool.name, phase, error) from error
    return value, (lambda: returned_from(frame)) if frame is not None else (lambda: returned_place(fn))


async def finish_phases(tool: Tool, handoff: Any, machine: Machine, emit: Callable[..., None] | None = None) -> Any:
    """The result of a run whose client phase returned: the client's value handed to after() (when the tool
    has one), each checked where it crosses over (JSON data; the `output=` model, whose instances may be
    returned as they are), every error naming the `return` that gave the value."""
    return await finish_with(tool, handoff, machine.result, machine.returned_at, emit)


async def finish_with(
    tool: Tool, handoff: Any, client_result: Any, returned_at: str | None, emit: Callable[..., None] | None = None
) -> Any:
    """finish_phases of a client phase that returned `client_result` at `returned_at` (file:line, or None)."""
    result = tool.as_data(client_result)
    check_phase_data(result, "client_result", "client", tool.client_fn, lambda: returned_at)
    if emit is not None:
        emit("client_result", result=result)
    where: Callable[[], Any] = lambda: returned_at  # noqa: E731
    if tool.after_fn is not None:
        result, where = await run_phase(tool, "after", tool.after_fn, handoff, result)
        result = tool.as_data(result)
        check_phase_data(result, "result", "after", tool.after_fn, where)
    return tool.check_output(result, where)
