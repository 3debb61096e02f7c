"""Crash recovery at every suspension point of every example tool (issue 12), in each way a run goes on.

For each example and each of its suspension points k: a run is brought to k on a `branchc serve --http` process
with a store (a SQLite file; a real PostgreSQL, tests/_postgres_support.py, killed too), the process is killed
with SIGKILL while the run waits there, and a new process (or `branchc runs resume`) on the same store
continues it:

- the 2026-07-28 era: the client sends round k again (its request_state and answers) to the new server;
- guided mode: the calling model calls branchc_resume with the state_id it was given;
- the handshake era: the server was asking the client mid-call when it died; the run is resumed from the
  store by `resume_run` (what `branchc runs resume` does), answering what it asks.

All the runs of one way share one server process, killed once. Each run's result equals an uninterrupted
run's, each question was asked as often as in that run (the ones pending at the crash once more, in the
handshake era, since the client never answered them), and after() ran once per run (book_flight books a
seat there: the bookings table counts it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import EXAMPLES, KEY, KEYS, TOOLS, free_port, listening, native_run
from _postgres_support import PostgresServer, needs_postgres
from mcp import Client

from branchc.bridge.runs import load_tools, resume_run
from branchc.runtime.client import ElicitRequest, SampleRequest
from branchc.runtime.messages import SampleResult
from branchc.store import open_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


Ask = tuple[str, str]  # ("sample", the prompt's last text) or ("elicit", the form's message)


def plain(value: Any) -> Any:
    """A result up to what differs between runs: the call id in elicitation exchange ids, and what after()
    reads from the bookings database (booking id, seats left)."""
    text = re.sub(r"elicit_[^_\"]+_", "elicit_<call>_", json.dumps(value, sort_keys=True))
    data = json.loads(text)
    if isinstance(data, dict) and "booking_id" in data:
        data = {**data, "booking_id": None, "flight": {**data["flight"], "seats": None}}
    return data


def norm(text: str) -> str:
    """A question up to the seats left, which fall as runs book them (book_flight lists them in its questions),
    and the call id in elicitation exchange ids (tictactoe shows them to the model)."""
    return re.sub(r"elicit_[^_\s\"]+_", "elicit_<call>_", re.sub(r"\d+ seats left", "N seats left", text))


class Answers:
    """What each question is answered with, as the example's responses file says (by text, not by order)."""

    def __init__(self, prompts: dict[str, str], elicits: dict[str, dict]) -> None:
        self.prompts = {norm(prompt): answer for prompt, answer in prompts.items()}
        self.elicits = elicits  # by norm(message)

    def prompt(self, text: str) -> str:
        """The responses file's prompt that `text` ends with (a tool result may come before it, in one turn)."""
        text = norm(text)
        return next(prompt for prompt in self.prompts if text == prompt or text.endswith("\n\n" + prompt))

    def sample(self, text: str) -> str:
        return self.prompts[self.prompt(text)]

    def canon(self, asks: list[Ask]) -> list[Ask]:
        """Questions as the responses file knows them: a sample by its prompt, however the era renders it."""
        return [("sample", self.prompt(text)) if kind == "sample" else (kind, text) for kind, text in asks]

    def elicit(self, message: str) -> dict:
        return self.elicits[norm(message)]


def sample_text(params: types.CreateMessageRequestParams) -> str:
    return norm("".join(block.text for block in params.messages[-1].content_as_list if block.type == "text"))


def asks_of(result: types.InputRequiredResult) -> list[Ask]:
    return [
        ("sample", sample_text(r.params))
        if isinstance(r, types.CreateMessageRequest)
        else ("elicit", norm(r.params.message))
        for r in result.input_requests.values()
    ]


def responses_to(result: types.InputRequiredResult, answers: Answers) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, request in result.input_requests.items():
        if isinstance(request, types.CreateMessageRequest):
            text = answers.sample(sample_text(request.params))
            out[key] = types.CreateMessageResult(
                role="assistant", model="scripted", content=types.TextContent(type="text", text=text)
            )
        else:
            answer = answers.elicit(request.params.message)
            out[key] = types.ElicitResult(action=answer["action"], content=answer.get("content"))
    return out


