"""Tools whose runs the runs console shows (tests/test_console.py, tests/test_console_browser.py).

- `survey`: asks who is asking (a form with a free-text name: what a hostile client fills with markup), drafts a
  note (a sample), then asks to approve it (a form); three waits, one after the other.
- `triage`: two branches at once (`ctx.all`), each sampling a verdict on one side of a ticket: a run waits at two
  places, one in each branch.

Every `finally` appends one line to the file `marker` (when given), so a test counts how often a run's cleanup ran.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from branchc import Context, resumable, tool


class Params(BaseModel):
    topic: str = Field(max_length=200)
    marker: str = ""


class Name(BaseModel):
    name: str = Field(description="Who is asking")


class Verdict(BaseModel):
    approve: bool


survey = tool(
    "survey",
    description="Asks who is asking, drafts a note for them, and asks to approve it",
    params=Params,
    requires={"sampling", "elicitation"},
)
triage = tool(
    "triage",
    description="Weighs a ticket from two sides at once, then asks which to take",
    params=Params,
    requires={"sampling", "elicitation"},
)


def mark(marker: str, line: str) -> None:
    if marker:
        with open(marker, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@survey.client
def ask(handoff: dict, ctx: Context):
    topic = handoff["topic"]
    try:
        who = yield ctx.elicit("name", message=f"Who is asking about {topic}?", schema=Name)
        name = who.content.name if who.accepted else "someone"
        draft = yield ctx.sample(prompt=f"Draft a short note on {topic} for {name}", max_tokens=200)
        verdict = yield ctx.elicit("approve", message=f"Approve this note for {name}?", schema=Verdict)
        return {"name": name, "note": draft.text, "approved": verdict.accepted and verdict.content.approve}
    finally:
        mark(handoff["marker"], "survey")


@resumable
def weigh(ctx: Context, side: str, topic: str):
    reply = yield ctx.sample(prompt=f"Argue the {side} side of: {topic}", max_tokens=100)
    return reply.text


class Pick(BaseModel):
    side: str


@triage.client
def weigh_both(handoff: dict, ctx: Context):
    topic = handoff["topic"]
    try:
        pro, con = yield ctx.all([ctx.branch(weigh, "pro", topic), ctx.branch(weigh, "con", topic)])
        pick = yield ctx.elicit("pick", message="Which side wins?", schema=Pick, context={"pro": pro, "con": con})
        return {"pro": pro, "con": con, "pick": pick.content.side if pick.accepted else None}
    finally:
        mark(handoff["marker"], "triage")
