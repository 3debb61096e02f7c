"""Tools that call tools, for tests/test_call_tool_serving.py: of this server (`double`) and of the upstream
server named "up" (tests/servers/upstream_tools.py)."""

from pydantic import BaseModel

from branchc import Context, ToolCallError, tool


class Amount(BaseModel):
    x: int


class Go(BaseModel):
    go: bool


double = tool("double", params=Amount, requires={"sampling"}, description="Doubles, after asking the model")


@double.before
def double_before(params: Amount) -> dict:
    return {"x": params.x}


@double.client
def double_client(handoff: dict, ctx: Context):
    said = yield ctx.sample(prompt=f"double {handoff['x']}?", max_tokens=5)
    return {"doubled": handoff["x"] * 2, "said": said.text}


@double.after
def double_after(handoff: dict, result: dict) -> dict:
    return {**result, "after": True}


use = tool("use", requires={"sampling", "elicitation"}, description="Calls tools here and upstream")


@use.client
def use_client(handoff: dict, ctx: Context):
    here = yield ctx.call_tool("double", {"x": 21})
    found = yield ctx.call_tool("lookup", {"q": "lisbon"}, server="up")
    sure = yield ctx.call_tool("confirm", {"q": "book it"}, server="up")
    return {"here": here.data, "found": found.data, "sure": sure.data, "turns": len(ctx.messages)}


dies = tool("dies", description="An upstream that dies mid-call, then one that answers")


@dies.client
def dies_client(handoff: dict, ctx: Context):
    try:
        yield ctx.call_tool("crash", {"q": "now"}, server="up")
        first = "answered"
    except ToolCallError as error:
        first = str(error)
    again = yield ctx.call_tool("lookup", {"q": "after"}, server="up")
    return {"first": first, "again": again.data}


waits = tool("waits", requires={"elicitation"}, description="Asks, then waits on a slow upstream")


@waits.client
def waits_client(handoff: dict, ctx: Context):
    go = yield ctx.elicit("go", message="Go?", schema=Go)
    try:
        result = yield ctx.call_tool("slow", {"q": "once"}, server="up")
        outcome = result.data
    except ToolCallError as error:
        outcome = f"{type(error).__name__}: {error}"
    return {"go": go.content.go, "outcome": outcome}
