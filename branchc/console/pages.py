"""What each page of the console shows, as plain data for its template, from the store and the builds.

Every function here is synchronous (the store's API is; app.py runs them in a worker thread) and takes the
viewer, so that nothing of a run it may not see is ever read into a page: a run of someone else is None, as an
unknown one. What a run holds (answers, sampled text, summaries of what it asks, its variables) is untrusted:
it is handed to the templates as text, which they escape, and cut to a length here.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..bridge.runs import ENDED, describe_history
from ..bridge.settings import ServeSettings
from ..runtime.tool import Tool
from ..store.base import STATUSES, RunRecord, RunStore, StoreDataError
from .access import Viewer
from .graphs import Graphs
from .variables import waiting_frames

__all__ = ["AGES", "Console", "FilterError", "Filters", "run_page", "runs_page", "tool_page", "tools_page"]

SCAN = 2000  # the newest runs a page looks through (the store lists runs newest first)
SHOWN = 200  # rows the runs page shows at most
ANSWER_CHARS = 600  # an answer is cut here in the history
NO_TOOLS = (
    "this console was started without --tools: cancelling runs a run's finally blocks, which needs the tools it "
    "was served with (start it with --tools PATH, or use the console of `branchc serve --http --console`)"
)
#: the age filter: its value -> (what the page calls it, the least and the most age it takes, in seconds; None: any)
AGES: dict[str, tuple[str, float | None, float | None]] = {
    "": ("any time", None, None),
    "15m": ("in the last 15 minutes", None, 900),
    "1h": ("in the last hour", None, 3600),
    "1d": ("in the last day", None, 86400),
    "7d": ("in the last week", None, 7 * 86400),
    "gt1d": ("more than a day ago", 86400, None),
    "gt7d": ("more than a week ago", 7 * 86400, None),
}
_AGE_CHOICES = [(value, words) for value, (words, _, _) in AGES.items()]
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


@dataclass
class Console:
    """What a console serves: the store, the state keys its sessions are signed with, the settings (operators,
    auth, hosts, caps) and the tools whose code cancelling a run runs (None: standalone without `--tools`)."""

    store: RunStore
    keys: Any  # KeyRing
    settings: ServeSettings
    tools: Mapping[str, Tool] | None = None
    verifier: Any = None  # a TokenVerifier, or None: no authentication (loopback only)
    no_tools: str = NO_TOOLS
    graphs: Graphs = field(init=False)

    def __post_init__(self) -> None:
        self.graphs = Graphs(self.tools)


class FilterError(ValueError):
    """A filter the runs page cannot apply; the message names the parameter and what it takes."""


@dataclass(frozen=True)
class Filters:
    """The runs page's filters, from its query: each empty when not given."""

    tool: str = ""
    status: str = ""
    owner: str = ""
    age: str = ""
    build: str = ""

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        values = {name: str(query.get(name, "")).strip()[:200] for name in ("tool", "status", "owner", "age", "build")}
        if values["status"] and values["status"] not in STATUSES:
            raise FilterError(f"status={values['status']!r}: a run's status is one of {', '.join(STATUSES)}")
        if values["age"] not in AGES:
            known = ", ".join(name for name in AGES if name)
            raise FilterError(f"age={values['age']!r}: give one of {known} (or none for any time)")
        return cls(**values)

    def match(self, record: RunRecord, now: float) -> bool:
        if self.tool and record.tool != self.tool:
            return False
        if self.status and record.status != self.status:
            return False
        if self.owner and (record.owner or "") != ("" if self.owner == "-" else self.owner):
            return False
        if self.build and _build(record) != self.build:
            return False
        _, at_least, at_most = AGES[self.age]
        age = now - record.created
        return (at_least is None or age >= at_least) and (at_most is None or age <= at_most)

    @property
    def any(self) -> bool:
        return any((self.tool, self.status, self.owner, self.age, self.build))


def _build(record: RunRecord) -> str:
    build = record.meta.extra.get("build", "")
    return build if isinstance(build, str) else ""


def ago(seconds: float) -> str:
    """A span in words, as a page says how long ago something was."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def when(epoch: float) -> dict[str, str]:
    """A time as a page shows it: ISO (for <time datetime>) and in words (UTC)."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return {"iso": moment.isoformat(timespec="seconds"), "text": moment.strftime("%Y-%m-%d %H:%M:%S UTC")}


def clip(text: Any, most: int) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    return text if len(text) <= most else text[: most - 1] + "…"


def _waits(record: RunRecord) -> list[dict[str, Any]]:
    return [{"branch": w.branch, "function": w.function, "line": w.line, "point": w.point} for w in record.meta.waits]