class Example:
    """One example's uninterrupted run: its result, its suspensions (the questions each asks) and answers."""

    def __init__(self, name: str, result: Any, rounds: list[list[Ask]], answers: Answers) -> None:
        self.name = name
        self.result = result
        self.rounds = rounds
        self.answers = answers

    @property
    def asked(self) -> Counter:
        return Counter(ask for round_ in self.rounds for ask in round_)


async def call(client: Any, name: str, state: str | None = None, responses: dict | None = None) -> Any:
    return await client.session.call_tool(
        name, EXAMPLES[name], request_state=state, input_responses=responses, allow_input_required=True
    )


async def never(ctx: Any, params: Any) -> Any:
    raise AssertionError("in the 2026-07-28 era the server asks in InputRequiredResult, never mid-call")


DECLARES = {"sampling_callback": never, "elicitation_callback": never}  # the capabilities, for round-trip calls


def final(result: Any) -> Any:
    assert isinstance(result, types.CallToolResult), result
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("crash")


@pytest.fixture(scope="module")
def env(folder) -> dict[str, str]:
    return {"BRANCHC_CACHE": str(folder / "cache"), "BRANCHC_FLIGHTS_DB": str(folder / "flights.sqlite")}


def serve(env: dict[str, str], db: str, port: int, *options: str) -> Any:
    command = [sys.executable, "-m", "branchc", "serve", str(TOOLS), "--state-key", KEY, "--store", db, *options]
    return listening([*command, "--http", f"127.0.0.1:{port}"], port, env)


def kill(process: Any) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def bookings(env: dict[str, str]) -> int:
    if not Path(env["BRANCHC_FLIGHTS_DB"]).exists():
        return 0
    with sqlite3.connect(env["BRANCHC_FLIGHTS_DB"]) as db:
        return db.execute("SELECT COUNT(*) FROM bookings").fetchone()[0]


@pytest.fixture(scope="module")
async def examples(folder, env) -> dict[str, Example]:
    """Each example run once, uninterrupted, in the 2026-07-28 era (rounds are its suspensions)."""
    out = {}
    port = free_port()
    with serve(env, f"sqlite:///{folder / 'baseline.db'}", port):
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28", **DECLARES) as client:
            for name in sorted(EXAMPLES):
                _, prompts, elicits = await native_run(name, {"BRANCHC_FLIGHTS_DB": str(folder / "native.sqlite")})
                order = iter(elicits)
                answers = Answers(prompts, {})
                rounds: list[list[Ask]] = []
                result = await call(client, name)
                while isinstance(result, types.InputRequiredResult):
                    rounds.append(answers.canon(asks_of(result)))
                    for kind, text in rounds[-1]:
                        if kind == "elicit":
                            answers.elicits[text] = next(order)
                    result = await call(client, name, result.request_state, responses_to(result, answers))
                out[name] = Example(name, final(result), rounds, answers)
    return out


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


BACKENDS = ["sqlite", pytest.param("postgres", marks=needs_postgres)]


def store_of(backend: str, folder: Path, name: str, request: Any) -> tuple[str, str, Callable[[], None]]:
    """(the store a way's runs are kept in, the flights database its bookings go to: seats of its own, and what
    is killed beside the server). PostgreSQL is a server of the way's own, killed with SIGKILL with the
    server and started again: what it had committed is all there (its WAL), at every suspension point."""
    flights = str(folder / f"{name}-{backend}-flights.sqlite")
    if backend == "sqlite":
        return f"sqlite:///{folder / f'{name}.db'}", flights, lambda: None
    database = PostgresServer().start()
    request.addfinalizer(database.remove)

    def crash() -> None:
        database.kill()
        database.start()

    return f"{database.url}?schema=crash", flights, crash


