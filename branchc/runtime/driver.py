"""The driver: runs before -> client -> after and interprets every effect.

Generators are driven only through `send` / `throw`, so a compiled state machine
drops in for a native generator unchanged. Errors the runtime produces for a
generator (limits, bad answers, validation) are thrown into it at its current
yield, as an `await` would raise them, so user `try/except/finally` sees them.
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from collections.abc import Callable
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from .client import Client, ElicitAnswer, ElicitRequest, SampleRequest
from .context import BranchState, Context, TokenAccount
from .effects import All, Branch, Elicit, Log, Notify, Sample
from .elicit import ElicitExchange, ElicitResult, elicit_call_id
from .errors import (
    BranchDepthError,
    BranchTimeoutError,
    BranchTokenError,
    ClientAnswerError,
    EffectTypeError,
    ElicitValidationError,
    JsonDataError,
    MissingCapabilityError,
    ToolDefinitionError,
    ToolPhaseError,
    format_validation_errors,
)
from .jsondata import check_json_data
from .limits import Limits, estimate_tokens
from .messages import AssistantToolCallMessage, Message, SampleResult
from .tool import Tool

__all__ = ["Event", "run_tool"]

Event = dict[str, Any]
EFFECTS = (Sample, Elicit, Log, Notify, Branch, All)
#: Effects a timed-out or halted branch may still perform (in its finally blocks).
CLEANUP_EFFECTS = (Log, Notify)


async def run_tool(
    tool: Tool,
    params: BaseModel | dict[str, Any] | None,
    client: Client,
    *,
    limits: Limits | None = None,
    call_id: str | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> Any:
    """Run `tool` with `params` against `client`; return after()'s result.

    `limits` is the runtime policy, tightened with the tool's own limits.
    `call_id` names the MCP tool call (elicit exchanges use it in their ids).
    `on_event` receives a JSON-ready dict for each step (the timeline and traces).
    """
    if tool.client_fn is None:
        raise ToolDefinitionError(
            f"tool {tool.name!r} has no client phase; decorate a generator with @{tool.name}.client"
        )
    model = tool.validate_params(params)
    if missing := tool.requires - frozenset(getattr(client, "capabilities", ())):
        raise MissingCapabilityError(
            f"{tool.name} requires {', '.join(sorted(missing))}, which the client does not offer"
        )
    run = _Run(tool, client, call_id or os.urandom(6).hex(), tool.limits.tighten(limits), on_event)
    return await run.run(model)


class _Run:
    def __init__(self, tool: Tool, client: Client, call_id: str, limits: Limits, on_event) -> None:
        self.tool = tool
        self.client = client
        self.call_id = call_id
        self.limits = limits
        self.on_event = on_event
        self.samples = 0
        self.elicits = 0

    def emit(self, event: str, branch: BranchState | None = None, **data: Any) -> None:
        """Tell the observer; an observer that fails is reported, never fatal to the run."""
        if self.on_event is not None:
            if branch is not None:
                data = {"branch": branch.id, "depth": branch.depth, **data}
            try:
                self.on_event({"event": event, **data})
            except Exception as error:
                warnings.warn(f"on_event failed on a {event!r} event: {error!r}", RuntimeWarning, stacklevel=2)

    # -- phases ---------------------------------------------------------------------------

    async def run(self, params: BaseModel) -> Any:
        tool = self.tool
        self.emit("start", tool=tool.name, call_id=self.call_id, params=params.model_dump(mode="json"))
        if tool.before_fn is None:
            handoff = params.model_dump(mode="json")
        else:
            handoff = await self._server_phase("before", tool.before_fn, params)
            check_json_data(handoff, "handoff", "convert it in before()")
        self.emit("handoff", handoff=handoff)

        result = await self._client_phase(json.loads(json.dumps(handoff)))
        check_json_data(result, "client_result", "convert it in client()")
        self.emit("client_result", result=result)

        if tool.after_fn is not None:
            result = await self._server_phase("after", tool.after_fn, handoff, result)
            check_json_data(result, "result", "convert it in after()")
        self.emit("result", result=result)
        return result

    async def _server_phase(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            value = fn(*args)
            if inspect.isawaitable(value):
                value = await value
        except Exception as error:
            raise ToolPhaseError(self.tool.name, phase, error) from error
        return value

    async def _client_phase(self, handoff: Any) -> Any:
        limits = self.limits
        deadline = None if limits.timeout is None else anyio.current_time() + limits.timeout
        root = BranchState(
            id="0",
            name=self.tool.client_fn.__qualname__,
            depth=0,
            max_depth=limits.max_depth,
            deadline=deadline,
            tokens=TokenAccount(limits.max_tokens),
        )
        try:
            generator = self.tool.client_fn(handoff, Context(root))
            return await self._drive(generator, root)
        except Exception as error:
            raise ToolPhaseError(self.tool.name, "client", error) from error

    # -- the generator loop ---------------------------------------------------------------

    async def _drive(self, generator: Any, branch: BranchState) -> Any:
        """Step `generator` until it returns; exceptions it lets escape propagate."""
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = generator.send(value) if error is None else generator.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                if not isinstance(effect, EFFECTS):
                    raise self._not_an_effect(generator, branch, effect)
                value = await self._perform(effect, branch)
            except anyio.get_cancelled_exc_class():
                await self._halt(generator, branch)
                raise
            except Exception as exc:
                error = exc

    async def _halt(self, generator: Any, branch: BranchState) -> None:
        """Cancel a generator at its yield: GeneratorExit runs its finally blocks.

        A finally may still log and notify; any other effect ends the halt with
        RuntimeError, as CPython's close() does for a generator that ignores GeneratorExit.
        """
        self.emit("halt", branch)
        with anyio.CancelScope(shield=True):
            value: Any = None
            error: BaseException | None = GeneratorExit()
            while True:
                try:
                    effect = generator.send(value) if error is None else generator.throw(error)
                except (StopIteration, GeneratorExit):
                    return
                if not isinstance(effect, CLEANUP_EFFECTS):
                    raise RuntimeError(
                        f"{branch.name} ignored GeneratorExit: while being halted it yielded "
                        f"{type(effect).__name__}; a finally block may only log and notify during a halt"
                    )
                value, error = await self._leaf(effect, branch), None

    def _not_an_effect(self, generator: Any, branch: BranchState, value: Any) -> EffectTypeError:
        frame = getattr(generator, "gi_frame", None)
        if frame is not None:
            place = f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"
        else:
            place = getattr(generator, "source_location", "an unknown line")
        return EffectTypeError(
            f"{self.tool.name}: {branch.name} yielded a {type(value).__name__} at {place}, which is not an "
            f"effect; yield what ctx makes (ctx.sample, ctx.elicit, ctx.log, ctx.notify, ctx.branch, ctx.all)"
        )

    # -- effects --------------------------------------------------------------------------

    async def _perform(self, effect: Any, branch: BranchState) -> Any:
        if isinstance(effect, Branch):
            return await self._branch(effect, branch)
        if isinstance(effect, All):
            return await self._all(effect, branch)
        if isinstance(effect, CLEANUP_EFFECTS) or branch.deadline is None:
            return await self._leaf(effect, branch)
        if branch.timed_out or anyio.current_time() >= branch.deadline:
            raise self._timeout(branch)
        with anyio.CancelScope(deadline=branch.deadline):
            return await self._leaf(effect, branch)
        raise self._timeout(branch)  # reached only when the deadline cancelled the scope

    def _timeout(self, branch: BranchState) -> BranchTimeoutError:
        branch.timed_out = True
        self.emit("timeout", branch)
        return BranchTimeoutError(f"{branch.name} (branch {branch.id}) ran past its timeout")

    async def _leaf(self, effect: Any, branch: BranchState) -> Any:
        if isinstance(effect, Sample):
            return await self._sample(effect, branch)
        if isinstance(effect, Elicit):
            return await self._elicit(effect, branch)
        if isinstance(effect, Log):
            self.emit("log", branch, level=effect.level, message=effect.message)
            await self.client.log(effect.level, effect.message)
            return None
        self.emit("notify", branch, message=effect.message, progress=effect.progress, total=effect.total)
        await self.client.notify(effect.message, effect.progress, effect.total)
        return None

    async def _sample(self, effect: Sample, branch: BranchState) -> SampleResult:
        self.samples += 1
        number = self.samples
        if effect.prompt is not None:
            prompt = Message(role="user", content=effect.prompt)
            messages = [*branch.messages, prompt]
        else:
            messages = list(effect.messages)
        system_prompt = effect.system_prompt if effect.system_prompt is not None else branch.system_prompt
        prompt_tokens = estimate_tokens("".join(map(_message_text, messages)) + (system_prompt or ""))
        max_tokens = effect.max_tokens
        remaining = branch.tokens.remaining()
        if remaining is not None:
            if remaining - prompt_tokens < 1:
                raise BranchTokenError(
                    f"{branch.name}: sample #{number} needs about {prompt_tokens} prompt tokens plus its answer, "
                    f"but only {remaining} of the token budget remain"
                )
            max_tokens = min(max_tokens, remaining - prompt_tokens)
        request = SampleRequest(
            messages=messages,
            system_prompt=system_prompt,
            max_tokens=max_tokens,
            temperature=effect.temperature,
            stop_sequences=None if effect.stop_sequences is None else list(effect.stop_sequences),
            model_preferences=effect.model_preferences,
            tools=None if effect.tools is None else list(effect.tools),
            tool_choice=effect.tool_choice,
        )
        # Reserve the most this sample may cost, so concurrent samples cannot overspend; settle after.
        reserved = prompt_tokens + max_tokens
        branch.tokens.charge(reserved)
        try:
            result = _sample_result(await self.client.sample(request), number)
        except BaseException:
            branch.tokens.charge(-reserved)
            raise
        used = result.input_tokens if result.input_tokens is not None else prompt_tokens
        used += (
            result.output_tokens
            if result.output_tokens is not None
            else estimate_tokens(result.text + "".join(json.dumps(c.function.arguments) for c in result.tool_calls))
        )
        branch.tokens.charge(used - reserved)
        if effect.prompt is not None:
            if result.tool_calls:
                answer: Any = AssistantToolCallMessage(content=result.text or None, tool_calls=result.tool_calls)
            else:
                answer = Message(role="assistant", content=result.text)
            branch.messages.extend([prompt, answer])
        if self.on_event is not None:
            self.emit(
                "sample",
                branch,
                number=number,
                tracked=effect.prompt is not None,
                request=request.model_dump(mode="json", exclude_none=True),
                result=result.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
                tokens=used,
            )
        return result

    async def _elicit(self, effect: Elicit, branch: BranchState) -> ElicitResult:
        self.elicits += 1
        seq = self.elicits
        request = ElicitRequest(
            key=effect.key, message=effect.message, requested_schema=effect.schema.model_json_schema()
        )
        answer = _elicit_answer(await self.client.elicit(request), effect.key, seq)
        if self.on_event is not None:
            self.emit(
                "elicit",
                branch,
                seq=seq,
                request=request.model_dump(mode="json"),
                answer=answer.model_dump(mode="json"),
            )
        if answer.action != "accept":
            return ElicitResult(action=answer.action)
        try:
            content = effect.schema.model_validate(answer.content)
        except ValidationError as error:
            raise ElicitValidationError(effect.key, format_validation_errors(error), answer.content) from None
        exchange = ElicitExchange(
            key=effect.key,
            tool_call_id=elicit_call_id(self.call_id, seq),
            context=effect.context,
            content=content.model_dump(mode="json", by_alias=True),
        )
        return ElicitResult(action="accept", content=content, exchange=exchange)

    async def _branch(self, effect: Branch, parent: BranchState) -> Any:
        depth = parent.depth + 1
        max_depth = _least(parent.max_depth, effect.max_depth)
        if max_depth is not None and depth > max_depth:
            raise BranchDepthError(
                f"{effect.name}: a branch at depth {depth} exceeds max_depth {max_depth} "
                f"(branch {parent.id} is at depth {parent.depth})"
            )
        if parent.deadline is not None and (parent.timed_out or anyio.current_time() >= parent.deadline):
            raise self._timeout(parent)
        deadline = parent.deadline
        if effect.timeout is not None:
            deadline = _least(deadline, anyio.current_time() + effect.timeout)
        parent.children += 1
        child = BranchState(
            id=f"{parent.id}.{parent.children}",
            name=effect.name,
            depth=depth,
            max_depth=max_depth,
            deadline=deadline,
            tokens=TokenAccount(effect.max_tokens, parent.tokens),
            messages=list(parent.messages) if effect.inherit_messages else [],
            parent_messages=tuple(parent.messages),
            parent_system_prompt=parent.system_prompt,
            system_prompt=effect.system_prompt if effect.system_prompt is not None else parent.system_prompt,
        )
        self.emit("branch", child, parent=parent.id, name=effect.name, inherit_messages=effect.inherit_messages)
        try:
            generator = effect.fn(Context(child), *effect.args, **effect.kwargs)
            result = await self._drive(generator, child)
        except anyio.get_cancelled_exc_class():
            self.emit("branch_end", child, error="halted")
            raise
        except Exception as error:
            self.emit("branch_end", child, error=f"{type(error).__name__}: {error}")
            raise
        self.emit("branch_end", child, result=_jsonable(result))
        return result

    async def _all(self, effect: All, branch: BranchState) -> list[Any]:
        results: list[Any] = [None] * len(effect.effects)
        failure: Exception | None = None

        async def run_one(index: int, item: Any) -> None:
            nonlocal failure
            try:
                results[index] = await self._perform(item, branch)
            except Exception as error:
                if failure is None:
                    failure = error
                    group.cancel_scope.cancel()
                else:
                    failure.add_note(f"also, while halting: {type(error).__name__}: {error}")

        async with anyio.create_task_group() as group:
            for index, item in enumerate(effect.effects):
                group.start_soon(run_one, index, item)
        if failure is not None:
            raise failure
        return results


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _message_text(message: Any) -> str:
    text = getattr(message, "content", None) or ""
    for call in getattr(message, "tool_calls", None) or ():
        text += call.function.name + json.dumps(call.function.arguments)
    return text


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _sample_result(answer: Any, number: int) -> SampleResult:
    if isinstance(answer, str):
        return SampleResult(text=answer)
    if isinstance(answer, dict):
        try:
            answer = SampleResult.model_validate(answer)
        except ValidationError as error:
            lines = "\n".join(f"  {e}" for e in format_validation_errors(error))
            raise ClientAnswerError(f"sample #{number}: the client's answer is not a SampleResult:\n{lines}") from None
    if not isinstance(answer, SampleResult):
        raise ClientAnswerError(
            f"sample #{number}: the client answered with a {type(answer).__name__}; "
            f"expected a SampleResult, a dict of its fields, or the text as a str"
        )
    for index, call in enumerate(answer.tool_calls):
        _client_json(call.function.arguments, f"sample #{number}: tool_calls[{index}].function.arguments")
    return answer


def _client_json(value: Any, where: str) -> None:
    try:
        check_json_data(value, where, "the client must answer with JSON data")
    except JsonDataError as error:
        raise ClientAnswerError(str(error)) from None


def _elicit_answer(answer: Any, key: str, seq: int) -> ElicitAnswer:
    where = f"elicit #{seq} ({key!r})"
    if isinstance(answer, ElicitAnswer):
        parsed = answer
    elif isinstance(answer, dict):
        try:
            parsed = ElicitAnswer.model_validate(answer)
        except ValidationError as error:
            lines = "\n".join(f"  {e}" for e in format_validation_errors(error))
            raise ClientAnswerError(f"{where}: the client's answer has the wrong shape:\n{lines}") from None
    else:
        raise ClientAnswerError(
            f"{where}: the client answered with a {type(answer).__name__}; "
            f"expected {{'action': 'accept'|'decline'|'cancel', 'content': {{...}}}}"
        )
    if parsed.action == "accept" and parsed.content is None:
        raise ClientAnswerError(f"{where}: an accepted elicitation needs content (a dict of the form's fields)")
    _client_json(parsed.content, f"{where}: content")
    return parsed
