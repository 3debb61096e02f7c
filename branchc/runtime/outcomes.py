"""What a worker's step outcome may hold, checked before the machine acts on it (steps.py).

A step that ran elsewhere comes back as data: the branch's generator, and what it yielded, returned
or raised. Its values were decoded by the snapshot rules (the snapshot decoder and its limits, only
what the builds record named); this module checks the rest, where the machine would act on what the
outcome says:

- the generator is the branch's own function, in the state its kind says (waiting after a yield,
  finished after a return or an error);
- an error is an Exception; a yielded value that is no effect is named by a short string;
- an effect is rebuilt through `Context`, with the checks of `ctx.sample`, `ctx.elicit`, `ctx.log`,
  `ctx.notify`, `ctx.branch` and `ctx.all`, from fields of exactly the types those methods make
  (str, int, float, bool, None, the runtime's message models, JSON data, a compiled @resumable
  function for a branch, a pydantic model class for an elicitation), within `EffectBounds`.

Nothing here calls, constructs, hashes or compares anything the outcome names: types are compared
by identity, models are read off their `__dict__`, and the effect the machine performs is one these
checks built. What an effect may name is what compiled code could give: a branch's function (which
the machine calls to make the branch's generator, running none of its body) and an elicitation's
schema (whose JSON schema the machine asks for). A branch's arguments, return value and errors are
values of the snapshot rules: they reach the tool's own code as a resumed snapshot's variables do.
"""

from __future__ import annotations

import dataclasses
import math
import types
from typing import Any

from pydantic import BaseModel, ValidationError

from ..continuation.generator import is_compiled
from ..continuation.registry import meta_of
from .context import Context
from .effects import All, Branch, CallTool, Elicit, Log, Notify, Sample
from .messages import (
    AssistantToolCallMessage,
    Message,
    ModelPreferences,
    ToolCall,
    ToolCallFunction,
    ToolResultMessage,
    ToolSpec,
)

__all__ = ["EffectBounds", "OutcomeRefused", "check_outcome", "rebuild_effect"]


@dataclasses.dataclass(frozen=True, slots=True)
class EffectBounds:
    """How large one effect from a worker may be (its bytes are bounded by the step message's size)."""

    #: Effects in one yielded effect, those in a ctx.all (at any depth) counted.
    max_effects: int = 10_000
    #: How deeply ctx.all nests in ctx.all.
    max_nesting: int = 64
    #: Values in the data of one effect: messages, tool calls, tool specs, an elicitation's context.
    max_values: int = 1_000_000
    #: How deeply that data nests.
    max_depth: int = 200
    #: Characters of the type name a step reports for a yielded value that is no effect.
    max_name: int = 200


BOUNDS = EffectBounds()


class OutcomeRefused(Exception):
    """An outcome that the machine must not act on; the message says what is wrong with it."""


_KINDS = ("yield", "other", "return", "raise")


def check_outcome(
    generator: Any, kind: Any, out: Any, original: Any, ctx: Context, bounds: EffectBounds = BOUNDS
) -> Any:
    """The value the machine acts on for a worker's outcome `(generator, kind, out)` of a step of the
    branch whose generator is `original`: for a yield, the effect rebuilt here; else `out` as it is.
    OutcomeRefused says what is wrong."""
    if type(kind) is not str or kind not in _KINDS:
        raise OutcomeRefused(f"{_show(kind)} is not an outcome of a step")
    if not is_compiled(generator):
        raise OutcomeRefused(f"it sends back {_a(generator)} where the branch's generator belongs")
    if meta_of(generator.gi_code) is not meta_of(original.gi_code):
        raise OutcomeRefused(
            f"it sends back a generator of {meta_of(generator.gi_code).ref}, not of the branch's "
            f"{meta_of(original.gi_code).ref}"
        )
    finished = generator.gi_frame is None
    if finished != (kind in ("return", "raise")):
        now = "finished" if finished else "not finished"
        raise OutcomeRefused(f"its generator is {now}, which a step that ended in {kind!r} cannot leave it")
    if kind == "yield":
        return rebuild_effect(out, ctx, bounds)
    if kind == "other":
        if type(out) is not str or not 0 < len(out) <= bounds.max_name:
            raise OutcomeRefused(f"a value that is no effect is named by a str (1 to {bounds.max_name} characters)")
        return out
    if kind == "raise" and not _inherits(type(out), Exception):
        raise OutcomeRefused(f"its error is {_a(out)}, not an Exception")
    return out


