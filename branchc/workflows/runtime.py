"""What a generated workflow module calls at run time: templates rendered in a sandboxed Jinja2
environment, conditions evaluated by it (never `eval`), answers shaped and checked.

Nothing here enters a run's saved state: the run keeps only the saved values (JSON data) and the
step id; the environment and the compiled templates are module globals, rebuilt in any process."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import jsonschema
from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel

from ..runtime.errors import BranchcError

__all__ = ["ENVIRONMENT", "Templates", "WorkflowRunError"]

ENVIRONMENT = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
ENVIRONMENT.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)


class WorkflowRunError(BranchcError, RuntimeError):
    """A step failed at run time: the message names the YAML file, the step's line and the step."""


@lru_cache(maxsize=1024)
def _template(source: str) -> Any:
    return ENVIRONMENT.from_string(source)


@lru_cache(maxsize=1024)
def _expression(source: str) -> Any:
    return ENVIRONMENT.compile_expression(source)


_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


class Templates:
    """A workflow's templates and the place of each step in its YAML file, for error messages."""

    def __init__(self, source: str, lines: dict[str, int], texts: dict[str, str]) -> None:
        self.source = source
        self.lines = lines
        self.texts = texts

    def where(self, step: str) -> str:
        return f"{self.source}:{self.lines.get(step, 1)}: step {step!r}"

    def render(self, step: str, key: str, values: dict[str, Any]) -> str:
        """The step's template `key` rendered from `values`."""
        try:
            return _template(self.texts[f"{step}.{key}"]).render(values)
        except TemplateError as error:  # SecurityError and UndefinedError are TemplateErrors
            raise WorkflowRunError(f"{self.where(step)}: {key}: {type(error).__name__}: {error}") from None

    def test(self, step: str, index: int, values: dict[str, Any]) -> bool:
        """Whether the `if` of the step's `next` entry `index` holds for `values`."""
        try:
            return bool(_expression(self.texts[f"{step}.next.{index}"])(**values))
        except TemplateError as error:
            raise WorkflowRunError(f"{self.where(step)}: next[{index}].if: {type(error).__name__}: {error}") from None

    def items(self, step: str, name: str, values: dict[str, Any]) -> list[Any]:
        """The saved list a foreach step runs over."""
        value = values.get(name)
        if not isinstance(value, list):
            raise WorkflowRunError(
                f"{self.where(step)}: foreach needs {name!r} to be a list, and it is {type(value).__name__}; "
                f"give the step that saves it schema: {{type: array}}"
            )
        return value

    def answer(self, step: str, text: str, schema: dict[str, Any] | None) -> Any:
        """A model's answer as saved: its text, or with a schema the JSON value it holds, checked."""
        if schema is None:
            return text
        fenced = _FENCE.match(text)
        raw = fenced.group(1) if fenced else text.strip()
        try:
            value = json.loads(raw)
        except ValueError:
            if schema.get("type") != "string":
                raise WorkflowRunError(
                    f"{self.where(step)}: the answer is not JSON, and the step's schema asks for "
                    f"{schema.get('type')}: {text[:200]!r}"
                ) from None
            value = text
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as error:
            raise WorkflowRunError(
                f"{self.where(step)}: the answer does not fit the step's schema: {error.message}"
            ) from None
        return value

    @staticmethod
    def form(content: BaseModel, wrapped: bool) -> Any:
        """A user's accepted form as saved: its fields, or the one value of a form that wraps a scalar."""
        data = content.model_dump(mode="json")
        return data["answer"] if wrapped else data

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

    def schema_prompt(self, schema: dict[str, Any]) -> str:
        """The line appended to a model step's prompt when its answer has a schema."""
        return "\n\nAnswer with JSON only, matching this JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)
