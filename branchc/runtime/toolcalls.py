"""Tools that call tools: what `ctx.call_tool` gives back, and the state of one call while its run waits on it.

A call is a suspension point like a sample: its run waits, is saved, and goes on when the call's outcome is
fed. Who makes the call is the driver's business (driver.py, and the bridge for servers upstream); the run
only keeps, in `ToolCall`, what the call is and how far it got, so that a run saved mid-call knows on
resume whether to make the call, wait on the tool's own run, finish it, or say it was interrupted:

- `call`: to be made (a tool upstream, or the `before()` of a tool of this server);
- `running`: a tool of this server runs its client phase as a sub-run of this run (a branch of its own,
  with the tool's own limits), whose samples and elicitations go to this run's client;
- `after`: that client phase returned; its `after()` is to run on the server;
- `asking`: a tool upstream asked for input (its `InputRequiredResult`); its questions wait as requests of
  this run, answered by this run's client, then sent back with its `request_state`.

`started` is set before a driver makes the call and `outcome` once it came back, each saved where the run
is kept before the run moves on: a run restored with an outcome feeds it without calling again, and one
restored mid-call (started, no outcome) is told ToolCallInterruptedError, never called twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .content import split as split_content
from .messages import AssistantToolCallMessage, ToolCall, ToolCallFunction, ToolResultMessage

__all__ = ["ToolCallState", "ToolResult", "tool_call_id"]


def tool_call_id(call_id: str, number: int) -> str:
    """The id of the `number`-th tool call of tool call `call_id`, in its history."""
    return f"tool_{call_id}_{number}"


class ToolResult(BaseModel):
    """A tool's result, the same for a tool of this server and one upstream: its content blocks (MCP's wire
    shape), its structured content, and whether it failed (a failed tool is a result, not an exception)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: list[dict[str, Any]] = Field(default_factory=list)
    structured_content: dict[str, Any] | None = None
    is_error: bool = False

    @classmethod
    def of(cls, value: Any) -> ToolResult:
        """A tool's return value as its result, as the bridge answers a tools/call with it: a content result
        (`content.result(...)`) as its blocks, anything else as its JSON text, structured when it is an object."""
        blocks, structured = split_content(value)
        if blocks is not None:
            return cls(content=blocks, structured_content=structured)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return cls(
            content=[{"type": "text", "text": text}], structured_content=value if isinstance(value, dict) else None
        )

    @classmethod
    def failed(cls, text: str) -> ToolResult:
        """A tool error, as MCP says one: its text, `is_error`."""
        return cls(content=[{"type": "text", "text": text}], is_error=True)

    @property
    def text(self) -> str:
        """The text blocks, joined by newlines."""
        return "\n".join(block.get("text", "") for block in self.content if block.get("type") == "text")

    @property
    def data(self) -> Any:
        """The result as data: its structured content, else its text."""
        return self.structured_content if self.structured_content is not None else self.text

    def as_history_text(self) -> str:
        """What the model reads of it in a tool result message: the structured content as JSON, else the text."""
        if self.structured_content is not None:
            return json.dumps(self.structured_content, ensure_ascii=False, separators=(",", ":"))
        return self.text


@dataclass
class ToolCallState:
    """One `ctx.call_tool` while its run waits on it (see the module's docstring for the phases)."""

    name: str
    arguments: dict[str, Any]
    server: str | None  # None: a tool of this server
    id: str  # its tool call id in the history
    answers: bool  # True: it answers the model's tool_use `id`, whose call message is in the history already
    deadline: float | None = None  # wall-clock time past which it times out (Limits.tool_timeout)
    phase: Literal["call", "running", "after", "asking"] = "call"
    started: bool = False
    step: int = 0  # how many times a driver began a step of it (its before(), after(), each answer upstream)
    outcome: Any = None  # (True, ToolResult) or (False, an error to raise), once it came back
    handoff: Any = None  # a tool of this server: what its before() handed on
    result: Any = None  # ...and what its client phase returned, for its after()
    upstream_state: str | None = None  # a tool upstream that asks: the request_state to send back
    asked: dict[str, Any] = field(default_factory=dict)  # ...its questions' keys upstream -> this run's request keys
    replies: dict[str, Any] = field(default_factory=dict)  # ...and the answers given so far, by its keys

    def history(self) -> list[AssistantToolCallMessage | ToolResultMessage]:
        """The call as history, before its result: the tool_use message (none when it answers the model's)."""
        if self.answers:
            return []
        call = ToolCall(id=self.id, function=ToolCallFunction(name=self.name, arguments=self.arguments))
        return [AssistantToolCallMessage(content=None, tool_calls=[call])]

    def answered(self, result: ToolResult) -> ToolResultMessage:
        return ToolResultMessage(tool_call_id=self.id, content=result.as_history_text())
