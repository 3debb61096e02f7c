"""Conversation messages, including the tool-call messages ("MCP++") of the seeds.

Plain text turns are `Message`; an elicitation recorded as history is an
`AssistantToolCallMessage` followed by a `ToolResultMessage`. `ExtendedMessage`
accepts any of the three, from models or from plain dicts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

from ..continuation.generator import holds_no_generators

__all__ = [
    "AssistantToolCallMessage",
    "ExtendedMessage",
    "Message",
    "ModelPreferences",
    "SampleResult",
    "ToolCall",
    "ToolCallFunction",
    "ToolResultMessage",
    "ToolSpec",
    "parse_messages",
]


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(_Data):
    """A plain text turn."""

    role: Literal["user", "assistant", "system"]
    content: str


holds_no_generators(Message)  # its fields are str: releasing a run need not walk its history


class ToolCallFunction(_Data):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(_Data):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class AssistantToolCallMessage(_Data):
    """An assistant turn that calls tools (an elicitation, seen as history)."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall]


class ToolResultMessage(_Data):
    """The answer to one tool call."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str


def _message_kind(value: Any) -> str:
    kind = _KINDS.get(type(value))
    if kind is not None:  # a model already: no attribute probing (pydantic's __getattr__ is slow)
        return kind
    get = value.get if isinstance(value, dict) else lambda key, default=None: getattr(value, key, default)
    if get("role") == "tool":
        return "tool_result"
    if get("tool_calls") is not None:
        return "tool_calls"
    return "text"


_KINDS = {Message: "text", AssistantToolCallMessage: "tool_calls", ToolResultMessage: "tool_result"}

ExtendedMessage = Annotated[
    Annotated[Message, Tag("text")]
    | Annotated[AssistantToolCallMessage, Tag("tool_calls")]
    | Annotated[ToolResultMessage, Tag("tool_result")],
    Discriminator(_message_kind),
]

_MESSAGES = TypeAdapter(list[ExtendedMessage])


def parse_messages(messages: Any) -> list[Message | AssistantToolCallMessage | ToolResultMessage]:
    """Validate a list of messages given as models or dicts (raises pydantic.ValidationError)."""
    return _MESSAGES.validate_python(messages)


class ToolSpec(_Data):
    """A tool the model may call while sampling (MCP 2025-11-25 sampling with tools)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelPreferences(_Data):
    hints: list[str] = Field(default_factory=list)
    cost_priority: float | None = Field(None, ge=0, le=1)
    speed_priority: float | None = Field(None, ge=0, le=1)
    intelligence_priority: float | None = Field(None, ge=0, le=1)


class SampleResult(_Data):
    """What a sample effect sends back into the generator."""

    text: str = ""
    model: str | None = None
    stop_reason: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    input_tokens: int | None = Field(None, ge=0)
    output_tokens: int | None = Field(None, ge=0)
