"""The handle client code receives: it reads branch state and makes effects."""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..continuation.snapshots import ContextHandle
from .effects import LOG_LEVELS, All, Branch, CallTool, Elicit, Log, Notify, Sample
from .errors import format_validation_errors
from .jsondata import check_json_data
from .limits import Limits
from .messages import ModelPreferences, ToolSpec, parse_messages

__all__ = ["BranchState", "Context", "TokenAccount"]


@dataclass
class TokenAccount:
    """A token budget; charging a branch charges every budget above it too."""

    limit: int | None
    parent: TokenAccount | None = None
    spent: int = 0

    def remaining(self) -> int | None:
        left = None
        account: TokenAccount | None = self
        while account is not None:
            if account.limit is not None:
                own = account.limit - account.spent
                left = own if left is None else min(left, own)
            account = account.parent
        return left

    def charge(self, tokens: int) -> None:
        account: TokenAccount | None = self
        while account is not None:
            account.spent += tokens
            account = account.parent


@dataclass
class BranchState:
    """Everything the runtime keeps for one branch; Context is a view of it."""

    id: str
    name: str
    depth: int
    max_depth: int | None
    deadline: float | None
    tokens: TokenAccount
    messages: list[Any] = field(default_factory=list)
    parent_messages: tuple[Any, ...] = ()
    parent_system_prompt: str | None = None
    system_prompt: str | None = None
    children: int = 0
    timed_out: bool = False
    tools: tuple[str, ...] | None = None  # the tools it may call (`ctx.branch(..., tools=)`); None: any


