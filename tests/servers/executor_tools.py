"""Tools whose branches run on an executor (tests/test_executors.py, benchmarks/bench_executors.py).

- `fanout`: everything a branch can do, in one run: ctx.all of CPU-bound branches that log, sample and
  record their process id; nested branches; a branch with a fresh history; a group whose first branch
  fails and halts its siblings (one waiting on a sample, one still stepping: its step elsewhere is
  dropped), whose finally blocks log and append a line to the file `marker`;
  an elicitation. Its result holds everything the branches returned, so two runs compare as data.
- `crunch`: ctx.all of `branches` pure-Python CPU-bound branches (the benchmark).
- `stubborn`: ctx.all of a branch that holds a lock across its yields (its steps run in the serving
  process, with a warning) and one that travels.
- `killer`: ctx.all of two branches; the first SIGKILLs the process it runs in while its marker file
  has fewer than `kills` lines (it appends one first), so the first `kills` attempts of its step die.
"""

from __future__ import annotations

import os
import signal
import threading

from pydantic import BaseModel, Field

from branchc import Context, resumable, tool


class Params(BaseModel):
    marker: str
    spin: int = Field(20_000, ge=1)


class CrunchParams(BaseModel):
    branches: int = Field(4, ge=1, le=64)
    spin: int = Field(2_000_000, ge=1)


class KillParams(BaseModel):
    marker: str
    kills: int = Field(1, ge=0)


class Pick(BaseModel):
    word: str


fanout = tool("fanout", description="branches of every kind", params=Params, requires={"sampling", "elicitation"})
crunch = tool("crunch", description="CPU-bound branches in parallel", params=CrunchParams)
killer = tool("killer", description="a branch that kills its worker", params=KillParams, requires={"sampling"})
stubborn = tool("stubborn", description="a branch whose state cannot travel")


def mark(marker: str, line: str) -> None:
    with open(marker, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def busy(spin: int) -> int:
    """Pure-Python work: the sum of squares mod a prime, `spin` times."""
    total = 0
    for number in range(spin):
        total = (total + number * number) % 1_000_003
    return total


class Failed(Exception):
    """A tool's own error class: it travels back from a worker, as a class its build records."""


@resumable
def leaf(ctx: Context, word: str, spin: int):
    yield ctx.log("info", f"leaf {word} starts at depth {ctx.depth}")
    reply = yield ctx.sample(prompt=f"leaf {word}")
    total = busy(spin)
    yield ctx.notify(f"leaf {word} done", progress=1, total=1)
    return {"word": word, "reply": reply.text, "total": total, "history": [m.content for m in ctx.messages]}


@resumable
def middle(ctx: Context, words: list[str], spin: int):
    yield ctx.log("info", f"middle {words}")
    found = yield ctx.all([ctx.branch(leaf, word, spin) for word in words])
    fresh = yield ctx.branch(leaf, "fresh", spin, inherit_messages=False, system_prompt="be brief")
    return [*found, fresh]


@resumable
def doomed(ctx: Context, spin: int, marker: str):
    try:
        yield ctx.log("info", "doomed starts")
        busy(spin)
        raise Failed(f"doomed gave up after {spin} turns")
    finally:
        mark(marker, "doomed finally")
        yield ctx.log("info", "doomed cleans up")


@resumable
def patient(ctx: Context, name: str, marker: str):
    try:
        yield ctx.log("info", f"patient {name} starts")
        reply = yield ctx.sample(prompt=f"patient {name}")
        return reply.text
    finally:
        mark(marker, f"patient {name} finally")
        yield ctx.log("info", f"patient {name} cleans up")


@resumable
def plodder(ctx: Context, name: str, marker: str):
    try:
        for number in range(10):
            yield ctx.log("debug", f"plodder {name} at {number}")
        return number
    finally:
        mark(marker, f"plodder {name} finally")
        yield ctx.log("info", f"plodder {name} cleans up")


@resumable
def tally(ctx: Context, spin: int):
    yield ctx.log("debug", "tally starts")
    return busy(spin)


@resumable
def pid(ctx: Context, spin: int):
    yield ctx.log("debug", "pid starts")
    total = busy(spin)
    return {"pid": os.getpid(), "total": total}


@fanout.client
def fan(handoff: dict, ctx: Context):
    spin, marker = handoff["spin"], handoff["marker"]
    try:
        first = yield ctx.sample(prompt="plan")
        leaves = yield ctx.all([ctx.branch(leaf, word, spin) for word in ("a", "b", "c")])
        nested = yield ctx.branch(middle, ["x", "y"], spin)
        try:
            yield ctx.all(
                [
                    ctx.branch(patient, "p", marker),
                    ctx.branch(doomed, spin, marker),
                    ctx.branch(plodder, "r", marker),
                ]
            )
            halted = None
        except Failed as error:
            halted = f"{type(error).__name__}: {error}"
        totals = yield ctx.all([ctx.branch(tally, spin + number) for number in range(3)])
        pick = yield ctx.elicit("pick", message="Pick a word", schema=Pick)
        return {
            "first": first.text,
            "leaves": leaves,
            "nested": nested,
            "halted": halted,
            "totals": totals,
            "pick": pick.content.word if pick.accepted else None,
            "history": [m.content for m in ctx.messages],
        }
    finally:
        mark(marker, "client finally")
        yield ctx.log("info", "client cleans up")


@resumable
def crunching(ctx: Context, spin: int):
    yield ctx.log("debug", "crunching")
    return {"pid": os.getpid(), "total": busy(spin)}


@crunch.client
def crunch_all(handoff: dict, ctx: Context):
    results = yield ctx.all([ctx.branch(crunching, handoff["spin"]) for _ in range(handoff["branches"])])
    pids = sorted({r["pid"] for r in results})
    return {"pids": pids, "totals": [r["total"] for r in results], "server": os.getpid()}


def deaths(marker: str) -> int:
    with open(marker, encoding="utf-8") as seen:
        return sum(line.startswith("killing") for line in seen)


@resumable
def suicidal(ctx: Context, marker: str, kills: int):
    yield ctx.log("info", "suicidal starts")
    died = deaths(marker)
    if died < kills:
        mark(marker, f"killing {os.getpid()}")
        os.kill(os.getpid(), signal.SIGKILL)
    reply = yield ctx.sample(prompt="survived")
    return {"died": died, "reply": reply.text}


@killer.client
def kill_one(handoff: dict, ctx: Context):
    try:
        found = yield ctx.all([ctx.branch(suicidal, handoff["marker"], handoff["kills"]), ctx.branch(pid, 1000)])
        return {"suicidal": found[0], "other": found[1]["total"]}
    finally:
        yield ctx.log("info", "killer cleans up")


@resumable
def holding(ctx: Context):
    lock = threading.Lock()
    yield ctx.log("info", "holding a lock")
    with lock:
        total = busy(100)
    return {"pid": os.getpid(), "total": total}


@stubborn.client
def stubborn_all(handoff: dict, ctx: Context):
    held, travelled = yield ctx.all([ctx.branch(holding), ctx.branch(pid, 100)])
    return {"held": held["pid"] == os.getpid(), "travelled": travelled["pid"] != os.getpid(), "total": held["total"]}
