"""YAML workflows: checked at file:line:col, compiled through the splitter, run natively and portably."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from branchc import ToolPhaseError, run_tool
from branchc.runtime.inputs import parse_yaml
from branchc.testing import MockClient
from branchc.workflows import check_workflow, load_workflow_tool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "workflows" / "chain_of_thought.yaml"
RESPONSES = ROOT / "examples" / "workflows" / "chain_of_thought.responses.yaml"


def write(tmp_path: Path, text: str, name: str = "flow.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems(path: Path) -> list[tuple[int, int, str, str]]:
    return [(d.line, d.column, d.severity, d.message) for d in check_workflow(path)]


def test_the_example_checks_clean():
    assert check_workflow(EXAMPLE) == []


def test_unknown_step_in_next_and_goto(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: flow
          steps:
            - id: ask
              instruction: Hello
              next: answr
            - id: answer
              instruction: Bye
              next:
                - if: "true"
                  goto: nowhere
              complete: true
        """,
    )
    found = problems(path)
    assert (6, 13, "error", "next: unknown step 'answr'") in found
    assert (11, 17, "error", "next: unknown step 'nowhere'") in found
    assert "hint: the steps are: ask, answer" in str(check_workflow(path)[0])


def test_a_template_naming_an_unsaved_value(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: flow
          steps:
            - id: first
              instruction: |
                Think about it.
                Then use {{ later }} and {{ nothing }}.
              save: thought
            - id: later_step
              instruction: "{{ thought }}"
              save: later
              complete: true
        """,
    )
    found = problems(path)
    assert found == [
        (
            7,
            21,
            "error",
            "step 'first': instruction reads 'later', which is not saved on every path to it (saved by 'later_step')",
        ),
        (7, 37, "error", "step 'first': instruction reads 'nothing', which no step saves and no param gives"),
    ]


def test_saved_on_one_path_only(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: flow
          params:
            go: {type: boolean}
          steps:
            - id: start
              instruction: start
              next:
                - if: go
                  goto: finish
            - id: middle
              instruction: middle
              save: note
            - id: finish
              instruction: "{{ note }}{% if other is defined %}{{ other }}{% endif %}"
              complete: true
        """,
    )
    assert problems(path) == [
        (
            15,
            24,
            "error",
            "step 'finish': instruction reads 'note', which is not saved on every path to it (saved by 'middle')",
        ),
    ]


def test_bad_types_unknown_keys_duplicates_and_no_complete(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: 3flow
          params:
            n: {type: int}
          steps:
            - id: a
              instruction: one
              answer_by: robot
              sav: x
            - id: a
              instruction: two
        """,
    )
    found = problems(path)
    assert [(line, column) for line, column, *_ in found] == [(2, 9), (4, 15), (8, 18), (9, 7)]
    assert found[0][3].startswith("workflow.name: String should match pattern")
    assert "workflow.params.n.type: Input should be 'string'" in found[1][3]
    assert found[3][3] == "workflow.steps[0].sav: unknown key 'sav'"
    fixed = write(
        tmp_path,
        """
        workflow:
          name: flow
          steps:
            - id: a
              instruction: one
            - id: a
              instruction: two
            - id: orphan
              instruction: three
              complete: true
        """,
        "fixed.yaml",
    )
    assert problems(fixed) == [
        (6, 11, "error", "a second step 'a'"),
    ]
    never = write(
        tmp_path,
        """
        workflow:
          name: flow
          steps:
            - id: a
              instruction: one
              next: a
            - id: b
              instruction: two
              complete: true
        """,
        "never.yaml",
    )
    assert problems(never) == [(7, 11, "warning", "no path reaches step 'b'")]
    endless = write(
        tmp_path, "workflow:\n  name: flow\n  steps:\n    - id: a\n      instruction: one\n", "endless.yaml"
    )
    assert (3, 3, "error", "no step completes the workflow") in problems(endless)


def test_template_syntax_error_names_file_line_and_step(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: flow
          steps:
            - id: broken
              instruction: |
                line one
                {% for x in %}
              complete: true
        """,
    )
    [(line, column, severity, message)] = problems(path)
    assert (line, column, severity) == (7, 9, "error")
    assert message.startswith("step 'broken': instruction: template syntax error:")
    assert str(check_workflow(path)[0]).startswith(f"{path}:7:9: error:")


def run_example(portable: bool, elicit: list | None = None) -> tuple[dict, MockClient]:
    answers = parse_yaml(RESPONSES.read_text(), str(RESPONSES))
    client = MockClient(sample_responses=answers["sample"], elicit_responses=elicit or answers["elicit"])
    tool = load_workflow_tool(EXAMPLE, warn=None)
    result = anyio.run(lambda: run_tool(tool, {"problem": "Build auth", "max_subtasks": 3}, client, portable=portable))
    return result, client


