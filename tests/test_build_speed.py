"""A build's up-to-date check and how it reads tools: a build where nothing changed writes nothing and
loads no compiler; a change (a source, its place, the compiler, a module another imports) compiles or
reads again what it must; and tools are read by importing their modules in another process, and only
the modules that have a client phase."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from branchc.splitter import build as build_module
from branchc.splitter.build import MANIFEST, build
from branchc.splitter.compiler import compile_each, compile_module

MODELS = textwrap.dedent(
    """
    from pydantic import BaseModel


    class Params(BaseModel):
        topic: str
    """
)

# its params come from another module of the build; its module code leaves a mark where it runs
TOOL = textwrap.dedent(
    """
    import os
    import pathlib

    from branchc import Context, tool
    from speed_models import Params

    pathlib.Path(MARK).write_text(str(os.getpid()))
    print("module code of speed_tool")  # not the answer of the process that reads the tools

    ask = tool("ask", description="Ask about a topic.", params=Params)


    @ask.client
    def client(handoff, ctx: Context):
        reply = yield ctx.sample(prompt=handoff["topic"])
        return reply.text
    """
)

# compiled, but with no client phase: it can define no tool of its own, so nothing imports it
HELPER = textwrap.dedent(
    """
    import pathlib

    from branchc import resumable

    pathlib.Path(MARK).touch()


    @resumable
    def twice(ctx, prompt):
        first = yield ctx.sample(prompt=prompt)
        second = yield ctx.sample(prompt=prompt)
        return [first.text, second.text]
    """
)

NAMES = ["speed_helper", "speed_models", "speed_tool"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "speed_models.py").write_text(MODELS)
    (source / "speed_tool.py").write_text(TOOL.replace("MARK", repr(str(tmp_path / "tool.imported"))))
    (source / "speed_helper.py").write_text(HELPER.replace("MARK", repr(str(tmp_path / "helper.imported"))))
    return source


def manifest(out: Path) -> dict:
    return json.loads((out / MANIFEST).read_text())


def tools(out: Path) -> dict[str, list[dict]]:
    return {name: entry["tools"] for name, entry in manifest(out)["modules"].items()}


def files(out: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()}


def test_a_build_with_nothing_changed_writes_nothing_and_loads_no_compiler(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert not build([tree], out).errors
    before = files(out)
    script = (
        "import json, sys; from branchc.splitter.build import build; r = build([sys.argv[1]], sys.argv[2]); "
        "print(json.dumps([r.compiled, sorted(r.cached), sorted({'libcst', 'networkx'} & set(sys.modules))]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tree), str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], NAMES, []]
    assert files(out) == before


def test_tools_are_read_in_another_process_and_only_where_there_is_a_client(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert not build([tree], out).errors
    found = tools(out)
    assert found["speed_helper"] == [] and found["speed_models"] == []
    (ask,) = found["speed_tool"]
    assert (ask["name"], ask["description"], ask["client"]) == ("ask", "Ask about a topic.", "client")
    assert int((tmp_path / "tool.imported").read_text()) != os.getpid()  # imported to read its tool, elsewhere
    assert not (tmp_path / "helper.imported").exists()  # no client phase: not imported at all
    # what an import here reads is what the manifest holds
    assert build_module._describe(str(out.resolve()), "speed_tool") == ([ask], None)


def test_without_fork_a_fresh_interpreter_reads_the_same_tools(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not build([tree], tmp_path / "forked").errors
    monkeypatch.setattr(build_module, "_can_fork", lambda: False)
    result = build([tree], tmp_path / "fresh")
    assert not result.errors, result.errors
    assert tools(tmp_path / "fresh") == tools(tmp_path / "forked")
    assert tools(tmp_path / "fresh")["speed_tool"]


def test_a_change_to_a_module_another_imports_reads_its_tools_again(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert not build([tree], out).errors
    assert set(tools(out)["speed_tool"][0]["input_schema"]["properties"]) == {"topic"}
    (tree / "speed_models.py").write_text(MODELS + "    rounds: int = 3\n")
    result = build([tree], out)
    assert result.compiled == ["speed_models"] and "speed_tool" in result.cached
    assert set(tools(out)["speed_tool"][0]["input_schema"]["properties"]) == {"topic", "rounds"}


def test_another_compiler_or_another_place_compiles_again(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert not build([tree], out).errors
    assert build([tree], out).compiled == []
    monkeypatch.setattr(build_module, "_FINGERPRINT", "another compiler")
    assert sorted(build([tree], out).compiled) == NAMES
    moved = tmp_path / "moved"
    shutil.copytree(tree, moved)
    assert sorted(build([moved], out).compiled) == NAMES  # same text, but the compiled text names its source
    assert str((moved / "speed_tool.py").resolve()) in (out / "speed_tool.py").read_text()


def test_the_fingerprint_reads_the_compiler_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = Path(build_module.__file__).parent
    copy = tmp_path / "splitter"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(build_module, "__file__", str(copy / "build.py"))
    monkeypatch.setattr(build_module, "_FINGERPRINT", None)
    first = build_module._fingerprint()
    with (copy / "lower.py").open("a") as file:
        file.write("\n# an edit\n")
    monkeypatch.setattr(build_module, "_FINGERPRINT", None)
    assert build_module._fingerprint() != first


def test_a_module_that_fails_to_import_fails_again_on_the_next_build(tree: Path, tmp_path: Path) -> None:
    (tree / "speed_tool.py").write_text((tree / "speed_tool.py").read_text() + "\nraise RuntimeError('boom')\n")
    out = tmp_path / "out"
    for compiled in (NAMES, ["speed_tool"]):  # not taken for up to date the second time
        result = build([tree], out)
        assert [d.message for d in result.errors] == ["importing the compiled module failed: RuntimeError('boom')"]
        assert sorted(result.compiled) == compiled


def test_compile_each_gives_what_compile_module_gives_and_collects_errors() -> None:
    good = "from branchc import resumable\n\n\n@resumable\ndef gen():\n    x = yield 1\n    return x\n"
    (first, first_found), (second, second_found) = compile_each([(good, "good.py"), ("def broken(:\n", "bad.py")])
    assert first is not None and first.code == compile_module(good, "good.py").code and first_found == []
    assert second is None and [d.path for d in second_found] == ["bad.py"] and second_found[0].severity == "error"


@pytest.mark.parametrize("fork", [True, False])
def test_a_module_that_ends_the_process_reading_tools_is_an_error(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork: bool
) -> None:
    monkeypatch.setattr(build_module, "_can_fork", lambda: fork)
    (tree / "speed_tool.py").write_text((tree / "speed_tool.py").read_text() + "\nos._exit(3)\n")
    result = build([tree], tmp_path / "out")
    (error,) = result.errors
    assert error.path.endswith("speed_tool.py")
    assert "importing the compiled modules to read their tools" in error.message
    assert "ended the process" in error.message if fork else "3" in error.message


def test_a_module_rebuilt_is_imported_afresh_here(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert not build([tree], out).errors
    monkeypatch.syspath_prepend(str(out))
    monkeypatch.delitem(sys.modules, "speed_models", raising=False)
    import speed_models  # noqa: F401  (the build's module, imported here as serving does)

    assert build([tree], out).compiled == [] and "speed_models" in sys.modules  # nothing changed: kept
    (tree / "speed_models.py").write_text(MODELS + "    rounds: int = 3\n")
    assert build([tree], out).compiled == ["speed_models"]
    assert "speed_models" not in sys.modules  # the next import reads the new module
