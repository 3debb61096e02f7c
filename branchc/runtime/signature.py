"""A short-form tool's parameters, read from its generator's signature and docstring.

The input schema comes from the signature (types, defaults, `Annotated[..., Field(...)]`, `= Field(...)`),
each parameter's description from the docstring (Google `Args:`, NumPy `Parameters`, `:param x:`). Besides
that model, a second one by type alone rebuilds already-validated params from their JSON handoff, so no
validator of the user's runs twice (tool.py says when each is used).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

import annotated_types
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    Secret,
    SecretBytes,
    SecretStr,
    WrapSerializer,
    WrapValidator,
    create_model,
)
from pydantic.fields import FieldInfo

from .context import Context
from .errors import ToolDefinitionError

__all__ = ["Signature", "function_name", "function_place", "parse_docstring"]


def function_place(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else "not a function"


def function_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


_HEADER = (
    "Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|Returns?|Yields?|Raises|"
    "Examples?|Notes?|Attributes|See Also|References|Warnings?|Todo"
)
_GOOGLE_HEADER = re.compile(rf"^({_HEADER}):\s*$")
_NUMPY_HEADER = re.compile(rf"^({_HEADER})\s*$")
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
_PARAM_SECTIONS = {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(?:\s+(.*))?$")
_NUMPY_ENTRY = re.compile(r"^(\w+)\s*(?::.*)?$")
_SPHINX = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A docstring's description (its text before the first section) and its per-parameter descriptions,
    from a Google `Args:` section, a NumPy `Parameters` section or Sphinx `:param name:` fields."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    style: str | None = None  # None (the description), "google", "numpy", "sphinx" or "other" (a section)
    current: str | None = None  # the parameter whose description continues
    indent: int | None = None  # a section's entry indentation
    index = 0
    while index < len(lines):
        line, text = lines[index], lines[index].strip()
        width = len(line) - len(line.lstrip())
        numpy = index + 1 < len(lines) and _UNDERLINE.match(lines[index + 1]) and _NUMPY_HEADER.match(line)
        header = _GOOGLE_HEADER.match(line) or numpy
        if header:
            in_params = header.group(1) in _PARAM_SECTIONS
            style = ("numpy" if numpy else "google") if in_params else "other"
            current, indent = None, None
            index += 2 if numpy else 1
            continue
        sphinx = _SPHINX.match(text)
        if sphinx:
            style, current, indent = "sphinx", sphinx.group(1), width
            params[current] = sphinx.group(2)
        elif style is None:
            summary.append(line)
        elif text and style in ("google", "numpy", "sphinx"):
            if indent is None:
                indent = width
            entry = (_GOOGLE_ENTRY if style == "google" else _NUMPY_ENTRY).match(text)
            if width == indent and entry and style != "sphinx":
                current = entry.group(1)
                params[current] = (entry.group(2) or "") if style == "google" else ""
            elif width > indent and current is not None:
                params[current] = f"{params[current]} {text}".strip()
            elif width < indent or style == "sphinx":
                style, current = "other", None
        index += 1
    return "\n".join(summary).strip(), {name: text.strip() for name, text in params.items() if text.strip()}


def _has_description(annotation: Any, default: Any) -> bool:
    if isinstance(default, FieldInfo) and default.description:
        return True
    return typing.get_origin(annotation) is Annotated and any(
        isinstance(meta, FieldInfo) and meta.description for meta in annotation.__metadata__
    )


def _is_context(annotation: Any) -> bool:
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return isinstance(annotation, type) and issubclass(annotation, Context)


_VALIDATION = (
    FieldInfo,
    AfterValidator,
    BeforeValidator,
    PlainValidator,
    WrapValidator,
    annotated_types.BaseMetadata,  # Ge, MaxLen, Strict, ...
    annotated_types.GroupedMetadata,  # Interval, StringConstraints, ...
)


def _by_type(annotation: Any) -> Any:
    """The annotation without its validators and constraints (in `Annotated`, at any depth), to rebuild
    already-validated values from their JSON. A discriminator stays; so does an `Annotated` that declares
    a serializer (its validators read back what the serializer wrote)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = typing.get_args(annotation)
        if any(isinstance(meta, (PlainSerializer, WrapSerializer)) for meta in metadata):
            return annotation
        kept = [meta for meta in metadata if not isinstance(meta, _VALIDATION)]
        kept += [Field(discriminator=meta.discriminator) for meta in metadata if _discriminator(meta)]
        inner = _by_type(inner)
        return Annotated[(inner, *kept)] if kept else inner  # type: ignore[valid-type]
    args = typing.get_args(annotation)
    if origin is None or origin is typing.Literal or not args:
        return annotation
    bare = tuple(_by_type(arg) for arg in args)
    if bare == args:
        return annotation
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[bare]  # noqa: UP007
    if isinstance(annotation, types.GenericAlias):
        return types.GenericAlias(origin, bare)
    return annotation.copy_with(bare) if hasattr(annotation, "copy_with") else annotation


def _discriminator(meta: Any) -> bool:
    return isinstance(meta, FieldInfo) and meta.discriminator is not None


