# ruff: noqa: E501  (the edit corpus is a table: one edit per row reads best)
"""Suspension points that survive edits, and `branchc compat` (splitter/points.py, splitter/compat.py).

An edit corpus: each edit of a base tool comes with the verdict `compare` must give every point of the old
build. Every edit is a real change of the source, compiled by the real splitter; a point not named in an
edit's expectations must come out as its function's default (compatible where the function changed,
unchanged where it did not). Then the command itself, as a user runs it: on two source folders, against a
git revision, with a store holding a run that waits at a point, and --json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client

from branchc.splitter import compile_module
from branchc.splitter.compat import carried, compare
from branchc.splitter.diagnostics import CompileError

BASE = textwrap.dedent(
    """
    from pydantic import BaseModel

    from branchc import Context, resumable, tool


    class Params(BaseModel):
        topic: str


    class Choice(BaseModel):
        pick: int


    plan = tool("plan", params=Params, requires={"sampling", "elicitation"})


    @resumable
    def draft(ctx: Context, topic: str):
        outline = yield ctx.sample(prompt=f"Outline {topic}")
        text = yield ctx.sample(prompt=f"Write from {outline.text}")
        return text.text


    @plan.client
    def client(handoff: dict, ctx: Context):
        notes = []
        for step in range(3):
            reply = yield ctx.sample(prompt=f"step {step}")
            notes.append(reply.text)
        if len(notes) > 2:
            body = yield ctx.branch(draft, handoff["topic"])
        else:
            body = ""
        while True:
            choice = yield ctx.elicit("pick", message="pick one", schema=Choice)
            if choice.accepted:
                break
            yield ctx.log("info", "asked again")
        try:
            final = yield ctx.sample(prompt="polish " + body)
        except ValueError:
            final = None
        return {"notes": notes, "pick": choice.content.pick, "final": final and final.text}
    """
)

POINTS = {
    "draft": ["sample:outline", "sample:text"],
    "client": ["for/sample:reply", "if:then/branch:draft", "while/elicit:pick", "while/log", "try:body/sample:final"],
}


def edit(*pairs: str) -> str:
    """BASE with each (old, new) text pair replaced; each old text must be there exactly once."""
    text = BASE
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert text.count(old) == 1, f"{old!r} is in BASE {text.count(old)} times"
        text = text.replace(old, new)
    return text


# (what the edit is, the new source, {function: default verdict}, {(function, point): verdict}, added points)
C, U, M, R = "compatible", "unchanged", "needs a migration", "removed"
EDITS: list[tuple[str, str, dict[str, str], dict[tuple[str, str], str], set[str]]] = [
    ("edit a comment", edit("    notes = []\n", "    notes = []  # what each step said\n"), {"client": C}, {}, set()),
    ("reformat", edit("        notes.append(reply.text)\n", "        notes.append(\n            reply.text\n        )\n\n"),
     {"client": C}, {}, set()),
    ("add a statement between yields, nothing new carried",
     edit("        notes.append(reply.text)\n", "        notes.append(reply.text)\n        assert notes\n"),
     {"client": C}, {}, set()),
    ("add a statement whose variable is carried",
     edit("    notes = []\n", "    notes = []\n    started = 1\n", '"final": final and final.text}',
          '"final": final and final.text, "started": started}'),
     {"client": M}, {}, set()),
    ("rename a local carried across yields", BASE.replace("notes", "items"), {"client": M}, {}, set()),
    ("rename the variable a sample's reply goes to",
     edit("reply = yield", "answer = yield", "notes.append(reply.text)", "notes.append(answer.text)"),
     {"client": C}, {("client", "for/sample:reply"): R}, {"client for/sample:answer"}),
    ("rename the loop variable", edit("for step in range(3):", "for i in range(3):", "step {step}", "step {i}"),
     {"client": C}, {}, set()),
    ("change a loop's range", edit("range(3)", "range(5)"), {"client": C}, {}, set()),
    ("change a for loop into a while loop",
     edit("    for step in range(3):\n", "    step = -1\n    while len(notes) < 3:\n        step += 1\n"),
     {"client": C}, {("client", "for/sample:reply"): R}, {"client while/sample:reply"}),
    ("add a yield of a new kind", edit("    notes = []\n", '    notes = []\n    yield ctx.notify("starting")\n'),
     {"client": C}, {}, {"client notify"}),
    ("add a yield after one of the same kind",
     edit('        yield ctx.log("info", "asked again")\n',
          '        yield ctx.log("info", "asked again")\n        yield ctx.log("debug", "again")\n'),
     {"client": C}, {}, {"client while/log#2"}),
    ("remove a yield", edit('        yield ctx.log("info", "asked again")\n', ""), {"client": C},
     {("client", "while/log"): R}, set()),
    ("remove the branch", edit('body = yield ctx.branch(draft, handoff["topic"])', 'body = handoff["topic"]'),
     {"client": C}, {("client", "if:then/branch:draft"): R}, set()),
    ("reorder the if's branches",
     edit('    if len(notes) > 2:\n        body = yield ctx.branch(draft, handoff["topic"])\n    else:\n        body = ""\n',
          '    if len(notes) <= 2:\n        body = ""\n    else:\n        body = yield ctx.branch(draft, handoff["topic"])\n'),
     {"client": C}, {("client", "if:then/branch:draft"): R}, {"client if:else/branch:draft"}),
    ("wrap a yield in a try",
     edit('        choice = yield ctx.elicit("pick", message="pick one", schema=Choice)\n',
          '        try:\n            choice = yield ctx.elicit("pick", message="pick one", schema=Choice)\n'
          "        except KeyError:\n            continue\n"),
     {"client": C}, {("client", "while/elicit:pick"): R}, {"client while/try:body/elicit:pick"}),
    ("change the elicitation's schema", edit("    pick: int\n", "    pick: int\n    why: str = ''\n"),
     {}, {("client", "while/elicit:pick"): M}, set()),
    ("change the elicitation's message", edit('message="pick one"', 'message="pick one, please"'),
     {"client": C}, {}, set()),
    ("change the elicitation's key", edit('ctx.elicit("pick"', 'ctx.elicit("choose"'), {"client": C},
     {("client", "while/elicit:pick"): R}, {"client while/elicit:choose"}),
    ("add a parameter with a default",
     edit("def draft(ctx: Context, topic: str):", "def draft(ctx: Context, topic: str, tone: str = 'plain'):",
          'f"Write from {outline.text}"', 'f"Write from {outline.text} in a {tone} tone"'),
     {"draft": C}, {}, set()),
    ("add a parameter without a default",
     edit("def draft(ctx: Context, topic: str):", "def draft(ctx: Context, topic: str, tone: str):",
          'f"Write from {outline.text}"', 'f"Write from {outline.text} in a {tone} tone"',
          'ctx.branch(draft, handoff["topic"])', 'ctx.branch(draft, handoff["topic"], "plain")'),
     {"draft": M, "client": C}, {("draft", "sample:text"): C}, set()),
    ("rename the resumable function", BASE.replace("draft", "outline_draft"), {"client": C, "draft": R},
     {("client", "if:then/branch:draft"): R}, {"outline_draft sample:outline", "outline_draft sample:text",
                                                "client if:then/branch:outline_draft"}),
    ("change a sample's prompt", edit('prompt="polish " + body', 'prompt="polish this: " + body'), {"client": C},
     {}, set()),
    ("change a log message", edit('"asked again"', '"asked once more"'), {"client": C}, {}, set()),
    ("change a carried variable's kind",
     edit("    notes = []\n", "    notes = {}\n", "notes.append(reply.text)", "notes[step] = reply.text"),
     {"client": M}, {}, set()),
    ("add an except clause", edit("    except ValueError:\n        final = None\n",
                                  "    except ValueError:\n        final = None\n    except KeyError:\n        final = None\n"),
     {"client": C}, {}, set()),
    ("catch more exceptions", edit("except ValueError:", "except (ValueError, TypeError):"), {"client": C}, {},
     set()),
    ("add a loop around a yield's block",
     edit('        choice = yield ctx.elicit("pick", message="pick one", schema=Choice)\n',
          '        for _ in range(1):\n            choice = yield ctx.elicit("pick", message="pick one", schema=Choice)\n'),
     {"client": C}, {("client", "while/elicit:pick"): R}, {"client while/for/elicit:pick"}),
    ("add a loop without a yield before one with",
     edit("    while True:\n", "    while len(notes) > 5:\n        notes.pop()\n    while True:\n"),
     {"client": C}, {}, set()),
    ("swap two independent statements",
     edit("from pydantic import BaseModel\n\nfrom branchc import Context, resumable, tool\n",
          "from branchc import Context, resumable, tool\nfrom pydantic import BaseModel\n"),
     {}, {}, set()),
    ("pin a point by hand",
     edit('        yield ctx.log("info", "asked again")\n', '        yield ctx.log("info", "asked again")  # point: again\n'),
     {"client": C}, {("client", "while/log"): R}, {"client again"}),
    ("change the tool's parameters", edit("    topic: str\n", "    topic: str\n    depth: int = 1\n"), {}, {}, set()),
    ("remove the resumable function and its branch",
     edit('body = yield ctx.branch(draft, handoff["topic"])', 'body = handoff["topic"]',
          BASE[BASE.index("@resumable"): BASE.index("@plan.client")], ""),
     {"client": C, "draft": R}, {("client", "if:then/branch:draft"): R}, set()),
    ("change an unrelated function's code only", edit('f"Outline {topic}"', 'f"An outline of {topic}"'),
     {"draft": C}, {}, set()),
]  # fmt: skip


def manifest(source: str) -> dict[str, Any]:
    compiled = compile_module(source, "plan_tool.py")
    return {"modules": {"plan_tool": {"functions": [f.manifest() for f in compiled.functions]}}}


def test_the_corpus_is_big_enough_and_every_edit_changes_the_source() -> None:
    assert len(EDITS) >= 30
    assert len({name for name, *_ in EDITS}) == len(EDITS)
    assert all(source != BASE for _, source, *_ in EDITS)


def test_the_base_names_its_points_by_place() -> None:
    functions = manifest(BASE)["modules"]["plan_tool"]["functions"]
    assert {f["qualname"]: [s["point"] for s in f["suspensions"]] for f in functions} == POINTS


@pytest.mark.parametrize(("name", "source", "defaults", "points", "added"), EDITS, ids=[e[0] for e in EDITS])
def test_an_edit_gets_its_verdict_at_every_point(name, source, defaults, points, added) -> None:
    report = compare(manifest(BASE), manifest(source))
    got = {(line.function, line.point): line.verdict for line in report if line.verdict != "added"}
    expected = {
        (function, point): points.get((function, point), defaults.get(function, U))
        for function, names in POINTS.items()
        for point in names
    }
    assert got == expected, name
    assert {f"{line.function} {line.point}" for line in report if line.verdict == "added"} == added
    for line in report:  # a verdict that strands says why
        assert (line.verdict in (M, R)) == bool(line.detail) or line.verdict == C


def test_a_migration_verdict_names_what_changed() -> None:
    source = dict((e[0], e[1]) for e in EDITS)["rename a local carried across yields"]
    line = next(line for line in compare(manifest(BASE), manifest(source)) if line.point == "while/log")
    assert line.changes == {"removed": ["notes"], "added": ["items"], "kinds": []}
    assert "no longer carries notes" in line.detail and "now carries items" in line.detail


def test_compiler_variables_are_compared_by_role_not_number() -> None:
    # two loops around the point: their iterators are ~it1 and ~it2 whatever numbers the compiler gave them
    suspension = {"live": ["_bc_it7", "_bc_it3", "ctx"], "kinds": {"_bc_it3": ["list"]}}
    assert carried(suspension) == {"ctx": ("*",), "~it1": ("list",), "~it2": ("*",)}


def test_two_pins_of_one_name_are_a_compile_error_at_the_second() -> None:
    source = edit(
        '        yield ctx.log("info", "asked again")\n',
        '        yield ctx.log("info", "asked again")  # point: again\n        yield ctx.log("info", "x")  # point: again\n',
    )
    with pytest.raises(CompileError) as caught:
        compile_module(source, "plan_tool.py")
    (diagnostic,) = caught.value.diagnostics
    line = source.splitlines().index('        yield ctx.log("info", "x")  # point: again') + 1
    assert (diagnostic.line, diagnostic.column) == (line, 9)
    assert "pinned as point 'again'" in diagnostic.message


# -- the command --------------------------------------------------------------------------------------------


def branchc(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env = {**os.environ, "BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_STATE_DIR": str(tmp_path / "state")}
    for name, source in (("old", BASE), ("new", dict((e[0], e[1]) for e in EDITS)["remove a yield"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan_tool.py").write_text(source)
    return tmp_path, env


def test_compat_on_two_source_folders_exits_1_when_a_point_is_removed(folders) -> None:
    folder, env = folders
    done = branchc("compat", "old", "new", "--json", cwd=folder, env=env)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    verdicts = {line["point"]: line["verdict"] for line in report["points"] if line["function"] == "client"}
    assert verdicts["while/log"] == "removed" and verdicts["for/sample:reply"] == "compatible"
    assert report["stranded"] == 1 and "1 point(s) would strand runs" in done.stderr
    same = branchc("compat", "old", "old", cwd=folder, env=env)  # the table, nothing stranded
    assert same.returncode == 0, same.stderr
    assert "unchanged" in same.stdout and "removed" not in same.stdout and "while/elicit:pick" in same.stdout


def test_compat_against_a_git_revision(folders) -> None:
    folder, env = folders
    repo = folder / "old"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(repo)]
    subprocess.run([*git[:-2], "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (repo / "plan_tool.py").write_text((folder / "new" / "plan_tool.py").read_text())
    done = branchc("compat", "old", "--against", "HEAD", "--json", cwd=folder, env=env)
    assert done.returncode == 1, done.stderr
    removed = [line["point"] for line in json.loads(done.stdout)["points"] if line["verdict"] == "removed"]
    assert removed == ["while/log"]
    bad = branchc("compat", "old", "--against", "no-such-rev", cwd=folder, env=env)
    assert bad.returncode == 1 and "no-such-rev" in bad.stderr


def test_compat_with_a_store_counts_the_runs_waiting_at_each_point(folders, monkeypatch) -> None:
    from branchc.bridge.loading import load_served_tools
    from branchc.bridge.server import create_server
    from branchc.store.keys import KeyRing
    from branchc.store.url import open_store

    folder, env = folders
    key = "k" * 40
    env = {**env, "BRANCHC_STATE_KEY": key}
    url = f"sqlite:///{folder / 'runs.db'}"
    monkeypatch.setenv("BRANCHC_CACHE", env["BRANCHC_CACHE"])  # where the tools are built, and their build kept
    tools = load_served_tools(folder / "old" / "plan_tool.py")
    keys = KeyRing.parse(key)
    store = open_store(url, keys)

    async def leave_a_run_waiting() -> None:
        async def sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
            return types.CreateMessageResult(
                role="assistant", model="m", content=types.TextContent(type="text", text="x")
            )

        async def elicitation(ctx: Any, params: Any) -> types.ElicitResult:
            return types.ElicitResult(action="accept", content={"pick": 1})

        server = create_server(tools, store=store, keys=keys)
        async with Client(
            server, mode="2026-07-28", sampling_callback=sampling, elicitation_callback=elicitation
        ) as client:
            result = await client.session.call_tool("plan", {"topic": "t"}, allow_input_required=True)
            assert isinstance(result, types.InputRequiredResult), result

    anyio.run(leave_a_run_waiting)
    store.close()
    done = branchc("compat", "old", "new", "--store", url, "--json", cwd=folder, env=env)
    assert done.returncode == 0, done.stderr  # the removed point has no run waiting at it
    waiting = {line["point"]: line.get("waiting", 0) for line in json.loads(done.stdout)["points"]}
    assert waiting["for/sample:reply"] == 1 and waiting["while/log"] == 0

    # a new build that cannot take the run where it waits: it finishes on its own build, kept here, so nothing is
    # stranded until that build is gone
    (folder / "new" / "plan_tool.py").write_text(
        dict((e[0], e[1]) for e in EDITS)["rename a local carried across yields"]
    )
    done = branchc("compat", "old", "new", "--store", url, "--json", cwd=folder, env=env)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in json.loads(done.stdout)["points"] if line["point"] == "for/sample:reply"]
    assert line["verdict"] == "needs a migration" and line["waiting"] == 1 and line["kept"] == 1
    shutil.rmtree(Path(env["BRANCHC_CACHE"]) / "builds")
    done = branchc("compat", "old", "new", "--store", url, "--json", cwd=folder, env=env)
    assert done.returncode == 1 and json.loads(done.stdout)["stranded"] == 1, done.stderr


def test_a_point_with_a_migration_strands_nothing(folders) -> None:
    folder, env = folders
    renamed = dict((e[0], e[1]) for e in EDITS)["rename a local carried across yields"]
    points = ["for/sample:reply", "if:then/branch:draft", "while/elicit:pick", "while/log", "try:body/sample:final"]
    migration = "\n".join(f"@plan.migrate({point!r})" for point in points)
    (folder / "new" / "plan_tool.py").write_text(
        f'{renamed}\n\n{migration}\ndef notes_to_items(old):\n    old["items"] = old.pop("notes")\n    return old\n'
    )
    done = branchc("compat", "old", "new", "--json", cwd=folder, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    client = [line for line in report["points"] if line["function"] == "client"]
    assert {line["verdict"] for line in client} == {"needs a migration"} and report["stranded"] == 0
    assert all(line["migration"] == "notes_to_items" for line in client), client
    assert "migrated by notes_to_items" in client[0]["detail"]


# -- edits of the example tools ------------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tools"

# (example file, what the edit is, (old, new) text pairs, {function: default verdict}, {(function, point): verdict})
EXAMPLE_EDITS: list[tuple[str, str, tuple[str, ...], dict[str, str], dict[tuple[str, str], str]]] = [
    ("pick_card.py", "reword the question", ('f"Pick a card (1-{len(cards)}): {hand}"', 'f"Which card (1-{len(cards)})? {hand}"'),
     {"client": C}, {}),
    ("pick_card.py", "widen the form's bounds", ("le=10, description", "le=52, description"), {},
     {("client", "while/elicit:pick_card"): M}),
    ("pick_card.py", "rename a local carried across the form", ("ask", "prompt_text"), {"client": C},
     {("client", "while/elicit:pick_card"): M, ("client", "while/log"): M}),
    ("pick_card.py", "let the analysis inherit the history", ("inherit_messages=False", "inherit_messages=True"),
     {"client": C}, {}),
    ("book_flight.py", "drop the retry warning",
     ('        yield ctx.log("warning", f"Unknown flight id {choice.content.flight_id!r}")\n', ""),
     {"client": C}, {("client", "while/log"): R}),
    ("book_flight.py", "rename the listing", ("listing", "table"), {"client": M}, {}),
    ("tictactoe.py", "reword the model's prompt", ("Pick a move. Board:", "Choose a square. Board:"),
     {"tictactoe": C}, {}),
    ("research.py", "reword a progress note", ('"Combining the findings"', '"Combining what was found"'),
     {"research": C}, {}),
    ("research.py", "ask each angle in more detail", ("Summarize in one paragraph.", "Summarize in two paragraphs."),
     {"investigate": C}, {}),
    ("git_diff.py", "log the size in lines", ("characters of diff", "characters of the diff"), {"client": C}, {}),
]  # fmt: skip


def example_manifest(name: str, source: str) -> dict[str, Any]:
    compiled = compile_module(source, str(EXAMPLES / name))
    return {"modules": {name[:-3]: {"functions": [f.manifest() for f in compiled.functions]}}}


@pytest.mark.parametrize(
    ("name", "what", "pairs", "defaults", "points"), EXAMPLE_EDITS, ids=[e[1] for e in EXAMPLE_EDITS]
)
def test_an_edit_of_an_example_gets_its_verdict_at_every_point(name, what, pairs, defaults, points) -> None:
    source = (EXAMPLES / name).read_text()
    edited = source
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert old in edited, old
        edited = edited.replace(old, new)
    before = example_manifest(name, source)
    report = compare(before, example_manifest(name, edited))
    got = {(line.function, line.point): line.verdict for line in report if line.verdict != "added"}
    functions = before["modules"][name[:-3]]["functions"]
    expected = {
        (f["qualname"], s["point"]): points.get((f["qualname"], s["point"]), defaults.get(f["qualname"], U))
        for f in functions
        for s in f["suspensions"]
    }
    assert got == expected, what


# -- edits of the example workflow ---------------------------------------------------------------------------

WORKFLOW = EXAMPLES.parent / "workflows" / "chain_of_thought.yaml"
STEPS = ["decompose", "reason", "synthesize", "review"]

# (what the edit is, (old, new) text pairs, {step: verdict}, the steps only the new workflow has)
WORKFLOW_EDITS: list[tuple[str, tuple[str, ...], dict[str, str], set[str]]] = [
    ("reword a step's instruction", ("Provide a detailed analysis and approach.", "Analyse it in depth."),
     dict.fromkeys(STEPS, U), set()),
    ("add a step", ("    - id: synthesize\n", "    - id: check\n      instruction: Check the analyses.\n      save: checked\n\n"
                    "    - id: synthesize\n"), dict.fromkeys(STEPS, C), {"check"}),
    ("rename a step", ("id: synthesize", "id: combine", "goto: synthesize", "goto: combine"),
     {**dict.fromkeys(STEPS, C), "synthesize": R}, {"combine"}),
    ("change the review form", ("What to improve", "What to change"), {**dict.fromkeys(STEPS, U), "review": M}, set()),
]  # fmt: skip


@pytest.mark.parametrize(("what", "pairs", "verdicts", "added"), WORKFLOW_EDITS, ids=[e[0] for e in WORKFLOW_EDITS])
def test_a_workflow_edit_gets_its_verdict_at_each_step(tmp_path, monkeypatch, what, pairs, verdicts, added) -> None:
    from branchc.workflows import workflow_build

    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    text = WORKFLOW.read_text()
    builds = []
    for name, source in (("old", text), ("new", edit_text(text, pairs))):
        (tmp_path / name).mkdir()
        path = tmp_path / name / WORKFLOW.name
        path.write_text(source)
        builds.append(json.loads((workflow_build(path) / "branchc.json").read_text()))
    report = compare(*builds)
    assert {line.point: line.verdict for line in report if line.verdict != "added"} == verdicts, what
    assert {line.point for line in report if line.verdict == "added"} == added


def edit_text(text: str, pairs: tuple[str, ...]) -> str:
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_waiting_runs_are_counted_at_their_points_and_runs_without_points_strand() -> None:
    from branchc.splitter.compat import with_waiting

    report = compare(manifest(BASE), manifest(dict((e[0], e[1]) for e in EDITS)["remove a yield"]))
    waits = [
        ("plan", "client", "while/log"),
        ("plan", "client", "while/log"),
        ("plan", "client", ""),
        ("x", "draft", ""),
    ]
    counted = {(line.function, line.point): line for line in with_waiting(report, waits)}
    assert counted[("client", "while/log")].waiting == 2 and counted[("client", "while/log")].verdict == "removed"
    assert counted[("client", "for/sample:reply")].waiting == 0
    unknown = counted[("client", "(unknown)")]
    assert unknown.verdict == "removed" and unknown.waiting == 1 and "saved without its points" in unknown.detail
    assert counted[("draft", "(unknown)")].tool == "x"


def test_a_build_made_before_points_is_refused_with_the_fix(folders) -> None:
    folder, env = folders
    assert branchc("compile", "old", "-o", "old-build", cwd=folder, env=env).returncode == 0
    manifest_file = folder / "old-build" / "branchc.json"
    manifest = json.loads(manifest_file.read_text())
    for entry in manifest["modules"].values():
        for function in entry["functions"]:
            for suspension in function["suspensions"]:
                del suspension["point"]
    manifest["compiler"] = "6"
    manifest_file.write_text(json.dumps(manifest))
    done = branchc("compat", "old-build", "new", cwd=folder, env=env)
    assert done.returncode == 1 and "built by an older branchc (compiler 6)" in done.stderr
    assert "compile its sources again" in done.stderr
