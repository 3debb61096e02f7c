"""The workflow language as a pydantic model: what a `workflow:` YAML file may say, nothing more
(extra keys are errors, so a misspelt key is reported where it is, not silently ignored)."""

from __future__ import annotations

import keyword
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints

__all__ = ["RESERVED_PARAMS", "Branch", "Foreach", "Param", "Shape", "Step", "Workflow", "WorkflowFile", "form_class"]

#: the names the generated tool function keeps for itself (compile.py): a param of one of these names would
#: hide it, as would a Python keyword (a param is a parameter of that function)
RESERVED_PARAMS = frozenset(
    {"ctx", "W", "saved", "step", "idle", "loop_items", "loop_answers", "loop_index", "question", "reply", "kept"}
    | set(keyword.kwlist)
)


def form_class(step_id: str) -> str:
    """The name of the generated form model of a user step."""
    return "".join(part.capitalize() for part in step_id.split("_")) + "Form"


Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]
JsonType = Literal["string", "integer", "number", "boolean", "array", "object"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Param(_Strict):
    """One input parameter of the workflow's start tool (a property of its input schema)."""

    type: JsonType = "string"
    description: str = ""
    default: Any = None
    enum: list[str | int | float | bool] | None = None
    items: Shape | None = None  # for type: array


class Shape(_Strict):
    """An answer's shape: a small subset of JSON Schema (type, enum, items, properties, required)."""

    type: JsonType = "string"
    description: str = ""
    title: str | None = None
    default: Any = None
    enum: list[str | int | float | bool] | None = None
    items: Shape | None = None
    properties: dict[Identifier, Shape] | None = None
    required: list[Identifier] | None = None


class Branch(_Strict):
    """One entry of a conditional `next`: go to `goto` when `if` (an expression over saved values) holds;
    an entry without `if` is the default, and comes last."""

    if_: str | None = Field(None, alias="if")
    goto: Identifier


class Foreach(_Strict):
    """Run the step once for each item of a saved list, binding the item to `as`; the answers are saved
    as a list."""

    in_: Identifier = Field(alias="in")
    as_: Identifier = Field("item", alias="as")


class Step(_Strict):
    """One step: an instruction (a Jinja2 template) answered by the model, the user or a sample."""

    id: Identifier
    instruction: str
    answer_by: Literal["model", "user", "sampling"] = "model"
    save: Identifier | None = None
    schema_: Shape | None = Field(None, alias="schema")
    next: Identifier | list[Branch] | None = None
    complete: bool | str = False
    foreach: Foreach | None = None
    system_prompt: str | None = None
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 1024
    # the templates as the file wrote them, by field, where they were translated from the seed's syntax (seed.py)
    _written: dict[str, str] = PrivateAttr(default_factory=dict)

    def written(self, field: str) -> Any:
        """A field as the file wrote it (a template in the seed's syntax, not its translation)."""
        return self._written.get(field, getattr(self, field))


class Workflow(_Strict):
    """A workflow: its params become the tool's input schema; its steps run in order unless `next` says."""

    name: Identifier
    description: str = ""
    guidance: str = ""  # more for the calling model, added to the guidance prompt served for the workflow
    params: dict[Identifier, Param] = Field(default_factory=dict)
    steps: Annotated[list[Step], Field(min_length=1)]


class WorkflowFile(_Strict):
    workflow: Workflow
