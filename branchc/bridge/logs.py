"""`branchc serve --log-format text|json`: how the server's log lines on stderr look.

`json` makes every line on stderr one JSON object: `time` (UTC, ISO 8601), `level`, `message`, `logger`, and
what the line is about where it is known (`run_id`, `round`, `tool`, `principal`, from the call being served:
runtime/tracing.py's CALL, set per call and filled in by its rounds; `trace_id` and `span_id` when a span
records). Lines written to stderr some other way (a `print`, a library's) are wrapped as `message`s of their
own, so a log pipeline never meets a line that is not JSON. In `json` each failed round is logged too (info).
`text` (the default) leaves the lines as they are.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import sys
from typing import Any, TextIO

from opentelemetry import trace

from ..runtime import tracing

__all__ = ["JsonFormatter", "configure_logging"]

ABOUT = ("run_id", "round", "tool", "principal")


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON, with what the call it was logged in is about."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        data: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "message": record.getMessage(),
            "logger": record.name,
        }
        data.update(about())
        for key in ABOUT:  # given with the record (`extra=`), where the context does not know it
            if (value := getattr(record, key, None)) is not None:
                data[key] = value
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def about() -> dict[str, Any]:
    """What the call being served is about, and its trace, for a log line."""
    data = {key: value for key, value in (tracing.CALL.get() or {}).items() if key in ABOUT}
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        data["trace_id"] = format(context.trace_id, "032x")
        data["span_id"] = format(context.span_id, "016x")
    return data


class _JsonLines(io.TextIOBase):
    """stderr for `--log-format json`: each line written that is not a JSON object already becomes one (a
    message of logger "stderr")."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.inner.write((line if line.startswith("{") else _wrapped(line)) + "\n")
        self.inner.flush()
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding


def _wrapped(line: str) -> str:
    lowered = line.lstrip().lower()
    level = (
        "error" if lowered.startswith(("error", "traceback")) else "warning" if "warning" in lowered[:20] else "info"
    )
    record = logging.LogRecord("stderr", logging.getLevelName(level.upper()), "", 0, line, None, None)
    return JsonFormatter().format(record)


def configure_logging(log_format: str) -> None:
    """Set up the process's log lines for `--log-format` (`text`: as they are)."""
    if log_format != "json":
        return
    handler = logging.StreamHandler(sys.stderr)  # the real stderr: its lines are JSON already
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("branchc").setLevel(logging.INFO)
    logging.captureWarnings(True)
    sys.stderr = _JsonLines(sys.stderr)  # type: ignore[assignment]
