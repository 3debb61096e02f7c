"""Run traces: `branchc run --trace FILE` records every step of a run as JSON, which
`branchc graph --trace FILE` lays over the split graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..runtime.inputs import InputError, parse_json, read_text

__all__ = ["TRACE_FORMAT", "TraceError", "TraceRecorder", "read_trace"]

TRACE_FORMAT = "branchc-trace/1"


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and what is wrong."""


class TraceRecorder:
    """An `on_event` callback that keeps every event; `write` saves them with the run's outcome."""

    def __init__(self, source: str | Path, client: str | None) -> None:
        self.source = str(source)
        self.client = client
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append({"seq": len(self.events) + 1, **event})

    def write(self, path: str | Path, *, result: Any = None, error: str | None = None) -> None:
        start = next((e for e in self.events if e["event"] == "start"), {})
        data = {
            "format": TRACE_FORMAT,
            "tool": start.get("tool"),
            "source": self.source,
            "client": self.client,
            "params": start.get("params"),
            "events": self.events,
            **({"error": error} if error is not None else {"result": result}),
        }
        Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


_EVENT_FIELDS = (
    ("branch", str, "a string"),
    ("function", (str, type(None)), "a string"),
    ("line", int, "an integer"),
    ("column", int, "an integer"),
    ("result", (dict, list, str, int, float, bool, type(None)), "JSON data"),
    ("answer", dict, "an object"),
)


def read_trace(path: str | Path) -> dict[str, Any]:
    """A trace written by `branchc run --trace`, checked for the shape the overlay reads."""
    try:
        data = parse_json(read_text(path), str(path))  # within the input limits: no depth or size past them
    except InputError as error:
        raise TraceError(str(error)) from None
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise TraceError(
            f"{path}: not a branchc trace (expected format {TRACE_FORMAT!r}); record one with branchc run --trace"
        )
    events = data.get("events")
    if not isinstance(events, list):
        raise TraceError(f"{path}: events: expected a list of events")
    for index, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            raise TraceError(f"{path}: events[{index}]: expected an object with an 'event' name")
        for field, kind, what in _EVENT_FIELDS:
            if field in event and not isinstance(event[field], kind):
                raise TraceError(f"{path}: events[{index}].{field}: expected {what}")
    for field in ("tool", "client"):
        if data.get(field) is not None and not isinstance(data[field], str):
            raise TraceError(f"{path}: {field}: expected a string")
    return data
