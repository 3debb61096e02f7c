"""Split graphs: what the splitter made of a tool or a resumable function, as a networkx graph.

Everything comes from the build manifest (branchc.json): each compiled function's states with
their source lines, its suspensions with the effect they wait on and the variables a snapshot
there carries, and the transitions between states. A tool's graph puts its three phases in
clusters (before and after on the server, client portable) and links every `ctx.branch` and
`yield from` target to that function's own graph. Renderers (render.py) only read the result.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from ..splitter.build import MANIFEST, build_folder
from ..splitter.compiler import COMPILER_VERSION

__all__ = ["GraphError", "load_manifest", "overlay_history", "overlay_trace", "split_graph", "wait_nodes"]


class GraphError(ValueError):
    """A graph that cannot be drawn as asked; the message names what to give instead."""


@dataclass(frozen=True)
class _Function:
    module: str
    entry: dict
    source: str

    @property
    def qualname(self) -> str:
        return self.entry["qualname"]


def load_manifest(path: str | Path) -> dict:
    """The manifest of a build folder, or of sources compiled on the fly (build_folder)."""
    out = build_folder(path)
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise GraphError(f"{out / MANIFEST}: not a branchc build manifest ({error}); run branchc compile") from None
    if not isinstance(manifest, dict) or manifest.get("compiler") != COMPILER_VERSION:
        found = manifest.get("compiler") if isinstance(manifest, dict) else None
        raise GraphError(
            f"{out / MANIFEST}: written by compiler version {found!r}, this branchc reads {COMPILER_VERSION!r}; "
            "run branchc compile again"
        )
    return manifest


def _functions(manifest: dict) -> list[_Function]:
    return [
        _Function(module, entry, info.get("source", module))
        for module, info in sorted(manifest.get("modules", {}).items())
        for entry in info.get("functions", [])
    ]


def _ranges(lines: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    parts: list[str] = []
    start = previous = None
    for line in sorted(set(lines)):
        if previous is not None and line == previous + 1:
            previous = line
            continue
        if start is not None:
            parts.append(f"{start}" if start == previous else f"{start}-{previous}")
        start = previous = line
    if start is not None:
        parts.append(f"{start}" if start == previous else f"{start}-{previous}")
    return ", ".join(parts)


class _Sources:
    """Source files by path, read once: the text of each state, and the lines of server phases."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            try:
                # Python's line breaks only: str.splitlines also breaks at form feeds and U+2028
                self._lines[path] = re.split(r"\r\n|\r|\n", Path(path).read_text(encoding="utf-8"))
            except OSError:
                self._lines[path] = None
        return self._lines[path]

    def text(self, path: str, numbers: list[int]) -> str:
        lines = self.lines(path)
        if not lines:
            return ""
        return "\n".join(f"{n:>4}  {lines[n - 1]}" for n in sorted(set(numbers)) if 0 < n <= len(lines))

    def span_of(self, path: str, qualname: str) -> tuple[int, int] | None:
        """(first, last) line of the def called `qualname` in `path`."""
        lines = self.lines(path)
        if lines is None:
            return None
        try:
            tree = ast.parse(Path(path).read_bytes())
        except SyntaxError:
            return None
        wanted = qualname.replace(".<locals>", "").split(".")

        def find(body: list[ast.stmt], names: list[str]) -> ast.AST | None:
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == names[0]:
                    return node if len(names) == 1 else find(node.body, names[1:])
            return None

        node = find(tree.body, wanted)
        return (node.lineno, node.end_lineno or node.lineno) if node is not None else None


def _effect_text(effect: dict) -> str:
    kind = effect.get("kind", "value")
    if kind == "elicit" and effect.get("key") is not None:
        return f"elicit {effect['key']!r}"
    if effect.get("targets"):
        return f"{kind} {', '.join(effect['targets'])}"
    return "yield (not an effect call)" if kind == "value" else kind


