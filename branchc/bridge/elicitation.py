"""Elicitation forms: a pydantic model as the flat JSON Schema MCP's `elicitation/create` allows.

MCP forms hold top-level fields only, each a string (optionally date, date-time, email or
uri), a number, an integer, a boolean, a string enum, or a list of string enum values.
A model that needs more (a nested model, a list of free text, a dict) cannot be asked for,
and `form_schema` says which field and why. Constraints MCP cannot state (a pattern, an
exclusive bound) are left out of the form; the answer is still validated against the whole
model, so they still hold.

`elicited_models` finds, in a tool's module, the models its code passes as `schema=` to an
elicit call, so the bridge can check them when it loads the tool, not when a user is waiting.
"""

from __future__ import annotations

import ast
from typing import Any

from pydantic import BaseModel

from ..runtime.errors import BranchcError

__all__ = ["ElicitSchemaError", "elicited_models", "form_schema"]

_FORMATS = {"date", "date-time", "email", "uri"}
_KEEP = {
    "string": ("title", "description", "default", "minLength", "maxLength"),
    "number": ("title", "description", "default", "minimum", "maximum"),
    "integer": ("title", "description", "default", "minimum", "maximum"),
    "boolean": ("title", "description", "default"),
}
_WHAT = "MCP forms hold flat fields of str, int, float, bool, a str enum, or a list of str enum values"


class ElicitSchemaError(BranchcError, TypeError):
    """A model that an MCP elicitation form cannot express."""


def form_schema(schema: dict[str, Any], where: str) -> dict[str, Any]:
    """The requestedSchema for a model's JSON Schema (`where` names the model in errors);
    ElicitSchemaError names the first field MCP cannot express."""
    defs = schema.get("$defs", {})
    properties = {name: _field(where, name, prop, defs) for name, prop in schema.get("properties", {}).items()}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("required"):
        out["required"] = list(schema["required"])
    return out


def _resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref")
    if ref is None:
        return prop
    return {**defs.get(ref.rsplit("/", 1)[-1], {}), **{k: v for k, v in prop.items() if k != "$ref"}}


def _field(where: str, name: str, prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    def refuse(why: str) -> ElicitSchemaError:
        return ElicitSchemaError(f"{where}.{name}: {why}; {_WHAT}")

    prop = _resolve(prop, defs)
    options = prop.get("anyOf")
    if options is not None:  # `X | None`: the field may be left out
        kept = [_resolve(option, defs) for option in options if option.get("type") != "null"]
        if len(kept) != 1:
            raise refuse("a union of several types")
        prop = {**kept[0], **{k: v for k, v in prop.items() if k != "anyOf"}}
        if prop.get("default", 0) is None:
            del prop["default"]
    kind = prop.get("type")
    if "enum" in prop:
        values = prop["enum"]
        if not all(isinstance(value, str) for value in values):
            raise refuse("an enum whose values are not all strings")
        out = {"type": "string", "enum": list(values)}
        out.update({k: prop[k] for k in ("title", "description", "default") if k in prop})
        return out
    if kind == "array":
        items = _resolve(prop.get("items", {}), defs)
        if "enum" not in items or not all(isinstance(value, str) for value in items["enum"]):
            raise refuse("a list whose items are not str enum values")
        out = {"type": "array", "items": {"type": "string", "enum": list(items["enum"])}}
        out.update({k: prop[k] for k in ("title", "description", "default", "minItems", "maxItems") if k in prop})
        return out
    if kind not in _KEEP:
        raise refuse(f"a field of JSON type {kind or 'object'!r}")
    out = {"type": kind, **{k: prop[k] for k in _KEEP[kind] if k in prop}}
    if kind == "string" and prop.get("format") in _FORMATS:
        out["format"] = prop["format"]
    return out


def elicited_models(source: str, namespace: dict[str, Any]) -> list[tuple[type[BaseModel], int]]:
    """(model, line) for each `<x>.elicit(..., schema=Name)` in `source` whose Name is a pydantic
    model in `namespace` (the module's globals); a computed schema is checked when it is asked."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[tuple[type[BaseModel], int]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "elicit"):
            continue
        for keyword in node.keywords:
            if keyword.arg == "schema" and isinstance(keyword.value, ast.Name):
                value = namespace.get(keyword.value.id)
                if isinstance(value, type) and issubclass(value, BaseModel):
                    found.append((value, node.lineno))
    return found
