"""A tool for the sealed-store tests (tests/test_store_sealing.py): every piece of its code that can run once
its record is loaded writes a line to the file `marker`: the __init__ of the object it keeps across its
questions ("init"), its finally ("finally") and its after() ("after"). Its arguments, its handoff, its
questions and the answers it gets all carry `secret`, which the tests look for in the store's files.
"""

from __future__ import annotations

from pydantic import BaseModel

from branchc import Context, tool


class Params(BaseModel):
    marker: str
    secret: str


class Answer(BaseModel):
    text: str


def mark(marker: str, line: str) -> None:
    with open(marker, "a", encoding="utf-8") as out:
        out.write(line + "\n")


class Kept:
    """Kept across both questions: a snapshot records it; nothing but its own call may construct it."""

    def __init__(self, marker: str, secret: str) -> None:
        mark(marker, "init")
        self.marker = marker
        self.secret = secret


sealed_secret = tool(
    "sealed_secret",
    description="asks two questions about a secret; marks its __init__, finally and after()",
    params=Params,
    requires={"elicitation"},
)


@sealed_secret.before
async def before(params: Params) -> dict:
    return {"marker": params.marker, "secret": params.secret, "note": f"handoff-{params.secret}"}


@sealed_secret.client
def client(handoff: dict, ctx: Context):
    kept = Kept(handoff["marker"], handoff["secret"])
    try:
        first = yield ctx.elicit("first", message=f"question about {handoff['secret']}", schema=Answer)
        second = yield ctx.elicit("second", message=f"again about {handoff['secret']}", schema=Answer)
        return {"answers": [first.content.text, second.content.text], "kept": kept.secret}
    finally:
        mark(handoff["marker"], "finally")


@sealed_secret.after
async def after(handoff: dict, result: dict) -> dict:
    mark(handoff["marker"], "after")
    return result
