"""Guided mode: for a client that can neither sample nor elicit, the calling model answers.

(The seeds' bidirectional guided workflows.) When a tool needs what the client lacks, the
call returns the run's pending requests as its result: what each asks, how to answer, and a
`next_action` naming the `branchc_resume` tool and a `state_id`. The model answers (a sample
as the text it would reply; an elicitation by asking its user and passing the form's content,
or "decline" / "cancel"), calls `branchc_resume`, and the run goes on, as often as it asks.

How a waiting run is shown and its answers read is a `Guide`: `RequestsGuide` (above: every pending
request, answered through `branchc_resume` by its key) or a workflow's steps (workflow_tools.py: the
seed's step results, answered through `workflow_submit` and `workflow_continue`); the runs are held alike.

The run waits on the server meanwhile, as a saved run under an unguessable id that is good
for one continuation and expires; an unknown, used or expired id is a clear tool error.

Waiting runs are held by a `WaitingRuns` store: keep / take / put_back / release (and admit, sweep),
so a durable store can hold them instead of this process (`MemoryWaitingRuns`). Its caps bound what
waiting calls can hold: at most `max_runs` runs and `max_bytes` of saved runs, and at most
`max_run_bytes` (4 MiB by default, never more than `max_bytes`) for any one run. A run being resumed
counts against the caps while its round goes on (taken, it keeps its slot and its size reserved until
it waits again, is put back, or ends), so a newcomer cannot fill the room it will need to wait again.
A start that would go past a cap is refused (before `before()` runs) with an error that says so
(the caps are checked again when the run is kept: a start that raced past them is halted there, its
cleanup run once). A run that continues takes over its own reservation, so the count cannot grow by
it; its new size is checked against both byte caps, and a run that no longer fits (a loop that the
client keeps resuming grows its saved state) is ended there with a tool error that says so, halted
so its cleanup runs once. Expired runs are swept first (on every call), and live ones are never
evicted to make room, so a run that waits is not lost to a newcomer.

A refused answer (a key that was not asked, a missing one, a sample answered with anything but
text, a form answer that does not fit its schema) is refused before anything is fed: the run
still waits under the same state id.

A tool that declares `output=Model` is listed, for a client guided mode answers for, with an
output schema that also admits the "waiting for answers" guide (anyOf), so a client that
validates structured results (as the SDK's client does) accepts both; the final result is still
checked against the model on the server.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp.server import ServerRequestContext
from pydantic import BaseModel, ValidationError

from ..runtime import tracing
from ..runtime.builds import load_run_or_kept
from ..runtime.errors import BranchcError, format_validation_errors
from ..runtime.machine import Machine, Request
from ..runtime.messages import Message
from ..runtime.runstate import RunStateError, dump_run
from ..runtime.tool import Tool
from .auth import current_principal
from .durable import store_io
from .elicitation import form_schema
from .expiry import end_abandoned
from .results import error_result
from .rounds import AnswerError, check_answered, feed, guarded, released_unless_fed, start_run

__all__ = [
    "REQUESTS",
    "RESUME_TOOL",
    "Guide",
    "GuidedFullError",
    "GuidedRunTooLargeError",
    "GuidedRuns",
    "MemoryWaitingRuns",
    "RequestsGuide",
    "WaitingRun",
    "WaitingRuns",
    "guided_output_schema",
    "resume_tool",
]

RESUME_TOOL = "branchc_resume"


def resume_tool() -> types.Tool:
    return types.Tool(
        name=RESUME_TOOL,
        description=(
            "Continue a tool run that is waiting for your answers: pass the state_id it gave you and "
            "an answer for each of its requests, keyed by the request's key."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "state_id": {"type": "string", "description": "The state_id of the waiting run."},
                "answers": {
                    "type": "object",
                    "description": "Request key -> answer: a sample's reply text; a form's content, or \"decline\".",
                },
            },
            "required": ["state_id", "answers"],
        },
    )


class GuidedFullError(BranchcError, RuntimeError):
    """Guided mode holds as many waiting runs (or bytes of them) as it may: a new run is refused, and a
    continuing run that no longer fits is ended."""


class GuidedRunTooLargeError(GuidedFullError):
    """One run's saved state is larger than a waiting run may be (`max_run_bytes`): it cannot wait."""


DEFAULT_MAX_RUN_BYTES = 4 * 2**20


