"""Every handle to a run belongs to the principal that started it, and no caller can hold more than its share.

Real `branchc serve --http` subprocesses with `--auth-tokens` (alice and bob), the real mcp client with a
bearer token, real SQLite stores; the tool tests/servers/sealed_tools.py writes a marker line from its
kept object's __init__ ("init"), its finally and its after(), so a refused call is seen to run nothing.

- a run records its owner, and `branchc runs list` shows it;
- a guided state id of another principal is refused exactly as an unknown one, and its run still waits;
- a run id is never a state id (one kind of handle is not accepted as another);
- a stored 2026-07-28 run is its owner's even where a request_state names it for someone else;
- waiting 2026-07-28 runs are capped per principal and in all, in count and in bytes;
- one principal's calls in progress are capped, and another's are not held up by them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import test_auth as auth
from _bridge_support import KEY, Scripted, free_port, listening, within
from _postgres_support import needs_postgres
from _redis_support import RedisServer, needs_redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.store import KeyRing, RunRecord, open_store
from branchc.store.sqlite import SQLiteStore

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

TOOL_FILE = Path(__file__).parent / "servers" / "sealed_tools.py"
NAME = "sealed_secret"
ALICE, BOB = auth.ALICE, auth.BOB


@pytest.fixture(autouse=True)
def _no_state_key_in_env(monkeypatch):
    monkeypatch.delenv("BRANCHC_STATE_KEY", raising=False)


@contextlib.contextmanager
def serving(tmp_path: Path, *args: str) -> Iterator[str]:
    """sealed_tools served over HTTP to alice and bob (tokens), with the state key KEY; yields the URL."""
    tokens = auth.tokens_file(tmp_path, f"alice {ALICE}\nbob {BOB}\n")
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--http", f"127.0.0.1:{port}"]
    command += ["--auth-tokens", str(tokens), "--state-key", KEY, *args]
    env = {"BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_STATE_DIR": str(tmp_path / "state")}
    with listening(command, port, env):
        yield f"http://127.0.0.1:{port}"


def client(url: str, token: str, mode: str = "2026-07-28", **callbacks: Any) -> Client:
    """A client authenticated with `token`; without callbacks it can neither sample nor elicit (guided)."""
    headers = {"Authorization": f"Bearer {token}"}
    transport = streamable_http_client(f"{url}/mcp", http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=mode, **callbacks)


ELICITS = Scripted({}, []).callbacks(sampling=False)  # declares elicitation: the 2026-07-28 rounds ask the client


def arguments(tmp_path: Path, name: str, secret: str = "s3cret") -> dict[str, str]:
    return {"marker": str(tmp_path / f"{name}.txt"), "secret": secret}


def marks(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / f"{name}.txt"
    return path.read_text().splitlines() if path.exists() else []


def text(result: types.CallToolResult) -> str:
    return result.content[0].text


async def start(session: Any, args: dict[str, str]) -> Any:
    return await within(60, session.call_tool(NAME, args, allow_input_required=True))


def answers(asked: types.InputRequiredResult, reply: str = "yes") -> dict[str, Any]:
    return {key: types.ElicitResult(action="accept", content={"text": reply}) for key in asked.input_requests}


async def answer(session: Any, args: dict[str, str], asked: types.InputRequiredResult) -> Any:
    return await within(
        60,
        session.call_tool(
            NAME, args, request_state=asked.request_state, input_responses=answers(asked), allow_input_required=True
        ),
    )


async def resume(session: Any, guide: dict[str, Any], state_id: str | None = None) -> types.CallToolResult:
    """branchc_resume of the waiting run `guide` shows (or of `state_id`, with its answers)."""
    answered = {request["key"]: {"text": "one"} for request in guide["requests"]}
    sent = {"state_id": state_id or guide["state_id"], "answers": answered}
    return await within(60, session.call_tool("branchc_resume", sent))


def runs_list(url: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "runs", "list", "--store", url, "--state-key", KEY, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# -- whose run ------------------------------------------------------------------------------------------------


async def test_a_run_records_its_owner_and_runs_list_shows_it(tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(tmp_path, "--store", store, "--guided") as url:
        async with client(url, ALICE, **ELICITS) as alice, client(url, BOB) as bob:
            assert isinstance(await start(alice.session, arguments(tmp_path, "a")), types.InputRequiredResult)
            guide = await start(bob.session, arguments(tmp_path, "b"))  # bob cannot elicit: a guided run
            assert guide.structured_content["status"] == "waiting_for_answers"
    listed = {(run["owner"], run["era"]) for run in runs_list(store)}
    assert listed == {("alice", "2026-07-28"), ("bob", "guided")}


@pytest.mark.parametrize("store", ["none", "sqlite"])
async def test_a_state_id_of_another_principal_is_refused_as_an_unknown_one_and_its_run_waits_on(tmp_path, store):
    url_of_store = "none" if store == "none" else f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(tmp_path, "--store", url_of_store, "--guided") as url:
        async with client(url, ALICE) as alice, client(url, BOB) as bob:
            guide = (await start(alice.session, arguments(tmp_path, "a"))).structured_content
            state_id = guide["state_id"]
            taken = await resume(bob.session, guide)
            unknown = await resume(bob.session, guide, "Zx" * 12)
            assert taken.is_error and unknown.is_error
            assert text(taken) == text(unknown).replace("Zx" * 12, state_id), text(taken)
            assert "alice" not in text(taken) and "question about" not in text(taken)
            more = await resume(alice.session, guide)  # the run still waits for alice
            assert not more.is_error, text(more)
            assert more.structured_content["status"] == "waiting_for_answers"
    assert marks(tmp_path, "a") == ["init"]


async def test_a_run_id_is_never_a_state_id(tmp_path):
    """A 2026-07-28 run's id, given to branchc_resume, is an unknown state id; the run goes on unharmed."""
    store = tmp_path / "runs.db"
    args = arguments(tmp_path, "a")
    with serving(tmp_path, "--store", f"sqlite:///{store}", "--guided") as url:
        async with client(url, ALICE, **ELICITS) as alice:
            asked = await start(alice.session, args)
            assert isinstance(asked, types.InputRequiredResult)
            opened = SQLiteStore(store, keys=KeyRing([KEY]))
            (record,) = opened.list()
            opened.close()
            refused = await within(
                60, alice.session.call_tool("branchc_resume", {"state_id": record.run_id, "answers": {"first": "x"}})
            )
            assert refused.is_error and "is unknown, already used or expired" in text(refused), text(refused)
            second = await answer(alice.session, args, asked)
            done = await answer(alice.session, args, second)
    assert not done.is_error and done.structured_content["answers"] == ["yes", "yes"], done
    assert marks(tmp_path, "a") == ["init", "finally", "after"]