def _asks(pending: Any) -> list[dict[str, str]]:
    return [
        {
            "key": clip(p.get("key", ""), 40),
            "kind": clip(p.get("kind", "?"), 20),
            "summary": clip(p.get("summary", ""), 200),
        }
        for p in pending
        if isinstance(p, dict)
    ]


def _row(record: RunRecord, now: float) -> dict[str, Any]:
    return {
        "id": record.run_id,
        "tool": record.tool,
        "status": record.status,
        "owner": record.owner,
        "created": when(record.created),
        "age": ago(now - record.created),
        "updated": ago(now - record.updated),
        "waits": _waits(record),
        "asks": _asks(record.meta.pending),
        "build": _build(record),
    }


def _listed(console: Console, viewer: Viewer, **query: Any) -> list[RunRecord]:
    return [record for record in console.store.list(limit=SCAN, **query) if viewer.sees(record)]


def runs_page(console: Console, viewer: Viewer, filters: Filters, now: float | None = None) -> dict[str, Any]:
    """The runs the viewer may see, newest first, as the filters narrow them, and the filters' choices."""
    now = time.time() if now is None else now
    try:
        records = _listed(console, viewer)
    except StoreDataError as error:
        shown = str(error) if viewer.operator else "the store holds a damaged run; an operator can see which"
        choices = {"tool": [], "status": list(STATUSES), "owner": [], "age": _AGE_CHOICES, "build": []}
        return {
            "damaged": shown,
            "rows": [],
            "total": 0,
            "matched": 0,
            "scanned_all": True,
            "filters": filters,
            "choices": choices,
        }
    matched = [record for record in records if filters.match(record, now)]
    tools = {record.tool for record in records} | set(console.tools or ())
    owners = {record.owner or "-" for record in records} if viewer.operator else set()
    return {
        "damaged": "",
        "rows": [_row(record, now) for record in matched[:SHOWN]],
        "total": len(records),
        "matched": len(matched),
        "scanned_all": len(records) < SCAN,
        "filters": filters,
        "choices": {
            "tool": sorted(tools),
            "status": list(STATUSES),
            "owner": sorted(owners),
            "age": _AGE_CHOICES,
            "build": sorted({_build(record) for record in records} - {""}),
        },
    }


def _answers(answers: Any) -> list[dict[str, str]]:
    """What answered a checkpoint, each answer in short: a sample's text, a form's action and content."""
    if not isinstance(answers, dict):
        return []
    out = []
    for key, value in answers.items():
        if isinstance(value, dict) and isinstance(value.get("content"), dict) and "text" in value["content"]:
            kind, text = "sample", value["content"]["text"]
        elif isinstance(value, dict) and "action" in value:
            content = value.get("content")
            kind, text = "elicit", f"{value['action']}" + (f" {clip(content, ANSWER_CHARS)}" if content else "")
        else:
            kind, text = "answer", value
        out.append({"key": clip(key, 40), "kind": kind, "text": clip(text, ANSWER_CHARS)})
    return out


def trace_id(record: RunRecord) -> str:
    """The run's trace id (W3C trace context, kept from its first round's span); "" when it was not traced."""
    kept = record.meta.extra.get("trace")
    parent = kept.get("traceparent") if isinstance(kept, dict) else None
    found = _TRACEPARENT.fullmatch(parent) if isinstance(parent, str) else None
    return found.group(1) if found and found.group(1) != "0" * 32 else ""


def cancel_refusal(console: Console, record: RunRecord) -> str:
    """Why the run cannot be cancelled from here ("" when it can)."""
    if record.status in ENDED:
        return f"the run has ended ({record.status})"
    if record.status == "running":
        return "a server is answering a round of it right now; cancel it when the round has ended"
    if console.tools is None:
        return console.no_tools
    if record.tool not in console.tools:
        return f"the tools this console was given have no tool {record.tool!r}: cancel it where {record.tool} is served"
    return ""


def load_visible(console: Console, viewer: Viewer, run_id: str) -> RunRecord | None:
    """The run, if the viewer may see it; None as for an unknown run. A damaged record is a StoreDataError for an
    operator, and None (unknown) for anyone else."""
    if not run_id or len(run_id) > 200:
        return None
    try:
        record = console.store.load(run_id)
    except StoreDataError:
        if viewer.operator:
            raise
        return None
    return record if record is not None and viewer.sees(record) else None


