"""A run's history and forks (store/history.py, bridge/runs.py `describe_history` and `fork_run`, the `runs
history` and `runs fork` commands).

Real parts: SQLite files, a real redis-server and a real PostgreSQL; runs saved by the real run machine of a
compiled tool; in the end-to-end tests a `branchc serve --http --store` subprocess called by the real `mcp`
client in both eras, and `branchc runs` as a subprocess. A fork is checked differentially: it ends as a fresh
run fed the same answers.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, KEYS, free_port, listening
from _postgres_support import needs_postgres, raw
from _postgres_support import url_of as postgres_url
from _redis_support import needs_redis
from mcp import Client

from branchc.bridge.loading import load_served_tools
from branchc.bridge.runs import RunsError, fork_run
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import SEGMENT_MESSAGES, dump_run, load_run
from branchc.store import RunRecord, StoreDataError, StoreURLError, open_store
from branchc.store.keys import KeyRing
from branchc.store.postgres import PostgresStore
from branchc.store.redis import RedisStore
from branchc.store.sqlite import SQLiteStore

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]

CHAT = """
from pydantic import BaseModel

from branchc import Context, tool


class Params(BaseModel):
    n: int


chat = tool("chat", params=Params, requires={"sampling"})


@chat.client
def client(handoff: dict, ctx: Context):
    last = None
    for i in range(handoff["n"]):
        reply = yield ctx.sample(prompt=f"turn {i} " + "x" * 40, max_tokens=1)
        last = reply.text
    replies = [m.content for m in ctx.messages if m.role == "assistant"]  # the conversation is all it keeps
    return {"replies": replies, "last": last}
"""


@pytest.fixture(scope="module")
def chat(tmp_path_factory) -> Any:
    folder = tmp_path_factory.mktemp("history_chat")
    (folder / "chat_tool.py").write_text(CHAT)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BRANCHC_CACHE", str(folder / "cache"))
        return load_served_tools(folder / "chat_tool.py")["chat"]


@pytest.fixture(
    params=["sqlite", pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]
)
def store(request, tmp_path) -> Any:
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    elif request.param == "redis":
        server = request.getfixturevalue("redis_server")
        made = RedisStore(server.url, keys=KEYS, prefix=f"h{time.monotonic_ns()}:")
    else:
        server = request.getfixturevalue("postgres_server")
        made = PostgresStore(server.url, keys=KEYS, schema=f"h{time.monotonic_ns()}")
    yield made
    made.close()


def sql(store: Any, query: str, *values: Any) -> list[tuple]:
    """`query` (with `?` marks) run on an SQL store's own tables, below its API; its rows (none for an edit)."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            cursor = conn.execute(query, values)
            return cursor.fetchall() if cursor.description else [(cursor.rowcount,)]
    with raw(store) as conn:
        cursor = conn.execute(query.replace("?", "%s"), values)
        return cursor.fetchall() if cursor.description else [(cursor.rowcount,)]


def started(tool: Any, n: int) -> tuple[dict, Machine]:
    handoff = {"n": n}
    machine = Machine(tool.name, "1", tool.limits)
    machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
    machine.advance()
    return handoff, machine


def answer(machine: Machine, text: str) -> None:
    (request,) = machine.pending
    machine.answer(request.key, text)
    del request  # held here, its sample's messages would look held elsewhere to the next save
    machine.advance()
    machine.take_outbox()


def finish(machine: Machine, replies: list[str]) -> Any:
    for text in replies:
        answer(machine, text)
    assert machine.done and machine.ok
    return machine.result


def saved_rounds(store: Any, tool: Any, n: int, rounds: int) -> tuple[str, Machine, Any]:
    """A run of `n` turns saved in `store` at each of its first `rounds` + 1 waits, answered "r0", "r1", ..."""
    handoff, machine = started(tool, n)
    record = store.create(RunRecord.new(tool.name, dump_run(handoff, machine), ttl=600, owner="ana"))
    for i in range(rounds):
        answer(machine, f"r{i}")
        text = dump_run(handoff, machine)
        record = store.checkpoint(
            record.run_id, record.version, status="waiting", saved=text, answers={"turn": i}, by="bob"
        )
    return record.run_id, machine, handoff


