"""Builds kept beside the served one (runtime/builds.py): a run no served build can take finishes on its own.

The old build and the new one are loaded in one process under the same module names: the new one as it is served,
the old one kept under a package of its own. A run saved at each place it waits on the old build, then refused by
the new one, finishes on the kept old build exactly as a fresh run of the old code fed the same answers (CPython
runs both), and what it saves on the way still names its modules as its build named them.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from branchc.runtime.builds import (
    KEEP_AT_LEAST,
    build_id,
    builds_root,
    drop_unused_builds,
    keep_build,
    kept_build,
    kept_builds,
    load_run_or_kept,
    served_with,
)
from branchc.runtime.compiled import import_build
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import RunStateError, dump_run, load_run
from branchc.splitter.build import build
from branchc.store import RunMeta, RunRecord, open_store
from branchc.store.keys import KeyRing

TOOL = "kb_plan"  # module names of their own: other tests' modules are not disturbed
SHAPES = "kb_shapes"

SHAPES_SOURCE = textwrap.dedent(
    """
    from pydantic import BaseModel


    class Note(BaseModel):
        text: str
        step: int
    """
)

TOOL_SOURCE = textwrap.dedent(
    """
    from pydantic import BaseModel

    import kb_shapes
    from branchc import Context, resumable, tool
    from kb_shapes import Note


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
            notes.append(kb_shapes.Note(text=reply.text, step=step))
        body = yield ctx.branch(draft, handoff["topic"])
        while True:
            choice = yield ctx.elicit("pick", message="pick one", schema=Choice)
            if choice.accepted:
                break
        final = yield ctx.sample(prompt="polish " + body)
        return {"notes": [n.text for n in notes if isinstance(n, Note)], "pick": choice.content.pick,
                "final": final.text, "build": "old"}
    """
)
STOPS = 7  # the places a run waits: 3 samples, 2 in the branch, the form (twice: declined once), the last sample
#: the new build: what the loop and the branch carry is renamed, so no run waiting in or after them can move there
NEW_SOURCE = TOOL_SOURCE.replace("notes", "items").replace("outline", "sketch").replace('"old"', '"new"')


def answer(request: Any) -> Any:
    if request.kind == "sample":
        return f"reply {request.number}"
    return {"action": "decline"} if request.number % 2 else {"action": "accept", "content": {"pick": request.number}}


def drive(tool: Any, stop: int | None = None, loaded: tuple[Any, Machine] | None = None) -> Any:
    """A run of `tool` answered by `answer`: its saved text when it waits for the `stop`-th time, else (ok,
    result) at its end; `loaded`: a run to go on from instead of a new one."""
    if loaded is None:
        handoff, machine = {"topic": "t"}, Machine(tool.name, "call-1", tool.limits)
        machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
        machine.advance()
    else:
        handoff, machine = loaded
    waited = 0
    while not machine.done:
        machine.take_outbox()
        if waited == stop:
            saved = dump_run(handoff, machine)
            machine.release()
            return saved
        for request in list(machine.pending):
            machine.answer(request.key, answer(request))
        machine.advance()
        waited += 1
    return machine.ok, machine.result


def compiled(folder: Path, tool_source: str) -> Path:
    """The two modules compiled into folder/build."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / f"{TOOL}.py").write_text(tool_source)
    (folder / "src" / f"{SHAPES}.py").write_text(SHAPES_SOURCE)
    result = build([folder / "src"], folder / "build")
    assert not result.errors, result.errors
    return folder / "build"


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A cache of this test's own, and the modules it imports forgotten afterwards."""
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith(("kb_", "_bcb_"))]:
        del sys.modules[name]


def test_a_run_the_new_build_cannot_take_finishes_on_the_kept_old_one(isolated) -> None:
    old = compiled(isolated / "old", TOOL_SOURCE)
    ident = keep_build(old)
    kept = kept_build(ident)
    assert kept is not None and kept.modules == {TOOL, SHAPES} and set(kept.tools) == {"plan"}
    with kept.reading():
        texts = [drive(kept.tools["plan"], stop) for stop in range(STOPS)]
        expected = drive(kept.tools["plan"])
    assert expected[0] and expected[1]["build"] == "old"
    assert all(isinstance(text, str) and "_bcb_" not in text for text in texts)  # names as the build named them

    new = import_build(compiled(isolated / "new", NEW_SOURCE))  # the deploy: the same module names
    assert not new.errors and sys.modules[TOOL].__file__.startswith(str(isolated / "new"))
    assert drive(new.tools["plan"])[1]["build"] == "new"
    for text in texts:
        with pytest.raises(RunStateError, match=r"no longer carries (notes|outline)"):
            load_run(text)
        handoff, machine, on = load_run_or_kept(text, ident)
        assert on is kept
        with on.reading():  # one more wait answered and saved on the kept build, then the rest from that
            step = drive(on.tools["plan"], 1, (handoff, machine))
            if isinstance(step, str):
                assert "_bcb_" not in step  # still the names its build gave
                step = drive(on.tools["plan"], loaded=load_run(step))
        assert step == expected


