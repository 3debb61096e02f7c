"""`branchc runs`: the runs a continuation store holds, looked at and ended from the command line.

What the records say (bridge/durable.py writes it for the 2026-07-28 era, guided mode through
StoreWaitingRuns): the tool, era, status, times, where each branch waits (function and source line), the
pending requests and the build folder the tool was served from. This module finds a run (its full id or
a unique prefix), describes it as JSON data (what `--json` prints and the tables show), and cancels a
waiting run the way a server ends a cancelled call: its saved run is loaded from its build (refused when
the tool's code changed since, as a server refuses it), the record is marked "cancelled" by a
compare-and-swap, so no server continues it afterwards, and only then is the run halted, so the
`finally` blocks of the tool's code run once, here; what they log is handed back.
"""

from __future__ import annotations

import dataclasses
import linecache
import time
from pathlib import Path
from typing import Any

from ..runtime.compiled import CompiledLoadError, import_build
from ..runtime.errors import BranchcError
from ..runtime.runstate import RunStateError, load_run
from ..store.base import RunNotFoundError, RunRecord, RunStore, StaleRunError, StoreDataError
from .durable import check_code, serving_store

__all__ = ["Cancelled", "RunsError", "cancel_run", "describe", "find_run", "open_runs_store", "source_text"]

ENDED = ("done", "failed", "cancelled")
SCAN = 100_000  # most runs a prefix is looked up among


class RunsError(BranchcError, ValueError):
    """What `branchc runs` cannot do, said in one line."""


def open_runs_store(url: str | None) -> RunStore:
    """The store `url` names; without one, the store `branchc serve --http` uses by default."""
    store = serving_store(url, http=True)
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


def cancel_run(store: RunStore, ident: str) -> Cancelled:
    """End the waiting run `ident` (an id or a unique prefix) as a server ends a cancelled call (see the
    module's doc). A record so damaged that it cannot be read is deleted (what the store's error advises)."""
    try:
        record = find_run(store, ident)
    except StoreDataError as error:
        if error.run_id is None or error.run_id != ident.strip():
            raise
        store.delete(error.run_id)
        return Cancelled(None, [], damaged=str(error))
    run = record.run_id
    if record.status in ENDED:
        raise RunsError(f"run {run!r} has ended ({record.status}): there is nothing to cancel")
    if record.status == "running":
        raise RunsError(
            f"run {run!r} is being answered by a server right now; cancel it when its round has ended "
            f"(it then waits again, or has ended)"
        )
    if not record.saved:
        raise RunsError(f"run {run!r} holds no saved run to cancel")
    tool = _tool(record)
    check_code(run, record.meta, tool)
    try:
        _, machine = load_run(record.saved)
    except RunStateError as error:
        raise RunsError(f"stored run {run!r} cannot be loaded to cancel it: {error}") from None
    extra = {k: v for k, v in record.meta.extra.items() if k != "claim"} | {"cancelled": time.time()}
    meta = dataclasses.replace(record.meta, waits=(), pending=(), extra=extra)
    try:
        ended = store.checkpoint(run, record.version, status="cancelled", saved="", meta=meta)
    except (StaleRunError, RunNotFoundError):
        machine.release()  # it goes on (or ended) elsewhere: its cleanup is not ours to run
        raise RunsError(
            f"run {run!r} moved on meanwhile (a server continued, ended or cancelled it while it was being "
            f"cancelled); nothing was cancelled: look at it again with `branchc runs show {run}`"
        ) from None
    failure: BaseException | None = None
    try:
        machine.halt()
    except Exception as error:
        failure = error
    return Cancelled(ended, machine.take_outbox(), failure)


def _tool(record: RunRecord) -> Any:
    run, build = record.run_id, record.meta.extra.get("build")
    if not isinstance(build, str) or not build:
        raise RunsError(f"run {run!r} names no build folder its tool was served from, so it cannot be loaded here")
    if not (Path(build) / "branchc.json").is_file():
        raise RunsError(
            f"run {run!r} was saved from the build {build}, which is gone; serve its tool again (the same code) "
            f"to rebuild it, or let the run expire"
        )
    try:
        loaded = import_build(Path(build))
    except CompiledLoadError as error:
        raise RunsError(f"run {run!r}: its build {build} cannot be loaded: {error}") from None
    if errors := loaded.errors:
        raise RunsError(f"run {run!r}: its build {build} cannot be loaded: {errors[0]}")
    if record.tool not in loaded.tools:
        raise RunsError(f"run {run!r}: its build {build} has no tool {record.tool!r} any more")
    return loaded.tools[record.tool]