# ------------------------------------------------------------------------------------------ the store's history


def test_every_wait_is_kept_and_a_fork_at_each_ends_as_a_fresh_run_fed_the_same_answers(store, chat):
    n, rounds = 8, 5
    run_id, machine, _ = saved_rounds(store, chat, n, rounds)
    machine.release()
    entries = store.history(run_id)
    assert [e.k for e in entries] == list(range(rounds + 1))
    assert [e.answers for e in entries] == [None, *({"turn": i} for i in range(rounds))]
    assert [e.by for e in entries] == [None, *("bob",) * rounds]
    assert all(e.meta.pending == () and e.forked_from is None for e in entries)  # no bridge: no summaries
    for k in range(rounds + 1):
        _, text = store.saved_at(run_id, k)
        _, forked = load_run(text)
        others = [f"other {i}" for i in range(k, n)]
        _, fresh = started(chat, n)
        expected = finish(fresh, [f"r{i}" for i in range(k)] + others)
        assert finish(forked, others) == expected


def test_two_replicas_taking_turns_keep_one_history(store, chat):
    """Each store remembers what it appended last (so its next write need not read it again) only for the
    record it wrote: a write by the other replica in between, or a claim, and it reads the history again."""
    other = reopened(store, KEYS)
    handoff, machine = started(chat, 140)
    record = store.create(RunRecord.new(chat.name, dump_run(handoff, machine), ttl=600))
    turns = [store, store, other, store, other, other, store] * 10  # 70 waits: blocks made on both sides
    for i, writer in enumerate(turns):
        answer(machine, f"r{i}")
        claimed = writer.checkpoint(record.run_id, record.version, status="running")
        record = writer.checkpoint(record.run_id, claimed.version, status="waiting", saved=dump_run(handoff, machine))
    machine.release()
    for reader in (store, other):
        assert [e.k for e in reader.history(record.run_id)] == list(range(len(turns) + 1))
    for k in (0, 33, 64, len(turns)):
        _, forked = load_run(other.saved_at(record.run_id, k)[1])
        assert finish(forked, [f"s{i}" for i in range(k, 140)])["replies"][:k] == [f"r{i}" for i in range(k)]
    other.close()


def test_a_checkpoint_writes_what_it_added_not_the_conversation_again(store, chat):
    """The history of a long conversation grows by the turns each wait added: its heads stay about as large
    as the last unfinished block of messages, and each full block is kept once."""
    n = 300
    handoff, machine = started(chat, n)
    record = store.create(RunRecord.new(chat.name, dump_run(handoff, machine), ttl=600))
    for i in range(n - 1):
        answer(machine, f"reply {i}")
        record = store.checkpoint(record.run_id, record.version, status="waiting", saved=dump_run(handoff, machine))
    whole = len(dump_run(handoff, machine).encode())
    machine.release()
    heads, segments = stored_sizes(store, record.run_id)
    assert len(heads) == n
    assert max(heads[200:]) < 2 * max(heads[:SEGMENT_MESSAGES]), (heads[:5], heads[-5:])  # does not grow with K
    assert sum(segments) < 1.2 * whole  # each block once: about the last run's own size, not n times it
    assert len(segments) == (2 * (n - 1) + 1) // SEGMENT_MESSAGES


def stored_sizes(store: Any, run_id: str) -> tuple[list[int], list[int]]:
    """The bytes of each kept history entry's sealed head, and of each segment, as the backend holds them."""
    if isinstance(store, SQLiteStore | PostgresStore):
        heads = [len(h) for (h,) in sql(store, "SELECT head FROM history WHERE run_id = ? ORDER BY k", run_id)]
        return heads, [len(s) for (s,) in sql(store, "SELECT sealed FROM segments WHERE run_id = ?", run_id)]
    hist = store.client.hgetall(f"{store.prefix}hist:{run_id}")
    heads = [
        len(hist[f"head:{k}".encode()]) for k in sorted(int(name[5:]) for name in hist if name.startswith(b"head:"))
    ]
    return heads, [len(v) for v in store.client.hvals(f"{store.prefix}seg:{run_id}")]


