"""OpenTelemetry spans and metrics of branchc's own work: rounds, effects, store operations, branch steps, result
handlers; and what each call is about (tool, run, round, principal), for its spans and its log lines.

Spans go beneath the span the `mcp` SDK's middleware opens for each request, through the OpenTelemetry API, which
the SDK already depends on. Without an OpenTelemetry SDK configured (`branchc serve --otel`: bridge/telemetry.py)
no span is made at all. Metrics are recorded at the same points (one place records a point's span and its
figures together), and only once a meter provider is set (`serve --metrics`): until then each point costs a
flag test.

A run's rounds are separate requests, often on separate replicas. So that a run is one trace, its first round's
span context is kept in the run's record (`kept_context`), and each later round's span continues it
(`continued`), with a link to the request that carried the round.

What users and models wrote (prompts, answers, sampled text) is left out of spans unless `--trace-content` says
otherwise (`CONTENT`); sizes and keys are always there.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Link, Span, StatusCode

__all__ = [
    "CALL",
    "CONTENT",
    "PRINCIPAL",
    "TRACER",
    "BranchSpans",
    "Round",
    "call_context",
    "checkpoint_written",
    "continued",
    "effect_answered",
    "effects_answered",
    "failed",
    "handler_ran",
    "kept_context",
    "measuring",
    "note",
    "observed_round",
    "recording",
    "span",
    "step_ended",
    "store_operation",
    "waiting_runs",
]

TRACER = trace.get_tracer("branchc")
#: where frames that are not the tool's own code are: branchc's, the standard library's, installed packages'
_NOT_THE_TOOLS = tuple(
    {os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep}
    | {path + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib") if (path := sysconfig.get_path(key))}
)
#: whether spans may hold what users and models wrote (`serve --trace-content`)
CONTENT = False
#: whether a failed span names the caller's principal (`enduser.id`: `serve --trace-principal`); else no span does
PRINCIPAL = False
#: what the call being served is about: tool, principal, and once known run_id and round (bridge/server.py sets it
#: per call, the rounds fill it in); read by failed spans and by `--log-format json` (bridge/logs.py)
CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("branchc_call", default=None)


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
    if not _RECORDING and _set(trace, "_TRACER_PROVIDER", _tracer_provider_set):
        _RECORDING = True
    return _RECORDING


def _set(module: Any, name: str, check: Callable[[], bool]) -> bool:
    """Whether the API's global provider `module.name` is set: read from the global itself while the API keeps it
    there (`get_*_provider()` reads the environment each time: a few us, at every point of every round while
    nothing is set up), else by `check()`."""
    value = getattr(module, name, _UNKNOWN)
    return check() if value is _UNKNOWN else value is not None


_UNKNOWN = object()


def _tracer_provider_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


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
    if PRINCIPAL and (call := CALL.get()) is not None and call.get("principal") is not None:
        attributes["enduser.id"] = call["principal"]
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


# -- what the call is about ---------------------------------------------------------------------------------


@contextlib.contextmanager
def call_context(**about: Any) -> Iterator[dict[str, Any]]:
    """What the call being served is about (tool, principal), for the spans and log lines made while inside; the
    rounds add its run_id and round (`note`)."""
    call = {key: value for key, value in about.items() if value is not None}
    token = CALL.set(call)
    try:
        yield call
    finally:
        CALL.reset(token)


def note(**about: Any) -> None:
    """The call's run id or round, once known: on its context (log lines) and on the current span."""
    call = CALL.get()
    if call is not None:
        call.update((key, value) for key, value in about.items() if value is not None)
    if _RECORDING:
        trace.get_current_span().set_attributes({f"branchc.{k}": v for k, v in about.items() if v is not None})


# -- metrics -----------------------------------------------------------------------------------------------

_MEASURING = False
_MAKING = threading.Lock()
_INSTRUMENTS: _Instruments | None = None
_WAITING: list[Callable[[], Mapping[tuple[str, str], int]]] = []  # the servers' counts of waiting runs

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_STORE_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
_WAIT_SECONDS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
_BYTES = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)


