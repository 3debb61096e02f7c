"""`branchc runs`: the runs a continuation store holds, looked at and ended from the command line.

What the records say (bridge/durable.py writes it for the 2026-07-28 era, guided mode through
StoreWaitingRuns): the tool, era, status, times, where each branch waits (function and source line), the
pending requests, the build folder the tool was served from and the run's owner. This module finds a run
(its full id or a unique prefix), describes it as JSON data (what `--json` prints and the tables show), and
cancels a waiting run the way a server ends a cancelled call: its saved run is loaded with the tools the
operator names (`--tools PATH`, sources or a build as `branchc serve` takes them: never a path a record
names), refused when they are not the code that saved it (its code hash), the record is marked "cancelled" by a
compare-and-swap, so no server continues it afterwards, and only then is the run halted, so the
`finally` blocks of the tool's code run once, here; what they log is handed back.

Resuming continues a waiting run here, to its end, with answers from a client (the terminal, a responses
file): the record is marked as held by this process (held.py), written down at every suspension, and says
how the run ended. A run held by a process that still runs (a handshake-era server waiting on its client,
another `runs resume`) is neither resumed nor cancelled; one held on another host only with `force`.

`end_run` is that ending (a compare-and-swap that marks the record ended, then the halt), shared with
expiry.py, which ends runs that expired waiting: a server's sweeper, and `branchc runs gc --tools PATH`.

A run's history (store/history.py) lists where it waited at each checkpoint K, what it asked, what it was
answered and by whom; forking makes a new run (a new id, the same owner) of checkpoint K, waiting there: its
record is written from that checkpoint's saved run, so nothing is replayed, and it shares nothing with its
parent but the text it started from.

Re-keying seals every run anew with the first key of the ring the store was opened with (`branchc runs
rekey`: the store's `rekey`), so that an older key can then be dropped.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..runtime.builds import KeptBuild, kept_build, load_run_or_kept
from ..runtime.client import Client
from ..runtime.driver import Event, resume_tool
from ..runtime.errors import BranchcError, InputClosedError, MissingCapabilityError, RunTakenOverError
from ..runtime.runstate import RunStateError, dump_run, load_run
from ..runtime.tool import Tool
from ..store.base import RunMeta, RunNotFoundError, RunRecord, RunStore, StaleRunError, StoreDataError
from ..store.history import Checkpoint
from ..store.keys import KeyRing
from .durable import moved_meta, serving_store, stored_response, tool_code_hash
from .held import HeldRun
from .holder import describe_holder, holder_alive
from .results import describe_failure, error_result, result_of

__all__ = [
    "Cancelled",
    "MovedOnError",
    "RunsError",
    "cancel_run",
    "describe",
    "describe_history",
    "fork_run",
    "end_run",
    "find_run",
    "load_tools",
    "open_runs_store",
    "resume_run",
    "saved_by",
    "source_text",
]

ENDED = ("done", "failed", "cancelled", "expired")
SCAN = 100_000  # most runs a prefix is looked up among


class RunsError(BranchcError, ValueError):
    """What `branchc runs` cannot do, said in one line."""


class MovedOnError(RunsError):
    """A run another writer moved on (continued, ended, cancelled) while it was being ended here."""


def open_runs_store(url: str | None, keys: KeyRing | None = None) -> RunStore:
    """The store `url` names; without one, the store `branchc serve --http` uses by default. `keys`: the ring
    its records are sealed with (default: `$BRANCHC_STATE_KEY`, else the key kept in the state folder). It
    keeps the history `$BRANCHC_HISTORY` says, as `branchc serve` does (or the URL's `?history=`)."""
    history = os.environ.get("BRANCHC_HISTORY", "").strip().lower() or "all"
    store = serving_store(url, http=True, keys=keys, history=None if history == "all" else history)
    if store is None:
        raise RunsError("--store none names no store: there are no runs to look at; give a store URL")
    return store


def find_run(store: RunStore, ident: str) -> RunRecord:
    """The run whose id is `ident` or, failing that, the one run whose id starts with it."""
    ident = ident.strip()
    if not ident:
        raise RunsError("give a run id (or a unique prefix of one), as `branchc runs list` shows")
    record = store.load(ident)
    if record is not None:
        return record
    found = [r for r in store.list(limit=SCAN) if r.run_id.startswith(ident)]
    if not found:
        raise RunsError(f"no run {ident!r} in {store.url}: no run has that id or starts with it (ended ones expire)")
    if len(found) > 1:
        shown = ", ".join(r.run_id for r in found[:5])
        raise RunsError(f"{ident!r} is the start of {len(found)} run ids ({shown}); give more of the id")
    return found[0]


def source_text(file: str, line: int) -> str | None:
    """The text of `file`'s line `line`, stripped; None when it cannot be read."""
    if not file or line < 1 or not Path(file).is_file():
        return None
    text = linecache.getline(file, line)
    return text.strip() if text else None


def describe(record: RunRecord, now: float | None = None, *, sources: bool = False) -> dict[str, Any]:
    """The run as JSON data: what `--json` prints. `sources`: each wait also gets its source line's text."""
    now = time.time() if now is None else now
    meta = record.meta
    waits = []
    for wait in meta.waits:
        entry: dict[str, Any] = dataclasses.asdict(wait)
        if sources:
            entry["source"] = source_text(wait.file, wait.line)
        waits.append(entry)
    return {
        "run_id": record.run_id,
        "tool": record.tool,
        "owner": record.owner,
        "status": record.status,
        "era": meta.era,
        "version": record.version,
        "created": record.created,
        "updated": record.updated,
        "expires": record.expires,
        "age": round(now - record.created, 3),
        "expires_in": round(record.expires - now, 3),
        "saved_bytes": record.size,
        "run_format": meta.run_format,
        "code_hash": meta.code_hash,
        "build": meta.extra.get("build", ""),
        "waits": waits,
        "pending": list(meta.pending),
        "answers_digest": meta.answers_digest,
        "has_response": meta.response is not None,
        "extra": meta.extra,
    }


@dataclasses.dataclass
class Cancelled:
    """A cancelled run: its record now, what its finally blocks logged (("log", level, message) /
    ("notify", message, progress, total)) and the error they raised, if any."""

    record: RunRecord | None
    logs: list[tuple[Any, ...]]
    cleanup_error: BaseException | None = None
    damaged: str = ""  # the record could not be read (StoreDataError): it was deleted, its cleanup never ran


def load_tools(path: str | Path) -> dict[str, Tool]:
    """The tools at `path` (sources or a build, as `branchc serve PATH` takes them): the only code `cancel`
    and `resume` run. RunsError when they cannot be loaded."""
    from .loading import ServeLoadError, load_served_tools

    try:
        return load_served_tools(path, warn=None)  # the compiler's warnings are serve's to show, not ours
    except ServeLoadError as error:
        raise RunsError(f"--tools {path}: {error}") from None


def cancel_run(store: RunStore, ident: str, tools: Mapping[str, Tool], *, force: bool = False) -> Cancelled:
    """End the waiting run `ident` (an id or a unique prefix) as a server ends a cancelled call (see the
    module's doc), with its tool from `tools` (`load_tools`: what the operator named, never what the record
    names). A record so damaged that it cannot be read is deleted (what the store's error advises).
    `force`: also a run held by a process on another host, which this one cannot see."""
    try:
        record = find_run(store, ident)
    except StoreDataError as error:
        if error.run_id is None or error.run_id != ident.strip():
            raise
        store.delete(error.run_id)
        return Cancelled(None, [], damaged=str(error))
    _taken(record, tools, force, "cancel", "there is nothing to cancel")
    return end_run(record, store.checkpoint, "cancelled", {"cancelled": time.time()})


def end_run(
    record: RunRecord, write: Callable[..., RunRecord], status: str, note: dict[str, Any], **changes: Any
) -> Cancelled:
    """End the waiting run `record` (its tool's code loaded and checked by the caller): mark it `status` by the
    compare-and-swap `write` (the store's checkpoint, or end_expired), its meta's extra given `note`, then, and
    only if that won, halt it so its `finally` blocks run once, here. RunsError when another writer moved it
    first: its cleanup is that writer's, and nothing runs here. `changes`: more of the write (a new expiry)."""
    run, verb = record.run_id, "cancelled" if status == "cancelled" else "ended"
    try:  # in the tools' build, or the kept build that saved it: its own finally blocks run
        _, machine, _ = load_run_or_kept(record.saved, record.meta.extra.get("build"))
    except RunStateError as error:
        raise RunsError(f"stored run {run!r} cannot be loaded to end it: {error}") from None
    extra = {k: v for k, v in record.meta.extra.items() if k not in ("claim", "held")} | note
    meta = dataclasses.replace(record.meta, waits=(), pending=(), extra=extra)
    try:
        ended = write(run, record.version, status=status, saved="", meta=meta, **changes)
    except (StaleRunError, RunNotFoundError):
        machine.release()  # it goes on (or ended) elsewhere: its cleanup is not ours to run
        raise MovedOnError(
            f"run {run!r} moved on meanwhile (a server continued, ended or cancelled it while it was being "
            f"{verb}); nothing was {verb}: look at it again with `branchc runs show {run}`"
        ) from None
    failure: BaseException | None = None
    try:
        machine.halt()
    except Exception as error:
        failure = error
    return Cancelled(ended, machine.take_outbox(), failure)


def _taken(record: RunRecord, tools: Mapping[str, Tool], force: bool, verb: str, ended: str) -> Any:
    """The tool of the waiting run `record` in `tools`, checked fit to `verb` (cancel, resume) here: not ended
    (`ended` says why that refuses it), not being answered or held elsewhere (unless `force`), saved by the
    code `tools` holds."""
    run = record.run_id
    if record.status in ENDED:
        raise RunsError(f"run {run!r} has ended ({record.status}): {ended}")
    _check_not_answered(record, force, verb)
    if not record.saved:
        raise RunsError(f"run {run!r} holds no saved run to {verb}")
    _check_not_held(record, force, verb)
    return _tool(record, tools)


def _check_not_answered(record: RunRecord, force: bool, what: str) -> None:
    """Refuse a run a server is answering a round of, unless that server is gone (its claim's holder: dead on
    this host, or with `force` on another): then the run waits where it was before that round."""
    if record.status != "running":
        return
    claim = record.meta.extra.get("claim") or {}
    alive = holder_alive(claim) if claim.get("pid") else True
    if alive is False or (alive is None and force):
        return
    where = f" ({describe_holder(claim)})" if claim.get("pid") else ""
    hint = "; if that server is gone, add --force" if alive is None else ""
    raise RunsError(
        f"run {record.run_id!r} is being answered by a server right now{where}; {what} it when its round has "
        f"ended (it then waits again, or has ended){hint}"
    )


def _check_not_held(record: RunRecord, force: bool, what: str) -> None:
    """Refuse to take a run its holder still holds: alive on this host, or (without `force`) on another."""
    held = record.meta.extra.get("held")
    if not held:
        return
    alive = holder_alive(held)
    run, who = record.run_id, describe_holder(held)
    if alive:
        raise RunsError(
            f"run {run!r} is held by {who}, which still runs (a server waiting on its client, or a `branchc runs "
            f"resume`); answer it there, or stop that process first"
        )
    if alive is None and not force:
        raise RunsError(
            f"run {run!r} is held by {who}, another host, which cannot be checked from here; if that process is "
            f"gone, {what} again with --force (were it alive, it would stop at its next suspension)"
        )


@dataclasses.dataclass
class Resumed:
    """A resumed run's end: its record now, and the tool's result (after() ran) or the error it ended with."""

    record: RunRecord | None
    result: Any = None
    error: BranchcError | None = None


async def resume_run(
    store: RunStore,
    ident: str,
    client: Client,
    tools: Mapping[str, Tool],
    *,
    force: bool = False,
    on_event: Callable[[Event], None] | None = None,
) -> Resumed:
    """Continue the waiting run `ident` (an id or a unique prefix) here, to its end, with its tool from `tools`
    (`load_tools`), asking `client` what it waits for (see the module's doc). RunsError when it cannot be
    taken; what the run ends with otherwise."""
    record = find_run(store, ident)
    tool = _taken(record, tools, force, "resume", "only a waiting run can be resumed")
    build = _finishes_on(record)
    if build is None:
        return await _resume(store, record, client, tool, on_event, tools)
    with build.reading():  # it finishes on the build that saved it, kept beside these tools (runtime/builds.py)
        return await _resume(store, record, client, build.tools[record.tool], on_event, build.tools)


def _finishes_on(record: RunRecord) -> KeptBuild | None:
    """The kept build a waiting run must finish on, when the tools given cannot take it; None when they can.
    RunsError when neither can (nothing of the run moved: it waits on)."""
    try:
        _, machine, build = load_run_or_kept(record.saved, record.meta.extra.get("build"))
    except RunStateError as error:
        raise RunsError(f"run {record.run_id!r} cannot be resumed here: {error}") from None
    machine.release()  # only a look: the resume reads the run again, as it goes on
    return build


async def _resume(
    store: RunStore,
    record: RunRecord,
    client: Client,
    tool: Tool,
    on_event: Callable[[Event], None] | None,
    tools: Mapping[str, Tool],
) -> Resumed:
    run = record.run_id
    held = HeldRun(store, tool, record.meta.era, record=record)
    try:
        await held.take()
    except RunTakenOverError:
        raise RunsError(
            f"run {run!r} moved on meanwhile (a server continued, ended or cancelled it); nothing was resumed: "
            f"look at it again with `branchc runs show {run}`"
        ) from None
    try:
        value = await resume_tool(tool, record.saved, client, on_event=on_event, checkpoint=held, tools=tools)
    except RunTakenOverError as error:
        raise RunsError(str(error)) from None
    except (MissingCapabilityError, RunStateError) as error:
        await held.let_go()  # refused before anything of the run moved: it waits on, as it was
        raise RunsError(f"run {run!r} cannot be resumed here: {error}") from None
    except InputClosedError as error:  # the driver halted the run: its finally blocks ran, here
        await held.end("cancelled", stored_response(error_result(str(error))))
        return Resumed(held.record, error=error)
    except BranchcError as error:
        await held.end("failed", stored_response(error_result(describe_failure(error))))
        return Resumed(held.record, error=error)
    except BaseException:
        await held.end("cancelled", None)  # interrupted: the driver halted the run, its finally blocks ran
        raise
    await held.end("done", stored_response(result_of(value)))
    return Resumed(held.record, value)


def describe_history(store: RunStore, ident: str) -> list[dict[str, Any]]:
    """The run's kept checkpoints as JSON data, oldest first: K, when, where it waited and what it asked, and the
    answers that moved it on from there (the next entry's), who gave them and when (None while it waits there)."""
    record = find_run(store, ident)
    entries = store.history(record.run_id)
    out = []
    for index, entry in enumerate(entries):
        after = entries[index + 1] if index + 1 < len(entries) and entries[index + 1].k == entry.k + 1 else None
        out.append(
            {
                "k": entry.k,
                "at": entry.at,
                "era": entry.meta.era,
                "code_hash": entry.meta.code_hash,
                "waits": [w.as_json() for w in entry.meta.waits],
                "asked": list(entry.meta.pending),
                "answers": after.answers if after is not None else None,
                "answered_by": after.by if after is not None else None,
                "answered_at": after.at if after is not None else None,
                "forked_from": {"run": entry.forked_from[0], "k": entry.forked_from[1]} if entry.forked_from else None,
            }
        )
    return out


_NOT_CARRIED = ("held", "claim", "round", "answered", "asked_at", "ended_by")  # of the parent's process and rounds


def fork_run(store: RunStore, ident: str, at: int, *, ttl: float | None = None) -> RunRecord:
    """A new run (a new id, the parent's owner) waiting where the run `ident` waited at its checkpoint `at`,
    written from that checkpoint: no replay, and no state shared with the parent. It lives `ttl` seconds (by
    default as long as the parent lives between rounds) and continues like any waiting run (`resume_run`)."""
    parent = find_run(store, ident)
    run = parent.run_id
    try:
        entry, saved = store.saved_at(run, at)
    except KeyError:
        kept = [entry.k for entry in store.history(run)]
        have = (
            f"it keeps checkpoints {_ranges(kept)}"
            if kept
            else "it keeps none (its store keeps no history, history=0, or an older branchc saved it)"
        )
        raise RunsError(f"run {run!r} has no checkpoint {at}: {have}; see `branchc runs history {run}`") from None
    meta = _forked_meta(entry, run)
    life = ttl if ttl is not None else max(parent.expires - parent.updated, 60.0)
    record = RunRecord.new(parent.tool, saved, ttl=life, meta=meta, owner=parent.owner)
    return store.create(record, forked_from=(run, entry.k))


def _forked_meta(entry: Checkpoint, parent: str) -> RunMeta:
    extra = {k: v for k, v in entry.meta.extra.items() if k not in _NOT_CARRIED}
    return dataclasses.replace(entry.meta, extra=extra | {"forked_from": {"run": parent, "k": entry.k}})


def _ranges(ks: list[int]) -> str:
    return f"{ks[0]} to {ks[-1]}" if len(ks) > 1 else str(ks[0])


def saved_by(record: RunRecord, tools: Mapping[str, Tool]) -> Tool:
    """The run's tool from `tools`; RunsError naming the run and the fix otherwise."""
    return _tool(record, tools)


def _tool(record: RunRecord, tools: Mapping[str, Tool]) -> Tool:
    """The run's tool from `tools`, which need not be the code that saved it: a run of another build of the tool
    is loaded when its points are compatible (continuation/snapshots.py `_moved`), else on the build that saved it
    when that is kept here (runtime/builds.py), and refused naming the point otherwise."""
    run = record.run_id
    build = record.meta.extra.get("build")
    served = f" (it was saved by build {build})" if isinstance(build, str) and build else ""
    tool = tools.get(record.tool)
    if tool is None:
        have = ", ".join(sorted(tools)) or "none"
        raise RunsError(
            f"run {run!r} is a run of the tool {record.tool!r}, which the tools given (--tools) do not have (they "
            f"have: {have}); give the sources or build it was served from{served}"
        )
    saved_by = record.meta.code_hash
    if not saved_by:
        raise RunsError(
            f"run {run!r} does not say which code saved it (its record has no code hash), so no tools can be "
            f"checked against it: it cannot be loaded here"
        )
    return tool


@dataclasses.dataclass
class Migrated:
    """What `migrate_runs` did with one waiting run: moved (or would move), left as it was, or refused."""

    run_id: str
    tool: str
    outcome: str  # "moved", "would move", "current" (saved by these tools already), "refused", "skipped"
    detail: str = ""


def migrate_runs(store: RunStore, tools: Mapping[str, Tool], *, dry_run: bool = False) -> list[Migrated]:
    """Move the waiting runs of `tools` that another build saved to these tools ahead of their next round: each is
    loaded with these tools' code (moving each generator where its point allows, or through the author's
    migration: continuation/snapshots.py), saved again and written back by compare-and-swap, so a server that
    continued it meanwhile wins and nothing is lost. A run held live by a process, or that cannot move, is left as
    it was, and said why. `dry_run`: the same, writing nothing."""
    out: list[Migrated] = []
    for record in store.list(status="waiting", limit=10**9):
        tool = tools.get(record.tool)
        if tool is None:
            continue  # not a run of these tools
        run = record.run_id
        if record.meta.code_hash == tool_code_hash(tool):
            out.append(Migrated(run, record.tool, "current"))
            continue
        held = record.meta.extra.get("held")
        if held and holder_alive(held) is not False:
            out.append(Migrated(run, record.tool, "skipped", f"held live by {describe_holder(held)}"))
            continue
        try:
            handoff, machine = load_run(record.saved)
        except RunStateError as error:
            kept = kept_build(record.meta.extra.get("build"))
            finishes = f"; it finishes on the build that saved it ({kept.id}), kept here" if kept else ""
            out.append(Migrated(run, record.tool, "refused", f"{error}{finishes}"))
            continue
        try:
            text = dump_run(handoff, machine)
            meta = moved_meta(record.meta, tool, machine)
        finally:
            machine.release()  # a copy: its cleanup is the run's own, where it really ends
        if dry_run:
            out.append(Migrated(run, record.tool, "would move", f"from code hash {record.meta.code_hash}"))
            continue
        try:
            store.checkpoint(run, record.version, saved=text, meta=meta)
        except (StaleRunError, RunNotFoundError):
            out.append(Migrated(run, record.tool, "skipped", "it moved on meanwhile (a server continued or ended it)"))
            continue
        out.append(Migrated(run, record.tool, "moved", f"from code hash {record.meta.code_hash}"))
    return out
