"""OpenTelemetry traces and metrics (issue 24): branchc's spans beneath the SDK's, one trace per run across rounds
and replicas, and the figures recorded at the same points.

The spans are taken by the OTel SDK's in-memory exporter, and the metrics by its in-memory reader, each installed
once for this process (OpenTelemetry takes one provider of each per process); the exporter holds only what each test
makes while it runs, and metric tests compare figures before and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from _bridge_support import KEYS
from mcp import Client
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_durable_rounds import MODERN, NAME, TOOL_FILE, answer_all, args, call, expected, final, play, server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("state_key_in_env")]


class _While(SpanProcessor):
    """Passes spans on only while a test of this module runs (the provider outlives it)."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner, self.on = inner, False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.inner.on_end(span)


_EXPORTER = InMemorySpanExporter()
_GATE = _While(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Any:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(_GATE)
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _GATE.on = True
    yield _EXPORTER
    _GATE.on = False
    _EXPORTER.clear()


_READER = InMemoryMetricReader()


@pytest.fixture
def figures() -> Any:
    """The process's metrics, read by `figures()`: {(metric name, frozenset of attribute items): value}; a
    histogram's value is (count, sum)."""
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))

    def read() -> dict[tuple[str, frozenset], Any]:
        out: dict[tuple[str, frozenset], Any] = {}
        data = _READER.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, frozenset(point.attributes.items()))
                        out[key] = (point.count, point.sum) if hasattr(point, "bucket_counts") else point.value
        return out

    return read


def grown(before: dict, after: dict, name: str, **attributes: Any) -> Any:
    """How much metric `name`'s points with these attributes (and any others) grew: a count, or (count, sum)."""

    def total(figures: dict) -> Any:
        found = [
            value for (metric, items), value in figures.items() if metric == name and set(attributes.items()) <= items
        ]
        if found and isinstance(found[0], tuple):
            return (sum(v[0] for v in found), sum(v[1] for v in found))
        return sum(found)

    now, was = total(after), total(before)
    return (now[0] - (was[0] if was else 0), now[1] - (was[1] if was else 0)) if isinstance(now, tuple) else now - was


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tools(tmp_path, monkeypatch):
    from branchc.bridge.loading import load_served_tools

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    return load_served_tools(TOOL_FILE)


def named(spans: Any, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


async def handled_words(*scripts: str) -> list[Any]:
    """What a plain MCPServer tool, `words`, gives each result handler script (the Monty engine), in turn."""
    from mcp.server import MCPServer

    from branchc.bridge.handlers.monty import MontyEngine
    from branchc.bridge.handlers.wrap import add_result_handlers

    server = MCPServer("plain")

    @server.tool(structured_output=False)
    def words() -> str:
        """Some words."""
        return "a b c"

    engine = MontyEngine()
    add_result_handlers(server, engine)
    try:
        async with Client(server, mode="2026-07-28") as client:
            handler = {"language": "python"}
            return [await client.call_tool("words", {"result_handler": {**handler, "script": s}}) for s in scripts]
    finally:
        await engine.aclose()


async def fanout_call(tmp_path: Path, monkeypatch: Any, **options: Any) -> types.CallToolResult:
    """A handshake-era call of tests/servers/executor_tools.py's `fanout`, its client answering at once."""
    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    executor_tools = load_served_tools(Path(__file__).resolve().parent / "servers" / "executor_tools.py")

    async def sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="x"))

    async def elicitation(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"word": "w"})

    served = create_server({"fanout": executor_tools["fanout"]}, **options)
    async with Client(served, mode="legacy", sampling_callback=sampling, elicitation_callback=elicitation) as client:
        return await client.session.call_tool("fanout", {"marker": str(tmp_path / "marker")})


