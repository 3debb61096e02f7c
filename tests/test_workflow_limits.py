"""Bounded work in workflow templates (workflows/bounded.py, issue 21): what one rendering may compute from client
values (params, answers, sampled replies) is capped, and passing a cap is a clear error, before the work is done.

Most cases use an environment with small limits (SMALL), so an unbounded version of the operation would only make
about ten megabytes: each test checks the error, and with tracemalloc that the refused work was not done first.
"""

from __future__ import annotations

import textwrap
import tracemalloc
from pathlib import Path

import anyio
import pytest
from jinja2 import StrictUndefined, TemplateAssertionError
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from branchc import ToolPhaseError, run_tool
from branchc.testing import MockClient
from branchc.workflows import load_workflow_tool
from branchc.workflows.bounded import BoundedEnvironment, TemplateLimitError, TemplateLimits
from branchc.workflows.runtime import ENVIRONMENT

SMALL = BoundedEnvironment(
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    limits=TemplateLimits(max_build=100_000, max_int_digits=300, max_range=1_000, max_steps=10_000),
)

#: (template, client values, the limit named): unbounded, each would make 10 MB or more (or a 100,000-digit int)
REFUSED = {
    "repeat a str": ("{{ v * n }}", {"v": "ab", "n": 5_000_000}, "size limit"),
    "repeat a list, then write it": ("{{ [v] * n }}", {"v": "x" * 1000, "n": 10_000}, "size limit"),
    "double with +": (
        "{% set ns = namespace(s=v) %}{% for i in range(24) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        {"v": "ab"},
        "size limit",
    ),
    "double with ~": (
        "{% set ns = namespace(s=v) %}{% for i in range(24) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        {"v": "ab"},
        "size limit",
    ),
    "nested list literals": (
        "{% set a = [v, v, v, v] %}{% set b = [a, a, a, a] %}{% set c = [b, b, b, b] %}{{ [c, c, c, c] }}",
        {"v": "x" * 50_000},
        "size limit",
    ),
    "power": ("{{ n ** m }}", {"n": 10, "m": 100_000}, "integer limit"),
    "int product": ("{{ n * n }}", {"n": 10**299}, "integer limit"),
    "range": ("{{ range(n)|length }}", {"n": 10**7}, "range limit"),
    "center filter": ("{{ v|center(n) }}", {"v": "a", "n": 10**7}, "size limit"),
    "str.ljust": ("{{ v.ljust(n) }}", {"v": "a", "n": 10**7}, "size limit"),
    "str.expandtabs": ("{{ v.expandtabs(n) }}", {"v": "\t" * 100, "n": 100_000}, "size limit"),
    "str.format width": ("{{ '{:>{w}}'.format(v, w=n) }}", {"v": "a", "n": 10**7}, "size limit"),
    "format filter, width from a value": ("{{ '%*d'|format(n, 1) }}", {"n": 10**7}, "size limit"),
    "% with the answer as the format": ("{{ v % 1 }}", {"v": "%010000000d"}, "size limit"),
    "indent filter": ("{{ v|indent(n) }}", {"v": "a\n" * 100, "n": 100_000}, "size limit"),
    "replace filter": ("{{ v|replace('', w) }}", {"v": "a" * 3000, "w": "b" * 3000}, "size limit"),
    "str.replace": ("{{ v.replace('a', w) }}", {"v": "a" * 3000, "w": "b" * 3000}, "size limit"),
    "str.join": ("{{ w.join(v) }}", {"v": "a" * 3000, "w": "b" * 3000}, "size limit"),
    "str.translate": ("{{ v.translate({97: w}) }}", {"v": "a" * 3000, "w": "b" * 3000}, "size limit"),
    "join filter": ("{{ v|join(w) }}", {"v": ["a"] * 3000, "w": "b" * 3000}, "size limit"),
    "wordwrap filter": ("{{ v|wordwrap(1, wrapstring=w) }}", {"v": "a " * 3000, "w": "b" * 3000}, "size limit"),
    "batch filter's filling": ("{{ v|batch(n, 0)|list|length }}", {"v": [1], "n": 10**6}, "size limit"),
    "slice filter": ("{{ v|slice(n)|list|length }}", {"v": [1], "n": 10**5}, "size limit"),
    "tojson indent": ("{{ v|tojson(indent=n) }}", {"v": [[[1]]], "n": 10**6}, "size limit"),
    "nested loops": ("{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}", {"n": 1000}, "step"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_client_values_cannot_make_a_template_do_unbounded_work(case):
    template, values, limit = REFUSED[case]
    compiled = SMALL.from_string(template)
    tracemalloc.start()
    try:
        with pytest.raises(TemplateLimitError, match=f"\\({limit}"):
            compiled.render(values)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"{peak:,} bytes were allocated before the refusal"


def test_the_error_names_the_limit_and_its_number():
    with pytest.raises(TemplateLimitError) as refused:
        SMALL.from_string("{{ v * n }}").render(v="ab", n=5_000_000)
    assert str(refused.value) == (
        "repeating a str of 2 characters 5,000,000 times would build 10,000,000 characters, past the 100,000 one "
        "rendering may build (size limit)"
    )
    with pytest.raises(TemplateLimitError, match=r"range\(10000000\) has 10,000,000 items, past the 1,000"):
        SMALL.from_string("{{ range(n)|length }}").render(n=10**7)
    with pytest.raises(TemplateLimitError, match="about 100,000 digits, past the 300 a template may compute"):
        SMALL.from_string("{{ n ** m }}").render(n=10, m=100_000)


def test_a_long_rendering_stops_at_the_time_limit():
    """Nine million loop steps (seconds of work) stop after max_seconds (checked at each step), not when done."""
    slow = BoundedEnvironment(limits=TemplateLimits(max_seconds=0.2, max_steps=10**9))
    template = slow.from_string("{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}")
    with pytest.raises(TemplateLimitError, match=r"longer than 0.2 s to render \(time limit\)"):
        template.render(n=3_000)


def test_each_rendering_counts_afresh():
    template = SMALL.from_string("{{ v * 20_000 }}")
    for _ in range(10):  # 40,000 characters built, then written: within 100,000 per rendering, not in all
        assert len(template.render(v="ab")) == 40_000
    expression = SMALL.compile_expression("(v * 40_000)|length > 0")
    assert all(expression(v="ab") for _ in range(10))


def test_templates_cannot_change_values_in_place():
    """The immutable sandbox: a template cannot grow a list it was given (or make a value that holds itself)."""
    with pytest.raises(SecurityError):
        ENVIRONMENT.from_string("{{ v.append(v) }}").render(v=[1])
    with pytest.raises(SecurityError):
        ENVIRONMENT.from_string("{{ d.update(e=1) }}").render(d={})


def test_urlize_and_lipsum_are_not_offered():
    with pytest.raises(TemplateAssertionError, match="urlize"):
        ENVIRONMENT.from_string("{{ v|urlize }}")
    assert "lipsum" not in ENVIRONMENT.globals


ORDINARY = [
    ("{{ items|join(', ') }} ({{ items|length }})", {"items": ["a", "b", "c"]}),
    ("{% for x in items %}{{ loop.index }}/{{ loop.length }}: {{ x|upper }}\n{% endfor %}", {"items": ["a", "b"]}),
    ("{{ data|tojson }} {{ data|tojson(indent=2) }}", {"data": {"a": [1, 2.5, None, True, "é"]}}),
    (
        "{{ '%s has %d items, %.2f%%'|format(name, n, 12.345) }} {{ '{:>6}|{:<4}'.format(n, name) }}",
        {"name": "x", "n": 3},
    ),
    ("{{ (word * 3)|center(15) }}|{{ word ~ '-' ~ n }}|{{ 2 ** 10 }}|{{ [1, 2] + [3] }}", {"word": "ab", "n": 4}),
    (
        "{% macro row(k, v) %}{{ k }}={{ v }};{% endmacro %}{% for k, v in d|dictsort %}{{ row(k, v) }}{% endfor %}",
        {"d": {"b": 2, "a": 1}},
    ),
    (
        "{{ text|wordwrap(10) }}\n{{ text|indent(2, first=True) }}\n{{ text|replace('a', 'A') }}",
        {"text": "a long line of text\nand more"},
    ),
    ("{{ [1, 2, 3]|batch(2, 0)|list }} {{ [1, 2, 3]|slice(2)|list }} {{ [[1], [2]]|sum(start=[]) }}", {}),
    ("{% set ns = namespace(t='') %}{% for x in range(5) %}{% set ns.t = ns.t ~ x %}{% endfor %}{{ ns.t }}", {}),
    ("{% for a, b in pairs %}{{ a }}{{ b }}{% else %}none{% endfor %}{{ {'k': 1}.items()|list }}", {"pairs": []}),
]


@pytest.mark.parametrize(("template", "values"), ORDINARY)
def test_ordinary_templates_render_as_in_jinja2s_sandbox(template, values):
    plain = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
    plain.filters["tojson"] = ENVIRONMENT.filters["tojson"].__wrapped__
    assert ENVIRONMENT.from_string(template).render(values) == plain.from_string(template).render(values)


# -- in a workflow: the client's values, and the error's place -------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flow.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_a_sampled_answer_cannot_make_the_next_instruction_unbounded(tmp_path):
    """The count comes from the model's reply; the default limits; the error names the template's line and
    column in the file, and the limit."""
    path = write(
        tmp_path,
        """
        workflow:
          name: repeat
          steps:
            - id: how_many
              instruction: How many times?
              save: times
              schema: {type: integer}
            - id: say
              instruction: |
                Say this:
                {{ 'ab' * times }}
              complete: true
        """,
    )
    tool = load_workflow_tool(path, warn=None)
    with pytest.raises(ToolPhaseError) as caught:
        anyio.run(lambda: run_tool(tool, {}, MockClient(sample_responses=["20000000"]), portable=True))
    assert f"{path.resolve()}:11:9: step 'say': instruction: TemplateLimitError: repeating a str of 2 characters " in (
        str(caught.value)
    )
    assert "would build 40,000,000 characters, past the 16,777,216 one rendering may build (size limit)" in str(
        caught.value
    )


def test_a_condition_is_bounded_too(tmp_path):
    path = write(
        tmp_path,
        """
        workflow:
          name: check
          params:
            n: {type: integer}
          steps:
            - id: ask
              instruction: Anything?
              save: answer
              next:
                - if: "(answer * n)|length > 3"
                  goto: ask
                - goto: done
            - id: done
              instruction: Done?
              complete: true
        """,
    )
    tool = load_workflow_tool(path, warn=None)
    with pytest.raises(ToolPhaseError) as caught:
        anyio.run(lambda: run_tool(tool, {"n": 10**8}, MockClient(sample_responses=["yes"]), portable=True))
    assert f"{path.resolve()}:10:16: step 'ask': next[0].if: TemplateLimitError: repeating a str" in str(caught.value)
