"""Durable rounds: the 2026-07-28 era and guided mode with a continuation store (bridge/durable.py).

Real parts: the real `mcp` client in the 2026-07-28 era, real SQLite files, a real redis-server
(tests/_redis_support.py) and a real PostgreSQL (tests/_postgres_support.py), `branchc serve --http`
subprocesses on 127.0.0.1, one killed with SIGKILL.
The tool (tests/servers/durable_tools.py) logs every step, its finally and its after() to a file, so
each test counts what ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, KEYS, as_if_another_build, free_port, listening, within
from _postgres_support import needs_postgres
from _redis_support import RedisServer, needs_redis
from mcp import Client

from branchc.bridge.durable import REF_PREFIX, default_store_url, serving_store, state_dir, tool_code_hash
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.runtime.builds import builds_root
from branchc.store import open_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


TOOL_FILE = Path(__file__).parent / "servers" / "durable_tools.py"
NAME = "durable_steps"


class Answers:
    """Client callbacks (they declare sampling and elicitation); question n: "reply n" or {"value": n}."""

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = "".join(block.text for block in params.messages[-1].content_as_list if block.type == "text")
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=f"reply {text.split()[-1]}")
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"value": int(params.message.split()[-1])})

    def callbacks(self) -> dict[str, Any]:
        return {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation}


MODERN = {"mode": "2026-07-28", **Answers().callbacks()}


async def answer_all(asked: types.InputRequiredResult, shift: int = 0) -> dict[str, Any]:
    """Every input request of a round answered as Answers would (`shift` changes a form's answer)."""
    out: dict[str, Any] = {}
    for key, request in asked.input_requests.items():
        if isinstance(request, types.CreateMessageRequest):
            out[key] = await Answers().sampling(None, request.params)
        else:
            answer = await Answers().elicitation(None, request.params)
            out[key] = types.ElicitResult(action="accept", content={"value": answer.content["value"] + shift})
    return out


def expected(rounds: int) -> dict[str, Any]:
    return {"answers": [f"reply {n}" if n % 2 == 0 else n for n in range(rounds)], "done": True}


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def ran_once(log: Path, rounds: int) -> None:
    assert lines(log) == [*(f"step {n}" for n in range(rounds)), "finally", "after"], lines(log)


def args(rounds: int, log: Path, slow: float = 0) -> dict[str, Any]:
    return {"rounds": rounds, "log": str(log), "slow": slow}


async def call(session: Any, arguments: dict, state: str | None = None, responses: dict | None = None) -> Any:
    return await session.call_tool(
        NAME, arguments, input_responses=responses, request_state=state, allow_input_required=True
    )


async def play(sessions: list[Any], arguments: dict) -> tuple[Any, list[str]]:
    """The call to its end, round k on sessions[k % len]; (its result, every request_state it was given)."""
    state, responses, states, count = None, None, [], 0
    while True:
        result = await call(sessions[count % len(sessions)], arguments, state, responses)
        count += 1
        if not isinstance(result, types.InputRequiredResult):
            return result, states
        state, responses = result.request_state, await answer_all(result)
        states.append(state)


def final(result: Any) -> Any:
    assert isinstance(result, types.CallToolResult), result
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result: Any) -> str:
    assert isinstance(result, types.CallToolResult) and result.is_error, result
    return result.content[0].text


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("durable_cache"))


