"""An upstream MCP server for tests/test_call_tool_serving.py: tools another branchc server calls through
`ctx.call_tool(..., server="up")`. Every call appends a line to $UPSTREAM_MARKS, so a test counts the calls."""

import os
import time

from pydantic import BaseModel

from branchc import Context, tool


class Query(BaseModel):
    q: str


class Yes(BaseModel):
    ok: bool


def mark(line: str) -> None:
    with open(os.environ["UPSTREAM_MARKS"], "a", encoding="utf-8") as marks:
        marks.write(line + "\n")


lookup = tool("lookup", params=Query, description="Look a word up")


@lookup.client
def lookup_client(handoff: dict, ctx: Context):
    mark(f"lookup {handoff['q']}")
    yield ctx.log("info", "looking")
    return {"found": handoff["q"].upper()}


confirm = tool("confirm", params=Query, requires={"elicitation"}, description="Ask the user to confirm")


@confirm.client
def confirm_client(handoff: dict, ctx: Context):
    mark(f"confirm {handoff['q']}")
    r = yield ctx.elicit("sure", message=f"Really {handoff['q']}?", schema=Yes)
    return {"confirmed": bool(r.accepted and r.content.ok)}


crash = tool("crash", params=Query, description="Dies mid-call")


@crash.client
def crash_client(handoff: dict, ctx: Context):
    mark(f"crash {handoff['q']}")
    yield ctx.log("info", "about to die")
    os._exit(3)


slow = tool("slow", params=Query, description="Takes a while")


@slow.client
def slow_client(handoff: dict, ctx: Context):
    mark(f"slow {handoff['q']} started")
    time.sleep(float(os.environ.get("UPSTREAM_SLOW", "3")))
    mark(f"slow {handoff['q']} done")
    yield ctx.log("info", "slept")
    return {"slept": True}
