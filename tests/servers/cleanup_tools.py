"""Tools whose cleanup must run exactly once per run (tests/test_cleanup_once.py).

Each asks `rounds` questions, one at a time (samples at even rounds, elicitations at odd ones),
so a run takes `rounds` client answers: `rounds` rounds of the 2026-07-28 era. Every `finally`
appends one line to the file `marker`; with `log`, it also yields `ctx.log(...)`, which a
generator that is closed by being dropped cannot do ("generator ignored GeneratorExit").

- `cleanup_flat`: the loop is in the client phase itself; its finally writes "client".
- `cleanup_nested`: the client phase runs a branch, which delegates to a helper with
  `yield from`, which loops; their finally blocks write "helper", "worker", "client". The
  helper's finally does not log: halting the branch throws GeneratorExit into it, and CPython
  then closes the generator it delegates to, where a yield is "generator ignored GeneratorExit".
- `cleanup_unsaveable`: holds a lock across its first question: in the 2026-07-28 era the first
  round cannot save the run (NotSerializableError), so the run ends there, halted, cleaned up once.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, Field

from branchc import Context, resumable, tool


class Params(BaseModel):
    rounds: int = Field(ge=1, le=50)
    marker: str
    log: bool = False


class Number(BaseModel):
    value: int


cleanup_flat = tool(
    "cleanup_flat",
    description="asks `rounds` questions; cleans up once",
    params=Params,
    requires={"sampling", "elicitation"},
)
cleanup_nested = tool(
    "cleanup_nested",
    description="asks `rounds` questions in a branch, through yield from; cleans up once at each level",
    params=Params,
    requires={"sampling", "elicitation"},
)


def mark(marker: str, line: str) -> None:
    with open(marker, "a", encoding="utf-8") as out:
        out.write(line + "\n")


@cleanup_flat.client
def flat(handoff: dict, ctx: Context):
    answers = []
    try:
        for number in range(handoff["rounds"]):
            if number % 2 == 0:
                reply = yield ctx.sample(prompt=f"question {number}")
                answers.append(reply.text)
            else:
                choice = yield ctx.elicit("number", message=f"question {number}", schema=Number)
                answers.append(choice.content.value if choice.accepted else choice.action)
        return {"answers": answers}
    finally:
        mark(handoff["marker"], "client")
        if handoff["log"]:
            yield ctx.log("info", "client cleaned up")


@resumable
def ask_all(ctx: Context, rounds: int, marker: str, log: bool):
    answers = []
    try:
        for number in range(rounds):
            if number % 2 == 0:
                reply = yield ctx.sample(prompt=f"question {number}")
                answers.append(reply.text)
            else:
                choice = yield ctx.elicit("number", message=f"question {number}", schema=Number)
                answers.append(choice.content.value if choice.accepted else choice.action)
        return answers
    finally:
        mark(marker, "helper")  # no yield here: a halt closes a `yield from` delegate, as CPython does


@resumable
def worker(ctx: Context, rounds: int, marker: str, log: bool):
    try:
        answers = yield from ask_all(ctx, rounds, marker, log)
        return answers
    finally:
        mark(marker, "worker")
        if log:
            yield ctx.log("info", "worker cleaned up")


@cleanup_nested.client
def nested(handoff: dict, ctx: Context):
    try:
        answers = yield ctx.branch(worker, handoff["rounds"], handoff["marker"], handoff["log"])
        return {"answers": answers}
    finally:
        mark(handoff["marker"], "client")
        if handoff["log"]:
            yield ctx.log("info", "client cleaned up")


cleanup_unsaveable = tool(
    "cleanup_unsaveable",
    description="holds a lock across its first question, so its run cannot be saved for a next round",
    params=Params,
    requires={"sampling", "elicitation"},
)


@cleanup_unsaveable.client
def unsaveable(handoff: dict, ctx: Context):
    lock = threading.Lock()
    try:
        reply = yield ctx.sample(prompt="question 0")
        with lock:
            return {"answers": [reply.text]}
    finally:
        mark(handoff["marker"], "client")
        if handoff["log"]:
            yield ctx.log("info", "client cleaned up")
