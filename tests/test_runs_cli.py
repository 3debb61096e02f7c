"""`branchc runs list | show | cancel | gc` (branchc/bridge/runs.py, the `runs` group of branchc/cli.py).

Real parts: the records are made by a real `branchc serve --http --store sqlite:///FILE` subprocess, called by
the real `mcp` client in the 2026-07-28 era (as tests/test_durable_rounds.py does); the tools are
tests/servers/cleanup_tools.py, whose finally blocks write a line each to a marker file and log. Each test
works on its own copy of that store file, and runs `branchc runs` as a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, KEYS, as_if_another_build, free_port, listening
from mcp import Client

from branchc.bridge.runs import RunsError, cancel_run, find_run, load_tools
from branchc.store import RunRecord, StaleRunError, open_store

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


TOOL_FILE = Path(__file__).parent / "servers" / "cleanup_tools.py"
SOURCE = TOOL_FILE.read_text().splitlines()


async def _sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", model="scripted", content=types.TextContent(type="text", text="x")
    )


async def _elicitation(ctx: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"value": 1})


async def _make_runs(url: str, markers: Path) -> dict[str, str]:
    """Two waiting runs: `nested` (a branch waits on a sample, round 1), `flat` (the root waits on a form, round
    2); their markers are markers/NAME.txt. Returns name -> the request_state of the round it waits for."""
    states = {}
    async with Client(url, mode="2026-07-28", sampling_callback=_sampling, elicitation_callback=_elicitation) as c:
        arguments = {"rounds": 2, "marker": str(markers / "nested.txt"), "log": True}
        first = await c.session.call_tool("cleanup_nested", arguments, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        states["nested"] = first.request_state
        arguments = {"rounds": 3, "marker": str(markers / "flat.txt"), "log": True}
        first = await c.session.call_tool("cleanup_flat", arguments, allow_input_required=True)
        (key,) = first.input_requests
        answer = await _sampling(None, first.input_requests[key].params)
        second = await c.session.call_tool(
            "cleanup_flat",
            arguments,
            request_state=first.request_state,
            input_responses={key: answer},
            allow_input_required=True,
        )
        assert isinstance(second, types.InputRequiredResult), second
        states["flat"] = second.request_state
    return states


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, Any]:
    """A store file holding the two runs a real server left waiting (the server is gone afterwards)."""
    folder = tmp_path_factory.mktemp("runs_served")
    cache, markers = folder / "cache", folder / "markers"
    markers.mkdir()
    db = folder / "runs.db"
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY]
    command += ["--http", f"127.0.0.1:{port}", "--store", f"sqlite:///{db}"]
    with listening(command, port, {"BRANCHC_CACHE": str(cache)}):
        states = anyio.run(_make_runs, f"http://127.0.0.1:{port}/mcp", markers)
    store = open_store(f"sqlite:///{db}", KEYS)
    ids = {record.tool: record.run_id for record in store.list()}
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"db": db, "markers": markers, "ids": ids, "states": states, "cache": cache}


@pytest.fixture
def db(served, tmp_path, monkeypatch) -> str:
    """This test's copy of the served store, and fresh markers: its URL. Tools are compiled in the server's cache
    (`--tools` and `load_tools`, here and in the `branchc runs` subprocesses)."""
    monkeypatch.setenv("BRANCHC_CACHE", str(served["cache"]))
    copy = tmp_path / "runs.db"
    shutil.copyfile(served["db"], copy)
    for marker in served["markers"].iterdir():
        marker.unlink()
    return f"sqlite:///{copy}"


def runs(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchc", "runs", *arguments],
        env={**{k: v for k, v in os.environ.items() if k != "BRANCHC_STORE"}, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def tools(served: dict[str, Any]) -> tuple[str, ...]:
    """`--tools` naming the tools the runs were served with (compiled in the server's cache: see `db`)."""
    return ("--tools", str(TOOL_FILE))


def ok(*arguments: str, **options: Any) -> subprocess.CompletedProcess:
    done = runs(*arguments, **options)
    assert done.returncode == 0, done.stderr
    return done


def one_error(done: subprocess.CompletedProcess) -> str:
    """The failure is exit 1 with one line on stderr (no traceback); its text."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def marks(served: dict, name: str) -> list[str]:
    path = served["markers"] / f"{name}.txt"
    return path.read_text().splitlines() if path.exists() else []


def line_of(text: str) -> int:
    return next(number for number, line in enumerate(SOURCE, 1) if text in line)


def test_list_shows_each_run_where_it_waits_and_what_it_asks(served, db):
    nested, flat = served["ids"]["cleanup_nested"], served["ids"]["cleanup_flat"]
    table = ok("list", "--store", db).stdout
    assert nested[:12] in table and flat[:12] in table
    assert "cleanup_nested" in table and "2026-07-28" in table and "waiting" in table
    assert f"worker:{line_of('yield from ask_all(')}" in table  # the branch waits in worker, at its yield from
    assert f"flat:{line_of('choice = yield ctx.elicit(')}" in table  # the root waits on the form of round 2
    assert "sample: question 0" in table and "elicit: question 1" in table
    listed = json.loads(ok("list", "--store", db, "--json").stdout)
    by_tool = {entry["tool"]: entry for entry in listed}
    entry = by_tool["cleanup_nested"]
    assert entry["run_id"] == nested and entry["status"] == "waiting" and entry["era"] == "2026-07-28"
    assert entry["code_hash"][:8] in table and "try:body/yield from:ask_all" in table  # its build, and its point
    assert entry["waits"] == [
        {
            "branch": "0.1",
            "function": "worker",
            "line": line_of("yield from ask_all("),
            "file": str(TOOL_FILE),
            "point": "try:body/yield from:ask_all",
        }
    ]
    assert entry["pending"] == [{"key": "sample-1", "kind": "sample", "branch": "0.1", "summary": "question 0"}]
    assert 0 <= entry["age"] < 600 and 0 < entry["expires_in"] <= 600
    assert by_tool["cleanup_flat"]["extra"]["round"] == 2 and by_tool["cleanup_flat"]["extra"]["answered"] == 1
    # filters
    only = json.loads(ok("list", "--store", db, "--json", "--tool", "cleanup_flat").stdout)
    assert [e["run_id"] for e in only] == [flat]
    assert json.loads(ok("list", "--store", db, "--json", "--status", "done").stdout) == []
    assert len(json.loads(ok("list", "--store", db, "--json", "--limit", "1").stdout)) == 1
    assert "status is one of" in one_error(runs("list", "--store", db, "--status", "asleep"))


def test_the_default_store_is_serves(served, db, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    shutil.copyfile(db.removeprefix("sqlite:///"), state / "runs.db")
    env = {"BRANCHC_STATE_DIR": str(state)}
    listed = json.loads(ok("list", "--json", env=env).stdout)
    assert {entry["run_id"] for entry in listed} == set(served["ids"].values())


def test_show_by_prefix_gives_everything_with_the_source_line(served, db):
    nested = served["ids"]["cleanup_nested"]
    text = ok("show", nested[:6], "--store", db).stdout
    assert f"run {nested}" in text and "cleanup_nested" in text and "waiting" in text
    number = line_of("yield from ask_all(")
    assert f"{TOOL_FILE}:{number}" in text and "answers = yield from ask_all(ctx, rounds, marker, log)" in text
    assert "sample-1 (sample, branch 0.1): question 0" in text
    data = json.loads(ok("show", nested, "--store", db, "--json").stdout)
    assert data["run_id"] == nested and (served["cache"] / "builds" / data["build"] / "branchc.json").is_file()
    assert data["waits"][0]["source"] == SOURCE[number - 1].strip()
    assert data["code_hash"] and data["extra"]["round"] == 1
    assert f"no run 'nope' in {db}" in one_error(runs("show", "nope", "--store", db))
    assert "give a run id" in one_error(runs("show", " ", "--store", db))


def test_a_prefix_of_several_ids_is_refused():
    store = open_store("sqlite:///:memory:", KEYS)
    for ident in ("abc1", "abc2", "xyz"):
        store.create(RunRecord.new("some_tool", "", ttl=60, run_id=ident))
    assert find_run(store, "xy").run_id == "xyz" and find_run(store, "abc1").run_id == "abc1"
    with pytest.raises(RunsError, match="'abc' is the start of 2 run ids"):
        find_run(store, "abc")


def test_cancel_runs_the_finally_blocks_once_and_marks_the_run_cancelled(served, db):
    nested = served["ids"]["cleanup_nested"]
    done = ok("cancel", nested[:8], *tools(served), "--store", db)
    assert marks(served, "nested") == ["helper", "worker", "client"]  # each finally once, innermost first
    assert "worker cleaned up" in done.stderr and "client cleaned up" in done.stderr  # what they logged
    assert f"cancelled run {nested}" in done.stderr
    shown = json.loads(ok("show", nested, "--store", db, "--json").stdout)
    assert shown["status"] == "cancelled" and shown["waits"] == [] and shown["pending"] == []
    again = one_error(runs("cancel", nested, *tools(served), "--store", db))
    assert "has ended (cancelled): there is nothing to cancel" in again
    assert marks(served, "nested") == ["helper", "worker", "client"]  # nothing ran twice
    # the other run is untouched, and its cancel (as JSON) runs its own finally once
    flat = served["ids"]["cleanup_flat"]
    out = json.loads(ok("cancel", flat, *tools(served), "--store", db, "--json").stdout)
    assert out == {
        "run_id": flat,
        "status": "cancelled",
        "logs": [["log", "info", "client cleaned up"]],
        "cleanup_error": None,
        "damaged": None,
    }
    assert marks(served, "flat") == ["client"]


def test_a_cancelled_run_is_refused_by_a_server(served, db):
    """After `branchc runs cancel`, the run's request_state is refused: a server never continues it."""
    flat = served["ids"]["cleanup_flat"]
    ok("cancel", flat, *tools(served), "--store", db)
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY]
    command += ["--http", f"127.0.0.1:{port}", "--store", db]

    async def resume() -> Any:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28") as client:
            arguments = {"rounds": 3, "marker": str(served["markers"] / "flat.txt"), "log": True}
            return await client.session.call_tool(
                "cleanup_flat",
                arguments,
                request_state=served["states"]["flat"],
                input_responses={"elicit-1": types.ElicitResult(action="accept", content={"value": 1})},
                allow_input_required=True,
            )

    with listening(command, port, {"BRANCHC_CACHE": str(served["cache"])}):
        result = anyio.run(resume)
    assert result.is_error and "was cancelled" in result.content[0].text, result
    assert marks(served, "flat") == ["client"]


