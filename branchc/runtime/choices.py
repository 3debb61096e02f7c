"""Titled choices for elicitation forms: `Annotated[Literal[...], Titled(...)]`.

A `Literal` or `Enum` field is a choice; the user sees its values. `Titled` gives each value a
label the user sees instead, while the value stays what the answer holds and what is validated:

    class Order(BaseModel):
        size: Annotated[Literal["s", "m", "l"], Titled(s="Small", m="Medium", l="Large")] = "m"
        extras: Annotated[
            list[Literal["ham", "olives"]], Titled(ham="Ham", olives="Black olives"), Field(max_length=2)
        ] = []

In the JSON Schema the choice becomes MCP's titled enum (SEP-1330): a single choice
`{"type": "string", "oneOf": [{"const": value, "title": label}, ...]}`, a list of choices
`{"type": "array", "items": {"anyOf": [{"const": value, "title": label}, ...]}}`. Values given
no label are labelled with themselves. Only the schema changes: pydantic still validates the
answer against the `Literal` / `Enum`, so a value that was not offered is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import GetJsonSchemaHandler
from pydantic_core import CoreSchema

from .errors import ToolDefinitionError

__all__ = ["Titled"]


class Titled:
    """Labels for the values of a `Literal` / `Enum` field, or of a list of them: `Titled({"v": "Label"})`
    or `Titled(v="Label")`."""

    def __init__(self, titles: Mapping[str, str] | None = None, /, **more: str) -> None:
        merged = {**(titles or {}), **more}
        for value, title in merged.items():
            if not isinstance(value, str) or not isinstance(title, str):
                raise ToolDefinitionError(f"Titled({value!r}: {title!r}): values and their titles are str")
        if not merged:
            raise ToolDefinitionError("Titled(): give a title for at least one value, like Titled(s='Small')")
        self.titles = merged

    def __repr__(self) -> str:
        return f"Titled({self.titles!r})"

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        schema = handler(core_schema)
        if handler.resolve_ref_schema(schema).get("type") == "array":
            array = {**schema, **handler.resolve_ref_schema(schema)}
            array.pop("$ref", None)
            items = handler.resolve_ref_schema(array.get("items", {}))
            array["items"] = {"anyOf": self._options(items)}
            array["type"] = "array"
            return array
        choice = handler.resolve_ref_schema(schema)
        out = {k: v for k, v in schema.items() if k not in ("$ref", "enum", "const", "type")}
        return {"type": "string", "oneOf": self._options(choice), **out}

    def _options(self, schema: dict[str, Any]) -> list[dict[str, str]]:
        values = schema["enum"] if "enum" in schema else [schema["const"]] if "const" in schema else None
        if values is None or not all(isinstance(value, str) for value in values):
            raise ToolDefinitionError(
                f"{self!r} applies to a Literal or Enum of str values (or a list of one), not to a field "
                f"with the JSON Schema {schema!r}"
            )
        if unknown := sorted(set(self.titles) - set(values)):
            raise ToolDefinitionError(f"{self!r}: {', '.join(map(repr, unknown))} is not one of the values {values!r}")
        return [{"const": value, "title": self.titles.get(value, value)} for value in values]