class _Instruments:
    """branchc's instruments, made once, when a meter provider is first seen (`measuring`)."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.rounds_started = meter.create_counter(
            "branchc.rounds.started", "{round}", "Rounds begun: 2026-07-28 and guided rounds, handshake-era calls"
        )
        self.rounds = meter.create_counter(
            "branchc.rounds", "{round}", "Rounds ended, by outcome: asked (the run waits for answers), done, failed"
        )
        self.round_duration = meter.create_histogram(
            "branchc.round.duration",
            "s",
            "Time from a round's start to its answer (a handshake-era call: to its result, its waits included)",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self.client_wait = meter.create_histogram(
            "branchc.client.wait",
            "s",
            "Time a sample or a form waited for its answer: on the client (or the calling model) from being asked",
            explicit_bucket_boundaries_advisory=_WAIT_SECONDS,
        )
        self.store_duration = meter.create_histogram(
            "branchc.store.duration",
            "s",
            "Time of a store operation",
            explicit_bucket_boundaries_advisory=_STORE_SECONDS,
        )
        self.checkpoint_size = meter.create_histogram(
            "branchc.checkpoint.size", "By", "Bytes of a run's saved text written at a checkpoint",
            explicit_bucket_boundaries_advisory=_BYTES,
        )  # fmt: skip
        self.handler_runs = meter.create_counter(
            "branchc.result_handler.runs", "{run}", "Result handlers run, by engine and outcome (ok, failed)"
        )
        self.executor_steps = meter.create_counter(
            "branchc.executor.steps", "{step}", "Branch steps sent to an executor, by where they ended: worker, here, "
            "dropped, failed"
        )  # fmt: skip
        meter.create_observable_gauge(
            "branchc.runs.waiting",
            [_observe_waiting],
            "{run}",
            "Runs waiting in the store for their next round or answer, by tool and era (the whole store's, read at "
            "each collection)",
        )


def measuring() -> bool:
    """Whether a meter provider is set for this process (`serve --metrics`, or a test's): until then nothing is
    measured. Once set, it stays."""
    global _MEASURING, _INSTRUMENTS
    if not _MEASURING and _set(_metrics_api, "_METER_PROVIDER", _meter_provider_set):
        with _MAKING:  # store threads measure too: the instruments are made once
            if not _MEASURING:
                _INSTRUMENTS = _Instruments(metrics.get_meter("branchc"))
                _MEASURING = True
    return _MEASURING


def _meter_provider_set() -> bool:
    provider = metrics.get_meter_provider()
    return not isinstance(provider, metrics.NoOpMeterProvider) and type(provider).__name__ != "_ProxyMeterProvider"


def waiting_runs(count: Callable[[], Mapping[tuple[str, str], int]]) -> Callable[[], None]:
    """Report `count()` ({(tool, era): runs waiting}) as `branchc.runs.waiting` at each collection; the function to
    call when it no longer should (its server stopped)."""
    _WAITING.append(count)
    return lambda: _WAITING.remove(count) if count in _WAITING else None


def _observe_waiting(options: Any) -> Iterator[metrics.Observation]:
    totals: dict[tuple[str, str], int] = {}
    for count in list(_WAITING):
        with contextlib.suppress(Exception):  # a store that cannot answer now: no figure, not a failed scrape
            for key, value in count().items():
                totals[key] = max(totals.get(key, 0), value)  # servers of one process share their store
    for (tool, era), value in sorted(totals.items()):
        yield metrics.Observation(value, {"branchc.tool": tool, "branchc.era": era})


class Round:
    """One round being served: its span (or INVALID_SPAN), and the outcome `ended` notes for its metrics."""

    __slots__ = ("outcome", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.outcome = "failed"

    def ended(self, response: Any) -> Any:
        """Note the round's response (a tool result or an InputRequiredResult) and give it back."""
        if getattr(response, "is_error", False):
            self.outcome = "failed"
        elif getattr(response, "input_requests", None) is not None or _guides(response):
            self.outcome = "asked"
        else:
            self.outcome = "done"
        return response


def _guides(response: Any) -> bool:
    """Whether a tool result is a guided round's question for the calling model (its state id and next action)."""
    structured = getattr(response, "structured_content", None)
    return isinstance(structured, dict) and "state_id" in structured and "next_action" in structured


def observed_round(
    tool: str,
    era: str,
    *,
    number: int | None = None,
    run_id: str | None = None,
    context: Context | None = None,
    links: list[Link] | None = None,
    spanned: bool = True,
) -> contextlib.AbstractContextManager[Round]:
    """A round: its `branchc.round` span (unless not `spanned`: a handshake-era call, whose request's span is its
    own), and its counts and duration; the caller gives its response to `Round.ended`. Its number and run id go on
    the call's context (log lines) whatever is set up."""
    if (call := CALL.get()) is not None:
        call.update((key, value) for key, value in (("round", number), ("run_id", run_id)) if value is not None)
    if not _MEASURING and not _RECORDING and not measuring() and not recording():
        return _UNOBSERVED  # nothing set up: no span, no figure, no generator
    return _observed_round(tool, era, number, run_id, context, links, spanned)


class _Unobserved(contextlib.AbstractContextManager):  # type: ignore[type-arg]
    """The round, or the store operation, when nothing is set up: nothing to open or close."""

    def __enter__(self) -> Round:
        return _NO_ROUND

    def __exit__(self, *exc: object) -> None:
        return None


_UNOBSERVED = _Unobserved()
_NO_ROUND = Round(trace.INVALID_SPAN)  # shared: what it notes is read by no one


@contextlib.contextmanager
def _observed_round(
    tool: str, era: str, number: Any, run_id: Any, context: Any, links: Any, spanned: bool
) -> Iterator[Round]:
    if not _MEASURING and not measuring():
        if not spanned or not recording():
            yield Round(trace.INVALID_SPAN)
            return
        attributes = {"branchc__tool": tool, "branchc__round": number, "branchc__era": era, "branchc__run_id": run_id}
        with span("branchc.round", context=context, links=links, **attributes) as current:
            yield Round(current)
        return
    instruments = _INSTRUMENTS
    assert instruments is not None
    labels = {"branchc.tool": tool, "branchc.era": era}
    instruments.rounds_started.add(1, labels)
    started = time.perf_counter()
    round_ = Round(trace.INVALID_SPAN)
    try:
        if spanned:
            attributes = {"branchc__tool": tool, "branchc__round": number, "branchc__era": era}
            with span("branchc.round", context=context, links=links, branchc__run_id=run_id, **attributes) as current:
                round_.span = current
                yield round_
        else:
            yield round_
    except BaseException:
        round_.outcome = "failed"
        raise
    finally:
        outcome = {**labels, "branchc.outcome": round_.outcome}
        instruments.rounds.add(1, outcome)
        instruments.round_duration.record(time.perf_counter() - started, outcome)


def store_operation(name: str) -> contextlib.AbstractContextManager[Any]:
    """A store call: its `branchc.store NAME` span and its duration."""
    if not _MEASURING and not _RECORDING and not measuring() and not recording():
        return _UNOBSERVED
    return _store_operation(name)


@contextlib.contextmanager
def _store_operation(name: str) -> Iterator[None]:
    if not _MEASURING and not measuring():
        with span(f"branchc.store {name}"):
            yield
        return
    started = time.perf_counter()
    try:
        with span(f"branchc.store {name}"):
            yield
    finally:
        assert _INSTRUMENTS is not None
        _INSTRUMENTS.store_duration.record(time.perf_counter() - started, {"branchc.operation": name})


def checkpoint_written(saved: str, tool: str, era: str) -> None:
    """A run's saved text was written to the store (its size in UTF-8 bytes is measured)."""
    if _MEASURING or measuring():
        assert _INSTRUMENTS is not None
        _INSTRUMENTS.checkpoint_size.record(len(saved.encode()), {"branchc.tool": tool, "branchc.era": era})


def effects_answered(asked: Any, requests: Mapping[str, Any], answers: Mapping[str, Any], tool: str, era: str) -> None:
    """The samples and forms of `requests` (a machine's, by key), asked when `asked` says ({"at": ns, "trace": the
    asking round's context}), were answered now with `answers`: each is a span of its own from then to now, in the
    asking round's trace, and a measure of the wait. Nothing when `asked` is not that (a record from before)."""
    if type(asked) is not dict or type(asked.get("at")) is not int:  # (a record's JSON: a plain dict)
        return
    now = time.time_ns()
    if _MEASURING or measuring():
        for request in requests.values():
            effect_answered(request.kind, tool, era, (now - asked["at"]) / 1e9)
    if not recording():
        return
    context, _ = continued(asked.get("trace"))
    for key, request in requests.items():
        attributes: dict[str, Any] = {"branchc.tool": tool, "branchc.request": key}
        answer = answers.get(key)
        if request.kind == "sample":
            messages = getattr(request.sample, "messages", None) or []
            attributes["branchc.messages"] = len(messages)
            text = getattr(answer, "text", None)
            if isinstance(text, str):
                attributes["branchc.answer_chars"] = len(text)
            if CONTENT:
                attributes["branchc.prompt"] = _shown([_dumped(message) for message in messages[-1:]])
        else:
            attributes["branchc.key"] = getattr(request.elicit, "key", "")
            if isinstance(answer, Mapping):
                attributes["branchc.action"] = str(answer.get("action"))
                attributes["branchc.content_bytes"] = len(_shown(answer.get("content"), limit=None).encode())
                if CONTENT:
                    attributes["branchc.content"] = _shown(answer.get("content"))
        if isinstance(answer, BaseException):
            attributes["error.type"] = type(answer).__qualname__
        effect = TRACER.start_span(
            f"branchc.{request.kind}", context=context, start_time=asked["at"], attributes=attributes
        )
        if isinstance(answer, BaseException):
            effect.set_status(StatusCode.ERROR, str(answer))
        effect.end(end_time=now)


def _dumped(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if dump is not None else value


def _shown(value: Any, limit: int | None = 4096) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if limit is None else text[:limit]


def effect_answered(kind: str, tool: str, era: str, seconds: float) -> None:
    """A sample or a form (`kind`) was answered `seconds` after it was asked."""
    if _MEASURING or measuring():
        assert _INSTRUMENTS is not None
        _INSTRUMENTS.client_wait.record(
            max(seconds, 0.0), {"branchc.tool": tool, "branchc.era": era, "branchc.kind": kind}
        )


def handler_ran(engine: str, ok: bool) -> None:
    if _MEASURING or measuring():
        assert _INSTRUMENTS is not None
        _INSTRUMENTS.handler_runs.add(1, {"branchc.engine": engine, "branchc.outcome": "ok" if ok else "failed"})


def step_ended(where: str) -> None:
    """A branch step sent to an executor ended: stepped by a `worker`, run `here` instead, `dropped`, or `failed`."""
    if _MEASURING or measuring():
        assert _INSTRUMENTS is not None
        _INSTRUMENTS.executor_steps.add(1, {"branchc.where": where})