def test_retention_keeps_the_last_n_and_zero_keeps_none(tmp_path, chat):
    kept = SQLiteStore(tmp_path / "two.db", keys=KEYS, history=2)
    run_id, machine, _ = saved_rounds(kept, chat, 6, 4)
    machine.release()
    assert [e.k for e in kept.history(run_id)] == [3, 4]
    with pytest.raises(RunsError, match=r"has no checkpoint 1: it keeps checkpoints 3 to 4"):
        fork_run(kept, run_id, 1)
    none = SQLiteStore(tmp_path / "none.db", keys=KEYS, history=0)
    run_id, machine, _ = saved_rounds(none, chat, 6, 2)
    machine.release()
    assert none.history(run_id) == []
    with pytest.raises(RunsError, match=r"keeps none \(its store keeps no history, history=0"):
        fork_run(none, run_id, 0)
    assert open_store(f"sqlite:///{tmp_path / 'u.db'}?history=5", KEYS).history_kept == 5
    assert open_store(f"sqlite:///{tmp_path / 'u.db'}", KEYS, history="all").history_kept is None
    for url, fragment in [
        (f"sqlite:///{tmp_path / 'u.db'}?history=-1", "history='-1' is not a number of checkpoints or all"),
        (f"sqlite:///{tmp_path / 'u.db'}?history=many", "write history=all or history=10"),
        ("redis://127.0.0.1:6379/0?history=x", "history='x'"),
        ("postgresql://127.0.0.1:5432/branchc?history=-2", "history='-2' is not a number of checkpoints or all"),
    ]:
        with pytest.raises(StoreURLError, match=fragment):
            open_store(url, KEYS)
    with pytest.raises(StoreURLError, match="given in the URL and apart from it"):
        open_store(f"sqlite:///{tmp_path / 'u.db'}?history=1", KEYS, history=2)


def test_a_fork_is_a_new_run_of_the_same_owner_sharing_nothing_with_its_parent(store, chat):
    run_id, machine, _ = saved_rounds(store, chat, 6, 3)
    parent = store.load(run_id)
    fork = fork_run(store, run_id[:10], 1)
    assert fork.run_id != run_id and fork.owner == "ana" and fork.status == "waiting" and fork.version == 1
    assert fork.meta.extra["forked_from"] == {"run": run_id, "k": 1}
    assert store.load(run_id) == parent  # untouched
    (first,) = store.history(fork.run_id)
    assert first.k == 0 and first.forked_from == (run_id, 1)
    # the fork goes its own way; the parent, live here, goes on as it was
    _, forked = load_run(fork.saved)
    assert finish(forked, ["f1", "f2", "f3", "f4", "f5"])["replies"] == ["r0", "f1", "f2", "f3", "f4", "f5"]
    assert finish(machine, ["r3", "r4", "r5"])["replies"] == [f"r{i}" for i in range(6)]
    # and so do their histories
    handoff, again = load_run(fork.saved)
    answer(again, "g1")
    record = store.checkpoint(fork.run_id, fork.version, status="waiting", saved=dump_run(handoff, again))
    again.release()
    assert [e.k for e in store.history(record.run_id)] == [0, 1] and len(store.history(run_id)) == 4
    # a run put back as it was read (a refused round) waits where it waited: no entry
    record = store.checkpoint(record.run_id, record.version, status="waiting", saved=str(record.saved))
    assert len(store.history(record.run_id)) == 2


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=needs_postgres)])
def sql_store(request, tmp_path) -> Any:
    """An SQL store (its tables edited below its API)."""
    if request.param == "sqlite":
        made = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    else:
        server = request.getfixturevalue("postgres_server")
        made = PostgresStore(server.url, keys=KEYS, schema=f"hs{time.monotonic_ns()}")
    yield made
    made.close()


