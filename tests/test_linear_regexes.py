"""Every regex that client input reaches runs in linear time (issue 21, "Bounded work per client").

Each test feeds the worst shape for its pattern, 100 KB of it (1 MB where the old code was quadratic, so that
the old code would need minutes), in a fresh interpreter with a generous deadline (DEADLINE seconds, for work
that takes milliseconds here; the old fence regex needed hours for its 100 KB). The deadline is the assertion
that the work is linear; no test asserts on the timing of ordinary work. The regexes that client input does
not reach (docstrings, workflow and tool source files, build folders, operator settings) are listed in the
report of the audit, not here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from branchc.bridge.handlers import monty
from branchc.workflows import load_workflow_tool
from branchc.workflows.runtime import unfence

DEADLINE = 10.0  # seconds, for each check below (a fresh interpreter that imports branchc, then the check)


def within_deadline(code: str) -> str:
    """Run `code` in a fresh interpreter; its stdout, or a failure if it does not end within DEADLINE."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=DEADLINE
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"not done within {DEADLINE} s: the work is not linear in the input")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# -- the workflow answer fence: workflow_submit answers and sampling replies (runtime.Templates.parse) ------

OLD_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


@pytest.mark.parametrize(
    "answer",
    [
        "'```' + '\\n' * 100_000",  # the answer, grown: cubic in the old regex (4,000 characters: 84 s)
        "'```json' + '\\n' * 50_000 + 'x' + ' ' * 50_000 + '```'",  # many newlines, then no newline before the end
        "'```\\n' + '\\n```' * 25_000",  # a fence of fences
        "' ' * 100_000 + '```'",
    ],
)
def test_a_fenced_answer_is_read_in_linear_time(answer):
    """The answer of a step with a schema, as `workflow_submit` and a sampling reply hand it over."""
    said = within_deadline(
        f"""
        from branchc.workflows.runtime import Templates, WorkflowRunError
        W = Templates("flow.yaml", {{"ask": 3}}, {{}}, {{"ask": {{"schema": {{"type": "object"}}}}}})
        answer = {answer}
        assert len(answer) >= 100_000
        try:
            W.answer("ask", answer)
        except WorkflowRunError as error:
            print("refused:", str(error)[:100])
        """
    )
    assert said.startswith("refused: flow.yaml:3: step 'ask': the answer does not read as the object")


