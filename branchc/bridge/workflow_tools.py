"""Workflows served in the seed's guided shape (bidirectional guided workflows): the calling model is led
through the steps by tool results alone, with no sampling and no elicitation from its client.

For each workflow `NAME`, `start_NAME` (its params as input) starts a run; each result carries the step's
`instruction`, `current_step`, `next_action` (the tool to call and the field to fill) and a `state_id`.
`workflow_submit` answers a step (the answer is saved, or a user's form is passed on); `workflow_continue`
acknowledges a step that keeps no answer. The run is the workflow's compiled machine, held as a guided run
(guided.py): a state id continues it once and expires; with a store it waits there, across restarts.

Each workflow's guidance for the model (the seed's system-prompt integration) is the MCP prompt `NAME`.
The same workflow stays served as the tool `NAME` too, one call whose steps are samples and elicitations,
for clients that can answer them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from ..runtime.errors import ParamsError
from ..runtime.inputs import InputError, parse_json
from ..runtime.machine import Machine
from ..runtime.tool import Tool
from ..workflows.runtime import Templates, workflow_of
from .elicitation import form_schema
from .results import error_result
from .rounds import AnswerError

__all__ = ["CONTINUE_TOOL", "SUBMIT_TOOL", "WorkflowTools", "start_tool_name"]

SUBMIT_TOOL = "workflow_submit"
CONTINUE_TOOL = "workflow_continue"


def start_tool_name(workflow: str) -> str:
    return f"start_{workflow}"


class WorkflowTools:
    """The guided tools and the guidance prompts of the workflows among `tools`."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.workflows: dict[str, Templates] = {
            name: found for name, tool in tools.items() if (found := workflow_of(tool)) is not None
        }
        self.starts = {start_tool_name(name): name for name in self.workflows}
        self.tools = tools

    def __bool__(self) -> bool:
        return bool(self.workflows)

    @property
    def names(self) -> set[str]:
        """The tool names this adds (none without workflows)."""
        return {*self.starts, SUBMIT_TOOL, CONTINUE_TOOL} if self.workflows else set()

    def listed(self) -> list[types.Tool]:
        if not self.workflows:
            return []
        starts = [
            types.Tool(
                name=start,
                title=f"Start {name} (guided)",
                description=(
                    f"{self.workflows[name].description or name}. Starts the workflow {name}, step by step: each "
                    f"result gives the step's instruction and the next_action to call ({SUBMIT_TOOL} or "
                    f"{CONTINUE_TOOL}) with its state_id. Give each step your full attention."
                ),
                input_schema=self.tools[name].input_schema,
            )
            for start, name in self.starts.items()
        ]
        state_id = {"type": "string", "description": "The state_id the last step's result gave."}
        return [
            *starts,
            types.Tool(
                name=SUBMIT_TOOL,
                title="Submit a workflow step's answer",
                description=(
                    "Answer the current step of a guided workflow: pass its state_id and your answer (text, or JSON "
                    'that fits the step\'s answer_schema; for a question to your user, their answer or "decline").'
                ),
                input_schema={
                    "type": "object",
                    "properties": {"state_id": state_id, "answer": {"description": "The step's answer."}},
                    "required": ["state_id", "answer"],
                },
            ),
            types.Tool(
                name=CONTINUE_TOOL,
                title="Continue a guided workflow",
                description=(
                    "Go on to the next step of a guided workflow after a step that keeps no answer: pass its "
                    "state_id, and optionally a short acknowledgment of what you did."
                ),
                input_schema={
                    "type": "object",
                    "properties": {"state_id": state_id, "acknowledgment": {"type": "string"}},
                    "required": ["state_id"],
                },
            ),
        ]

    async def call(self, bridge: Any, ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        """The result of a call of one of these tools (the caller checked `params.name in names`)."""
        if params.name in self.starts:
            tool = self.tools[self.starts[params.name]]
            try:
                model = tool.validate_params(params.arguments)
            except ParamsError as error:
                return error_result(str(ParamsError(params.name, error.errors)))
            return await bridge.guided.start(bridge, ctx, tool, model, _StepGuide(self, SUBMIT_TOOL))
        return await bridge.guided.resume(bridge, ctx, params.arguments, _StepGuide(self, params.name))

    # -- the guidance prompts ----------------------------------------------------------------------------

    def prompts(self) -> list[types.Prompt]:
        return [
            types.Prompt(
                name=name,
                title=f"Guidance for the {name} workflow",
                description=f"How to be guided through {name}: {workflow.description}".rstrip(": "),
                arguments=[
                    types.PromptArgument(
                        name=param,
                        description=f"The start tool's {param!r} (optional here: the model may choose it)",
                        required=False,
                    )
                    for param in self.tools[name].input_schema.get("properties", {})
                ],
            )
            for name, workflow in self.workflows.items()
        ]

    def prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        """The guidance for the workflow `name`: the seed's system prompt, naming this workflow's tools."""
        workflow = self.workflows.get(name)
        if workflow is None:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r}; this server's prompts are: {known}")
        start = start_tool_name(name)
        text = (
            f"You have access to the guided workflow {name}"
            f"{': ' + workflow.description if workflow.description else ''}.\n\n"
            f"For a task it fits, use it:\n"
            f"1. Start with the tool {start}, giving its parameters.\n"
            f"2. Follow the instruction in each result: it is the current step.\n"
            f"3. Always call the result's next_action tool ({SUBMIT_TOOL} with your answer, or {CONTINUE_TOOL}), "
            f"with the state_id it gives; each state_id is good for one call.\n"
            f"4. A step marked ask_user is a question for your user: ask it, and submit what they answer.\n"
            f"5. Give each step your full attention; the workflow saves what you answer and brings it back "
            f"when a later step needs it.\n"
            f"Go on until a result has status complete: its result is the workflow's answer. A result with "
            f"status decline or cancel (your user said no), or a tool error, ends the run: call {start} to begin again."
        )
        if workflow.guidance:
            text += "\n\n" + workflow.guidance.strip()
        if given := {key: _argument(value) for key, value in (arguments or {}).items() if value}:
            text += f"\n\nStart it now: call {start} with {json.dumps(given, ensure_ascii=False)}."
        return types.GetPromptResult(
            description=f"Guidance for the {name} workflow",
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )


