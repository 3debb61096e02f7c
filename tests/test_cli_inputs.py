"""Bad input to the CLI is one clear error naming the place, in bounded time and memory: `--responses`
YAML (alias bombs, deep nesting, size, encoding), `--params` JSON (huge ints, deep nesting), trace
files, and standard input that ends during `run --interactive`. Real subprocesses, real files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from test_cli import RESPONSES, TOOL_SOURCE, branchc

from branchc.continuation.codec.common import DEFAULT_LIMITS
from branchc.runtime import inputs
from branchc.runtime.inputs import INPUT_LIMITS, InputError, parse_json, parse_yaml

# The classic "billion laughs": about 1 KB that expands to 10**9 strings when aliases are followed.
BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
    + ["sample: *i", ""]
)


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, Path]:
    tool_file = tmp_path / "demo_tool.py"
    tool_file.write_text(TOOL_SOURCE)
    responses = tmp_path / "demo.yaml"
    responses.write_text(RESPONSES)
    return tool_file, responses


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))


def refused(done, *expected: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


# -- --responses -----------------------------------------------------------------------------------


def test_an_alias_bomb_is_refused_at_its_first_anchor_in_bounded_time(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 1100
    started = time.monotonic()
    done = branchc("run", str(tool_file), "--responses", str(bomb))  # the helper's timeout: a hang fails
    refused(done, f"{bomb}:1:4: refused: an anchor (&a): anchors are not allowed here")
    assert time.monotonic() - started < 30


def test_an_alias_is_refused_with_its_line_and_column(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    script = tmp_path / "alias.yaml"
    script.write_text("sample:\n  - fine\n  - *other\n")
    refused(branchc("run", str(tool_file), "-r", str(script)), f"{script}:3:5: refused: an alias (*other)")


def test_deeply_nested_yaml_is_refused_at_the_limit(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    deep = tmp_path / "deep.yaml"
    deep.write_text("sample: " + "[" * 100_000)
    done = branchc("run", str(tool_file), "-r", str(deep))
    refused(done, f"{deep}:1:")
    # ours past 200 levels; libyaml, when it is there, scans ahead and stops at its own 1,000 first
    assert (
        f"{deep}:1:209: refused: nested more than {INPUT_LIMITS.max_depth} deep" in done.stderr
        or f"{deep}:1:1008: not valid YAML: exceeded maximum nesting depth" in done.stderr
    ), done.stderr


def test_a_huge_yaml_integer_is_refused_with_its_place(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    script = tmp_path / "int.yaml"
    script.write_text("sample: [ok]\nelicit:\n  - action: accept\n    content: {number: " + "7" * 5001 + "}\n")
    refused(
        branchc("run", str(tool_file), "-r", str(script)),
        f"{script}:4:23: refused: an integer of 5,001 characters, over the limit of 4,300 digits",
    )


def test_a_responses_file_that_is_not_utf8_names_the_byte(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    script = tmp_path / "latin1.yaml"
    script.write_bytes("sample: [café]\n".encode("latin-1"))
    refused(branchc("run", str(tool_file), "-r", str(script)), f"{script}: not UTF-8 text: byte 0xe9 at byte offset 12")


def test_an_endless_responses_file_is_read_no_further_than_the_limit(demo) -> None:
    tool_file, _ = demo
    refused(
        branchc("run", str(tool_file), "-r", "/dev/zero"),
        f"/dev/zero: larger than {INPUT_LIMITS.max_bytes:,} bytes, the limit for input files",
    )


def test_a_good_responses_file_still_runs(demo) -> None:
    tool_file, responses = demo
    done = branchc("run", str(tool_file), "-q", "-r", str(responses))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pick"] == 2


# -- --params --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            '{"count": ' + "1" * 5001 + "}",
            "--params: ['count'] is an integer of 5,001 digits, over the limit of 4,300 digits for JSON input",
        ),
        (
            '{"fail_in": [1, {"x": -' + "9" * 5001 + "}]}",
            "--params: ['fail_in'][1]['x'] is an integer of 5,001 digits, over the limit of 4,300 digits",
        ),
        (
            "[" * 30_000 + "]" * 30_000,
            f"--params: nested more than {INPUT_LIMITS.max_depth} deep at line 1 column 201, the limit for JSON input",
        ),
    ],
)
def test_params_past_a_limit_are_one_clear_error(demo, params: str, message: str) -> None:
    tool_file, responses = demo
    refused(branchc("run", str(tool_file), "-r", str(responses), "--params", params), message)


ANY_SOURCE = """
from typing import Any
from pydantic import BaseModel
from branchc import Context, tool

class Params(BaseModel):
    data: Any = None

keeps = tool("keeps", params=Params)

@keeps.client
def client(handoff, ctx: Context):
    yield ctx.log("info", "holding it")
    return {"data": handoff["data"]}
