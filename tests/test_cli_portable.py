"""`branchc run` goes the portable way (the tool compiled, the run saved as JSON and continued from it
at every suspension), and `branchc check` reports what `branchc serve` would refuse at load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from branchc import tool
from branchc.bridge.loading import ServeLoadError, load_served_tools
from branchc.runtime.driver import run_tool
from branchc.runtime.errors import ToolDefinitionError
from branchc.testing import MockClient

ROOT = Path(__file__).resolve().parent.parent
CLEANUP_TOOLS = ROOT / "tests" / "servers" / "cleanup_tools.py"
PICK_CARD = ROOT / "examples" / "tools" / "pick_card.py"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "BRANCHC_CACHE": str(tmp_path / "cache")}


def branchc(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# -- run --------------------------------------------------------------------------------------------


def test_a_value_that_cannot_travel_fails_under_run_as_in_the_2026_era(env, tmp_path):
    marker = tmp_path / "cleanup.txt"
    answers = tmp_path / "answers.yaml"
    answers.write_text('sample: ["reply 0"]\n')
    args = ["run", str(CLEANUP_TOOLS), "cleanup_unsaveable", "-r", str(answers)]
    params = ["-p", json.dumps({"rounds": 1, "marker": str(marker), "log": True})]
    done = branchc(env, *args, *params)
    assert done.returncode == 1, done.stderr
    waits = line_of(CLEANUP_TOOLS, 'reply = yield ctx.sample(prompt="question 0")')
    assert f"error: NotSerializableError: unsaveable (waiting at {CLEANUP_TOOLS}:{waits}): variable 'lock'" in (
        done.stderr
    )
    assert "--in-memory runs it without saving" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert marker.read_text() == "client\n"  # halted where it could not be saved: its finally ran, once
    assert "log info  client cleaned up" in done.stderr

    marker.unlink()
    kept = branchc(env, *args, *params, "--in-memory", "-q")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == {"answers": ["reply 0"]}
    assert marker.read_text() == "client\n"


def test_compiled_and_in_memory_runs_print_the_same_timeline_result_and_trace(env, tmp_path):
    runs = {}
    for mode in ("portable", "in-memory"):
        trace = tmp_path / f"{mode}.json"
        extra = ["--in-memory"] if mode == "in-memory" else []
        done = branchc(
            env, "run", str(PICK_CARD), "pick_card", "-p", '{"count": 5, "analyze": true, "seed": 7}',
            "-r", str(ROOT / "examples/responses/pick_card.yaml"), "--trace", str(trace), *extra,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs[mode] = (done.stdout, done.stderr, json.loads(trace.read_text()))
    (out_a, err_a, trace_a), (out_b, err_b, trace_b) = runs["portable"], runs["in-memory"]
    assert out_a == out_b and json.loads(out_a)["success"] is True
    assert err_a.replace(str(tmp_path / "portable.json"), "T") == err_b.replace(str(tmp_path / "in-memory.json"), "T")

    def steps(trace: dict) -> list[tuple]:
        keys = ("event", "branch", "function", "line", "column")
        return [tuple(e.get(key) for key in keys) for e in trace["events"]]

    assert steps(trace_a) == steps(trace_b)
    assert trace_a["source"] == trace_b["source"] == str(PICK_CARD)
    source = PICK_CARD.read_text().splitlines()
    suspensions = [e for e in trace_a["events"] if e["event"] == "suspend"]
    assert len(suspensions) == 4
    for event in suspensions:  # the user's source lines, not the compiled module in the cache
        assert "yield" in source[event["line"] - 1], event


def test_the_finally_of_a_long_portable_run_runs_once(env, tmp_path):
    marker = tmp_path / "cleanup.txt"
    answers = tmp_path / "answers.yaml"
    rounds = 6
    samples = [f"reply {n}" for n in range(0, rounds, 2)]
    elicits = [{"action": "accept", "content": {"value": n}} for n in range(1, rounds, 2)]
    answers.write_text(json.dumps({"sample": samples, "elicit": elicits}))
    done = branchc(
        env, "run", str(CLEANUP_TOOLS), "cleanup_nested", "-r", str(answers),
        "-p", json.dumps({"rounds": rounds, "marker": str(marker), "log": True}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "helper\nworker\nclient\n"
    assert done.stderr.count("cleaned up") == 2


def test_a_portable_run_of_an_uncompiled_tool_is_refused():
    native = tool("native")

    @native.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")

    with pytest.raises(ToolDefinitionError, match="a portable run needs the tool compiled"):
        anyio.run(lambda: run_tool(native, {}, MockClient([], []), portable=True))


# -- check ------------------------------------------------------------------------------------------

FORMS = """\
from pydantic import BaseModel
from branchc import Context, tool


