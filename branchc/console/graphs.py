"""Split graphs for the console's pages: a run's path with where each branch waits, a tool's waiting runs.

A graph is drawn from a build's manifest (viz/graph.py), read as data: the build a run's record names, kept in
the build cache by its content (runtime/builds.py), or the build the served tools (`--tools`, or what `serve`
serves) were imported from. Nothing of a build is imported to draw it. Graphviz draws the SVG (viz/render.py);
each drawing is kept for the next look at the same run version (or the same counts), a few dozen at most.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..runtime.builds import builds_root
from ..runtime.tool import Tool
from ..store.base import RunRecord
from ..viz.graph import GraphError, load_manifest, overlay_history, split_graph, wait_nodes
from ..viz.render import RenderError, node_ids, state_details, to_svg

__all__ = ["Drawn", "Graphs"]

KEPT_DRAWINGS = 48
_BUILD_ID = re.compile(r"[0-9a-f]{16}")


@dataclass
class Drawn:
    """A graph for a page: its SVG (None when it cannot be drawn, `note` says why), the details of each state by
    its SVG id, the SVG id of the state each wait is at (by the wait's index; None: a point this build lacks), and
    the build it was drawn from."""

    svg: str | None
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    wait_ids: list[str | None] = field(default_factory=list)
    build: str = ""


class Graphs:
    """Draws the console's graphs; `tools`: the served tools, whose builds draw a tool with no kept run."""

    def __init__(self, tools: Mapping[str, Tool] | None) -> None:
        self.tools = tools
        self._drawn: OrderedDict[tuple[Any, ...], Drawn] = OrderedDict()
        self._manifests: dict[str, dict] = {}
        self._lock = threading.Lock()

    def served_build(self, tool: str) -> str:
        """The id of the build the served tool `tool` was imported from ("" when none is served)."""
        if self.tools is None or tool not in self.tools:
            return ""
        from ..bridge.durable import tool_build

        return tool_build(self.tools[tool])

    def manifest(self, build: str) -> dict | None:
        """The manifest of the kept build `build` (an id as records name it), or None when it is not kept here."""
        if not isinstance(build, str) or not _BUILD_ID.fullmatch(build):
            return None
        with self._lock:
            if build in self._manifests:
                return self._manifests[build]
        folder = builds_root() / build
        if not (folder / "branchc.json").is_file():
            return None
        try:
            manifest = load_manifest(folder)
        except (GraphError, OSError):
            return None
        with self._lock:
            self._manifests[build] = manifest  # a kept build's id is a digest of its content: it never changes
        return manifest

    def _build_for(self, tool: str, builds: list[str]) -> tuple[str, dict | None]:
        for build in [*builds, self.served_build(tool)]:
            manifest = self.manifest(build) if build else None
            if manifest is not None:
                return build, manifest
        return "", None

    def run(self, record: RunRecord, history: list[dict[str, Any]]) -> Drawn:
        """The run's split graph: its path, K by K, with the answers it got, and where each branch waits now."""
        build, manifest = self._build_for(record.tool, [record.meta.extra.get("build", "")])
        if manifest is None:
            return Drawn(None, "the build that saved this run is not kept on this machine, and no served tool has it")
        key = ("run", record.run_id, record.version, build)

        def draw() -> Drawn:
            graph = split_graph(manifest, tool=record.tool)
            waits = [wait.as_json() for wait in record.meta.waits]
            if history:
                overlay_history(graph, record.tool, record.status, history)
            node_of = wait_nodes(graph)
            nodes = [node_of(wait) for wait in waits]
            if not history and record.status == "waiting":  # a store keeping no history: where it waits, still
                for wait, node in zip(waits, nodes, strict=True):
                    if node is not None:
                        graph.nodes[node].setdefault("waiting", []).append(wait["branch"])
            return self._drawing(graph, nodes, build)

        return self._kept(key, draw)

    def tool(self, tool: str, waiting: list[RunRecord]) -> Drawn:
        """The tool's split graph with how many of `waiting` (runs of it) wait at each state."""
        builds = [self.served_build(tool), *sorted({r.meta.extra.get("build", "") for r in waiting} - {""})]
        build, manifest = self._build_for(tool, builds)
        if manifest is None:
            return Drawn(None, f"no build of {tool!r} is kept on this machine, and no served tool is {tool!r}")
        waits = [(record.run_id, wait.as_json()) for record in waiting for wait in record.meta.waits]
        key = ("tool", tool, build, tuple((run, w["function"], w.get("point", ""), w["line"]) for run, w in waits))

        def draw() -> Drawn:
            graph = split_graph(manifest, tool=tool)
            node_of = wait_nodes(graph)
            runs_at: dict[str, set[str]] = {}
            nodes = []
            for run, wait in waits:
                node = node_of(wait)
                nodes.append(node)
                if node is not None:
                    runs_at.setdefault(node, set()).add(run)
            for node, runs in runs_at.items():
                graph.nodes[node]["waiting_runs"] = len(runs)
            return self._drawing(graph, nodes, build)

        return self._kept(key, draw)

    @staticmethod
    def _drawing(graph: Any, nodes: list[str | None], build: str) -> Drawn:
        ids = node_ids(graph)
        try:
            svg = to_svg(graph)
        except RenderError as error:
            return Drawn(None, str(error), build=build)
        return Drawn(svg, "", state_details(graph), [ids[n] if n is not None else None for n in nodes], build)

    def _kept(self, key: tuple[Any, ...], draw: Any) -> Drawn:
        with self._lock:
            if key in self._drawn:
                self._drawn.move_to_end(key)
                return self._drawn[key]
        try:
            drawn = draw()
        except GraphError as error:
            return Drawn(None, str(error))
        with self._lock:
            self._drawn[key] = drawn
            while len(self._drawn) > KEPT_DRAWINGS:
                self._drawn.popitem(last=False)
        return drawn