def run_page(
    console: Console, viewer: Viewer, run_id: str, *, values: bool = False, now: float | None = None
) -> dict[str, Any] | None:
    """Everything about one run the viewer may see (None otherwise): its facts, graph, variables, history and
    what may be done to it. `values`: the variables' values too (operators only; others get names and kinds)."""
    now = time.time() if now is None else now
    record = load_visible(console, viewer, run_id)
    if record is None:
        return None
    history = describe_history(console.store, record.run_id)
    drawn = console.graphs.run(record, history)
    reveal = values and viewer.operator
    frames, frames_note = waiting_frames(record.saved, values=reveal)
    waits = _waits(record)
    for wait, svg_id in zip(waits, drawn.wait_ids or [None] * len(waits), strict=True):
        wait["node"] = svg_id
        wait["source"] = _line_of(drawn.details.get(svg_id or "", {}), wait["line"])
    checkpoints = []
    for entry in reversed(history):
        checkpoints.append(
            {
                "k": entry["k"],
                "at": when(entry["at"]),
                "ago": ago(now - entry["at"]),
                "waits": [
                    {"function": w["function"], "line": w["line"], "point": w.get("point", ""), "branch": w["branch"]}
                    for w in entry["waits"]
                ],
                "asked": _asks(entry["asked"]),
                "answers": _answers(entry["answers"]),
                "by": entry["answered_by"],
                "answered": when(entry["answered_at"]) if entry["answered_at"] else None,
                "forked_from": entry["forked_from"],
            }
        )
    forked = record.meta.extra.get("forked_from")
    response = record.meta.response
    return {
        "run": _row(record, now),
        "record": {
            "era": record.meta.era,
            "version": record.version,
            "updated": when(record.updated),
            "expires": when(record.expires),
            "expires_in": ago(record.expires - now),
            "saved_bytes": record.size,
            "code_hash": record.meta.code_hash,
            "build": _build(record),
        },
        "trace_id": trace_id(record),
        "waits": waits,
        "frames": frames,
        "frames_note": frames_note,
        "revealed": reveal,
        "graph": drawn,
        "checkpoints": checkpoints,
        "forked_from": forked if isinstance(forked, dict) else None,
        "ended": record.status in ENDED,
        "result": clip(response.get("value", response), 2000)
        if isinstance(response, dict) and record.status in ENDED
        else "",
        "cancel_refused": cancel_refusal(console, record),
    }


def _line_of(details: dict[str, Any], line: int) -> str:
    """The text of source line `line` out of a state's source (the manifest's, as `NNNN  text` lines)."""
    for text in str(details.get("source", "")).splitlines():
        number, _, code = text.strip().partition("  ")
        if number == str(line):
            return code.strip()
    return ""


def tools_page(console: Console, viewer: Viewer) -> dict[str, Any]:
    """The tools served or seen in the viewer's runs, each with its runs counted by status."""
    records = _listed(console, viewer)
    counts: dict[str, dict[str, int]] = {}
    for record in records:
        counts.setdefault(record.tool, {}).setdefault(record.status, 0)
        counts[record.tool][record.status] += 1
    names = sorted(set(counts) | set(console.tools or ()))
    return {
        "tools": [
            {
                "name": name,
                "description": getattr((console.tools or {}).get(name), "description", "") or "",
                "served": name in (console.tools or {}),
                "counts": counts.get(name, {}),
                "waiting": counts.get(name, {}).get("waiting", 0),
            }
            for name in names
        ]
    }


def tool_page(console: Console, viewer: Viewer, name: str) -> dict[str, Any] | None:
    """A tool's split graph and where the viewer's waiting runs of it wait; None for a tool neither served nor
    seen in the viewer's runs."""
    waiting = _listed(console, viewer, status="waiting", tool=name)
    served = console.tools is not None and name in console.tools
    if not served and not waiting and not _listed(console, viewer, tool=name):
        return None
    drawn = console.graphs.tool(name, waiting)
    points: dict[tuple[str, str, int], dict[str, Any]] = {}
    index = 0
    for record in waiting:
        for wait in record.meta.waits:
            svg_id = drawn.wait_ids[index] if index < len(drawn.wait_ids) else None
            index += 1
            entry = points.setdefault(
                (wait.function, wait.point, wait.line),
                {"function": wait.function, "point": wait.point, "line": wait.line, "node": svg_id, "runs": []},
            )
            if record.run_id not in entry["runs"]:
                entry["runs"].append(record.run_id)
    tool = (console.tools or {}).get(name)
    return {
        "name": name,
        "description": getattr(tool, "description", "") or "",
        "served": served,
        "graph": drawn,
        "points": sorted(points.values(), key=lambda p: (-len(p["runs"]), p["function"], p["line"])),
        "waiting": len(waiting),
    }
