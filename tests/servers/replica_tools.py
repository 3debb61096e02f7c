"""A tool for the replica tests and the replicas load test (tests/test_replicas.py, benchmarks/bench_replicas.py).

`replica_rounds` asks `rounds` questions, one per round (samples at even numbers, forms at odd ones), each
naming the call's `tag`, so an answer meant for another call would show. After each answer it notes the
process id of the server that took the answer, so the result proves two things at once: every answer
arrived, in order (`answers`), and which replica ran each round (`pids`).
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import BaseModel, Field

from branchc import Context, tool


class Number(BaseModel):
    value: int


@tool(requires={"sampling", "elicitation"})
def replica_rounds(ctx: Context, tag: str, rounds: Annotated[int, Field(ge=1, le=50)] = 10):
    """Ask `rounds` questions naming `tag`; return the answers in order and the server pid of each round.

    Args:
        tag: Named in every question, and returned.
        rounds: How many questions, one per round.
    """
    answers = []
    pids = []
    for number in range(rounds):
        if number % 2 == 0:
            reply = yield ctx.sample(prompt=f"{tag} question {number}")
            answers.append(reply.text)
        else:
            choice = yield ctx.elicit("number", message=f"{tag} question {number}", schema=Number)
            answers.append(choice.content.value if choice.accepted else choice.action)
        pids.append(os.getpid())
    return {"tag": tag, "answers": answers, "pids": pids}
