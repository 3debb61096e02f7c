"""Elicitation forms: a pydantic model as the flat JSON Schema MCP's `elicitation/create` allows.

MCP forms hold top-level fields only, each a string (optionally date, date-time, email or
uri), a number, an integer, a boolean, a string enum, or a list of string enum values.
A model that needs more (a nested model, a list of free text, a dict) cannot be asked for,
and `form_schema` says which field and why. Constraints MCP cannot state (a pattern, an
exclusive bound) are left out of the form; the answer is still validated against the whole
model, so they still hold.

Every enum form of MCP (SEP-1330) comes from a pydantic field, and defaults (SEP-1034) go along:

| field | form |
|---|---|
| `Literal["a", "b"]`, a str `Enum` | `{"type": "string", "enum": [...]}` |
| the same, `Annotated[..., Titled(a="A")]` | `{"type": "string", "oneOf": [{"const", "title"}, ...]}` |
| the same, `Field(json_schema_extra={"enumNames": [...]})` | legacy `enum` with `enumNames` (deprecated) |
| `list[Literal[...]]`, `Field(min_length=, max_length=)` | `{"type": "array", "items": {"enum": [...], ...}}` |
| the same, `Annotated[..., Titled(...)]` | `{"type": "array", "items": {"anyOf": [{"const", "title"}, ...]}}` |
| `list[Annotated[Literal[...], Titled(...)]]` | the same |

The answer is validated against the model, so only offered values (and min/max items) pass.

`elicited_models` finds, in a tool's module, the models its code passes as `schema=` to an
elicit call, so the bridge can check them when it loads the tool, not when a user is waiting.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
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
    if kind == "array":
        items = _resolve(prop.get("items", {}), defs)
        # titled items: `anyOf` (Titled on the list) or `oneOf` (list[Annotated[..., Titled(...)]], on each item)
        titled_key = "oneOf" if "oneOf" in items and "anyOf" not in items else "anyOf"
        values, titled = _choices(items, titled_key, lambda why: refuse(f"a list whose items are not {why}"))
        choice = {"anyOf": titled} if titled else {"type": "string", "enum": values}
        out = {"type": "array", "items": choice}
        out.update({k: prop[k] for k in ("title", "description", "default", "minItems", "maxItems") if k in prop})
        if "default" in out and not (isinstance(out["default"], list) and set(out["default"]) <= set(values)):
            raise refuse(f"the default {out['default']!r} is not a list of the values {values!r}")
        return out
    if any(key in prop for key in ("enum", "const", "oneOf")):
        values, titled = _choices(prop, "oneOf", lambda why: refuse(f"a choice whose options are not {why}"))
        out = {"type": "string", **({"oneOf": titled} if titled else {"enum": values})}
        if "enumNames" in prop and not titled:  # the legacy titled enum (deprecated in MCP, still allowed)
            names = prop["enumNames"]
            if not (isinstance(names, list) and len(names) == len(values) and all(isinstance(n, str) for n in names)):
                raise refuse(f"enumNames {names!r} is not one str title per enum value {values!r}")
            out["enumNames"] = list(names)
        out.update({k: prop[k] for k in ("title", "description", "default") if k in prop})
        if "default" in out and out["default"] not in values:
            raise refuse(f"the default {out['default']!r} is not one of the values {values!r}")
        return out
    if kind not in _KEEP:
        raise refuse(f"a field of JSON type {kind or 'object'!r}")
    out = {"type": kind, **{k: prop[k] for k in _KEEP[kind] if k in prop}}
    if kind == "string" and prop.get("format") in _FORMATS:
        out["format"] = prop["format"]
    return out


def _choices(
    schema: dict[str, Any], titled_key: str, refuse: Callable[[str], ElicitSchemaError]
) -> tuple[list[str], list[dict[str, str]] | None]:
    """(the str values, the titled options or None) of an enum (`enum`, a single `const`, or options
    under `titled_key`, each a `const` with a `title`: what `Titled` makes)."""
    if titled_key in schema:
        options = schema[titled_key]
        if not (
            isinstance(options, list)
            and options
            and all(isinstance(o, dict) and isinstance(o.get("const"), str) for o in options)
        ):
            raise refuse(f'str options ({titled_key} of {{"const": ..., "title": ...}})')
        titled = [{"const": o["const"], "title": str(o.get("title", o["const"]))} for o in options]
        return [o["const"] for o in titled], titled
    values = schema["enum"] if "enum" in schema else [schema["const"]] if "const" in schema else None
    if not (isinstance(values, list) and values and all(isinstance(value, str) for value in values)):
        raise refuse("str enum values (a Literal or Enum of str)")
    return list(values), None


def elicited_models(source: str, namespace: dict[str, Any]) -> list[tuple[type[BaseModel], int, int]]:
    """(model, line, column) of each `<x>.elicit(..., schema=Name)` in `source` whose Name is a pydantic
    model in `namespace` (the module's globals); a computed schema is checked when it is asked."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[tuple[type[BaseModel], int, int]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "elicit"):
            continue
        for keyword in node.keywords:
            if keyword.arg == "schema" and isinstance(keyword.value, ast.Name):
                value = namespace.get(keyword.value.id)
                if isinstance(value, type) and issubclass(value, BaseModel):
                    found.append((value, node.lineno, node.col_offset + 1))
    return sorted(found, key=lambda item: item[1:])
