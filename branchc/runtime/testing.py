"""MockClient: a scripted client for tests and for `branchc run --responses`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .client import ElicitRequest, SampleRequest
from .errors import BranchcError

__all__ = ["MockClient", "ScriptExhaustedError", "ToolCallRequest"]

Answer = Any | Callable[[Any], Any]


class ScriptExhaustedError(BranchcError, LookupError):
    """The script has no answer left for a call."""


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call as a client is asked to make it."""

    name: str
    arguments: dict[str, Any]
    server: str | None


class MockClient:
    """Answers samples, elicitations and tool calls from lists, in call order, and records every call.

    An answer may be a callable taking the request, for answers that depend on it. A tool call's answer
    (`tool_responses`) is a ToolResult, a dict of one or a str (its text); its request is the
    `ToolCallRequest(name, arguments, server)` recorded in `tool_calls`. Tool calls reach the client only
    for tools the run does not have itself (`run_tool(..., tools=)`): upstream ones, or all when none are given.
    """

    def __init__(
        self,
        sample_responses: Iterable[Answer] = (),
        elicit_responses: Iterable[Answer] = (),
        *,
        tool_responses: Iterable[Answer] = (),
        capabilities: Iterable[str] = ("sampling", "elicitation"),
    ) -> None:
        self.sample_responses = list(sample_responses)
        self.elicit_responses = list(elicit_responses)
        self.tool_responses = list(tool_responses)
        self.capabilities = frozenset(capabilities)
        self.sample_calls: list[SampleRequest] = []
        self.elicit_calls: list[ElicitRequest] = []
        self.tool_calls: list[ToolCallRequest] = []
        self.log_calls: list[tuple[str, str]] = []
        self.notify_calls: list[tuple[str, float | None, float | None]] = []

    async def sample(self, request: SampleRequest) -> Any:
        self.sample_calls.append(request)
        return self._answer("sample", self.sample_responses, len(self.sample_calls), request, request.last_text)

    async def elicit(self, request: ElicitRequest) -> Any:
        self.elicit_calls.append(request)
        return self._answer(
            f"elicit {request.key!r}", self.elicit_responses, len(self.elicit_calls), request, request.message
        )

    async def call_tool(self, name: str, arguments: dict[str, Any], server: str | None) -> Any:
        request = ToolCallRequest(name, arguments, server)
        self.tool_calls.append(request)
        shown = name if server is None else f"{server}:{name}"
        return self._answer(f"call_tool {shown!r}", self.tool_responses, len(self.tool_calls), request, shown)

    async def log(self, level: str, message: str) -> None:
        self.log_calls.append((level, message))

    async def notify(self, message: str, progress: float | None, total: float | None) -> None:
        self.notify_calls.append((message, progress, total))

    @staticmethod
    def _answer(what: str, script: list[Answer], number: int, request: Any, text: str) -> Any:
        if number > len(script):
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise ScriptExhaustedError(
                f"MockClient: {what} call #{number} ({shown!r}) found the script empty; "
                f"it has {len(script)} answer(s) for {what.split()[0]} calls: add one more"
            )
        answer = script[number - 1]
        return answer(request) if callable(answer) else answer