# -- effects ----------------------------------------------------------------------------------------


class _Work:
    __slots__ = ("bounds", "effects", "values")

    def __init__(self, bounds: EffectBounds) -> None:
        self.bounds = bounds
        self.effects = 0
        self.values = 0


def rebuild_effect(effect: Any, ctx: Context, bounds: EffectBounds = BOUNDS) -> Any:
    """`effect` made again by `ctx`'s methods from its fields, once each field is of a type they make;
    OutcomeRefused (naming the field) otherwise."""
    return _effect(effect, ctx, "the effect", 0, _Work(bounds))


_BRANCH_OPTIONS = frozenset(
    {"self", "fn", "inherit_messages", "system_prompt", "max_depth", "max_tokens", "timeout", "tools"}
)


def _effect(effect: Any, ctx: Context, where: str, nesting: int, work: _Work) -> Any:
    work.effects += 1
    if work.effects > work.bounds.max_effects:
        raise OutcomeRefused(
            f"{where}: more than {work.bounds.max_effects:,} effects in one (EffectBounds.max_effects)"
        )
    kind = type(effect)
    try:
        if kind is Log:
            return ctx.log(_text(effect.level, f"{where}.level"), _text(effect.message, f"{where}.message"))
        if kind is Notify:
            return ctx.notify(
                _text(effect.message, f"{where}.message"),
                progress=_number(effect.progress, f"{where}.progress"),
                total=_number(effect.total, f"{where}.total"),
            )
        if kind is Sample:
            return _sample(effect, ctx, where, work)
        if kind is Elicit:
            return ctx.elicit(
                _text(effect.key, f"{where}.key"),
                message=_text(effect.message, f"{where}.message"),
                schema=_schema(effect.schema, f"{where}.schema"),
                context=_context(effect.context, f"{where}.context", work),
            )
        if kind is Branch:
            return _branch(effect, ctx, where)
        if kind is CallTool:
            return ctx.call_tool(
                _text(effect.name, f"{where}.name"),
                _data(_exactly(effect.arguments, dict, f"{where}.arguments"), f"{where}.arguments", work, 0),
                server=_optional(effect.server, str, f"{where}.server"),
                tool_call_id=_optional(effect.tool_call_id, str, f"{where}.tool_call_id"),
            )
        if kind is All:
            if nesting >= work.bounds.max_nesting:
                raise OutcomeRefused(
                    f"{where}: ctx.all nested more than {work.bounds.max_nesting} deep (EffectBounds.max_nesting)"
                )
            items = _exactly(effect.effects, tuple, f"{where}.effects")
            return ctx.all(
                [_effect(item, ctx, f"{where}.effects[{i}]", nesting + 1, work) for i, item in enumerate(items)]
            )
    except AttributeError:  # a slot the data left empty
        raise OutcomeRefused(f"{where}: a {kind.__name__} without all of its fields") from None
    except (TypeError, ValueError) as error:  # what ctx's own checks say
        raise OutcomeRefused(f"{where}: {error}") from None
    raise OutcomeRefused(f"{where} is {_a(effect)}, not an effect")


def _sample(effect: Sample, ctx: Context, where: str, work: _Work) -> Sample:
    messages = _optional(effect.messages, tuple, f"{where}.messages")
    stop = _optional(effect.stop_sequences, tuple, f"{where}.stop_sequences")
    tools = _optional(effect.tools, tuple, f"{where}.tools")
    preferences = effect.model_preferences
    return ctx.sample(
        _optional(effect.prompt, str, f"{where}.prompt"),
        messages=None
        if messages is None
        else [_model(m, _MESSAGES, f"{where}.messages[{i}]", work, 0) for i, m in enumerate(messages)],
        system_prompt=_optional(effect.system_prompt, str, f"{where}.system_prompt"),
        max_tokens=_exactly(effect.max_tokens, int, f"{where}.max_tokens"),
        temperature=_number(effect.temperature, f"{where}.temperature"),
        stop_sequences=None if stop is None else [_text(s, f"{where}.stop_sequences[{i}]") for i, s in enumerate(stop)],
        model_preferences=None
        if preferences is None
        else _model(preferences, _PREFERENCES, f"{where}.model_preferences", work, 0),
        tools=None
        if tools is None
        else [_model(t, _TOOLS, f"{where}.tools[{i}]", work, 0) for i, t in enumerate(tools)],
        tool_choice=_optional(effect.tool_choice, str, f"{where}.tool_choice"),
    )