"""


def test_params_nested_to_the_limit_go_everywhere_a_run_takes_them(tmp_path: Path, demo) -> None:
    """The depth limit is below every bound further on (pydantic serializes 255 levels, snapshots 500)."""
    _, responses = demo
    tool_file = tmp_path / "keeps_tool.py"
    tool_file.write_text(ANY_SOURCE)
    depth = INPUT_LIMITS.max_depth - 1  # the params object is one level
    nested = "[" * depth + "]" * depth
    done = branchc("run", str(tool_file), "-q", "-r", str(responses), "--params", f'{{"data": {nested}}}')
    assert done.returncode == 0, done.stderr
    assert json.dumps(json.loads(done.stdout)["data"], separators=(",", ":")) == nested
    deeper = "[" + nested + "]"
    done = branchc("run", str(tool_file), "-q", "-r", str(responses), "--params", f'{{"data": {deeper}}}')
    refused(done, f"--params: nested more than {INPUT_LIMITS.max_depth} deep")
    assert INPUT_LIMITS.max_depth < DEFAULT_LIMITS.max_depth


# -- graph --trace ---------------------------------------------------------------------------------


def test_a_deeply_nested_trace_file_is_a_trace_error(demo, tmp_path: Path) -> None:
    tool_file, _ = demo
    trace = tmp_path / "deep.json"
    trace.write_text('{"format": "branchc-trace/1", "events": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(
        branchc("graph", str(tool_file), "--trace", str(trace)),
        f"{trace}: nested more than {INPUT_LIMITS.max_depth} deep at line 1 column 240",
    )


# -- run --interactive when standard input ends ---------------------------------------------------

CLEANUP_SOURCE = """
import pathlib
from pydantic import BaseModel
from branchc import Context, tool

class Params(BaseModel):
    marker: str

class Pick(BaseModel):
    number: int

closing = tool("closing", params=Params, requires={"sampling", "elicitation"})

@closing.client
def client(handoff, ctx: Context):
    try:
        yield ctx.sample(prompt="first")
        pick = yield ctx.elicit("pick", message="Pick a number", schema=Pick)
        return {"pick": pick.content.number}
    finally:
        pathlib.Path(handoff["marker"]).write_text("finally ran")
        yield ctx.log("info", "cleaned up")
"""


@pytest.mark.parametrize(
    ("stdin", "asked"),
    [("", "sample #1"), ("an answer\n", "elicit 'pick'"), ("an answer\naccept\n", "elicit 'pick'")],
)
def test_input_that_ends_cancels_the_run_and_its_finally_blocks_run(tmp_path: Path, stdin: str, asked: str) -> None:
    tool_file = tmp_path / "closing_tool.py"
    tool_file.write_text(CLEANUP_SOURCE)
    marker = tmp_path / "marker"
    done = branchc("run", str(tool_file), "-i", "--params", json.dumps({"marker": str(marker)}), stdin=stdin)
    refused(done, f"error: input ended while answering {asked}; the run was cancelled")
    assert "anyio" not in done.stderr and "failed" not in done.stderr
    assert marker.read_text() == "finally ran"
    assert "cleaned up" in done.stderr  # what the finally block logs is still shown
    assert done.stdout == ""


# -- the readers themselves ------------------------------------------------------------------------


def test_the_yaml_reader_without_libyaml_refuses_the_same(monkeypatch) -> None:
    monkeypatch.setattr(inputs, "_BaseLoader", yaml.SafeLoader)
    monkeypatch.setattr(inputs, "_LOADERS", {})
    assert parse_yaml("sample: [a, {b: 1}]\nelicit: []\n", "r.yaml") == {"sample": ["a", {"b": 1}], "elicit": []}
    for text, message in [
        (BOMB, "r.yaml:1:4: refused: an anchor (&a)"),
        ("x: *a\n", "r.yaml:1:4: refused: an alias (*a)"),
        ("[" * 100_000, "r.yaml:1:201: refused: nested more than 200 deep"),
        ("a: 1\n---\nb: 2\n", "r.yaml:2:1: not valid YAML: a second document"),
        ("x: 2001-02-30\n", "r.yaml:1:4: not valid YAML: day is out of range for month"),
    ]:
        with pytest.raises(InputError) as caught:
            parse_yaml(text, "r.yaml")
        assert str(caught.value).startswith(message), caught.value


def test_json_depth_is_checked_outside_strings_and_in_linear_time() -> None:
    assert parse_json(json.dumps({"text": "[" * 10_000}), "x") == {"text": "[" * 10_000}
    nested = "[" * INPUT_LIMITS.max_depth + "]" * INPUT_LIMITS.max_depth
    assert parse_json(nested, "x") is not None  # exactly at the limit: fine
    started = time.monotonic()
    with pytest.raises(InputError, match="not valid JSON"):
        parse_json('"' + '\\"[' * 1_000_000, "x")  # never closed: scanned once, not once per quote
    assert time.monotonic() - started < 5
