"""branchc's sample requests as MCP `sampling/createMessage` parameters, and the answers back.

Messages map one to one where MCP has a match. Where it has none:

- a `system` message is folded into the system prompt (MCP messages are user or assistant),
  each on a line of its own after the sample's own system prompt;
- tool calls and tool results (elicitations recorded as history, or a tool loop) become
  `tool_use` / `tool_result` content when the client declares `sampling.tools`; otherwise
  they are rendered as text, so any client can read the history::

      assistant: [tool call pick_card#elicit_c1_1 {"card": "7"}]
      user:      [tool result elicit_c1_1] {"card": "7"}
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types
from mcp.server.validation import validate_sampling_tools, validate_tool_use_result_messages, wants_sampling_tools
from mcp.shared.message import ServerMessageMetadata

from ..runtime.client import SampleRequest
from ..runtime.errors import ClientAnswerError
from ..runtime.messages import AssistantToolCallMessage, Message, SampleResult, ToolCall, ToolCallFunction

__all__ = ["SamplingToolsError", "create_message", "sample_params", "sample_result"]


class SamplingToolsError(ValueError):
    """A sample that offers the model tools, to a client that cannot take them."""


def sample_params(request: SampleRequest, *, tools_supported: bool) -> dict[str, Any]:
    """Keyword arguments for `ServerSession.create_message` (and the 2026-07-28 request params)."""
    if (request.tools or request.tool_choice) and not tools_supported:
        raise SamplingToolsError(
            "this sample offers the model tools, but the client does not declare sampling.tools; "
            "sample without tools=, or use a client that supports sampling with tools"
        )
    system = [request.system_prompt] if request.system_prompt else []
    messages: list[types.SamplingMessage] = []
    for message in request.messages:
        if isinstance(message, Message):
            if message.role == "system":
                system.append(message.content)
            else:
                messages.append(_text(message.role, message.content))
        elif isinstance(message, AssistantToolCallMessage):
            messages.append(_tool_calls(message, tools_supported))
        else:
            _add_tool_result(messages, message.tool_call_id, message.content, tools_supported)
    params: dict[str, Any] = {"messages": _alternating(messages), "max_tokens": request.max_tokens}
    if system:
        params["system_prompt"] = "\n".join(system)
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.stop_sequences:
        params["stop_sequences"] = list(request.stop_sequences)
    if request.model_preferences is not None:
        preferences = request.model_preferences
        params["model_preferences"] = types.ModelPreferences(
            hints=[types.ModelHint(name=hint) for hint in preferences.hints] or None,
            cost_priority=preferences.cost_priority,
            speed_priority=preferences.speed_priority,
            intelligence_priority=preferences.intelligence_priority,
        )
    if request.tools:
        params["tools"] = [
            types.Tool(name=spec.name, description=spec.description, input_schema=spec.input_schema)
            for spec in request.tools
        ]
    if request.tool_choice:
        params["tool_choice"] = types.ToolChoice(mode=request.tool_choice)
    return params


class _TextForms(dict):
    """The MCP form of each text message met lately, by (role, text): a history is resent whole at every
    sample, in every round, and its form never changes (nothing changes an SDK model once made). Emptied
    when it holds more than MAX_CHARS characters of text, so it costs at most that much memory."""

    MAX_CHARS = 16 * 2**20

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def __missing__(self, key: tuple[str, str]) -> types.SamplingMessage:
        if self.chars > self.MAX_CHARS:
            self.clear()
            self.chars = 0
        role, text = key
        form = self[key] = types.SamplingMessage(role=role, content=types.TextContent(type="text", text=text))
        self.chars += len(text)
        return form


_TEXT_FORMS = _TextForms()


def _text(role: str, text: str) -> types.SamplingMessage:
    return _TEXT_FORMS[role, text]


def _tool_calls(message: AssistantToolCallMessage, tools_supported: bool) -> types.SamplingMessage:
    if not tools_supported:
        calls = " ".join(
            f"[tool call {call.function.name}#{call.id} {json.dumps(call.function.arguments)}]"
            for call in message.tool_calls
        )
        return _text("assistant", f"{message.content}\n{calls}" if message.content else calls)
    blocks: list[Any] = [types.TextContent(type="text", text=message.content)] if message.content else []
    blocks += [
        types.ToolUseContent(type="tool_use", id=call.id, name=call.function.name, input=call.function.arguments)
        for call in message.tool_calls
    ]
    return types.SamplingMessage(role="assistant", content=blocks)


def _add_tool_result(messages: list[types.SamplingMessage], call_id: str, text: str, tools_supported: bool) -> None:
    if not tools_supported:
        messages.append(_text("user", f"[tool result {call_id}] {text}"))
        return
    block = types.ToolResultContent(
        type="tool_result", tool_use_id=call_id, content=[types.TextContent(type="text", text=text)]
    )
    last = messages[-1] if messages else None
    if last is not None and last.role == "user" and all(b.type == "tool_result" for b in last.content_as_list):
        messages[-1] = last.model_copy(update={"content": [*last.content_as_list, block]})  # one turn per call batch
    else:
        messages.append(types.SamplingMessage(role="user", content=[block]))


def _alternating(messages: list[types.SamplingMessage]) -> list[types.SamplingMessage]:
    """Adjacent text messages of one role as one message (their texts a paragraph each), so that roles
    alternate as sampling expects: a tool call rendered as text follows the assistant's reply, a tool
    result rendered as text comes before the next prompt. A message with other content (tool_use,
    tool_result: a tool result turn holds tool results only) is left as it is."""
    out: list[types.SamplingMessage] = []
    for message in messages:
        last = out[-1] if out else None
        if last is not None and last.role == message.role and _all_text(last) and _all_text(message):
            text = "\n\n".join(block.text for block in (*last.content_as_list, *message.content_as_list))
            out[-1] = _text(message.role, text)
        else:
            out.append(message)
    return out


def _all_text(message: types.SamplingMessage) -> bool:
    return all(block.type == "text" for block in message.content_as_list)


async def create_message(session: Any, params: dict[str, Any], related_request_id: Any) -> Any:
    """The handshake era's `sampling/createMessage`, checked and sent as `ServerSession.create_message`
    does, but with the answer taken in its widest form (CreateMessageResultWithTools), so that what it
    holds is judged by `sample_result`, as in the 2026-07-28 era, not by the SDK's parse."""
    validate_sampling_tools(session.client_capabilities, params.get("tools"), params.get("tool_choice"))
    validate_tool_use_result_messages(params["messages"])
    return await session.send_request(
        types.CreateMessageRequest(params=types.CreateMessageRequestParams(**params)),
        types.CreateMessageResultWithTools,
        metadata=ServerMessageMetadata(related_request_id=related_request_id),
    )


def sample_result(
    result: types.CreateMessageResult | types.CreateMessageResultWithTools, request: SampleRequest
) -> SampleResult:
    """The runtime's SampleResult of the client's answer to `request`: the text blocks joined, tool uses
    as tool calls. Both eras' answers come through here, so both refuse alike (ClientAnswerError, raised
    at the sample's yield): a tool use when the sample offered the model no tools."""
    blocks = result.content if isinstance(result.content, list) else [result.content]
    if not wants_sampling_tools(request.tools or None, request.tool_choice or None):
        if used := [block.name for block in blocks if block.type == "tool_use"]:
            raise ClientAnswerError(
                f"the client answered a sample that offered no tools with a tool call ({', '.join(used)}); "
                f"a sample without tools= is answered with text"
            )
    text = "".join(block.text for block in blocks if block.type == "text")
    calls = [
        ToolCall(id=block.id, function=ToolCallFunction(name=block.name, arguments=block.input))
        for block in blocks
        if block.type == "tool_use"
    ]
    return SampleResult(text=text, model=result.model, stop_reason=result.stop_reason, tool_calls=calls)
