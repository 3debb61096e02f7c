"""Random workflows (hypothesis) run compiled, natively and portably (saved and resumed at every step),
against a reference interpreter of the language written here from its rules: the same questions in the
same order (each sample's prompt and how much history it carries, each form's message), and the same end.

The workflows have loops (`next` back to any step), conditions over saved values and params, `foreach`,
`complete` templates, the three kinds of answer, and answers that run out: each run gets a bounded supply
of answers, and a run that asks for more must have asked exactly the same questions up to there."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from branchc import run_tool
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run, load_run
from branchc.runtime.testing import ScriptExhaustedError
from branchc.workflows import check_workflow, load_workflow_tool
from branchc.workflows.runtime import workflow_of

JINJA = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
LISTS = [[3, 1, 2], [4], []]  # what the foreach steps run over: an empty list asks nothing
NAMES = itertools.count()


@st.composite
def workflows(draw: Any) -> dict[str, Any]:
    count = draw(st.integers(1, 5))
    ids = [f"s{index}" for index in range(count)]
    steps = []
    for index, ident in enumerate(ids):
        who = draw(st.sampled_from(["model", "sampling", "user"]))
        step: dict[str, Any] = {"id": ident, "answer_by": who, "instruction": f"{ident} with p={{{{ p }}}}"}
        if draw(st.booleans()):
            step["foreach"] = {"in": "items", "as": "item"}
            step["instruction"] += " on {{ item }} ({{ loop.index }} of {{ loop.length }})"
        typed = who == "user" or draw(st.booleans())  # a user's form here holds one integer
        if typed:
            step["schema"] = {"type": "integer"}
        own = f"v{index}" if draw(st.booleans()) else None
        if own:
            step["save"] = own
        numeric = own if typed and own and "foreach" not in step else None  # what a condition may compare
        shape = draw(st.sampled_from(["none", "goto", "conditions"]))
        if shape == "goto":
            step["next"] = draw(st.sampled_from(ids))
        elif shape == "conditions":
            entries = []
            for _ in range(draw(st.integers(1, 2))):
                subject = draw(st.sampled_from([name for name in ("p", numeric) if name]))
                entries.append({"if": f"{subject} > {draw(st.integers(0, 4))}", "goto": draw(st.sampled_from(ids))})
            if draw(st.booleans()):
                entries.append({"goto": draw(st.sampled_from(ids))})
            step["next"] = entries
        if not isinstance(step.get("next"), str) and (index == count - 1 or draw(st.booleans())):
            step["complete"] = draw(st.sampled_from([True, "done {{ p }}", *([f"got {{{{ {own} }}}}"] if own else [])]))
        steps.append(step)
    if not any("complete" in step for step in steps):  # the last step goes somewhere: next was a step id
        steps[-1].pop("next")
        steps[-1]["complete"] = True
    params = {"p": {"type": "integer"}, "items": {"type": "array", "items": {"type": "integer"}}}
    return {"workflow": {"name": f"flow{next(NAMES)}", "params": params, "steps": steps}}


def interpret(workflow: dict[str, Any], params: dict[str, Any], answers: list[int]) -> tuple[list, Any]:
    """The language's rules, directly: (the questions asked, the end: the result, or "out of answers").
    `interpret.where` is left holding the step (and foreach item) each question was asked in."""
    steps = workflow["steps"]
    order = [step["id"] for step in steps]
    supply = iter(answers)
    asked: list[tuple[Any, ...]] = []
    where: list[tuple[str, int | None]] = []  # the step (and foreach item) of each question
    history = 0  # messages a model step's sample carries before its prompt
    idle = 0
    saved = dict(params)
    current = order[0]
    while True:
        step = steps[order.index(current)]
        rounds = [(saved, None)]
        if "foreach" in step:
            items = saved["items"]
            idle = 0 if items else idle + 1  # steps in a row that asked nothing: round and round, it fails
            if idle > 2 * len(steps):
                interpret.where = where
                return asked, "went round idle"
            rounds = [
                ({**saved, "item": item, "loop": {"index": n + 1, "length": len(items)}}, n)
                for n, item in enumerate(items)
            ]
        values = []
        for values_of, item in rounds:
            where.append((current, None if item is None else item + 1))
            prompt = JINJA.from_string(step["instruction"]).render(values_of)
            if "schema" in step and step["answer_by"] != "user":  # the model is told the answer's shape
                prompt += "\n\nAnswer with JSON only, matching this JSON Schema:\n" + json.dumps(step["schema"])
            if step["answer_by"] == "user":
                asked.append(("elicit", prompt))
            elif step["answer_by"] == "sampling":
                asked.append(("sample", 1, prompt))
            else:
                asked.append(("sample", history + 1, prompt))
                history += 2
            answer = next(supply, None)
            if answer is None:
                interpret.where = where
                return asked, "out of answers"
            if step["answer_by"] == "user" and answer < 0:
                interpret.where = where
                return asked, {"status": "decline", "step": current, "result": None, "saved": saved}
            values.append(abs(answer) if "schema" in step else str(abs(answer)))
            idle = 0
        value = values if "foreach" in step else values[0]
        if "save" in step:
            saved[step["save"]] = value
        following = order[order.index(current) + 1] if order.index(current) + 1 < len(order) else None
        done = "complete" in step and step["complete"] is not False
        target: Any = following
        nexts = step.get("next")
        if isinstance(nexts, str):
            target = nexts
        elif nexts:
            target = next((e["goto"] for e in nexts if "if" not in e or _holds(e["if"], saved)), None)
            if target is None:
                target = "complete" if done else following
        elif done:
            target = "complete"
        if target == "complete":
            complete = step["complete"]
            result = value if complete is True else JINJA.from_string(complete).render(saved)
            interpret.where = where
            return asked, {"status": "complete", "step": current, "result": result, "saved": saved}
        current = target


def _holds(condition: str, saved: dict[str, Any]) -> bool:
    return bool(JINJA.compile_expression(condition)(**saved))


def reply(kind: str, answer: int) -> Any:
    """A drawn answer as a client gives it: a sample's text (JSON of the number), or a form's action."""
    if kind == "sample":
        return json.dumps(abs(answer))
    return {"action": "decline"} if answer < 0 else {"action": "accept", "content": {"answer": abs(answer)}}


class Transcript:
    """A client answering every question, sample or form, from one supply, and recording each question
    as the interpreter does; a negative answer declines a form."""

    capabilities = frozenset({"sampling", "elicitation"})

    def __init__(self, answers: list[int]) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[Any, ...]] = []

    def _next(self) -> int:
        if len(self.answers) == 0:
            raise ScriptExhaustedError("out of answers")
        return self.answers.pop(0)

    async def sample(self, request: Any) -> str:
        self.asked.append(("sample", len(request.messages), request.last_text))
        return reply("sample", self._next())

    async def elicit(self, request: Any) -> dict[str, Any]:
        self.asked.append(("elicit", request.message))
        return reply("elicit", self._next())

    async def log(self, level: str, message: str) -> None:
        return None

    async def notify(self, message: str, progress: Any, total: Any) -> None:
        return None


def compiled_run(tool: Any, params: dict[str, Any], answers: list[int], portable: bool) -> tuple[list, Any]:
    client = Transcript(answers)
    try:
        result = anyio.run(lambda: run_tool(tool, params, client, portable=portable))
    except Exception as error:
        if "out of answers" in str(error):
            result = "out of answers"
        elif "the steps go round without asking anything" in str(error):
            result = "went round idle"
        else:
            raise
    return client.asked, result


def positions(tool: Any, params: dict[str, Any], answers: list[int]) -> list[tuple[str, int | None]]:
    """Where the run says it waits (what guided serving shows as current_step and item), at each question,
    read from the run after it was saved and restored, as a guided run is between calls."""
    workflow = workflow_of(tool)
    machine = Machine(tool.name, "random", tool.limits)
    handoff = tool.validate_params(params).model_dump(mode="json")
    machine.start(tool.client_fn, handoff, tool.name)
    machine.advance()
    supply, out = list(answers), []
    while not machine.done:
        text = dump_run(handoff, machine)
        machine.release()
        handoff, machine = load_run(text)
        (request,) = machine.pending
        at = workflow.position(machine)
        out.append((at.step, at.item))
        if not supply:
            machine.halt()
            break
        machine.answer(request.key, reply(request.kind, supply.pop(0)))
        machine.advance()
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    workflow=workflows(),
    p=st.integers(0, 5),
    items=st.sampled_from(LISTS),
    answers=st.lists(st.integers(-1, 6), min_size=0, max_size=14),
)
def test_random_workflows_run_as_the_language_says(tmp_path_factory, workflow, p, items, answers):
    # a form is declined now and then: -1 is rare among the draws, as a user's "no" is
    path = Path(tmp_path_factory.mktemp("flow")) / f"{workflow['workflow']['name']}.yaml"
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    errors = [d for d in check_workflow(path) if d.severity == "error"]
    assert not errors, f"the generator wrote a workflow the checker refuses: {errors}"
    params = {"p": p, "items": items}
    expected = interpret(workflow["workflow"], params, answers)
    event(f"the run ends: {expected[1] if isinstance(expected[1], str) else expected[1]['status']}")
    tool = load_workflow_tool(path, warn=None)
    try:
        for portable in (False, True):
            assert compiled_run(tool, params, answers, portable) == expected, (portable, path.read_text())
        assert positions(tool, params, answers) == interpret.where
    finally:
        sys.modules.pop(f"workflow_{workflow['workflow']['name']}", None)
