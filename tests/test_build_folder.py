"""`branchc compile SOURCES` without `-o`: the default build folder beside the sources, which `serve`,
`run` and `graph` given the same sources use; and a build folder is the compiler's own: modules whose
source is gone are removed, the manifest and the folder agree (even after an interrupted build), and a
folder the compiler did not make is refused unless it is empty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import branchc

from branchc.splitter import build as build_module
from branchc.splitter.build import (
    MANIFEST,
    BuildError,
    build,
    build_folder,
    cache_folder,
    default_build_folder,
    sources_build,
)

WHERE = '''\
from branchc import Context, tool


@tool
def where(ctx: Context):
    """Say which file this module was imported from."""
    yield ctx.log("info", "looking")
    return {"origin": __spec__.origin}
'''

NO_ANSWERS = "sample: []\nelicit: []\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A project folder (the current one) with tools/where.py; the cache is outside it, and empty."""
    folder = (tmp_path / "project").resolve()
    (folder / "tools").mkdir(parents=True)
    (folder / "tools" / "where.py").write_text(WHERE)
    (folder / "answers.yaml").write_text(NO_ANSWERS)
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(folder)
    return folder


def py_files(out: Path) -> set[str]:
    """The module files in a build folder (relative, POSIX), bytecode aside."""
    return {path.relative_to(out).as_posix() for path in out.rglob("*.py") if "__pycache__" not in path.parts}


def manifest(out: Path) -> dict:
    return json.loads((out / MANIFEST).read_text())


def agrees(out: Path) -> bool:
    """The manifest lists exactly the module files the folder holds, and nothing is left pending."""
    data = manifest(out)
    return "pending" not in data and {entry["file"] for entry in data["modules"].values()} == py_files(out)


# -- the default folder ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("tools", "build"),
        ("tools/", "build"),
        ("./tools", "build"),
        ("examples/tools", "examples/build"),
        ("tools/where.py", "tools/build"),
        (".", "build"),
        ("..", "build"),  # contains the current folder: never a folder above it
        ("tools/..", "build"),
    ],
)
def test_the_default_build_folder_is_beside_the_first_source(project: Path, given: str, expected: str) -> None:
    (project / "examples" / "tools").mkdir(parents=True)
    assert default_build_folder([given, "elsewhere"]) == Path(expected)


def test_the_default_build_folder_of_absolute_paths(project: Path, tmp_path: Path) -> None:
    assert default_build_folder([project / "tools"]) == project / "build"
    assert default_build_folder([project]) == Path("build")  # the current folder itself
    assert default_build_folder([tmp_path]) == Path("build")  # a folder that contains it
    other = tmp_path / "other" / "tools"
    assert default_build_folder([other]) == tmp_path / "other" / "build"


@pytest.mark.parametrize(
    ("given", "folder"),
    [("tools", "build"), ("nested/tools", "nested/build"), ("tools/where.py", "tools/build"), (".", "build")],
)
def test_compile_without_out_writes_the_default_folder_and_says_where(project: Path, given: str, folder: str) -> None:
    (project / "nested" / "tools").mkdir(parents=True)
    (project / "nested" / "tools" / "where.py").write_text(WHERE)
    done = branchc("compile", given, cwd=project)
    assert done.returncode == 0, done.stderr
    assert f"into {folder} (serve it: branchc serve {folder})" in done.stderr
    out = project / folder
    data = manifest(out)
    assert data["sources"] == [str((project / given).resolve())]
    assert agrees(out)
    name = "tools.where" if given == "." else "where"
    assert data["modules"][name]["file"] == name.replace(".", "/") + ".py"
    assert {path.name for path in project.iterdir()} - {"nested", "tools", "answers.yaml"} <= {"build"}


