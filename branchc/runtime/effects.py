"""Effects: the plain data that client code yields and the runtime interprets.

An effect describes what to do; it does nothing by itself. This keeps client
code free of I/O, which is what lets a compiled continuation move anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from .messages import ModelPreferences, ToolSpec

__all__ = ["LOG_LEVELS", "All", "Branch", "CallTool", "Effect", "Elicit", "Log", "Notify", "Sample"]

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class Sample:
    """Ask the model. `prompt` is auto-tracked in the branch history; `messages` is explicit."""

    prompt: str | None
    messages: tuple[Any, ...] | None
    system_prompt: str | None = None
    max_tokens: int = 1024
    temperature: float | None = None
    stop_sequences: tuple[str, ...] | None = None
    model_preferences: ModelPreferences | None = None
    tools: tuple[ToolSpec, ...] | None = None
    tool_choice: Literal["auto", "required", "none"] | None = None

    kind = "sample"


@dataclass(frozen=True, slots=True)
class Elicit:
    """Ask the user for a form matching `schema`; `context` is kept for the exchange."""

    key: str
    message: str
    schema: type[BaseModel]
    context: Any = None

    kind = "elicit"


@dataclass(frozen=True, slots=True)
class Log:
    level: str
    message: str

    kind = "log"


@dataclass(frozen=True, slots=True)
class Notify:
    message: str
    progress: float | None = None
    total: float | None = None

    kind = "notify"


@dataclass(frozen=True, slots=True)
class CallTool:
    """Call a tool: one of this server (`server` None) or of an upstream MCP server. `tool_call_id`: the id of
    the model's tool_use this call answers (its tool_use is in the history already), else None."""

    name: str
    arguments: dict[str, Any]
    server: str | None = None
    tool_call_id: str | None = None

    kind = "call_tool"


@dataclass(frozen=True, slots=True)
class Branch:
    """Run `fn(sub_ctx, *args, **kwargs)` as a sub-branch with its own history; `tools`: the tools it may call
    (None: those its parent may)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    inherit_messages: bool = True
    system_prompt: str | None = None
    max_depth: int | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    tools: tuple[str, ...] | None = None

    kind = "branch"

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


@dataclass(frozen=True, slots=True)
class All:
    """Perform every effect concurrently; results in order; the first failure halts the rest."""

    effects: tuple[Any, ...]

    kind = "all"


Effect = Sample | Elicit | Log | Notify | Branch | All | CallTool