def _branch(effect: Branch, ctx: Context, where: str) -> Branch:
    fn = effect.fn
    marks = fn.__dict__ if type(fn) is types.FunctionType else {}
    if marks.get("__branchc_compiled__") is not True or marks.get("__branchc_resumable__") is not True:
        what = f"the function {fn.__qualname__}" if type(fn) is types.FunctionType else _a(fn)
        raise OutcomeRefused(f"{where}.fn is {what}, not a compiled @resumable function")
    args = _exactly(effect.args, tuple, f"{where}.args")
    kwargs = _exactly(effect.kwargs, dict, f"{where}.kwargs")
    for name in kwargs:
        if type(name) is not str or name in _BRANCH_OPTIONS:
            raise OutcomeRefused(f"{where}.kwargs: {_show(name)} is not a keyword argument ctx.branch passes on")
    return ctx.branch(
        fn,
        *args,
        inherit_messages=_exactly(effect.inherit_messages, bool, f"{where}.inherit_messages"),
        system_prompt=_optional(effect.system_prompt, str, f"{where}.system_prompt"),
        max_depth=_optional(effect.max_depth, int, f"{where}.max_depth"),
        max_tokens=_optional(effect.max_tokens, int, f"{where}.max_tokens"),
        timeout=_number(effect.timeout, f"{where}.timeout"),
        tools=_names(effect.tools, f"{where}.tools"),
        **kwargs,
    )


