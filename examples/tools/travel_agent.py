"""An agent loop in a few lines: the model gets tools to call, the branch runs each tool_use it asks for with
`ctx.call_tool`, and the model goes on from the results until it answers.

`airport` and `weather` are tools of this server; the agent calls them as tools/call would run them (each its
own run, here a sub-run of the agent's), and every call and result joins the branch's history, so each next
sample sees them. The branch may call these two only (`tools=`), and the run at most eight tools in all.
"""

from branchc import Context, Limits, resumable, tool

AIRPORTS = {"lisbon": "LIS", "porto": "OPO", "madeira": "FNC"}
WEATHER = {"LIS": "sunny, 24 °C", "OPO": "rain, 16 °C", "FNC": "cloudy, 21 °C"}


@tool(annotations={"read_only_hint": True})
def airport(ctx: Context, city: str):
    """The IATA code of a city's airport.

    Args:
        city: The city, in English
    """
    yield ctx.log("debug", f"airport of {city}")
    return {"city": city, "code": AIRPORTS.get(city.lower(), "unknown")}


@tool(annotations={"read_only_hint": True})
def weather(ctx: Context, code: str):
    """Today's weather at an airport.

    Args:
        code: The airport's IATA code
    """
    yield ctx.log("debug", f"weather at {code}")
    return {"code": code, "weather": WEATHER.get(code, "no report")}


@resumable
def agent(ctx: Context, task: str, tools: list):
    reply = yield ctx.sample(prompt=task, tools=tools)
    while reply.tool_calls:
        for call in reply.tool_calls:
            yield ctx.call_tool(call.function.name, call.function.arguments, tool_call_id=call.id)
        reply = yield ctx.sample(tools=tools)  # the model goes on from the tool results
    return reply.text


@tool(requires={"sampling"}, limits=Limits(max_tool_calls=8), title="Travel agent")
def travel_agent(ctx: Context, question: str):
    """Answer a traveller's question, looking airports and weather up as the model needs.

    Args:
        question: What the traveller asks
    """
    tools = [airport.spec(), weather.spec()]
    answer = yield ctx.branch(agent, question, tools, tools=["airport", "weather"])
    return {"question": question, "answer": answer}
