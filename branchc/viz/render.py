"""Split graphs as pictures: DOT and Mermaid as text, SVG and PNG through Graphviz's `dot`,
and one self-contained HTML page (the SVG, a legend, the source of each state on hover)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import graphviz
import jinja2
import networkx as nx

__all__ = ["FORMATS", "RenderError", "node_ids", "render", "state_details", "to_dot", "to_html", "to_mermaid", "to_svg"]

FORMATS = ("dot", "mermaid", "svg", "png", "html")

#: how each kind of edge is drawn, and what the legend calls it
EDGE_STYLES: dict[str, tuple[dict[str, str], str]] = {
    "normal": ({"color": "#24292f"}, "transition to the next suspension"),
    "loop": ({"color": "#0969da", "style": "bold", "constraint": "false"}, "loop back-edge"),
    "exception": ({"color": "#cf222e", "style": "dashed"}, "exception path (failed effect, raise)"),
    "link": ({"color": "#8250df", "style": "dotted", "arrowhead": "open"}, "runs a branch / yield from"),
    "handoff": ({"color": "#6e7781", "penwidth": "1.6"}, "phase handoff (server ↔ client)"),
}
CLUSTER_STYLES = {
    "server": {"style": "filled,rounded", "fillcolor": "#fff8c5", "color": "#d4a72c"},
    "portable": {"style": "filled,rounded", "fillcolor": "#ddf4ff", "color": "#54aeff"},
    "function": {"style": "filled,rounded", "fillcolor": "#ffffff", "color": "#8c959f"},
}
VISITED = "#ffd33d"
TRAVELLED = "#e36209"
WAITING = "#1a7f37"  # the outline of a state a run waits at now (`branchc graph --run`, the runs console)


class RenderError(RuntimeError):
    """A picture that cannot be made here; the message says what to install or use instead."""


def _short(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _wrap(words: list[str], width: int = 44) -> list[str]:
    lines, line = [], ""
    for word in words:
        if line and len(line) + len(word) + 2 > width:
            lines.append(line + ",")
            line = word
        else:
            line = f"{line}, {word}" if line else word
    return [*lines, line] if line else lines


_INTERNAL_NAMES = (
    ("_bc_it", "(for iterator)"),
    ("_bc_exc", "(handled exception)"),
    ("_bc_pend", "(pending completion)"),
    ("_bc_yf", "(yield from delegate)"),
    ("_bc_hv", "(saved name)"),
    ("_bc_rv", "(return value)"),
    ("_bc_case", "(match case)"),
    ("_bc_wm", "(with manager)"),
    ("_bc_wx", "(with manager's exit)"),
    ("_bc_wf", "(with still open)"),
    ("_bc_t", "(partial expression)"),
)


def readable(name: str) -> str:
    """A variable the compiler introduced, said in words: what a snapshot there really holds."""
    for prefix, words in _INTERNAL_NAMES:
        if name.startswith(prefix):
            return words
    return name


def node_lines(data: dict[str, Any]) -> list[str]:
    """The text drawn in a node, line by line."""
    kind = data["kind"]
    if "text" in data:  # a workflow's step or end (viz/workflow.py): its lines are given
        lines = list(data["text"])
    elif kind in ("return", "raise"):
        lines = [kind]
    elif kind == "external":
        lines = [f"{data['function']}()", "(not compiled here)"]
    elif kind == "phase":
        lines = [f"{data['function']}()", f"lines {data['ranges']}" if data["ranges"] else ""]
    else:
        title = "start" if data["state"] == 0 else f"state {data['state']}"
        lines = [f"{title}  ·  lines {data['ranges']}" if data["ranges"] else title]
        if data.get("point"):  # the name a waiting run is known by across builds (`branchc compat`, migrations)
            lines.append(f"point {data['point']}")
        if data["live"]:
            names = list(dict.fromkeys(map(readable, data["live"])))
            lines += _wrap([f"carries: {names[0]}", *names[1:]])
    if data.get("waiting"):
        lines.append("waits here: branch " + ", ".join(data["waiting"]))
    if data.get("waiting_runs"):  # a tool's waiting runs, counted at each point (the runs console)
        count = data["waiting_runs"]
        lines.append(f"{count} run{'s' if count != 1 else ''} wait{'s' if count == 1 else ''} here")
    if data.get("visits"):
        lines.append("visited #" + ", #".join(map(str, data["visits"])))
    for answer in data.get("answers", [])[:2]:
        lines.append(_short(answer))
    return [line for line in lines if line]


def edge_label(data: dict[str, Any]) -> str:
    label = data.get("label", "")
    if data.get("visits"):
        label += "  [#" + ", #".join(map(str, data["visits"])) + "]"
    return label


def node_ids(graph: nx.MultiDiGraph) -> dict[str, str]:
    """The id of each node in DOT and in the SVG (`<g id="n3">`): n0, n1, ... in the graph's order."""
    return {node: f"n{index}" for index, node in enumerate(graph.nodes)}