@pytest.mark.parametrize("portable", [False, True])
def test_the_example_runs_the_loop_and_the_conditional_next(portable):
    result, client = run_example(portable)
    assert result["status"] == "complete"
    assert result["saved"]["subtasks"] == [
        "User model with password hashing",
        "JWT issuing and validation",
        "Login and logout endpoints",
    ]
    assert len(result["saved"]["analyses"]) == 3
    assert result["result"].startswith("The same design, plus rate limiting")
    assert len(client.sample_calls) == 6  # decompose, 3 x reason, synthesize twice (the review sent it back)
    assert len(client.elicit_calls) == 2
    assert "at most 3 logical sub-tasks" in client.sample_calls[0].last_text
    assert client.sample_calls[2].last_text.startswith("Focus on sub-task 2 of 3: JWT issuing and validation")
    assert "The reviewer asked for: Add rate limiting" in client.sample_calls[5].last_text


def test_a_declined_review_ends_the_run():
    result, _ = run_example(True, elicit=[{"action": "decline"}])
    assert result["status"] == "decline" and result["step"] == "review" and result["result"] is None


def test_a_run_time_template_error_names_the_file_line_and_step(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: counting
          steps:
            - id: ask
              instruction: Give a number
              save: number
            - id: use
              instruction: "{{ number.missing.deeper }}"
              complete: true
        """,
    )
    tool = load_workflow_tool(path, warn=None)
    with pytest.raises(ToolPhaseError) as caught:
        anyio.run(lambda: run_tool(tool, {}, MockClient(sample_responses=["7"]), portable=True))
    # the place is the template's own line and column (its text starts after the quote), in the step 'use'
    assert f"{path.resolve()}:8:21: step 'use': instruction: UndefinedError" in str(caught.value)


def test_templates_are_sandboxed(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: escape
          steps:
            - id: ask
              instruction: "{{ ''.__class__.__mro__[1].__subclasses__() }}"
              complete: true
        """,
    )
    tool = load_workflow_tool(path, warn=None)
    with pytest.raises(ToolPhaseError) as caught:
        anyio.run(lambda: run_tool(tool, {}, MockClient(sample_responses=["x"])))
    assert "SecurityError" in str(caught.value) or "UndefinedError" in str(caught.value)
    assert "__subclasses__" in str(caught.value) or "__class__" in str(caught.value)


def branchc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_branchc_check_and_run(tmp_path):
    ok = branchc("check", str(EXAMPLE))
    assert ok.returncode == 0, ok.stderr
    bad = write(tmp_path, "workflow:\n  name: flow\n  steps:\n    - id: a\n      instruction: one\n      next: b\n")
    done = branchc("check", str(bad))
    assert done.returncode == 1
    assert f"{bad}:6:13: error: next: unknown step 'b'" in " ".join(done.stderr.split())
    ran = branchc(
        "run", str(EXAMPLE), "--params", '{"problem": "Build auth"}', "--responses", str(RESPONSES), "--quiet"
    )
    assert ran.returncode == 0, ran.stderr
    assert '"status": "complete"' in ran.stdout
    graph = branchc("graph", str(EXAMPLE), "--format", "mermaid")
    assert graph.returncode == 0, graph.stderr
    assert "review  ·  answered by the user, in a form" in graph.stdout
    assert '==>|"if not review.good_enough"|' in graph.stdout  # the conditional next, back to synthesize
    split = branchc("graph", str(EXAMPLE), "--function", "chain_of_thought", "--format", "mermaid")
    assert split.returncode == 0, split.stderr
    assert "elicit" in split.stdout and "sample" in split.stdout  # the generated tool's split graph


def test_the_workflow_graph_draws_each_step_with_the_machine_state_it_waits_in():
    from branchc.viz.workflow import workflow_graph

    graph = workflow_graph(EXAMPLE)
    edges = {(a, b, data["kind"], data["label"]) for a, b, data in graph.edges(data=True)}
    assert edges == {
        ("start", "decompose", "normal", ""),
        ("decompose", "reason", "normal", ""),
        ("reason", "reason", "loop", "for each subtask in subtasks"),
        ("reason", "synthesize", "normal", ""),
        ("synthesize", "review", "normal", ""),
        ("review", "synthesize", "loop", "if not review.good_enough"),
        ("review", "complete", "handoff", "otherwise, result {{ synthesis }}"),
        ("review", "ended", "exception", "decline / cancel"),
    }
    waits = {step: next(line for line in graph.nodes[step]["text"] if line.startswith("waits in state")) for step in
             ("decompose", "reason", "synthesize", "review")}  # fmt: skip
    assert len({line.split(",")[0] for line in waits.values()}) == 4  # four suspensions of one machine
    # a foreach keeps its place in the loop
    assert waits["reason"].endswith("carrying loop_answers, loop_index, loop_items, saved, step")
    assert waits["review"].endswith("carrying saved, step")
    assert graph.nodes["review"]["text"][0] == "review  ·  answered by the user, in a form"


def test_the_readme_shows_the_graph_branchc_draws():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Workflows in YAML") :]
    shown = section[section.index("```mermaid\n") + len("```mermaid\n") :]
    drawn = branchc("graph", "examples/workflows/chain_of_thought.yaml", "--format", "mermaid")
    assert drawn.returncode == 0, drawn.stderr
    assert shown[: shown.index("```")] == drawn.stdout
