"""What a result handler engine is: a real sandbox that runs a handler script against a tool's output.

A handler (the seed's `result_handler`: `{"language": "python", "script": str | [str, ...]}`) sees two
names, `tool_output` (the tool's result as JSON data) and `arguments` (the call's arguments), and a third,
`tools`, when the server lets handlers call its other tools (`tools.git_log(max_count=5)`: each call goes
to the parent through `ToolCaller`, which validates the arguments and runs the tool). The value of the
script's last expression is the result, and it must be JSON data.

Engines (monty.py: the default, an interpreter for a subset of Python in a pool of worker processes;
sandbox.py: full CPython under bubblewrap) differ in how they contain the script, never in this contract.
Every failure of a handler is a `HandlerError` with a message for the calling model; the server goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...runtime.errors import BranchcError

__all__ = [
    "HandlerError",
    "HandlerLimitError",
    "HandlerResultError",
    "HandlerRuntimeError",
    "HandlerSyntaxError",
    "HandlerUnsupportedError",
    "Limits",
    "ResultEngine",
    "ToolCaller",
    "json_size_floor",
]


class HandlerError(BranchcError, RuntimeError):
    """A handler that failed: the message says why, for the calling model (the tool result is an error)."""


class HandlerSyntaxError(HandlerError):
    """The script is not valid Python (or not the engine's subset); names the line."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class HandlerUnsupportedError(HandlerSyntaxError):
    """Valid Python the engine does not run (Monty 1.4: del, yield, except*, class inheritance, @=); names the
    line and says so."""


class HandlerRuntimeError(HandlerError):
    """The script raised: the exception's type and message, and the line where known."""


class HandlerLimitError(HandlerError):
    """The script passed a limit: time, memory, allocations, recursion, output size, processes."""


class HandlerResultError(HandlerError):
    """The script's last expression is not JSON data (or there is none)."""


@dataclass(frozen=True)
class Limits:
    """What one handler run may use."""

    seconds: float = 5.0  # wall clock
    memory_mb: int = 256
    output_bytes: int = 1 << 20  # the result's JSON, and what the script prints
    tool_calls: int = 20  # calls to other tools through `tools`
    recursion: int = 200


def json_size_floor(value: Any, limit: int) -> int:
    """A lower bound on the size of `value` as compact JSON in UTF-8 (each character a byte at least, each
    number its digits), counted without writing it, and never past `limit` + 1: the walk stops as soon as the
    count passes `limit`. Each visit adds at least one, so it visits at most `limit` + 1 values, whatever the
    value: a list holding itself, or a list shared at every level of a deep nesting (a few kilobytes in the
    sandbox that would be terabytes of JSON), is only walked until it is known to be too large. Once the count
    is within `limit`, the JSON is at most a few times `limit` (escapes, multi-byte characters), so writing
    it to measure it exactly is bounded too."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif item is None or isinstance(item, bool):
            total += 4
        elif isinstance(item, int):
            total += max(1, int(item.bit_length() * 0.30103))
        elif isinstance(item, float):
            total += 1
        elif isinstance(item, dict):
            total += 1 + 2 * len(item)
            if total <= limit:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif isinstance(item, list | tuple):
            total += 1 + len(item)
            if total <= limit:
                stack.extend(item)
        else:
            total += 1  # not JSON data: the checks that follow name it
        if total > limit:
            return limit + 1
    return total


#: Calls a tool of the same server for a handler: (tool name, arguments) -> the tool's result as JSON data.
#: Raises HandlerError (unknown tool, arguments that do not fit, too many calls) for the handler to see.
ToolCaller = Callable[[str, dict[str, Any]], Awaitable[Any]]


class ResultEngine(Protocol):
    """A sandbox that runs handler scripts. `tools`: the name -> input schema of the tools a handler may
    call (each becomes `tools.NAME(**arguments)`), with `call` running them; None: no `tools`."""

    name: str

    async def run(
        self,
        script: str,
        tool_output: Any,
        arguments: dict[str, Any],
        *,
        limits: Limits,
        tools: dict[str, dict[str, Any]] | None = None,
        call: ToolCaller | None = None,
    ) -> Any:
        """The script's result (JSON data), or a HandlerError."""
        ...

    async def aclose(self) -> None:
        """Stop the engine's workers."""
        ...
