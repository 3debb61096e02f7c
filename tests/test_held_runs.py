"""Handshake-era runs in the store, and `branchc runs resume` (bridge/held.py, bridge/runs.py).

Real parts: `branchc serve --http` subprocesses on 127.0.0.1 with a real SQLite store, the real `mcp` client in
the handshake era (its callbacks answer mid-call), servers killed with SIGKILL while a run waits on its client,
and `branchc runs` as a subprocess. The tool (tests/servers/durable_tools.py) logs each step, its finally and its
after() to a file, so each test counts what ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import yaml
from _bridge_support import KEY, KEYS, free_port, listening
from mcp import Client

from branchc.bridge.runs import RunsError, cancel_run, load_tools, resume_run
from branchc.runtime.testing import MockClient
from branchc.store import open_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


TOOL_FILE = Path(__file__).parent / "servers" / "durable_tools.py"
NAME = "durable_steps"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("held_cache"))


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def expected(rounds: int) -> dict[str, Any]:
    return {"answers": [f"reply {n}" if n % 2 == 0 else n for n in range(rounds)], "done": True}


def serve(cache: str, db: str, port: int) -> Any:
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY, "--store", db]
    return listening([*command, "--http", f"127.0.0.1:{port}"], port, {"BRANCHC_CACHE": cache})


def branchc(*args: str, cache: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "BRANCHC_CACHE": cache},
        timeout=60,
    )


def responses_file(tmp_path: Path, first: int, rounds: int) -> Path:
    """The answers to questions first..rounds-1, as `--responses` reads them."""
    path = tmp_path / "answers.yaml"
    samples = [f"reply {n}" for n in range(first, rounds) if n % 2 == 0]
    elicits = [{"action": "accept", "content": {"value": n}} for n in range(first, rounds) if n % 2 == 1]
    path.write_text(yaml.safe_dump({"sample": samples, "elicit": elicits}))
    return path


class StopsAt:
    """Handshake-era client callbacks that answer questions before `stop` ("reply n" / {"value": n}), each after
    `delay` seconds, and never answer question `stop` (None: they answer all)."""

    def __init__(self, stop: int | None, delay: float = 0.0) -> None:
        self.stop = stop
        self.delay = delay
        self.asked = anyio.Event()

    async def _number(self, text: str) -> int:
        number = int(text.split()[-1])
        if number == self.stop:
            self.asked.set()
            await anyio.sleep_forever()
        if self.delay:
            await anyio.sleep(self.delay)
        return number

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = "".join(block.text for block in params.messages[-1].content_as_list if block.type == "text")
        number = await self._number(text)
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=f"reply {number}")
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"value": await self._number(params.message)})


async def waiting_at(url: str, arguments: dict, stop: int, then: Any) -> None:
    """Call the tool in the handshake era and, once the server asks question `stop`, run `then()`."""
    answers = StopsAt(stop)
    async with Client(
        url, mode="legacy", sampling_callback=answers.sampling, elicitation_callback=answers.elicitation
    ) as client:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                with contextlib.suppress(Exception):  # the server may die mid-call (how it fails is the SDK's)
                    await client.session.call_tool(NAME, arguments)

            group.start_soon(call)
            with anyio.fail_after(30):
                await answers.asked.wait()
            await then()
            group.cancel_scope.cancel()


async def crashed_waiting(cache: Path, db: str, log: Path, *, rounds: int, stop: int) -> None:
    """A handshake-era run of `rounds` questions whose server is killed (SIGKILL) once it asks question `stop`."""
    port = free_port()
    with serve(cache, db, port) as process:

        async def crash() -> None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

        await waiting_at(f"http://127.0.0.1:{port}/mcp", {"rounds": rounds, "log": str(log)}, stop, crash)


def only_run(db: str) -> Any:
    store = open_store(db, KEYS)
    try:
        (record,) = store.list()
        return record
    finally:
        store.close()


async def test_a_handshake_run_waiting_on_its_client_is_in_the_store_and_resumes_after_a_crash(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    arguments = {"rounds": 4, "log": str(log)}
    port = free_port()
    with serve(cache, db, port) as process:

        async def crash() -> None:
            record = only_run(db)  # written before question 2 was asked
            assert record.status == "waiting" and record.meta.era == "2025-11-25"
            assert record.meta.extra["held"]["pid"] == process.pid
            assert [p["summary"] for p in record.meta.pending] == ["question 2"]
            assert [w.function for w in record.meta.waits] == ["steps"]
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

        await waiting_at(f"http://127.0.0.1:{port}/mcp", arguments, 2, crash)
    assert lines(log) == ["step 0", "step 1"]
    run_id = only_run(db).run_id
    listed = json.loads(branchc("runs", "list", "--store", db, "--json", cache=cache).stdout)
    assert [(r["run_id"], r["status"], r["pending"][0]["summary"]) for r in listed] == [
        (run_id, "waiting", "question 2")
    ]
    done = branchc(
        "runs",
        "resume",
        run_id[:8],
        "--tools",
        str(TOOL_FILE),
        "--store",
        db,
        "--responses",
        str(responses_file(tmp_path, 2, 4)),
        cache=cache,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected(4)  # what an uninterrupted run gives
    assert lines(log) == ["step 0", "step 1", "step 2", "step 3", "finally", "after"]  # each once
    record = only_run(db)
    assert record.status == "done" and not record.saved
    assert json.loads(json.dumps(record.meta.response))["value"]["structuredContent"] == expected(4)
    again = branchc(
        "runs",
        "resume",
        run_id,
        "--tools",
        str(TOOL_FILE),
        "--store",
        db,
        "--responses",
        str(tmp_path / "answers.yaml"),
        cache=cache,
    )
    assert again.returncode == 1 and "has ended (done)" in again.stderr


async def test_a_crashed_handshake_run_can_be_cancelled_and_its_finally_runs_once(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    await crashed_waiting(cache, db, log, rounds=3, stop=1)
    out = branchc(
        "runs", "cancel", only_run(db).run_id, "--tools", str(TOOL_FILE), "--store", db, "--json", cache=cache
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "cancelled"
    assert lines(log) == ["step 0", "finally"]
    assert only_run(db).status == "cancelled"


async def test_a_run_its_live_server_holds_is_neither_resumed_nor_cancelled(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    port = free_port()
    with serve(cache, db, port) as process:

        async def try_to_take() -> None:
            run_id = only_run(db).run_id
            for command in ("resume", "cancel"):
                extra = ("--responses", str(responses_file(tmp_path, 1, 2))) if command == "resume" else ()
                out = await anyio.to_thread.run_sync(
                    lambda command=command, extra=extra: branchc(
                        "runs", command, run_id, "--tools", str(TOOL_FILE), "--store", db, *extra, cache=cache
                    )
                )
                assert out.returncode == 1
                assert f"held by process {process.pid}" in out.stderr and "still runs" in out.stderr

        await waiting_at(f"http://127.0.0.1:{port}/mcp", {"rounds": 2, "log": str(log)}, 1, try_to_take)
        deadline = time.monotonic() + 30  # the client went away: the server cancels the run, and says so
        while only_run(db).status != "cancelled":
            assert time.monotonic() < deadline, only_run(db).status
            time.sleep(0.05)
    assert lines(log) == ["step 0", "finally"]  # once


def _hold_elsewhere(db: str) -> Any:
    """Make the only run's holder a process on another host."""
    store = open_store(db, KEYS)
    try:
        record = store.list()[0]
        held = {**record.meta.extra["held"], "host": "elsewhere." + socket.gethostname()}
        meta = dataclasses.replace(record.meta, extra={**record.meta.extra, "held": held})
        return store.checkpoint(record.run_id, record.version, meta=meta)
    finally:
        store.close()


