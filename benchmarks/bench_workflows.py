"""YAML workflows (issue 14): what the YAML front end costs against the same flow written in Python.

One flow, two sources: a workflow (a planning step whose answer is a JSON list, then a `foreach` step per
item) and a hand-written short-form tool doing the same. Both are served by branchc in process, through the
real `mcp` client on an in-memory transport, guided (the calling model answers every step by a tool call):
the workflow through `start_NAME` and `workflow_submit`, the Python tool through `serve --guided` and
`branchc_resume`. Runs alternate, so a slow spell hits both alike; every result is checked.

Reported: the median time of one step (a submit: the run loaded, the answer checked and fed, the machine
stepped to the next question, the run kept under a new state id, the result returned) for each, their ratio,
and the saved run's size at the last step.

    python benchmarks/bench_workflows.py [--items 40] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server

WORKFLOW = """\
workflow:
  name: flow_yaml
  params:
    n: {type: integer}
  steps:
    - id: plan
      instruction: "List {{ n }} things to look into."
      save: items
      schema: {type: array, items: {type: string}}
    - id: each
      foreach: {in: items, as: item}
      instruction: "Look into {{ item }}: what matters most?"
      save: notes
      complete: "{{ notes | length }} notes"
"""

PYTHON = """\
import json

from branchc import Context, tool


@tool(requires={"sampling"})
def flow_py(ctx: Context, n: int):
    plan = yield ctx.sample(prompt=f"List {n} things to look into.")
    items = json.loads(plan.text)
    notes = []
    for item in items:
        note = yield ctx.sample(prompt=f"Look into {item}: what matters most?")
        notes.append(note.text)
    return f"{len(notes)} notes"
"""


class Yaml:
    """The workflow, guided: start_flow_yaml, then workflow_submit per step."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def start(self, items: list[str]) -> dict[str, Any]:
        step = (await self.client.call_tool("start_flow_yaml", {"n": len(items)})).structured_content
        return await self.answer(step, items)

    async def answer(self, step: dict[str, Any], answer: Any) -> dict[str, Any]:
        args = {"state_id": step["state_id"], "answer": answer}
        return (await self.client.call_tool("workflow_submit", args)).structured_content

    @staticmethod
    def result(step: dict[str, Any]) -> Any:
        return step["result"]


class Python(Yaml):
    """The hand-written tool, guided: flow_py, then branchc_resume per step."""

    async def start(self, items: list[str]) -> dict[str, Any]:
        step = (await self.client.call_tool("flow_py", {"n": len(items)})).structured_content
        return await self.answer(step, json.dumps(items))

    async def answer(self, step: dict[str, Any], answer: Any) -> dict[str, Any]:
        (request,) = step["requests"]
        args = {"state_id": step["state_id"], "answers": {request["key"]: answer}}
        result = await self.client.call_tool("branchc_resume", args)
        return result.structured_content or {"result": result.content[0].text}


async def run(flow: Yaml, items: list[str], times: list[float], *, stop_at_last: bool = False) -> dict[str, Any]:
    """One run answered step by step, each step timed; `stop_at_last`: left waiting at its last step."""
    step = await flow.start(items)
    for number in range(len(items)):
        if stop_at_last and number == len(items) - 1:
            return step
        began = time.perf_counter()
        step = await flow.answer(step, f"note {number}")
        times.append(time.perf_counter() - began)
    assert flow.result(step) == f"{len(items)} notes", step
    return step


async def main(items: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "flow_yaml.yaml").write_text(WORKFLOW)
        (Path(folder) / "flow_py.py").write_text(PYTHON)
        server = create_server(load_served_tools(folder), guided=True)
        names = [f"thing {number}" for number in range(items)]
        times: dict[str, list[float]] = {"yaml": [], "python": []}
        sizes: dict[str, int] = {}
        async with Client(server, mode="legacy") as client:
            flows = {"yaml": Yaml(client), "python": Python(client)}
            for _ in range(runs):
                for name, flow in flows.items():
                    await run(flow, names, times[name])
            for name, flow in flows.items():
                waiting = await run(flow, names, [], stop_at_last=True)
                sizes[name] = server.bridge.guided.store.runs[waiting["state_id"]].size
    yaml_p50, python_p50 = statistics.median(times["yaml"]), statistics.median(times["python"])
    print(f"{items} steps a run, {runs} runs of each, guided, in process")
    print(f"  workflow_submit (YAML)     p50 {yaml_p50 * 1000:7.2f} ms a step")
    print(f"  branchc_resume (Python)    p50 {python_p50 * 1000:7.2f} ms a step")
    print(f"  YAML / Python              {yaml_p50 / python_p50:7.2f}x")
    print(f"  saved run at the last step: YAML {sizes['yaml']:,} B, Python {sizes['python']:,} B")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    anyio.run(main, options.items, options.runs)