class _Builder:
    def __init__(self, manifest: dict) -> None:
        self.functions = _functions(manifest)
        self.graph = nx.MultiDiGraph(clusters={})
        self.sources = _Sources()
        self.done: dict[tuple[str, str], str] = {}  # (module, qualname) -> its cluster

    def cluster(self, ident: str, label: str, kind: str, parent: str | None = None) -> str:
        self.graph.graph["clusters"][ident] = {"label": label, "kind": kind, "parent": parent}
        return ident

    def resolve(self, module: str, target: str) -> _Function | None:
        last = target.rsplit(".", 1)[-1]
        same = [f for f in self.functions if f.module == module and f.qualname == target]
        return (same or [f for f in self.functions if f.qualname in (target, last)] or [None])[0]

    def node(self, key: str, **data: Any) -> str:
        self.graph.add_node(key, **data)
        return key

    def function(self, function: _Function, parent: str | None) -> str:
        """Add `function`'s states (and, recursively, what it branches to); returns its cluster."""
        key = (function.module, function.qualname)
        if key in self.done:
            return self.done[key]
        prefix = f"{function.module}:{function.qualname}"
        entry = function.entry
        kind = "client" if entry["kind"] == "client" else "resumable"
        cluster = self.cluster(
            f"cluster_{len(self.done)}",
            f"{function.qualname}()  ·  {Path(function.source).name}:{entry['line']}",
            "function",
            parent,
        )
        self.done[key] = cluster
        suspensions = {s["label"]: s for s in entry["suspensions"]}
        for state in entry["states"]:
            label, lines = state["label"], state["lines"]
            suspension = suspensions.get(label)
            self.node(
                f"{prefix}:{label}",
                kind="state",
                cluster=cluster,
                function=function.qualname,
                phase=kind,
                state=label,
                lines=lines,
                ranges=_ranges(lines),
                source=self.sources.text(function.source, lines),
                live=suspension["live"] if suspension else [],
                point=suspension.get("point") if suspension else None,
                effect=suspension.get("effect", {}) if suspension else {},
                at=suspension["span"][:2] if suspension else [entry["line"], 1],
            )
        direct = {(t["source"], t["target"]) for t in entry["transitions"] if t["kind"] == "normal"}
        for transition in entry["transitions"]:
            target = transition["target"]
            if transition["kind"] == "loop" and (transition["source"], target) in direct:
                continue  # also reached without going round a loop: one edge says it
            if isinstance(target, str):  # "return" / "raise"
                self.node(f"{prefix}:{target}", kind=target, cluster=cluster, function=function.qualname)
                text = target
            else:
                suspension = suspensions[target]
                text = f"{_effect_text(suspension.get('effect', {}))} @{suspension['span'][0]}"
            self.graph.add_edge(
                f"{prefix}:{transition['source']}", f"{prefix}:{target}", kind=transition["kind"], label=text
            )
        for label, suspension in suspensions.items():
            effect = suspension.get("effect", {})
            for target in effect.get("targets", []):
                found = self.resolve(function.module, target)
                if found is None:
                    node = self.node(f"external:{target}", kind="external", cluster=parent, function=target)
                else:
                    self.function(found, parent)
                    node = f"{found.module}:{found.qualname}:0"
                link = "yield from" if effect["kind"] == "yield from" else effect["kind"]
                self.graph.add_edge(f"{prefix}:{label}", node, kind="link", label=link)
        return cluster

    def phase(self, name: str, qualname: str | None, source: str) -> str | None:
        if qualname is None:
            return None
        cluster = self.cluster(f"cluster_{name}", f"{name}  ·  server", "server")
        span = self.sources.span_of(source, qualname)
        lines = list(range(span[0], span[1] + 1)) if span else []
        return self.node(
            f"{name}:{qualname}",
            kind="phase",
            cluster=cluster,
            function=qualname,
            phase=name,
            lines=lines,
            ranges=_ranges(lines),
            source=self.sources.text(source, lines),
        )


