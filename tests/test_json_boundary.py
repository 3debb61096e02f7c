"""Data that is not JSON at a phase boundary: the error names the file:line of the return that gave it and
lists every bad value by its path (bounded), through the runtime API, `branchc run` and an MCP client."""

from __future__ import annotations

import datetime
import decimal
import enum
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _bridge_support import KEY, Scripted
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc import JsonDataError, run_tool, tool
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.runtime.jsondata import LISTED, check_json_data
from branchc.testing import MockClient

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

HINT = "convert them in {}(): JSON data is None, bool, int, float, str, list, and dict with str keys"


def place_of(path: str, line: int) -> str:
    """How an error names a file: relative to the working folder when inside it."""
    relative = os.path.relpath(path)
    return f"{path if relative.startswith('..') else relative}:{line}"


class Color(enum.Enum):
    RED = "red"


async def test_every_bad_value_is_listed_with_its_path():
    t = tool("t")

    @t.before
    def before(params):
        return {
            "flights": [{"id": 1, "when": "today"}, {"id": 2, "when": datetime.datetime(2024, 5, 1, 9)}],
            "price": decimal.Decimal("9.50"),
            "seats": {"12A", "12B"},
            "color": Color.RED,
            "ok": [1, 2.5, None, True, "x"],
            "legs": ({"to": "LIS"},),
        }

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")

    with pytest.raises(JsonDataError) as info:
        await run_tool(t, {}, MockClient())
    line = before.__code__.co_firstlineno + 2  # its one return (the errors name the return, not the def)
    problems = [
        "handoff['flights'][1]['when']: datetime is not JSON data (use .isoformat())",
        "handoff['price']: Decimal is not JSON data (use str() or float())",
        "handoff['seats']: set is not JSON data (use a sorted list)",
        "handoff['color']: Color is not JSON data (use .value)",
        "handoff['legs']: tuple is not JSON data (use a list)",
    ]
    assert str(info.value).splitlines() == [
        f"{place_of(__file__, line)}: before() returned data that is not JSON:",
        *(f"  {problem}" for problem in problems),
        f"  hint: {HINT.format('before')}",
    ]
    assert info.value.problems == problems
    assert info.value.total == 5
    assert info.value.place == place_of(__file__, line)
    assert info.value.phase == "before"


async def test_a_long_list_of_bad_values_is_bounded_and_counted():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return {"rows": [{"at": datetime.date(2024, 1, day)} for day in range(1, 31)]}

    @t.after
    def after(handoff, result):  # never reached
        raise AssertionError("after ran")

    with pytest.raises(JsonDataError) as info:
        await run_tool(t, {}, MockClient())
    lines = str(info.value).splitlines()
    assert (
        lines[0]
        == f"{place_of(__file__, client.__code__.co_firstlineno + 3)}: client() returned data that is not JSON:"
    )
    assert lines[1 : LISTED + 1] == [
        f"  client_result['rows'][{n}]['at']: date is not JSON data (use .isoformat())" for n in range(LISTED)
    ]
    assert lines[LISTED + 1 :] == [f"  and {30 - LISTED} more (30 in all)", f"  hint: {HINT.format('client')}"]
    assert info.value.total == 30
    assert len(info.value.problems) == LISTED


async def test_after_names_its_own_line():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return [1]

    @t.after
    async def after(handoff, result):
        return {"r": tuple(result), "n": float("inf")}

    with pytest.raises(JsonDataError) as info:
        await run_tool(t, {}, MockClient())
    assert str(info.value).splitlines() == [
        f"{place_of(__file__, after.__code__.co_firstlineno + 2)}: after() returned data that is not JSON:",  # return
        "  result['r']: tuple is not JSON data (use a list)",
        "  result['n']: inf is not JSON data (JSON has no NaN or infinity)",
        f"  hint: {HINT.format('after')}",
    ]


def test_other_checks_list_every_value_too():
    with pytest.raises(JsonDataError) as info:
        check_json_data({"a": (1,), "b": {2}}, "answer", "the client must answer with JSON data")
    assert str(info.value).splitlines() == [
        "answer: 2 values are not JSON data:",
        "  answer['a']: tuple is not JSON data (use a list)",
        "  answer['b']: set is not JSON data (use a sorted list)",
        "  hint: the client must answer with JSON data",
    ]
    with pytest.raises(JsonDataError) as info:  # one bad value: one line, as before
        check_json_data({"a": (1,)}, "answer", "fix it")
    assert str(info.value) == "answer['a']: tuple is not JSON data (use a list); fix it"


TOOL = """\
import datetime

from branchc import Context, tool

flights = tool("flights", description="flights with dates")


@flights.before
def load(params) -> dict:
    when = datetime.datetime(2024, 5, 1, 9, 30)
    return {"flights": [{"to": "LIS", "when": when}, {"to": "OPO", "when": when.date()}]}


@flights.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", "never")
    return handoff
"""
BEFORE_LINE = 11  # load's return: its one return of a value


def test_branchc_run_names_the_file_line_and_every_value(tmp_path: Path):
    (tmp_path / "flights_tool.py").write_text(TOOL)
    (tmp_path / "answers.yaml").write_text("sample: []\n")
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "run", "flights_tool.py", "flights", "-r", "answers.yaml", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "BRANCHC_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    start = lines.index(f"error: flights_tool.py:{BEFORE_LINE}: before() returned data that is not JSON:")
    assert lines[start + 1 : start + 4] == [
        "  handoff['flights'][0]['when']: datetime is not JSON data (use .isoformat())",
        "  handoff['flights'][1]['when']: date is not JSON data (use .isoformat())",
        f"  hint: {HINT.format('before')}",
    ]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_mcp_client_gets_the_file_line_and_every_value(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "src"
    folder.mkdir()
    source = folder / "flights_tool.py"
    source.write_text(TOOL)
    server = create_server(load_served_tools(folder), state_key=KEY)
    async with Client(server, mode=mode, **Scripted({}, []).callbacks()) as session:
        result = await session.call_tool("flights", {})
        assert result.is_error, result
        text = result.content[0].text
        again = await session.call_tool("flights", {})  # the server goes on serving
    assert again.is_error
    assert text.splitlines() == [
        f"{place_of(str(source.resolve()), BEFORE_LINE)}: before() returned data that is not JSON:",
        "  handoff['flights'][0]['when']: datetime is not JSON data (use .isoformat())",
        "  handoff['flights'][1]['when']: date is not JSON data (use .isoformat())",
        f"  hint: {HINT.format('before')}",
    ]


CLIENT_RESULT = TOOL.replace(
    '    return {"flights": [{"to": "LIS", "when": when}, {"to": "OPO", "when": when.date()}]}',
    '    return {"when": when.isoformat()}',
).replace("    return handoff\n", "    return {'when': handoff['when'], 'seats': {1, 2}}\n")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_mcp_client_gets_the_client_phase_line(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "src"
    folder.mkdir()
    source = folder / "flights_tool.py"
    source.write_text(CLIENT_RESULT)
    server = create_server(load_served_tools(folder), state_key=KEY)
    async with Client(server, mode=mode, **Scripted({}, []).callbacks()) as session:
        result = await session.call_tool("flights", {})
    assert result.is_error, result
    line = CLIENT_RESULT.splitlines().index("    return {'when': handoff['when'], 'seats': {1, 2}}") + 1  # its return
    assert result.content[0].text.splitlines() == [
        f"{place_of(str(source.resolve()), line)}: client() returned data that is not JSON:",
        "  client_result['seats']: set is not JSON data (use a sorted list)",
        f"  hint: {HINT.format('client')}",
    ]
