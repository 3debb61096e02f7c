"""Durable rounds: the 2026-07-28 era with a continuation store (branchc/store/).

Without a store a round's `request_state` is the whole run, so a client may replay it (the same round
runs again, or a run forks from an old round). With one, each round's run is checkpointed in the store,
atomically and before its `InputRequiredResult` leaves, and the `request_state` is a short reference:
``r1:{"run": ID, "round": N, "v": VERSION}`` (sealed and bound to the tool and its arguments by the SDK's
`RequestStateBoundary`, as before), VERSION being the record's version that waits for round N: a record
older than that (a backup restored, a row rolled back) is refused, naming the run, before anything of it
is read. The record says which round the run waits for (meta.extra["round"]),
and keeps the last answered round's number and answers digest (meta.extra["answered"], meta.answers_digest),
and for a round that ended the run, its response (meta.response); a round that asked for more is answered
again from the saved run, which waits for just that (its reply is not stored: it holds the whole history).
A call for round N then:

- finds the run waiting for round N: its answers are checked against what was asked (refused: nothing
  is written, the same request_state stays good), then the round is claimed by a compare-and-swap
  (waiting -> running), so of two replicas given the same round at once exactly one runs it; the
  round's outcome is written in one checkpoint (waiting for round N+1, or done / failed with the final
  response kept for retries until the run expires);
- finds round N being answered (by another replica, or an earlier attempt of this call): the same
  answers wait for its response (up to `wait_for_round` seconds, then a "being answered, retry" error);
  other answers are refused; a claim whose server died mid-round is taken over: at once when that server
  was on this host (its pid is gone, bridge/holder.py), else once the claim is older than `lease` seconds;
- finds round N answered already: the same answers get the stored response again (nothing runs twice,
  `after` included); other answers are refused;
- finds the run past round N: refused, the run has moved on (an old request_state never forks a run).

A round interrupted before its outcome is written (the client went away, the store failed) puts the
run back to waiting for round N, so it can be sent again. A round that ran but whose last write the store
could not take (it is down: StoreUnavailableError) keeps that write and retries it in a thread until the
store answers (for up to `lease` seconds): its outcome, so the retried round gets the response and nothing
runs twice (a final round's result is sent at once; a round that asks more answers with an error saying to
send it again, as its request_state must not leave before the run is saved), or the release of its claim,
so the round is not held up for the lease. What each record keeps for inspection
(`branchc runs`): the era, the hash of the tool's compiled code (checked on load: a run saved by other
code is refused, naming the run), where each branch waits, the pending requests, the build folder and
the tool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server import ServerRequestContext
from pydantic import BaseModel

from ..continuation.codec.common import saved_module
from ..continuation.generator import suspended_at
from ..continuation.registry import meta_of
from ..runtime import tracing
from ..runtime.builds import build_id, builds_root, keep_build, load_run_or_kept, reading_kept, saved_build_of
from ..runtime.client import ElicitRequest, SampleRequest
from ..runtime.errors import (
    ClientAnswerError,
    ToolCallError,
    ToolCallInterruptedError,
    ToolNotAllowedError,
    ToolTimeoutError,
)
from ..runtime.machine import Machine
from ..runtime.runstate import RunStateError, dump_run
from ..runtime.tool import Tool
from ..runtime.toolcalls import ToolResult
from ..store.base import (
    RunMeta,
    RunNotFoundError,
    RunRecord,
    RunStore,
    StaleRunError,
    StoreError,
    StoreUnavailableError,
    WaitPoint,
)
from ..store.keys import KeyRing, private_folder, state_keys
from ..store.url import open_store
from .auth import current_principal
from .holder import holder, holder_alive
from .quotas import QuotaError, RunCaps
from .results import error_result
from .rounds import (
    AnswerError,
    _answer,
    _input_requests,
    bridge_warm,
    check_answered,
    feed,
    guarded,
    released_unless_fed,
    start_run,
)

__all__ = [
    "REF_PREFIX",
    "DurableRounds",
    "default_store_url",
    "run_meta",
    "serving_store",
    "store_io",
    "stored_response",
    "state_dir",
    "store_guided_runs",
    "tool_build",
    "tool_code_hash",
]

ERA = "2026-07-28"
REF_PREFIX = "r1:"  # a request_state that names a run in the store (format 1)
SUMMARY_CHARS = 200


# -- where serving keeps its runs by default ------------------------------------------------------------


def state_dir() -> Path:
    """`$BRANCHC_STATE_DIR`, else `$XDG_STATE_HOME/branchc`, else ~/.local/state/branchc."""
    if folder := os.environ.get("BRANCHC_STATE_DIR"):
        return Path(folder).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "branchc"


def default_store_url() -> str:
    """The embedded store HTTP serving uses unless told otherwise: runs.db in the state folder."""
    return "sqlite:///" + str((state_dir() / "runs.db").resolve())


def serving_store(
    url: str | None, *, http: bool, keys: KeyRing | None = None, history: str | None = None
) -> RunStore | None:
    """The store `branchc serve --store URL` names; with no URL, the default SQLite file over HTTP (its
    folder created if missing, mode 0700) and none over stdio. Its records are sealed with `keys`: by
    default `state_keys($BRANCHC_STATE_KEY, state_dir())`, the key made once and kept in the state folder
    when no key is given (serve passes `state_keys(--state-key, state_dir())`). `history`: the past checkpoints
    of each run it keeps (serve's --history; None: the URL says, else all). StoreURLError /
    StoreUnavailableError / StoreKeyError say what is wrong."""
    if url is None:
        if not http:
            return None
        private_folder(state_dir(), "the state folder")
        url = default_store_url()
    elif isinstance(url, str) and url.strip().lower() == "none":
        return None
    if keys is None:
        keys = state_keys(os.environ.get("BRANCHC_STATE_KEY"), state_dir())
    return open_store(url, keys, history=history)


STORE_THREADS = 8  # store calls at once, per process: writes queue up at the store anyway, and each thread
# that ever called a store keeps memory (a connection's page cache, a malloc arena) long after
_limiter: anyio.CapacityLimiter | None = None


async def store_io(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, a synchronous store call, on a worker thread, at most STORE_THREADS at once."""
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(STORE_THREADS)
    with tracing.store_operation(getattr(fn, "__name__", "call").lstrip("_")):
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=_limiter)


