"""The authoring API: `@tool` on a generator (the short form), `tool(...)` with `.before` / `.client` /
`.after` (the long form), and `@resumable`.

The short form: the generator's parameters are the tool's parameters.

    @tool(requires={"sampling"}, title="Summarize")
    def summarize(ctx: Context, text: str, words: Annotated[int, Field(ge=10)] = 50):
        '''Summarize a text.

        Args:
            text: The text to summarize.
        '''
        answer = yield ctx.sample(prompt=f"Summarize in {words} words: {text}")
        return {"summary": answer.text}

The input schema is built from the signature (types, defaults, `Annotated[..., Field(...)]`, `= Field(...)`)
and each parameter's description from the docstring (`Args:`, NumPy `Parameters`, or `:param x:`); the
description is the docstring's text before those sections. The parameter annotated `Context` (or, without
annotations, named `ctx`) receives the context; every other parameter is passed by keyword.

A short-form tool composes with `@t.before` / `@t.after` by one rule: the client's keyword arguments are
the handoff. Without a `before`, the handoff is the validated params, so the client gets exactly its
arguments. With a `before`, it is what `before(params)` returns: a dict whose keys are the client's
parameters (give `params=Model` when the caller's input differs from them). `after(handoff, result)`
sees that same handoff.

The handoff is JSON (it travels in snapshots and to the client), and each value is validated once. Without
a `before`, the caller's arguments are validated on the server and the handoff is their JSON dump
(`mode="json", round_trip=True`); the client's keyword arguments are rebuilt from it by type alone: the
parameters' own validators and constraints (`AfterValidator`, `Field(ge=...)`, ...) do not run again, and
a pydantic-model parameter comes back through its own JSON round trip. With a `before` (or `params=`), the
handoff is new data, validated against the client's parameters. A parameter that cannot travel as JSON is
refused when the tool is defined: a secret (`SecretStr`, `SecretBytes`, `Secret[...]`: its dump is masked,
and a secret stays on the server, in `before`/`after`) or a field excluded from dumps (`exclude=True`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..continuation.points import Migration, add_migration
from .content import split as split_content
from .context import Context, is_generator_function
from .errors import OutputError, ParamsError, ToolDefinitionError, format_validation_errors
from .limits import Limits
from .messages import ToolSpec
from .signature import Signature, function_name, function_place

__all__ = ["CAPABILITIES", "Tool", "resumable", "tool"]

CAPABILITIES = frozenset({"sampling", "elicitation"})
F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=Callable[[dict[str, Any]], dict[str, Any]])


def resumable(fn: F) -> F:
    """Mark a generator function as portable: the splitter compiles it, `ctx.branch` runs it."""
    if not is_generator_function(fn):
        raise ToolDefinitionError(
            f"@resumable applies to generator functions, and {function_name(fn)} ({function_place(fn)}) has no "
            f"yield; make it yield effects, or drop @resumable"
        )
    fn.__branchc_resumable__ = True  # type: ignore[attr-defined]
    return fn


class _NoParams(BaseModel):
    pass


# -- tool metadata: annotations and icons, in their MCP wire form ---------------------------------------

_HINTS = {
    "title": "title",
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}


def _wire(value: Any) -> Any:
    """A pydantic model (mcp.types.ToolAnnotations, Icon) as its MCP JSON; anything else as given."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _annotations(name: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    value = _wire(value)
    if not isinstance(value, Mapping):
        raise ToolDefinitionError(
            f"tool {name!r}: annotations= must be mcp.types.ToolAnnotations or a dict, not {type(value).__name__}"
        )
    out: dict[str, Any] = {}
    for key, hint in value.items():
        wire = _HINTS.get(key, key)
        if wire not in _HINTS.values():
            raise ToolDefinitionError(
                f"tool {name!r}: annotations has an unknown key {key!r}; use {', '.join(_HINTS.values())}"
            )
        if not isinstance(hint, str if wire == "title" else bool):
            raise ToolDefinitionError(
                f"tool {name!r}: annotations[{key!r}] must be a {'str' if wire == 'title' else 'bool'}"
            )
        out[wire] = hint
    return out


def _icons(name: str, value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, (str, Mapping, BaseModel)) or not isinstance(value, Iterable):
        raise ToolDefinitionError(f"tool {name!r}: icons= must be a list of mcp.types.Icon or dicts with a 'src'")
    icons = [_wire(icon) for icon in value]
    for icon in icons:
        if not isinstance(icon, Mapping) or not isinstance(icon.get("src"), str):
            raise ToolDefinitionError(f"tool {name!r}: each icon needs a 'src' (a URL or data: URI), not {icon!r}")
    wire = {"mime_type": "mimeType"}
    return [{wire.get(key, key): part for key, part in icon.items()} for icon in icons]