async def test_a_stored_run_is_its_owners_even_where_a_request_state_names_it_for_another(tmp_path, monkeypatch):
    """The SDK binds each request_state to its principal; the store's record is bound too, so a state that
    names another's run (minted for its holder: an operator's mistake, a key shared too widely) continues
    nothing. Here the caller is anonymous and the record, sealed anew by the key holder, says alice."""
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    tools = load_served_tools(TOOL_FILE, warn=None)
    keys = KeyRing([KEY])
    store = SQLiteStore(tmp_path / "runs.db", keys=keys)
    args = arguments(tmp_path, "a")

    def owned_by(owner: str | None) -> None:
        (record,) = store.list()
        store.delete(record.run_id)
        store.create(dataclasses.replace(record, owner=owner))  # the same version: the state still names it

    server = create_server(tools, keys=keys, store=store)
    async with Client(server, mode="2026-07-28", **ELICITS) as anonymous:
        asked = await start(anonymous.session, args)
        owned_by("alice")
        refused = await answer(anonymous.session, args, asked)
        assert refused.is_error and "is not in the store" in text(refused), refused
        assert marks(tmp_path, "a") == ["init"]  # nothing of the run ran again
        owned_by(None)
        second = await answer(anonymous.session, args, asked)
        assert isinstance(second, types.InputRequiredResult), second
    store.close()


# -- how much one caller may hold -----------------------------------------------------------------------------