@dataclass(frozen=True)
class WaitingRun:
    """A guided run waiting for answers: its tool, the saved run (runstate.dump_run's text), when it expires."""

    tool: str
    saved: str
    expires: float
    meta: Any = dataclasses.field(default=None, compare=False)  # a store's RunMeta for it (durable.run_meta)
    owner: str | None = None  # the principal that started the run (None: no one authenticated)

    @property
    def size(self) -> int:
        return len(self.saved.encode())


class WaitingRuns(Protocol):
    """Where waiting guided runs are held, by state id. An id names a run once: `take` hands it out, and
    it no longer waits under that id; but until its round ends it keeps its place (its slot and its
    size count against the caps), which the round ends with exactly one of `put_back` (its answers
    were refused), `keep(..., taken=id)` (it waits again, under a new id) or `release` (it ended)."""

    def admit(self) -> None:
        """Raise GuidedFullError when a new run could not wait (checked before the run starts)."""

    def keep(self, run: WaitingRun, *, new: bool, taken: str | None = None) -> str:
        """Hold `run` under a new unguessable id, or raise GuidedFullError when it does not fit (the caps
        apply to every run). `new`: a run that did not wait before; `taken`: the id a continuing run was
        taken under, whose place it takes over (that reservation ends here, whether or not it fits)."""

    def take(self, ident: str, owner: str | None = None) -> WaitingRun | None:
        """The run waiting under `ident`, no longer held but still counted (reserved) until `put_back`,
        `keep(..., taken=ident)` or `release`; None when unknown, already taken, expired, or started by
        another principal than `owner` (then it is left waiting, as if unknown)."""

    def put_back(self, ident: str, run: WaitingRun) -> None:
        """Hold `run` again under `ident` (its answers were refused; it keeps its expiry and its place)."""

    def release(self, ident: str) -> None:
        """End the reservation of the run taken under `ident` (its round ended it); nothing if there is none."""

    def sweep(self) -> int:
        """Forget the expired runs; how many."""


class MemoryWaitingRuns:
    """Waiting runs in this process's memory, capped by count and by the size of their saved text, in all
    and per run (`max_run_bytes`: 4 MiB unless given, and at most `max_bytes`). Runs taken and not yet
    settled (their round goes on) count too: `bytes` and `reserved`."""

    def __init__(self, max_runs: int = 1000, max_bytes: int = 256 * 2**20, max_run_bytes: int | None = None) -> None:
        if max_runs < 1 or max_bytes < 1 or (max_run_bytes is not None and max_run_bytes < 1):
            raise ValueError(
                "guided mode needs room for at least one waiting run: max_runs, max_bytes and max_run_bytes >= 1"
            )
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.max_run_bytes = min(max_bytes, DEFAULT_MAX_RUN_BYTES if max_run_bytes is None else max_run_bytes)
        self.runs: dict[str, WaitingRun] = {}
        self.taken: dict[str, int] = {}  # id -> size of a run taken whose round goes on
        self.bytes = 0  # of the runs held and of those taken
        self._next_expiry = float("inf")

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def reserved(self) -> int:
        return len(self.taken)

    def sweep(self) -> int:
        now = time.time()
        if now < self._next_expiry:
            return 0
        expired = [ident for ident, run in self.runs.items() if run.expires <= now]
        for ident in expired:
            self._drop(ident)
        self._next_expiry = min((run.expires for run in self.runs.values()), default=float("inf"))
        return len(expired)

    def admit(self, size: int = 0) -> None:
        self.sweep()
        self._fits_alone(size, new=True)
        if len(self.runs) + len(self.taken) >= self.max_runs:
            answered = f" and {len(self.taken)} are being answered" if self.taken else ""
            raise GuidedFullError(
                f"guided mode is full: {len(self.runs)} runs wait for answers{answered}, the most it holds "
                f"(--guided-max-runs {self.max_runs}); answer a waiting run, or try again when one expires"
                f"{self._expiry_hint()}"
            )
        if self.bytes + size > self.max_bytes:
            raise GuidedFullError(
                f"guided mode is full: its waiting runs hold {self.bytes} bytes"
                f"{f' and this one needs {size} more' if size else ''}, past the most it holds "
                f"(--guided-max-mb, {self.max_bytes} bytes); answer a waiting run, or try again when one expires"
            )

    def keep(self, run: WaitingRun, *, new: bool, taken: str | None = None) -> str:
        place = self.taken.pop(taken, None) if taken is not None else None
        if place is not None:
            self.bytes -= place  # the run's reservation ends here: it is kept in its stead, or it ends
        self._fits_alone(run.size, new=new)
        if new or place is None:
            self.admit(run.size)  # a run with no place of its own needs a new one
        else:
            self.sweep()
            if self.bytes + run.size > self.max_bytes:
                raise GuidedFullError(
                    f"guided mode is full: this run's saved state grew to {run.size} bytes and the other waiting "
                    f"runs hold {self.bytes}, past the most it holds (--guided-max-mb, {self.max_bytes} bytes); "
                    f"the run cannot wait for more answers and was ended; call the tool again to start over"
                )
        ident = secrets.token_urlsafe(18)
        self._hold(ident, run)
        return ident

    def take(self, ident: str, owner: str | None = None) -> WaitingRun | None:
        self.sweep()
        if ident not in self.runs or self.runs[ident].owner != owner:
            return None
        run = self.runs.pop(ident)
        if run.expires <= time.time():
            self.bytes -= run.size
            end_abandoned(run)
            return None
        self.taken[ident] = run.size  # its place (count and bytes) stays until its round ends
        return run

    def put_back(self, ident: str, run: WaitingRun) -> None:
        self.release(ident)
        self._hold(ident, run)

    def release(self, ident: str) -> None:
        self.bytes -= self.taken.pop(ident, 0)

    def _fits_alone(self, size: int, *, new: bool) -> None:
        if size > self.max_run_bytes:
            ended = "cannot start waiting" if new else "cannot wait for more answers"
            raise GuidedRunTooLargeError(
                f"this run's saved state is {size} bytes, past the most one waiting guided run may hold "
                f"({self.max_run_bytes} bytes); the run {ended} and was ended; call the tool again to start over "
                f"(a run that keeps what each round answered, in a loop, grows with every round)"
            )

    def _expiry_hint(self) -> str:
        if self._next_expiry == float("inf"):
            return ""
        return f" (in {max(self._next_expiry - time.time(), 0):.0f} s at most)"

    def _hold(self, ident: str, run: WaitingRun) -> None:
        self.runs[ident] = run
        self.bytes += run.size
        self._next_expiry = min(self._next_expiry, run.expires)

    def _drop(self, ident: str) -> None:
        """Let go of an expired run, ended: its finally blocks run once, here (nothing else holds it)."""
        run = self.runs.pop(ident)
        self.bytes -= run.size
        end_abandoned(run)