# -- the short form: a signature as a params model --------------------------------------------------------


class _ShortClient:
    """A short-form tool's client phase, `client(handoff, ctx)`: calls its generator function with the
    handoff as keyword arguments. It reads as that function: name, module, code, compiled metadata."""

    def __init__(self, tool: Tool, fn: Callable[..., Any]) -> None:
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", tool.name)
        self.__qualname__ = getattr(fn, "__qualname__", tool.name)
        self.__module__ = getattr(fn, "__module__", __name__)
        self.__doc__ = fn.__doc__
        self.tool = tool

    def __call__(self, handoff: Any, ctx: Context) -> Any:
        signature = self.tool.signature
        assert signature is not None
        return self.__wrapped__(**{signature.context: ctx}, **self.tool._arguments(handoff))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__branchc_") or name == "__code__":  # compiled or not, as the function is now
            return getattr(self.__wrapped__, name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<client of {self.tool!r}: {self.__qualname__}>"


class Tool:
    """A tool in three phases: before (server) -> client (portable generator) -> after (server).

    Made by `tool(...)`. In the short form (`@tool` on a generator) `fn` is that generator and
    `client_fn` calls it with the handoff as keyword arguments."""

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        params: type[BaseModel] | None = None,
        requires: Iterable[str] = (),
        limits: Limits | None = None,
        output: type[BaseModel] | None = None,
        title: str | None = None,
        annotations: Any = None,
        icons: Iterable[Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or len(name) > 128:
            raise ToolDefinitionError(f"tool name {name!r}: give a non-empty str of at most 128 characters")
        for option, value in (("params", params), ("output", output)):
            if value is not None and not (isinstance(value, type) and issubclass(value, BaseModel)):
                raise ToolDefinitionError(f"tool {name!r}: {option}= must be a pydantic model class, not {value!r}")
        requires = frozenset(requires)
        if unknown := requires - CAPABILITIES:
            raise ToolDefinitionError(
                f"tool {name!r}: requires={sorted(unknown)} is unknown; use a subset of {sorted(CAPABILITIES)}"
            )
        if title is not None and not isinstance(title, str):
            raise ToolDefinitionError(f"tool {name!r}: title= must be a str, not {title!r}")
        self.name = name
        self.description = description
        self.title = title
        self.annotations = _annotations(name, annotations)
        self.icons = _icons(name, icons)
        self.params: type[BaseModel] = params or _NoParams
        self.params_given = params is not None
        self.output = output
        self.requires = requires
        self.limits = limits or Limits()
        self.before_fn: Callable[..., Any] | None = None
        self.client_fn: Callable[..., Any] | None = None
        self.after_fn: Callable[..., Any] | None = None
        self.fn: Callable[..., Any] | None = None  # the short form's generator function
        self.signature: Signature | None = None
        self.migrations: list[dict[str, str]] = []  # what `migrate` registered, as the manifest lists it

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    def __call__(self, fn: F) -> Tool:
        """The short form, `@tool("name", ...)` on a generator: its parameters are the tool's params."""
        if self.client_fn is not None:
            raise ToolDefinitionError(
                f"tool {self.name!r} already has a client phase ({function_name(self.client_fn)}); a tool is not "
                f"called directly: run it with branchc.run_tool(tool, params, client)"
            )
        self._check_generator(fn)
        signature = Signature(self.name, fn)
        self.signature = signature
        if not self.params_given:
            self.params = signature.model
        if not self.description:
            self.description = signature.description
        fn.__branchc_client__ = True  # type: ignore[attr-defined]  (the splitter compiles it)
        self.fn = fn
        self.__wrapped__ = fn  # the module attribute holds the tool: snapshots find the function through it

        self.client_fn = _ShortClient(self, fn)
        return self

    def _arguments(self, handoff: Any) -> dict[str, Any]:
        """The short-form client's keyword arguments: the handoff, checked against its parameters."""
        signature = self.signature
        assert signature is not None
        who = "before() returned" if self.before_fn is not None else "the params give"
        if not isinstance(handoff, dict):
            raise ToolDefinitionError(
                f"tool {self.name!r}: {who} {type(handoff).__name__}, and {function_name(self.fn)} takes keyword "
                f"arguments: return a dict of them from before()"
            )
        if extra := sorted(set(handoff) - signature.names):
            raise ToolDefinitionError(
                f"tool {self.name!r}: {who} {', '.join(map(repr, extra))}, which {function_name(self.fn)} has no "
                f"parameter for; add the parameters, or give params=Model for the tool's input"
            )
        validated = self.before_fn is None and not self.params_given  # the dump of this very signature's model
        try:
            if validated:  # by type alone: the parameters' validators ran once, on the caller's arguments
                model = signature.by_type.model_validate_json(json.dumps(handoff))
            else:
                model = signature.model.model_validate(handoff)
        except ValidationError as error:
            what = "do not come back from their JSON dump as" if validated else "do not fit"
            raise ToolDefinitionError(
                f"tool {self.name!r}: {who} values that {what} {function_name(self.fn)}'s parameters:\n"
                + "\n".join(f"  {line}" for line in format_validation_errors(error))
            ) from None
        return signature.arguments(model)

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the params (the MCP inputSchema)."""
        return self.params.model_json_schema()

    def spec(self) -> ToolSpec:
        """The tool as a sample may offer it to the model (`ctx.sample(..., tools=[lookup.spec()])`), for a branch
        that then runs the model's tool_use through `ctx.call_tool`."""
        return ToolSpec(name=self.name, description=self.description or "", input_schema=self.input_schema)

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the result (the MCP outputSchema), when the tool declares `output=`."""
        return None if self.output is None else self.output.model_json_schema(mode="serialization")

    def before(self, fn: F) -> F:
        """Server side, before the client phase: `before(params) -> handoff` (sync or async)."""
        self.before_fn = self._phase("before", fn)
        return fn

    def client(self, fn: F) -> F:
        """The portable phase: a generator `client(handoff, ctx)` that yields effects."""
        self._check_generator(fn)
        fn.__branchc_client__ = True  # type: ignore[attr-defined]  (the splitter compiles it)
        self.client_fn = self._phase("client", fn)
        return fn

    def after(self, fn: F) -> F:
        """Server side, after the client phase: `after(handoff, client_result) -> result` (sync or async)."""
        self.after_fn = self._phase("after", fn)
        return fn

    def migrate(
        self, point: str, *, to: str | None = None, function: Callable[..., Any] | None = None
    ) -> Callable[[M], M]:
        """Runs saved by another build of this tool and waiting at `point` (of the client phase, or of `function`,
        a @resumable it runs) go on at `to` (the same point by default) in this build, through the decorated
        `migration(variables) -> variables`: the point's variables by name as the old code left them, in; the new
        point's, out (the compiler's own loop iterators and the like are carried by themselves). Used only where
        the point is not compatible as it is (`branchc compat` says which need one), so that a run of a later
        build, compatible as it is, is not migrated again. Declare it after the function: the names are checked
        against its compiled points when the module loads."""
        target = function if function is not None else (self.fn or self.client_fn)
        if target is None:
            raise ToolDefinitionError(f"tool {self.name!r}: declare migrations after the client phase")
        to = point if to is None else to
        for name, value in (("point", point), ("to", to)):
            if not isinstance(value, str) or not value:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: migrate({name}=...) takes a point's name, like 'while/elicit:pick'"
                )
        meta = getattr(target, "__branchc_meta__", None)
        if meta is not None and meta.points and to not in meta.points.values():
            raise ToolDefinitionError(
                f"tool {self.name!r}: migrate(..., to={to!r}): {meta.qualname} has no such point; its points are "
                f"{', '.join(sorted(meta.points.values()))} (`branchc graph` shows them)"
            )

        def register(fn: M) -> M:
            if not callable(fn):
                raise ToolDefinitionError(f"tool {self.name!r}: @migrate({point!r}) decorates a function, not {fn!r}")
            try:
                inspect.signature(fn).bind({})
            except TypeError:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: migration {function_name(fn)} ({function_place(fn)}) must take one "
                    f"argument, the old point's variables by name, and return the new point's"
                ) from None
            except ValueError:
                pass  # no signature to read (a builtin): called as it is
            module, qualname = target.__module__, target.__qualname__
            try:
                add_migration(Migration(module, qualname, point, to, fn))
            except ValueError as error:
                raise ToolDefinitionError(f"tool {self.name!r}: {error}") from None
            self.migrations.append({"function": qualname, "point": point, "to": to, "by": function_name(fn)})
            return fn

        return register

    def _check_generator(self, fn: Callable[..., Any]) -> None:
        if not is_generator_function(fn):
            raise ToolDefinitionError(
                f"tool {self.name!r}: client {function_name(fn)} ({function_place(fn)}) must be a generator "
                f"function: yield effects such as `yield ctx.sample(prompt=...)`"
            )

    def _phase(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ToolDefinitionError(f"tool {self.name!r}: {phase} must be a function, not {fn!r}")
        if phase != "client" and (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)):
            raise ToolDefinitionError(
                f"tool {self.name!r}: {phase} {function_name(fn)} ({function_place(fn)}) is a generator; "
                f"{phase} runs on the server and returns its value: use return, not yield"
            )
        if getattr(self, f"{phase}_fn") is not None:
            raise ToolDefinitionError(f"tool {self.name!r} already has a {phase} phase")
        return fn

    def __branchc_manifest__(self) -> dict[str, Any]:
        """This tool's entry in a build's manifest (branchc.json)."""
        entry = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "requires": sorted(self.requires),
            "limits": self.limits.model_dump(exclude_none=True),
            "before": getattr(self.before_fn, "__qualname__", None),
            "client": getattr(self.client_fn, "__qualname__", None),
            "after": getattr(self.after_fn, "__qualname__", None),
        }
        if self.fn is not None:
            entry["form"] = "short"  # the client takes the handoff as keyword arguments
        if self.migrations:
            entry["migrations"] = self.migrations
        for key in ("title", "annotations", "icons"):
            if getattr(self, key) is not None:
                entry[key] = getattr(self, key)
        return entry

    def as_data(self, value: Any) -> Any:
        """A phase's return value as the data it hands on: an instance of the `output=` model, as its JSON."""
        if self.output is not None and isinstance(value, self.output):
            return value.model_dump(mode="json")
        return value

    def check_output(self, value: Any, returned_at: Callable[[], str | None] | None = None) -> Any:
        """The result, checked against `output=` when the tool declares one (OutputError lists each field, and
        names `returned_at()`, the file:line of the `return` that gave it, asked only then); of a content
        result (`content.result(...)`), its structured content is what is checked."""
        blocks, structured = split_content(value)
        if self.output is not None:
            if blocks is not None and structured is None:
                problem = "a content result needs structured=...: the tool declares output="
                raise OutputError(self.name, [problem], returned_at and returned_at())
            try:
                self.output.model_validate(structured)
            except ValidationError as error:
                raise OutputError(self.name, format_validation_errors(error), returned_at and returned_at()) from None
        return value

    def validate_params(self, params: BaseModel | dict[str, Any] | None) -> BaseModel:
        """The params model instance, or ParamsError listing every failing field."""
        if isinstance(params, self.params):
            return params
        try:
            return self.params.model_validate({} if params is None else params)
        except ValidationError as error:
            raise ParamsError(self.name, format_validation_errors(error)) from None


_UNSET: Any = object()


def tool(
    name: Any = _UNSET,
    *,
    description: str = "",
    params: type[BaseModel] | None = None,
    requires: Iterable[str] = (),
    limits: Limits | None = None,
    output: type[BaseModel] | None = None,
    title: str | None = None,
    annotations: Any = None,
    icons: Iterable[Any] | None = None,
) -> Any:
    """Declare a tool, in one of two forms.

    Short: `@tool` or `@tool(requires=..., title=...)` on a generator function: the tool is named after
    the function, described by its docstring, and its parameters (all but the one annotated `Context`)
    are the tool's params; the client receives them as keyword arguments. `@tool("name", ...)` names it.

    Long: `t = tool("name", params=Model, ...)`, then attach `@t.before`, `@t.client`, `@t.after`.

    `output=Model` declares the result's shape: the final result is checked against it. `title`,
    `annotations` (mcp.types.ToolAnnotations or a dict of its hints) and `icons` (mcp.types.Icon or
    dicts) are listed in tools/list."""
    options = dict(
        description=description,
        params=params,
        requires=requires,
        limits=limits,
        output=output,
        title=title,
        annotations=annotations,
        icons=icons,
    )
    if name is _UNSET:
        return lambda fn: Tool(_function_name(fn), **options)(fn)
    if callable(name) and not isinstance(name, Tool):
        return Tool(_function_name(name), **options)(name)
    return Tool(name, **options)


def _function_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise ToolDefinitionError(f"@tool applies to a generator function, not {fn!r}")
    return name