def points(examples: dict[str, Example]) -> list[tuple[str, int]]:
    """Every (example, suspension point) pair: k counts from 0."""
    return [(name, k) for name, example in sorted(examples.items()) for k in range(len(example.rounds))]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_retried_2026_round_continues_on_a_new_process_at_every_suspension(
    examples, folder, env, backend, request
):
    db, flights, crash = store_of(backend, folder, "modern", request)
    env = {**env, "BRANCHC_FLIGHTS_DB": flights}
    booked = bookings(env)
    port = free_port()
    waiting: dict[tuple[str, int], tuple[types.InputRequiredResult, dict]] = {}
    with serve(env, db, port) as process:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28", **DECLARES) as client:
            for name, k in points(examples):
                example = examples[name]
                result = await call(client, name)
                for _ in range(k):
                    result = await call(client, name, result.request_state, responses_to(result, example.answers))
                assert example.answers.canon(asks_of(result)) == example.rounds[k]
                waiting[name, k] = (result, responses_to(result, example.answers))
        kill(process)  # every run waits at its point k; its answers are on their way
        crash()
    with serve(env, db, port):
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28", **DECLARES) as client:
            for (name, k), (asked, responses) in waiting.items():
                example, rounds = examples[name], example_rounds(examples[name], k)
                result = await call(client, name, asked.request_state, responses)
                while isinstance(result, types.InputRequiredResult):
                    rounds.append(example.answers.canon(asks_of(result)))
                    result = await call(client, name, result.request_state, responses_to(result, example.answers))
                assert plain(final(result)) == plain(example.result), (name, k)
                assert rounds == example.rounds, (name, k)  # the same questions, in the same rounds
    assert bookings(env) - booked == len(examples["book_flight"].rounds)  # after() once per run


def example_rounds(example: Example, k: int) -> list[list[Ask]]:
    """The rounds a run stopped at k was asked before the crash (k included)."""
    return [list(round_) for round_ in example.rounds[: k + 1]]


def guide_asks(guide: dict) -> list[Ask]:
    out: list[Ask] = []
    for request in guide["requests"]:
        if request["kind"] == "sample":
            content = request["messages"][-1]["content"]
            text = content if isinstance(content, str) else content.get("text", "")
            out.append(("sample", norm(text)))
        else:
            out.append(("elicit", norm(request["message"])))
    return out


def guide_answers(guide: dict, answers: Answers) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for request, (kind, text) in zip(guide["requests"], guide_asks(guide), strict=True):
        if kind == "sample":
            out[request["key"]] = answers.sample(text)
        else:
            answer = answers.elicit(text)
            out[request["key"]] = answer.get("content") if answer["action"] == "accept" else answer["action"]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_guided_run_continues_on_a_new_process_at_every_suspension(examples, folder, env, backend, request):
    db, flights, crash = store_of(backend, folder, "guided", request)
    env = {**env, "BRANCHC_FLIGHTS_DB": flights}
    booked = bookings(env)
    port = free_port()
    waiting: dict[tuple[str, int], dict] = {}

    async def resume(client: Any, guide: dict) -> Any:
        arguments = {"state_id": guide["state_id"], "answers": guide_answers(guide, examples[guide["tool"]].answers)}
        return await client.session.call_tool("branchc_resume", arguments)

    with serve(env, db, port, "--guided") as process:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28") as client:  # it cannot sample or elicit
            for name, k in points(examples):
                guide = final(await client.session.call_tool(name, EXAMPLES[name]))
                for _ in range(k):
                    guide = final(await resume(client, guide))
                assert examples[name].answers.canon(guide_asks(guide)) == examples[name].rounds[k]
                waiting[name, k] = guide
        kill(process)
        crash()
    with serve(env, db, port, "--guided"):
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28") as client:
            for (name, k), guide in waiting.items():
                example, rounds = examples[name], example_rounds(examples[name], k)
                result = final(await resume(client, guide))
                while result.get("status") == "waiting_for_answers" and "state_id" in result:
                    rounds.append(example.answers.canon(guide_asks(result)))
                    result = final(await resume(client, result))
                assert plain(result) == plain(example.result), (name, k)
                assert rounds == example.rounds, (name, k)
    assert bookings(env) - booked == len(examples["book_flight"].rounds)


