"""Every error the runtime raises, so callers can catch them by kind."""

from __future__ import annotations

from typing import Any

from ..errors import BranchcError

__all__ = [
    "BranchDepthError",
    "BranchError",
    "BranchTimeoutError",
    "BranchTokenError",
    "BranchcError",
    "ClientAnswerError",
    "ElicitValidationError",
    "EffectTypeError",
    "InputClosedError",
    "JsonDataError",
    "MissingCapabilityError",
    "OutputError",
    "RunTakenOverError",
    "ParamsError",
    "ToolDefinitionError",
    "ToolPhaseError",
    "format_validation_errors",
]


class ToolDefinitionError(BranchcError, TypeError):
    """A tool or resumable function is defined in a way branchc cannot run."""


class ParamsError(BranchcError, ValueError):
    """Tool arguments failed the params model; `errors` lists every field."""

    def __init__(self, tool: str, errors: list[str]) -> None:
        self.tool = tool
        self.errors = errors
        super().__init__(f"invalid params for {tool}:\n" + "\n".join(f"  {e}" for e in errors))


class OutputError(BranchcError, ValueError):
    """A tool's result does not fit the `output=` model it declares; `errors` lists every field."""

    def __init__(self, tool: str, errors: list[str], place: str | None = None) -> None:
        self.tool = tool
        self.errors = errors
        self.place = place  # file:line of the `return` that gave the result, when known
        head = f"{place}: " if place else ""
        super().__init__(
            f"{head}{tool}: the result does not fit its output model:\n" + "\n".join(f"  {e}" for e in errors)
        )


class JsonDataError(BranchcError, TypeError):
    """A value crossing a phase boundary is not JSON data. `problems` lists the first bad values
    (`path: what is wrong`), `total` counts them all; `place` is the phase function's `file:line`
    and `phase` its phase, when a phase handed the data on."""

    def __init__(
        self,
        message: str,
        *,
        problems: list[str] | None = None,
        total: int | None = None,
        place: str | None = None,
        phase: str | None = None,
    ) -> None:
        self.problems = list(problems or [])
        self.total = len(self.problems) if total is None else total
        self.place = place
        self.phase = phase
        super().__init__(message)


class EffectTypeError(BranchcError, TypeError):
    """A generator yielded something that is not an effect."""


class ClientAnswerError(BranchcError, ValueError):
    """A client answered a sample or elicit with data of the wrong shape."""


class MissingCapabilityError(BranchcError, RuntimeError):
    """The client lacks a capability the tool declares in `requires`."""


class InputClosedError(BranchcError, EOFError):
    """The client's input ended (a person's standard input closed) while a request was open. Not a
    failure of the tool's code: `run_tool` cancels the run (its finally blocks run at their yields)
    and raises this, naming the request."""


class RunTakenOverError(BranchcError, RuntimeError):
    """Another process took over a run while this one held it (`branchc runs resume` or `cancel` after this
    server was thought gone): this copy stops without its cleanup, which is the other process's to run."""


class ElicitValidationError(BranchcError, ValueError):
    """An accepted elicitation whose content fails the requested schema."""

    def __init__(self, key: str, errors: list[str], content: Any) -> None:
        self.key = key
        self.errors = errors
        self.content = content
        super().__init__(
            f"elicit {key!r}: the accepted content does not match the schema:\n" + "\n".join(f"  {e}" for e in errors)
        )


class BranchError(BranchcError, RuntimeError):
    """A branch limit was exceeded; thrown into the generator at its current yield."""


class BranchDepthError(BranchError):
    pass


class BranchTokenError(BranchError):
    pass


class BranchTimeoutError(BranchError):
    pass


class ToolCallError(BranchcError, RuntimeError):
    """A tool call (`ctx.call_tool`) that could not be made; thrown into the generator at its yield. A call that
    was made and failed is no error: its ToolResult has `is_error`."""


class ToolCallLimitError(ToolCallError):
    """More tool calls than the run may make (`Limits.max_tool_calls`)."""


class ToolDepthError(ToolCallError):
    """A tool called through more tools than `Limits.max_tool_depth` (a tool calling itself through another)."""


class ToolTimeoutError(ToolCallError):
    """A tool call that took longer than `Limits.tool_timeout`."""


class ToolNotAllowedError(ToolCallError):
    """A tool the branch may not call (`ctx.branch(..., tools=[...])`), or that no server here has."""


class ToolCallInterruptedError(ToolCallError):
    """A tool call that was under way when its run's process stopped: whether it took effect is unknown, so it is
    not made again (a crash never calls a tool twice for one step); the run sees this at the call's yield."""


class ToolPhaseError(BranchcError, RuntimeError):
    """An exception escaped a tool phase; the original is `__cause__`."""

    def __init__(self, tool: str, phase: str, error: BaseException) -> None:
        self.tool = tool
        self.phase = phase
        self.error = error
        super().__init__(f"{tool}: {phase}() failed: {type(error).__name__}: {error}")


def format_validation_errors(error: Any) -> list[str]:
    """One line per pydantic error: `field.path: message (got value)`."""
    lines = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        line = f"{where}: {item['msg']}"
        if item["type"] != "missing" and "input" in item:
            line += f" (got {item['input']!r})"
        lines.append(line)
    return lines