def split_graph(manifest: dict, *, tool: str | None = None, function: str | None = None) -> nx.MultiDiGraph:
    """The split graph of one tool (its phases and everything its client runs) or one function."""
    builder = _Builder(manifest)
    graph = builder.graph
    if function is not None:
        found = [f for f in builder.functions if f.qualname == function or f"{f.module}:{f.qualname}" == function]
        if not found:
            known = ", ".join(sorted({f.qualname for f in builder.functions})) or "none"
            raise GraphError(f"no compiled function {function!r}; the build has: {known}")
        if len(found) > 1:
            names = ", ".join(f"{f.module}:{f.qualname}" for f in found)
            raise GraphError(f"{function!r} is in several modules ({names}); name one as MODULE:QUALNAME")
        graph.graph["title"] = found[0].qualname
        builder.function(found[0], None)
        return graph
    tools = [(module, info, t) for module, info in manifest.get("modules", {}).items() for t in info.get("tools", [])]
    if tool is None:
        if len(tools) != 1:
            names = ", ".join(sorted({t["name"] for _, _, t in tools})) or "none"
            raise GraphError(f"name one tool with --tool (the build has: {names}), or a function with --function")
        module, info, entry = tools[0]
    else:
        matches = [(m, i, t) for m, i, t in tools if t["name"] == tool]
        if not matches:
            names = ", ".join(sorted(t["name"] for _, _, t in tools)) or "none"
            raise GraphError(f"no tool {tool!r}; the build has: {names}")
        module, info, entry = matches[0]
    source = info.get("source", module)
    graph.graph["title"] = graph.graph["tool"] = entry["name"]
    before = builder.phase("before", entry.get("before"), source)
    portable = builder.cluster("cluster_client", "client  ·  portable (compiled, resumable anywhere)", "portable")
    after = builder.phase("after", entry.get("after"), source)
    client = builder.resolve(module, entry.get("client") or "")
    if client is None:
        raise GraphError(f"{source}: the client phase of {entry['name']!r} was not compiled; run branchc check")
    builder.function(client, portable)
    prefix = f"{client.module}:{client.qualname}"
    if before is not None:
        graph.add_edge(before, f"{prefix}:0", kind="handoff", label="handoff")
    if after is not None and graph.has_node(f"{prefix}:return"):
        graph.add_edge(f"{prefix}:return", after, kind="handoff", label="result")
    return graph


def overlay_trace(graph: nx.MultiDiGraph, trace: dict) -> None:
    """Mark what a recorded run visited: each state's visit numbers and the answers it got there,
    and the transitions taken, in order. A trace of another tool is refused."""
    drawn = graph.graph.get("tool")
    if drawn is not None and trace.get("tool") != drawn:
        raise GraphError(
            f"the trace is of tool {trace.get('tool')!r} and the graph of {drawn!r}; "
            f"draw it with --tool {trace.get('tool')}, or record a run of {drawn}"
        )
    nodes_by_site: dict[tuple[str, int, int], str] = {}
    starts: dict[str, str] = {}
    for node, data in graph.nodes(data=True):
        if data.get("kind") == "state":
            if data["state"] == 0:
                starts.setdefault(data["function"], node)
            else:
                nodes_by_site[(data["function"], data["at"][0], data["at"][1])] = node
    prefix_of = {d["function"]: n.rsplit(":", 1)[0] for n, d in graph.nodes(data=True) if d.get("kind") == "state"}
    at: dict[str, str | None] = {}  # branch -> the node it is at
    order = 0

    def visit(branch: str, node: str | None) -> None:
        nonlocal order
        if node is None or node not in graph:
            at[branch] = None
            return
        order += 1
        graph.nodes[node].setdefault("visits", []).append(order)
        previous = at.get(branch)
        if previous is not None:
            edge = _taken(graph, previous, node, failed.pop(branch, False))
            if edge is not None:
                edge.setdefault("visits", []).append(order)
        at[branch] = node

    def answer(branch: str, text: str) -> None:
        node = at.get(branch)
        if node is not None:
            graph.nodes[node].setdefault("answers", []).append(text)

    functions = {"0": trace.get("client")}
    failed: dict[str, bool] = {}  # branch -> an error was raised at its yield since it last moved (a timeout)
    phases = {d["phase"]: n for n, d in graph.nodes(data=True) if d.get("kind") == "phase"}
    for event in trace.get("events", []):
        kind, branch = event["event"], event.get("branch", "0")
        if kind == "timeout":
            failed[branch] = True
        elif kind == "start":
            visit("0", phases.get("before"))
        elif kind == "handoff":
            visit("0", starts.get(trace.get("client") or ""))
        elif kind == "result":
            visit("0", phases.get("after"))
        elif kind == "branch":
            functions[branch] = event.get("function")
            visit(branch, starts.get(event.get("function") or ""))
        elif kind == "suspend":
            visit(branch, nodes_by_site.get((event.get("function"), event.get("line"), event.get("column"))))
        elif kind == "sample":
            result = event.get("result")
            answer(branch, "sample → " + str(result.get("text", "") if isinstance(result, dict) else result))
        elif kind == "elicit":
            reply = event.get("answer", {})
            content = reply.get("content")
            shown = f" {json.dumps(content, ensure_ascii=False)}" if content else ""
            answer(branch, f"elicit → {reply.get('action')}{shown}")
        elif kind in ("branch_end", "client_result"):
            branch = branch if kind == "branch_end" else "0"
            prefix = prefix_of.get(functions.get(branch) or "")
            ending = "raise" if "error" in event else "return"
            visit(branch, f"{prefix}:{ending}" if prefix else None)
    if "error" in trace:  # the client phase failed: it ended by raising
        prefix = prefix_of.get(trace.get("client") or "")
        current = at.get("0")
        if prefix and current is not None and graph.nodes[current].get("kind") == "state":
            if f"{prefix}:raise" not in graph:
                graph.add_node(f"{prefix}:raise", kind="raise", cluster=graph.nodes[current]["cluster"],
                               function=graph.nodes[current]["function"])  # fmt: skip
                graph.add_edge(current, f"{prefix}:raise", kind="exception", label="raise")
            visit("0", f"{prefix}:raise")
    graph.graph["trace"] = {"tool": trace.get("tool"), "params": trace.get("params"), "steps": order}


