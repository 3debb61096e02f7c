"""Real runs for the runs console's tests (tests/test_console.py, tests/test_console_browser.py).

A real `branchc serve --http --console --store sqlite:///FILE --auth-tokens FILE --operators ops --otel` subprocess
serves tests/servers/console_tools.py; the real `mcp` client, as alice and as bob, leaves runs in its store:

- alice's `survey` waiting at its third question (checkpoints 0, 1, 2), answered with a name and a sampled draft;
- alice's `survey` waiting there too, answered with a name and a draft that are markup (HOSTILE_NAME,
  HOSTILE_DRAFT): what a hostile client or model could send;
- alice's `triage` waiting in two branches at once;
- alice's `survey` that ran to its end (done);
- bob's `survey` waiting at its first question.

Each run's finally appends a line to its marker file (markers/NAME.txt), so a test counts its cleanups.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from _bridge_support import KEY, KEYS, free_port, listening, within
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from branchc.store import open_store

TOOL_FILE = Path(__file__).parent / "servers" / "console_tools.py"
TOKENS = {
    "alice": "alice-console-token-0123456789",
    "bob": "bob-console-token-0123456789",
    "ops": "ops-console-token-0123456789",
}
OPERATORS = ("ops",)
HOSTILE_NAME = '<script>alert("name")</script>'
HOSTILE_DRAFT = 'Draft <img src=x onerror=alert("draft")> & more'
NAME = "Ana Lima"
DRAFT = "Refunds are paid back to the card within 14 days of the return arriving."
RUNS = ("alice-survey", "alice-hostile", "alice-triage", "alice-done", "bob-survey")


@dataclass
class Served:
    """The server (its base URL, http://127.0.0.1:PORT), its store file and cache, the markers and token file, and
    the id of each run by its name in RUNS."""

    url: str
    db: Path
    cache: Path
    markers: Path
    tokens: Path
    ids: dict[str, str]

    def marks(self, name: str) -> list[str]:
        path = self.markers / f"{name}.txt"
        return path.read_text().splitlines() if path.exists() else []


def client(url: str, token: str) -> Client:
    headers = {"Authorization": f"Bearer {token}"}
    transport = streamable_http_client(f"{url}/mcp", http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode="2026-07-28", sampling_callback=_sampling, elicitation_callback=_elicitation)


async def _sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", model="scripted", content=types.TextContent(type="text", text=HOSTILE_DRAFT)
    )


async def _elicitation(ctx: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"approve": True})


def _answers(asked: types.InputRequiredResult, name: str, draft: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, request in asked.input_requests.items():
        if isinstance(request, types.CreateMessageRequest):
            out[key] = types.CreateMessageResult(
                role="assistant", model="scripted", content=types.TextContent(type="text", text=draft)
            )
        elif "Who is asking" in request.params.message:
            out[key] = types.ElicitResult(action="accept", content={"name": name})
        else:
            out[key] = types.ElicitResult(action="accept", content={"approve": True})
    return out


async def _rounds(
    session: Any, tool: str, arguments: dict[str, str], rounds: int, name: str = NAME, draft: str = DRAFT
) -> Any:
    """`rounds` rounds of a call: the first, then rounds - 1 answered ones (`name` and `draft` the answers to
    survey's first two questions); the last result."""
    result = await within(60, session.call_tool(tool, arguments, allow_input_required=True))
    for _ in range(rounds - 1):
        assert isinstance(result, types.InputRequiredResult), result
        result = await within(
            60,
            session.call_tool(
                tool,
                arguments,
                request_state=result.request_state,
                input_responses=_answers(result, name, draft),
                allow_input_required=True,
            ),
        )
    return result


async def _make_runs(url: str, markers: Path) -> None:
    def args(name: str) -> dict[str, str]:
        return {"topic": "refunds", "marker": str(markers / f"{name}.txt")}

    async with client(url, TOKENS["alice"]) as alice:
        assert isinstance(await _rounds(alice.session, "survey", args("alice-survey"), 3), types.InputRequiredResult)
        hostile = await _rounds(alice.session, "survey", args("alice-hostile"), 3, HOSTILE_NAME, HOSTILE_DRAFT)
        assert isinstance(hostile, types.InputRequiredResult)
        assert isinstance(await _rounds(alice.session, "triage", args("alice-triage"), 1), types.InputRequiredResult)
        done = await _rounds(alice.session, "survey", args("alice-done"), 4)
        assert isinstance(done, types.CallToolResult) and not done.is_error, done
    async with client(url, TOKENS["bob"]) as bob:
        assert isinstance(await _rounds(bob.session, "survey", args("bob-survey"), 1), types.InputRequiredResult)


def _named(db: Path) -> dict[str, str]:
    store = open_store(f"sqlite:///{db}", KEYS)
    try:
        records = store.list()
    finally:
        store.close()
    found = {}
    for record in records:
        if record.owner == "bob":
            found["bob-survey"] = record.run_id
        elif record.tool == "triage":
            found["alice-triage"] = record.run_id
        elif record.status == "done":
            found["alice-done"] = record.run_id
        else:
            found["alice-survey" if NAME in record.saved else "alice-hostile"] = record.run_id
    assert sorted(found) == sorted(RUNS), [(r.tool, r.owner, r.status) for r in records]
    return found


def tokens_file(folder: Path) -> Path:
    path = folder / "tokens.txt"
    path.write_text("".join(f"{name} {token}\n" for name, token in TOKENS.items()))
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def serving(folder: Path, *args: str) -> Iterator[Served]:
    """The server with its runs made, until the block ends (then it is killed)."""
    cache, markers, db = folder / "cache", folder / "markers", folder / "runs.db"
    markers.mkdir()
    tokens = tokens_file(folder)
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL_FILE), "--http", f"127.0.0.1:{port}"]
    command += ["--store", f"sqlite:///{db}", "--state-key", KEY, "--auth-tokens", str(tokens)]
    command += ["--operators", ",".join(OPERATORS), "--console", "--otel", *args]
    env = {"BRANCHC_CACHE": str(cache), "BRANCHC_STATE_DIR": str(folder / "state"), "OTEL_TRACES_EXPORTER": "none"}
    with listening(command, port, env):
        url = f"http://127.0.0.1:{port}"
        anyio.run(_make_runs, url, markers)
        yield Served(url, db, cache, markers, tokens, _named(db))


def copy_store(served: Served, to: Path) -> str:
    """A consistent copy of the served store (SQLite's backup, while the server may write it): its URL."""
    with contextlib.closing(sqlite3.connect(served.db)) as source, contextlib.closing(sqlite3.connect(to)) as copy:
        source.backup(copy)
    to.chmod(0o600)
    return f"sqlite:///{to}"