def test_compile_with_out_writes_there_as_before(project: Path) -> None:
    done = branchc("compile", "tools", "-o", "elsewhere/out", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "compiled 1 module(s), 0 unchanged, into elsewhere/out (serve it: branchc serve elsewhere/out)" in (
        done.stderr
    )
    assert py_files(project / "elsewhere" / "out") == {"where.py"}
    assert not (project / "build").exists()
    again = branchc("compile", str(project / "tools"), "-o", str(project / "elsewhere" / "out"), cwd=project / "tools")
    assert "compiled 0 module(s), 1 unchanged, into " + str(project / "elsewhere" / "out") in again.stderr


# -- serve, run and graph find the default build ----------------------------------------------------------------


def run_where(project: Path, path: str) -> str:
    done = branchc("run", path, "--responses", "answers.yaml", "--quiet", cwd=project)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["origin"]


def test_run_uses_the_default_build_of_its_file(project: Path, tmp_path: Path) -> None:
    assert branchc("compile", "tools/where.py", cwd=project).returncode == 0
    built = project / "tools" / "build" / "where.py"
    assert Path(run_where(project, "tools/where.py")) == built
    assert not (tmp_path / "cache").exists()  # nothing compiled into the cache
    # a changed source is compiled again there, as compile would
    (project / "tools" / "where.py").write_text(WHERE.replace('"looking"', '"looking again"'))
    assert Path(run_where(project, "tools/where.py")) == built
    assert '"looking again"' in built.read_text()
    assert manifest(built.parent)["sources"] == [str(project / "tools" / "where.py")]
    assert not (tmp_path / "cache").exists()


def test_serve_and_graph_use_the_default_build_of_the_same_sources(project: Path, tmp_path: Path) -> None:
    assert branchc("compile", "tools", cwd=project).returncode == 0
    served = (
        "from branchc.bridge.loading import load_served_tools as load\n"
        "import sys\n"
        "print(sys.modules[load('tools')['where'].client_fn.__module__].__spec__.origin)"
    )
    done = subprocess.run([sys.executable, "-c", served], capture_output=True, text=True, cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == project / "build" / "where.py"
    drawn = branchc("graph", "tools", "--format", "mermaid", cwd=project)
    assert drawn.returncode == 0, drawn.stderr
    assert not (tmp_path / "cache").exists()
    assert sources_build("tools") == Path("build")
    assert sources_build(project / "tools") == project / "build"


def test_a_default_build_of_other_sources_is_not_used(project: Path, tmp_path: Path) -> None:
    (project / "more").mkdir()
    (project / "more" / "other.py").write_text("VALUE = 1\n")
    assert branchc("compile", "tools", "more", cwd=project).returncode == 0  # ./build, from two sources
    before = (project / "build" / MANIFEST).stat().st_mtime_ns
    origin = Path(run_where(project, "tools/where.py"))
    assert origin.is_relative_to(tmp_path / "cache")  # tools/build does not exist: the cache
    assert sources_build("tools") == cache_folder(Path("tools"))  # ./build was made from tools and more
    assert build_folder("tools", warn=None) == cache_folder(Path("tools"))
    assert (project / "build" / MANIFEST).stat().st_mtime_ns == before  # left as compile wrote it
    assert sources_build(".") == cache_folder(Path("."))  # nor for ., whose default folder it is too


# -- the folder is the compiler's own ----------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    (source / "pkg" / "sub").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("")
    (source / "pkg" / "b.py").write_text("B = 2\n")
    (source / "pkg" / "sub" / "__init__.py").write_text("")
    (source / "pkg" / "sub" / "c.py").write_text("C = 3\n")
    (source / "a.py").write_text("A = 1\n")
    (source / "keep.py").write_text("KEEP = 0\n")
    return source


def bytecode(out: Path, file: str) -> Path:
    """A compiled-bytecode file for a module file, as an import would leave it."""
    path = out / file
    cached = path.parent / "__pycache__" / f"{path.stem}.cpython-3{sys.version_info.minor}.pyc"
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(b"\0")
    return cached


def test_modules_whose_source_is_gone_are_removed_with_their_empty_packages(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert not build([tree], out).errors
    assert py_files(out) == {"a.py", "keep.py", "pkg/__init__.py", "pkg/b.py", "pkg/sub/__init__.py", "pkg/sub/c.py"}
    stale = [bytecode(out, "a.py"), bytecode(out, "pkg/sub/c.py"), bytecode(out, "pkg/sub/__init__.py")]
    kept = bytecode(out, "keep.py")
    (tree / "a.py").unlink()
    (tree / "pkg" / "sub" / "c.py").unlink()
    (tree / "pkg" / "sub" / "__init__.py").unlink()
    (tree / "pkg" / "sub").rmdir()
    result = build([tree], out)
    assert sorted(result.cached) == ["keep", "pkg", "pkg.b"]
    assert py_files(out) == {"keep.py", "pkg/__init__.py", "pkg/b.py"}
    assert not (out / "pkg" / "sub").exists()  # the package folder it left empty, its __pycache__ too
    assert not any(path.exists() for path in stale) and kept.exists()
    assert agrees(out)
    # the whole package goes; the build folder itself stays
    for file in ("pkg/b.py", "pkg/__init__.py"):
        (tree / file).unlink()
    (tree / "pkg").rmdir()
    build([tree], out)
    assert py_files(out) == {"keep.py"} and not (out / "pkg").exists()
    assert agrees(out)


def test_a_module_that_no_longer_compiles_is_removed_too(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build([tree], out)
    (tree / "a.py").write_text("def broken(:\n")
    result = build([tree], out)
    assert result.errors
    assert not (out / "a.py").exists() and agrees(out)


def test_a_manifest_from_before_modules_named_their_file(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build([tree], out)
    old = manifest(out)
    for entry in old["modules"].values():
        del entry["file"]
    (out / MANIFEST).write_text(json.dumps(old))
    (tree / "pkg" / "sub" / "c.py").unlink()  # the file the compiler would have written for pkg.sub.c
    build([tree], out)
    assert not (out / "pkg" / "sub" / "c.py").exists() and agrees(out)


def test_an_interrupted_build_leaves_a_folder_the_next_build_knows(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    write = build_module._write
    written: list[Path] = []

    def killed_after_two(target: Path, compiled) -> None:
        write(target, compiled)
        written.append(target)
        if len(written) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(build_module, "_write", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        build([tree], out)
    monkeypatch.setattr(build_module, "_write", write)
    # modules were written, the final manifest was not: the folder is still claimed, and its manifest
    # names every module file it may hold
    data = manifest(out)
    assert data["modules"] == {}
    assert {path.relative_to(out).as_posix() for path in written} <= set(data["pending"])
    assert py_files(out) <= set(data["pending"])
    # the next build takes it as its own, and what it wrote for a source now gone is removed
    gone = written[0]
    (tree / gone.relative_to(out)).unlink()
    result = build([tree], out)
    assert not result.errors
    assert not gone.exists() and agrees(out)


def test_files_a_killed_build_was_writing_are_removed(tree: Path, tmp_path: Path) -> None:
    """The state a build killed mid-write leaves, written by hand: a manifest naming a pending file."""
    out = tmp_path / "out"
    build([tree], out)
    data = manifest(out)
    data["pending"] = ["ghost.py", "pkg/ghost/__init__.py", "../outside.py"]
    (out / MANIFEST).write_text(json.dumps(data))
    (out / "ghost.py").write_text("")
    (out / "pkg" / "ghost").mkdir()
    (out / "pkg" / "ghost" / "__init__.py").write_text("")
    (tmp_path / "outside.py").write_text("")  # never removed: not inside the build
    build([tree], out)
    assert not (out / "ghost.py").exists() and not (out / "pkg" / "ghost").exists()
    assert (tmp_path / "outside.py").exists()
    assert agrees(out)


def test_the_manifest_is_replaced_whole(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    build([tree], out)
    replaced: list[tuple[str, str]] = []
    replace = os.replace
    monkeypatch.setattr(build_module.os, "replace", lambda a, b: (replaced.append((str(a), str(b))), replace(a, b)))
    (tree / "a.py").write_text("A = 10\n")
    build([tree], out)
    assert replaced and all(target == str(out / MANIFEST) for _, target in replaced)
    assert not list(out.glob(f".{MANIFEST}*"))  # no temporary file left behind


# -- refusing a folder the compiler did not make -------------------------------------------------------------------


def test_compile_refuses_a_folder_that_is_not_its_own(project: Path) -> None:
    (project / "mine").mkdir()
    (project / "mine" / "notes.txt").write_text("keep me")
    done = branchc("compile", "tools", "-o", "mine", cwd=project)
    assert done.returncode == 1
    assert "mine: this folder is not empty and is not a branchc build (it has no branchc.json)" in done.stderr
    assert "give a new or empty folder, or remove mine" in done.stderr
    assert "Traceback" not in done.stderr
    assert [path.name for path in (project / "mine").iterdir()] == ["notes.txt"]  # nothing written


def test_compile_refuses_a_default_folder_that_is_not_its_own(project: Path) -> None:
    (project / "build" / "lib").mkdir(parents=True)  # what setuptools leaves
    done = branchc("compile", "tools", cwd=project)
    assert done.returncode == 1
    assert "build: this folder is not empty and is not a branchc build" in done.stderr
    assert "choose another with -o FOLDER" in done.stderr
    assert [path.name for path in (project / "build").iterdir()] == ["lib"]
    assert branchc("compile", "tools", "-o", "tool-build", cwd=project).returncode == 0


def test_compile_takes_an_empty_folder(project: Path) -> None:
    (project / "empty").mkdir()
    done = branchc("compile", "tools", "-o", "empty", cwd=project)
    assert done.returncode == 0, done.stderr
    assert py_files(project / "empty") == {"where.py"} and agrees(project / "empty")


def test_a_manifest_being_written_does_not_make_a_folder_foreign(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / f".{MANIFEST}.1234.tmp").write_text("{")  # a build killed while writing its first manifest
    assert not build([tree], out).errors
    assert agrees(out)


def test_the_cache_follows_the_same_rules(project: Path) -> None:
    cached = cache_folder(Path("tools"))
    cached.mkdir(parents=True)
    (cached / "stray.py").write_text("")
    with pytest.raises(BuildError, match=r"this folder is not empty and is not a branchc build.*or remove"):
        build_folder("tools", warn=None)
    assert [path.name for path in cached.iterdir()] == ["stray.py"]
    (cached / "stray.py").unlink()
    assert build_folder("tools", warn=None) == cached
    assert py_files(cached) == {"where.py"}
    (project / "tools" / "more.py").write_text("X = 1\n")
    build_folder("tools", warn=None)
    (project / "tools" / "more.py").unlink()
    build_folder("tools", warn=None)
    assert py_files(cached) == {"where.py"} and agrees(cached)