def _children(graph: nx.MultiDiGraph) -> dict[str | None, list[str]]:
    tree: dict[str | None, list[str]] = {}
    for ident, cluster in graph.graph["clusters"].items():
        tree.setdefault(cluster["parent"], []).append(ident)
    return tree


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\")


def to_dot(graph: nx.MultiDiGraph) -> str:
    """Graphviz DOT source of a split graph."""
    ids = node_ids(graph)
    dot = graphviz.Digraph(
        "split",
        graph_attr={
            "label": _esc(graph.graph.get("label") or f"split graph of {graph.graph.get('title', '')}"),
            "labelloc": "t",
            "fontname": "Helvetica",
            "rankdir": "TB",
            "compound": "true",
            "newrank": "true",
        },
        node_attr={"fontname": "Helvetica", "fontsize": "11", "shape": "box", "style": "rounded,filled"},
        edge_attr={"fontname": "Helvetica", "fontsize": "10"},
    )
    members: dict[str | None, list[str]] = {}
    for node, data in graph.nodes(data=True):
        members.setdefault(data.get("cluster"), []).append(node)
    tree = _children(graph)

    def add_nodes(target: graphviz.Digraph, cluster: str | None) -> None:
        for node in members.get(cluster, []):
            data = graph.nodes[node]
            attrs = {"id": ids[node], "fillcolor": VISITED if data.get("visits") else "#ffffff"}
            if data["kind"] in ("return", "raise", "end"):
                attrs |= {"shape": "doubleoctagon" if data["kind"] == "raise" else "ellipse", "style": "filled"}
            elif data["kind"] == "phase":
                attrs |= {"fillcolor": VISITED if data.get("visits") else "#fffbdd"}
            elif data["kind"] == "external":
                attrs |= {"style": "dashed"}
            if data.get("waiting") or data.get("waiting_runs"):
                attrs |= {"color": WAITING, "penwidth": "3", "class": "waiting"}
            if data.get("source"):
                attrs["tooltip"] = _esc(data["source"])
            target.node(ids[node], label="\n".join(map(_esc, node_lines(data))), **attrs)
        for child in tree.get(cluster, []):
            info = graph.graph["clusters"][child]
            with target.subgraph(name=child) as sub:
                sub.attr(label=_esc(info["label"]), fontname="Helvetica", fontsize="12", **CLUSTER_STYLES[info["kind"]])
                add_nodes(sub, child)

    add_nodes(dot, None)
    for source, target, data in graph.edges(data=True):
        style = dict(EDGE_STYLES[data["kind"]][0])
        if data.get("visits"):
            style |= {"color": TRAVELLED, "penwidth": "2.6"}
        dot.edge(ids[source], ids[target], label=_esc(edge_label(data)), **style)
    return dot.source


def _mm(text: str) -> str:
    for plain, code in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("|", "#124;")):
        text = text.replace(plain, code)
    return text


_MERMAID_ARROWS = {"normal": "-->", "loop": "==>", "exception": "-.->", "link": "-.->", "handoff": "-->"}


