"""Tool chaining for handlers: typed wrappers of the server's tools, generated from their input schemas.

A handler calls another tool of the same server as `tools.NAME(arg=value, ...)`. The wrappers are Python
source rendered with a jinja2 template from each tool's JSON input schema: keyword-only parameters with type
hints, defaults and the schema's descriptions, so the calling model reads them (they are shown in the
`result_handler` parameter's description) and an engine that runs full Python can execute them. Every call
goes to the parent (`_call(name, arguments)`), which validates the arguments against the tool's schema and
runs the tool (`ChainedCalls`); a handler's calls are bounded, and a chained call cannot carry a handler of
its own. The arguments come from the handler (client input) and the patterns from the tool's schema: jsonschema
would search them with Python's backtracking `re` (`^(a+)+$` takes exponential time there), so `pattern`,
`patternProperties` and `additionalProperties` are checked here with pydantic-core's Rust regex engine, which
runs in linear time (the engine pydantic models use, so a tool's own patterns compile in it).
"""

from __future__ import annotations

import functools
import json
import keyword
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import jinja2
import jsonschema
from jsonschema import ValidationError
from pydantic_core import SchemaError, SchemaValidator, core_schema

from .engine import HandlerError

__all__ = ["ChainedCalls", "python_name", "render_wrappers"]

_TEMPLATES = jinja2.Environment(
    autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined
)
_WRAPPER = """\
@staticmethod
def {{ tool.python }}({{ tool.signature }}) -> Any:
    \"\"\"{{ tool.doc }}
{% if tool.params_doc %}

    Args:
{% for line in tool.params_doc %}
        {{ line }}
{% endfor %}
{% endif %}
    \"\"\"
    return _call({{ tool.name | tojson }}, _given({ {{- tool.arguments -}} }))
"""
_TEMPLATE = _TEMPLATES.from_string(
    """class tools:
    \"\"\"The other tools of this server: each call runs the tool and returns its result as JSON data.\"\"\"
{% for tool in tools %}

{{ wrapper(tool) | indent(4, first=True) }}
{% endfor %}
"""
)
_UPSTREAM = _TEMPLATES.from_string(
    """

class upstream:
    \"\"\"The tools of the upstream MCP servers: `upstream.SERVER.TOOL(...)` runs the tool and returns its result.\"\"\"
{% for server in servers %}

    class {{ server.python }}:
        \"\"\"The tools of the upstream server {{ server.name }}.\"\"\"
{% for tool in server.tools %}

{{ wrapper(tool) | indent(8, first=True) }}
{% endfor %}
{% endfor %}
"""
)
_ONE = _TEMPLATES.from_string(_WRAPPER)
_TEMPLATES.globals["wrapper"] = lambda tool: _ONE.render(tool=tool).rstrip()  # one wrapper, indented where it goes

_HINTS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}


def python_name(name: str) -> str:
    """A Python identifier for a tool or parameter name (`git.diff` -> `git_diff`)."""
    text = re.sub(r"\W", "_", name)
    if not text or text[0].isdigit():
        text = "_" + text
    return text + "_" if keyword.iskeyword(text) else text


def _hint(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, str):
        return _HINTS.get(kind, "Any")
    options = schema.get("anyOf")
    if isinstance(options, list):
        hints = [_hint(option) if isinstance(option, dict) else "Any" for option in options]
        hints = ["None" if option.get("type") == "null" else hint for option, hint in zip(options, hints, strict=False)]
        return " | ".join(dict.fromkeys(hints))
    return "Any"


def _line(text: Any) -> str:
    """Text for a docstring of the wrappers: one line, no backslash escapes, no closing quotes."""
    return " ".join(str(text or "").split()).replace("\\", "\\\\").replace('"""', "'''")


def render_wrappers(tools: dict[str, dict[str, Any]], descriptions: dict[str, str] | None = None) -> str:
    """Python source of the `tools` namespace for `tools` (name -> JSON input schema), and of the `upstream`
    namespace for the tools of upstream servers among them (named `SERVER:TOOL`: `upstream.SERVER.TOOL(...)`);
    `_call`, `_given`, `_UNSET` and `Any` are the engine's to provide."""
    here = {name: schema for name, schema in tools.items() if ":" not in name}
    source = _TEMPLATE.render(tools=_listed(here, descriptions))
    servers: dict[str, dict[str, dict[str, Any]]] = {}
    for name, schema in tools.items():
        if ":" in name:
            servers.setdefault(name.split(":", 1)[0], {})[name] = schema
    if servers:
        source += _UPSTREAM.render(
            servers=[
                {"python": python_name(server), "name": server, "tools": _listed(named, descriptions, strip=True)}
                for server, named in sorted(servers.items())
            ]
        )
    return source


