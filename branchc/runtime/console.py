"""ConsoleClient: a person at the terminal answers each sample and elicitation.

Elicitations become a form built from the requested JSON Schema; every field is
converted and validated as it is typed, and asked again until it is valid.

The schema is the one the runtime hands over: the pydantic model's JSON Schema (`$defs` and
`$ref`, `anyOf` with null for `X | None`, `default: null`). The bridge turns that into MCP's flat
form (`branchc.bridge.elicitation.form_schema`); the runtime must not import the bridge, so this
module reads both shapes itself. A choice is any of MCP's enum forms (SEP-1330): `enum` (with
legacy `enumNames` titles), a `const`, or `oneOf` of `{"const", "title"}` for one value, and an
array whose `items` are any of those (or `anyOf` of `{"const", "title"}`) for several. Choices are
listed numbered, with their titles, and taken by number or by value (or, when it is unambiguous,
by title, case-insensitively); several are comma-separated, within `minItems` / `maxItems`, and
`-` is none of them. An empty answer takes the field's default (SEP-1034), or leaves an optional
field out; a bad entry is asked again, saying what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
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
_NONE = "-"  # for a list of choices: none of them, over a default that is not empty


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
            value = self._field(name, prop, schema, name in required, what)
            if value is not _SKIP:
                content[name] = value
        return {"action": "accept", "content": content}

    def _field(self, name: str, prop: dict[str, Any], root: dict[str, Any], required: bool, what: str) -> Any:
        field = _read_field(prop, root)
        if field.description:
            self.console.print(f"  [dim]{escape(field.description)}[/]")
        for number, option in enumerate(field.options or (), 1):
            shown = escape(option.title)
            if option.title != option.text:
                shown += f" [dim]({escape(option.text)})[/]"
            self.console.print(f"    [cyan]{number}.[/] {shown}")
        hints = list(field.hints)
        if field.default is not _SKIP:
            hints.append(f"default {field.show(field.default)}")
        elif not required:
            hints.append("optional")
        title = str(prop.get("title") or name.replace("_", " ").title())  # as pydantic titles a field
        label = f"  {escape(title)} [dim]({escape(', '.join(hints))})[/] >"
        while True:
            raw = self._ask(label, what)
            if raw == "" and (field.default is not _SKIP or not required):
                return field.default
            try:
                return field.parse(raw)
            except ValueError as error:
                self.console.print(f"[red]  {escape(str(error))}; try again[/]")


_SKIP = object()


@dataclass(frozen=True)
class _Option:
    value: Any
    title: str

    @property
    def text(self) -> str:
        """The value as it is typed."""
        return _text(self.value)


@dataclass(frozen=True)
class _Field:
    description: str | None
    hints: list[str]
    default: Any  # _SKIP: none
    parse: Callable[[str], Any]  # raises ValueError with what is wrong
    show: Callable[[Any], str]  # a value as the hints show it
    options: list[_Option] | None = None


def _read_field(prop: dict[str, Any], root: dict[str, Any]) -> _Field:
    """How to ask for one property of the requested schema."""
    prop = _resolve(prop, root)
    default = prop.get("default", _SKIP)
    if default is None:  # `X | None = None`: leaving the field out gives None
        default = _SKIP
    description = prop.get("description")
    kind = prop.get("type", "array" if "items" in prop else "string")
    if kind == "array":
        items = _resolve(prop.get("items", {}), root)
        options = _options(items, root, const_titled=True)
        if options is not None:
            low, high = prop.get("minItems", 0), prop.get("maxItems")
            hints = [f"{_span(options, 'any of ')} or values, comma-separated"]
            if (count := _count(low, high)) is not None:
                hints.append(count)
            if low == 0 and isinstance(default, list) and default and not any(o.text == _NONE for o in options):
                hints.append(f"{_NONE} for none")

            def parse_many(raw: str) -> list[Any]:
                return _pick_many(raw, options, low, high)

            return _Field(description, hints, default, parse_many, lambda v: _show_many(v, options), options)
        item_kind = items.get("type", "string")
        checked = {**prop, **_defs(root)}

        def parse_list(raw: str) -> list[Any]:
            value = [_convert(part, item_kind) for part in _split(raw)]
            _validate(value, checked)
            return value

        return _Field(description, [f"{item_kind}s, comma-separated"], default, parse_list, repr)
    options = _options(prop, root, const_titled=False)
    if options is not None:
        hints = [f"{_span(options, 'one of ')} or a value"]
        return _Field(
            description, hints, default, lambda raw: _pick(raw, options), lambda v: _show(v, options), options
        )
    hints = [str(kind)]
    for key, sign in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤")):
        if key in prop:
            hints.append(f"{sign} {prop[key]}")
    checked = {**prop, **_defs(root)}

    def parse_one(raw: str) -> Any:
        value = _convert(raw, kind)
        _validate(value, checked)
        return value

    show_one: Callable[[Any], str] = (lambda v: "yes" if v else "no") if kind == "boolean" else repr
    return _Field(description, hints, default, parse_one, show_one)


def _resolve(prop: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Inline a local `$ref` and pick the non-null arm of `Optional[...]`."""
    if "$ref" in prop:
        target: Any = root
        for part in prop["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        prop = {**_resolve(target, root), **{k: v for k, v in prop.items() if k != "$ref"}}
    if "anyOf" in prop:
        arms = [arm for arm in prop["anyOf"] if arm.get("type") != "null"]
        if len(arms) == 1:
            prop = {**_resolve(arms[0], root), **{k: v for k, v in prop.items() if k != "anyOf"}}
    return prop


def _options(schema: dict[str, Any], root: dict[str, Any], const_titled: bool) -> list[_Option] | None:
    """The choices a schema offers, or None: `enum` (titled by `enumNames`), `const`, or `oneOf` /
    `anyOf` whose every arm is a `const` (titled by its `title`). A lone `const` is one option, titled
    by its `title` if `const_titled` (a list's items: a single `anyOf` option), else by its value (a
    field: the title is the field's)."""
    if "enum" in schema:
        values = list(schema["enum"])
        names = schema.get("enumNames")
        if not (isinstance(names, list) and len(names) == len(values) and all(isinstance(n, str) for n in names)):
            names = [_text(value) for value in values]
        return [_Option(value, name) for value, name in zip(values, names, strict=True)] or None
    if "const" in schema:
        title = schema.get("title") if const_titled else None
        return [_Option(schema["const"], str(title or _text(schema["const"])))]
    for key in ("oneOf", "anyOf"):
        arms = [_resolve(arm, root) for arm in schema.get(key, ()) if arm.get("type") != "null"]
        if arms and all("const" in arm for arm in arms):
            return [_Option(arm["const"], str(arm.get("title") or _text(arm["const"]))) for arm in arms]
    return None


def _pick(raw: str, options: list[_Option]) -> Any:
    """The value of the option `raw` names: its value, its number, or (if only one has it) its title."""
    for option in options:
        if option.text == raw:
            return option.value
    if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= len(options):
        return options[int(raw) - 1].value
    folded = raw.casefold()
    named = [o for o in options if folded in (o.title.casefold(), o.text.casefold())]
    if len(named) == 1:
        return named[0].value
    if raw == "":
        raise ValueError(f"an answer is needed: type {_span(options)} or a value")
    raise ValueError(f"{raw!r} is not one of the choices: type {_span(options)} or a value")


def _pick_many(raw: str, options: list[_Option], low: int, high: int | None) -> list[Any]:
    if any(option.text == raw for option in options):  # a value that holds a comma
        parts = [raw]
    elif raw == _NONE:
        parts = []
    else:
        parts = _split(raw)
    chosen: list[Any] = []
    for part in parts:
        value = _pick(part, options)
        if value not in chosen:
            chosen.append(value)
    if len(chosen) < low:
        raise ValueError(f"choose at least {low} (you chose {len(chosen)})")
    if high is not None and len(chosen) > high:
        raise ValueError(f"choose at most {high} (you chose {len(chosen)})")
    return chosen


def _split(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def _count(low: int, high: int | None) -> str | None:
    if high is None:
        return f"choose at least {low}" if low else None
    if low == high:
        return f"choose exactly {low}"
    return f"choose {low} to {high}" if low else f"choose at most {high}"


def _number(value: Any, options: list[_Option]) -> int | None:
    return next((number for number, option in enumerate(options, 1) if option.value == value), None)


def _show(value: Any, options: list[_Option]) -> str:
    number = _number(value, options)
    return repr(value) if number is None else f"{number} ({options[number - 1].title})"


def _show_many(value: Any, options: list[_Option]) -> str:
    if not isinstance(value, list):
        return repr(value)
    if not value:
        return "none"
    numbers = [_number(item, options) for item in value]
    if None in numbers:
        return repr(value)
    return ",".join(map(str, numbers)) + " (" + ", ".join(options[n - 1].title for n in numbers if n) + ")"


def _span(options: list[_Option], prefix: str = "") -> str:
    return "1" if len(options) == 1 else f"{prefix}1-{len(options)}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _defs(root: dict[str, Any]) -> dict[str, Any]:
    """The root's definitions, so a `$ref` left in a field's schema still resolves when it is validated."""
    return {key: root[key] for key in ("$defs", "definitions") if key in root}


def _validate(value: Any, schema: dict[str, Any]) -> None:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        raise ValueError(error.message) from None


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
