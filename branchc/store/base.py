"""The continuation store's contract: the record of a run at rest, the operations on it, its errors.

A store holds one record per run: its id, tool, status, the saved run (`runstate.dump_run`'s text),
a version bumped by every write (so a write is a compare-and-swap on it), wall-clock times (epoch
seconds), metadata (`RunMeta`) and its owner (the principal that started it, or None). Backends
(sqlite.py and postgres.py, through sql.py; redis.py) keep the same layout, sealed with the state key
(sealed.py: what is sealed, what stays in clear and how it is bound), and check what they load the same
way: a record edited, truncated, moved onto another run or sealed with a key the store does not hold is a
`StoreDataError` naming the run, raised before anything of it is decoded, never a half-loaded record.

The API is synchronous; an async caller runs it in a worker thread (`anyio.to_thread.run_sync`).
Every backend is safe to share between threads and between processes.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from ..errors import BranchcError

__all__ = [
    "ENDING_GRACE",
    "RECORD_FORMAT",
    "STATUSES",
    "UNENDED",
    "RunExistsError",
    "RunMeta",
    "RunNotFoundError",
    "RunRecord",
    "RunStore",
    "Rekeyed",
    "StaleRunError",
    "StoreDataError",
    "StoreError",
    "StoreURLError",
    "StoreUnavailableError",
    "Usage",
    "WaitPoint",
    "new_run_id",
]

RECORD_FORMAT = 2  # the layout of a stored record (sealed.py); a record of another one is refused (1: not sealed)
STATUSES = ("waiting", "running", "done", "failed", "cancelled", "expired")
# A run of these statuses has not ended: its `finally` blocks have not run. When it expires, its record is kept
# ENDING_GRACE seconds more (invisible to every read but `expired` and `load(..., expired=True)`), so that a
# server's sweeper or `branchc runs gc --tools` can end it, once (`end_expired`), in the code that saved it.
UNENDED = ("waiting", "running")
ENDING_GRACE = 7 * 86400.0
CHANGEABLE = frozenset({"status", "saved", "meta", "expires"})
# what a write that leaves a run waiting may tell its history (history.py), beside the changes
HISTORY_NOTES = frozenset({"answers", "by"})
MAX_ID = 200
MAX_OWNER = 1000


class StoreError(BranchcError):
    """Base of the continuation store's errors."""


class StoreURLError(StoreError, ValueError):
    """A store URL that names no store branchc can open; the message names the part and the fix."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store cannot be reached or used now (Redis or PostgreSQL down, an SQLite file locked past its busy
    timeout, a PostgreSQL row locked past its lock timeout).
    Nothing was written by the failed call unless the message says so; retrying later is safe."""


class StoreDataError(StoreError, ValueError):
    """What the store holds is damaged or of another layout: a run's field (`run_id`, `field`), or the
    store itself (`run_id` None)."""

    def __init__(self, message: str, run_id: str | None = None, field: str | None = None) -> None:
        self.run_id = run_id
        self.field = field
        super().__init__(message)

    @classmethod
    def bad_field(cls, run_id: str, name: str, problem: str) -> StoreDataError:
        return cls(
            f"stored run {run_id!r} is damaged: its field {name!r} {problem}; it cannot be loaded "
            f"(delete it, e.g. `branchc runs cancel {run_id}`, or restore the store from a backup)",
            run_id,
            name,
        )


class RunNotFoundError(StoreError, KeyError):
    """No such run: never created, deleted, or expired."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r} in the store: it was never created, was deleted, or expired")

    def __str__(self) -> str:
        return str(self.args[0])


class RunExistsError(StoreError, ValueError):
    """`create` of a run id the store already holds."""


class StaleRunError(StoreError):
    """A checkpoint (or delete) expected a version that is no longer the run's: another writer (another
    thread, process or replica) wrote it since it was loaded. Load it again and decide anew."""

    def __init__(self, run_id: str, expected: int, actual: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"run {run_id!r} was written by someone else: expected version {expected}, the store has {actual}; "
            f"load it again (another process or replica continued it)"
        )


@dataclass(frozen=True)
class WaitPoint:
    """Where one branch of a run waits: its branch path, the function and its source line (and file), and the
    suspension point's name, which stays the same across builds (splitter/points.py; "" when not known)."""

    branch: str
    function: str
    line: int
    file: str = ""
    point: str = ""

    def as_json(self) -> dict[str, Any]:
        data = {"branch": self.branch, "function": self.function, "line": self.line, "file": self.file}
        return {**data, "point": self.point} if self.point else data