def to_mermaid(graph: nx.MultiDiGraph) -> str:
    """A Mermaid flowchart of a split graph (renders on GitHub, in Markdown)."""
    ids = node_ids(graph)
    out = ["flowchart TB"]
    members: dict[str | None, list[str]] = {}
    for node, data in graph.nodes(data=True):
        members.setdefault(data.get("cluster"), []).append(node)
    tree = _children(graph)

    def add(cluster: str | None, indent: str) -> None:
        for node in members.get(cluster, []):
            data = graph.nodes[node]
            text = "<br/>".join(_mm(line) for line in node_lines(data))
            shape = ('(["', '"])') if data["kind"] in ("return", "raise", "end") else ('["', '"]')
            out.append(f"{indent}{ids[node]}{shape[0]}{text}{shape[1]}")
        for child in tree.get(cluster, []):
            out.append(f'{indent}subgraph {child}["{_mm(graph.graph["clusters"][child]["label"])}"]')
            add(child, indent + "  ")
            out.append(f"{indent}end")

    add(None, "  ")
    styles = []
    for index, (source, target, data) in enumerate(graph.edges(data=True)):
        label = edge_label(data)
        arrow = _MERMAID_ARROWS[data["kind"]]
        out.append(f"  {ids[source]} {arrow}" + (f'|"{_mm(label)}"|' if label else "") + f" {ids[target]}")
        color = TRAVELLED if data.get("visits") else EDGE_STYLES[data["kind"]][0]["color"]
        styles.append(f"  linkStyle {index} stroke:{color}")
    visited = [ids[n] for n, d in graph.nodes(data=True) if d.get("visits")]
    out += styles
    if visited:
        out += [f"  classDef visited fill:{VISITED}", f"  class {','.join(visited)} visited"]
    return "\n".join(out) + "\n"


def _dot_binary(dot: str, fmt: str) -> bytes:
    try:
        return graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RenderError(
            f"{fmt.upper()} needs Graphviz's `dot` program, which is not installed: install the "
            "graphviz package (Debian/Ubuntu: apt-get install graphviz), or use --format dot, mermaid"
        ) from None
    except graphviz.CalledProcessError as error:
        detail = (error.stderr or b"").decode(errors="replace").strip()
        raise RenderError(f"Graphviz's dot refused the graph: {detail}") from None


def to_svg(graph: nx.MultiDiGraph) -> str:
    """The graph as an SVG element (no XML prolog): what a page embeds. Every state's `<g>` has the id that
    `state_details` keys it by."""
    svg = _dot_binary(to_dot(graph), "svg").decode("utf-8")
    return svg[svg.index("<svg") :]


def state_details(graph: nx.MultiDiGraph) -> dict[str, dict[str, Any]]:
    """What a page shows of each state when it is pointed at, by the SVG id of its node: its title, function,
    source, the variables a snapshot there carries, its visits and the answers a run got there."""
    ids = node_ids(graph)
    return {
        ids[node]: {
            "title": node_lines(data)[0],
            "function": data.get("function"),
            "source": data.get("source", ""),
            "live": list(dict.fromkeys(map(readable, data.get("live", [])))),
            "effect": data.get("effect", {}),
            "visits": data.get("visits", []),
            "answers": data.get("answers", []),
        }
        for node, data in graph.nodes(data=True)
    }


def to_html(graph: nx.MultiDiGraph) -> str:
    """One self-contained page: the SVG, a legend, and each state's source on hover."""
    svg = to_svg(graph)
    states = state_details(graph)
    template = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
        files("branchc.viz").joinpath("graph.html.j2").read_text(encoding="utf-8")
    )
    legend = [(kind, style, text) for kind, (style, text) in EDGE_STYLES.items()]
    return template.render(
        title=graph.graph.get("title", ""),
        label=graph.graph.get("label") or f"split graph of {graph.graph.get('title', '')}",
        heading="workflow" if graph.graph.get("label") else "split graph of",
        svg=svg,
        # inside <script>: no `<`, `>` or `&` at all, so no text can end or re-open the element
        states=json.dumps(states, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026"),
        legend=legend,
        clusters=CLUSTER_STYLES,
        visited=VISITED,
        travelled=TRAVELLED,
        waiting=WAITING,
        trace=graph.graph.get("trace"),
    )


def render(graph: nx.MultiDiGraph, fmt: str) -> bytes:
    """The graph in `fmt` (one of FORMATS), as the bytes to write."""
    if fmt == "dot":
        return to_dot(graph).encode()
    if fmt == "mermaid":
        return to_mermaid(graph).encode()
    if fmt == "html":
        return to_html(graph).encode()
    if fmt in ("svg", "png"):
        return _dot_binary(to_dot(graph), fmt)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
