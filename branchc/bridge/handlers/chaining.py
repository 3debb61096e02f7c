"""Tool chaining for handlers: typed wrappers of the server's tools, generated from their input schemas.

A handler calls another tool of the same server as `tools.NAME(arg=value, ...)`. The wrappers are Python
source rendered with a jinja2 template from each tool's JSON input schema: keyword-only parameters with type
hints, defaults and the schema's descriptions, so the calling model reads them (they are shown in the
`result_handler` parameter's description) and an engine that runs full Python can execute them. Every call
goes to the parent (`_call(name, arguments)`), which validates the arguments against the tool's schema and
runs the tool (`ChainedCalls`); a handler's calls are bounded, and a chained call cannot carry a handler of
its own.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Awaitable, Callable
from typing import Any

import jinja2
import jsonschema

from .engine import HandlerError

__all__ = ["ChainedCalls", "python_name", "render_wrappers"]

_TEMPLATE = jinja2.Environment(
    autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined
).from_string(
    """class tools:
    \"\"\"The other tools of this server: each call runs the tool and returns its result as JSON data.\"\"\"
{% for tool in tools %}

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
{% endfor %}
"""
)

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
    return " ".join(str(text or "").split()).replace('"""', "'''")


def render_wrappers(tools: dict[str, dict[str, Any]], descriptions: dict[str, str] | None = None) -> str:
    """Python source of the `tools` namespace for `tools` (name -> JSON input schema); `_call`, `_given`,
    `_UNSET` and `Any` are the engine's to provide."""
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
                "python": python_name(name),
                "signature": f"*, {signature}" if signature else "",
                "arguments": ", ".join(f"{json.dumps(key)}: {py}" for key, py, _, _ in params),
                "doc": doc,
                "params_doc": params_doc,
            }
        )
    return _TEMPLATE.render(tools=listed)


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
            raise HandlerError(f"tools.{python_name(name)}: this server has no tool {name!r} (it has: {known})")
        if not isinstance(arguments, dict):
            raise HandlerError(f"tools.{python_name(name)}: arguments are keyword arguments (an object)")
        if "result_handler" in arguments:
            raise HandlerError(f"tools.{python_name(name)}: a chained call cannot have a result_handler of its own")
        self.made += 1
        if self.made > self.limit:
            raise HandlerError(f"a handler may call at most {self.limit} tools; this is call {self.made}")
        validator = jsonschema.Draft202012Validator(self.tools[name])
        if problems := sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path)):
            lines = "; ".join(
                f"{'.'.join(map(str, problem.absolute_path)) or 'arguments'}: {problem.message}" for problem in problems
            )
            raise HandlerError(f"tools.{python_name(name)}: the arguments do not fit the tool's schema: {lines}")
        return await self.run(name, arguments)