def test_cancel_refuses_a_run_this_build_cannot_take(served, db):
    nested = served["ids"]["cleanup_nested"]
    store = open_store(db, KEYS)
    record = store.load(nested)
    store.checkpoint(nested, record.version, saved=as_if_another_build(record.saved, "gone"))
    error = one_error(runs("cancel", nested, *tools(served), "--store", db))
    assert f"stored run {nested!r} cannot be loaded to end it" in error and "point 'gone'" in error
    assert marks(served, "nested") == [] and store.load(nested).status == "waiting"
    store.checkpoint(nested, store.load(nested).version, saved=record.saved)  # as it was, for the tests after
    store.close()


@pytest.fixture
def own_imports(monkeypatch):
    """cancel_run in this process imports the run's build: its modules are forgotten afterwards, and a module
    of the same name another test imported is set aside meanwhile."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = dict(sys.modules)
    sys.modules.pop("cleanup_tools", None)
    yield
    for name in set(sys.modules) - set(before):
        del sys.modules[name]
    sys.modules.update(before)


def test_a_run_that_moved_on_meanwhile_is_not_cancelled_and_its_cleanup_does_not_run(served, db, own_imports):
    store = open_store(db, KEYS)
    nested = served["ids"]["cleanup_nested"]

    class Racing:
        """The store, with a server writing the run just before cancel's compare-and-swap."""

        url = store.url

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def checkpoint(self, run_id: str, version: int, **changes: Any) -> Any:
            store.checkpoint(run_id, version, status="running")
            return store.checkpoint(run_id, version, **changes)

    with pytest.raises(RunsError, match="moved on meanwhile") as caught:
        cancel_run(Racing(), nested, load_tools(TOOL_FILE))  # type: ignore[arg-type]
    assert isinstance(caught.value.__context__, StaleRunError)
    assert marks(served, "nested") == []  # its cleanup belongs to the server that goes on with it
    assert store.load(nested).status == "running"
    store.close()


