"""Server-side sampling: samples answered by a model the server calls itself, through an
OpenAI-compatible chat-completions endpoint (the direction MCP 2026-07-28 recommends, as
sampling through the client is deprecated there).

`--sampling client` sends every sample to the MCP client, `provider` to the endpoint, and
`auto` to the client when it declares sampling and to the endpoint otherwise.

The endpoint's answer is untrusted: it is validated (shape, tool-call arguments as JSON
objects) before it reaches the tool, and an error names what was wrong.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx2
from pydantic import BaseModel, ConfigDict, ValidationError

from ..runtime.client import SampleRequest
from ..runtime.errors import BranchcError, format_validation_errors
from ..runtime.messages import AssistantToolCallMessage, Message, SampleResult, ToolCall, ToolCallFunction

__all__ = ["ChatCompletionsProvider", "ProviderError", "SamplingMode"]

SamplingMode = Literal["client", "provider", "auto"]


class ProviderError(BranchcError, RuntimeError):
    """The model endpoint failed or answered with something that is not a chat completion."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Function(_Loose):
    name: str
    arguments: str


class _ToolCall(_Loose):
    id: str
    function: _Function


class _Message(_Loose):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Loose):
    message: _Message
    finish_reason: str | None = None


class _Usage(_Loose):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Completion(_Loose):
    model: str | None = None
    choices: list[_Choice]
    usage: _Usage | None = None


class ChatCompletionsProvider:
    """POSTs `{url}/chat/completions`; `url` is the API base, such as http://127.0.0.1:8000/v1."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout: float = 120) -> None:
        self.url = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout

    def body(self, request: SampleRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system_prompt:
            messages.append({"role": "system", "content": request.system_prompt})
        for message in request.messages:
            if isinstance(message, Message):
                messages.append({"role": message.role, "content": message.content})
            elif isinstance(message, AssistantToolCallMessage):
                messages.append(
                    {
                        "role": "assistant",
                        "content": message.content,
                        "tool_calls": [
                            {
                                "id": call.id,
                                "type": "function",
                                "function": {
                                    "name": call.function.name,
                                    "arguments": json.dumps(call.function.arguments),
                                },
                            }
                            for call in message.tool_calls
                        ],
                    }
                )
            else:
                messages.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": request.max_tokens}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop_sequences:
            body["stop"] = list(request.stop_sequences)
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
        if request.tool_choice:
            body["tool_choice"] = request.tool_choice
        return body

    async def sample(self, request: SampleRequest) -> SampleResult:
        try:
            async with httpx2.AsyncClient(timeout=self.timeout) as http:
                response = await http.post(self.url, json=self.body(request), headers=self.headers)
        except httpx2.HTTPError as error:
            raise ProviderError(f"the model endpoint {self.url} could not be reached: {error}") from None
        if response.status_code != 200:
            raise ProviderError(f"the model endpoint {self.url} answered {response.status_code}: {response.text[:300]}")
        try:
            completion = _Completion.model_validate_json(response.content)
        except ValidationError as error:
            lines = "\n".join(f"  {line}" for line in format_validation_errors(error))
            raise ProviderError(f"the model endpoint {self.url} answered with no chat completion:\n{lines}") from None
        if not completion.choices:
            raise ProviderError(f"the model endpoint {self.url} answered with no choices")
        choice = completion.choices[0]
        calls = []
        for index, call in enumerate(choice.message.tool_calls or ()):
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                raise ProviderError(f"choices[0].message.tool_calls[{index}].function.arguments: not a JSON object")
            calls.append(ToolCall(id=call.id, function=ToolCallFunction(name=call.function.name, arguments=arguments)))
        usage = completion.usage or _Usage()
        return SampleResult(
            text=choice.message.content or "",
            model=completion.model,
            stop_reason=choice.finish_reason,
            tool_calls=calls,
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
        )