def test_a_kept_run_moves_to_the_new_build_once_it_waits_where_the_new_build_can_take_it(isolated) -> None:
    """The new build changes only the last prompt: a run saved on the old build moves over at once, as the served
    build comes first."""
    old = compiled(isolated / "old", TOOL_SOURCE)
    ident = keep_build(old)
    kept = kept_build(ident)
    with kept.reading():
        text = drive(kept.tools["plan"], 2)
        expected = drive(kept.tools["plan"])
    new = import_build(compiled(isolated / "new", TOOL_SOURCE.replace('"polish "', '"polish this: "')))
    handoff, machine, on = load_run_or_kept(text, ident)
    assert on is None  # taken by the served build
    assert drive(new.tools["plan"], loaded=(handoff, machine)) == expected  # the same answers, the same end


def test_not_kept_refuses_naming_the_point_and_the_build(isolated) -> None:
    old = compiled(isolated / "old", TOOL_SOURCE)
    ident = keep_build(old)
    with kept_build(ident).reading():
        text = drive(kept_build(ident).tools["plan"], 1)
    import_build(compiled(isolated / "new", NEW_SOURCE))
    other = "0123456789abcdef"
    with pytest.raises(RunStateError) as refused:
        load_run_or_kept(text, other)
    message = str(refused.value)
    assert (
        "waits at point 'for/sample:reply'" in message and f"the build that saved it ({other}) is not kept" in message
    )
    for forged in ("../../etc", "/tmp", 7, None, ident.upper()):  # a record's build is data: never a path
        with pytest.raises(RunStateError, match="no longer carries notes"):
            load_run_or_kept(text, forged)


def test_a_build_id_is_its_content_not_its_place(isolated) -> None:
    first = compiled(isolated / "a", TOOL_SOURCE)
    moved = isolated / "elsewhere"
    first.rename(moved)
    assert build_id(moved) == keep_build(moved) == keep_build(moved)  # kept once
    assert list(kept_builds()) == [build_id(moved)]
    changed = compiled(isolated / "b", NEW_SOURCE)
    assert build_id(changed) != build_id(moved)


def test_a_kept_build_imports_its_own_modules_on_the_same_lines() -> None:
    from branchc.runtime.builds import _imports_kept

    source = textwrap.dedent(
        """\
        import kb_shapes
        import os, kb_shapes as s
        import kb_pkg.sub
        from kb_shapes import (
            Note,
            Other,
        )
        from . import sibling
        from kb_shapes_not import x  # another module, though its name starts the same
        import json
        def f():
            import kb_pkg.sub as deep
            return deep
        value = 1
        """
    )
    out = _imports_kept(source, {"kb_shapes", "kb_pkg"}, "_bcb_0123456789abcdef")
    lines = out.splitlines()
    assert len(lines) == len(source.splitlines()) and lines[-1] == "value = 1"
    assert lines[0] == "import _bcb_0123456789abcdef.kb_shapes as kb_shapes"
    assert lines[1] == "import os; import _bcb_0123456789abcdef.kb_shapes as s"
    assert lines[2] == '__import__("_bcb_0123456789abcdef.kb_pkg.sub"); import _bcb_0123456789abcdef.kb_pkg as kb_pkg'
    assert lines[3].startswith("from _bcb_0123456789abcdef.kb_shapes import Note, Other")
    assert lines[7:10] == source.splitlines()[7:10]  # relative, another module's, the standard library's
    assert lines[11] == "    import _bcb_0123456789abcdef.kb_pkg.sub as deep"
    compile(out, "kept.py", "exec")  # still Python
    assert ast.dump(ast.parse(out).body[-1]) == ast.dump(ast.parse(source).body[-1])


def test_unused_builds_are_dropped_and_used_or_recent_ones_kept(isolated) -> None:
    idents = []
    for index in range(3):
        idents.append(keep_build(compiled(isolated / str(index), TOOL_SOURCE + f"\n# {index}\n")))
    old = time.time() - KEEP_AT_LEAST - 60
    for ident in idents[:2]:
        os.utime(builds_root() / ident, (old, old))
    stale, fresh = builds_root() / f".{idents[1]}.1.2.tmp", builds_root() / f".{idents[1]}.3.4.tmp"
    for scratch in (stale, fresh):  # what a process killed while keeping a build left
        (scratch / "_bcb_x").mkdir(parents=True)
    os.utime(stale, (old, old))
    assert drop_unused_builds({idents[0]}) == [idents[1]]  # named by a run: kept; new: kept
    assert sorted(kept_builds()) == sorted([idents[0], idents[2]])
    assert fresh.is_dir() and not stale.exists()


