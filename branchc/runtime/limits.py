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
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    max_depth: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    timeout: float | None = Field(None, gt=0)

    def tighten(self, other: Limits | None) -> Limits:
        """The tightest of both, field by field."""
        if other is None:
            return self
        return Limits(
            max_depth=_least(self.max_depth, other.max_depth),
            max_tokens=_least(self.max_tokens, other.max_tokens),
            timeout=_least(self.timeout, other.timeout),
        )


def _least(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def estimate_tokens(text: str) -> int:
    """Tokens of a text when the client reports none: one per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)