@pytest.fixture
def tools(cache, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", cache)
    return load_served_tools(TOOL_FILE)


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def server(tools: dict, url: str | None, **options: Any) -> Any:
    store = open_store(url, KEYS) if url else None
    return create_server(tools, state_key=KEY, store=store, **options)


# -- in process: one server, the real client, a real SQLite file ---------------------------------------------


async def test_a_multi_round_run_completes_with_a_store_and_its_state_is_short(tools, db, tmp_path):
    log = tmp_path / "log.txt"
    async with Client(server(tools, db), **MODERN) as client:
        result, states = await within(30, play([client.session], args(6, log)))
    assert final(result) == expected(6)
    ran_once(log, 6)
    nolog = tmp_path / "nolog.txt"
    async with Client(server(tools, None), **MODERN) as client:
        plain, inline = await within(30, play([client.session], args(6, nolog)))
    assert final(plain) == expected(6)
    assert max(map(len, states)) < 400, states  # a sealed run reference
    assert max(map(len, states)) * 3 < max(map(len, inline)), (max(map(len, states)), max(map(len, inline)))
    record = open_store(db, KEYS).list()[0]
    assert record.status == "done" and record.saved == "" and record.meta.extra["answered"] == 6


async def test_a_retried_round_returns_the_same_response_and_runs_nothing_twice(tools, db, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    async with Client(server(tools, db), **MODERN) as client:
        session = client.session
        first = await call(session, arguments)
        responses = await answer_all(first)
        second = await call(session, arguments, first.request_state, responses)
        assert lines(log) == ["step 0"]
        (record,) = open_store(db, KEYS).list()
        assert record.meta.response is None  # not stored: it holds the whole history, which the saved run has
        again = await call(session, arguments, first.request_state, responses)  # the response was lost: again
        assert lines(log) == ["step 0"]
        assert again.input_requests == second.input_requests
        # the retry's state is a fresh seal of the same reference: both continue the one run
        third = await call(session, arguments, again.request_state, await answer_all(again))
        assert lines(log) == ["step 0", "step 1"]
        stale = await call(session, arguments, second.request_state, await answer_all(second))
        assert stale.input_requests == third.input_requests  # round 2 answered: the stored response again
        last = await call(session, arguments, third.request_state, await answer_all(third))
        assert final(last) == expected(3)
        retried = await call(session, arguments, third.request_state, await answer_all(third))
        assert final(retried) == expected(3)  # the final round again: the same result, after() ran once
    ran_once(log, 3)


async def test_other_answers_to_an_answered_round_and_an_old_state_are_refused(tools, db, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(4, log)
    async with Client(server(tools, db), **MODERN) as client:
        session = client.session
        first = await call(session, arguments)
        second = await call(session, arguments, first.request_state, await answer_all(first))
        # round 2 is a form: a different answer to it once it was answered is refused
        third = await call(session, arguments, second.request_state, await answer_all(second))
        other = await call(session, arguments, second.request_state, await answer_all(second, shift=5))
        assert "was answered already, with other answers" in error_text(other)
        # round 1, two rounds back, replayed (same answers or others): the run has moved on, nothing forks
        other_reply = types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text="another reply")
        )
        for replayed in (await answer_all(first), {"sample-1": other_reply}):
            old = await call(session, arguments, first.request_state, replayed)
            assert "has moved on: this request_state is for round 1, and the run is at round 3" in error_text(old)
        assert lines(log) == ["step 0", "step 1"]
        # answers that do not fit are refused before anything is written: the same state stays good
        wrong = await call(session, arguments, third.request_state, {})
        assert "lacks answers to" in error_text(wrong)
        fourth = await call(session, arguments, third.request_state, await answer_all(third))
        last = await call(session, arguments, fourth.request_state, await answer_all(fourth))
        assert final(last) == expected(4)
        after = await call(session, arguments, second.request_state, await answer_all(second))
        assert "has moved on" in error_text(after) and "has ended (done)" in error_text(after)
    ran_once(log, 4)


async def test_the_record_says_where_the_run_waits_and_refuses_a_build_that_cannot_take_it(tools, db, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    store = open_store(db, KEYS)
    async with Client(server(tools, db), **MODERN) as client:
        first = await call(client.session, arguments)
        second = await call(client.session, arguments, first.request_state, await answer_all(first))
        (record,) = store.list()
        meta = record.meta
        assert record.status == "waiting" and record.tool == NAME
        assert meta.era == "2026-07-28" and meta.code_hash == tool_code_hash(tools[NAME])
        assert meta.extra["tool"] == NAME and meta.extra["round"] == 2 and meta.extra["answered"] == 1
        build = meta.extra["build"]  # the id of the build that saved it, kept in the cache by its content
        assert re.fullmatch(r"[0-9a-f]{16}", build) and (builds_root() / build / "branchc.json").is_file()
        (wait,) = meta.waits
        source = TOOL_FILE.read_text().splitlines()
        assert wait.function == "steps" and "ctx.elicit(" in source[wait.line - 1], wait
        assert meta.pending == ({"key": "elicit-1", "kind": "elicit", "branch": "0", "summary": "question 1"},)
        assert wait.point == "try:body/for/if:else/elicit:number", wait
        # saved by another build, waiting at a point this one does not have: a clear error naming the run and the
        # point, nothing resumed
        store.checkpoint(record.run_id, record.version, saved=as_if_another_build(record.saved, "gone"))
        refused = await call(client.session, arguments, second.request_state, await answer_all(second))
        text = error_text(refused)
        assert f"stored run {record.run_id!r} cannot be continued" in text and "point 'gone'" in text, text
        assert "this build of it has no such point" in text
    assert lines(log) == ["step 0"]


async def test_two_servers_given_the_same_round_at_once_run_it_once(tools, db, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(2, log, slow=0.5)
    async with Client(server(tools, db), **MODERN) as a, Client(server(tools, db), **MODERN) as b:
        first = await call(a.session, arguments)
        responses = await answer_all(first)
        results: list[Any] = [None, None]

        async def send(index: int, session: Any) -> None:
            results[index] = await call(session, arguments, first.request_state, responses)

        async with anyio.create_task_group() as group:
            group.start_soon(send, 0, a.session)
            group.start_soon(send, 1, b.session)
        assert all(isinstance(r, types.InputRequiredResult) for r in results), results
        assert results[0].input_requests == results[1].input_requests  # the loser waited for the winner's response
        assert lines(log) == ["step 0"]
        last = await call(b.session, arguments, results[0].request_state, await answer_all(results[0]))
    assert final(last) == expected(2)
    ran_once(log, 2)


async def test_guided_mode_keeps_its_runs_in_the_store(tools, db, tmp_path):
    log = tmp_path / "log.txt"
    # no callbacks: a client that can neither sample nor elicit; guided mode answers through branchc_resume
    async with Client(server(tools, db, guided=True), mode="2026-07-28") as client:
        guide = (await client.session.call_tool(NAME, args(1, log))).structured_content
    store = open_store(db, KEYS)
    record = store.load(guide["state_id"])
    assert record is not None and record.status == "waiting" and record.meta.era == "guided"
    assert record.meta.code_hash == tool_code_hash(tools[NAME]) and record.meta.extra["tool"] == NAME
    assert record.meta.pending == ({"key": "sample-1", "kind": "sample", "branch": "0", "summary": "question 0"},)
    assert [(w.function, w.branch) for w in record.meta.waits] == [("steps", "0")]
    # saved by another build, waiting at a point this one does not have: refused naming the point, and it waits on
    # for a server with a build that can take it
    saved = record.saved
    record = store.checkpoint(record.run_id, record.version, saved=as_if_another_build(saved, "gone"))
    async with Client(server(tools, db, guided=True), mode="2026-07-28") as client:
        refused = await client.session.call_tool(
            "branchc_resume", {"state_id": guide["state_id"], "answers": {"sample-1": "reply 0"}}
        )
    assert "point 'gone'" in error_text(refused), error_text(refused)
    record = store.load(record.run_id)
    assert record.status == "waiting"
    store.checkpoint(record.run_id, record.version, saved=saved)
    async with Client(server(tools, db, guided=True), mode="2026-07-28") as client:  # another server, one store
        done = await client.session.call_tool(
            "branchc_resume", {"state_id": guide["state_id"], "answers": {"sample-1": "reply 0"}}
        )
    assert final(done) == {"answers": ["reply 0"], "done": True}
    ran_once(log, 1)


# -- the state folder ----------------------------------------------------------------------------------------


def test_http_serving_defaults_to_sqlite_in_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_STATE_DIR", str(tmp_path / "state" / "deep"))
    assert default_store_url() == f"sqlite:///{tmp_path / 'state' / 'deep' / 'runs.db'}"
    store = serving_store(None, http=True)
    assert store is not None and (tmp_path / "state" / "deep" / "runs.db").is_file()
    store.close()
    assert serving_store(None, http=False) is None  # stdio: none unless --store is given
    assert serving_store("none", http=True) is None
    monkeypatch.delenv("BRANCHC_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "branchc"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_dir() == Path.home() / ".local" / "state" / "branchc"


# -- real servers: branchc serve --http subprocesses ---------------------------------------------------------


def http_serve(cache: str, *options: str, port: int | None = None) -> Any:
    port = port or free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY]
    command += ["--http", f"127.0.0.1:{port}", *options]
    return listening(command, port, {"BRANCHC_CACHE": cache}), f"http://127.0.0.1:{port}/mcp"


async def test_two_http_servers_sharing_one_sqlite_file_continue_each_others_runs(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    one, url_one = http_serve(cache, "--store", db)
    two, url_two = http_serve(cache, "--store", db)
    with one, two:
        async with Client(url_one, **MODERN) as a, Client(url_two, **MODERN) as b:
            result, states = await within(60, play([a.session, b.session], args(5, log)))
    assert final(result) == expected(5)
    assert all(len(state) < 400 for state in states)
    ran_once(log, 5)


@pytest.mark.parametrize(
    "kind", [pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]
)
async def test_two_http_servers_sharing_one_store_server_continue_each_others_runs(cache, tmp_path, kind, request):
    log = tmp_path / "log.txt"
    redis = RedisServer(tmp_path / "redis").start() if kind == "redis" else None
    if redis is not None:
        url = redis.url
    else:
        url = f"{request.getfixturevalue('postgres_server').url}?schema=shared{time.monotonic_ns()}"
    try:
        one, url_one = http_serve(cache, "--store", url)
        two, url_two = http_serve(cache, "--store", url)
        with one, two:
            async with Client(url_one, **MODERN) as a, Client(url_two, **MODERN) as b:
                first = await call(a.session, args(4, log))
                # round 2 run on b, then retried on a (a lost response): a gives b's response, runs nothing
                second = await call(b.session, args(4, log), first.request_state, await answer_all(first))
                again = await call(a.session, args(4, log), first.request_state, await answer_all(first))
                assert again.input_requests == second.input_requests
                state, responses = second.request_state, await answer_all(second)
                for count in range(3):
                    result = await call((a, b)[count % 2].session, args(4, log), state, responses)
                    if isinstance(result, types.InputRequiredResult):
                        state, responses = result.request_state, await answer_all(result)
        assert final(result) == expected(4)
        ran_once(log, 4)
    finally:
        if redis is not None:
            redis.stop()


async def test_a_server_killed_between_rounds_loses_nothing(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    arguments = args(4, log)
    port = free_port()
    first_server, url = http_serve(cache, "--store", db, port=port)
    with first_server as process:
        async with Client(url, **MODERN) as client:
            first = await call(client.session, arguments)
            second = await call(client.session, arguments, first.request_state, await answer_all(first))
            responses = await answer_all(second)
        os.kill(process.pid, signal.SIGKILL)  # between rounds: round 2 is answered, not yet sent
        process.wait()
    assert lines(log) == ["step 0"]
    again, url = http_serve(cache, "--store", db, port=port)  # a new process on the same store (and address)
    with again:
        async with Client(url, **MODERN) as client:
            state, result = second.request_state, None
            while True:
                result = await call(client.session, arguments, state, responses)
                if not isinstance(result, types.InputRequiredResult):
                    break
                state, responses = result.request_state, await answer_all(result)
    assert final(result) == expected(4)  # what an uninterrupted run gives
    ran_once(log, 4)  # every step once, its finally once, after() once


async def test_guided_mode_with_a_store_survives_a_server_restart(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    port = free_port()
    first_server, url = http_serve(cache, "--store", db, "--guided", port=port)
    with first_server as process:
        async with Client(url, mode="2026-07-28") as client:  # can neither sample nor elicit
            guide = (await client.session.call_tool(NAME, args(2, log))).structured_content
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert guide["status"] == "waiting_for_answers"
    again, url = http_serve(cache, "--store", db, "--guided", port=port)
    with again:
        async with Client(url, mode="2026-07-28") as client:
            more = await client.session.call_tool(
                "branchc_resume", {"state_id": guide["state_id"], "answers": {"sample-1": "reply 0"}}
            )
            state_id = more.structured_content["state_id"]
            done = await client.session.call_tool(
                "branchc_resume", {"state_id": state_id, "answers": {"elicit-1": {"value": 1}}}
            )
    assert final(done) == expected(2)
    ran_once(log, 2)


async def test_store_none_is_todays_stateless_mode_and_the_default_is_a_file(cache, tmp_path):
    state = tmp_path / "state"
    log = tmp_path / "log.txt"
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY]
    env = {"BRANCHC_CACHE": cache, "BRANCHC_STATE_DIR": str(state)}
    with listening([*command, "--http", f"127.0.0.1:{port}"], port, env):
        async with Client(f"http://127.0.0.1:{port}/mcp", **MODERN) as client:
            first = await call(client.session, args(2, log))
    assert (state / "runs.db").is_file()
    with sqlite3.connect(state / "runs.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    port = free_port()
    with listening([*command, "--http", f"127.0.0.1:{port}", "--store", "none"], port, env):
        async with Client(f"http://127.0.0.1:{port}/mcp", **MODERN) as client:
            inline = await call(client.session, args(2, log))
    assert len(inline.request_state) > 3 * len(first.request_state)
    with sqlite3.connect(state / "runs.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_serve_refuses_a_bad_store_url(cache):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "branchc",
            "serve",
            str(TOOL_FILE),
            "--store",
            "mysql://x/y",
            "--http",
            "127.0.0.1:1",
        ],
        env={**os.environ, "BRANCHC_CACHE": cache},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "store URL" in done.stderr and "mysql" in done.stderr, done.stderr


def test_the_reference_format():
    assert REF_PREFIX == "r1:" and json.loads('{"run": "x", "round": 1, "v": 3}')["v"] == 3