def test_history_is_sealed_an_edited_moved_or_swapped_part_is_refused(sql_store, chat):
    store = sql_store
    run_id, machine, _ = saved_rounds(store, chat, 80, 40)  # 40 turns: segments
    other, machine2, _ = saved_rounds(store, chat, 80, 40)
    machine.release()
    machine2.release()

    def edit(query: str, *values: Any) -> None:
        assert sql(store, query, *values)[0][0] >= 1

    [(info, head)] = sql(store, "SELECT info, head FROM history WHERE run_id = ? AND k = 3", run_id)
    [(ref, sealed)] = sql(store, "SELECT ref, sealed FROM segments WHERE run_id = ? LIMIT 1", run_id)
    flipped = bytes([info[0], info[1] ^ 1]) + info[2:]
    edit("UPDATE history SET info = ? WHERE run_id = ? AND k = 3", flipped, run_id)
    with pytest.raises(StoreDataError, match=r"'history\[3\]' does not match its seal"):
        store.history(run_id)
    edit("UPDATE history SET info = ? WHERE run_id = ? AND k = 3", info, run_id)
    edit(
        "UPDATE history SET head = (SELECT head FROM history WHERE run_id = ? AND k = 3) WHERE run_id = ? AND k = 3",
        other,
        run_id,
    )
    with pytest.raises(StoreDataError, match=r"'history\[3\]' does not match its seal"):
        store.saved_at(run_id, 3)  # another run's head
    edit("UPDATE history SET head = ? WHERE run_id = ? AND k = 3", head, run_id)
    swap = "UPDATE segments SET sealed = (SELECT sealed FROM segments WHERE run_id = ? AND ref != ? LIMIT 1)"
    edit(swap + " WHERE run_id = ? AND ref = ?", run_id, ref, run_id, ref)
    with pytest.raises(StoreDataError, match=r"'segments\[[0-9a-f]{32}\]' does not match its seal or its name"):
        store.saved_at(run_id, 39)
    edit("DELETE FROM segments WHERE run_id = ? AND ref = ?", run_id, ref)
    with pytest.raises(StoreDataError, match="names segments the store does not hold"):
        store.saved_at(run_id, 39)
    edit("INSERT INTO segments VALUES (?, ?, ?, ?)", run_id, ref, KEYS.sealing_id, sealed)
    assert load_run(store.saved_at(run_id, 39)[1])  # put back: whole again


def history_bytes(store: Any, run_id: str) -> int:
    """What the backend holds of the run's history: its entries' sealed info and heads, and its segments."""
    if isinstance(store, SQLiteStore | PostgresStore):
        [(held,)] = sql(
            store, "SELECT COALESCE(SUM(length(info) + length(head)), 0) FROM history WHERE run_id = ?", run_id
        )
        [(segments,)] = sql(store, "SELECT COALESCE(SUM(length(sealed)), 0) FROM segments WHERE run_id = ?", run_id)
        return int(held) + int(segments)
    hist = store.client.hgetall(f"{store.prefix}hist:{run_id}")
    held = sum(len(v) for name, v in hist.items() if name.startswith((b"info:", b"head:")))
    return held + sum(len(v) for v in store.client.hvals(f"{store.prefix}seg:{run_id}"))  # key id and sealed


@pytest.mark.parametrize("kept", [None, 3])
def test_the_caps_count_what_a_runs_history_holds(store, chat, kept):
    """A run's history is stored for it: usage (what the caps read) counts it with the saved run, so a client
    answering round after round cannot grow the store past the caps by its history; retention frees it."""
    store = reopened(store, KEYS, history=kept)
    run_id, machine, _ = saved_rounds(store, chat, 80, 40)
    machine.release()
    record = store.load(run_id)
    held = history_bytes(store, run_id)
    # 41 waits of a growing chat, or the last 3 of them
    assert held > 10 * record.size if kept is None else held < 3 * record.size
    assert store.usage("waiting") == (1, record.size + held)
    assert store.usage("waiting", owner="ana").bytes == record.size + held
    store.delete(run_id)
    assert store.usage("waiting") == (0, 0)