_PREFERRED = {"normal": 0, "loop": 1, "exception": 2}


def _taken(graph: nx.MultiDiGraph, source: str, target: str, failed: bool) -> dict[str, Any] | None:
    """The edge a run took from `source` to `target`: where several lead there (the normal way through a finally
    and the exception path into it, say), the normal one, unless an error was raised at the yield (`failed`)."""
    edges = [data for _, to, data in graph.out_edges(source, data=True) if to == target and data["kind"] != "link"]
    if not edges:
        return None
    return min(edges, key=lambda data: (data["kind"] != "exception") if failed else _PREFERRED.get(data["kind"], 3))


def _answered(key: str, value: Any) -> str:
    """One stored answer in short, as a trace's are shown: a sample's text, a form's action and content."""
    if isinstance(value, dict) and isinstance(value.get("content"), dict) and "text" in value["content"]:
        return f"sample → {value['content']['text']}"
    if isinstance(value, dict) and "action" in value:
        content = value.get("content")
        return f"elicit → {value['action']}" + (f" {json.dumps(content, ensure_ascii=False)}" if content else "")
    return f"{key} → {json.dumps(value, ensure_ascii=False, default=str)}"


def wait_nodes(graph: nx.MultiDiGraph) -> Callable[[Mapping[str, Any]], str | None]:
    """A lookup of the state a stored wait (`WaitPoint.as_json()`: function, line, point) is at in `graph`: by its
    point's name, which stays the same across builds, else by its function and line; None for a point of another
    build that this one lacks."""
    by_point: dict[tuple[str, str], str] = {}
    by_line: dict[tuple[str, int], str] = {}
    for node, data in graph.nodes(data=True):
        if data.get("kind") == "state" and data["state"] != 0:
            if data.get("point"):
                by_point[(data["function"], data["point"])] = node
            by_line.setdefault((data["function"], data["at"][0]), node)

    def node_of(wait: Mapping[str, Any]) -> str | None:
        found = by_point.get((wait.get("function"), wait.get("point") or ""))
        return found or by_line.get((wait.get("function"), wait.get("line")))

    return node_of


def overlay_history(graph: nx.MultiDiGraph, tool: str, status: str, history: list[dict[str, Any]]) -> None:
    """Mark a stored run's path (bridge/runs.py `describe_history`): the state each of its waits was at, by the
    K `branchc runs history` gives it, the answers that moved it on, and where each branch waits now. A wait is
    found by its point's name (the same across builds), else by its function and line."""
    drawn = graph.graph.get("tool")
    if drawn is not None and tool != drawn:
        raise GraphError(f"the run is of tool {tool!r} and the graph of {drawn!r}; draw it with --tool {tool}")
    node_of = wait_nodes(graph)
    at: dict[str, str] = {}  # branch -> the node it waited at last
    for index, entry in enumerate(history):
        last = index == len(history) - 1
        for wait in entry["waits"]:
            node = node_of(wait)
            if node is None:
                continue  # a wait of another build, at a point this one lacks
            data = graph.nodes[node]
            data.setdefault("visits", []).append(entry["k"])
            previous = at.get(wait["branch"])
            if previous is not None:
                edge = _taken(graph, previous, node, False)
                if edge is not None:
                    edge.setdefault("visits", []).append(entry["k"])
            at[wait["branch"]] = node
            if isinstance(entry["answers"], dict):
                for key, value in entry["answers"].items():
                    data.setdefault("answers", []).append(f"#{entry['k']} {_answered(key, value)}")
            if last and status == "waiting":
                data.setdefault("waiting", []).append(wait["branch"])
    graph.graph["trace"] = {"tool": tool, "params": None, "steps": len(history)}
