"""ConsoleClient: a person at the terminal answers each sample and elicitation.

Elicitations become a form built from the requested JSON Schema; every field is
converted and validated as it is typed, and asked again until it is valid.
"""

from __future__ import annotations

from typing import Any

import anyio
import jsonschema
from rich.console import Console
from rich.markup import escape

from .client import ElicitRequest, SampleRequest
from .errors import InputClosedError
from .messages import SampleResult

__all__ = ["ConsoleClient", "InputClosedError"]

_TRUE = {"y", "yes", "true", "1"}
_FALSE = {"n", "no", "false", "0"}


class ConsoleClient:
    capabilities = frozenset({"sampling", "elicitation"})

    def __init__(self, console: Console) -> None:
        self.console = console
        self._lock = anyio.Lock()  # concurrent branches ask one at a time

    async def sample(self, request: SampleRequest) -> SampleResult:
        async with self._lock:
            return await anyio.to_thread.run_sync(self._sample, request)

    async def elicit(self, request: ElicitRequest) -> dict[str, Any]:
        async with self._lock:
            return await anyio.to_thread.run_sync(self._elicit, request)

    async def log(self, level: str, message: str) -> None:
        return None  # the timeline shows it

    async def notify(self, message: str, progress: float | None, total: float | None) -> None:
        return None

    def _ask(self, label: str, what: str) -> str:
        try:
            return self.console.input(f"[bold]{label}[/] ").strip()
        except EOFError:
            self.console.print()  # end the prompt's line
            raise InputClosedError(f"standard input ended while answering {what}") from None

    def _sample(self, request: SampleRequest) -> SampleResult:
        print_ = self.console.print
        print_("[blue bold]The model is asked[/] (answer as the model):")
        if request.system_prompt:
            print_(f"  [dim]system:[/] {escape(request.system_prompt)}")
        earlier = len(request.messages) - 1
        if earlier:
            print_(f"  [dim]… {earlier} earlier message(s)[/]")
        print_(f"  {escape(request.last_text)}")
        return SampleResult(text=self._ask("model >", "a sample"), model="human")

    def _elicit(self, request: ElicitRequest) -> dict[str, Any]:
        self.console.print(f"[yellow bold]{escape(request.key)}[/]: {escape(request.message)}")
        what = f"elicit {request.key!r}"
        while True:
            action = self._ask("accept, decline or cancel? \\[accept]", what).lower() or "accept"
            if action in ("accept", "decline", "cancel"):
                break
            self.console.print("[red]  type accept, decline or cancel[/]")
        if action != "accept":
            return {"action": action}
        schema = request.requested_schema
        required = set(schema.get("required", ()))
        content: dict[str, Any] = {}
        for name, prop in schema.get("properties", {}).items():
            value = self._field(name, _resolve(prop, schema), name in required, what)
            if value is not _SKIP:
                content[name] = value
        return {"action": "accept", "content": content}

    def _field(self, name: str, prop: dict[str, Any], required: bool, what: str) -> Any:
        kind = prop.get("type", "string")
        hints = [str(kind)]
        if "enum" in prop:
            hints = ["one of " + ", ".join(map(str, prop["enum"]))]
        for key, sign in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤")):
            if key in prop:
                hints.append(f"{sign} {prop[key]}")
        if "default" in prop:
            hints.append(f"default {prop['default']!r}")
        elif not required:
            hints.append("optional")
        label = f"  {prop.get('title', name)} [dim]({', '.join(hints)})[/] >"
        while True:
            raw = self._ask(label, what)
            if raw == "" and not required:
                return prop["default"] if "default" in prop else _SKIP
            try:
                value = _convert(raw, kind)
                jsonschema.validate(value, prop)
            except (ValueError, jsonschema.ValidationError) as error:
                message = error.message if isinstance(error, jsonschema.ValidationError) else str(error)
                self.console.print(f"[red]  {escape(message)}; try again[/]")
                continue
            return value


_SKIP = object()


def _resolve(prop: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Inline a local `$ref` and pick the non-null arm of `Optional[...]`."""
    if "$ref" in prop:
        target: Any = root
        for part in prop["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        prop = {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
    if "anyOf" in prop:
        arms = [arm for arm in prop["anyOf"] if arm.get("type") != "null"]
        if len(arms) == 1:
            prop = {**_resolve(arms[0], root), **{k: v for k, v in prop.items() if k != "anyOf"}}
    return prop


def _convert(raw: str, kind: str) -> Any:
    if kind == "integer":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a whole number") from None
    if kind == "number":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
    if kind == "boolean":
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(f"{raw!r} is not yes or no")
    return raw