@dataclass(frozen=True)
class RunMeta:
    """A run's metadata, stored as JSON beside the saved run.

    era: the protocol era or mode serving it ("2025-11-25", "2026-07-28", "guided", ...);
    run_format: the saved text's format (`runstate.VERSION`); code_hash: the hash of the tool's compiled
    functions it was saved by; waits: where each branch waits; pending: the pending requests' summaries
    (JSON objects); answers_digest / response: the last round's answers digest and its response (JSON),
    so a retried round can be given the same result; extra: any further JSON object for the caller.
    """

    era: str = ""
    run_format: int = 0
    code_hash: str = ""
    waits: tuple[WaitPoint, ...] = ()
    pending: tuple[dict[str, Any], ...] = ()
    answers_digest: str | None = None
    response: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {
            "era": self.era,
            "run_format": self.run_format,
            "code_hash": self.code_hash,
            "waits": [w.as_json() for w in self.waits],
            "pending": list(self.pending),
            "answers_digest": self.answers_digest,
            "response": self.response,
            "extra": self.extra,
        }
        try:
            return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(f"run metadata must be JSON data (pending, response, extra): {error}") from None

    @classmethod
    def from_json(cls, run_id: str, text: Any) -> RunMeta:
        """Checked: any damage is a StoreDataError naming the run and the field (`meta.waits[0].line`)."""
        if type(text) is not str:
            raise StoreDataError.bad_field(run_id, "meta", f"is {type(text).__name__}, not JSON text")
        try:
            data = json.loads(text)
        except RecursionError:  # json recurses: text nested 100,000 deep is an error here, not a crash
            problem = "is JSON nested deeper than the parser takes within Python's recursion limit"
            raise StoreDataError.bad_field(run_id, "meta", problem) from None
        except ValueError as error:
            raise StoreDataError.bad_field(run_id, "meta", f"is not JSON ({error})") from None
        if type(data) is not dict:
            raise StoreDataError.bad_field(run_id, "meta", "is not a JSON object")
        expected = {"era", "run_format", "code_hash", "waits", "pending", "answers_digest", "response", "extra"}
        if data.keys() != expected:
            odd = sorted(data.keys() ^ expected)
            raise StoreDataError.bad_field(run_id, "meta", f"has other keys than its layout's (differing: {odd})")

        def want(name: str, value: Any, kinds: tuple[type, ...], what: str) -> Any:
            if type(value) not in kinds:
                raise StoreDataError.bad_field(run_id, f"meta.{name}", f"is {json.dumps(value)[:60]}, not {what}")
            return value

        want("era", data["era"], (str,), "a string")
        want("run_format", data["run_format"], (int,), "an integer")
        want("code_hash", data["code_hash"], (str,), "a string")
        want("answers_digest", data["answers_digest"], (str, type(None)), "a string or null")
        want("extra", data["extra"], (dict,), "an object")
        waits = []
        for index, entry in enumerate(want("waits", data["waits"], (list,), "a list")):
            at = f"waits[{index}]"
            want(at, entry, (dict,), "an object")
            if entry.keys() - {"point"} != {"branch", "function", "line", "file"}:
                raise StoreDataError.bad_field(run_id, f"meta.{at}", "is not {branch, function, line, file[, point]}")
            waits.append(
                WaitPoint(
                    want(f"{at}.branch", entry["branch"], (str,), "a string"),
                    want(f"{at}.function", entry["function"], (str,), "a string"),
                    want(f"{at}.line", entry["line"], (int,), "an integer"),
                    want(f"{at}.file", entry["file"], (str,), "a string"),
                    want(f"{at}.point", entry.get("point", ""), (str,), "a string"),
                )
            )
        pending = want("pending", data["pending"], (list,), "a list")
        for index, entry in enumerate(pending):
            want(f"pending[{index}]", entry, (dict,), "an object")
        return cls(
            era=data["era"],
            run_format=data["run_format"],
            code_hash=data["code_hash"],
            waits=tuple(waits),
            pending=tuple(pending),
            answers_digest=data["answers_digest"],
            response=data["response"],
            extra=data["extra"],
        )


