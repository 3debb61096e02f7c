"""Branch limits, set at three levels; the tightest wins."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Limits", "estimate_tokens"]


class Limits(BaseModel):
    """Bounds for the client phase and its branches.

    - `max_depth`: deepest branch nesting allowed (the client phase is depth 0).
    - `max_tokens`: token budget of a branch and everything below it.
    - `timeout`: seconds a branch (or the whole client phase) may run.
    - `max_tool_calls`: tool calls (`ctx.call_tool`) a run may make, its tools' own runs included.
    - `max_tool_depth`: how deep tools may call tools (a tool calling itself through another stops there).
    - `tool_timeout`: seconds one tool call may take.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    max_depth: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    timeout: float | None = Field(None, gt=0)
    max_tool_calls: int | None = Field(None, ge=0)
    max_tool_depth: int | None = Field(None, ge=0)
    tool_timeout: float | None = Field(None, gt=0)

    def tighten(self, other: Limits | None) -> Limits:
        """The tightest of both, field by field."""
        if other is None:
            return self
        return Limits(**{name: _least(getattr(self, name), getattr(other, name)) for name in Limits.model_fields})


def _least(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def estimate_tokens(text: str) -> int:
    """Tokens of a text when the client reports none: one per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)
