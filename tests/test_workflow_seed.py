"""The seed's template syntax in workflows (`${name}`, `${foreach x in xs}...${/foreach}`): translated to the same
sandboxed Jinja2 templates, checked with every problem at its place in the file, rendered, never sent as it is;
a file that mixes the two syntaxes is an error where the second one starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from branchc import run_tool
from branchc.testing import MockClient
from branchc.workflows import check_workflow, load_workflow_tool
from branchc.workflows.seed import SeedSyntaxError, translate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "workflows"

# The chain of thought of the seed `bidirectional-guided-workflows.md`, as the seed writes it (the spaces on its
# blank lines left out): its next names a step it leaves out, and its last step reads a name no step saves.
SEED = """\
# workflows/chain-of-thought.yaml
workflow:
  name: "chain_of_thought"
  description: "Multi-step reasoning with full model capacity per step"

  steps:
    - id: "decompose"
      instruction: |
        Break down the problem into logical sub-tasks.
        Consider all aspects and dependencies.
      save: "decomposition"
      next: "analyze_first"

    - id: "analyze_first"
      instruction: |
        Focus on: ${decomposition[0]}
        Provide detailed analysis and approach.
      save: "analysis_1"
      next: "analyze_second"

    - id: "synthesize"
      instruction: |
        Review all previous analyses:
        ${foreach step in saved_analyses}
        - ${step.summary}
        ${/foreach}
        Provide integrated solution.
      save: "synthesis"
      complete: true
"""


def found(tmp_path: Path, text: str) -> list[tuple[int, int, str]]:
    path = tmp_path / "flow.yaml"
    path.write_text(text, encoding="utf-8")
    return [(d.line, d.column, d.message) for d in check_workflow(path) if d.severity == "error"]


def test_the_seeds_yaml_as_it_is_checks_to_its_own_gaps_only(tmp_path):
    assert found(tmp_path, SEED) == [(19, 13, "next: unknown step 'analyze_second'")]
    # with its next pointing at a step it has, the next gap: the name its foreach reads, at its place
    (problem,) = found(tmp_path, SEED.replace('next: "analyze_second"', 'next: "synthesize"'))
    assert problem == (
        24,
        27,
        "step 'synthesize': instruction reads 'saved_analyses', which no step saves and no param gives",
    )


def test_the_seeds_yaml_with_its_gaps_filled_runs_with_its_templates_rendered(tmp_path):
    filled = SEED.replace(
        'next: "analyze_second"',
        'next: "analyze_second"\n\n    - id: "analyze_second"\n'
        '      instruction: "Now: ${decomposition[1]}"\n      save: "analysis_2"\n      next: "synthesize"',
    ).replace('save: "decomposition"', 'save: "decomposition"\n      schema: {type: array, items: {type: string}}')
    filled = filled.replace("${foreach step in saved_analyses}\n        - ${step.summary}", (
        "${foreach step in [analysis_1, analysis_2]}\n        - ${step}"
    ))  # fmt: skip
    path = tmp_path / "seed.yaml"
    path.write_text(filled, encoding="utf-8")
    assert check_workflow(path) == []
    answers = ['["schema", "tokens"]', "a user table", "signed JWTs", "both, together"]
    client = MockClient(list(answers), [])
    result = anyio.run(lambda: run_tool(load_workflow_tool(path), {}, client))
    assert result["result"] == "both, together"
    prompts = [call.last_text for call in client.sample_calls]
    assert prompts[1].startswith("Focus on: schema\nProvide detailed analysis")
    assert prompts[2] == "Now: tokens"
    assert "- a user table\n" in prompts[3] and "- signed JWTs\n" in prompts[3]
    assert not any("${" in prompt for prompt in prompts)


MIXED = """\
workflow:
  name: mixed
  params:
    problem: {type: string}
  steps:
    - id: one
      instruction: "Think about ${problem}."
      save: thought
    - id: two
      instruction: |
        Now look at {{ thought }} again.
      complete: true
"""


def test_a_file_that_mixes_the_two_syntaxes_is_an_error_where_the_second_starts(tmp_path):
    assert found(tmp_path, MIXED) == [
        (
            11,
            21,
            "this template mixes in Jinja2's {{ ... }} / {% ... %}: the file writes its templates as ${name}, "
            "the seed's syntax (first at 7:33)",
        )
    ]
    jinja_first = MIXED.replace("${problem}", "{{ problem }}").replace("{{ thought }}", "${thought}")
    ((line, column, message),) = found(tmp_path, jinja_first)
    assert (line, column) == (11, 21)
    assert message.startswith("this template mixes in the seed's ${...}: the file writes its templates as {{ name }}")


@pytest.mark.parametrize(
    ("instruction", "at", "problem"),
    [
        ("Think about ${problem", "${", "a ${ that is not closed"),
        ("Think ${} about it", "${", "an empty ${}"),
        ("${foreach x} go", "${", "a foreach is written ${foreach NAME in LIST}"),
        ("${/for} go", "${", "${/for} closes nothing the seed's syntax opens"),
        ("Think about ${problem.}", None, "template syntax error"),  # Jinja2 gives its line only
        ("Think about ${problm}", "problm", "reads 'problm', which no step saves and no param gives"),
    ],
)
def test_a_seed_template_the_checker_cannot_resolve_is_an_error_at_its_place(tmp_path, instruction, at, problem):
    text = textwrap.dedent(
        f"""\
        workflow:
          name: flow
          params:
            problem: {{type: string}}
          steps:
            - id: one
              instruction: "{instruction}"
              complete: true
        """
    )
    ((line, column, message),) = found(tmp_path, text)
    assert line == 7 and problem in message
    if at is not None:  # the instruction's text starts at column 21, after `instruction: "`
        assert column == 21 + instruction.index(at)


def test_translation_keeps_lines_and_maps_each_name_back():
    text = "Focus: ${a[0]}\n${foreach s in items}\n- ${s.summary} ${ {'k': 1}['k'] }\n${/foreach}"
    translation = translate(text)
    assert translation.text == (
        "Focus: {{ a[0] }}\n{% for s in items %}\n- {{ s.summary }} {{  {'k': 1}['k']  }}\n{% endfor %}"
    )
    for name in ("a[0]", "items", "s.summary", "{'k'"):
        assert translation.source_offset(translation.text.index(name)) == text.index(name)
    with pytest.raises(SeedSyntaxError) as info:
        translate("ok ${ x\n}")  # a ${ closes on its own line
    assert info.value.offset == 3


@pytest.mark.parametrize("name", ["deep_research", "trip"])
def test_the_seed_syntax_examples_check_and_draw(name, tmp_path):
    path = EXAMPLES / f"{name}.yaml"
    assert check_workflow(path) == []
    drawn = subprocess.run(
        [sys.executable, "-m", "branchc", "graph", str(path), "--format", "mermaid"],
        capture_output=True,
        text=True,
        env={"BRANCHC_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout.startswith("flowchart TB")
    assert "${" in drawn.stdout and "{{" not in drawn.stdout  # each step as the file writes it