def new_run_id() -> str:
    """An unguessable run id (144 random bits, URL-safe), never starting with "-": `branchc runs show ID` would
    take such an id for an option (one id in 64 did)."""
    while True:
        ident = secrets.token_urlsafe(18)
        if not ident.startswith("-"):
            return ident


@dataclass(frozen=True)
class RunRecord:
    """One run at rest. `version` starts at 1 and every write bumps it; times are epoch seconds; `owner` is
    the principal that started the run (None: no one authenticated), set when it is created."""

    run_id: str
    tool: str
    status: str
    saved: str
    version: int
    created: float
    updated: float
    expires: float
    meta: RunMeta = field(default_factory=RunMeta)
    owner: str | None = None

    @classmethod
    def new(
        cls,
        tool: str,
        saved: str,
        *,
        ttl: float,
        status: str = "waiting",
        meta: RunMeta | None = None,
        run_id: str | None = None,
        now: float | None = None,
        owner: str | None = None,
    ) -> RunRecord:
        """A record for `create`: a fresh unguessable id unless given, version 1, expiring `ttl` s from now."""
        now = time.time() if now is None else now
        record = cls(run_id or new_run_id(), tool, status, saved, 1, now, now, now + ttl, meta or RunMeta(), owner)
        record.check()
        return record

    @property
    def size(self) -> int:
        """Bytes of the saved run (UTF-8): what the caps count."""
        return len(self.saved.encode())

    def check(self) -> None:
        """Refuse a record no store should write (TypeError / ValueError naming the field)."""
        if type(self.run_id) is not str or not 0 < len(self.run_id) <= MAX_ID:
            raise ValueError(f"a run id is a non-empty string of at most {MAX_ID} characters, not {self.run_id!r}")
        if type(self.tool) is not str or not self.tool:
            raise ValueError(f"a run's tool is a non-empty string, not {self.tool!r}")
        check_changes({"status": self.status, "saved": self.saved, "meta": self.meta, "expires": self.expires})
        if type(self.version) is not int or self.version < 1:
            raise ValueError(f"a run's version is an integer >= 1, not {self.version!r}")
        if self.owner is not None and (type(self.owner) is not str or not 0 < len(self.owner) <= MAX_OWNER):
            raise ValueError(
                f"a run's owner is None or a non-empty string of at most {MAX_OWNER} characters, not {self.owner!r:.80}"
            )
        for name in ("created", "updated"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ValueError(f"a run's {name} time is a finite time in epoch seconds, not {value!r}")


def check_changes(changes: dict[str, Any]) -> None:
    unknown = sorted(changes.keys() - CHANGEABLE - HISTORY_NOTES)
    if unknown:
        known = f"{sorted(CHANGEABLE)} (and notes {sorted(HISTORY_NOTES)})"
        raise TypeError(f"a checkpoint changes only {known}, not {unknown}")
    if "status" in changes and changes["status"] not in STATUSES:
        raise ValueError(f"a run's status is one of {', '.join(STATUSES)}, not {changes['status']!r}")
    if "saved" in changes and not isinstance(changes["saved"], str):
        raise TypeError(f"a run's saved state is text (runstate.dump_run's), not {type(changes['saved']).__name__}")
    by = changes.get("by")
    if by is not None and (type(by) is not str or not 0 < len(by) <= MAX_OWNER):
        raise ValueError(f"who answered is None or a principal's non-empty name, not {by!r:.80}")
    if "meta" in changes and type(changes["meta"]) is not RunMeta:
        raise TypeError(f"a run's meta is a RunMeta, not {type(changes['meta']).__name__}")
    if "expires" in changes:
        expires = changes["expires"]
        if type(expires) not in (int, float) or not math.isfinite(expires):
            raise ValueError(f"a run's expiry is a finite time in epoch seconds, not {expires!r}")


class Rekeyed(NamedTuple):
    """What `rekey` did: runs sealed anew with the first key, runs that were already, and the runs it could not
    open (each a StoreDataError naming the run: sealed with a key the ring lacks, or damaged)."""

    resealed: int
    current: int
    refused: tuple[StoreDataError, ...]


class _Anyone:
    """The `owner` of `RunStore.usage` that counts every run, whoever started it (None is the anonymous one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ANYONE"


ANYONE = _Anyone()


def owner_tag(owner: str | None) -> str:
    """What a backend indexes an owner by: a fixed-size digest of its name ("-": no owner)."""
    return "-" if owner is None else hashlib.sha1(owner.encode(), usedforsecurity=False).hexdigest()


if TYPE_CHECKING:
    from .history import Checkpoint


class Usage(NamedTuple):
    """How many runs (of the statuses asked) the store holds, and the bytes of their saved text."""

    count: int
    bytes: int


@runtime_checkable
class RunStore(Protocol):
    """A continuation store. Expired runs are gone for every read (load, list, usage) even before `gc`
    removes them; the ids are the caller's (`RunRecord.new` makes unguessable ones)."""

    url: str

    def create(
        self, record: RunRecord, *, forked_from: tuple[str, int] | None = None, history: bool = True
    ) -> RunRecord:
        """Store a new run (its version is 1); RunExistsError when the id is taken. A run created waiting
        starts its history (entry 0; `forked_from`: the run and K it is a fork of), unless `history` is false
        (a guided round: its next round is a record of its own)."""

    def load(self, run_id: str, *, min_version: int | None = None, expired: bool = False) -> RunRecord | None:
        """The run, checked (StoreDataError when damaged); None when unknown or expired. `min_version`: the
        version a handle to the run expects at least; an older one was put back, and is a StoreDataError.
        `expired`: also an unended run that expired and is kept to be ended."""

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        """Atomically write `changes` (status, saved, meta, expires) if the run is still at
        `expected_version`; returns the new record (version + 1, updated now). StaleRunError when another
        writer moved it on, RunNotFoundError when it is gone. A write that leaves it waiting with a saved run
        made anew (dump_run's, with its parts) appends to its history, in the same transaction, with the
        notes `answers` (what the round was answered) and `by` (who answered)."""

    def history(self, run_id: str) -> list[Checkpoint]:
        """The run's kept history entries, oldest first (empty when it has none, or is gone)."""

    def saved_at(self, run_id: str, k: int) -> tuple[Checkpoint, str]:
        """Entry `k` of the run's history and the saved run it kept; KeyError when it keeps no entry `k`."""

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        """Remove the run (only at `expected_version` when given, else StaleRunError); False when absent."""

    def list(self, status: str | None = None, tool: str | None = None, limit: int = 100) -> list[RunRecord]:
        """Runs, newest (last updated) first, optionally of one status and/or tool."""

    def gc(self, now: float | None = None) -> int:
        """Remove the runs expired at `now` (default: the time now) that need no ending: ended ones, and unended
        ones (UNENDED) only ENDING_GRACE seconds past their expiry (nobody ended them: their cleanup never ran).
        How many."""

    def expired(self, now: float | None = None, limit: int = 100) -> list[str]:
        """The ids of the unended runs that expired by `now` and are kept to be ended, soonest expired first."""

    def end_expired(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        """`checkpoint` of an unended run that expired (and is kept): atomically, only while it is at
        `expected_version`, expired and unended, so of several enders (replicas, `runs gc`) exactly one wins.
        `changes` end it (an ended status and a new expiry: it is then kept until that one, for `runs show`).
        StaleRunError when another writer moved it first, RunNotFoundError when it is gone or not expired."""

    def usage(self, *statuses: str, owner: str | _Anyone | None = ANYONE) -> Usage:
        """Count and saved bytes of the live runs of `statuses` (all runs when none given), of `owner` (None:
        the runs no one authenticated started; by default everyone's). It may remove expired runs as `gc`
        does (Redis does, to keep its counters exact)."""

    def rekey(self) -> Rekeyed:
        """Seal every live run that is not sealed with the ring's first key with it, each by a compare-and-swap
        that keeps its version (so a server writing it meanwhile loses nothing, and wins)."""

    def close(self) -> None:
        """Let go of connections; the store is not used after."""