async def test_a_live_holder_whose_run_is_taken_over_stops_without_its_cleanup(cache, db, tmp_path, monkeypatch):
    """A run held on "another host" is taken with --force; the holder, in fact alive, finds out at its next
    checkpoint and stops there: the finally runs once, in the process that took the run over."""
    log = tmp_path / "log.txt"
    port = free_port()
    answers = {"rounds": 3, "log": str(log)}
    monkeypatch.setenv("BRANCHC_CACHE", cache)
    # cancel_run imports the server's build here: not another test's build of the same module
    monkeypatch.delitem(sys.modules, TOOL_FILE.stem, raising=False)
    with serve(cache, db, port):
        gate = anyio.Event()
        outcome: list[Any] = []

        class Client2(StopsAt):
            async def _number(self, text: str) -> int:
                number = int(text.split()[-1])
                if number == self.stop:
                    self.asked.set()
                    await gate.wait()  # answered only once the run was taken over
                return number

        asker = Client2(1)
        async with Client(
            f"http://127.0.0.1:{port}/mcp",
            mode="legacy",
            sampling_callback=asker.sampling,
            elicitation_callback=asker.elicitation,
        ) as client:
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    outcome.append(await client.session.call_tool(NAME, answers))

                group.start_soon(call)
                with anyio.fail_after(30):
                    await asker.asked.wait()
                record = _hold_elsewhere(db)
                store = open_store(db, KEYS)
                try:
                    with pytest.raises(RunsError, match=r"another host.*--force"):
                        cancel_run(store, record.run_id, load_tools(TOOL_FILE))
                    done = cancel_run(store, record.run_id, load_tools(TOOL_FILE), force=True)  # its finally runs here
                finally:
                    store.close()
                assert done.record.status == "cancelled"
                gate.set()
    (result,) = outcome
    assert result.is_error and "taken over by another process" in result.content[0].text
    assert lines(log) == ["step 0", "finally"]  # once, where it was cancelled: not again in the server


