"""OpenTelemetry spans of branchc's own work: rounds, effects, store operations, branch steps, result handlers.

They go beneath the span the `mcp` SDK's middleware opens for each request, through the OpenTelemetry API, which
the SDK already depends on. Without an OpenTelemetry SDK configured (`branchc serve --otel`: bridge/telemetry.py)
every span here is a no-op that records nothing.

A run's rounds are separate requests, often on separate replicas. So that a run is one trace, its first round's
span context is kept in the run's record (`kept_context`), and each later round's span continues it
(`continued`), with a link to the request that carried the round.

What users and models wrote (prompts, answers, sampled text) is left out of spans unless `--trace-content` says
otherwise (`CONTENT`); sizes and keys are always there.
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, StatusCode

__all__ = ["CONTENT", "TRACER", "BranchSpans", "continued", "failed", "kept_context", "recording", "span"]

TRACER = trace.get_tracer("branchc")
#: where frames that are not the tool's own code are: branchc's, the standard library's, installed packages'
_NOT_THE_TOOLS = tuple(
    {os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep}
    | {path + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib") if (path := sysconfig.get_path(key))}
)
#: whether spans may hold what users and models wrote (`serve --trace-content`)
CONTENT = False


@contextlib.contextmanager
def span(
    name: str, *, context: Context | None = None, links: list[Link] | None = None, **attributes: Any
) -> Iterator[Span]:
    """A span of branchc's own work, current while inside; an exception escaping it is recorded on it (with the
    place it was raised), and raised on."""
    if not recording():  # nothing would record it: no span at all (a no-op span still costs a few us)
        yield trace.INVALID_SPAN
        return
    shown = {key.replace("__", "."): value for key, value in attributes.items() if value is not None}
    with TRACER.start_as_current_span(
        name, context=context, links=links, attributes=shown, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as error:
            failed(current, error)
            raise


_RECORDING = False


def recording() -> bool:
    """Whether a tracer provider is set for this process (`serve --otel`, or a test's): until then no span
    records anything. Once set, it stays."""
    global _RECORDING
    if not _RECORDING and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _RECORDING = True
    return _RECORDING


def failed(current: Span, error: BaseException) -> None:
    """Mark `current` failed with `error`, naming where it was raised: the innermost frame of the tool's own code
    when there is one (a compiled function's frame names its source file and line)."""
    if not current.is_recording():
        return
    frames = traceback.extract_tb(error.__traceback__)
    own = [frame for frame in frames if not frame.filename.startswith(_NOT_THE_TOOLS)] or frames
    attributes: dict[str, Any] = {"error.type": type(error).__qualname__}
    if own:
        attributes |= {"code.filepath": own[-1].filename, "code.lineno": own[-1].lineno or 0}
        if own[-1].name:
            attributes["code.function"] = own[-1].name
    current.record_exception(error, attributes=attributes)
    current.set_attributes(attributes)
    current.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")


def kept_context() -> dict[str, str]:
    """The current span's context as text (W3C `traceparent`), for a run's record: {} when no span records."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def continued(kept: Any) -> tuple[Context | None, list[Link]]:
    """(the context a later round's span continues: the run's, from its record; the links to give it: the request
    that carries the round). A record without a kept context continues the request's own trace."""
    if not kept or not recording():
        return None, []
    request = trace.get_current_span().get_span_context()
    links = [Link(request)] if request.is_valid else []
    if not isinstance(kept, Mapping) or not all(type(k) is str and type(v) is str for k, v in kept.items()):
        return None, []
    context = propagate.extract(dict(kept))
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None, []
    return context, links


class BranchSpans:
    """A run machine's sub-branches as spans, children of the span current when each starts (its round's, its
    request's): it listens to the machine's "branch" and "branch_end" events, passing each on to `inner`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.open: dict[str, Span] = {}

    def emit(self, event: str, branch: Any = None, **data: Any) -> None:
        if event == "branch":
            attributes = {"branchc.branch": branch.id, "branchc.name": branch.name, "branchc.depth": branch.depth}
            self.open[branch.id] = TRACER.start_span("branchc.branch", attributes=attributes)
        elif event == "branch_end":
            span = self.open.pop(getattr(branch, "id", None), None)
            if span is not None:
                if "error" in data:
                    span.set_status(StatusCode.ERROR, str(data["error"]))
                span.end()
        self.inner(event, branch, **data)

    def close(self, why: str) -> None:
        """End the spans of branches that go on elsewhere (the machine was saved and let go of)."""
        for span in self.open.values():
            span.set_attribute("branchc.ended", why)
            span.end()
        self.open.clear()
