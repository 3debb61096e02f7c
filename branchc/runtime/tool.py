"""The authoring API: `tool(...)` with `.before` / `.client` / `.after`, and `@resumable`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .context import is_generator_function
from .errors import OutputError, ParamsError, ToolDefinitionError, format_validation_errors
from .limits import Limits

__all__ = ["CAPABILITIES", "Tool", "resumable", "tool"]

CAPABILITIES = frozenset({"sampling", "elicitation"})
F = TypeVar("F", bound=Callable[..., Any])


def _where(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else "not a function"


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def resumable(fn: F) -> F:
    """Mark a generator function as portable: the splitter compiles it, `ctx.branch` runs it."""
    if not is_generator_function(fn):
        raise ToolDefinitionError(
            f"@resumable applies to generator functions, and {_name(fn)} ({_where(fn)}) has no "
            f"yield; make it yield effects, or drop @resumable"
        )
    fn.__branchc_resumable__ = True  # type: ignore[attr-defined]
    return fn


class _NoParams(BaseModel):
    pass


class Tool:
    """A tool in three phases: before (server) -> client (portable generator) -> after (server)."""

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        params: type[BaseModel] | None = None,
        requires: Iterable[str] = (),
        limits: Limits | None = None,
        output: type[BaseModel] | None = None,
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
        self.name = name
        self.description = description
        self.params: type[BaseModel] = params or _NoParams
        self.output = output
        self.requires = requires
        self.limits = limits or Limits()
        self.before_fn: Callable[..., Any] | None = None
        self.client_fn: Callable[..., Any] | None = None
        self.after_fn: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the params (the MCP inputSchema)."""
        return self.params.model_json_schema()

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
        if not is_generator_function(fn):
            raise ToolDefinitionError(
                f"tool {self.name!r}: client {_name(fn)} ({_where(fn)}) must be a generator "
                f"function: yield effects such as `yield ctx.sample(prompt=...)`"
            )
        fn.__branchc_client__ = True  # type: ignore[attr-defined]  (the splitter compiles it)
        self.client_fn = self._phase("client", fn)
        return fn

    def after(self, fn: F) -> F:
        """Server side, after the client phase: `after(handoff, client_result) -> result` (sync or async)."""
        self.after_fn = self._phase("after", fn)
        return fn

    def _phase(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ToolDefinitionError(f"tool {self.name!r}: {phase} must be a function, not {fn!r}")
        if phase != "client" and (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)):
            raise ToolDefinitionError(
                f"tool {self.name!r}: {phase} {_name(fn)} ({_where(fn)}) is a generator; "
                f"{phase} runs on the server and returns its value: use return, not yield"
            )
        if getattr(self, f"{phase}_fn") is not None:
            raise ToolDefinitionError(f"tool {self.name!r} already has a {phase} phase")
        return fn

    def __branchc_manifest__(self) -> dict[str, Any]:
        """This tool's entry in a build's manifest (branchc.json)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "requires": sorted(self.requires),
            "limits": self.limits.model_dump(exclude_none=True),
            "before": getattr(self.before_fn, "__qualname__", None),
            "client": getattr(self.client_fn, "__qualname__", None),
            "after": getattr(self.after_fn, "__qualname__", None),
        }

    def check_output(self, value: Any) -> Any:
        """The result, checked against `output=` when the tool declares one (OutputError lists each field)."""
        if self.output is not None:
            try:
                self.output.model_validate(value)
            except ValidationError as error:
                raise OutputError(self.name, format_validation_errors(error)) from None
        return value

    def validate_params(self, params: BaseModel | dict[str, Any] | None) -> BaseModel:
        """The params model instance, or ParamsError listing every failing field."""
        if isinstance(params, self.params):
            return params
        try:
            return self.params.model_validate({} if params is None else params)
        except ValidationError as error:
            raise ParamsError(self.name, format_validation_errors(error)) from None


def tool(
    name: str,
    *,
    description: str = "",
    params: type[BaseModel] | None = None,
    requires: Iterable[str] = (),
    limits: Limits | None = None,
    output: type[BaseModel] | None = None,
) -> Tool:
    """Declare a tool; attach its phases with `@t.before`, `@t.client`, `@t.after`.
    `output=Model` declares the result's shape: the final result is checked against it."""
    return Tool(name, description=description, params=params, requires=requires, limits=limits, output=output)