async def test_a_killed_resume_can_be_resumed_again(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    await crashed_waiting(cache, db, log, rounds=4, stop=1)
    run_id = only_run(db).run_id
    resume = subprocess.Popen(
        [sys.executable, "-m", "branchc", "runs", "resume", run_id, "--tools", str(TOOL_FILE), "--store", db, "-i"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "BRANCHC_CACHE": cache},
        text=True,
    )
    try:
        resume.stdin.write("accept\n1\n")  # question 1 (a form): accept, value 1; then it waits on question 2
        resume.stdin.flush()
        deadline = time.monotonic() + 30
        while True:
            record = only_run(db)
            if record.meta.pending and record.meta.pending[0]["summary"] == "question 2":
                break
            assert time.monotonic() < deadline and resume.poll() is None, "the resume did not reach question 2"
            time.sleep(0.05)
        assert record.meta.extra["held"]["pid"] == resume.pid
    finally:
        resume.kill()
        resume.wait()
    assert lines(log) == ["step 0", "step 1"]
    done = branchc(
        "runs",
        "resume",
        run_id,
        "--tools",
        str(TOOL_FILE),
        "--store",
        db,
        "--responses",
        str(responses_file(tmp_path, 2, 4)),
        cache=cache,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected(4)
    assert lines(log) == ["step 0", "step 1", "step 2", "step 3", "finally", "after"]


async def test_resume_refuses_what_it_cannot_take(cache, db, tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", cache)
    store = open_store(db, KEYS)
    try:
        with pytest.raises(RunsError, match="no run 'nope'"):
            await resume_run(store, "nope", MockClient([], []), {})  # (found first: no tools needed)
    finally:
        store.close()


async def _sampled(ctx: Any, params: Any) -> Any:
    raise AssertionError("asked mid-call in the 2026-07-28 era")


MODERN = {"mode": "2026-07-28", "sampling_callback": _sampled, "elicitation_callback": _sampled}


def _reply(text: str) -> types.CreateMessageResult:
    content = types.TextContent(type="text", text=text)
    return types.CreateMessageResult(role="assistant", model="scripted", content=content)


async def _killed_mid_round(cache: str, db: str, port: int, arguments: dict) -> tuple[str, str]:
    """Round 2 of a 2026-07-28 run is running (step 0 done, sleeping) when its server is SIGKILLed: (round 1's
    request_state, the key of its question)."""
    asked: list[types.InputRequiredResult] = []
    with serve(cache, db, port) as process:
        killed = anyio.Event()

        async def call() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", **MODERN) as client:
                asked.append(await client.session.call_tool(NAME, arguments, allow_input_required=True))
                (key,) = asked[0].input_requests
                with anyio.move_on_after(60):  # the round runs until its server is killed
                    await client.session.call_tool(
                        NAME,
                        arguments,
                        request_state=asked[0].request_state,
                        input_responses={key: _reply("reply 0")},
                        allow_input_required=True,
                    )
                await killed.wait()

        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _quietly(call()))
            with anyio.fail_after(30):
                while lines(Path(arguments["log"])) != ["step 0"]:  # the round runs: step 0 done, then it sleeps
                    await anyio.sleep(0.05)
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            killed.set()
    record = only_run(db)
    assert record.status == "running" and record.meta.extra["claim"]["pid"] == process.pid
    return asked[0].request_state, next(iter(asked[0].input_requests))


async def test_a_run_whose_server_died_mid_round_can_be_cancelled_at_once(cache, db, tmp_path):
    """The claim of a running round names its server: once that process is gone, `branchc runs cancel` takes
    the run at once (not after the lease), from where it waited before that round."""
    log = tmp_path / "log.txt"
    await _killed_mid_round(cache, db, free_port(), {"rounds": 2, "log": str(log), "slow": 30})
    out = branchc(
        "runs", "cancel", only_run(db).run_id, "--tools", str(TOOL_FILE), "--store", db, "--json", cache=cache
    )
    assert out.returncode == 0, out.stderr
    assert lines(log) == ["step 0", "finally"]
    assert only_run(db).status == "cancelled"


async def test_a_round_whose_server_died_mid_round_is_taken_over_at_once_when_sent_again(cache, db, tmp_path):
    """The same round sent again to a new server runs at once (its claim's server is gone); the step the dead
    server was in runs again, the finally and after() once."""
    log = tmp_path / "log.txt"
    port = free_port()
    arguments = {"rounds": 2, "log": str(log), "slow": 2}
    state, key = await _killed_mid_round(cache, db, port, arguments)
    with serve(cache, db, port):
        async with Client(f"http://127.0.0.1:{port}/mcp", **MODERN) as client:
            with anyio.fail_after(20):  # far below the lease (300 s)
                again = await client.session.call_tool(
                    NAME,
                    arguments,
                    request_state=state,
                    input_responses={key: _reply("reply 0")},
                    allow_input_required=True,
                )
            assert isinstance(again, types.InputRequiredResult), again
            (question,) = again.input_requests
            done = await client.session.call_tool(
                NAME,
                arguments,
                request_state=again.request_state,
                input_responses={question: types.ElicitResult(action="accept", content={"value": 1})},
                allow_input_required=True,
            )
    assert not done.is_error and done.structured_content == {"answers": ["reply 0", 1], "done": True}
    assert lines(log) == ["step 0", "step 0", "step 1", "finally", "after"]  # the interrupted step ran again


async def _quietly(coroutine: Any) -> None:
    """Run a client whose server is killed under it: how the SDK's client then fails is not this test's."""
    with contextlib.suppress(Exception):
        await coroutine


async def test_a_crashed_handshake_run_resumes_on_a_new_build_where_its_point_allows(cache, db, tmp_path):
    log = tmp_path / "log.txt"
    await crashed_waiting(cache, db, log, rounds=4, stop=2)
    run_id = only_run(db).run_id
    changed = tmp_path / "deployed" / TOOL_FILE.name
    changed.parent.mkdir()
    source = TOOL_FILE.read_text()
    resume = ("runs", "resume", run_id, "--tools", str(changed), "--store", db)
    answers = ("--responses", str(responses_file(tmp_path, 2, 4)))
    changed.write_text(source.replace("answers", "collected"))  # what it carries changed: it cannot move
    kept = Path(cache) / "builds"
    shutil.move(kept, tmp_path / "kept")  # nor is the build that saved it kept here: refused, it waits on
    refused = branchc(*resume, *answers, cache=cache)
    assert refused.returncode == 1 and "waits at point 'try:body/for/if:then/sample:reply'" in refused.stderr
    assert "is not kept here" in refused.stderr
    assert only_run(db).status == "waiting" and lines(log) == ["step 0", "step 1"]
    for build in (tmp_path / "kept").iterdir():
        shutil.move(build, kept / build.name)
    changed.write_text(source.replace("    answers = []\n", "    answers = []  # what the user said, in order\n"))
    done = branchc(*resume, *answers, cache=cache)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected(4)  # what an uninterrupted run of either build gives
    assert lines(log) == ["step 0", "step 1", "step 2", "step 3", "finally", "after"]


async def test_a_crashed_handshake_run_the_new_build_cannot_take_finishes_on_the_kept_one(cache, db, tmp_path):
    """`runs resume` with tools that cannot take the run's point: it finishes on the build that saved it, which
    its server kept in the cache, and says so in the record while it runs."""
    log = tmp_path / "log.txt"
    await crashed_waiting(cache, db, log, rounds=4, stop=2)
    record = only_run(db)
    changed = tmp_path / "deployed" / TOOL_FILE.name
    changed.parent.mkdir()
    changed.write_text(TOOL_FILE.read_text().replace("answers", "collected"))  # new runs say "collected"
    answers = ("--responses", str(responses_file(tmp_path, 2, 4)))
    done = branchc("runs", "resume", record.run_id, "--tools", str(changed), "--store", db, *answers, cache=cache)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected(4)  # the old build's result: "answers", every one
    assert lines(log) == ["step 0", "step 1", "step 2", "step 3", "finally", "after"]
    ended = only_run(db)
    assert ended.status == "done" and ended.meta.extra["build"] == record.meta.extra["build"]
    assert ended.meta.code_hash == record.meta.code_hash