class GuidedRuns:
    """Runs waiting for the calling model, by state id; each id continues a run once."""

    def __init__(self, ttl: float = 1800, store: WaitingRuns | None = None) -> None:
        self.ttl = ttl
        self.store: WaitingRuns = store if store is not None else MemoryWaitingRuns()
        # in a continuation store: what each waiting run's record says of it (durable.run_meta; set by
        # create_server and mount). A run saved by another build is taken when its points are compatible
        # (continuation/snapshots.py `_moved`), else loading it says which point stops it.
        self.describe: Any = None

    async def io(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A call of the waiting runs' store: on a worker thread when it blocks (a continuation store: file or
        network), so the event loop serves other calls meanwhile; in place for the in-memory one."""
        if getattr(self.store, "blocking", False):
            return await store_io(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def keep(
        self, tool: str, handoff: Any, machine: Machine, *, new: bool = True, taken: str | None = None
    ) -> str:
        meta = self.describe(machine) if self.describe is not None else None
        saved = WaitingRun(tool, dump_run(handoff, machine), time.time() + self.ttl, meta, current_principal())
        return await self.io(self.store.keep, saved, new=new, taken=taken)

    async def take(self, ident: Any) -> WaitingRun:
        """The waiting run, which no longer waits under `ident`. Another principal's run is refused exactly as
        an unknown id is (the message is the same, and says nothing of the run)."""
        found = await self.io(self.store.take, ident, current_principal()) if isinstance(ident, str) else None
        if found is None:
            raise AnswerError(
                f"state_id {ident!r} is unknown, already used or expired (runs wait {self.ttl:.0f} s); "
                f"call the tool again to start over"
            )
        return found

    async def start(
        self, bridge: Any, ctx: ServerRequestContext, tool: Tool, model: BaseModel, guide: Guide | None = None
    ) -> Any:
        """Start `tool`'s run; while it waits, each result is `guide`'s (the pending requests by default)."""
        guide = guide or REQUESTS
        try:
            await self.io(self.store.admit)  # refused before before() runs: nothing of the tool has happened
        except GuidedFullError as error:
            return error_result(str(error))

        async def ask_new(ctx: ServerRequestContext, handoff: Any, machine: Machine) -> types.CallToolResult:
            return await self._ask(ctx, handoff, machine, guide, new=True)

        with tracing.observed_round(tool.name, "guided", number=0) as round_:
            return round_.ended(
                await guarded(start_run(bridge, ctx, tool, model, check=False), ask_new, bridge, ctx, tool)
            )

    async def resume(
        self, bridge: Any, ctx: ServerRequestContext, arguments: dict[str, Any] | None, guide: Guide | None = None
    ) -> Any:
        """Continue the run waiting under `arguments["state_id"]` with the answers `guide` reads from them."""
        guide = guide or REQUESTS
        arguments = arguments or {}
        ident = arguments.get("state_id")
        try:
            waiting = await self.take(ident)
        except AnswerError as error:
            return error_result(str(error))
        # taken, the run keeps its place in the store until this round settles it: put back (answers
        # refused), kept again (it waits for more), or released here (it ended: done, failed, cancelled)
        settled = False  # put back
        tool = bridge.tools.get(waiting.tool)
        try:
            if tool is None:
                raise AnswerError(f"state_id {ident!r} is a run of the tool {waiting.tool!r}, which this server lacks")
            guide.check(tool)
        except BranchcError as error:  # another tool's: it waits on, for a server that has it
            await self.io(self.store.put_back, ident, waiting)
            return error_result(str(error))

        try:  # in this build, or else in the kept build that saved it (runtime/builds.py)
            loaded: Any = load_run_or_kept(waiting.saved, waiting.meta and waiting.meta.extra.get("build"))
        except Exception as error:  # raised in the round, whose result says it
            loaded = error
        build = loaded[2] if isinstance(loaded, tuple) else None
        if build is not None and waiting.tool not in build.tools:  # no such tool at module level there
            loaded[1].release()
            loaded = RunStateError(f"the kept build {build.id} that saved it has no tool {waiting.tool!r}")
            build = None
        if build is not None:
            tool = build.tools[waiting.tool]

        async def restored() -> tuple[Any, Machine]:
            nonlocal settled
            if isinstance(loaded, RunStateError):  # no build here can take its points: it waits on, for one that can
                settled = True
                await self.io(self.store.put_back, ident, waiting)
            if isinstance(loaded, Exception):
                raise loaded
            handoff, machine, _ = loaded
            try:
                with released_unless_fed(machine):
                    answers = guide.answers(tool, machine, arguments)
                    check_answered(machine, answers.keys(), "answers")
                    feed(machine, {key: _answer(machine.requests[key], answers[key]) for key in answers})
            except AnswerError as error:
                # nothing was fed: the run still waits under its state id, for answers that fit
                settled = True
                await self.io(self.store.put_back, ident, waiting)
                still = "(the run still waits: answer again with this state_id)"
                raise AnswerError(f"{error}\n{still}") from None
            return handoff, machine

        async def ask_again(ctx: ServerRequestContext, handoff: Any, machine: Machine) -> types.CallToolResult:
            return await self._ask(ctx, handoff, machine, guide, taken=ident)  # keep() takes the place over, or ends it

        try:
            with tracing.observed_round(tool.name, "guided") as round_:
                if build is None:
                    return round_.ended(await guarded(restored(), ask_again, bridge, ctx, tool))
                with build.reading():
                    return round_.ended(await guarded(restored(), ask_again, bridge, ctx, tool))
        finally:
            if not settled:  # put back, the id may already be taken again, by another round: not ours to end
                with anyio.CancelScope(shield=True):
                    await self.io(self.store.release, ident)

    async def _ask(
        self,
        ctx: ServerRequestContext,
        handoff: Any,
        machine: Machine,
        guide: Guide,
        *,
        new: bool = False,
        taken: str | None = None,
    ) -> types.CallToolResult:
        """The run's wait as `guide` puts it for the calling model; the run is kept under a new state id
        (guarded() then releases this live copy: the run goes on from the kept one). The store's caps
        apply to every run: `new`, a run that starts waiting; `taken`, the id a continuing run was taken
        under (its place is taken over). Past a cap the store raises: guarded() halts the run (its
        cleanup runs once) and the call is a tool error that says why."""
        state_id = await self.keep(machine.tool, handoff, machine, new=new, taken=taken)
        try:
            shown = guide.waiting(machine, state_id)
        except BaseException:  # the run is halted (guarded): the copy just kept must not wait on, given to nobody
            with anyio.CancelScope(shield=True):
                if await self.io(self.store.take, state_id, current_principal()) is not None:
                    await self.io(self.store.release, state_id)
            raise
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(shown, ensure_ascii=False, indent=1))],
            structured_content=shown,
        )


class Guide(Protocol):
    """How a waiting run is put to the calling model, and how its answers are read back."""

    def check(self, tool: Tool) -> None:
        """Raise AnswerError when a run of `tool` cannot be continued through this guide's tool."""

    def waiting(self, machine: Machine, state_id: str) -> dict[str, Any]:
        """The result shown while the run waits under `state_id` (JSON data)."""

    def answers(self, tool: Tool, machine: Machine, arguments: dict[str, Any]) -> dict[str, Any]:
        """Request key -> answer (a sample's text; a form's content, "decline" or "cancel"), read from the
        resume call's `arguments`; AnswerError when they are refused (nothing is fed, the run waits on)."""