def test_a_build_another_stores_server_served_is_left_by_this_stores_gc(isolated) -> None:
    """The cache is the machine's: `runs gc` of store A drops no build a server of store B served, until B's own gc
    finds none of B's runs naming it."""
    ident = keep_build(compiled(isolated / "old", TOOL_SOURCE))
    served_with(ident, "sqlite:///a.db")
    served_with(ident, "redis://127.0.0.1:6379/0")
    old = time.time() - KEEP_AT_LEAST - 60
    os.utime(builds_root() / ident, (old, old))
    assert drop_unused_builds(set(), store="sqlite:///a.db") == []  # B's server served it
    assert drop_unused_builds({ident}, store="redis://127.0.0.1:6379/0") == []  # B's runs name it
    assert drop_unused_builds(set(), store="redis://127.0.0.1:6379/0") == [ident]
    assert kept_builds() == {}


def test_runs_gc_drops_the_kept_builds_no_stored_run_names(isolated) -> None:
    idents = [keep_build(compiled(isolated / str(index), TOOL_SOURCE + f"\n# {index}\n")) for index in range(2)]
    old = time.time() - KEEP_AT_LEAST - 60
    for ident in idents:
        os.utime(builds_root() / ident, (old, old))
    url = f"sqlite:///{isolated / 'runs.db'}"
    key = "k" * 40
    store = open_store(url, KeyRing([key]))
    meta = RunMeta(era="2026-07-28", code_hash="c", extra={"build": idents[0], "tool": "plan"})
    store.create(RunRecord.new("plan", "{}", ttl=600, meta=meta))
    store.close()
    env = {**os.environ, "BRANCHC_STATE_KEY": key}
    out = subprocess.run(
        [sys.executable, "-m", "branchc", "runs", "gc", "--store", url, "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["builds_dropped"] == [idents[1]]
    assert list(kept_builds()) == [idents[0]]


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_a_kept_runs_branches_step_on_executors_in_its_own_build(isolated, kind) -> None:
    """Its branch steps travel to workers (a thread of this process, whose context is not the round's, or a
    process) with the kept build's folder: each worker reads them in that build."""
    from concurrent.futures import ThreadPoolExecutor

    from branchc.executors import open_executor

    old = compiled(isolated / "old", TOOL_SOURCE)
    ident = keep_build(old)
    kept = kept_build(ident)
    with kept.reading():
        text = drive(kept.tools["plan"], 2)  # in the loop, before the branch
        expected = drive(kept.tools["plan"])
    import_build(compiled(isolated / "new", NEW_SOURCE))
    executor = ThreadPoolExecutor(1) if kind == "threads" else open_executor("process:1")
    try:
        handoff, machine, on = load_run_or_kept(text, ident)
        assert on is kept
        machine.executor = executor
        with warnings.catch_warnings(), on.reading():
            warnings.simplefilter("error")  # a step that could not travel would warn, and run here
            assert drive(on.tools["plan"], loaded=(handoff, machine)) == expected
    finally:
        executor.shutdown()


def test_runs_migrate_moves_waiting_runs_to_a_kept_build_by_its_id(isolated) -> None:
    from branchc.bridge.durable import run_meta, tool_code_hash

    old = keep_build(compiled(isolated / "old", TOOL_SOURCE))
    newer = import_build(compiled(isolated / "new", TOOL_SOURCE.replace('"polish "', '"polish this: "')))
    tool = newer.tools["plan"]
    text = drive(tool, 2)
    handoff, machine = load_run(text)
    meta = run_meta("2026-07-28", tool, machine)
    machine.release()
    url, key = f"sqlite:///{isolated / 'runs.db'}", "k" * 40
    store = open_store(url, KeyRing([key]))
    run = store.create(RunRecord.new("plan", text, ttl=600, meta=meta)).run_id
    env = {**os.environ, "BRANCHC_STATE_KEY": key}
    command = [sys.executable, "-m", "branchc", "runs", "migrate", "--to", old, "--store", url, "--json"]
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert [(e["run_id"], e["outcome"]) for e in json.loads(out.stdout)] == [(run, "moved")]
    moved = store.load(run)
    store.close()
    assert moved.meta.extra["build"] == old != meta.extra["build"]
    with kept_build(old).reading():
        assert moved.meta.code_hash == tool_code_hash(kept_build(old).tools["plan"]) != meta.code_hash
        handoff, machine = load_run(moved.saved)  # saved by the kept build: read there as it is
        assert drive(kept_build(old).tools["plan"], loaded=(handoff, machine)) == drive(tool)