def _names(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    names = _exactly(value, tuple, where)
    return [_text(name, f"{where}[{index}]") for index, name in enumerate(names)]


_MODEL_METACLASS = type(BaseModel)


def _schema(schema: Any, where: str) -> type[BaseModel]:
    """A pydantic model class (one a build records, or the runtime's: the decoder named nothing else)."""
    if type(schema) is not _MODEL_METACLASS or schema is BaseModel or not _inherits(schema, BaseModel):
        raise OutcomeRefused(f"{where} is {_a(schema)}, not a pydantic model class")
    return schema


# -- fields -----------------------------------------------------------------------------------------


def _exactly(value: Any, kind: type, where: str) -> Any:
    if type(value) is not kind:
        raise OutcomeRefused(f"{where} is {_a(value)}, not a {kind.__name__}")
    return value


def _optional(value: Any, kind: type, where: str) -> Any:
    return None if value is None else _exactly(value, kind, where)


def _text(value: Any, where: str) -> str:
    return _exactly(value, str, where)


def _number(value: Any, where: str) -> int | float | None:
    if value is None or type(value) is int or (type(value) is float and math.isfinite(value)):
        return value
    raise OutcomeRefused(f"{where} is {_a(value)}, not a finite number")


_MESSAGES = (Message, AssistantToolCallMessage, ToolResultMessage)
_PREFERENCES = (ModelPreferences,)
_TOOLS = (ToolSpec,)
#: The fields of those that hold models: a list of them (True) or one.
_INNER: dict[type, dict[str, tuple[type[BaseModel], bool]]] = {
    AssistantToolCallMessage: {"tool_calls": (ToolCall, True)},
    ToolCall: {"function": (ToolCallFunction, False)},
}


def _model(value: Any, allowed: tuple[type[BaseModel], ...], where: str, work: _Work, depth: int) -> BaseModel:
    """A message, tool spec or preferences model, validated again from its fields as read off its
    __dict__ (the decoder filled it without validation), with the fields it was given kept as given."""
    cls = type(value)
    if not any(cls is kind for kind in allowed):
        names = " or ".join(kind.__name__ for kind in allowed)
        raise OutcomeRefused(f"{where} is {_a(value)}, not a {names}")
    try:
        fields = object.__getattribute__(value, "__dict__")
        given = object.__getattribute__(value, "__pydantic_fields_set__")
    except AttributeError:
        raise OutcomeRefused(f"{where}: a {cls.__name__} without its fields") from None
    if type(fields) is not dict or type(given) is not set or not all(type(name) is str for name in given):
        raise OutcomeRefused(f"{where}: a {cls.__name__} without its fields")
    known = cls.model_fields
    if not all(type(name) is str and name in known for name in fields) or not given <= fields.keys():
        raise OutcomeRefused(f"{where}: a {cls.__name__} with fields it does not have")
    inner = _INNER.get(cls, {})
    plain: dict[str, Any] = {}
    for name, item in fields.items():
        at = f"{where}.{name}"
        if name in inner:
            model, many = inner[name]
            if many:
                items = _exactly(item, list, at)
                plain[name] = [_model(m, (model,), f"{at}[{i}]", work, depth + 1) for i, m in enumerate(items)]
            else:
                plain[name] = _model(item, (model,), at, work, depth + 1)
        else:
            plain[name] = _data(item, at, work, depth + 1)
    try:
        checked = cls.model_validate(plain)
    except ValidationError as error:
        raise OutcomeRefused(f"{where}: not a valid {cls.__name__}: {error.errors()[0]['msg']}") from None
    return cls.model_construct(_fields_set=set(given), **checked.__dict__)


_SCALARS = (str, int, bool, type(None))


def _context(value: Any, where: str, work: _Work) -> Any:
    """An elicitation's context: JSON data, or a model of it (of a class the decoder may name; ctx.elicit takes a
    checked copy of it, through JSON)."""
    if type(type(value)) is _MODEL_METACLASS and _inherits(type(value), BaseModel):
        return value
    return _data(value, where, work, 0)


def _data(value: Any, where: str, work: _Work, depth: int) -> Any:
    """JSON data (tuples too, as the codec keeps them), as a copy; anything else is refused."""
    work.values += 1
    if work.values > work.bounds.max_values:
        raise OutcomeRefused(
            f"{where}: more than {work.bounds.max_values:,} values in one effect (EffectBounds.max_values)"
        )
    kind = type(value)
    if any(kind is scalar for scalar in _SCALARS) or kind is float:
        return value
    if depth >= work.bounds.max_depth:
        raise OutcomeRefused(f"{where}: nested more than {work.bounds.max_depth} deep (EffectBounds.max_depth)")
    if kind is list or kind is tuple:
        return kind(_data(item, f"{where}[{i}]", work, depth + 1) for i, item in enumerate(value))
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise OutcomeRefused(f"{where}: a key that is {_a(key)}, not a str")
            out[key] = _data(item, f"{where}[{key!r}]", work, depth + 1)
        return out
    raise OutcomeRefused(f"{where} is {_a(value)}, not JSON data")


# -- naming what is refused, running nothing of it ----------------------------------------------------

_TYPE_NAME = type.__dict__["__qualname__"]
_TYPE_MRO = type.__dict__["__mro__"]


def _name(cls: type) -> str:
    """A type's name, read off the type itself (no metaclass of the data's runs)."""
    return _TYPE_NAME.__get__(cls)


def _inherits(cls: type, base: type) -> bool:
    """issubclass(cls, base) by identity along cls's MRO (no __subclasscheck__ or __eq__ of a metaclass runs)."""
    return any(klass is base for klass in _TYPE_MRO.__get__(cls))


def _show(value: Any) -> str:
    """A value from the data, shortly: a scalar as itself, else as `_a` says."""
    kind = type(value)
    if any(kind is scalar for scalar in _SCALARS):
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    return _a(value)


def _a(value: Any) -> str:
    """What a value from the data is, by its type's name: "class Trap", "a Trap", "an int", "None"."""
    kind = type(value)
    if value is None:
        return "None"
    if _inherits(kind, type):
        return f"class {_name(value)}"
    name = _name(kind)
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
