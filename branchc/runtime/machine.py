"""The run machine: a tool's client phase as data that any driver can step.

A run is a tree of branches. Each branch has a generator and waits on at most one thing: the
answer to a request (a sample or an elicitation), a child branch (`ctx.branch`), or a group
(`ctx.all`, whose slots wait on requests, children or groups in turn). `advance()` steps every
branch that can move until each one waits for an answer; it never awaits. Logs and progress
notes go to an outbox, in order, for the driver to send.

Two drivers step it. `run_tool` (driver.py) asks the client for every pending request at once
and feeds each answer as it arrives. The 2026-07-28 bridge ends a round when everything waits,
saves the machine as its `request_state`, and resumes it next round with the answers: no task,
frame or coroutine has to outlive a round, so any process can serve the next one. The live copy
of a saved run is then `release()`d, never just dropped (which would close its generators and
run the run's cleanup every round): finally blocks run once, where the run really ends.

With an `executor` (any `concurrent.futures.Executor`), the steps of sub-branches run there, in
parallel, each as a snapshot there and back (steps.py); the outcomes are applied here one by one,
in the same queue order as without one, so results, requests, logs and their order are the same.
A step's outcome is adopted only in its turn: a branch halted before its turn (a sibling failed)
is halted from its original generator, its step's outcome dropped, as if it never ran. Values
that several branches share travel as copies, as across any processes. An outcome is untrusted
input: it is acted on only once its MAC verifies for its step, its data decodes by the snapshot
rules and its effect is rebuilt as compiled code makes it (steps.py, outcomes.py).

Errors the runtime produces for a branch (limits, bad answers) are thrown into its generator
at its yield, as an `await` would raise them. When one slot of a group fails, its siblings are
halted at their yields (GeneratorExit: their finally blocks run and may still log and notify),
innermost first, and the first error is raised at the group's yield. Deadlines are wall-clock
times (`time.time()`), so they mean the same in every process.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..continuation.generator import is_compiled, release, suspended_at
from . import steps, tracing
from .client import ElicitAnswer, ElicitRequest, SampleRequest
from .context import BranchState, Context, TokenAccount
from .effects import All, Branch, CallTool, Elicit, Log, Notify, Sample
from .elicit import ElicitExchange, ElicitResult, elicit_call_id
from .errors import (
    BranchDepthError,
    BranchTimeoutError,
    BranchTokenError,
    ClientAnswerError,
    EffectTypeError,
    ElicitValidationError,
    JsonDataError,
    ToolCallLimitError,
    ToolDepthError,
    ToolNotAllowedError,
    ToolTimeoutError,
    format_validation_errors,
)
from .jsondata import check_json_data
from .limits import Limits, estimate_tokens
from .messages import AssistantToolCallMessage, Message, SampleResult, ToolResultMessage
from .returns import frame_of, returned_from
from .toolcalls import ToolCallState, ToolResult, tool_call_id

__all__ = ["CLEANUP_EFFECTS", "EFFECTS", "Call", "Machine", "Request"]

EFFECTS = (Sample, Elicit, Log, Notify, Branch, All, CallTool)
#: Tool calls a run makes at most, and how deep tools call tools, where its limits say nothing: work per run
#: stays bounded, and a tool that calls itself stops long before halting it could exhaust the stack.
MAX_TOOL_CALLS = 100
MAX_TOOL_DEPTH = 8
#: Effects a halted branch may still perform (in its finally blocks).
CLEANUP_EFFECTS = (Log, Notify)

# Where an outcome goes: ["b", branch id] (the branch's own yield), ["s", group id, slot], ["c", call key] (a tool
# call's own sub-run returned) or ["c", call key, question key] (a question a tool upstream asked, answered).
Where = list[Any]


@dataclass
class Request:
    """A question for the client: one sample or one elicitation, waiting for its answer."""

    key: str  # unique in the run and stable across rounds: "sample-3", "elicit-1"
    branch: str
    where: Where
    kind: Literal["sample", "elicit"]
    number: int  # the run's sample number, or elicitation sequence number
    deadline: float | None
    sample: SampleRequest | None = None
    prompt: Message | None = None  # a tracked sample's prompt, added to the history with the answer
    prompt_tokens: int = 0
    reserved: int = 0  # tokens held until the answer says what it cost
    elicit: ElicitRequest | None = None
    schema: type[BaseModel] | None = None
    context: Any = None
    continues: bool = False  # a sample that continues the tracked history as it stands: its reply joins it


@dataclass
class Call:
    """A tool call the run waits on (`ctx.call_tool`): made by the driver, fed back by `finish_call`."""

    key: str  # unique in the run and stable across rounds: "tool-1"
    branch: str
    where: Where
    number: int  # the run's tool call number
    call: ToolCallState


@dataclass
class _Branch:
    state: BranchState
    generator: Any
    parent: Where | None  # None for the root
    wait: str | None = None  # the request key, child branch id or group id it waits on


@dataclass
class _Group:
    parent: Where
    branch: str
    results: list[Any]
    waiting: dict[int, str] = field(default_factory=dict)  # slot -> what it waits on
    failure: BaseException | None = None


class Machine:
    def __init__(self, tool: str, call_id: str, limits: Limits, emit: Any = None) -> None:
        self.tool = tool
        self.call_id = call_id
        self.limits = limits
        self.emit = emit or (lambda event, branch=None, **data: None)
        self.observed = emit is not None  # then each suspension is reported too, for traces
        self.spans: tracing.BranchSpans | None = None  # each sub-branch a span while traces record (tracing.py)
        if tracing.recording():
            self.spans = tracing.BranchSpans(self.emit)
            self.emit = self.spans.emit
        self.samples = 0
        self.elicits = 0
        self.groups_made = 0
        self.branches: dict[str, _Branch] = {}
        self.groups: dict[str, _Group] = {}
        self.requests: dict[str, Request] = {}  # unanswered, in the order they were made
        self.calls: dict[str, Call] = {}  # tool calls not yet fed back, in the order they were made
        self.tool_calls = 0
        self.ready: deque[tuple[str, bool, Any]] = deque()  # (branch, ok, value or error)
        self.outbox: list[tuple[Any, ...]] = []  # ("log", level, message) / ("notify", message, progress, total)
        self.cancelled: list[str] = []  # requests dropped since the driver last looked
        self.done = False
        self.ok = False
        self.result: Any = None  # the client phase's return value, or the exception that escaped it
        self.returned_at: str | None = None  # file:line of the client phase's `return`, once it returned
        self.released = False  # let go of by release(): its run goes on from a saved copy
        self.executor: Any = None  # a concurrent.futures.Executor: sub-branch steps run there (never saved)
        self.saved_bytes = 0  # the length of its last saved text (runstate.dump_run), what keeping it costs

    # -- saving between rounds -------------------------------------------------------------------

    _SAVED = (
        "tool", "call_id", "limits", "samples", "elicits", "groups_made", "branches", "groups", "requests", "calls",
        "tool_calls",
    )  # fmt: skip

    def saved(self) -> dict[str, Any]:
        """What a round carries to the next (for the snapshot codec); only when every branch waits."""
        self._check_live("saved")
        if self.ready or self.outbox:
            raise RuntimeError("a machine is saved only between steps: advance() it and take its outbox first")
        return {name: getattr(self, name) for name in self._SAVED}

    @classmethod
    def restored(cls, saved: dict[str, Any], emit: Any = None) -> Machine:
        machine = cls(saved["tool"], saved["call_id"], saved["limits"], emit)
        for name in cls._SAVED:
            setattr(machine, name, saved[name])
        return machine

    def release(self) -> None:
        """Let go of this machine because its run goes on elsewhere, from a saved copy (`saved()`,
        runstate.dump_run): each branch's generator is released (branchc.release), so no finally
        block, except clause or context manager exit of the tool's code runs here. Dropping a
        machine instead would close its generators (CPython closes a generator it frees), running
        the run's cleanup once for every round, and failing in every finally that yields (a log).
        The cleanup belongs to wherever the run really ends: there it completes, fails, or is
        halted. Only a machine of compiled generators is ever saved, so only it can be released
        (TypeError otherwise, and nothing is let go of). Afterwards the machine is empty and
        cannot be stepped, answered or saved again; releasing it again does nothing."""
        if self.released:
            return
        generators = [branch.generator for branch in self.branches.values()]
        if native := [g for g in generators if not is_compiled(g)]:
            raise TypeError(
                f"{self.tool}: only a machine of compiled generators can be released (its run continues from a "
                f"saved copy); {native[0]!r} is not compiled: halt() the run instead"
            )
        self.released = True
        if self.spans is not None:
            self.spans.close("suspended")  # its branches go on from the saved copy; their spans end here
        self.branches, self.groups, self.requests, self.calls = {}, {}, {}, {}
        self.ready.clear()
        self.outbox.clear()
        self.cancelled.clear()
        release(*generators)

    def _check_live(self, what: str) -> None:
        if self.released:
            raise RuntimeError(f"{self.tool}: {what}() on a released machine; its run goes on from its saved copy")

    # -- starting and stepping ------------------------------------------------------------------

    def start(self, client_fn: Any, handoff: Any, name: str) -> None:
        self._check_live("start")
        limits = self.limits
        root = BranchState(
            id="0",
            name=name,
            depth=0,
            max_depth=limits.max_depth,
            deadline=None if limits.timeout is None else time.time() + limits.timeout,
            tokens=TokenAccount(limits.max_tokens),
        )
        generator = client_fn(handoff, Context(root))
        self.branches["0"] = _Branch(root, generator, None)
        self.ready.append(("0", True, None))

    @property
    def pending(self) -> list[Request]:
        """The requests waiting for the client, oldest first."""
        return list(self.requests.values())

    def take_outbox(self) -> list[tuple[Any, ...]]:
        out, self.outbox = self.outbox, []
        return out

    def take_cancelled(self) -> list[str]:
        out, self.cancelled = self.cancelled, []
        return out

    def advance(self) -> None:
        """Step every branch that can move, until each one waits (or the run is over). With an executor
        this blocks while steps run there: an async driver calls it in a worker thread."""
        self._check_live("advance")
        if self.executor is not None:
            self._advance_elsewhere()
            return
        while self.ready:
            ident, ok, value = self.ready.popleft()
            if ident in self.branches:  # a branch halted meanwhile has nothing left to receive
                self._step(ident, ok, value)

    def _advance_elsewhere(self) -> None:
        """advance() with an executor: each batch of ready steps (the queue as it stands) is shipped at
        once, sub-branches only, then applied in queue order exactly as advance() steps it; what the
        batch adds to the queue is the next batch. A step that cannot be had (StepElsewhereError) puts
        the rest of its batch back in front of the queue: the run is as it was before that step."""
        while self.ready:
            batch = list(self.ready)
            self.ready.clear()
            shipment = steps.Shipment(self.executor, self.tool, self.call_id)
            left = 0
            try:
                for ident, ok, value in batch:
                    branch = self.branches.get(ident)
                    if branch is not None and branch.parent is not None and is_compiled(branch.generator):
                        shipment.send(ident, branch.generator, ok, value, branch.state)
                for index, (ident, ok, value) in enumerate(batch):
                    left = index + 1  # what goes back to the queue if this entry fails
                    if ident not in self.branches:
                        shipment.drop(ident)  # halted before its turn: its outcome is dropped
                    elif ident not in shipment:
                        self._step(ident, ok, value)
                    else:
                        left = index  # not stepped: taking its outcome failed, or it was refused
                        branch = self.branches[ident]
                        taken = shipment.take(ident, branch.state, branch.generator)
                        left = index + 1
                        self._adopt(ident, ok, value, taken)
            except BaseException:
                self.ready.extendleft(reversed(batch[left:]))
                raise
            finally:
                shipment.close()

    def _adopt(self, ident: str, ok: bool, value: Any, taken: tuple[Any, str, Any] | None) -> None:
        """Apply a step that ran elsewhere (its checked outcome, steps.py), as _step would have stepped it
        here: its generator replaces the original, which is released (its run goes on from the copy, so
        no finally block runs twice). None: the step could not travel back, and is stepped here."""
        if taken is None:
            self._step(ident, ok, value)
            return
        branch = self.branches[ident]
        original = branch.generator
        generator, kind, out = taken
        branch.generator = generator
        release(original)
        if kind == "return":
            self._finish(ident, True, out)
        elif kind == "raise":
            self._finish(ident, False, out)
        elif kind == "other":
            self.ready.append((ident, False, self._not_an_effect(generator, branch.state, out)))
        else:
            self._yielded(ident, branch, generator, out)

    def _step(self, ident: str, ok: bool, value: Any) -> None:
        branch = self.branches[ident]
        generator = branch.generator
        frame = frame_of(generator) if branch.parent is None else None  # the client phase's: where it returns
        try:
            effect = generator.send(value) if ok else generator.throw(value)
        except StopIteration as stop:
            if frame is not None:
                self.returned_at = returned_from(frame)
            self._finish(ident, True, stop.value)
            return
        except Exception as error:
            self._finish(ident, False, error)
            return
        self._yielded(ident, branch, generator, effect)

    def _yielded(self, ident: str, branch: _Branch, generator: Any, effect: Any) -> None:
        if not isinstance(effect, EFFECTS):
            self.ready.append((ident, False, self._not_an_effect(generator, branch.state, type(effect).__name__)))
            return
        if self.observed:
            self.emit("suspend", branch.state, **suspended_at(generator))
        outcome = self._perform(effect, ["b", ident], branch.state)
        if isinstance(outcome, str):
            branch.wait = outcome
        else:
            self.ready.append((ident, *outcome))

    def _finish(self, ident: str, ok: bool, value: Any) -> None:
        branch = self.branches.pop(ident)
        if ok and self._past_deadline(branch.state):  # it returned late, never having yielded past its deadline
            ok, value = False, self._timeout(branch.state)
        if branch.parent is None:
            self.done, self.ok, self.result = True, ok, value
            return
        if ok:
            self.emit("branch_end", branch.state, result=_jsonable(value))
        else:
            self.emit("branch_end", branch.state, error=f"{type(value).__name__}: {value}")
        self._deliver(branch.parent, ok, value)

    def _deliver(self, where: Where, ok: bool, value: Any) -> None:
        if where[0] == "b":
            branch = self.branches[where[1]]
            branch.wait = None
            if not ok and isinstance(value, BranchTimeoutError) and self._past_deadline(branch.state):
                branch.state.timed_out = True  # told: its own deadline is why what it waited on timed out
            self.ready.append((where[1], ok, value))
            return
        if where[0] == "c":
            self._delivered_to_call(where, ok, value)
            return
        _, ident, slot = where
        group = self.groups[ident]
        del group.waiting[slot]
        if ok:
            group.results[slot] = value
        else:
            group.failure = value
            self._halt_waits(group.waiting.values(), group.failure)
            group.waiting.clear()
        if not group.waiting:
            del self.groups[ident]
            self._deliver(group.parent, group.failure is None, group.results if group.failure is None else value)

    def _delivered_to_call(self, where: Where, ok: bool, value: Any) -> None:
        """A tool call's sub-run ended (its client result, for its after(); a failure is the tool's error
        result), or one of its upstream questions was answered (its reply; a failed one fails the call)."""
        entry = self.calls.get(where[1])
        if entry is None:
            return  # dropped meanwhile
        call = entry.call
        if len(where) == 2:
            if ok:
                call.phase, call.result = "after", value
            else:
                text = f"{call.name}: client() failed: {type(value).__name__}: {value}"
                self.finish_call(entry.key, True, ToolResult.failed(text))
            return
        if not ok:
            for other in call.asked.values():  # its other questions are not needed any more
                if other in self.requests:
                    self._drop(other)
            self.finish_call(entry.key, False, value)
            return
        call.replies[where[2]] = value
        if len(call.replies) == len(call.asked):
            call.phase = "call"

    # -- effects ------------------------------------------------------------------------------

    def _perform(self, effect: Any, where: Where, branch: BranchState) -> tuple[bool, Any] | str:
        """(ok, value) when the effect is over at once; else the id of what `where` now waits on.

        Every yield of a branch past its deadline raises BranchTimeoutError there, once: after that (the branch
        caught it), logs and notes still go out, so that its cleanup can say what happened, and anything else
        is refused at once."""
        if isinstance(effect, CLEANUP_EFFECTS):
            if not self._past_deadline(branch):
                self._cleanup_effect(effect, branch)
                return True, None
            return False, self._timeout(branch)
        if branch.deadline is not None and (branch.timed_out or time.time() >= branch.deadline):
            return False, self._timeout(branch)
        if isinstance(effect, All):
            return self._all(effect, where, branch)
        try:
            if isinstance(effect, Sample):
                return self._sample(effect, where, branch)
            if isinstance(effect, Elicit):
                return self._elicit(effect, where, branch)
            if isinstance(effect, CallTool):
                return self._call_tool(effect, where, branch)
            return self._branch(effect, where, branch)
        except Exception as error:
            return False, error

    def _cleanup_effect(self, effect: Log | Notify, branch: BranchState) -> None:
        if isinstance(effect, Log):
            self.emit("log", branch, level=effect.level, message=effect.message)
            self.outbox.append(("log", effect.level, effect.message))
        else:
            self.emit("notify", branch, message=effect.message, progress=effect.progress, total=effect.total)
            self.outbox.append(("notify", effect.message, effect.progress, effect.total))

    @staticmethod
    def _past_deadline(branch: BranchState) -> bool:
        """Whether the branch ran past its deadline without being told (its BranchTimeoutError not raised yet)."""
        return branch.deadline is not None and not branch.timed_out and time.time() >= branch.deadline

    def _timeout(self, branch: BranchState) -> BranchTimeoutError:
        branch.timed_out = True
        self.emit("timeout", branch)
        return BranchTimeoutError(f"{branch.name} (branch {branch.id}) ran past its timeout")

    def _sample(self, effect: Sample, where: Where, branch: BranchState) -> str:
        self.samples += 1
        number = self.samples
        prompt = None
        continues = effect.prompt is None and effect.messages is None
        if effect.prompt is not None:
            prompt = Message(role="user", content=effect.prompt)
            messages = [*branch.messages, prompt]
        elif continues:  # ctx.sample() after tool results: the history as it stands, the reply added to it
            messages = list(branch.messages)
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
        # model_construct: every message is a validated model already, and revalidating the
        # whole history at every sample made a long conversation quadratic
        request = SampleRequest.model_construct(
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
        key = f"sample-{number}"
        self.requests[key] = Request(
            key, branch.id, where, "sample", number, branch.deadline, sample=request, prompt=prompt,
            prompt_tokens=prompt_tokens, reserved=reserved, continues=continues,
        )  # fmt: skip
        return key

    def _elicit(self, effect: Elicit, where: Where, branch: BranchState) -> str:
        self.elicits += 1
        number = self.elicits
        request = ElicitRequest(
            key=effect.key, message=effect.message, requested_schema=effect.schema.model_json_schema()
        )
        key = f"elicit-{number}"
        self.requests[key] = Request(
            key, branch.id, where, "elicit", number, branch.deadline, elicit=request, schema=effect.schema,
            context=effect.context,
        )  # fmt: skip
        return key

    def _branch(self, effect: Branch, where: Where, parent: BranchState) -> str:
        depth = parent.depth + 1
        max_depth = _least(parent.max_depth, effect.max_depth)
        if max_depth is not None and depth > max_depth:
            raise BranchDepthError(
                f"{effect.name}: a branch at depth {depth} exceeds max_depth {max_depth} "
                f"(branch {parent.id} is at depth {parent.depth})"
            )
        deadline = parent.deadline
        if effect.timeout is not None:
            deadline = _least(deadline, time.time() + effect.timeout)
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
            tools=_narrowed(parent.tools, effect.tools),
        )
        self.emit(
            "branch",
            child,
            parent=parent.id,
            name=effect.name,
            function=getattr(effect.fn, "__qualname__", None),
            inherit_messages=effect.inherit_messages,
        )
        try:
            generator = effect.fn(Context(child), *effect.args, **effect.kwargs)
        except Exception as error:
            self.emit("branch_end", child, error=f"{type(error).__name__}: {error}")
            raise
        self.branches[child.id] = _Branch(child, generator, where)
        self.ready.append((child.id, True, None))
        return child.id

    def _call_tool(self, effect: CallTool, where: Where, branch: BranchState) -> str:
        try:
            return self._made_call(effect, where, branch)
        except Exception as error:
            if effect.tool_call_id is not None:  # refused before it was made: the model's tool_use is answered
                branch.messages.append(_failed_result(effect.tool_call_id, error))
            raise

    def _made_call(self, effect: CallTool, where: Where, branch: BranchState) -> str:
        shown = effect.name if effect.server is None else f"{effect.server}:{effect.name}"
        if not _allowed(branch.tools, effect.server, effect.name):
            raise ToolNotAllowedError(
                f"{branch.name}: ctx.call_tool({shown!r}): this branch may call only {', '.join(branch.tools or ())} "
                f"(ctx.branch(..., tools=[...]))"
            )
        limits = self.limits
        most = limits.max_tool_calls if limits.max_tool_calls is not None else MAX_TOOL_CALLS
        if self.tool_calls >= most:
            raise ToolCallLimitError(
                f"{branch.name}: ctx.call_tool({shown!r}) would be tool call {self.tool_calls + 1} of a run that may "
                f"make {most} (Limits.max_tool_calls)"
            )
        depth = self._tool_depth(branch.id) + 1
        deepest = limits.max_tool_depth if limits.max_tool_depth is not None else MAX_TOOL_DEPTH
        if depth > deepest:
            raise ToolDepthError(
                f"{branch.name}: ctx.call_tool({shown!r}) would run {depth} tools deep, past max_tool_depth "
                f"{deepest} (a tool that calls itself through others stops here)"
            )
        self.tool_calls += 1
        number = self.tool_calls
        deadline = branch.deadline
        if limits.tool_timeout is not None:
            deadline = _least(deadline, time.time() + limits.tool_timeout)
        state = ToolCallState(
            name=effect.name,
            arguments=effect.arguments,
            server=effect.server,
            id=effect.tool_call_id or tool_call_id(self.call_id, number),
            answers=effect.tool_call_id is not None,
            deadline=deadline,
        )
        key = f"tool-{number}"
        self.calls[key] = Call(key, branch.id, where, number, state)
        self.emit("call_tool", branch, key=key, name=effect.name, server=effect.server, arguments=effect.arguments)
        return key

    def _tool_depth(self, ident: str) -> int:
        """How many tools of this server run below the client phase at branch `ident` (each one's sub-run)."""
        depth = 0
        while ident in self.branches:
            parent = self.branches[ident].parent
            if parent is None:
                break
            if parent[0] == "c":
                depth += 1
                call = self.calls.get(parent[1])
                if call is None:
                    break
                ident = call.branch
            elif parent[0] == "s":
                ident = self.groups[parent[1]].branch if parent[1] in self.groups else ""
            else:
                ident = parent[1]
        return depth

    # -- tool calls: what drivers do --------------------------------------------------------------

    def ready_calls(self) -> list[Call]:
        """The tool calls a driver has to work on now: to make (or `before()`), or to finish (`after()`), and
        not come back yet; a call running its sub-run or waiting for answers to its questions is not ready."""
        return [c for c in self.calls.values() if c.call.phase in ("call", "after") and c.call.outcome is None]

    def start_call(self, key: str) -> None:
        """A driver begins the next step of call `key` (to be saved before it goes out: a run restored mid-call is
        told so)."""
        call = self.calls[key].call
        call.started = True
        call.step += 1

    def record_call(self, key: str, ok: bool, value: Any) -> None:
        """Call `key` came back: a ToolResult (`ok`), or the error to raise at its yield. Kept until
        `settle_calls()` feeds it, so a driver that saves the run between the two never makes the call again."""
        call = self.calls[key].call
        if ok and not isinstance(value, ToolResult):
            raise TypeError(f"the outcome of tool call {key!r} is a ToolResult, not a {type(value).__name__}")
        call.outcome = (ok, value)

    def settle_calls(self) -> None:
        """Feed every tool call that came back to the branch that made it; its result joins the branch's history."""
        for key in [key for key, c in self.calls.items() if c.call.outcome is not None]:
            entry = self.calls.pop(key, None)
            if entry is None:
                continue  # dropped by a sibling's failure settled just before
            ok, value = entry.call.outcome
            asker = self.branches.get(entry.branch)
            if ok:
                if asker is not None:
                    asker.state.messages.extend([*entry.call.history(), entry.call.answered(value)])
                self.emit("tool_result", asker.state if asker else None, key=key, is_error=value.is_error)
            elif entry.call.answers and asker is not None:  # the model's tool_use gets its result all the same
                asker.state.messages.append(_failed_result(entry.call.id, value))
            self._deliver(entry.where, ok, value)

    def finish_call(self, key: str, ok: bool, value: Any) -> None:
        """record_call and settle_calls at once (a driver that keeps the run nowhere in between)."""
        self.record_call(key, ok, value)
        self.settle_calls()

    def run_tool_client(self, key: str, client_fn: Any, handoff: Any, limits: Limits, name: str) -> None:
        """Call `key` is of a tool of this server, whose before() handed on `handoff`: its client phase runs
        as a sub-run of this run, a branch with the tool's own limits (within what is left of the caller's
        deadline and tokens), whose return value goes to the call's after()."""
        entry = self.calls[key]
        caller = self.branches[entry.branch].state
        entry.call.phase, entry.call.handoff, entry.call.started = "running", handoff, False
        caller.children += 1
        deadline = _least(caller.deadline, entry.call.deadline)
        if limits.timeout is not None:
            deadline = _least(deadline, time.time() + limits.timeout)
        depth = caller.depth + 1
        root = BranchState(
            id=f"{caller.id}.{caller.children}",
            name=name,
            depth=depth,
            max_depth=_least(caller.max_depth, None if limits.max_depth is None else depth + limits.max_depth),
            deadline=deadline,
            tokens=TokenAccount(limits.max_tokens, caller.tokens),
            tools=caller.tools,
        )
        self.emit("branch", root, parent=caller.id, name=name, function=name, inherit_messages=False)
        generator = client_fn(handoff, Context(root))
        self.branches[root.id] = _Branch(root, generator, ["c", key])
        self.ready.append((root.id, True, None))

    def ask_for_call(self, key: str, state: str, questions: dict[str, SampleRequest | ElicitRequest]) -> None:
        """A tool upstream answered call `key` with questions (its InputRequiredResult, `state` its request_state):
        each waits as a request of this run, for this run's client; once all are answered the call is ready
        again, to be sent their answers (`call.replies`) with the state."""
        entry = self.calls[key]
        call = entry.call
        call.phase, call.upstream_state, call.started, call.replies = "asking", state, False, {}
        call.asked = {}
        for upstream_key, question in questions.items():
            if isinstance(question, SampleRequest):
                self.samples += 1
                number, request_key = self.samples, f"sample-{self.samples}"
                request = Request(request_key, entry.branch, ["c", key, upstream_key], "sample", number,
                                  call.deadline, sample=question)  # fmt: skip
            else:
                self.elicits += 1
                number, request_key = self.elicits, f"elicit-{self.elicits}"
                request = Request(request_key, entry.branch, ["c", key, upstream_key], "elicit", number,
                                  call.deadline, elicit=question)  # fmt: skip
            self.requests[request_key] = request
            call.asked[upstream_key] = request_key

    def _all(self, effect: All, where: Where, branch: BranchState) -> tuple[bool, Any] | str:
        self.groups_made += 1
        ident = f"group-{self.groups_made}"
        group = self.groups[ident] = _Group(where, branch.id, [None] * len(effect.effects))
        for slot, item in enumerate(effect.effects):
            outcome = self._perform(item, ["s", ident, slot], branch)
            if isinstance(outcome, str):
                group.waiting[slot] = outcome
                continue
            ok, value = outcome
            if ok:
                group.results[slot] = value
                continue
            # failed at once: halt what the earlier slots started, and start no more
            self._halt_waits(group.waiting.values(), value)
            del self.groups[ident]
            return False, value
        if not group.waiting:
            del self.groups[ident]
            return True, group.results
        return ident

    # -- answers --------------------------------------------------------------------------------

    def answer(self, key: str, answer: Any) -> None:
        """The client's answer to request `key` (a SampleResult, an ElicitAnswer, or their dict or str
        forms); a malformed answer is thrown into the branch that asked."""
        request = self.requests.pop(key)
        branch = self.branches[request.branch].state
        try:
            if request.where[0] == "c":  # a question of a tool upstream: its answer goes back to it as it is
                value: Any = (
                    _sample_result(answer, request.number)
                    if request.kind == "sample"
                    else _parse_elicit_answer(answer, request.elicit.key, request.number)
                )
            elif request.kind == "sample":
                value = self._sample_answer(request, answer, branch)
            else:
                value = self._elicit_answer(request, answer, branch)
        except Exception as error:
            self._deliver(request.where, False, error)
        else:
            self._deliver(request.where, True, value)

    def fail(self, key: str, error: BaseException) -> None:
        """The client could not answer `key`: the error is raised at the asking branch's yield."""
        request = self.requests.pop(key)
        self.branches[request.branch].state.tokens.charge(-request.reserved)
        self._deliver(request.where, False, error)

    def expire(self, key: str) -> None:
        """Request `key` outlived its deadline: its branch's, or for a tool call's question, the call's."""
        request = self.requests.pop(key)
        branch = self.branches[request.branch].state
        branch.tokens.charge(-request.reserved)
        if request.where[0] == "c":
            error = ToolTimeoutError(f"the tool call {request.where[1]!r} ran past its deadline, waiting for {key}")
            self._deliver(request.where, False, error)
            return
        self._deliver(request.where, False, self._timeout(branch))

    def _sample_answer(self, request: Request, answer: Any, branch: BranchState) -> SampleResult:
        try:
            result = _sample_result(answer, request.number)
        except Exception:
            branch.tokens.charge(-request.reserved)
            raise
        used = result.input_tokens if result.input_tokens is not None else request.prompt_tokens
        used += (
            result.output_tokens
            if result.output_tokens is not None
            else estimate_tokens(result.text + "".join(json.dumps(c.function.arguments) for c in result.tool_calls))
        )
        branch.tokens.charge(used - request.reserved)
        if request.prompt is not None or request.continues:
            if result.tool_calls:
                reply: Any = AssistantToolCallMessage(content=result.text or None, tool_calls=result.tool_calls)
            else:
                reply = Message(role="assistant", content=result.text)
            branch.messages.extend([request.prompt, reply] if request.prompt is not None else [reply])
        if self.observed:  # the event dumps the whole request (the history): only when someone listens
            self.emit(
                "sample",
                branch,
                number=request.number,
                tracked=request.prompt is not None,
                request=request.sample.model_dump(mode="json", exclude_none=True),
                result=result.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
                tokens=used,
            )
        return result

    def _elicit_answer(self, request: Request, answer: Any, branch: BranchState) -> ElicitResult:
        effect = request.elicit
        parsed = _parse_elicit_answer(answer, effect.key, request.number)
        self.emit(
            "elicit",
            branch,
            seq=request.number,
            request=effect.model_dump(mode="json"),
            answer=parsed.model_dump(mode="json"),
        )
        if parsed.action != "accept":
            return ElicitResult(action=parsed.action)
        try:
            content = request.schema.model_validate(parsed.content)
        except ValidationError as error:
            raise ElicitValidationError(effect.key, format_validation_errors(error), parsed.content) from None
        exchange = ElicitExchange(
            key=effect.key,
            tool_call_id=elicit_call_id(self.call_id, request.number),
            context=request.context,
            content=content.model_dump(mode="json", by_alias=True),
        )
        return ElicitResult(action="accept", content=content, exchange=exchange)

    # -- halting ------------------------------------------------------------------------------

    def halt(self) -> None:
        """Stop the whole run (the call was cancelled): every branch is halted at its yield."""
        if "0" in self.branches:
            self._halt_branch("0")
        self.ready.clear()

    def halt_after(self, error: BaseException) -> None:
        """Halt a run that ends unfinished because of `error`; a failure while halting is noted on `error`."""
        try:
            self.halt()
        except Exception as halting:
            error.add_note(f"also, while halting the run: {type(halting).__name__}: {halting}")

    def _halt_waits(self, waits: Any, failure: BaseException) -> None:
        for wait in list(waits):
            try:
                self._drop(wait)
            except Exception as error:
                failure.add_note(f"also, while halting: {type(error).__name__}: {error}")

    def _drop(self, wait: str) -> None:
        """Give up what something waits on: a request is cancelled, a child halted, a group emptied."""
        if wait in self.requests:
            request = self.requests.pop(wait)
            self.branches[request.branch].state.tokens.charge(-request.reserved)
            self.cancelled.append(wait)
        elif wait in self.groups:
            group = self.groups.pop(wait)
            failure: Exception | None = None
            for inner in group.waiting.values():  # every slot, even after one fails to let go
                try:
                    self._drop(inner)
                except Exception as error:
                    if failure is None:
                        failure = error
                    else:
                        failure.add_note(f"also, while halting: {type(error).__name__}: {error}")
            if failure is not None:
                raise failure
        elif wait in self.calls:
            entry = self.calls.pop(wait)
            self.cancelled.append(wait)  # the driver stops making it
            for other in entry.call.asked.values():
                if other in self.requests:
                    self._drop(other)
            for ident, branch in list(self.branches.items()):
                if branch.parent == ["c", wait]:  # its sub-run
                    self._halt_branch(ident)
        elif wait in self.branches:
            self._halt_branch(wait)

    def _halt_branch(self, ident: str) -> None:
        """GeneratorExit at the branch's yield, innermost branches first; its finally blocks may
        still log and notify, and any other effect is an error, as for CPython's close(). A branch
        is halted even when halting what it waits on fails (that error is raised afterwards), so
        every finally block of the run runs here, once, and none is left to the collector."""
        branch = self.branches[ident]
        if branch.wait is not None:
            try:
                self._drop(branch.wait)
            except Exception as error:
                branch.wait = None
                try:
                    self._halt_branch(ident)
                except Exception as also:
                    error.add_note(f"also, while halting: {type(also).__name__}: {also}")
                raise
        self.emit("halt", branch.state)
        generator = branch.generator
        ok, value = False, GeneratorExit()
        try:
            while True:
                try:
                    effect = generator.send(value) if ok else generator.throw(value)
                except (StopIteration, GeneratorExit):
                    return
                if not isinstance(effect, CLEANUP_EFFECTS):
                    raise RuntimeError(
                        f"{branch.state.name} ignored GeneratorExit: while being halted it yielded "
                        f"{type(effect).__name__}; a finally block may only log and notify during a halt"
                    )
                self._cleanup_effect(effect, branch.state)
                ok, value = True, None
        finally:
            del self.branches[ident]
            if branch.parent is not None:
                self.emit("branch_end", branch.state, error="halted")

    def _not_an_effect(self, generator: Any, branch: BranchState, kind: str) -> EffectTypeError:
        frame = getattr(generator, "gi_frame", None)
        if frame is not None:
            place = f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"
        else:
            place = getattr(generator, "source_location", "an unknown line")
        return EffectTypeError(
            f"{self.tool}: {branch.name} yielded a {kind} at {place}, which is not an "
            f"effect; yield what ctx makes (ctx.sample, ctx.elicit, ctx.log, ctx.notify, ctx.branch, ctx.all)"
        )


def _failed_result(tool_call_id: str, error: BaseException) -> ToolResultMessage:
    """The tool result a model's tool_use gets when its call failed: what went wrong."""
    return ToolResultMessage(tool_call_id=tool_call_id, content=f"error: {type(error).__name__}: {error}")


def _allowed(tools: tuple[str, ...] | None, server: str | None, name: str) -> bool:
    """Whether a branch that may call `tools` (None: any) may call `name` (of `server`, None: this one)."""
    if tools is None:
        return True
    if server is None:
        return name in tools or "*" in tools
    return f"{server}:{name}" in tools or f"{server}:*" in tools


def _narrowed(parent: tuple[str, ...] | None, own: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """A child branch's tools: its own list, within its parent's (a branch cannot give itself more)."""
    if own is None:
        return parent
    if parent is None:
        return own
    kept: list[str] = []
    for entry in own:
        server, name = _split_tool(entry)
        if name == "*":  # all of a server's: as many of them as the parent may call
            kept += [p for p in parent if _split_tool(p)[0] == server or p == entry]
        elif _allowed(parent, server, name):
            kept.append(entry)
    return tuple(dict.fromkeys(kept))


def _split_tool(entry: str) -> tuple[str | None, str]:
    server, sep, name = entry.partition(":")
    return (server, name) if sep else (None, entry)


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _message_text(message: Any) -> str:
    text = message.content or ""
    if type(message) is AssistantToolCallMessage:
        for call in message.tool_calls:
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
        answer = _client_model(SampleResult, answer, f"sample #{number}: the client's answer is not a SampleResult")
    if not isinstance(answer, SampleResult):
        raise ClientAnswerError(
            f"sample #{number}: the client answered with a {type(answer).__name__}; "
            f"expected a SampleResult, a dict of its fields, or the text as a str"
        )
    for index, call in enumerate(answer.tool_calls):
        _client_json(call.function.arguments, f"sample #{number}: tool_calls[{index}].function.arguments")
    return answer


def _client_model(model: Any, answer: dict, problem: str) -> Any:
    """A client's dict answer as `model`; ClientAnswerError lists each field that does not fit."""
    try:
        return model.model_validate(answer)
    except ValidationError as error:
        lines = "\n".join(f"  {e}" for e in format_validation_errors(error))
        raise ClientAnswerError(f"{problem}:\n{lines}") from None


def _client_json(value: Any, where: str) -> None:
    try:
        check_json_data(value, where, "the client must answer with JSON data")
    except JsonDataError as error:
        raise ClientAnswerError(str(error)) from None


def _parse_elicit_answer(answer: Any, key: str, seq: int) -> ElicitAnswer:
    where = f"elicit #{seq} ({key!r})"
    if isinstance(answer, ElicitAnswer):
        parsed = answer
    elif isinstance(answer, dict):
        parsed = _client_model(ElicitAnswer, answer, f"{where}: the client's answer has the wrong shape")
    else:
        raise ClientAnswerError(
            f"{where}: the client answered with a {type(answer).__name__}; "
            f"expected {{'action': 'accept'|'decline'|'cancel', 'content': {{...}}}}"
        )
    if parsed.action == "accept" and parsed.content is None:
        raise ClientAnswerError(f"{where}: an accepted elicitation needs content (a dict of the form's fields)")
    _client_json(parsed.content, f"{where}: content")
    return parsed