def test_a_sampled_reply_with_an_open_fence_is_refused_in_linear_time(tmp_path):
    """The issue's second case end to end: a workflow step answered by sampling, the reply "```" and 100,000
    newlines (the old regex: hours; 2,500 newlines stalled the server 14 s)."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "workflow:\n  name: fenced\n  steps:\n    - id: ask\n      instruction: A list?\n"
        "      save: items\n      schema: {type: array}\n      complete: true\n"
    )
    load_workflow_tool(flow, warn=None)  # compiled here, into the cache: the deadline is for the answer alone
    said = within_deadline(
        f"""
        import anyio
        from branchc import ToolPhaseError, run_tool
        from branchc.testing import MockClient
        from branchc.workflows import load_workflow_tool

        tool = load_workflow_tool({str(flow)!r}, warn=None)
        client = MockClient(sample_responses=["```" + "\\n" * 100_000])
        try:
            anyio.run(lambda: run_tool(tool, {{}}, client, portable=True))
        except ToolPhaseError as error:
            print("refused:", "does not read as the array" in str(error))
        """
    )
    assert said == "refused: True"


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(["`", "```", "\n", " ", "\t", "\r", "a", "-", "{}", "\u00a0", "json"]), max_size=12))
def test_the_fence_reads_as_the_old_regex_did(parts):
    """Differential: the scanner against the regex it replaces, on short texts (where the regex is quick), with
    and without a fence around them."""
    text = "".join(parts)
    for candidate in (text, f"```{text}\n```", f"```json\n{text}\n```\n", f" ```\n{text}```"):
        old = OLD_FENCE.match(candidate)
        assert unfence(candidate) == (old.group(1) if old else None), repr(candidate)


def test_the_fence_keeps_its_meaning_on_ordinary_answers():
    assert unfence('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert unfence("  ```\n\n  [1, 2]\n```  \n") == "  [1, 2]"
    assert unfence('{"a": 1}') is None and unfence("```json {}```") is None


# -- JSON input: the depth scan's tokens (runtime.inputs._JSON_TOKENS), for every bounded JSON input -------


@pytest.mark.parametrize(
    "text",
    [
        "'\"' + chr(92) * 2 * 50_000 + '[' * 201",  # an unclosed string of escapes
        "'\"a' * 50_000 + '[' * 201",  # many strings that end at once, then too deep
        "'\"' + 'a' * 100_000 + '[' * 201",  # one unclosed string: `(?:[^\"\\\\]+|...)*\"` would backtrack here
    ],
)
def test_json_input_depth_scan_is_linear(text):
    said = within_deadline(
        f"""
        from branchc.runtime.inputs import INPUT_LIMITS, InputError, _check_json_depth
        text = {text}
        assert len(text) >= 100_000
        try:
            _check_json_depth(text, "the answer", INPUT_LIMITS)
        except InputError:
            pass  # too deep: found after the scan
        print("scanned")
        """
    )
    assert said == "scanned"


@pytest.mark.parametrize(
    "text",
    [
        "'[' * 50_000 + '\"' + chr(92) * 2 * 25_000",  # deep enough for json's RecursionError, then escapes unclosed
        "'[' * 50_000 + '\"a' * 25_000",  # then many strings that end at once
    ],
)
def test_snapshot_depth_scan_is_linear(text):
    """A snapshot's text (a stored run, a step sent to a worker) is untrusted: past json's recursion it is
    scanned with the same token regex (continuation/snapshots.py), and a variable's name read with `_bc_...`."""
    said = within_deadline(
        f"""
        from branchc.continuation.errors import SnapshotDataError
        from branchc.continuation.snapshots import _describe, parse_json
        text = {text}
        assert len(text) >= 100_000
        try:
            parse_json(text)
        except SnapshotDataError as error:
            print("deep" if "nested 50,000 deep" in str(error) else error)
        name = "_bc_it" + "1" * 100_000 + "x"
        assert _describe(name) == f"variable {{name!r}}"
        """
    )
    assert said == "deep"


# -- HTTP: the JSON-RPC envelope read as a request's body arrives (bridge/connection.py) ---------------------


@pytest.mark.parametrize(
    "body",
    [
        'b\'{"id": "\' + bytes([92]) * 100_000',  # an id of escapes, never closed
        "b'{' + b'\"k\":1,' * 20_000",  # many top-level keys, no id
        "b'{\"id\": ' + b'1' * 100_000",  # a number that never ends
    ],
)
def test_the_request_envelope_is_read_in_linear_time(body):
    said = within_deadline(
        f"""
        from branchc.bridge.connection import _Envelope
        body = {body}
        assert len(body) >= 100_000
        whole = _Envelope()
        whole.feed(body)
        bytewise = _Envelope()
        for at in range(len(body)):  # as a slow client sends it
            bytewise.feed(body[at : at + 1])
        print("read", whole.decided == bytewise.decided)
        """
    )
    assert said == "read True"


# -- Monty's error messages, which a script writes (`raise NotImplementedError(...)`) -----------------------


def test_monty_messages_are_read_in_linear_time():
    said = within_deadline(
        """
        from branchc.bridge.handlers import monty
        quadratic = "does not yet support " * 50_000 + "\\nx"  # 1 MB: the old regex took minutes here
        assert monty._unsupported(quadratic) is None
        assert monty._memory_cap("> 1" * 35_000 + "> 123 bytes") == 123
        assert monty._memory_cap("> " + "1" * 100_000 + " bytes") is None  # past 20 digits: not a cap
        assert monty._SUSPENSIONS.search("suspension limit 1" * 6_000) is None
        assert monty._NO_MODULE.search("No module named 'a" * 6_000) is None
        assert monty._NO_MODULE.search("No module named '" + "a." * 50_000) is None
        print("read")
        """
    )
    assert said == "read"