# -- what a record says about its run --------------------------------------------------------------------


def tool_code_hash(tool: Tool) -> str:
    """A hash of the compiled functions' code hashes (as the build manifest records them) of the modules the
    tool's phases are defined in, and of the modules of every compiled function those modules hold (worked out
    once per tool: a served tool's code does not change under it)."""
    return _facts(tool)[0]


def _facts(tool: Tool) -> tuple[str, str]:
    """(tool_code_hash, tool_build) of a served tool, worked out once (each walks modules or the disk). Every
    KEEP_EVERY seconds its build is kept again (`runs gc` drops no build a server keeps)."""
    known = _TOOL_FACTS.get(id(tool))
    if known is None or known[0] is not tool:
        kept = saved_build_of(getattr(tool.client_fn, "__module__", "") or "")  # a kept build's tool: kept already
        folder = None if kept else _folder(tool)
        build = kept or (_kept(folder) if folder else "")
        known = _TOOL_FACTS[id(tool)] = (tool, _code_hash(tool), build, folder, time.monotonic())
    elif known[3] and time.monotonic() - known[4] > KEEP_EVERY:
        _kept_again(known[3], known[2])
        known = _TOOL_FACTS[id(tool)] = (*known[:4], time.monotonic())
    return known[1], known[2]


def _kept(folder: Path) -> str:
    """The build's id, once it is kept in the cache; a cache that cannot take it is said on stderr, and serving
    goes on (its runs then cannot finish on it after a deploy)."""
    try:
        return keep_build(folder)
    except Exception as error:  # a cache it cannot write, a build it cannot read (or parse): serving goes on
        print(f"branchc: the build {folder} cannot be kept in the cache ({error}); after a deploy, its runs can "
              f"only move or migrate", file=sys.stderr, flush=True)  # fmt: skip
        try:
            return build_id(folder)
        except (OSError, ValueError, KeyError):
            return ""


def _kept_again(folder: Path, ident: str) -> None:
    """Keep the served build `ident` again (`runs gc` then leaves it): only the code this server imported, never
    what its folder holds by now (a rebuild in place would be another build, kept by whoever serves it)."""
    with contextlib.suppress(Exception):
        if (builds_root() / ident).is_dir():
            os.utime(builds_root() / ident)
        elif build_id(folder) == ident:
            keep_build(folder)  # dropped meanwhile (a `runs gc` elsewhere): kept anew


KEEP_EVERY = 600.0
_TOOL_FACTS: dict[int, tuple[Tool, str, str, Path | None, float]] = {}


