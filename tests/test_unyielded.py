"""An effect made but never yielded (`answer = ctx.sample(...)` without `yield`) is a compile-time
warning at the effect's line:col, from `branchc check`, `branchc compile` and serve's build; the
legitimate ways to make an effect first and yield it later are not reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from branchc.splitter import compile_module
from branchc.splitter.build import build, build_folder

BAD = """\
from branchc import Context, resumable, tool

forgot = tool("forgot")


@resumable
def analyze(ctx: Context, cards: list[str]):
    answer = ctx.sample(prompt=f"Analyze {cards}")
    text = answer.text
    yield ctx.log("info", text)
    return text


@forgot.client
def play(handoff: dict, ctx: Context):
    ctx.log("info", "starting")
    lost = ctx.notify("half way", progress=1, total=2)
    choice = ctx.elicit("pick", message="Pick", schema=None)
    result = yield ctx.branch(analyze, handoff["cards"])
    return {"picked": choice["card"], "result": result}


class Helper:
    @resumable
    def step(self, context):
        context.all([context.branch(analyze, [])])
        yield context.sample(prompt="x")
"""

EXPECTED = [
    (8, 14, "'answer' holds the effect ctx.sample(...), not its result: the effect is never yielded, "
     "and `answer.text` at line 9 reads the effect", "write `answer = yield ctx.sample(...)`"),
    (16, 5, "ctx.log(...) makes an effect but does not yield it, so it never runs", "write `yield ctx.log(...)`"),
    (17, 12, "the effect ctx.notify(...) is assigned to 'lost' but never yielded, so it never runs",
     "write `lost = yield ctx.notify(...)`"),
    (18, 14, "'choice' holds the effect ctx.elicit(...), not its result: the effect is never yielded, "
     "and `choice[...]` at line 20 reads the effect", "write `choice = yield ctx.elicit(...)`"),
    (26, 9, "context.all(...) makes an effect but does not yield it, so it never runs",
     "write `yield context.all(...)`"),
]  # fmt: skip

GOOD = """\
from branchc import Context, resumable, tool

fine = tool("fine")


@resumable
def analyze(ctx: Context, card: str):
    effect = ctx.sample(prompt=card)  # built, then yielded
    answer = yield effect
    return answer.text


@resumable
def make(ctx, card):
    made = ctx.sample(prompt=card)  # returned: the caller yields it
    yield ctx.log("debug", card)
    return made


@resumable
def counter(n):  # no context: n.log is not an effect
    n.log("x")
    yield 1


@fine.client
def play(handoff: dict, ctx: Context):
    branches = []
    for card in handoff["cards"]:
        branches.append(ctx.branch(analyze, card))  # gathered for ctx.all
    pair = [ctx.sample(prompt="a"), ctx.sample(prompt="b")]
    first = ctx.elicit("pick", message="Pick", schema=None)
    first.key  # read, and yielded below: passed on
    results = yield ctx.all(branches)
    both = yield ctx.all(pair)
    picked = yield first
    later = yield from make(ctx, "c")
    again = yield later

    def helper():  # not compiled: not checked
        ctx.log("info", "x")

    return {"results": results, "both": both, "picked": picked, "again": again}
"""


def branchc(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def expected_text(path: str) -> list[str]:
    lines = []
    for line, column, message, hint in EXPECTED:
        lines += [f"{path}:{line}:{column}: warning: {message}", f"  hint: {hint}"]
    return lines


def test_check_warns_at_each_unyielded_effect(tmp_path):
    (tmp_path / "bad_tool.py").write_text(BAD)
    done = branchc("check", "bad_tool.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [*expected_text("bad_tool.py"), f"no errors, {len(EXPECTED)} warning(s)"]


def test_the_legitimate_ways_to_yield_later_are_not_reported(tmp_path):
    (tmp_path / "good_tool.py").write_text(GOOD)
    done = branchc("check", "good_tool.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "no errors"


def test_the_warning_is_a_diagnostic_of_the_compiled_module():
    module = compile_module(BAD, "bad.py")
    found = [(d.line, d.column, d.message, d.hint) for d in module.diagnostics if d.severity == "warning"]
    assert found == EXPECTED
    assert module.functions  # a warning, not an error: the module still compiles


def test_compile_reports_it_and_repeats_it_for_an_unchanged_file(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad_tool.py").write_text(BAD)
    for _ in range(2):  # the second build keeps the module, and its warnings, from the manifest
        done = branchc("compile", "src", "-o", "build", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[:-1] == expected_text(str(Path("src") / "bad_tool.py"))
    assert "0 module(s), 1 unchanged" in done.stderr


def test_serves_build_reports_it(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "bad_tool.py"
    source.write_text(BAD)
    for _ in range(2):  # compiled, then from the cache
        seen = []
        build_folder(source, warn=seen.append)
        assert [(d.path, d.line, d.column, d.message, d.hint) for d in seen] == [
            (str(source), *expected) for expected in EXPECTED
        ]
    result = build([source], tmp_path / "out")
    assert [d.line for d in result.diagnostics] == [e[0] for e in EXPECTED]


def test_serve_prints_it_on_stderr(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad_tool.py").write_text(
        BAD.replace("schema=None", "schema=Pick")
        .replace("from branchc import", "from pydantic import BaseModel\n\nfrom branchc import")
        .replace('forgot = tool("forgot")', 'class Pick(BaseModel):\n    card: int\n\n\nforgot = tool("forgot")')
    )
    done = branchc("serve", "src", cwd=tmp_path, env={"BRANCHC_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "bad_tool.py:" in done.stderr
    assert done.stderr.count("never yielded") == 3
    assert "warning: ctx.log(...) makes an effect but does not yield it, so it never runs" in done.stderr
