"""A tool whose run a client abandons (tests/test_client_gone.py).

`hold` asks one question (a sample, or a form with `ask="elicit"`) while it holds `ballast_mb` MiB
live in its generator, so a run that is never let go of shows in the server's memory. Its finally
appends "finally" to the file `marker`; with `log`, it also yields a log there, which a run whose
client is gone must not wait on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from branchc import Context, tool


class Params(BaseModel):
    marker: str
    ask: Literal["sample", "elicit"] = "sample"
    prompt: str = "question"
    ballast_mb: int = Field(0, ge=0, le=64)
    log: bool = False


class Answer(BaseModel):
    text: str


hold = tool("hold", description="asks one question while holding ballast; cleans up", params=Params)


@hold.client
def client(handoff: dict, ctx: Context):
    ballast = b"b" * (handoff["ballast_mb"] << 20) if handoff["ballast_mb"] else None
    try:
        if handoff["ask"] == "sample":
            reply = yield ctx.sample(prompt=handoff["prompt"])
            answer = reply.text
        else:
            choice = yield ctx.elicit("answer", message=handoff["prompt"], schema=Answer)
            answer = choice.content.text if choice.accepted else choice.action
        return {"answer": answer[:100], "length": len(answer), "held": len(ballast or b"")}
    finally:
        with open(handoff["marker"], "a", encoding="utf-8") as out:
            out.write("finally\n")
        if handoff["log"]:
            yield ctx.log("info", "cleaned up")