class Address(BaseModel):
    street: str


class Form(BaseModel):
    name: str
    address: Address


ask = tool("ask", requires={"elicitation"})


@ask.client
def client(handoff: dict, ctx: Context):
    answer = yield ctx.elicit("form", message="Where?", schema=Form)
    return answer.action
"""

SECOND = """\
from branchc import Context, tool

branchc_resume = tool("branchc_resume")
ask = tool("ask")


@branchc_resume.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", "x")


@ask.client
def client2(handoff: dict, ctx: Context):
    yield ctx.log("info", "x")
"""

BOOM = """\
from branchc import Context, tool

boom = tool("boom")


@boom.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", "x")


raise RuntimeError("no config here")
"""


@pytest.fixture
def refused(tmp_path: Path) -> Path:
    folder = tmp_path / "refused"
    folder.mkdir()
    (folder / "a_forms.py").write_text(FORMS)
    (folder / "b_second.py").write_text(SECOND)
    (folder / "c_boom.py").write_text(BOOM)
    return folder


def test_check_reports_what_serve_refuses_at_load(env, refused):
    done = branchc(env, "check", str(refused))
    assert done.returncode == 1
    forms, second, boom = (refused / name for name in ("a_forms.py", "b_second.py", "c_boom.py"))
    expected = [
        f"{forms}:19:20: error: this elicitation cannot be an MCP form: Form.address: a field of JSON type 'object'",
        "hint: make Form (line 9) flat",
        f"{second}:4:7: error: a second tool named 'ask' (the first is in {forms})",
        "hint: tool names are unique on a server; rename one",
        f"{boom}:11:1: error: importing it failed: RuntimeError: no config here",
        f"{second}:3:18: warning: a tool is named 'branchc_resume', the tool guided mode adds",
        "3 error(s)",
    ]
    for text in expected:
        assert text in done.stderr, f"{text!r} not in:\n{done.stderr}"
    assert "Traceback" not in done.stderr


def test_serve_refuses_what_check_reports(env, refused, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", env["BRANCHC_CACHE"])
    (refused / "c_boom.py").unlink()
    (refused / "b_second.py").unlink()
    with pytest.raises(ServeLoadError, match=r"a_forms\.py:19: this elicitation cannot be an MCP form"):
        load_served_tools(refused)
    (refused / "a_forms.py").write_text(FORMS.replace("address: Address", "address: str"))
    (refused / "b_second.py").write_text(SECOND.replace('tool("ask")', 'tool("other")'))
    assert sorted(load_served_tools(refused)) == ["ask", "branchc_resume", "other"]
    with pytest.raises(ServeLoadError, match=r"b_second\.py:3: a tool is named 'branchc_resume'"):
        load_served_tools(refused, guided=True)
    done = branchc(env, "check", str(refused))
    assert done.returncode == 0, done.stderr
    assert "no errors, 1 warning(s)" in done.stderr


def test_check_of_good_tools_still_passes(env):
    done = branchc(env, "check", str(ROOT / "examples" / "tools"))
    assert done.returncode == 0, done.stderr
    assert "error:" not in done.stderr and "no errors" in done.stderr


HELPED = """\
import colorsys

from branchc import Context, tool
from {helper} import HUE

{name} = tool("{name}")


@{name}.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", str(colorsys.hsv_to_rgb(HUE, 1, 1)))
"""


def test_check_forgets_the_sources_own_modules_but_not_what_they_imported_from_elsewhere(tmp_path, monkeypatch):
    from branchc.cli import _load_diagnostics

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)  # a standard module nothing imported yet
    sources = []
    for name in ("first", "second"):  # both have modules of the same names: each source loads its own
        folder = tmp_path / name
        folder.mkdir()
        (folder / "checked_tool.py").write_text(HELPED.format(helper="checked_helper", name=name))
        (folder / "checked_helper.py").write_text("HUE = 0.5\n")
        sources.append(folder)
    path = list(sys.path)
    assert _load_diagnostics(sources) == []  # the second source's modules are its own, not the first's
    assert "colorsys" in sys.modules  # imported from elsewhere: it stays, as in a server
    assert "checked_tool" not in sys.modules and "checked_helper" not in sys.modules
    assert sys.path == path