def test_a_reader_of_the_store_without_the_key_learns_nothing_of_a_segment_from_its_name(store, chat):
    """Segments are stored under names keyed by the store's key and the run: not the digest of their text (which
    would let a reader confirm a guess of it), and not the same in two runs holding the same conversation."""
    names, digests = [], set()
    for _ in range(2):
        run_id, machine, handoff = saved_rounds(store, chat, 80, 40)
        digests |= set(dump_run(handoff, machine).refs)
        machine.release()
        if isinstance(store, SQLiteStore | PostgresStore):
            names.append({n for (n,) in sql(store, "SELECT ref FROM segments WHERE run_id = ?", run_id)})
        else:
            names.append({n.decode() for n in store.client.hkeys(f"{store.prefix}seg:{run_id}")})
    assert len(digests) == 2 and all(len(found) == 2 for found in names)  # two blocks of 32 in each run
    assert not (names[0] & names[1]) and not (digests & (names[0] | names[1]))


def reopened(store: Any, keys: KeyRing, history: int | None = None) -> Any:
    """The same backend (file, or database and prefix) opened with another ring."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path, keys=keys, history=history)
    if isinstance(store, PostgresStore):
        return PostgresStore(postgres_url(store).partition("?")[0], keys=keys, schema=store.schema, history=history)
    return RedisStore(store.url, keys=keys, prefix=store.prefix, history=history)


def test_rekey_seals_and_names_the_history_anew(store, chat):
    kept = reopened(store, KEYS, history=3)
    run_id, machine, _ = saved_rounds(kept, chat, 80, 70)
    machine.release()
    new = KeyRing(["n" * 64, *KEYS.secrets])
    assert reopened(store, new).rekey().refused == ()
    only_new = reopened(store, KeyRing(["n" * 64]))
    assert [e.k for e in only_new.history(run_id)] == [68, 69, 70]
    _, text = only_new.saved_at(run_id, 68)
    assert finish(load_run(text)[1], [f"s{i}" for i in range(68, 80)])["replies"][:68] == [f"r{i}" for i in range(68)]
    with pytest.raises(StoreDataError, match=r"does not match its seal"):
        reopened(store, KEYS).history(run_id)  # the old key alone opens none of it now


def test_deleting_or_collecting_a_run_takes_its_history_and_rekey_seals_it_anew(tmp_path, chat):
    store = SQLiteStore(tmp_path / "runs.db", keys=KEYS)
    gone, machine, _ = saved_rounds(store, chat, 80, 35)
    machine.release()
    kept, machine, _ = saved_rounds(store, chat, 80, 35)
    machine.release()
    assert store.delete(gone)
    assert store.history(gone) == []
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM segments WHERE run_id = ?", (gone,)).fetchone() == (0,)
    new = KeyRing(["n" * 64, *KEYS.secrets])
    rekeyed = SQLiteStore(tmp_path / "runs.db", keys=new)
    assert rekeyed.rekey().refused == ()
    only_new = SQLiteStore(tmp_path / "runs.db", keys=KeyRing(["n" * 64]))
    assert [e.k for e in only_new.history(kept)] == list(range(36))
    assert load_run(only_new.saved_at(kept, 35)[1])
    record = only_new.load(kept)
    only_new.checkpoint(kept, record.version, status="done", saved="", expires=time.time() - 1)
    assert only_new.gc(time.time() + 1) == 1
    assert only_new.history(kept) == []


@pytest.mark.parametrize("at, whole", [(3, False), (33, True)])
def test_a_run_holding_the_mark_itself_is_saved_exactly(chat, at, whole):
    """A message text that is the very string standing for a segment is never taken for one: within a segment it
    is text like any other; in the head (not yet in a full block) the run is kept whole."""
    mark = "\x00branchc segment " + "0" * 32
    handoff, machine = started(chat, 40)
    for i in range(34):
        answer(machine, mark if i == at else f"r{i}")
    text = dump_run(handoff, machine)
    assert (text.refs == () and text.pieces == (str(text),)) is whole
    joined = "".join(
        p + (text.segment(r).decode() if r else "") for p, r in zip(text.pieces, (*text.refs, None), strict=True)
    )
    assert joined == text
    _, again = load_run(text)
    assert finish(again, [f"s{i}" for i in range(34, 40)])["replies"][at] == mark
    machine.release()


# ------------------------------------------------------------------------------- served runs, forked and resumed

DURABLE = Path(__file__).parent / "servers" / "durable_tools.py"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One build cache for the module's servers and commands: the tool is compiled once."""
    return tmp_path_factory.mktemp("history_cache")


