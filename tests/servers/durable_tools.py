"""A tool for the durable-rounds tests (tests/test_durable_rounds.py): every step it takes leaves a line in
a log file, so a test can count what ran, and how often.

`durable_steps` asks `rounds` questions, one per round (samples at even numbers, forms at odd ones). After
each answer it appends "step N" to `log` (then sleeps `slow` seconds, so a round can be caught running);
its finally appends "finally"; `after` appends "after".
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from branchc import Context, tool


class Params(BaseModel):
    rounds: int = Field(ge=1, le=50)
    log: str
    slow: float = 0


class Number(BaseModel):
    value: int


durable_steps = tool(
    "durable_steps",
    description="asks `rounds` questions; logs every step, its finally and its after()",
    params=Params,
    requires={"sampling", "elicitation"},
)


def note(log: str, line: str) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write(line + "\n")


@durable_steps.client
def steps(handoff: dict, ctx: Context):
    answers = []
    try:
        for number in range(handoff["rounds"]):
            if number % 2 == 0:
                reply = yield ctx.sample(prompt=f"question {number}")
                answers.append(reply.text)
            else:
                choice = yield ctx.elicit("number", message=f"question {number}", schema=Number)
                answers.append(choice.content.value if choice.accepted else choice.action)
            note(handoff["log"], f"step {number}")
            if handoff["slow"]:
                time.sleep(handoff["slow"])
        return {"answers": answers}
    finally:
        note(handoff["log"], "finally")


@durable_steps.after
async def after(handoff: dict, result: dict) -> dict:
    note(handoff["log"], "after")
    return {**result, "done": True}
