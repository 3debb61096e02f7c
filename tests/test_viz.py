"""Split graphs and run traces: structure for the example tools, Graphviz accepting the DOT,
the HTML page rendering in headless Chromium, and traces from native and compiled runs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from _system import needs, program

from branchc.runtime import Limits, run_tool
from branchc.runtime.loader import load_tool
from branchc.runtime.testing import MockClient
from branchc.viz.graph import GraphError, load_manifest, overlay_trace, split_graph
from branchc.viz.render import node_lines, to_dot, to_html, to_mermaid
from branchc.viz.trace import TraceError, TraceRecorder, read_trace

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "examples" / "tools"
PICK_CARD = TOOLS / "pick_card.py"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("BRANCHC_CACHE", str(folder))
    monkeypatch.setenv("BRANCHC_FLIGHTS_DB", str(tmp_path / "flights.sqlite"))
    return folder


def line_of(path: Path, text: str) -> int:
    """The 1-based line of the only line of `path` that contains `text`."""
    (found,) = [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return found


def states(graph) -> set[tuple]:
    return {
        (d["function"], d["state"]) if d["kind"] == "state" else (d["function"], d["kind"])
        for _, d in graph.nodes(data=True)
    }


def edges(graph) -> set[tuple]:
    def name(node):
        d = graph.nodes[node]
        return (d["function"], d["state"] if d["kind"] == "state" else d["kind"])

    return {(name(a), name(b), d["kind"]) for a, b, d in graph.edges(data=True)}


# -- structure ---------------------------------------------------------------------------------


def test_pick_card_graph_has_its_phases_states_transitions_and_branch_link() -> None:
    graph = split_graph(load_manifest(PICK_CARD), tool="pick_card")
    assert states(graph) == {
        ("before", "phase"),
        ("after", "phase"),
        *(("client", n) for n in range(5)),
        ("client", "return"),
        ("analyze_cards", 0),
        ("analyze_cards", 1),
        ("analyze_cards", "return"),
    }
    assert edges(graph) == {
        (("before", "phase"), ("client", 0), "handoff"),
        (("client", 0), ("client", 1), "normal"),  # ctx.log
        (("client", 1), ("client", 2), "normal"),  # ctx.branch(analyze_cards) when analyze
        (("client", 1), ("client", 3), "normal"),  # straight to the elicit otherwise
        (("client", 2), ("client", 3), "normal"),
        (("client", 3), ("client", 4), "normal"),  # an invalid pick: log, and ask again
        (("client", 4), ("client", 3), "loop"),
        (("client", 3), ("client", "return"), "normal"),
        (("client", 2), ("analyze_cards", 0), "link"),
        (("analyze_cards", 0), ("analyze_cards", 1), "normal"),
        (("analyze_cards", 1), ("analyze_cards", "return"), "normal"),
        (("client", "return"), ("after", "phase"), "handoff"),
    }
    clusters = graph.graph["clusters"]
    by_cluster = {d["function"] + str(d.get("state", "")): clusters[d["cluster"]] for _, d in graph.nodes(data=True)}
    assert by_cluster["before"]["kind"] == by_cluster["after"]["kind"] == "server"
    assert clusters[by_cluster["client0"]["parent"]]["kind"] == "portable"
    assert clusters[by_cluster["analyze_cards0"]["parent"]]["kind"] == "portable"


def test_states_carry_their_source_lines_live_variables_and_effects() -> None:
    graph = split_graph(load_manifest(PICK_CARD), tool="pick_card")
    node = {(d["function"], d.get("state")): d for _, d in graph.nodes(data=True)}
    elicit = line_of(PICK_CARD, "yield ctx.elicit(")
    sample = line_of(PICK_CARD, "yield ctx.sample(")
    assert node[("client", 3)]["at"][0] == elicit
    assert node[("client", 3)]["effect"] == {"kind": "elicit", "key": "pick_card", "targets": []}
    assert node[("client", 3)]["live"] == ["analysis", "ask", "cards", "ctx", "number"]
    assert node[("client", 3)]["point"] == "while/elicit:pick_card" and node[("client", 0)]["point"] is None
    assert "point while/elicit:pick_card" in node_lines(node[("client", 3)])  # drawn: the name migrations use
    assert elicit in node[("client", 3)]["lines"] and elicit in node[("client", 2)]["lines"]
    assert node[("client", 2)]["effect"] == {"kind": "branch", "targets": ["analyze_cards"]}
    assert node[("analyze_cards", 0)]["lines"] == [sample]
    assert f"{sample:>4}  " in node[("analyze_cards", 0)]["source"]
    labels = {d["label"] for _, _, d in graph.edges(data=True)}
    assert f"elicit 'pick_card' @{elicit}" in labels and f"sample @{sample}" in labels


def test_book_flight_graph_returns_early_and_asks_again_in_a_loop() -> None:
    graph = split_graph(load_manifest(TOOLS / "book_flight.py"), tool="book_flight")
    assert edges(graph) == {
        (("before", "phase"), ("client", 0), "handoff"),
        (("client", 0), ("client", "return"), "normal"),  # no flights: nothing to ask
        (("client", 0), ("client", 1), "normal"),  # sample the comparison
        (("client", 1), ("client", 2), "normal"),  # elicit the choice
        (("client", 2), ("client", "return"), "normal"),  # declined, or a known flight
        (("client", 2), ("client", 3), "normal"),  # an unknown id: log it
        (("client", 3), ("client", 2), "loop"),  # and ask again
        (("client", "return"), ("after", "phase"), "handoff"),
    }


def test_research_links_every_all_branch_and_the_function_graph_stands_alone() -> None:
    manifest = load_manifest(TOOLS / "research.py")
    graph = split_graph(manifest, tool="research")
    assert edges(graph) == {
        (("research", 0), ("research", 1), "normal"),  # notify
        (("research", 1), ("research", 2), "normal"),  # all of three investigate branches
        (("research", 2), ("investigate", 0), "link"),
        (("research", 2), ("research", 3), "normal"),  # notify
        (("research", 3), ("research", 4), "normal"),  # sample the combined answer
        (("research", 4), ("research", "return"), "normal"),
        (("investigate", 0), ("investigate", 1), "normal"),
        (("investigate", 1), ("investigate", 2), "normal"),
        (("investigate", 2), ("investigate", "return"), "normal"),
    }
    effect = next(d["effect"] for _, d in graph.nodes(data=True) if d.get("state") == 2 and d["function"] == "research")
    assert effect == {"kind": "all", "targets": ["investigate"]}
    alone = split_graph(manifest, function="investigate")
    assert states(alone) == {("investigate", 0), ("investigate", 1), ("investigate", 2), ("investigate", "return")}
    assert not any(d["kind"] == "phase" for _, d in alone.nodes(data=True))


def test_tictactoe_loops_back_and_every_example_builds(tmp_path: Path) -> None:
    manifest = load_manifest(TOOLS)
    graph = split_graph(manifest, tool="tictactoe")
    kinds = Counter(kind for _, _, kind in edges(graph))
    assert kinds["loop"] >= 3 and kinds["normal"] >= 5
    for name in ("pick_card", "book_flight", "research", "tictactoe"):
        drawn = split_graph(manifest, tool=name)
        for node, data in drawn.nodes(data=True):  # every state is reachable from the start
            if data["kind"] == "state" and data["state"] != 0:
                assert any(d["kind"] != "link" for _, _, d in drawn.in_edges(node, data=True)), node


def test_exception_edges_are_drawn_where_a_handler_catches(tmp_path: Path) -> None:
    source = tmp_path / "guarded.py"
    source.write_text(
        "from branchc import resumable\n\n\n"
        "@resumable\n"
        "def guarded(ctx):\n"
        "    try:\n"
        "        answer = yield ctx.sample(prompt='x')\n"
        "    except ValueError:\n"
        "        yield ctx.log('warning', 'failed')\n"
        "        raise\n"
        "    finally:\n"
        "        yield ctx.notify('done')\n"
        "    return answer.text\n"
    )
    graph = split_graph(load_manifest(source), function="guarded")
    assert edges(graph) == {
        (("guarded", 0), ("guarded", 1), "normal"),
        (("guarded", 1), ("guarded", 2), "exception"),  # the sample failed: the handler logs
        (("guarded", 1), ("guarded", 3), "exception"),  # another error: the finally still runs
        (("guarded", 1), ("guarded", 3), "normal"),
        (("guarded", 2), ("guarded", 3), "exception"),  # re-raised through the finally
        (("guarded", 3), ("guarded", "return"), "normal"),
        (("guarded", 3), ("guarded", "raise"), "exception"),
    }
    dot = to_dot(graph)
    assert dot.count('style=dashed color="#cf222e"') + dot.count('color="#cf222e" style=dashed') == 4


def test_unknown_tool_or_function_names_what_the_build_has() -> None:
    manifest = load_manifest(PICK_CARD)
    with pytest.raises(GraphError, match=r"no tool 'nope'; the build has: pick_card"):
        split_graph(manifest, tool="nope")
    with pytest.raises(GraphError, match=r"no compiled function 'nope'; the build has: analyze_cards, client"):
        split_graph(manifest, function="nope")


# -- formats -----------------------------------------------------------------------------------


needs_dot = needs("dot", "graphviz")  # SVG and PNG: Graphviz's dot


def dot_program() -> str:
    return program("dot", "graphviz")


@needs_dot
@pytest.mark.parametrize("name", ["pick_card", "book_flight", "research", "tictactoe"])
def test_graphviz_accepts_the_dot_of_every_example(name: str) -> None:
    dot = to_dot(split_graph(load_manifest(TOOLS / f"{name}.py"), tool=name))
    done = subprocess.run([dot_program(), "-Tsvg"], input=dot, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    graph = split_graph(load_manifest(TOOLS / f"{name}.py"), tool=name)
    assert done.stdout.count('class="node"') == graph.number_of_nodes()
    assert done.stdout.count('class="edge"') == graph.number_of_edges()
    assert "Warning" not in done.stderr, done.stderr


def test_mermaid_has_a_subgraph_per_cluster_and_a_line_per_edge() -> None:
    graph = split_graph(load_manifest(PICK_CARD), tool="pick_card")
    text = to_mermaid(graph)
    lines = text.splitlines()
    assert lines[0] == "flowchart TB"
    assert sum(line.strip().startswith("subgraph ") for line in lines) == len(graph.graph["clusters"])
    assert sum(line.strip() == "end" for line in lines) == len(graph.graph["clusters"])
    arrows = [
        line for line in lines if any(a in line for a in (" --> ", " ==> ", " -.-> ", " -->|", " ==>|", " -.->|"))
    ]
    assert len(arrows) == graph.number_of_edges()
    assert sum(line.strip().startswith("linkStyle") for line in lines) == graph.number_of_edges()


# -- traces ------------------------------------------------------------------------------------

PICK_ORDER = [
    ("before", "phase"),
    ("client", 0),
    ("client", 1),
    ("client", 2),
    ("analyze_cards", 0),
    ("analyze_cards", 1),
    ("analyze_cards", "return"),
    ("client", 3),
    ("client", "return"),
    ("after", "phase"),
]


def visit_order(graph) -> list[tuple]:
    visits = []
    for _, data in graph.nodes(data=True):
        for number in data.get("visits", []):
            key = data["state"] if data["kind"] == "state" else data["kind"]
            visits.append((number, (data["function"], key)))
    return [key for _, key in sorted(visits)]


def record(tool, params: dict, client: MockClient) -> dict:
    recorder = TraceRecorder(PICK_CARD, tool.client_fn.__qualname__)
    result = anyio.run(lambda: run_tool(tool, params, client, on_event=recorder))
    path = Path(os.environ["BRANCHC_CACHE"]).parent / "trace.json"
    recorder.write(path, result=result)
    return read_trace(path)


def pick_card_client() -> MockClient:
    return MockClient(["A mixed hand."], [{"action": "accept", "content": {"card_number": 2}}])


def test_trace_of_native_and_compiled_runs_overlay_the_same_path() -> None:
    from branchc.bridge.loading import load_served_tools

    params = {"count": 4, "analyze": True, "seed": 7}
    native = record(load_tool(PICK_CARD, "pick_card"), params, pick_card_client())
    compiled = record(load_served_tools(PICK_CARD)["pick_card"], params, pick_card_client())
    orders = []
    for trace in (native, compiled):
        graph = split_graph(load_manifest(PICK_CARD), tool="pick_card")
        overlay_trace(graph, trace)
        orders.append(visit_order(graph))
        travelled = {(a, b) for a, b, d in graph.edges(data=True) if d.get("visits")}
        assert len(travelled) == len(PICK_ORDER) - 2  # every step but the branch's start and the resume after it
        answers = {d["function"] + str(d.get("state")): d.get("answers") for _, d in graph.nodes(data=True)}
        assert answers["analyze_cards1"] == ["sample → A mixed hand."]
        assert answers["client3"] == ['elicit → accept {"card_number": 2}']
    assert orders[0] == orders[1] == PICK_ORDER


def test_a_trace_that_loops_visits_the_loop_again() -> None:
    answers = [
        {"action": "accept", "content": {"card_number": 9}},  # out of range: logged, asked again
        {"action": "accept", "content": {"card_number": 1}},
    ]
    trace = record(load_tool(PICK_CARD, "pick_card"), {"count": 3, "seed": 1}, MockClient([], answers))
    graph = split_graph(load_manifest(PICK_CARD), tool="pick_card")
    overlay_trace(graph, trace)
    order = visit_order(graph)
    assert order[order.index(("client", 3)) :][:4] == [
        ("client", 3),
        ("client", 4),
        ("client", 3),
        ("client", "return"),
    ]
    loop = [d for a, b, d in graph.edges(data=True) if d["kind"] == "loop"]
    assert [len(d.get("visits", [])) for d in loop] == [1]


def test_bad_trace_files_name_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TraceError, match=r"bad.json: not valid JSON at line 1 column 2"):
        read_trace(bad)
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(TraceError, match=r"not a branchc trace .*branchc run --trace"):
        read_trace(bad)
    bad.write_text(json.dumps({"format": "branchc-trace/1", "events": [{"event": "suspend", "branch": 3}]}))
    with pytest.raises(TraceError, match=r"events\[0\]\.branch: expected a string"):
        read_trace(bad)


def write_tool(folder: Path, name: str, client_body: str, extra: str = "") -> Path:
    source = folder / f"{name}.py"
    source.write_text(
        "from pydantic import BaseModel\n"
        "from branchc import Context, tool\n"
        f"{extra}\n\n"
        "class Params(BaseModel):\n    n: int = 1\n\n\n"
        f"{name} = tool({name!r}, params=Params, requires={{'sampling'}})\n\n\n"
        f"@{name}.client\n"
        "def client(handoff, ctx: Context):\n" + client_body,
        encoding="utf-8",
    )
    return source


def test_native_traces_match_states_after_non_ascii_text(tmp_path: Path) -> None:
    source = write_tool(tmp_path, "accents", "    réponse = yield ctx.sample(prompt='é')\n    return réponse.text\n")
    tool = load_tool(source, "accents")
    trace = record(tool, {}, MockClient(["oui"], []))
    graph = split_graph(load_manifest(source), tool="accents")
    overlay_trace(graph, trace)
    assert visit_order(graph) == [("client", 0), ("client", 1), ("client", "return")]


def test_a_failing_client_is_shown_raising_and_another_tools_trace_is_refused(tmp_path: Path) -> None:
    source = write_tool(tmp_path, "boom", "    yield ctx.sample(prompt='x')\n    raise ValueError('no')\n")
    recorder = TraceRecorder(source, "client")
    with pytest.raises(Exception, match="no"):
        anyio.run(lambda: run_tool(load_tool(source, "boom"), {}, MockClient(["a"], []), on_event=recorder))
    recorder.write(tmp_path / "t.json", error="ValueError: no")
    graph = split_graph(load_manifest(source), tool="boom")
    overlay_trace(graph, read_trace(tmp_path / "t.json"))
    assert visit_order(graph)[-2:] == [("client", 1), ("client", "raise")]
    with pytest.raises(GraphError, match=r"the trace is of tool 'boom' and the graph of 'pick_card'"):
        overlay_trace(split_graph(load_manifest(PICK_CARD), tool="pick_card"), read_trace(tmp_path / "t.json"))


def test_an_imported_tool_is_drawn_from_its_own_module(tmp_path: Path) -> None:
    write_tool(tmp_path, "zeta", "    yield ctx.log('info', 'zeta')\n    return 1\n")
    write_tool(tmp_path, "beta", "    yield ctx.sample(prompt='b')\n    return 2\n", extra="from zeta import zeta")
    manifest = load_manifest(tmp_path)
    assert sorted(t["name"] for m in manifest["modules"].values() for t in m["tools"]) == ["beta", "zeta"]
    graph = split_graph(manifest, tool="zeta")
    assert {d["effect"]["kind"] for _, d in graph.nodes(data=True) if d.get("effect")} == {"log"}
    with pytest.raises(GraphError, match=r"'client' is in several modules \(beta:client, zeta:client\)"):
        split_graph(manifest, function="client")
    assert split_graph(manifest, function="zeta:client").graph["title"] == "client"


def test_an_elicit_key_that_is_not_text_still_compiles(tmp_path: Path) -> None:
    source = write_tool(
        tmp_path, "keys", "    r = yield ctx.elicit(b'pick', message='m', schema=Params)\n    return 1\n"
    )
    graph = split_graph(load_manifest(source), tool="keys")
    assert {d["effect"].get("key") for _, d in graph.nodes(data=True) if d.get("effect")} == {None}


# -- the command line --------------------------------------------------------------------------


def branchc(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


@needs_dot
def test_cli_run_trace_then_graph_overlay(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    done = branchc(
        "run", str(PICK_CARD), "pick_card", "-p", '{"count": 5, "analyze": true}',
        "-r", str(ROOT / "examples/responses/pick_card.yaml"), "--trace", str(trace), "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(trace.read_text())["tool"] == "pick_card"
    svg = tmp_path / "pick.svg"
    drawn = branchc("graph", str(PICK_CARD), "--trace", str(trace), "-o", str(svg))
    assert drawn.returncode == 0, drawn.stderr
    text = svg.read_text()
    assert text.count("visited #") == len(PICK_ORDER)
    mermaid = branchc("graph", str(PICK_CARD), "--format", "mermaid")
    assert mermaid.returncode == 0 and mermaid.stdout.startswith("flowchart TB")
    png = tmp_path / "pick.png"
    assert branchc("graph", str(PICK_CARD), "-o", str(png)).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_without_graphviz_names_the_package(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    done = branchc("graph", str(PICK_CARD), "-o", str(tmp_path / "x.svg"), env={"PATH": str(bin_dir)})
    assert done.returncode == 1
    assert "install the graphviz package" in done.stderr and "--format dot, mermaid" in done.stderr
    assert not (tmp_path / "x.svg").exists()
    dot = branchc("graph", str(PICK_CARD), env={"PATH": str(bin_dir)})  # DOT needs nothing
    assert dot.returncode == 0 and dot.stdout.startswith("digraph split {")


def test_cli_graph_errors_are_one_line(tmp_path: Path) -> None:
    done = branchc("graph", str(PICK_CARD), "--tool", "nope")
    assert done.returncode == 1 and "no tool 'nope'; the build has: pick_card" in done.stderr
    done = branchc("graph", str(tmp_path / "missing.py"))
    assert done.returncode == 1 and "no such file or folder" in done.stderr
    assert "Traceback" not in done.stderr


# -- the HTML page in a real browser -----------------------------------------------------------


OTHER_CHROMIUMS = ("chromium-browser", "google-chrome")
needs_chromium = needs("chromium", "chromium", also=OTHER_CHROMIUMS)


def chromium() -> str:
    return program("chromium", "chromium", also=OTHER_CHROMIUMS)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, b"", None
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    size = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * size
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - size] if x >= size else 0
            up, corner = previous[x], previous[x - size] if x >= size else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(b for i in range(0, stride, size) for b in line[i : i + 3]))
        previous = line
    return width, height, rows


@needs_chromium
def test_html_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    # sampled text is untrusted: this one would end or re-open a script element if it were not escaped
    sampled = "see <!--<script> & <img src=x onerror=alert(1)>"
    client = MockClient([sampled], [{"action": "accept", "content": {"card_number": 2}}])
    trace = record(load_tool(PICK_CARD, "pick_card"), {"count": 4, "analyze": True, "seed": 7}, client)
    graph = split_graph(load_manifest(PICK_CARD), tool="pick_card")
    overlay_trace(graph, trace)
    page = tmp_path / "pick_card.html"
    page.write_text(to_html(graph), encoding="utf-8")
    assert "http://" not in page.read_text().replace("http://www.w3.org", "")  # self-contained: no network
    shot = tmp_path / "shot.png"
    base = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    done = subprocess.run(
        [*base, "--window-size=1200,900", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    width, height, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 900)
    pixels = Counter(row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12))
    _, most = pixels.most_common(1)[0]
    total = sum(pixels.values())
    assert most / total < 0.9, "the page is (nearly) one colour: blank"
    assert len(pixels) > 50, "too few colours for a drawn graph"
    assert bytes.fromhex("ffd33d") in pixels  # a visited state, filled
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert f'data-hoverable="{graph.number_of_nodes()}"' in dom.stdout, dom.stdout[-2000:]


BREAK_THROUGH_FINALLY = """
from branchc import Context, tool