class Stops:
    """Handshake-era callbacks that answer the questions of suspensions before k and never those of k."""

    def __init__(self, example: Example, k: int) -> None:
        self.example = example
        self.before = Counter(ask for round_ in example.rounds[:k] for ask in round_)
        self.at_k = len(example.rounds[k])
        self.asked: list[Ask] = []
        self.stopped = anyio.Event()  # every question of suspension k is asked

    async def _wait_unless_answered(self, ask: Ask) -> None:
        self.asked.append(ask)
        (known,) = self.example.answers.canon([ask])
        if self.before[known] > 0:
            self.before[known] -= 1
            return
        self.at_k -= 1  # a question of suspension k: the server dies before it is answered
        if self.at_k == 0:
            self.stopped.set()
        await anyio.sleep_forever()

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = sample_text(params)
        await self._wait_unless_answered(("sample", text))
        answer = self.example.answers.sample(text)
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=answer)
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        await self._wait_unless_answered(("elicit", norm(params.message)))
        answer = self.example.answers.elicit(params.message)
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))


class Answering:
    """The runtime client `resume_run` asks (as `branchc runs resume` asks the terminal), answering by text."""

    capabilities = frozenset({"sampling", "elicitation"})

    def __init__(self, example: Example) -> None:
        self.example = example
        self.asked: list[Ask] = []

    async def sample(self, request: SampleRequest) -> SampleResult:
        self.asked.append(("sample", norm(request.last_text)))
        return SampleResult(text=self.example.answers.sample(request.last_text), model="scripted")

    async def elicit(self, request: ElicitRequest) -> dict[str, Any]:
        self.asked.append(("elicit", norm(request.message)))
        return self.example.answers.elicit(request.message)

    async def log(self, level: str, message: str) -> None:
        return None

    async def notify(self, message: str, progress: float | None, total: float | None) -> None:
        return None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_handshake_run_is_resumed_from_the_store_at_every_suspension(
    examples, folder, env, monkeypatch, backend, request
):
    db, flights, crash = store_of(backend, folder, "handshake", request)
    env = {**env, "BRANCHC_FLIGHTS_DB": flights}
    booked = bookings(env)
    port = free_port()
    stopped: dict[tuple[str, int], Stops] = {}
    with serve(env, db, port) as process:
        async with anyio.create_task_group() as group:
            for name, k in points(examples):
                stops = stopped[name, k] = Stops(examples[name], k)

                async def run(name: str = name, stops: Stops = stops) -> None:
                    async with Client(
                        f"http://127.0.0.1:{port}/mcp",
                        mode="legacy",
                        sampling_callback=stops.sampling,
                        elicitation_callback=stops.elicitation,
                    ) as client:
                        await client.session.call_tool(name, EXAMPLES[name])

                group.start_soon(run)
            with anyio.fail_after(60):
                for stops in stopped.values():
                    await stops.stopped.wait()
            kill(process)  # every run waits on its client at its point k
            crash()
            group.cancel_scope.cancel()
    monkeypatch.setenv("BRANCHC_CACHE", env["BRANCHC_CACHE"])
    monkeypatch.setenv("BRANCHC_FLIGHTS_DB", env["BRANCHC_FLIGHTS_DB"])
    for name in EXAMPLES:  # load_tools imports the server's build: not another build's module of the same name
        monkeypatch.delitem(sys.modules, name, raising=False)
    store = open_store(db, KEYS)
    tools = load_tools(TOOLS)  # what the server served: the only code the resume runs
    try:
        records = {record.run_id: record for record in store.list(status="waiting")}
        assert len(records) == len(stopped)
        for (name, k), stops in stopped.items():
            example = examples[name]
            pending = sorted(summary(text) for _, text in example.rounds[k])
            (run_id,) = [
                ident
                for ident, record in records.items()
                if record.tool == name and sorted(norm(p["summary"]) for p in record.meta.pending) == pending
            ]
            client = Answering(example)
            done = await resume_run(store, run_id, client, tools)
            del records[run_id]
            assert done.error is None, (name, k, done.error)
            assert plain(done.result) == plain(example.result), (name, k)
            # every question asked as in an uninterrupted run; those of suspension k once more (never answered)
            asked = Counter(example.answers.canon(stops.asked)) + Counter(example.answers.canon(client.asked))
            assert asked == example.asked + Counter(example.rounds[k]), (name, k)
            assert done.record.status == "done"
    finally:
        store.close()
    assert bookings(env) - booked == len(examples["book_flight"].rounds)


def summary(text: str) -> str:
    """A question as a record's pending list shows it (bridge/durable.py: one line, at most 200 characters)."""
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"
