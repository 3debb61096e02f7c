"""What a generated workflow module calls at run time: templates rendered in a sandboxed Jinja2
environment, conditions evaluated by it (never `eval`), answers shaped and checked.

Nothing here enters a run's saved state: the run keeps only the saved values (JSON data) and the
step id; the environment and the compiled templates are module globals, rebuilt in any process."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema
from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError
from pydantic import BaseModel

from ..continuation.generator import state
from ..runtime.errors import BranchcError
from ..runtime.inputs import InputError, parse_json
from ..runtime.machine import Machine
from ..runtime.tool import Tool
from .bounded import BoundedEnvironment

__all__ = ["ENVIRONMENT", "Position", "Templates", "WorkflowRunError", "workflow_of"]

#: Jinja2's immutable sandbox, each rendering's work bounded (bounded.py: TemplateLimits).
ENVIRONMENT = BoundedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


class WorkflowRunError(BranchcError, RuntimeError):
    """A step failed at run time: the message names the YAML file, the line and column of the template line
    where it failed (else the step's line), and the step."""

    names_its_place = True  # so a tool error shows it as it is, not at a line of the generated module


@lru_cache(maxsize=1024)
def _template(source: str) -> Any:
    return ENVIRONMENT.from_string(source)


@lru_cache(maxsize=1024)
def _expression(source: str) -> Any:
    return ENVIRONMENT.compile_expression(source)


def _template_line(error: BaseException) -> int | None:
    """The template line an error happened on: Jinja2 puts the template's own lines (file `<template>`) in a
    rendering error's traceback; the innermost one."""
    line = getattr(error, "lineno", None) if isinstance(error, TemplateSyntaxError) else None
    frame = error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename == "<template>":
            line = frame.tb_lineno
        frame = frame.tb_next
    return line


_FENCE_TAG = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def unfence(text: str) -> str | None:
    """The body of an answer wrapped in a Markdown code fence (```json ... ```, blank space around it),
    else None. A few scans of the text, never backtracking (an answer is client input), with the results
    of the regex it replaces, `^\\s*```[A-Za-z0-9_-]*\\s*\\n(.*?)\\n\\s*```\\s*$` (DOTALL; cubic on an
    opening fence and many newlines): the body starts after the last newline of the blank space that
    follows the opening fence's info string which still has a newline of the blank space before the closing
    fence after it, and ends at the first such newline."""
    length = len(text)
    start = length - len(text.lstrip())
    body = text.rstrip()
    if not text.startswith("```", start) or not body.endswith("```"):
        return None
    end = start + 3
    while end < length and text[end] in _FENCE_TAG:  # the info string (json, python, ...)
        end += 1
    blank = length - len(text[end:].lstrip())  # the blank space after it ends where the body's text begins
    closing = len(body) - 3
    before = len(body[:closing].rstrip())  # the blank space before the closing fence starts here
    last = text.rfind("\n", before, closing)
    opened = text.rfind("\n", end, min(blank, last)) if last >= 0 else -1
    if opened < 0:
        return None
    return text[opened + 1 : text.find("\n", max(opened + 1, before), closing)]


@dataclass(frozen=True)
class Position:
    """Where a workflow's run waits: the step, and within a foreach step the item (1-based) of how many."""

    step: str
    item: int | None = None
    of: int | None = None


class Templates:
    """A workflow as its generated module holds it: the templates, what each step asks and keeps (`steps`:
    answer_by, save, schema, wrapped, foreach), and the place of each step in its YAML file, for errors."""

    def __init__(
        self,
        source: str,
        lines: dict[str, int],
        texts: dict[str, str],
        steps: dict[str, dict[str, Any]] | None = None,
        *,
        name: str = "",
        description: str = "",
        guidance: str = "",
        places: dict[str, list[list[int]]] | None = None,
    ) -> None:
        self.source = source
        self.lines = lines
        self.texts = texts
        self.steps = steps or {}
        self.name = name
        self.description = description
        self.guidance = guidance
        self.places = places or {}

    def where(self, step: str, text: str | None = None, error: BaseException | None = None) -> str:
        """`file:line: step 'id'`; for an error in the template `text` (`step.instruction`, ...), the
        file's line and column of the template line where it happened, when known (an expression, `step.next.N`:
        where it starts)."""
        place = self.places.get(text or "")
        line = _template_line(error) if error is not None and place and ".next." not in (text or "") else 1
        if place and line is not None and 0 < line <= len(place):
            return f"{self.source}:{place[line - 1][0]}:{place[line - 1][1]}: step {step!r}"
        return f"{self.source}:{self.lines.get(step, 1)}: step {step!r}"

    def render(self, step: str, key: str, values: dict[str, Any]) -> str:
        """The step's template `key` rendered from `values`; past one of the environment's TemplateLimits, a
        WorkflowRunError naming the place and the limit."""
        text = f"{step}.{key}"
        try:
            return _template(self.texts[text]).render(values)
        except TemplateError as error:  # SecurityError (TemplateLimitError) and UndefinedError are TemplateErrors
            where = self.where(step, text, error)
            raise WorkflowRunError(f"{where}: {key}: {type(error).__name__}: {error}") from None
        except RecursionError:  # macros calling themselves without end
            raise WorkflowRunError(f"{self.where(step)}: {key}: the template recursed too deeply") from None

    def test(self, step: str, index: int, values: dict[str, Any]) -> bool:
        """Whether the `if` of the step's `next` entry `index` holds for `values`."""
        text = f"{step}.next.{index}"
        try:
            return bool(_expression(self.texts[text])(**values))
        except TemplateError as error:
            where = self.where(step, text, error)
            raise WorkflowRunError(f"{where}: next[{index}].if: {type(error).__name__}: {error}") from None

    def items(self, step: str, name: str, values: dict[str, Any]) -> list[Any]:
        """The saved list a foreach step runs over."""
        value = values.get(name)
        if not isinstance(value, list):
            raise WorkflowRunError(
                f"{self.where(step)}: foreach needs {name!r} to be a list, and it is {type(value).__name__}; "
                f"give the step that saves it schema: {{type: array}}"
            )
        return value

    def idle(self, step: str, idle: int, items: list[Any]) -> int:
        """How many steps in a row have asked nothing, `step` included: only a foreach over an empty list
        asks nothing. Past twice the number of steps the run has come round to where it was, with nothing
        changed, and would loop for ever: it fails instead."""
        if items:
            return 0
        if idle + 1 > 2 * len(self.steps):
            raise WorkflowRunError(
                f"{self.where(step)}: the steps go round without asking anything (each foreach here runs over "
                f"an empty list), so the workflow would never end; let a `next` condition test the list first"
            )
        return idle + 1

    def answer(self, step: str, text: str) -> Any:
        """A model's answer as saved: its text, or with a schema the JSON value it holds, checked."""
        try:
            return self.parse(step, text)
        except ValueError as error:
            raise WorkflowRunError(f"{self.where(step)}: {error}") from None

    def parse(self, step: str, text: str) -> Any:
        """The answer's value (`answer` without the step's place); ValueError says why it does not fit."""
        schema = self.steps[step]["schema"]
        if schema is None:
            return text
        fenced = unfence(text)
        raw = fenced if fenced is not None else text.strip()
        try:
            value = parse_json(raw, "the answer")  # bounded: depth and size, as every input
        except InputError as error:
            if schema.get("type") != "string":
                detail = str(error).removeprefix("the answer: ")
                wanted = schema.get("type")
                raise ValueError(f"the answer does not read as the {wanted} its schema asks for: {detail}") from None
            value = text
        if schema.get("type") == "string" and not isinstance(value, str):
            value = text  # text that reads as JSON (42, true) is still the text asked for
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as error:
            where = "" if error.json_path == "$" else f" at {error.json_path}"
            raise ValueError(f"the answer does not fit the step's schema{where}: {error.message}") from None
        return value

    def form(self, step: str, content: BaseModel) -> Any:
        """A user's accepted form as saved: its fields, or the one value of a form that wraps a scalar."""
        data = content.model_dump(mode="json")
        return data["answer"] if self.steps[step]["wrapped"] else data

    @staticmethod
    def loop(index: int, length: int) -> dict[str, Any]:
        """What `loop` holds in a foreach step's instruction, as in a Jinja2 for loop."""
        return {
            "index": index + 1,
            "index0": index,
            "length": length,
            "first": index == 0,
            "last": index == length - 1,
        }

    def position(self, machine: Machine) -> Position:
        """The step a suspended run of this workflow waits in, read from its live variables: the generated
        code keeps `step` live across every yield (and `loop_index` and `loop_items` in a foreach), so this holds in
        any process the run moved to."""
        _, _, live = state(machine.branches["0"].generator)
        if live.get("step") not in self.steps:
            raise RuntimeError(f"{machine.tool}: not a run of the workflow {self.name!r} waiting in a step")
        if self.steps[live["step"]]["foreach"] and "loop_index" in live and "loop_items" in live:
            return Position(live["step"], live["loop_index"] + 1, len(live["loop_items"]))
        return Position(live["step"])

    def schema_prompt(self, step: str) -> str:
        """The line appended to a model step's prompt when its answer has a schema."""
        schema = self.steps[step]["schema"]
        return "\n\nAnswer with JSON only, matching this JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)


def workflow_of(tool: Tool) -> Templates | None:
    """The workflow a tool was compiled from (its generated module's `W`), or None for a Python tool."""
    found = getattr(tool.fn, "__globals__", {}).get("W")
    return found if isinstance(found, Templates) else None