def test_gc_ends_an_expired_run_only_with_its_tools_then_removes_it(served, db):
    flat = served["ids"]["cleanup_flat"]
    store = open_store(db, KEYS)
    record = store.load(flat)
    store.checkpoint(flat, record.version, expires=time.time() - 1)
    store.close()
    listed = json.loads(ok("list", "--store", db, "--json").stdout)
    assert [entry["tool"] for entry in listed] == ["cleanup_nested"]  # an expired run is gone for every read
    left = ok("gc", "--store", db)  # without the tools its finally blocks cannot run: it is left, and said so
    assert left.stdout.splitlines() == [
        f"removed 0 expired run(s) from {db}",
        "left 1 expired waiting run(s) whose finally blocks have not run (see above)",
    ]
    assert f"left expired run {flat} (cleanup_flat)" in left.stderr and "--tools PATH" in left.stderr
    assert marks(served, "flat") == []
    done = json.loads(ok("gc", *tools(served), "--store", db, "--json").stdout)
    assert [run["run_id"] for run in done["ended"]] == [flat] and done["left"] == []
    assert marks(served, "flat") == ["client"]  # its finally ran once, here
    assert json.loads(ok("gc", *tools(served), "--store", db, "--json").stdout)["ended"] == []  # once only
    assert marks(served, "flat") == ["client"]
    assert json.loads(ok("show", flat, "--store", db, "--json").stdout)["status"] == "expired"


