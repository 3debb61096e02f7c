"""Warm runs (bridge/warm.py): the replica that saved a run continues it from the live machine, not the text.

The real `mcp` client in the 2026-07-28 era against an in-process server, with no store and with a real
SQLite file. The tool (tests/servers/durable_tools.py) logs each step and its finally, so a test sees
what ran; `load_run` is counted, so a test sees when a round read the saved text instead.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client
from test_durable_rounds import (
    MODERN,
    TOOL_FILE,
    answer_all,
    args,
    call,
    error_text,
    expected,
    final,
    lines,
    play,
    ran_once,
    server,
)

import branchc.bridge.durable
import branchc.bridge.rounds
import branchc.bridge.server
import branchc.runtime.builds
from branchc.bridge.loading import load_served_tools
from branchc.bridge.warm import WarmRuns
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import load_run

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]


@pytest.fixture
def tools(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path_factory.getbasetemp() / "warm_cache"))
    return load_served_tools(TOOL_FILE)


@pytest.fixture
def loads(monkeypatch) -> list[int]:
    """One entry per saved run a round decoded (in either era's module)."""
    count: list[int] = []

    def counted(text: str, *rest: Any) -> Any:
        count.append(len(text))
        return load_run(text, *rest)

    monkeypatch.setattr(branchc.bridge.rounds, "load_run", counted)
    monkeypatch.setattr(branchc.runtime.builds, "load_run", counted)  # durable.py's, through load_run_or_kept
    return count


@pytest.mark.parametrize("store", [False, True], ids=["request_state", "sqlite"])
async def test_a_run_continued_where_it_was_saved_is_never_loaded(tools, tmp_path, loads, store):
    log = tmp_path / "log.txt"
    url = f"sqlite:///{tmp_path / 'runs.db'}" if store else None
    async with Client(server(tools, url), **MODERN) as client:
        result, states = await play([client.session], args(6, log))
    assert final(result) == expected(6)
    assert len(states) == 6 and loads == []
    ran_once(log, 6)


async def test_a_state_sent_again_is_loaded_from_its_text_and_gives_the_same_round(tools, tmp_path, loads):
    log = tmp_path / "log.txt"
    arguments = args(3, log)
    async with Client(server(tools, None), **MODERN) as client:
        first = await call(client.session, arguments)
        responses = await answer_all(first)
        warm = await call(client.session, arguments, first.request_state, responses)
        assert loads == []
        again = await call(client.session, arguments, first.request_state, responses)  # a retry, or a fork
        assert len(loads) == 1
        assert again.input_requests == warm.input_requests
        assert lines(log) == ["step 0", "step 0"]  # without a store a round sent again runs again


async def test_refused_answers_leave_the_run_warm(tools, tmp_path, loads):
    log = tmp_path / "log.txt"
    arguments = args(2, log)
    async with Client(server(tools, None), **MODERN) as client:
        first = await call(client.session, arguments)
        assert "lacks answers to: sample-1" in error_text(
            await call(client.session, arguments, first.request_state, {})
        )
        wrong = {"sample-1": types.ElicitResult(action="accept", content={"value": 1})}
        assert "expected a sampling result" in error_text(
            await call(client.session, arguments, first.request_state, wrong)
        )
        second = await call(client.session, arguments, first.request_state, await answer_all(first))
        last = await call(client.session, arguments, second.request_state, await answer_all(second))
    assert final(last) == expected(2) and loads == []
    ran_once(log, 2)


@pytest.mark.parametrize("store", [False, True], ids=["request_state", "sqlite"])
async def test_runs_let_go_of_or_dropped_with_the_server_run_no_cleanup(tools, tmp_path, monkeypatch, loads, store):
    """Kept past the size, a run is released: its finally waits for the round where the run ends, even when
    that round is served from the saved text; the runs kept when the server goes are released too."""
    monkeypatch.setattr(branchc.bridge.server, "WarmRuns", lambda: WarmRuns(size=1))
    url = f"sqlite:///{tmp_path / 'runs.db'}" if store else None
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    async with Client(server(tools, url), **MODERN) as client:
        first = await call(client.session, args(2, one))
        other = await call(client.session, args(2, two))  # kept; the first run is let go of
        assert lines(one) == [] and loads == []
        second = await call(client.session, args(2, one), first.request_state, await answer_all(first))
        assert len(loads) == 1 and lines(one) == ["step 0"]
        last = await call(client.session, args(2, one), second.request_state, await answer_all(second))
        assert final(last) == expected(2)
        ran_once(one, 2)
        assert lines(two) == [] and other.request_state


def started(tools: dict, log: Path) -> Any:
    """A durable_steps machine, waiting at its first question."""
    tool = tools["durable_steps"]
    machine = Machine(tool.name, "1", tool.limits)
    machine.start(tool.client_fn, args(2, log), tool.client_fn.__qualname__)
    machine.advance()
    assert machine.pending
    return machine


def test_runs_kept_when_their_warm_runs_go_are_released(tools, tmp_path):
    """Dropping WarmRuns (with its bridge, or at exit) releases what it keeps: no finally runs. Dropping such
    a machine unreleased would close its generator, and run it (the control)."""
    dropped, kept = tmp_path / "dropped.txt", tmp_path / "kept.txt"
    machine = started(tools, dropped)
    del machine
    gc.collect()
    assert lines(dropped) == ["finally"]  # the control: CPython closes what it frees
    runs = WarmRuns()
    runs.keep("state", {}, started(tools, kept))
    del runs
    gc.collect()
    assert lines(kept) == []


def test_a_kept_machine_is_released_not_closed(tmp_path):
    """WarmRuns on its own: taking gives the machine back once; evicting and dropping release it."""
    released: list[str] = []

    class Machine:
        def __init__(self, name: str, saved_bytes: int = 10) -> None:
            self.name = name
            self.saved_bytes = saved_bytes

        def release(self) -> None:
            released.append(self.name)

    runs = WarmRuns(size=2)
    for name in "abc":
        runs.keep(name, {}, Machine(name))
    assert released == ["a"] and len(runs) == 2
    assert runs.take("a") is None
    _, machine, _ = runs.take("b")
    assert machine.name == "b" and runs.take("b") is None
    runs.keep("c", {}, Machine("c2"))  # a key kept again: the machine it held is let go of
    assert released == ["a", "c"]
    del runs
    gc.collect()
    assert released == ["a", "c", "c2"]


def test_kept_runs_are_bounded_by_their_saved_bytes():
    released: list[str] = []

    class Machine:
        def __init__(self, name: str, saved_bytes: int) -> None:
            self.name, self.saved_bytes = name, saved_bytes

        def release(self) -> None:
            released.append(self.name)

    runs = WarmRuns(size=10, max_bytes=100)
    runs.keep("a", {}, Machine("a", 40))
    runs.keep("b", {}, Machine("b", 40))
    runs.keep("c", {}, Machine("c", 40))  # 120 bytes: the oldest goes
    assert released == ["a"] and runs.bytes == 80
    runs.keep("big", {}, Machine("big", 101))  # more than all may hold: let go of at once
    assert released == ["a", "big"] and runs.bytes == 80 and len(runs) == 2
    assert runs.take("b") is not None and runs.bytes == 40