def _argument(text: str) -> Any:
    """A prompt argument (MCP gives them as text) as the start call takes it: JSON when it reads as JSON
    (a number, a list), else the text."""
    try:
        return parse_json(text, "a prompt argument")
    except InputError:
        return text


class _StepGuide:
    """A workflow run's wait as the seed's step result; answers read from `answer` or `acknowledgment`."""

    def __init__(self, workflows: WorkflowTools, via: str) -> None:
        self.workflows = workflows
        self.via = via  # the tool this call came through: SUBMIT_TOOL (and the start tools) or CONTINUE_TOOL
        self.answered: tuple[str, str | None] | None = None  # (step, the name its answer was saved as) this call

    def _workflow(self, machine: Machine) -> Templates:
        return self.workflows.workflows[machine.tool]

    def check(self, tool: Tool) -> None:
        if tool.name not in self.workflows.workflows:
            raise AnswerError(
                f"this state_id is a run of the tool {tool.name!r}, not of a workflow; continue it with branchc_resume"
            )

    def waiting(self, machine: Machine, state_id: str) -> dict[str, Any]:
        workflow = self._workflow(machine)
        (request,) = machine.pending  # a workflow asks one thing at a time
        where = workflow.position(machine)
        step = workflow.steps[where.step]
        out: dict[str, Any] = {"workflow": workflow.name, "status": "in_progress", "current_step": where.step}
        if self.answered is not None:  # the seed's acknowledgment of the answer this call gave
            answered, save = self.answered
            out["saved"] = save is not None
            out["previous_thought"] = save or answered
        if where.item is not None:
            out["item"] = {"number": where.item, "of": where.of}
        if request.kind == "elicit":
            out["instruction"] = request.elicit.message
            out["ask_user"] = True
            out["how_to_answer"] = (
                "Ask your user this, and submit what they answer as an object that fits answer_schema; "
                'submit "decline" if they decline and "cancel" if they dismiss it.'
            )
            out["answer_schema"] = form_schema(request.elicit.requested_schema, where.step)
            tool, field, placeholder = SUBMIT_TOOL, "answer", "<your user's answer>"
        else:
            sample = request.sample
            suffix = workflow.schema_prompt(where.step) if step["schema"] is not None else ""
            out["instruction"] = sample.last_text.removesuffix(suffix)
            if sample.system_prompt:
                out["system_prompt"] = sample.system_prompt
            if step["answer_by"] == "sampling":
                out["isolated"] = True
                out["how_to_answer"] = (
                    "Answer this on its own, as a fresh request: draw on nothing of the conversation so far."
                )
            else:
                out["how_to_answer"] = "Work on this step with your full attention, then answer it."
            if step["schema"] is not None:
                out["answer_schema"] = step["schema"]
                out["how_to_answer"] += " Submit JSON that fits answer_schema."
            if step["uses_answer"]:
                tool, field, placeholder = SUBMIT_TOOL, "answer", "<your answer>"
            else:
                tool, field, placeholder = CONTINUE_TOOL, "acknowledgment", "<what you did, briefly>"
        if step["save"] is not None:
            out["saves_as"] = step["save"]
        out["next_action"] = {"tool": tool, "with": field, "arguments": {"state_id": state_id, field: placeholder}}
        out["state_id"] = state_id
        return out

    def answers(self, tool: Tool, machine: Machine, arguments: dict[str, Any]) -> dict[str, Any]:
        workflow = self._workflow(machine)
        (request,) = machine.pending
        where = workflow.position(machine).step
        step = workflow.steps[where]
        self.answered = (where, step["save"] if self.via != CONTINUE_TOOL else None)
        if self.via == CONTINUE_TOOL:
            if request.kind == "elicit" or step["uses_answer"]:
                raise AnswerError(
                    f"step {where!r} needs an answer: call {SUBMIT_TOOL} with this state_id and the answer"
                )
            acknowledgment = arguments.get("acknowledgment", "")
            if not isinstance(acknowledgment, str):
                raise AnswerError("acknowledgment: give a string")
            return {request.key: acknowledgment or "Done."}
        if "answer" not in arguments:
            raise AnswerError(f"answer: step {where!r} needs one; pass it beside state_id")
        answer = arguments["answer"]
        if request.kind == "elicit":
            if step["wrapped"] and not (isinstance(answer, dict) and set(answer) == {"answer"}):
                answer = answer if answer in ("decline", "cancel") else {"answer": answer}
            return {request.key: answer}
        text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        try:  # checked now, before it is fed: a bad answer leaves the run waiting under this state_id
            workflow.parse(where, text)
        except ValueError as error:
            raise AnswerError(f"answer: {error}") from None
        return {request.key: text}