async def test_a_run_across_two_replicas_is_one_trace(spans, tools, tmp_path) -> None:
    """Three answers, four rounds, taken in turn by two servers over one SQLite file: the rounds are one trace, each
    later round a child of the first, linked to the request (a trace of its own) that carried it."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    arguments = args(3, tmp_path / "log.txt")
    async with Client(server(tools, url), **MODERN) as one, Client(server(tools, url), **MODERN) as other:
        sessions = [one.session, other.session]
        result, state, responses, count = None, None, None, 0
        while True:
            result = await call(sessions[count % 2], arguments, state, responses)
            count += 1
            if isinstance(result, types.InputRequiredResult):
                state, responses = result.request_state, await answer_all(result)
                continue
            break
    assert final(result) == expected(3) and count == 4
    rounds = sorted(named(spans, "branchc.round"), key=lambda span: span.start_time)
    requests = {span.context.span_id: span for span in spans.get_finished_spans() if span.name == f"tools/call {NAME}"}
    assert len(rounds) == 4 and len(requests) == 4
    first = rounds[0]
    assert {span.context.trace_id for span in rounds} == {first.context.trace_id}  # one trace
    assert first.parent is not None and first.parent.span_id in requests  # beneath its request's span
    run = first.attributes["branchc.run_id"]
    for number, later in enumerate(rounds[1:], 1):
        assert later.parent.span_id == first.context.span_id  # the run's trace, continued
        assert later.attributes["branchc.round"] == number and later.attributes["branchc.run_id"] == run
        (link,) = later.links
        request = requests[link.context.span_id]  # linked to the request that carried it, in a trace of its own
        assert request.context.trace_id == link.context.trace_id != first.context.trace_id
    stored = [span for span in spans.get_finished_spans() if span.name.startswith("branchc.store ") and span.parent]
    for round_ in rounds:  # each round writes what it did to the store, inside its span
        assert any(span.parent.span_id == round_.context.span_id for span in stored), round_.attributes


async def test_a_failed_round_carries_the_error_and_the_source_line(spans, tools, tmp_path) -> None:
    folder = tmp_path / "log-is-a-folder"
    folder.mkdir()  # the tool's note() cannot open it: the round after the first answer fails there
    async with Client(server(tools, f"sqlite:///{tmp_path / 'runs.db'}"), **MODERN) as client:
        asked = await call(client.session, args(2, folder))
        failed = await call(client.session, args(2, folder), asked.request_state, await answer_all(asked))
    assert failed.is_error
    (round_,) = [span for span in named(spans, "branchc.round") if span.attributes.get("branchc.round") == 1]
    assert round_.status.status_code.name == "ERROR" and "IsADirectoryError" in round_.status.description
    source = TOOL_FILE.read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if 'with open(log, "a"' in text)
    assert round_.attributes["code.filepath"] == str(TOOL_FILE) and round_.attributes["code.lineno"] == line
    assert round_.attributes["error.type"] == "IsADirectoryError"
    (event,) = [event for event in round_.events if event.name == "exception"]
    assert event.attributes["exception.type"] == "IsADirectoryError"


async def test_handshake_era_effects_are_spans_with_the_wait_on_the_client(spans, tools, tmp_path) -> None:
    """In the handshake era a sample and a form are each a span: its key, sizes, and how long the client took; what
    was said is left out."""
    callbacks = {key: value for key, value in MODERN.items() if key != "mode"}
    async with Client(server(tools, None), mode="legacy", **callbacks) as client:
        result = await client.session.call_tool(NAME, args(2, tmp_path / "log.txt"))
    assert not result.is_error, result
    (sample,) = named(spans, "branchc.sample")
    (form,) = named(spans, "branchc.elicit")
    request = next(span for span in spans.get_finished_spans() if span.name == f"tools/call {NAME}")
    assert sample.context.trace_id == form.context.trace_id == request.context.trace_id
    assert sample.attributes["branchc.messages"] == 1 and "branchc.prompt" not in sample.attributes
    assert form.attributes["branchc.key"] == "number" and form.attributes["branchc.action"] == "accept"
    assert "branchc.content" not in form.attributes
    assert form.end_time > form.start_time


def test_serve_otel_prints_spans_on_stderr_with_the_console_exporter(tmp_path) -> None:
    """`branchc serve --otel` over stdio, driven by the SDK's client; OTEL_TRACES_EXPORTER=console."""
    script = tmp_path / "client.py"
    script.write_text(
        "import anyio, os, sys\n"
        "from mcp import Client\n"
        "from mcp.client.stdio import StdioServerParameters\n"
        "async def main():\n"
        "    server = StdioServerParameters(command=sys.executable, args=['-m', 'branchc', 'serve', sys.argv[1], "
        "'--otel'], env=dict(os.environ))\n"
        "    async with Client(server) as client:\n"
        "        await client.session.call_tool('pick_card', {})\n"
        "anyio.run(main)\n"
    )
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "BRANCHC_CACHE": str(tmp_path / "cache")}
    tool = Path(__file__).resolve().parent.parent / "examples" / "tools" / "pick_card.py"
    command = [sys.executable, str(script), str(tool)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"name": "tools/call pick_card"' in done.stderr, done.stderr[-2000:]
    assert '"service.name": "branchc"' in done.stderr
    env["OTEL_TRACES_EXPORTER"] = "zipkin"  # not one branchc sets up: a clear error, before serving
    refused = subprocess.run(
        [sys.executable, "-m", "branchc", "serve", str(tool), "--otel"], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 1 and "OTEL_TRACES_EXPORTER: 'zipkin' is not an exporter" in refused.stderr


async def test_branch_steps_on_an_executor_are_spans_from_submission_to_outcome(spans, tmp_path, monkeypatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from _runtime_support import EchoClient

    from branchc import run_tool
    from branchc.bridge.loading import load_served_tools

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    executor_tools = load_served_tools(Path(__file__).resolve().parent / "servers" / "executor_tools.py")
    client = EchoClient(elicit_answers=[{"action": "accept", "content": {"word": "w"}}])
    with ThreadPoolExecutor(2) as pool:
        await run_tool(executor_tools["fanout"], {"marker": str(tmp_path / "marker")}, client, executor=pool)
    steps = named(spans, "branchc.step")
    # stepped by a worker, or (a sibling halted by a failing branch: tests/servers/executor_tools.py) dropped
    assert sorted({span.attributes["branchc.where"] for span in steps}) == ["dropped", "worker"]
    assert all("(branch 0." in span.attributes["branchc.branch"] for span in steps)
    assert all(span.end_time > span.start_time for span in steps)


async def test_a_result_handler_is_a_span_and_its_failure_an_error_on_it(spans) -> None:
    done, bad = await handled_words("len(tool_output)", "1 / 0")
    assert not done.is_error and bad.is_error
    ran, failed = sorted(named(spans, "branchc.result_handler"), key=lambda span: span.start_time)
    assert ran.attributes["branchc.engine"] == "monty" and ran.attributes["branchc.tool"] == "words"
    assert ran.status.status_code.name == "UNSET" and failed.status.status_code.name == "ERROR"
    assert "ZeroDivisionError" in failed.status.description


async def test_a_handshake_run_shows_its_branches_as_children_of_its_request(spans, tmp_path, monkeypatch) -> None:
    result = await fanout_call(tmp_path, monkeypatch)
    assert not result.is_error, result
    (request,) = [span for span in spans.get_finished_spans() if span.name == "tools/call fanout"]
    branches = named(spans, "branchc.branch")
    assert len(branches) >= 2 and {span.attributes["branchc.branch"] for span in branches} >= {"0.1", "0.2"}
    assert all(span.parent.span_id == request.context.span_id for span in branches)
    assert all(span.context.trace_id == request.context.trace_id for span in branches)


async def test_2026_effects_are_spans_from_when_they_were_asked_to_their_answer(spans, tools, tmp_path) -> None:
    """A 2026-07-28 question is asked in one round's reply and answered in the next request: its span runs from the
    asking round (its parent, in the run's trace) to the round that brought the answer, with its key and sizes."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with Client(server(tools, url), **MODERN) as one, Client(server(tools, url), **MODERN) as other:
        result, state, responses, count = None, None, None, 0
        while True:
            result = await call(
                [one.session, other.session][count % 2], args(3, tmp_path / "log.txt"), state, responses
            )
            count += 1
            if not isinstance(result, types.InputRequiredResult):
                break
            state, responses = result.request_state, await answer_all(result)
    assert final(result) == expected(3)
    rounds = sorted(named(spans, "branchc.round"), key=lambda span: span.start_time)
    effects = sorted(named(spans, "branchc.sample") + named(spans, "branchc.elicit"), key=lambda span: span.start_time)
    assert [span.name for span in effects] == ["branchc.sample", "branchc.elicit", "branchc.sample"]
    for number, effect in enumerate(effects):  # question N is asked by round N and answered by round N + 1
        asking, answering = rounds[number], rounds[number + 1]
        assert effect.parent.span_id == asking.context.span_id
        assert effect.context.trace_id == asking.context.trace_id
        assert asking.start_time <= effect.start_time <= asking.end_time
        assert effect.end_time >= answering.start_time - 10**6 and effect.end_time <= answering.end_time
        assert effect.attributes["branchc.tool"] == NAME and effect.attributes["branchc.request"].startswith(
            ("sample-", "elicit-")
        )
    sample, form = effects[0], effects[1]
    assert sample.attributes["branchc.messages"] == 1 and sample.attributes["branchc.answer_chars"] == len("reply 0")
    assert form.attributes["branchc.key"] == "number" and form.attributes["branchc.action"] == "accept"
    assert form.attributes["branchc.content_bytes"] == len('{"value": 1}')
    assert not {"branchc.prompt", "branchc.content"} & {*sample.attributes, *form.attributes}  # no content


async def test_a_failed_span_names_the_principal_only_when_told_to(spans, tools, tmp_path, monkeypatch) -> None:
    from branchc.bridge import server as server_module
    from branchc.runtime import tracing

    monkeypatch.setattr(server_module, "current_principal", lambda: "alice")
    folder = tmp_path / "log-is-a-folder"
    folder.mkdir()  # the round after the first answer fails in the tool's note()

    async def failed_round() -> ReadableSpan:
        _EXPORTER.clear()
        async with Client(server(tools, f"sqlite:///{tmp_path / 'runs.db'}"), **MODERN) as client:
            asked = await call(client.session, args(2, folder))
            assert (await call(client.session, args(2, folder), asked.request_state, await answer_all(asked))).is_error
        (round_,) = [span for span in named(spans, "branchc.round") if span.status.status_code.name == "ERROR"]
        return round_

    assert "enduser.id" not in (await failed_round()).attributes  # the default: no span names a principal
    monkeypatch.setattr(tracing, "PRINCIPAL", True)  # serve --trace-principal
    named_round = await failed_round()
    assert named_round.attributes["enduser.id"] == "alice"
    assert not [
        span for span in spans.get_finished_spans() if "enduser.id" in span.attributes and span is not named_round
    ]


async def test_rounds_effects_store_and_checkpoints_are_measured(spans, figures, tools, tmp_path) -> None:
    before = figures()
    async with Client(server(tools, f"sqlite:///{tmp_path / 'runs.db'}"), **MODERN) as client:
        result, _ = await play([client.session], args(3, tmp_path / "log.txt"))
        folder = tmp_path / "folder"
        folder.mkdir()
        asked = await call(client.session, args(2, folder))
        assert (await call(client.session, args(2, folder), asked.request_state, await answer_all(asked))).is_error
    assert final(result) == expected(3)
    after = figures()
    era = {"branchc.tool": NAME, "branchc.era": "2026-07-28"}
    assert grown(before, after, "branchc.rounds.started", **era) == 6
    assert grown(before, after, "branchc.rounds", **era, **{"branchc.outcome": "asked"}) == 4
    assert grown(before, after, "branchc.rounds", **era, **{"branchc.outcome": "done"}) == 1
    assert grown(before, after, "branchc.rounds", **era, **{"branchc.outcome": "failed"}) == 1
    count, seconds = grown(before, after, "branchc.round.duration", **era)
    assert count == 6 and seconds > 0
    assert grown(before, after, "branchc.client.wait", **era, **{"branchc.kind": "sample"})[0] == 3  # 2 + 1
    assert grown(before, after, "branchc.client.wait", **era, **{"branchc.kind": "elicit"})[0] == 1
    written, size = grown(before, after, "branchc.checkpoint.size", **era)
    assert written == 4 and size > 4 * 100  # each round that asked wrote the run
    assert grown(before, after, "branchc.store.duration", **{"branchc.operation": "load_and_claim"})[0] >= 3


async def test_handshake_calls_handlers_and_executor_steps_are_measured(spans, figures, tmp_path, monkeypatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    before = figures()
    with ThreadPoolExecutor(2) as pool:
        assert not (await fanout_call(tmp_path, monkeypatch, executor=pool)).is_error
    await handled_words("len(tool_output)", "1 / 0")
    after = figures()
    handshake = {"branchc.tool": "fanout", "branchc.era": "2025-11-25"}
    assert grown(before, after, "branchc.rounds.started", **handshake) == 1
    assert grown(before, after, "branchc.rounds", **handshake, **{"branchc.outcome": "done"}) == 1
    for kind in ("sample", "elicit"):  # its samples and forms, waited for on the client
        assert grown(before, after, "branchc.client.wait", **handshake, **{"branchc.kind": kind})[0] >= 1
    assert grown(before, after, "branchc.executor.steps", **{"branchc.where": "worker"}) >= 1
    assert grown(before, after, "branchc.executor.steps", **{"branchc.where": "dropped"}) >= 1
    assert grown(before, after, "branchc.result_handler.runs", **{"branchc.outcome": "ok"}) == 1
    assert grown(before, after, "branchc.result_handler.runs", **{"branchc.outcome": "failed"}) == 1


def test_runs_waiting_are_counted_from_the_store_by_tool_and_era(tmp_path) -> None:
    from branchc.bridge.waiting import WaitingCount
    from branchc.store import RunMeta, RunRecord, open_store

    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}", KEYS)
    try:
        made = [("a", "2026-07-28", "waiting"), ("a", "2026-07-28", "waiting"), ("a", "2025-11-25", "waiting")]
        made += [("b", "guided", "waiting"), ("b", "guided", "done")]
        for tool, era, status in made:
            store.create(RunRecord.new(tool, "{}", ttl=60, meta=RunMeta(era=era), status=status))
        assert WaitingCount(store)() == {("a", "2026-07-28"): 2, ("a", "2025-11-25"): 1, ("b", "guided"): 1}
        # bounded: past `scan` records the rest is counted, not read, so the figures add up to the store's count
        assert sum(WaitingCount(store, scan=2)().values()) == 4
        assert WaitingCount(store, scan=2)()[("(unread)", "(unread)")] == 2
    finally:
        store.close()