class RequestsGuide:
    """Guided mode for any tool: every pending request, answered through `branchc_resume` by its key."""

    def check(self, tool: Tool) -> None:
        return None

    def waiting(self, machine: Machine, state_id: str) -> dict[str, Any]:
        requests = [_describe(request) for request in machine.pending]
        return {
            "status": "waiting_for_answers",
            "tool": machine.tool,
            "instruction": (
                f"The tool {machine.tool} needs answers before it can go on. Answer every request below, then "
                f"call {RESUME_TOOL} with this state_id and your answers keyed by each request's key."
            ),
            "requests": requests,
            "next_action": {
                "tool": RESUME_TOOL,
                "arguments": {"state_id": state_id, "answers": {r["key"]: r["answer_with"] for r in requests}},
            },
            "state_id": state_id,
        }

    def answers(self, tool: Tool, machine: Machine, arguments: dict[str, Any]) -> dict[str, Any]:
        answers = arguments.get("answers")
        if not isinstance(answers, dict):
            raise AnswerError("answers: give an object: request key -> answer")
        return answers


REQUESTS = RequestsGuide()


def _describe(request: Request) -> dict[str, Any]:
    if request.kind == "sample":
        sample = request.sample
        return {
            "key": request.key,
            "kind": "sample",
            "instruction": "Reply as the assistant to the conversation below; your answer is the reply's text.",
            "system_prompt": sample.system_prompt,
            "messages": [_plain(m) for m in sample.messages],
            "answer_with": "<your reply, as a string>",
        }
    ask = request.elicit
    return {
        "key": request.key,
        "kind": "elicit",
        "instruction": (
            "Ask your user the question below and answer with what they give, as an object that fits the "
            'schema; answer "decline" if they decline and "cancel" if they dismiss it.'
        ),
        "message": ask.message,
        "schema": form_schema(ask.requested_schema, ask.requested_schema.get("title", ask.key)),
        "answer_with": '<an object matching the schema, or "decline">',
    }