def _listed(
    tools: dict[str, dict[str, Any]], descriptions: dict[str, str] | None, *, strip: bool = False
) -> list[dict[str, Any]]:
    """What the templates need of each tool; `strip`: its Python name leaves out its server (`SERVER:TOOL`)."""
    listed = []
    for name, schema in sorted(tools.items()):
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        params = [
            (key, python_name(key), _hint(prop if isinstance(prop, dict) else {}), key in required)
            for key, prop in properties.items()
        ]
        params.sort(key=lambda param: not param[3])  # keyword-only: the order is for reading, required first
        signature = ", ".join(f"{py}: {hint}" + ("" if needed else " = _UNSET") for _, py, hint, needed in params)
        params_doc = [
            f"{python_name(key)}: {_line(prop.get('description'))}"
            for key, prop in properties.items()
            if isinstance(prop, dict) and prop.get("description")
        ]
        doc = _line((descriptions or {}).get(name) or schema.get("description") or f"The tool {name}.")
        listed.append(
            {
                "name": name,
                "python": python_name(name.split(":", 1)[1] if strip else name),
                "signature": f"*, {signature}" if signature else "",
                "arguments": ", ".join(f"{json.dumps(key)}: {py}" for key, py, _, _ in params),
                "doc": doc,
                "params_doc": params_doc,
            }
        )
    return listed


CallTool = Callable[[str, dict[str, Any]], Awaitable[Any]]


class ChainedCalls:
    """The parent's half of `tools.NAME(...)` for one handler run: at most `limit` calls, each to a listed
    tool, with arguments that fit its input schema and no `result_handler` of their own (no recursion)."""

    def __init__(self, tools: dict[str, dict[str, Any]], run: CallTool, limit: int) -> None:
        self.tools = tools
        self.run = run
        self.limit = limit
        self.made = 0

    async def __call__(self, name: str, arguments: dict[str, Any]) -> Any:
        if name not in self.tools:
            known = ", ".join(sorted(self.tools)) or "none"
            if ":" in name:
                server, tool = name.split(":", 1)
                raise HandlerError(f"upstream.{python_name(server)}.{python_name(tool)}: no such tool (known: {known})")
            raise HandlerError(f"tools.{python_name(name)}: this server has no tool {name!r} (it has: {known})")
        if not isinstance(arguments, dict):
            raise HandlerError(f"tools.{python_name(name)}: arguments are keyword arguments (an object)")
        if "result_handler" in arguments:
            raise HandlerError(f"tools.{python_name(name)}: a chained call cannot have a result_handler of its own")
        self.made += 1
        if self.made > self.limit:
            raise HandlerError(f"a handler may call at most {self.limit} tools; this is call {self.made}")
        schema = self.tools[name]
        if _has_both(schema, "unevaluatedProperties", "patternProperties"):
            raise HandlerError(
                f"tools.{python_name(name)}: the tool's schema joins unevaluatedProperties and patternProperties, "
                "which handlers cannot check (its patterns would not be matched in linear time)"
            )
        try:
            problems = sorted(_Validator(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
        except _Unmatchable as unmatchable:
            raise HandlerError(
                f"tools.{python_name(name)}: the tool's schema has the pattern {unmatchable.pattern!r}, which cannot "
                "be matched in linear time (no look-around or backreferences), so handlers cannot call this tool"
            ) from None
        if problems:
            lines = "; ".join(
                f"{'.'.join(map(str, problem.absolute_path)) or 'arguments'}: {problem.message}" for problem in problems
            )
            raise HandlerError(f"tools.{python_name(name)}: the arguments do not fit the tool's schema: {lines}")
        return await self.run(name, arguments)


class _Unmatchable(Exception):
    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


@functools.lru_cache(maxsize=512)
def _pattern_validator(pattern: str) -> SchemaValidator | None:
    try:
        return SchemaValidator(core_schema.str_schema(pattern=pattern, regex_engine="rust-regex"))
    except SchemaError:
        return None


def _search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (as JSON Schema's `pattern`), in linear time."""
    validator = _pattern_validator(pattern)
    if validator is None:
        raise _Unmatchable(pattern)
    return validator.isinstance_python(text)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


_ADDITIONAL = jsonschema.Draft202012Validator.VALIDATORS["additionalProperties"]


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: dict[str, Any]) -> Any:
    """jsonschema's additionalProperties, its patternProperties matched here (its own uses `re`)."""
    if "patternProperties" not in schema or not validator.is_type(instance, "object"):
        yield from _ADDITIONAL(validator, allowed, instance, schema)
        return
    known = schema.get("properties", {})
    patterns = list(schema["patternProperties"])
    extras = [key for key in instance if key not in known and not any(_search(p, key) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        verb = "does" if len(extras) == 1 else "do"
        joined = ", ".join(repr(extra) for extra in sorted(extras))
        listed = ", ".join(repr(pattern) for pattern in sorted(patterns))
        yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties},
)


def _has_both(schema: Any, first: str, second: str) -> bool:
    """Whether the keys `first` and `second` both occur somewhere in the JSON value `schema`."""
    seen: set[str] = set()
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            seen.update(key for key in (first, second) if key in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return first in seen and second in seen
