"""Research a topic from three angles at once, then combine the findings: map with branches, reduce with a sample.

Each angle runs in its own sub-branch with a fresh context, concurrently (`ctx.all`); the reduce
step sees only the three summaries.
"""

from branchc import Context, resumable, tool

ANGLES = ("history", "current state", "open problems")


@resumable
def investigate(ctx: Context, topic: str, angle: str):
    result = yield ctx.sample(prompt=f"Research {topic}, focusing on its {angle}. Summarize in one paragraph.")
    yield ctx.log("info", f"Finished: {angle}")
    return {"angle": angle, "summary": result.text}


@tool(requires={"sampling"}, title="Research", annotations={"read_only_hint": True})
def research(ctx: Context, topic: str):
    """Research a topic from several angles in parallel and summarise the findings.

    Args:
        topic: What to research
    """
    yield ctx.notify(f"Investigating {topic} from {len(ANGLES)} angles", progress=0, total=len(ANGLES))
    findings = yield ctx.all([ctx.branch(investigate, topic, angle, inherit_messages=False) for angle in ANGLES])
    yield ctx.notify("Combining the findings", progress=len(ANGLES), total=len(ANGLES))

    notes = "\n\n".join(f"{finding['angle'].capitalize()}: {finding['summary']}" for finding in findings)
    answer = yield ctx.sample(prompt=f"Combine these findings about {topic} into one answer:\n\n{notes}")
    return {"topic": topic, "findings": findings, "answer": answer.text}