t = tool("t")


@t.client
def client(handoff: dict, ctx: Context):
    while True:
        try:
            r = yield ctx.sample(prompt="step")
            break
        finally:
            yield ctx.log("info", "cleanup")
    r2 = yield ctx.sample(prompt="after")
    return r2.text
"""


def _travelled_into_the_finally(tmp_path: Path, client: Any, limits: Any = None) -> dict[str, list]:
    source = tmp_path / "breaking.py"
    source.write_text(BREAK_THROUGH_FINALLY)
    recorder = TraceRecorder(source, "client")
    try:
        result = anyio.run(lambda: run_tool(load_tool(source, "t"), {}, client, on_event=recorder, limits=limits))
    except Exception as error:
        recorder.write(tmp_path / "trace.json", error=str(error))
    else:
        recorder.write(tmp_path / "trace.json", result=result)
    graph = split_graph(load_manifest(source), tool="t")
    overlay_trace(graph, read_trace(tmp_path / "trace.json"))
    into = {}
    for a, b, data in graph.edges(data=True):
        if graph.nodes[a].get("state") == 1 and graph.nodes[b].get("state") == 2:
            into[data["kind"]] = data.get("visits", [])
    return into


def test_a_break_through_a_finally_is_drawn_on_the_normal_edge(tmp_path: Path) -> None:
    into = _travelled_into_the_finally(tmp_path, MockClient(["one", "two"]))
    assert set(into) == {"normal", "exception"}  # both lead from the sample into the finally's log
    assert into["normal"] and not into["exception"]


def test_a_timeout_into_a_finally_is_drawn_on_the_exception_edge(tmp_path: Path) -> None:
    class Never(MockClient):
        async def sample(self, request):
            await anyio.sleep(30)

    into = _travelled_into_the_finally(tmp_path, Never([]), Limits(timeout=0.05))
    assert into["exception"] and not into["normal"]