async def _sample(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = params.messages[-1].content_as_list[0].text
    return types.CreateMessageResult(
        role="assistant", model="scripted", content=types.TextContent(type="text", text=f"reply {text.split()[-1]}")
    )


async def _form(ctx: Any, params: Any) -> types.ElicitResult:
    raise AssertionError("the 2026-07-28 era asks in rounds")  # a callback only declares the capability


async def _waiting_at_question_3(url: str, log: Path) -> Any:
    """A 2026-07-28 run of four questions, answered up to question 3: the round it waits for."""
    async with Client(url, mode="2026-07-28", sampling_callback=_sample, elicitation_callback=_form) as client:
        arguments = {"rounds": 4, "log": str(log)}
        result = await client.session.call_tool("durable_steps", arguments, allow_input_required=True)
        for number in range(3):
            (key,) = result.input_requests
            params = result.input_requests[key].params
            reply = (
                await _sample(None, params)
                if number % 2 == 0
                else types.ElicitResult(action="accept", content={"value": number})
            )
            result = await client.session.call_tool(
                "durable_steps",
                arguments,
                request_state=result.request_state,
                input_responses={key: reply},
                allow_input_required=True,
            )
        assert isinstance(result, types.InputRequiredResult), result
        return result


async def _answer_last(url: str, log: Path, waiting: Any) -> Any:
    async with Client(url, mode="2026-07-28", sampling_callback=_sample, elicitation_callback=_form) as client:
        (key,) = waiting.input_requests
        done = await client.session.call_tool(
            "durable_steps",
            {"rounds": 4, "log": str(log)},
            request_state=waiting.request_state,
            input_responses={key: types.ElicitResult(action="accept", content={"value": 3})},
        )
        return done.structured_content


def _fresh(answers: list[Any], folder: Path) -> Any:
    """What a run fed `answers` from the start gives (the differential's other side): `branchc run`."""
    samples = [a for a in answers if isinstance(a, str)]
    params = json.dumps({"rounds": len(answers), "log": str(folder / "fresh.txt")})
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "run", str(DURABLE), "durable_steps", "--quiet", "--params", params,
         "--responses", str(_responses(folder, samples, [a for a in answers if isinstance(a, int)]))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _resumed_as_a_fresh_run(runs: Any, fork: str, db: str, folder: Path, before: list, after: list) -> None:
    """The fork, waiting after the answers `before`, resumed with the answers `after`, ends as a run fed them all
    from the start (the differential)."""
    samples = [a for a in after if isinstance(a, str)]
    resumed = runs(
        "resume", fork, "--tools", str(DURABLE), "--store", db, "--json", "--quiet",
        "--responses", str(_responses(folder, samples, [a for a in after if isinstance(a, int)])),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["result"] == _fresh([*before, *after], folder / "fresh")


def _graph(*arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "graph", *arguments], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _node(dot: str, text: str) -> str:
    """The label of the one node of `dot` whose label holds `text`."""
    labels = re.findall(r'\t(n\d+) \[label="((?:[^"\\]|\\.)*)"', dot)
    (label,) = [label for _, label in labels if text in label]
    return label


def _responses(folder: Path, samples: list[str], values: list[int]) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "answers.yaml"
    elicit = [{"action": "accept", "content": {"value": v}} for v in values]
    path.write_text(json.dumps({"sample": samples, "elicit": elicit}))
    return path


def test_a_served_run_is_forked_at_a_past_checkpoint_and_both_go_on_apart(tmp_path, monkeypatch, cache):
    from test_runs_cli import runs

    monkeypatch.setenv("BRANCHC_CACHE", str(cache))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "log.txt"
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(DURABLE), "--state-key", KEY, "--store", db]
    with listening([*command, "--http", f"127.0.0.1:{port}"], port, {"BRANCHC_CACHE": str(cache)}):
        url = f"http://127.0.0.1:{port}/mcp"
        waiting = anyio.run(_waiting_at_question_3, url, log)
        listed = json.loads(runs("list", "--store", db, "--json").stdout)
        (parent,) = [run["run_id"] for run in listed]
        history = json.loads(runs("history", parent[:8], "--store", db, "--json").stdout)
        assert [(h["k"], [a["summary"] for a in h["asked"]]) for h in history] == [
            (k, [f"question {k}"]) for k in range(4)
        ]
        assert [h["waits"][0]["point"] for h in history] == [
            "try:body/for/if:then/sample:reply",
            "try:body/for/if:else/elicit:number",
        ] * 2
        answered = [json.dumps(h["answers"]) for h in history]
        assert '"reply 0"' in answered[0] and '"value": 1' in answered[1] and '"reply 2"' in answered[2]
        assert history[3]["answers"] is None and history[2]["answered_by"] is None  # waits there; no auth
        table = runs("history", parent, "--store", db)
        assert table.returncode == 0 and "question 3" in table.stdout and "waits here" in table.stdout
        drawn = _graph(str(DURABLE), "--run", parent[:8], "--store", db, "--format", "dot")
        sample, form = (
            _node(drawn, f"point try:body/for/if:{arm}") for arm in ("then/sample:reply", "else/elicit:number")
        )
        assert "visited #0, #2" in sample and "visited #1, #3" in form
        assert "waits here: branch 0" in form and "waits here" not in sample
        assert "#0 sample → reply 0" in sample and '#1 elicit → accept {\\"value\\": 1}' in form
        made = runs("fork", parent, "--at", "1", "--store", db, "--json")
        assert made.returncode == 0, made.stderr
        fork = json.loads(made.stdout)["run_id"]
        assert fork != parent
        _resumed_as_a_fresh_run(runs, fork, db, tmp_path, ["reply 0"], [101, "other 2", 103])
        # the parent waits on, untouched: its client's next round ends it as if no fork had been made
        assert anyio.run(_answer_last, url, log, waiting) == {"answers": ["reply 0", 1, "reply 2", 3], "done": True}
    steps = log.read_text().splitlines()
    assert steps.count("finally") == 2 and steps.count("after") == 2  # once for each run
    assert steps[:3] == ["step 0", "step 1", "step 2"]
    forked = json.loads(runs("history", fork, "--store", db, "--json").stdout)
    assert forked[0]["forked_from"] == {"run": parent, "k": 1} and [h["k"] for h in forked] == [0, 1, 2]
    gone = runs("fork", parent, "--at", "9", "--store", db)
    assert gone.returncode == 1 and f"run {parent!r} has no checkpoint 9: it keeps checkpoints 0 to 3" in gone.stderr


def test_a_handshake_run_whose_server_died_is_forked_and_resumed(tmp_path, monkeypatch, cache):
    from test_held_runs import crashed_waiting, responses_file
    from test_runs_cli import runs

    monkeypatch.setenv("BRANCHC_CACHE", str(cache))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "log.txt"
    anyio.run(lambda: crashed_waiting(str(cache), db, log, rounds=4, stop=2))
    (parent,) = [run["run_id"] for run in json.loads(runs("list", "--store", db, "--json").stdout)]
    history = json.loads(runs("history", parent, "--store", db, "--json").stdout)
    assert [h["k"] for h in history] == [0, 1, 2]
    assert "reply 0" in json.dumps(history[0]["answers"]) and '"value": 1' in json.dumps(history[1]["answers"])
    fork = json.loads(runs("fork", parent, "--at", "1", "--store", db, "--json").stdout)["run_id"]
    _resumed_as_a_fresh_run(runs, fork, db, tmp_path, ["reply 0"], [11, "other 2", 13])
    again = runs(
        "resume", parent, "--tools", str(DURABLE), "--store", db, "--json", "--quiet",
        "--responses", str(responses_file(tmp_path, 2, 4)),
    )  # fmt: skip
    assert json.loads(again.stdout)["result"] == {"answers": ["reply 0", 1, "reply 2", 3], "done": True}
    assert log.read_text().splitlines().count("finally") == 2
