"""Guided mode: for a client that can neither sample nor elicit, the calling model answers.

(The seeds' bidirectional guided workflows.) When a tool needs what the client lacks, the
call returns the run's pending requests as its result: what each asks, how to answer, and a
`next_action` naming the `branchc_resume` tool and a `state_id`. The model answers (a sample
as the text it would reply; an elicitation by asking its user and passing the form's content,
or "decline" / "cancel"), calls `branchc_resume`, and the run goes on, as often as it asks.

The run waits on the server meanwhile, as a saved run under an unguessable id that is good
for one continuation and expires; an unknown, used or expired id is a clear tool error.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import mcp.types as types
from mcp.server import ServerRequestContext
from pydantic import BaseModel

from ..runtime.machine import Machine, Request
from ..runtime.messages import Message
from ..runtime.runstate import dump_run, load_run
from ..runtime.tool import Tool
from .elicitation import form_schema
from .results import error_result
from .rounds import AnswerError, check_answered, feed, guarded, released_unless_fed, start_run

__all__ = ["RESUME_TOOL", "GuidedRuns", "resume_tool"]

RESUME_TOOL = "branchc_resume"


def resume_tool() -> types.Tool:
    return types.Tool(
        name=RESUME_TOOL,
        description=(
            "Continue a tool run that is waiting for your answers: pass the state_id it gave you and "
            "an answer for each of its requests, keyed by the request's key."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "state_id": {"type": "string", "description": "The state_id of the waiting run."},
                "answers": {
                    "type": "object",
                    "description": "Request key -> answer: a sample's reply text; a form's content, or \"decline\".",
                },
            },
            "required": ["state_id", "answers"],
        },
    )


class GuidedRuns:
    """Runs waiting for the calling model, by state id; each id continues a run once."""

    def __init__(self, ttl: float = 1800) -> None:
        self.ttl = ttl
        self.waiting: dict[str, tuple[float, str, str]] = {}  # id -> (expires, tool name, saved run)

    def keep(self, tool: str, handoff: Any, machine: Machine) -> str:
        now = time.time()
        for ident in [i for i, (expires, _, _) in self.waiting.items() if expires <= now]:
            del self.waiting[ident]
        ident = secrets.token_urlsafe(18)
        self.waiting[ident] = (now + self.ttl, tool, dump_run(handoff, machine))
        return ident

    def take(self, ident: Any) -> tuple[float, str, str]:
        """(expires, tool name, saved run) of a waiting run, which no longer waits under `ident`."""
        found = self.waiting.pop(ident, None) if isinstance(ident, str) else None
        if found is None or found[0] <= time.time():
            raise AnswerError(
                f"state_id {ident!r} is unknown, already used or expired (runs wait {self.ttl:.0f} s); "
                f"call the tool again to start over"
            )
        return found

    async def start(self, bridge: Any, ctx: ServerRequestContext, tool: Tool, model: BaseModel) -> Any:
        return await guarded(start_run(bridge, ctx, tool, model, check=False), self._ask, bridge, ctx, tool)

    async def resume(self, bridge: Any, ctx: ServerRequestContext, arguments: dict[str, Any] | None) -> Any:
        arguments = arguments or {}
        ident = arguments.get("state_id")
        try:
            expires, name, saved = self.take(ident)
        except AnswerError as error:
            return error_result(str(error))
        tool = bridge.tools[name]

        async def restored() -> tuple[Any, Machine]:
            handoff, machine = load_run(saved)
            try:
                with released_unless_fed(machine):
                    answers = arguments.get("answers")
                    if not isinstance(answers, dict):
                        raise AnswerError("answers: give an object: request key -> answer")
                    check_answered(machine, answers.keys(), "answers")
                    feed(machine, {key: _answer(machine.requests[key], answers[key]) for key in answers})
            except AnswerError as error:
                # nothing was fed: the run still waits under its state id, for answers that fit
                self.waiting[ident] = (expires, name, saved)
                still = f"(the run still waits: call {RESUME_TOOL} again with this state_id)"
                raise AnswerError(f"{error}\n{still}") from None
            return handoff, machine

        return await guarded(restored(), self._ask, bridge, ctx, tool)

    def _ask(self, ctx: ServerRequestContext, handoff: Any, machine: Machine) -> types.CallToolResult:
        """The pending requests as a guide for the calling model; the run is kept under a new state id
        (guarded() then releases this live copy: the run goes on from the kept one)."""
        requests = [_describe(request) for request in machine.pending]
        state_id = self.keep(machine.tool, handoff, machine)
        guide = {
            "status": "waiting_for_answers",
            "tool": machine.tool,
            "instruction": (
                f"The tool {machine.tool} needs answers before it can go on. Answer every request below, then "
                f"call {RESUME_TOOL} with this state_id and your answers keyed by each request's key."
            ),
            "requests": requests,
            "next_action": {
                "tool": RESUME_TOOL,
                "arguments": {"state_id": state_id, "answers": {r["key"]: r["answer_with"] for r in requests}},
            },
            "state_id": state_id,
        }
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(guide, ensure_ascii=False, indent=1))],
            structured_content=guide,
        )


def _describe(request: Request) -> dict[str, Any]:
    if request.kind == "sample":
        sample = request.sample
        return {
            "key": request.key,
            "kind": "sample",
            "instruction": "Reply as the assistant to the conversation below; your answer is the reply's text.",
            "system_prompt": sample.system_prompt,
            "messages": [_plain(m) for m in sample.messages],
            "answer_with": "<your reply, as a string>",
        }
    ask = request.elicit
    return {
        "key": request.key,
        "kind": "elicit",
        "instruction": (
            "Ask your user the question below and answer with what they give, as an object that fits the "
            'schema; answer "decline" if they decline and "cancel" if they dismiss it.'
        ),
        "message": ask.message,
        "schema": form_schema(ask.requested_schema, ask.requested_schema.get("title", ask.key)),
        "answer_with": '<an object matching the schema, or "decline">',
    }


def _plain(message: Any) -> dict[str, Any]:
    if isinstance(message, Message):
        return {"role": message.role, "content": message.content}
    return message.model_dump(mode="json", exclude_none=True)


def _answer(request: Request, answer: Any) -> Any:
    where = f"answers[{request.key!r}]"
    if request.kind == "sample":
        if not isinstance(answer, str):
            raise AnswerError(f"{where}: a sample is answered with the reply's text (a string)")
        return answer
    if answer in ("decline", "cancel"):
        return {"action": answer}
    if not isinstance(answer, dict):
        raise AnswerError(f'{where}: a form is answered with an object matching its schema, or "decline"')
    return {"action": "accept", "content": answer}