async def test_waiting_runs_are_capped_per_principal_and_in_all(tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(tmp_path, "--store", store, "--principal-max-runs", "2", "--max-runs", "3") as url:
        async with client(url, ALICE, **ELICITS) as alice, client(url, BOB, **ELICITS) as bob:
            for name in ("a1", "a2"):
                assert isinstance(await start(alice.session, arguments(tmp_path, name)), types.InputRequiredResult)
            third = await start(alice.session, arguments(tmp_path, "a3"))
            assert third.is_error and "principal 'alice' already has 2 runs waiting" in text(third), third
            assert "--principal-max-runs 2" in text(third) and marks(tmp_path, "a3") == []  # refused before it ran
            assert isinstance(await start(bob.session, arguments(tmp_path, "b1")), types.InputRequiredResult)
            full = await start(bob.session, arguments(tmp_path, "b2"))
            assert full.is_error and "holds 3 waiting runs" in text(full) and "--max-runs 3" in text(full), full
            assert "alice" not in text(full)  # no caller learns of another's runs
            assert marks(tmp_path, "b2") == []
    assert sorted(run["owner"] for run in runs_list(store)) == ["alice", "alice", "bob"]


async def test_a_run_past_its_principals_bytes_is_refused_when_first_saved_and_its_cleanup_runs_once(tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with serving(tmp_path, "--store", store, "--principal-max-mb", "0.01") as url:  # 10,485 bytes
        async with client(url, ALICE, **ELICITS) as alice, client(url, BOB, **ELICITS) as bob:
            big = await start(alice.session, arguments(tmp_path, "big", secret="x" * 20_000))
            assert big.is_error and "past the most one caller's may (--principal-max-mb" in text(big), big
            assert marks(tmp_path, "big") == ["init", "finally"]  # halted where it would have waited
            small = await start(bob.session, arguments(tmp_path, "small"))
            assert isinstance(small, types.InputRequiredResult), small
    assert [run["owner"] for run in runs_list(store)] == ["bob"]


async def test_a_round_that_would_grow_a_run_past_a_cap_is_refused_and_the_run_waits_on(tmp_path):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = arguments(tmp_path, "a")
    with serving(tmp_path, "--store", store, "--principal-max-mb", "0.01") as url:  # 10,485 bytes
        async with client(url, ALICE, **ELICITS) as alice:
            asked = await start(alice.session, args)
            huge = {
                key: types.ElicitResult(action="accept", content={"text": "y" * 20_000}) for key in asked.input_requests
            }
            grown = await within(
                60,
                alice.session.call_tool(
                    NAME, args, request_state=asked.request_state, input_responses=huge, allow_input_required=True
                ),
            )
            assert grown.is_error and "(--principal-max-mb, 10485 bytes)" in text(grown), grown
            second = await answer(alice.session, args, asked)  # the same round, answered within the cap
            assert isinstance(second, types.InputRequiredResult), second
            done = await answer(alice.session, args, second)
    assert not done.is_error and done.structured_content["answers"] == ["yes", "yes"], done
    assert marks(tmp_path, "a") == ["init", "finally", "after"]  # the refused round ended nothing


async def test_one_principals_calls_at_once_are_capped_and_anothers_go_on(tmp_path):
    """Handshake era: alice's call waits on her answer; her next is refused, bob's is served."""
    asked = anyio.Event()
    release = anyio.Event()

    async def slow_elicitation(ctx: Any, params: Any) -> types.ElicitResult:
        asked.set()
        await release.wait()
        return types.ElicitResult(action="accept", content={"text": "late"})

    with serving(tmp_path, "--store", "none", "--principal-max-calls", "1") as url:
        async with (
            client(url, ALICE, "legacy", elicitation_callback=slow_elicitation) as alice,
            client(url, ALICE, "legacy", **ELICITS) as alice_again,
            client(url, BOB, "legacy", elicitation_callback=slow_elicitation) as bob,
        ):
            async with anyio.create_task_group() as group:
                group.start_soon(alice.session.call_tool, NAME, arguments(tmp_path, "a1"))
                with anyio.fail_after(60):
                    await asked.wait()
                refused = await within(60, alice_again.session.call_tool(NAME, arguments(tmp_path, "a2")))
                assert refused.is_error and "principal 'alice' has 1 calls in progress" in text(refused), refused
                assert "--principal-max-calls 1" in text(refused) and marks(tmp_path, "a2") == []
                asked = anyio.Event()
                group.start_soon(bob.session.call_tool, NAME, arguments(tmp_path, "b1"))
                with anyio.fail_after(60):
                    await asked.wait()  # bob's call runs while alice's waits
                release.set()
    assert marks(tmp_path, "a1") == marks(tmp_path, "b1") == ["init", "finally", "after"]


@pytest.fixture(
    params=["sqlite", pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]
)
def store(request, tmp_path) -> Iterator[Any]:
    if request.param in ("sqlite", "postgres"):
        url = f"sqlite:///{tmp_path / 'runs.db'}"
        if request.param == "postgres":
            url = f"{request.getfixturevalue('postgres_server').url}?schema=owners{time.monotonic_ns()}"
        made = open_store(url, KeyRing([KEY]))
        yield made
        made.close()
        return
    server = RedisServer(tmp_path / "redis").start()
    try:
        made = open_store(server.url, KeyRing([KEY]))
        yield made
        made.close()
    finally:
        server.stop()


def test_the_store_counts_each_owners_runs(store):
    """What the caps read: each owner's count and bytes, kept as runs are created, moved on and deleted."""
    store.history_kept = 0  # the saved runs alone (what a history adds: tests/test_history.py)
    made = {}
    for owner, size in (("alice", 3), ("alice", 5), (None, 7), ("bob", 11)):
        made.setdefault(owner, []).append(store.create(RunRecord.new("t", "x" * size, ttl=60, owner=owner)))
    assert store.usage("waiting", owner="alice") == (2, 8) and store.usage(owner=None) == (1, 7)
    assert store.usage("waiting") == (4, 26) and store.usage("running", owner="bob") == (0, 0)
    (bobs,) = made["bob"]
    store.checkpoint(bobs.run_id, 1, status="running", saved="y" * 13)
    assert store.usage("running", owner="bob") == (1, 13) and store.usage("waiting", owner="bob") == (0, 0)
    store.delete(made["alice"][0].run_id)
    assert store.usage(owner="alice") == (1, 5) and store.usage() == (3, 25)