def _untravelled(annotation: Any, path: str, seen: set[type]) -> str | None:
    """Why a value of this type does not come back from its JSON dump (None: it does); `path` names it."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return None
    kind = origin or annotation
    if isinstance(kind, type) and issubclass(kind, (SecretStr, SecretBytes, Secret)):
        return (
            f"{path} is a secret ({kind.__name__}), and the client phase gets its arguments as JSON, where a "
            f"secret is masked (and travels in snapshots, to the client); keep secrets on the server: give "
            f"params=Model, use the secret in @<tool>.before, and hand the client only what it needs"
        )
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation not in seen:
        seen.add(annotation)
        for name, field in annotation.model_fields.items():
            where = f"{annotation.__name__}.{name}"
            if why := _excluded(where, field) or _untravelled(field.annotation, where, seen):
                return why
    for arg in typing.get_args(annotation):
        if why := _untravelled(arg, path, seen):
            return why
    return None


def _excluded(path: str, field: FieldInfo) -> str | None:
    if field.exclude or getattr(field, "exclude_if", None) is not None:
        return f"{path} is excluded from dumps (exclude=), so its value would not reach the client phase; drop exclude="
    return None


class Signature:
    """A short-form client's parameters: the context parameter, and the others as a pydantic model (and a
    second one, by type alone, that rebuilds the already-validated params from their JSON handoff)."""

    def __init__(self, tool_name: str, fn: Callable[..., Any]) -> None:
        where = f"tool {tool_name!r}: {function_name(fn)} ({function_place(fn)})"
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as error:
            raise ToolDefinitionError(
                f"{where}: its annotations cannot be evaluated ({type(error).__name__}: {error}); "
                f"import what they name at module level"
            ) from None
        parameters = inspect.signature(fn).parameters
        contexts = [name for name in parameters if _is_context(hints.get(name))]
        if not contexts and "ctx" in parameters and "ctx" not in hints:
            contexts = ["ctx"]
        if len(contexts) != 1:
            found = "none" if not contexts else ", ".join(contexts)
            raise ToolDefinitionError(
                f"{where}: give it exactly one parameter annotated Context, which receives the context "
                f"(found {found}); e.g. def {getattr(fn, '__name__', 'client')}(ctx: Context, ...)"
            )
        self.context = contexts[0]
        self.description, documented = parse_docstring(fn.__doc__)
        fields: dict[str, Any] = {}
        typed: dict[str, Any] = {}  # the rebuilding model's fields: required, by type alone
        self.aliases: dict[str, str] = {}  # field name -> parameter name, where they differ
        for name, parameter in parameters.items():
            if name == self.context:
                continue
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
                raise ToolDefinitionError(
                    f"{where}: parameter {parameter} cannot be a tool parameter: a tool's parameters are "
                    f"named ones, passed by keyword; declare each one"
                )
            if name.startswith("_"):
                raise ToolDefinitionError(f"{where}: parameter {name!r}: a tool parameter cannot start with '_'")
            annotation = hints.get(name, Any)
            default = parameter.default
            if name in documented and not _has_description(annotation, default):
                annotation = Annotated[annotation, Field(description=documented[name])]
            if why := _untravelled(annotation, f"parameter {name!r}", set()):
                raise ToolDefinitionError(f"{where}: {why}")
            field = name
            if hasattr(BaseModel, name):  # `copy`, `json`, ...: a field under a name no parameter has
                while field == name or field in parameters or hasattr(BaseModel, field):
                    field = f"field_{field}"
                annotation = Annotated[annotation, Field(alias=name)]
                self.aliases[field] = name
            fields[field] = annotation if default is parameter.empty else (annotation, default)
            typed[field] = _by_type(hints.get(name, Any))
            if _discriminator(default):
                typed[field] = Annotated[typed[field], Field(discriminator=default.discriminator)]
        try:
            self.model: type[BaseModel] = create_model(
                f"{getattr(fn, '__name__', tool_name)}Arguments",
                __config__=ConfigDict(arbitrary_types_allowed=True, populate_by_name=True),
                __module__=getattr(fn, "__module__", __name__),
                **fields,
            )
            self.model.model_json_schema()
            self.by_type: type[BaseModel] = create_model(
                f"{getattr(fn, '__name__', tool_name)}Handoff",
                __config__=ConfigDict(arbitrary_types_allowed=True),
                __module__=getattr(fn, "__module__", __name__),
                **typed,
            )
        except Exception as error:
            raise ToolDefinitionError(
                f"{where}: its parameters do not make an input schema: {type(error).__name__}: {error}"
            ) from None
        for field, info in self.model.model_fields.items():
            if why := _excluded(f"parameter {self.aliases.get(field, field)!r}", info):
                raise ToolDefinitionError(f"{where}: {why}")
        self.names = {self.aliases.get(field, field) for field in self.model.model_fields} | set(
            self.model.model_fields
        )

    def arguments(self, model: BaseModel) -> dict[str, Any]:
        """The validated values by parameter name: one level deep (a nested model stays a model)."""
        return {self.aliases.get(field, field): getattr(model, field) for field in type(model).model_fields}