def _plain(message: Any) -> dict[str, Any]:
    if isinstance(message, Message):
        return {"role": message.role, "content": message.content}
    return message.model_dump(mode="json", exclude_none=True)


def _answer(request: Request, answer: Any) -> Any:
    where = f"answers[{request.key!r}]"
    if request.kind == "sample":
        if not isinstance(answer, str):
            raise AnswerError(f"{where}: a sample is answered with the reply's text (a string)")
        return answer
    if answer in ("decline", "cancel"):
        return {"action": answer}
    if not isinstance(answer, dict):
        raise AnswerError(f'{where}: a form is answered with an object matching its schema, or "decline"')
    if request.schema is not None:  # refused here, before anything is fed: the state id stays good
        try:
            request.schema.model_validate(answer)
        except ValidationError as error:
            fields = "\n".join(f"  {line}" for line in format_validation_errors(error))
            raise AnswerError(f"{where}: the answer does not fit the form's schema:\n{fields}") from None
    return {"action": "accept", "content": answer}


_WAITING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "WaitingForAnswers",
    "description": f"The run waits for answers: answer each request, then call {RESUME_TOOL}.",
    "properties": {
        "status": {"const": "waiting_for_answers"},
        "tool": {"type": "string"},
        "instruction": {"type": "string"},
        "requests": {"type": "array", "items": {"type": "object"}},
        "next_action": {"type": "object"},
        "state_id": {"type": "string"},
    },
    "required": ["status", "requests", "next_action", "state_id"],
}


def guided_output_schema(output_schema: dict[str, Any]) -> dict[str, Any]:
    """The output schema listed for a tool that guided mode runs: its own result's, or the guide a
    waiting call returns (the model's `$defs` stay at the root, where its `$ref`s point)."""
    own = {key: value for key, value in output_schema.items() if key != "$defs"}
    listed: dict[str, Any] = {"type": "object", "anyOf": [own, _WAITING_SCHEMA]}
    if "$defs" in output_schema:
        listed["$defs"] = output_schema["$defs"]
    return listed