def _code_hash(tool: Tool) -> str:
    modules: dict[str, dict[str, str]] = {}
    roots = [fn for fn in (tool.before_fn, tool.client_fn, tool.after_fn) if fn is not None]
    for fn in roots:
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        for value in [fn, *(vars(module).values() if module is not None else ())]:
            table = getattr(value, "__branchc_table__", None)
            module_name = saved_module(getattr(value, "__module__", None) or "")  # a kept build's, as it names it
            if table is None or module_name in modules:
                continue
            with contextlib.suppress(AttributeError, KeyError, TypeError):
                functions = table[0]["functions"]
                modules[module_name] = {name: info["hash"] for name, info in functions.items()}
    text = json.dumps(modules, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _built(record: RunRecord) -> Any:
    """The build a record says saved its run (an id; a folder's path in records of older versions)."""
    return record.meta.extra.get("build")


def tool_build(tool: Tool) -> str:
    """The id of the build the tool's client phase was imported from, kept in the cache (runtime/builds.py); ""
    when it was not imported from a build."""
    return _facts(tool)[1]


def _folder(tool: Tool) -> Path | None:
    module = sys.modules.get(getattr(tool.client_fn, "__module__", "") or "")
    origin = getattr(getattr(module, "__spec__", None), "origin", None)  # __file__ names the source
    if module is None or not isinstance(origin, str):
        return None
    folder = Path(origin).resolve().parent
    depth = module.__name__.count(".") + (Path(origin).name == "__init__.py")
    for _ in range(depth):
        folder = folder.parent
    return folder if (folder / "branchc.json").is_file() else None


def _clip(text: Any) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _waits(machine: Machine) -> tuple[WaitPoint, ...]:
    points = []
    for ident, branch in machine.branches.items():
        if branch.wait is None or not branch.wait.startswith(("sample-", "elicit-")):
            continue  # waits on a child branch or a group: the child says where it waits
        where = suspended_at(branch.generator)
        code = getattr(branch.generator, "gi_code", None)
        label = where.get("label")
        points.append(
            WaitPoint(
                ident,
                str(where.get("function", "")),
                int(where.get("line", 0) or 0),
                getattr(code, "co_filename", "") or "",
                meta_of(code).points.get(label, "") if label else "",
            )
        )
    return tuple(points)


def _pending(machine: Machine) -> tuple[dict[str, Any], ...]:
    out = []
    for request in machine.pending:
        if request.kind == "sample":
            messages = request.sample.messages if request.sample is not None else []
            last = messages[-1] if messages else None
            content = getattr(last, "content", last)
            if not isinstance(content, str):
                content = getattr(content, "text", None) or json.dumps(json_data(content))[:SUMMARY_CHARS]
            summary = _clip(content)
        else:
            summary = _clip(request.elicit.message if request.elicit is not None else "")
        out.append({"key": request.key, "kind": request.kind, "branch": request.branch, "summary": summary})
    return tuple(out)


def json_data(value: Any) -> Any:
    """A value as JSON data, for metadata and history: models dumped, anything else JSON lacks as its repr."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [json_data(item) for item in value]
    return value if isinstance(value, (str, int, float, bool, dict, type(None))) else repr(value)


def run_meta(era: str, tool: Tool, machine: Machine, **fields: Any) -> RunMeta:
    """The metadata of a record of `machine`'s run (waiting): era, code hash, waits, pending, build and tool;
    `fields` adds RunMeta fields (answers_digest, response) and entries of extra."""
    from ..continuation.snapshots import VERSION

    extra = {"build": tool_build(tool), "tool": tool.name, **fields.pop("extra", {})}
    return RunMeta(
        era=era,
        run_format=VERSION,
        code_hash=tool_code_hash(tool),
        waits=_waits(machine),
        pending=_pending(machine),
        extra=extra,
        **fields,
    )


def moved_meta(meta: RunMeta, tool: Tool, machine: Machine) -> RunMeta:
    """A waiting run's metadata once it is saved by `tool`'s build (`branchc runs migrate`): the code hash, the
    format, where each branch waits and the build change; its era, round and answers stay."""
    from ..continuation.snapshots import VERSION

    extra = {**meta.extra, "build": tool_build(tool)}
    return dataclasses.replace(
        meta, run_format=VERSION, code_hash=tool_code_hash(tool), waits=_waits(machine), extra=extra
    )


def store_guided_runs(runs: Any, tools: Any) -> Any:
    """Guided runs (a GuidedRuns over StoreWaitingRuns) whose records carry run_meta, checked on every take."""
    runs.describe = lambda machine: run_meta("guided", reading_kept(tools)[machine.tool], machine)
    return runs


# -- the rounds ------------------------------------------------------------------------------------------


def answers_digest(responses: dict[str, Any]) -> str:
    data = {
        key: value.model_dump(mode="json", by_alias=True, exclude_none=True) if isinstance(value, BaseModel) else value
        for key, value in responses.items()
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def stored_response(response: Any) -> dict[str, Any]:
    kind = "input_required" if isinstance(response, types.InputRequiredResult) else "result"
    return {"kind": kind, "value": response.model_dump(mode="json", by_alias=True, exclude_none=True)}


def _restored(stored: Any) -> Any:
    if stored["kind"] == "input_required":
        return types.InputRequiredResult.model_validate(stored["value"])
    return types.CallToolResult.model_validate(stored["value"])


_LOST = object()  # _load_and_claim: another writer moved the record between its load and the claim


def _claimable(record: RunRecord, number: int, tool: Tool, owner: str | None, responses: dict) -> bool:
    """Whether round `number` of `record` can be claimed before its run is loaded: nothing `_continue` and
    `_claim_and_run` check before claiming would refuse it (the run's answers are checked in full after)."""
    meta, extra = record.meta, record.meta.extra
    if record.status != "waiting" or extra.get("round") != number or extra.get("held"):
        return False
    if meta.era != ERA or record.owner != owner or record.tool != tool.name:
        return False
    if meta.code_hash and meta.code_hash != tool_code_hash(tool):
        return False
    kinds = {asked.get("key"): asked.get("kind") for asked in meta.pending}
    if kinds.keys() != responses.keys():
        return False
    return all(
        isinstance(responses[key], _ANSWER_TYPES["sample" if kind == "sample" else "elicit"])
        for key, kind in kinds.items()
    )


_ANSWER_TYPES = {
    "sample": (types.CreateMessageResult, types.CreateMessageResultWithTools),
    "elicit": (types.ElicitResult,),
}


def _ref(run_id: str, number: int, version: int) -> str:
    """The request_state of round `number` of the run, whose record waits for it at `version`."""
    return REF_PREFIX + json.dumps({"run": run_id, "round": number, "v": version}, separators=(",", ":"))


def _parse_ref(state: str) -> tuple[str, int, int]:
    if not state.startswith(REF_PREFIX):
        raise AnswerError(
            "this request_state holds a whole run (minted by a server without a store, or with --store none); "
            "this server keeps runs in a store and continues only its own run references: call the tool again"
        )
    try:
        data = json.loads(state[len(REF_PREFIX) :])
        run_id, number, version = data["run"], data["round"], data["v"]
    except (ValueError, KeyError, TypeError):
        raise AnswerError("this request_state is not a run reference this server can read") from None
    if type(run_id) is not str or type(number) is not int or type(version) is not int:
        raise AnswerError("this request_state is not a run reference this server can read")
    return run_id, number, version


def _round_span(record: RunRecord, number: int) -> Any:
    """The span of round `number` of the run (and its metrics): in the run's trace (its first round's, kept in the
    record), linked to the request that carries it (runtime/tracing.py)."""
    context, links = tracing.continued(record.meta.extra.get("trace"))
    return tracing.observed_round(record.tool, ERA, number=number, run_id=record.run_id, context=context, links=links)


def _asked_now() -> dict[str, Any]:
    """When a round's questions leave, and the round's span context: the next round makes each question a span from
    then to its answer (runtime/tracing.py, `effects_answered`). {} when nothing would record it."""
    if not tracing.recording() and not tracing.measuring():
        return {}
    return {"asked": {"at": time.time_ns(), "trace": tracing.kept_context()}}


class DurableRounds:
    """The 2026-07-28 era's rounds over `store`: records live `ttl` seconds past their last round; a
    round claimed longer than `lease` seconds ago is taken over; a retry of a round being answered waits
    up to `wait_for_round` seconds for its response."""

    def __init__(
        self,
        store: RunStore,
        *,
        ttl: float = 600,
        lease: float = 300,
        wait_for_round: float = 30,
        caps: RunCaps | None = None,
    ) -> None:
        self.store = store
        self.caps = caps  # what callers' waiting runs may hold (quotas.py); None: no caps
        self.ttl = ttl
        self.lease = lease
        self.wait_for_round = wait_for_round
        self.gc_every = 60.0  # seconds between sweeps of expired runs (expired ones are invisible meanwhile)
        self._next_gc = 0.0
        self._later: dict[str, tuple[int, dict[str, Any], float]] = {}  # run -> (version, changes, give up at)
        self._later_lock = threading.Lock()
        self._later_thread: threading.Thread | None = None

    def _write_later(self, run_id: str, version: int, changes: dict[str, Any]) -> None:
        """A round's last write that the store could not take (it was down), retried in a thread until it
        lands; dropped when the run moved on or is gone (the store lost it), or after `lease` seconds."""
        with self._later_lock:
            self._later[run_id] = (version, changes, time.monotonic() + self.lease)
            if self._later_thread is None:
                self._later_thread = threading.Thread(target=self._write_pending, name="branchc-store", daemon=True)
                self._later_thread.start()

    def _write_pending(self) -> None:
        delay = 0.05
        while True:
            time.sleep(delay)
            with self._later_lock:
                pending = list(self._later.items())
                if not pending:
                    self._later_thread = None
                    return
            waiting = False
            for run_id, (version, changes, give_up) in pending:
                try:
                    self.store.checkpoint(run_id, version, **changes)
                except StoreUnavailableError:
                    if time.monotonic() < give_up:
                        waiting = True
                        continue
                except StoreError:
                    pass  # moved on (a claim taken over), gone, or damaged: nothing of this round's left to write
                with self._later_lock:
                    if self._later.get(run_id, (None,))[0] == version:
                        del self._later[run_id]
            delay = min(delay * 2, 1.0) if waiting else 0.05

    async def _io(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await store_io(fn, *args, **kwargs)

    async def _admit(self, owner: str | None, size: int = 0, *, grows_from: int | None = None) -> None:
        if self.caps is not None:
            await self._io(self.caps.admit, owner, size, grows_from=grows_from)

    async def run_round(
        self, bridge: Any, ctx: ServerRequestContext, tool: Tool, model: BaseModel, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if time.monotonic() >= self._next_gc:
            self._next_gc = time.monotonic() + self.gc_every
            with contextlib.suppress(StoreError):
                await self._io(self.store.gc)
        if params.request_state is None:
            if params.input_responses:
                return error_result("input_responses came without the request_state of the round they answer")
            owner = current_principal()
            try:
                await self._admit(owner)  # refused before before() runs: nothing of the tool has happened
            except (QuotaError, StoreError) as error:  # past a cap, or the store cannot count (it is down)
                return error_result(str(error))

            async def first(ctx: ServerRequestContext, handoff: Any, machine: Machine) -> Any:
                asked = _input_requests(ctx, machine)
                if asked is None:
                    return None
                record = RunRecord.new(tool.name, dump_run(handoff, machine), ttl=self.ttl, owner=owner)
                ref = _ref(record.run_id, 1, record.version)
                response = types.InputRequiredResult(input_requests=asked, request_state=ref)
                # the round's span context: the run's later rounds continue its trace (runtime/tracing.py)
                extra = {"round": 1, "asked_at": record.version, "trace": tracing.kept_context(), **_asked_now()}
                meta = run_meta(ERA, tool, machine, extra=extra)
                tracing.note(run_id=record.run_id)

                def create() -> RunRecord:
                    if self.caps is not None:  # past a cap: the run is halted, its cleanup runs once
                        self.caps.admit(owner, record.size)
                    return self.store.create(dataclasses.replace(record, meta=meta))

                created = await self._io(create)
                tracing.checkpoint_written(created.saved, tool.name, ERA)
                kept.append(((created.run_id, created.version), created))
                return response

            kept: list[tuple[tuple[str, int], RunRecord]] = []
            with tracing.observed_round(tool.name, ERA, number=0) as round_:
                return round_.ended(
                    await guarded(
                        start_run(bridge, ctx, tool, model), first, bridge, ctx, tool, keep_as=lambda _: kept[-1]
                    )
                )
        try:
            run_id, number, version = _parse_ref(params.request_state)
            return await self._continue(bridge, ctx, tool, run_id, number, version, params.input_responses or {})
        except (AnswerError, RunStateError, StoreError) as error:
            return error_result(str(error))

    async def _continue(
        self,
        bridge: Any,
        ctx: ServerRequestContext,
        tool: Tool,
        run_id: str,
        number: int,
        version: int,
        responses: dict,
    ) -> Any:
        digest = answers_digest(responses)
        deadline = time.monotonic() + self.wait_for_round
        delay = 0.02
        owner = current_principal()
        while True:
            # the round's usual case, one hop: the record loaded and, when its answers fit, claimed at once
            record, claimed = await self._io(
                self._load_and_claim, run_id, version, number, digest, tool, owner, responses
            )
            if claimed is _LOST:
                continue  # another replica claimed it first: see what it did
            if record is None or record.meta.era != ERA or record.owner != current_principal():
                # another principal's run is unknown to this one (the SDK's principal binding refuses its
                # request_state first; this holds even for a state sealed for it that names another's run)
                raise AnswerError(
                    f"run {run_id!r} is not in the store: it ended and expired, was cancelled, expired (runs are "
                    f"kept {self.ttl:.0f} s after their last round), or the store lost it (a Redis restarted "
                    f"without persistence, a store file replaced); call the tool again to start over"
                )
            if record.tool != tool.name:
                raise AnswerError(f"this request_state belongs to tool {record.tool!r}, not {tool.name!r}")
            extra = record.meta.extra
            claim = extra.get("claim") or {}
            if record.status == "waiting" and extra.get("held"):
                raise AnswerError(
                    f"run {run_id!r} is being continued by `branchc runs resume` ({extra['held'].get('pid')} on "
                    f"{extra['held'].get('host')}); it goes on there"
                )
            if record.status == "waiting" and extra.get("round") == number:
                with _round_span(record, number) as round_:
                    outcome = round_.ended(
                        await self._claim_and_run(bridge, ctx, tool, record, number, responses, digest, claimed)
                    )
                if outcome is not None:
                    return outcome
                continue  # another replica claimed it first: see what it did
            if record.status == "running" and extra.get("round") == number:
                if claim.get("digest") != digest:
                    raise AnswerError(
                        f"round {number} of run {run_id!r} is being answered with other answers; "
                        f"an answered round cannot be answered again differently"
                    )
                if time.time() - float(claim.get("at", 0)) > self.lease or (
                    claim.get("pid") and holder_alive(claim) is False
                ):
                    with _round_span(record, number) as round_:
                        outcome = round_.ended(
                            await self._claim_and_run(bridge, ctx, tool, record, number, responses, digest)
                        )
                    if outcome is not None:
                        return outcome
                    continue
                if time.monotonic() >= deadline:
                    raise AnswerError(
                        f"round {number} of run {run_id!r} is being answered (by this call sent earlier, or on "
                        f"another replica) and has no result yet after {self.wait_for_round:.0f} s; send the same "
                        f"round again to get its result"
                    )
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            if extra.get("answered") == number and (record.meta.response is not None or "asked_at" in extra):
                if record.meta.answers_digest != digest:
                    raise AnswerError(
                        f"round {number} of run {run_id!r} was answered already, with other answers; a round is "
                        f"answered once: send the same answers to get its result again, or continue from the "
                        f"request_state it returned"
                    )
                if record.meta.response is not None:
                    return _restored(record.meta.response)
                return self._asked_again(ctx, record, number)
            if record.status == "cancelled":
                raise AnswerError(f"run {run_id!r} was cancelled; call the tool again to start over")
            at = (
                f"is at round {extra.get('round')}"
                if record.status in ("waiting", "running")
                else f"has ended ({record.status})"
            )
            raise AnswerError(
                f"run {run_id!r} has moved on: this request_state is for round {number}, and the run {at}; an old "
                f"request_state cannot continue or fork a run: continue from the latest request_state"
            )

    def _load_and_claim(
        self, run_id: str, version: int, number: int, digest: str, tool: Tool, owner: str | None, responses: dict
    ) -> tuple[RunRecord | None, RunRecord | object | None]:
        """On a store thread: the record at `version` or later, and its claim for round `number` when nothing
        about the round needs a closer look (it waits for this round of this caller's run of this code, and the
        answers name what it asked, each of its kind); else no claim (None), or _LOST when another writer moved
        the record first. Anything unusual is left to `_continue`, which says what is wrong."""
        record = self.store.load(run_id, min_version=version)
        if record is None or not _claimable(record, number, tool, owner, responses):
            return record, None
        try:
            return record, self._claim(record, number, digest)
        except (StaleRunError, RunNotFoundError):
            return record, _LOST

    def _claim(self, record: RunRecord, number: int, digest: str) -> RunRecord:
        claim = {**holder(), "round": number, "digest": digest, "at": time.time()}
        meta = dataclasses.replace(record.meta, extra={**record.meta.extra, "claim": claim})
        # the claim keeps the record a lease past its expiry, so it does not expire mid-round (expiry.py)
        expires = max(record.expires, time.time() + self.lease)
        # the run as loaded, given again: the store writes on the head it just opened, without reading the
        # record a second time (store/sealed.py, Heads), and only if it is still that very record
        return self.store.checkpoint(
            record.run_id, record.version, status="running", saved=record.saved, meta=meta, expires=expires
        )

    async def _put_back(self, record: RunRecord, claimed: RunRecord, calls: dict[str, Any] | None = None) -> None:
        """A claimed round that did not run (refused, or interrupted before its outcome was written): the run
        waits for it again, as it was, but for what its tool calls did (`calls`, kept so that the round sent again
        makes none of them twice)."""
        meta = record.meta
        if calls:
            meta = dataclasses.replace(meta, extra={**meta.extra, "calls": calls})
        with anyio.CancelScope(shield=True):
            back = {"status": "waiting", "meta": meta, "expires": record.expires}
            try:
                await self._io(self.store.checkpoint, record.run_id, claimed.version, **back)
            except StoreUnavailableError:
                self._write_later(record.run_id, claimed.version, back)
            except StoreError:
                pass

    def _asked_again(self, ctx: ServerRequestContext, record: RunRecord, number: int) -> Any:
        """The response of answered round `number`, which asked for round `number` + 1: its requests again,
        from the saved run that waits for them (a round's reply is not stored: it holds the whole history)."""
        try:
            _, machine, _ = load_run_or_kept(record.saved, _built(record))
        except RunStateError as error:
            raise RunStateError(f"stored run {record.run_id!r} cannot be continued: {error}") from None
        try:
            asked = _input_requests(ctx, machine)
        finally:
            machine.release()
        if asked is None:
            raise AnswerError(f"round {number} of run {record.run_id!r} cannot be asked again; call the tool again")
        ref = _ref(record.run_id, number + 1, record.meta.extra["asked_at"])
        return types.InputRequiredResult(input_requests=asked, request_state=ref)

    async def _claim_and_run(
        self,
        bridge: Any,
        ctx: ServerRequestContext,
        tool: Tool,
        record: RunRecord,
        number: int,
        responses: dict,
        digest: str,
        claimed: RunRecord | None = None,
    ) -> Any:
        """Check the answers, claim round `number` (None: another writer moved the record first) unless it is
        `claimed` already, run it, and write its outcome. The run is the live machine this server kept when it
        saved `record` (warm.py), when the record still holds just what it saved, else it is loaded from it."""
        warm = bridge_warm(bridge)
        saved_as: tuple[Any, Any] = ((record.run_id, record.version), record)
        kept = warm.take(saved_as[0]) if warm is not None else None
        live = None
        if kept is not None:
            if kept[2].saved == record.saved:  # what it saved, not a record put there since at its version
                live = kept[:2]
            else:
                kept[1].release()
        try:
            handoff, machine, build = (
                (*live, None) if live is not None else load_run_or_kept(record.saved, _built(record))
            )
        except RunStateError as error:
            if claimed is not None:
                await self._put_back(record, claimed)
            raise RunStateError(f"stored run {record.run_id!r} cannot be continued: {error}") from None
        loaded = (handoff, machine, live, saved_as)
        if build is None:
            return await self._run_claimed(bridge, ctx, tool, record, number, responses, digest, claimed, *loaded)
        own = build.tools.get(record.tool)
        if own is None:  # its build has no such tool at module level: nothing of the round ran
            machine.release()
            if claimed is not None:
                await self._put_back(record, claimed)
            raise RunStateError(f"stored run {record.run_id!r}: the kept build {build.id} has no tool {record.tool!r}")
        with build.reading():  # it finishes on the build that saved it, kept beside this one (runtime/builds.py)
            return await self._run_claimed(bridge, ctx, own, record, number, responses, digest, claimed, *loaded)

    async def _run_claimed(
        self,
        bridge: Any,
        ctx: ServerRequestContext,
        tool: Tool,
        record: RunRecord,
        number: int,
        responses: dict,
        digest: str,
        claimed: RunRecord | None,
        handoff: Any,
        machine: Machine,
        live: tuple[Any, Machine] | None,
        saved_as: tuple[Any, Any],
    ) -> Any:
        warm = bridge_warm(bridge)
        try:
            check_answered(machine, responses.keys(), "input_responses")
            answers = {key: _answer(request, responses[key]) for key, request in machine.requests.items()}
        except BaseException:  # refused answers: nothing of the round ran, it can be sent again
            if live is not None and claimed is None:
                warm.keep(saved_as[0], handoff, machine, record)
            else:  # (putting a claim back moves the record past the version the live copy would be kept at)
                machine.release()
            if claimed is not None:
                await self._put_back(record, claimed)
            raise
        if claimed is None:
            try:
                with released_unless_fed(machine):
                    claimed = await self._io(self._claim, record, number, digest)
            except (StaleRunError, RunNotFoundError):
                return None
        # the questions the last round asked, answered now: each a span from when it was asked (runtime/tracing.py)
        tracing.effects_answered(record.meta.extra.get("asked"), machine.requests, answers, tool.name, ERA)
        saved = deferred = False
        progress = _RoundProgress(self, record.run_id, claimed)  # its tool calls, written down as they go

        async def ready() -> tuple[Any, Machine]:
            feed(machine, answers)
            return handoff, machine

        async def again(ctx: ServerRequestContext, handoff: Any, machine: Machine) -> Any:
            nonlocal saved, deferred, saved_as, claimed
            asked = _input_requests(ctx, machine)
            if asked is None:
                return None
            # the record waits for the next round at the version this checkpoint writes: claimed's, plus one
            claimed = progress.claimed  # (moved on by what the round's tool calls wrote)
            ref = _ref(record.run_id, number + 1, claimed.version + 1)
            response = types.InputRequiredResult(input_requests=asked, request_state=ref)
            meta = run_meta(
                ERA,
                tool,
                machine,
                answers_digest=digest,
                # the version this write gives the record, which the next round's reference names
                extra={
                    "round": number + 1,
                    "answered": number,
                    "asked_at": claimed.version + 1,
                    "trace": record.meta.extra.get("trace") or {},
                    **_asked_now(),
                },
            )
            text = dump_run(handoff, machine)
            expires = time.time() + self.ttl

            # what the write changes, and what it tells the run's history: the answers, and who gave them
            changes = {"status": "waiting", "saved": text, "meta": meta, "expires": expires}
            changes |= {"answers": {key: json_data(value) for key, value in responses.items()}, "by": record.owner}

            def write() -> RunRecord:
                # grown past a cap: the round is refused, and the run waits on as it was (the finally below)
                if self.caps is not None:
                    with contextlib.suppress(StoreUnavailableError):  # the write meets the outage, keeps the outcome
                        self.caps.admit(record.owner, len(text.encode()), grows_from=record.size)
                return self.store.checkpoint(record.run_id, claimed.version, **changes)

            try:
                written = await self._io(write)
            except StaleRunError:
                raise AnswerError(
                    f"round {number} of run {record.run_id!r} was taken over by another server while it ran here "
                    f"(its claim outlived {self.lease:.0f} s); send the same round again for that server's result"
                ) from None
            except StoreUnavailableError as error:
                self._write_later(record.run_id, claimed.version, changes)
                deferred = True
                raise AnswerError(
                    f"round {number} of run {record.run_id!r} ran, but the store could not save its outcome: {error}. "
                    f"The outcome is kept and saved as soon as the store answers: send the same round again (the "
                    f"same request_state and answers) to get its result; it does not run again"
                ) from None
            saved = True
            saved_as = ((record.run_id, written.version), written)
            tracing.checkpoint_written(text, tool.name, ERA)
            return response

        finished = False
        try:
            # kept live for the next round, unless it runs on a kept build (which the next round chooses again)
            keep_as = None if saved_build_of(tool.client_fn.__module__) else lambda _: saved_as
            outcome = await guarded(
                ready(), again, bridge, ctx, tool, resumable=True, keep_as=keep_as, progress=progress
            )
            finished = machine.done
        finally:
            claimed = progress.claimed
            if not saved and not finished and not deferred:  # interrupted before its outcome was written
                await self._put_back(record, claimed, progress.calls)
        if saved or deferred:  # a deferred outcome lands as it is (write_later), not overwritten as a failure
            return outcome
        status = "failed" if outcome.is_error else "done"
        meta = dataclasses.replace(
            claimed.meta,
            waits=(),
            pending=(),
            answers_digest=digest,
            response=stored_response(outcome),
            extra={
                k: v for k, v in claimed.meta.extra.items() if k not in ("claim", "round", "asked_at", "asked", "calls")
            }
            | {"answered": number},
        )
        changes = {"status": status, "saved": "", "meta": meta, "expires": time.time() + self.ttl}
        with anyio.CancelScope(shield=True), contextlib.suppress(StaleRunError, RunNotFoundError):
            try:
                await self._io(self.store.checkpoint, record.run_id, claimed.version, **changes)
            except StoreUnavailableError:  # the result is sent; a retry of this round gets it once the store answers
                self._write_later(record.run_id, claimed.version, changes)
        return outcome


class _RoundProgress:
    """How far a claimed round's tool calls got, in its record (meta.extra["calls"], sealed with the rest), written
    before each call goes out and as it comes back: a round run again after its server died (its claim taken over)
    finds there what was done, and neither calls a tool twice nor runs a tool's before() twice (rounds.make_calls).
    Each write is a compare-and-swap on the claimed record; `claimed` is the record as last written."""

    def __init__(self, durable: DurableRounds, run_id: str, claimed: RunRecord) -> None:
        self.durable = durable
        self.run_id = run_id
        self.claimed = claimed
        self.calls: dict[str, Any] = dict(claimed.meta.extra.get("calls") or {})

    def known(self, key: str) -> tuple[str, Any] | None:
        entry = self.calls.get(key)
        if entry is None:
            return None
        return _outcome_of(entry, key)

    async def started(self, keys: list[str]) -> None:
        self.calls.update({key: {"started": True} for key in keys})
        await self._write()

    async def came_back(self, key: str, outcome: tuple[str, Any]) -> None:
        self.calls[key] = _noted(outcome)
        await self._write()

    async def _write(self) -> None:
        claimed = self.claimed
        meta = dataclasses.replace(claimed.meta, extra={**claimed.meta.extra, "calls": self.calls})
        try:
            self.claimed = await self.durable._io(
                self.durable.store.checkpoint, self.run_id, claimed.version, meta=meta
            )
        except StaleRunError:
            raise AnswerError(
                f"run {self.run_id!r} was taken over by another server while this round made its tool calls; send the "
                f"same round again for that server's result"
            ) from None


_CALL_ERRORS = {
    cls.__name__: cls
    for cls in (ToolCallError, ToolCallInterruptedError, ToolNotAllowedError, ToolTimeoutError, ClientAnswerError)
}


def _noted(outcome: tuple[str, Any]) -> dict[str, Any]:
    """A tool call's outcome as the JSON data a record keeps of it."""
    kind, value = outcome
    if kind == "result":
        return {"result": value.model_dump(mode="json")}
    if kind == "client":  # a tool of this server whose before() ran: its handoff, to start its client phase from
        return {"handoff": value[1]}
    if kind == "asks":
        state, questions = value
        asked = {
            key: ["sample" if isinstance(q, SampleRequest) else "elicit", q.model_dump(mode="json")]
            for key, q in questions.items()
        }
        return {"asks": state, "questions": asked}
    return {"error": str(value), "kind": type(value).__name__}


def _outcome_of(entry: dict[str, Any], key: str) -> tuple[str, Any]:
    """A tool call's outcome as a record keeps it (see _noted); a call only started never came back."""
    if "result" in entry:
        return "result", ToolResult.model_validate(entry["result"])
    if "handoff" in entry:
        return "handoff", entry["handoff"]
    if "asks" in entry:
        questions = {
            name: (SampleRequest if kind == "sample" else ElicitRequest).model_validate(data)
            for name, (kind, data) in entry["questions"].items()
        }
        return "asks", (entry["asks"], questions)
    if "error" in entry:
        return "error", _CALL_ERRORS.get(entry.get("kind"), ToolCallError)(entry["error"])
    return "error", ToolCallInterruptedError(
        f"tool call {key.rsplit('.', 1)[0]!r} was under way when the server running this round stopped; whether it "
        f"took effect is unknown, so it is not made again"
    )
