"""`branchc run` end to end, as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TOOL_SOURCE = """
from pydantic import BaseModel, Field
from branchc import Context, resumable, tool

class Params(BaseModel):
    count: int = Field(3, ge=1, le=5)
    fail_in: str = ""

class Pick(BaseModel):
    number: int = Field(ge=1, le=5)
    note: str = "none"

demo = tool("demo", description="a demo", params=Params, requires={"sampling", "elicitation"})

@demo.before
def before(params):
    if params.fail_in == "before":
        raise KeyError("no such card")
    return {"cards": [f"card{i}" for i in range(params.count)], "fail_in": params.fail_in}

@resumable
def analyze(ctx: Context, cards):
    answer = yield ctx.sample(prompt=f"Analyze {cards}")
    return answer.text

@demo.client
def client(handoff, ctx: Context):
    yield ctx.log("info", "starting")
    yield ctx.notify("halfway", progress=1, total=2)
    analysis = yield ctx.branch(analyze, handoff["cards"], inherit_messages=False)
    pick = yield ctx.elicit("pick", message="Pick a number", schema=Pick)
    if handoff["fail_in"] == "client":
        raise ValueError("client broke")
    if not pick.accepted:
        return {"analysis": analysis, "pick": None}
    return {"analysis": analysis, "pick": pick.content.number, "note": pick.content.note}
"""

RESPONSES = """
sample:
  - "Looks good"
elicit:
  - action: accept
    content: {number: 2}
"""


def branchc(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, Path]:
    tool_file = tmp_path / "demo_tool.py"
    tool_file.write_text(TOOL_SOURCE)
    responses = tmp_path / "demo.yaml"
    responses.write_text(RESPONSES)
    return tool_file, responses


def test_help_lists_run() -> None:
    done = branchc("--help")
    assert done.returncode == 0
    assert re.search(r"\brun\b", done.stdout)


def test_run_with_scripted_answers_prints_timeline_and_result(demo) -> None:
    tool_file, responses = demo
    done = branchc("run", str(tool_file), "demo", "--params", '{"count": 2}', "--responses", str(responses))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"analysis": "Looks good", "pick": 2, "note": "none"}
    timeline = done.stderr
    for expected in (
        "▶ demo",
        "log info  starting",
        "progress 1/2  halfway",
        "branch analyze [0.1] (fresh context)",
        "[0.1] sample #1 Analyze ['card0', 'card1']",
        "→ Looks good",
        "elicit #1 pick Pick a number",
        '→ accept {"number": 2}',
        "after → result",
    ):
        assert expected in timeline, f"{expected!r} not in:\n{timeline}"
    # the branch is drawn one level deeper than the client phase
    assert re.search(r"^│ │ ├─ \[0\.1\] sample #1", timeline, re.M)
    assert re.search(r"^│ ├─┬ branch analyze \[0\.1\]", timeline, re.M)


def test_quiet_prints_only_the_result(demo) -> None:
    tool_file, responses = demo
    done = branchc("run", str(tool_file), "--quiet", "--responses", str(responses))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)["pick"] == 2


def test_interactive_asks_again_until_the_answer_is_valid(demo) -> None:
    tool_file, _ = demo
    answers = "\n".join(["My analysis", "", "seven", "9", "4", "", ""]) + "\n"
    done = branchc("run", str(tool_file), "--interactive", stdin=answers)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"analysis": "My analysis", "pick": 4, "note": "none"}
    assert "'seven' is not a whole number; try again" in done.stderr
    assert "9 is greater than the maximum of 5; try again" in done.stderr


def test_interactive_decline(demo) -> None:
    tool_file, _ = demo
    done = branchc("run", str(tool_file), "-i", stdin="text\nmaybe\ndecline\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"analysis": "text", "pick": None}
    assert "type accept, decline or cancel" in done.stderr


def test_interactive_stdin_closed_is_a_clear_error(demo) -> None:
    tool_file, _ = demo
    done = branchc("run", str(tool_file), "-i", stdin="")
    assert done.returncode == 1
    assert "input ended while answering sample #1; the run was cancelled" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "{count: 2}"], "--params: not valid JSON at line 1 column 2"),
        (["--params", '{"count": 9, "fail_in": 3}'], "count: Input should be less than or equal to 5 (got 9)"),
        (["--params", '{"count": 9, "fail_in": 3}'], "fail_in: Input should be a valid string (got 3)"),
        (["--params", '{"fail_in": "before"}'], "demo: before() failed: KeyError: 'no such card'"),
        (["--params", '{"fail_in": "client"}'], "demo: client() failed: ValueError: client broke"),
        (["--max-depth", "0"], "a branch at depth 1 exceeds max_depth 0"),
    ],
)
def test_errors_are_one_clear_message(demo, args: list[str], message: str) -> None:
    tool_file, responses = demo
    done = branchc("run", str(tool_file), "--responses", str(responses), *args)
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_phase_errors_point_at_the_user_line(demo) -> None:
    tool_file, responses = demo
    done = branchc("run", str(tool_file), "-r", str(responses), "--params", '{"fail_in": "before"}')
    line = TOOL_SOURCE.splitlines().index('        raise KeyError("no such card")') + 1
    assert f"at {tool_file}:{line}" in done.stderr


def test_bad_tool_name_and_file(demo, tmp_path: Path) -> None:
    tool_file, responses = demo
    done = branchc("run", str(tool_file), "nope", "-r", str(responses))
    assert done.returncode == 1
    assert "has no tool 'nope'; it defines demo" in done.stderr
    done = branchc("run", str(tmp_path / "missing.py"), "-r", str(responses))
    assert "missing.py: no such file" in done.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\ndef f(:\n")
    done = branchc("run", str(broken), "-r", str(responses))
    assert f"{broken}:2:7: error: syntax error" in done.stderr  # compiled by default: the compiler's diagnostic
    done = branchc("run", str(broken), "-r", str(responses), "--in-memory")
    assert f"{broken}:2:7: syntax error" in done.stderr


def test_needs_exactly_one_answer_source(demo) -> None:
    tool_file, responses = demo
    for args in ([], ["-i", "-r", str(responses)]):
        done = branchc("run", str(tool_file), *args)
        assert done.returncode == 1
        assert "give exactly one of --responses FILE" in done.stderr


def test_bad_responses_file_names_the_field(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    bad = tmp_path / "bad.yaml"
    bad.write_text("sample: [ok]\nelicit:\n  - action: accept\n  - action: maybe\n")
    done = branchc("run", str(tool_file), "-r", str(bad))
    assert done.returncode == 1
    assert "elicit.1.action: Input should be 'accept', 'decline' or 'cancel'" in done.stderr
    bad.write_text("sample: [ok\n")
    done = branchc("run", str(tool_file), "-r", str(bad))
    assert f"{bad}:2:1: not valid YAML" in done.stderr


def test_script_that_runs_out_names_the_call(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    short = tmp_path / "short.yaml"
    short.write_text("sample: [fine]\n")
    done = branchc("run", str(tool_file), "-r", str(short))
    assert done.returncode == 1
    assert "elicit 'pick' call #1 ('Pick a number') found the script empty" in done.stderr


def test_readme_quick_start_runs() -> None:
    """The README's first command, as written (after its install step), must work."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    run_line = blocks[0].strip().split("&&", 1)[1].strip()
    assert run_line.startswith("branchc run ")
    done = subprocess.run(
        f"{sys.executable} -m {run_line}", shell=True, capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["success"] is True
    assert textwrap.dedent(blocks[1]).strip().endswith("python -m pytest -q")
