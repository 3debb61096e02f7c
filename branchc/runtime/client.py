"""What the runtime needs from whoever answers samples and elicitations.

The MCP bridge implements this over the wire; `branchc.testing.MockClient`
answers from a script; the CLI's console client asks a person.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from .messages import ExtendedMessage, ModelPreferences, ToolSpec

__all__ = ["Client", "ElicitAnswer", "ElicitRequest", "SampleRequest"]


class SampleRequest(BaseModel):
    """One `sampling/createMessage`: the whole message list as sent."""

    model_config = ConfigDict(frozen=True)

    messages: list[ExtendedMessage]
    system_prompt: str | None = None
    max_tokens: int
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    model_preferences: ModelPreferences | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["auto", "required", "none"] | None = None

    @property
    def last_text(self) -> str:
        """The text of the last message (the prompt), '' when it has none."""
        content = getattr(self.messages[-1], "content", None) if self.messages else None
        return content or ""


class ElicitRequest(BaseModel):
    """One `elicitation/create` in form mode."""

    model_config = ConfigDict(frozen=True)

    key: str
    message: str
    requested_schema: dict[str, Any]


class ElicitAnswer(BaseModel):
    """A client's raw answer to an elicitation, before the runtime validates the content."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = Field(None)


@runtime_checkable
class Client(Protocol):
    """Answers the effects that cross to the client side.

    `sample` may return a SampleResult, a dict of its fields, or a str (the text);
    `elicit` an ElicitAnswer or a dict `{"action": ..., "content": {...}}`.
    """

    capabilities: frozenset[str]

    async def sample(self, request: SampleRequest) -> Any: ...

    async def elicit(self, request: ElicitRequest) -> Any: ...

    async def log(self, level: str, message: str) -> None: ...

    async def notify(self, message: str, progress: float | None, total: float | None) -> None: ...