@pytest.mark.parametrize(
    "message",
    [
        "Monty does not yet support del statements",
        "x\nline does not yet support match\n",
        "does not yet support \nno",
        "does not yet support ",
        "a does not yet support b does not yet support c",
        "does not yet support x\n\n",
    ],
)
def test_monty_unsupported_reads_as_the_old_regex_did(message):
    old = re.search(r"does not yet support (?P<what>.+)$", message)
    assert monty._unsupported(message) == (old["what"] if old else None)


@pytest.mark.parametrize(
    "message", ["memory limit exceeded: 12 > 1048576 bytes", "x > 5 bytes\n", "> 5 bytes!", "5 bytes", ">  5 bytes"]
)
def test_monty_memory_cap_reads_as_the_old_regex_did(message):
    old = re.search(r"> (?P<cap>\d+) bytes$", message)
    assert monty._memory_cap(message) == (int(old["cap"]) if old else None)


# -- snapshots: a time zone key in a decoded value (continuation/codec/decode.py) ---------------------------


def test_a_zone_key_is_matched_in_linear_time():
    """Keys over 255 characters are refused before the pattern; the pattern itself is linear too."""
    said = within_deadline(
        """
        from branchc.continuation.codec.decode import _ZONE_KEY
        assert _ZONE_KEY.fullmatch("a/" * 50_000 + "!") is None
        assert _ZONE_KEY.fullmatch("a" * 100_000 + "/") is None
        print("matched")
        """
    )
    assert said == "matched"


# -- a handler's arguments to another tool, against the tool's schema patterns (handlers/chaining.py) -------


def test_a_chained_calls_patterns_run_in_linear_time():
    """`^(a+)+$` is exponential in Python's `re` (jsonschema's engine): 100 KB would never end."""
    said = within_deadline(
        """
        import anyio
        from branchc.bridge.handlers.chaining import ChainedCalls
        from branchc.bridge.handlers.engine import HandlerError

        schema = {
            "type": "object",
            "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}},
            "patternProperties": {"^(b+)+$": {"type": "integer"}},
            "additionalProperties": False,
        }

        async def run(name, arguments):
            return "ran"

        async def main():
            calls = ChainedCalls({"t": schema}, run, 10)
            for arguments in ({"name": "a" * 100_000 + "!"}, {"b" * 100_000 + "!": 1}):
                try:
                    await calls("t", arguments)
                except HandlerError as error:
                    print("refused", "does not match" in str(error))
            print(await calls("t", {"name": "aaa", "bbb": 1}))

        anyio.run(main)
        """
    )
    assert said.splitlines() == ["refused True", "refused True", "ran"]


# -- workflow templates: the regexes of the Jinja2 filters a template may apply to client values ------------


@pytest.mark.parametrize(
    ("template", "value"),
    [
        ("{{ v|title }}", "'-(' * 50_000"),
        ("{{ v|wordcount }}", "'a ' * 50_000"),
        ("{{ v|wordwrap(5) }}", "'a-' * 50_000"),
        ("{{ v|striptags }}", "'<' * 100_000"),
        ("{{ v|striptags }}", "'<>' * 50_000"),
        ("{{ v|striptags }}", "('&' + 'a' * 31) * 3_200"),  # html.unescape's entity regex, {1,32} each
        ("{{ v|title }}", "'a ' * 50_000"),
        ("{{ {v: 1}|xmlattr }}", "'a' * 100_000"),
    ],
)
def test_template_filters_on_client_values_run_in_linear_time(template, value):
    said = within_deadline(
        f"""
        from branchc.workflows.runtime import ENVIRONMENT
        v = {value}
        assert len(v) >= 100_000
        ENVIRONMENT.from_string({template!r}).render(v=v)
        print("rendered")
        """
    )
    assert said == "rendered"


def test_urlize_is_not_offered():
    """Jinja2's urlize filter is quadratic on a word of many dots (100 KB: minutes); templates cannot use it."""
    from jinja2 import TemplateAssertionError

    from branchc.workflows.runtime import ENVIRONMENT

    with pytest.raises(TemplateAssertionError, match="urlize"):
        ENVIRONMENT.from_string("{{ v|urlize }}")
