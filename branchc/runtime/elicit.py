"""The result of an elicitation, and the exchange that records it as history."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .messages import AssistantToolCallMessage, ToolCall, ToolCallFunction, ToolResultMessage

__all__ = ["ElicitExchange", "ElicitResult", "elicit_call_id"]


def elicit_call_id(call_id: str, seq: int) -> str:
    """Tool call id of the `seq`-th elicitation of tool call `call_id`."""
    return f"elicit_{call_id}_{seq}"


class ElicitExchange(BaseModel):
    """An accepted elicitation as a [request, response] message pair.

    `messages` carries empty tool-call arguments, so nothing of `context` leaks
    into a prompt by accident; `with_arguments(fn)` opts in to what `fn` derives.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    tool_call_id: str
    context: Any = None
    content: dict[str, Any]

    @property
    def request(self) -> AssistantToolCallMessage:
        return self._request({})

    @property
    def response(self) -> ToolResultMessage:
        return ToolResultMessage(
            tool_call_id=self.tool_call_id,
            content=json.dumps(self.content, separators=(",", ":"), ensure_ascii=False),
        )

    @property
    def messages(self) -> list[AssistantToolCallMessage | ToolResultMessage]:
        return [self.request, self.response]

    def with_arguments(self, fn: Callable[[Any], dict[str, Any]]) -> list[AssistantToolCallMessage | ToolResultMessage]:
        arguments = fn(self.context)
        if not isinstance(arguments, dict):
            raise TypeError(
                f"with_arguments: the function must return a dict of tool-call arguments, "
                f"not {type(arguments).__name__}"
            )
        return [self._request(arguments), self.response]

    def _request(self, arguments: dict[str, Any]) -> AssistantToolCallMessage:
        call = ToolCall(id=self.tool_call_id, function=ToolCallFunction(name=self.key, arguments=arguments))
        return AssistantToolCallMessage(content=None, tool_calls=[call])


class ElicitResult(BaseModel):
    """accept (with `content` and `exchange`), decline or cancel."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    action: Literal["accept", "decline", "cancel"]
    content: Any = None
    exchange: ElicitExchange | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"
