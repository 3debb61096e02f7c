"""Replicas: concurrent multi-round calls, every round of every run on the other of two servers sharing a store.

The small, fast version of benchmarks/bench_replicas.py (200 calls there, 20 here): two real `branchc serve
--http` subprocesses share one store (an SQLite file; a real redis-server; a real PostgreSQL) and one state
key; the real `mcp` client in the 2026-07-28 era drives 20 calls at once, 10 questions each, sending round k
of call i to replica (i + k) % 2. The tool (tests/servers/replica_tools.py) returns the answers in order and
the pid of the server that took each one, so a result proves both that every answer arrived, in order, and
that the run really moved between the two processes at every round.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEY, KEYS, free_port, listening, within
from _postgres_support import needs_postgres
from _redis_support import RedisServer, needs_redis
from mcp import Client

from branchc.store import open_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


TOOL_FILE = Path(__file__).parent / "servers" / "replica_tools.py"
CALLS, ROUNDS = 20, 10


async def unused(ctx: Any, params: Any) -> Any:
    raise AssertionError("the 2026-07-28 era has no back channel: the server asked mid-call")


# the callbacks declare sampling and elicitation; in this era the questions come back as InputRequiredResult
CLIENT = {"mode": "2026-07-28", "sampling_callback": unused, "elicitation_callback": unused}


def answer(tag: str, index: int, request: Any) -> Any:
    """A sample "TAG question N" gets "reply TAG N"; a form gets index * 1000 + N."""
    if isinstance(request, types.CreateMessageRequest):
        text = "".join(b.text for b in request.params.messages[-1].content_as_list if b.type == "text")
        asked_tag, _, number = text.split()
        return types.CreateMessageResult(
            role="assistant",
            model="scripted",
            content=types.TextContent(type="text", text=f"reply {asked_tag} {number}"),
        )
    return types.ElicitResult(
        action="accept", content={"value": index * 1000 + int(request.params.message.split()[-1])}
    )


async def one_call(index: int, sessions: list[Any]) -> tuple[Any, int]:
    """Call `index` to its end, round k on sessions[(index + k) % 2]; (its result, how many rounds it took)."""
    tag, state, responses, k = f"call{index}", None, None, 0
    while True:
        result = await sessions[(index + k) % 2].call_tool(
            "replica_rounds",
            {"tag": tag, "rounds": ROUNDS},
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
        )
        k += 1
        if not isinstance(result, types.InputRequiredResult) or k > ROUNDS + 1:
            return result, k
        responses = {key: answer(tag, index, request) for key, request in result.input_requests.items()}
        state = result.request_state


async def load(store: str, cache: Path) -> None:
    servers, urls = [], []
    for _ in range(2):
        port = free_port()
        command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--state-key", KEY]
        servers.append(
            listening([*command, "--http", f"127.0.0.1:{port}", "--store", store], port, {"BRANCHC_CACHE": str(cache)})
        )
        urls.append(f"http://127.0.0.1:{port}/mcp")
    with servers[0] as one, servers[1] as two:
        pids = [one.pid, two.pid]
        async with Client(urls[0], **CLIENT) as a, Client(urls[1], **CLIENT) as b:
            results: dict[int, tuple[Any, int]] = {}

            async def run(index: int) -> None:
                results[index] = await one_call(index, [a.session, b.session])

            async with anyio.create_task_group() as group:
                for index in range(CALLS):
                    group.start_soon(run, index)
    for index in range(CALLS):
        result, count = results[index]
        assert isinstance(result, types.CallToolResult) and not result.is_error, (index, result)
        assert count == ROUNDS + 1
        tag = f"call{index}"
        answers = [f"reply {tag} {n}" if n % 2 == 0 else index * 1000 + n for n in range(ROUNDS)]
        # round k (k >= 1) took answer k - 1 on replica (index + k) % 2: the run changed process every round
        moved = [pids[(index + k) % 2] for k in range(1, ROUNDS + 1)]
        assert result.structured_content == {"tag": tag, "answers": answers, "pids": moved}, (index, pids)
    records = open_store(store, KEYS).list(limit=1000)
    assert len(records) == CALLS and {r.status for r in records} == {"done"}  # one record per call, all ended


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("replicas_cache")


async def test_concurrent_runs_alternate_between_two_replicas_on_one_sqlite_file(cache, tmp_path):
    await within(60, load(f"sqlite:///{tmp_path / 'runs.db'}", cache))


@needs_redis
async def test_concurrent_runs_alternate_between_two_replicas_on_one_redis(cache, tmp_path):
    redis = RedisServer(tmp_path / "redis").start()
    try:
        await within(60, load(f"{redis.url}?prefix=replicas:", cache))
    finally:
        redis.stop()


@needs_postgres
async def test_concurrent_runs_alternate_between_two_replicas_on_one_postgresql(cache, postgres_server):
    await within(60, load(f"{postgres_server.url}?schema=replicas{time.monotonic_ns()}", cache))