def test_bad_urls_an_unreachable_store_and_a_damaged_record_are_one_clear_line(served, db, tmp_path):
    error = one_error(runs("list", "--store", "mysql://host/db"))
    assert "store URL 'mysql://host/db'" in error and "sqlite" in error
    error = one_error(runs("list", "--store", "postgresql://app:secret@127.0.0.1:1/db"))  # nothing listens there
    assert "the PostgreSQL store at postgresql://app@127.0.0.1:1/db cannot be reached" in error
    assert "Connection refused" in error and "secret" not in error
    assert "no scheme" in one_error(runs("gc", "--store", "runs.db"))
    assert "names no store" in one_error(runs("list", "--store", "none"))
    missing = f"sqlite:///{tmp_path / 'no' / 'such' / 'runs.db'}"
    assert "does not exist" in one_error(runs("show", "abc", "--store", missing))
    # a row edited by hand: every command that reads it says which run and field, and cancel deletes it
    nested = served["ids"]["cleanup_nested"]
    with sqlite3.connect(db.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE runs SET status = 'done' WHERE run_id = ?", (nested,))
    error = one_error(runs("list", "--store", db))
    assert f"stored run {nested!r} is damaged" in error and "does not match its seal" in error
    assert "is damaged" in one_error(runs("show", nested, "--store", db))
    done = ok("cancel", nested, *tools(served), "--store", db)
    assert f"deleted the damaged run {nested}" in done.stderr
    listed = json.loads(ok("list", "--store", db, "--json").stdout)
    assert [entry["tool"] for entry in listed] == ["cleanup_flat"]