class Context(ContextHandle):
    """Made by the runtime, one per branch. Its methods return effects to yield:

    result = yield ctx.sample(prompt="...")
    """

    __slots__ = ("_branch",)

    def __init__(self, branch: BranchState) -> None:
        self._branch = branch

    def __repr__(self) -> str:
        return f"<Context branch={self._branch.id} depth={self._branch.depth}>"

    @property
    def messages(self) -> tuple[Any, ...]:
        """This branch's auto-tracked history (prompt-mode samples append to it)."""
        return tuple(self._branch.messages)

    @property
    def parent_messages(self) -> tuple[Any, ...]:
        return self._branch.parent_messages

    @property
    def parent_system_prompt(self) -> str | None:
        return self._branch.parent_system_prompt

    @property
    def system_prompt(self) -> str | None:
        return self._branch.system_prompt

    @property
    def depth(self) -> int:
        return self._branch.depth

    def sample(
        self,
        prompt: str | None = None,
        *,
        messages: list[Any] | None = None,
        system_prompt: str | None = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
        stop_sequences: list[str] | None = None,
        model_preferences: ModelPreferences | dict[str, Any] | None = None,
        tools: list[ToolSpec | dict[str, Any]] | None = None,
        tool_choice: Literal["auto", "required", "none"] | None = None,
    ) -> Sample:
        """`prompt=` appends the user/assistant pair to `ctx.messages`; `messages=` does not. Neither, after tool
        results (`ctx.call_tool` answering the model's tool_use): the model goes on from the history as it stands,
        and its reply joins it (the agent loop)."""
        if prompt is not None and messages is not None:
            raise TypeError("ctx.sample() takes one of prompt= (auto-tracked) or messages= (explicit), not both")
        if prompt is None and messages is None:
            history = self._branch.messages
            if not history or getattr(history[-1], "role", None) != "tool":
                raise TypeError(
                    "ctx.sample() takes prompt= (auto-tracked) or messages= (explicit); with neither it continues "
                    "the tracked history after tool results (ctx.call_tool(..., tool_call_id=...)), and this "
                    "branch's history does not end with one"
                )
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"ctx.sample(prompt=...) must be a str, not {type(prompt).__name__}")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"ctx.sample(max_tokens={max_tokens!r}): give a positive int")
        if messages is not None and not messages:
            raise ValueError("ctx.sample(messages=[]): give at least one message")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"ctx.sample(system_prompt=...) must be a str, not {type(system_prompt).__name__}")
        if temperature is not None and not _is_finite_number(temperature):
            raise TypeError(f"ctx.sample(temperature={temperature!r}): give a number")
        if isinstance(stop_sequences, str):
            raise TypeError(
                f"ctx.sample(stop_sequences={stop_sequences!r}): give a list of str, like [{stop_sequences!r}]"
            )
        if tool_choice not in (None, "auto", "required", "none"):
            raise ValueError(f"ctx.sample(tool_choice={tool_choice!r}): use 'auto', 'required' or 'none'")
        try:
            parsed = None if messages is None else tuple(parse_messages(messages))
            prefs = None if model_preferences is None else ModelPreferences.model_validate(model_preferences)
            specs = None if tools is None else tuple(ToolSpec.model_validate(t) for t in tools)
        except ValidationError as error:
            raise ValueError(
                "ctx.sample(): bad argument:\n" + "\n".join(f"  {e}" for e in format_validation_errors(error))
            ) from None
        return Sample(
            prompt=prompt,
            messages=parsed,
            system_prompt=system_prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            stop_sequences=None if stop_sequences is None else tuple(stop_sequences),
            model_preferences=prefs,
            tools=specs,
            tool_choice=tool_choice,
        )

    def elicit(self, key: str, *, message: str, schema: type[BaseModel], context: Any = None) -> Elicit:
        """Ask the user; `key` names the request (and the function in its exchange). `context` (JSON data, or a
        pydantic model of it) is kept for the exchange: `result.exchange.context` gives it back, a model as
        that model."""
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"ctx.elicit(key={key!r}): the key must be an identifier, like 'pick_move'")
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise TypeError(f"ctx.elicit({key!r}, schema=...) must be a pydantic model class, not {schema!r}")
        return Elicit(key=key, message=str(message), schema=schema, context=_context_copy(key, context))

    def log(self, level: str, message: str) -> Log:
        if level not in LOG_LEVELS:
            raise ValueError(f"ctx.log(level={level!r}): use one of {', '.join(LOG_LEVELS)}")
        return Log(level=level, message=str(message))

    def notify(self, message: str, *, progress: float | None = None, total: float | None = None) -> Notify:
        for name, value in (("progress", progress), ("total", total)):
            if value is not None and not _is_finite_number(value):
                raise TypeError(f"ctx.notify({name}={value!r}): give a finite number")
        return Notify(message=str(message), progress=progress, total=total)

    def branch(
        self,
        fn: Callable[..., Any],
        *args: Any,
        inherit_messages: bool = True,
        system_prompt: str | None = None,
        max_depth: int | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        tools: list[str] | None = None,
        **kwargs: Any,
    ) -> Branch:
        """Run `fn(sub_ctx, *args, **kwargs)` as a sub-branch; yields its return value. `tools`: the only tools it
        may call (and its own branches): names of this server's tools, `SERVER:TOOL` or `SERVER:*` upstream."""
        name = getattr(fn, "__qualname__", repr(fn))
        if not getattr(fn, "__branchc_resumable__", False):
            raise TypeError(
                f"ctx.branch({name}): the function must be a generator marked @resumable; add @resumable above its def"
            )
        try:
            Limits(max_depth=max_depth, max_tokens=max_tokens, timeout=timeout)
        except ValidationError as error:
            lines = "\n".join(f"  {e}" for e in format_validation_errors(error))
            raise ValueError(f"ctx.branch({name}): bad limit:\n{lines}") from None
        if tools is not None and (isinstance(tools, str) or not all(isinstance(name, str) and name for name in tools)):
            raise TypeError(f"ctx.branch({name}, tools=...): give a list of tool names, like ['lookup', 'docs:search']")
        return Branch(
            fn=fn,
            args=args,
            kwargs=kwargs,
            inherit_messages=inherit_messages,
            system_prompt=system_prompt,
            max_depth=max_depth,
            max_tokens=max_tokens,
            timeout=timeout,
            tools=None if tools is None else tuple(tools),
        )

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        server: str | None = None,
        tool_call_id: str | None = None,
    ) -> CallTool:
        """Call a tool of this server, or of the upstream MCP server `server`; yields its ToolResult. The call and
        its result join this branch's history as a tool_use and its tool_result; `tool_call_id`: the id of the
        model's tool_use this call answers (that tool_use is in the history already: only the result joins)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"ctx.call_tool(name={name!r}): give the tool's name")
        where = f"ctx.call_tool({name!r}, arguments=...)"
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise TypeError(f"{where}: give the arguments as a dict, not a {type(arguments).__name__}")
        check_json_data(arguments, where, "pass JSON data (convert values first)")
        for label, value in (("server", server), ("tool_call_id", tool_call_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"ctx.call_tool({name!r}, {label}={value!r}): give a non-empty str, or leave it out")
        return CallTool(
            name=name, arguments=json.loads(json.dumps(arguments)), server=server, tool_call_id=tool_call_id
        )

    def all(self, effects: list[Any]) -> All:
        """Run effects (usually branches) concurrently; yields their results in order."""
        effects = tuple(effects)
        for index, effect in enumerate(effects):
            if not isinstance(effect, (Sample, Elicit, Log, Notify, Branch, All, CallTool)):
                raise TypeError(
                    f"ctx.all(): item {index} is a {type(effect).__name__}, not an effect; "
                    f"pass effects such as ctx.branch(fn)"
                )
        return All(effects=effects)


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_generator_function(fn: Any) -> bool:
    return inspect.isgeneratorfunction(fn) or bool(getattr(fn, "__branchc_compiled__", False))


def _context_copy(key: str, context: Any) -> Any:
    """What the exchange keeps of an elicitation's context: a copy taken now, through JSON (a model: its JSON,
    validated back into a new model of its class), so what was shown is what comes back, whatever changes later."""
    where = f"ctx.elicit({key!r}, context=...)"
    if isinstance(context, BaseModel):
        kind = type(context)
        try:
            return kind.model_validate_json(context.model_dump_json())
        except (ValueError, TypeError) as error:  # pydantic's serialization and validation errors are ValueErrors
            raise TypeError(
                f"{where}: a {kind.__name__} that does not go through JSON and back ({error}); give it fields of "
                f"JSON data, or pass the data itself"
            ) from None
    check_json_data(context, where, "pass JSON data (convert values first), or a pydantic model of it")
    return json.loads(json.dumps(context))
