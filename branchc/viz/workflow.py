"""A workflow drawn as its steps: who answers each, what it saves, where `next` goes (with its
conditions), `foreach` loops and where it completes; and, for each step, the state of the compiled
machine it waits in and what a snapshot there carries, so the YAML and the machine read as one.

The graph has the split graph's shape (networkx, the same node and edge kinds plus `step` and `end`
nodes), so render.py draws it in every format."""

from __future__ import annotations

import re
from pathlib import Path

import networkx as nx

from ..workflows.check import load_workflow
from ..workflows.compile import workflow_build
from ..workflows.model import Step
from .graph import load_manifest, split_graph

__all__ = ["workflow_graph"]

_STEP_BLOCK = re.compile(r"^\s*(?:el)?if step == '(\w+)':")
_WHO = {"model": "the model, with the history", "user": "the user, in a form", "sampling": "the model, alone"}


def workflow_graph(path: str | Path) -> nx.MultiDiGraph:
    """The step graph of the workflow file `path` (WorkflowError when it does not check)."""
    path = Path(path)
    workflow, _ = load_workflow(path)
    build = workflow_build(path)
    machine = split_graph(load_manifest(build))
    waits = _waits(machine, load_manifest(build))
    graph = nx.MultiDiGraph(clusters={}, title=workflow.name, tool=workflow.name, label=f"workflow {workflow.name}")
    cluster = "cluster_workflow"
    graph.graph["clusters"][cluster] = {
        "label": f"{path.name}  ·  compiled: each step waits in a state of one resumable machine",
        "kind": "portable",
        "parent": None,
    }
    params = ", ".join(workflow.params)
    graph.add_node("start", kind="end", cluster=cluster, text=[f"start({params})"])
    for step in workflow.steps:
        graph.add_node(step.id, kind="step", cluster=cluster, text=_text(step, waits.get(step.id)), source=_yaml(step))
    graph.add_edge("start", workflow.steps[0].id, kind="normal", label="")
    order = [step.id for step in workflow.steps]
    for index, step in enumerate(workflow.steps):
        following = order[index + 1] if index + 1 < len(order) else None
        if step.foreach is not None:
            graph.add_edge(step.id, step.id, kind="loop", label=f"for each {step.foreach.as_} in {step.foreach.in_}")
        if step.answer_by == "user":
            _end(graph, cluster, "ended", "declined or cancelled")
            graph.add_edge(step.id, "ended", kind="exception", label="decline / cancel")
        for target, label in _next(step, following):
            if target is None:
                _end(graph, cluster, "complete", "complete")
                written = step.written("complete")
                result = f"result {_short(written, 32)}" if isinstance(written, str) else ""
                graph.add_edge(step.id, "complete", kind="handoff", label=", ".join(filter(None, (label, result))))
            else:
                back = order.index(target) <= index
                graph.add_edge(step.id, target, kind="loop" if back else "normal", label=label)
    return graph


def _next(step: Step, following: str | None) -> list[tuple[str | None, str]]:
    """(target step or None for complete, the edge's label), as the generated code goes."""
    done: tuple[str | None, str] = (None, "") if step.complete is not False else (following, "")
    if isinstance(step.next, str):
        return [(step.next, "")]
    if not step.next:
        return [done]
    out: list[tuple[str | None, str]] = []
    for branch in step.next:
        if branch.if_ is None:
            return [*out, (branch.goto, "otherwise" if out else "")]
        out.append((branch.goto, f"if {branch.if_}"))
    return [*out, (done[0], "otherwise")]


def _end(graph: nx.MultiDiGraph, cluster: str, node: str, text: str) -> None:
    if node not in graph:
        graph.add_node(node, kind="end", cluster=cluster, text=[text])


def _text(step: Step, wait: dict | None) -> list[str]:
    lines = [f"{step.id}  ·  answered by {_WHO[step.answer_by]}", _short(step.written("instruction"))]
    if step.save:
        shape = f" ({step.schema_.type})" if step.schema_ is not None else ""
        lines.append(f"saves {step.save}{shape}")
    if wait is not None:
        lines.append(f"waits in state {wait['state']}, carrying {', '.join(wait['live'])}")
    return lines


def _short(text: object, width: int = 52) -> str:
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def _yaml(step: Step) -> str:
    written = step.model_copy(
        update={name: step.written(name) for name in ("instruction", "system_prompt", "complete")}
    )
    return written.model_dump_json(by_alias=True, exclude_defaults=True, indent=1)


def _waits(machine: nx.MultiDiGraph, manifest: dict) -> dict[str, dict]:
    """Each step's suspension in the compiled machine: its state label and what a snapshot carries."""
    (info,) = manifest["modules"].values()
    lines = Path(info["source"]).read_text(encoding="utf-8").splitlines()
    step_at: dict[int, str] = {}
    current = None
    for number, line in enumerate(lines, 1):
        if found := _STEP_BLOCK.match(line):
            current = found.group(1)
        elif current is not None and "yield ctx." in line:
            step_at[number] = current
    waits: dict[str, dict] = {}
    for _, data in machine.nodes(data=True):
        if data.get("kind") == "state" and data["state"] != 0 and data["at"][0] in step_at:
            live = [name for name in data["live"] if name != "ctx"]
            waits[step_at[data["at"][0]]] = {"state": data["state"], "live": live}
    return waits
