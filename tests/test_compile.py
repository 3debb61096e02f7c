"""`branchc compile` and `branchc check`, snapshots across processes, and refusals of bad data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

GAME = textwrap.dedent(
    '''
    """A small compiled module: a counter that sums what it is sent."""
    from branchc import resumable


    def helper(x):
        return 10 // x


    @resumable
    def counter(limit):
        total = 0
        seen = []
        for step in range(limit):
            sent = yield total
            seen.append(sent)
            total += helper(sent)
        return total, seen
    '''
)


def branchc(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchc", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def python(code: str, *, path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(path)},
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    (source / "games").mkdir(parents=True)
    (source / "games" / "__init__.py").write_text("")
    (source / "games" / "counter.py").write_text(GAME)
    (source / "plain.py").write_text("VALUE = 42\n")
    return source


def test_compile_writes_modules_with_package_structure_and_a_manifest(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = branchc("compile", str(tree), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "compiled 3 module(s), 0 unchanged" in done.stderr
    assert (out / "games" / "counter.py").is_file()
    assert (out / "games" / "__init__.py").is_file()
    assert (out / "plain.py").read_text() == "VALUE = 42\n"
    manifest = json.loads((out / "branchc.json").read_text())
    function = manifest["modules"]["games.counter"]["functions"][0]
    assert function["qualname"] == "counter"
    assert [state["label"] for state in function["states"]] == [0, 1]
    assert {(t["source"], t["target"]) for t in function["transitions"]} >= {(0, 1), (1, 1)}
    (suspension,) = function["suspensions"]
    assert suspension["span"][:2] == [GAME.splitlines().index("        sent = yield total") + 1, 16]
    assert suspension["live"] == ["_bc_it1", "seen", "total"]
    assert len(function["hash"]) == 16
    # unchanged files are not compiled again; a changed one is
    again = branchc("compile", str(tree), "-o", str(out))
    assert "compiled 0 module(s), 3 unchanged" in again.stderr
    (tree / "plain.py").write_text("VALUE = 43\n")
    third = branchc("compile", str(tree), "-o", str(out))
    assert "compiled 1 module(s), 2 unchanged" in third.stderr


def test_compiled_tracebacks_point_at_the_source(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert branchc("compile", str(tree), "-o", str(out)).returncode == 0
    done = python("from games.counter import counter\ng = counter(3)\nnext(g)\ng.send(0)\n", path=out, cwd=tmp_path)
    source = tree / "games" / "counter.py"
    lines = GAME.splitlines()
    assert (
        f'File "{source.resolve()}", line {lines.index("        total += helper(sent)") + 1}, in counter' in done.stderr
    )
    assert f"line {lines.index('    return 10 // x') + 1}, in helper" in done.stderr
    assert "ZeroDivisionError" in done.stderr


def test_a_snapshot_resumes_in_a_fresh_process(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert branchc("compile", str(tree), "-o", str(out)).returncode == 0
    first = python(
        "import json\nfrom games.counter import counter\nfrom branchc import snapshot\n"
        "g = counter(3)\nnext(g)\ng.send(1)\nprint(json.dumps(snapshot(g)))\n",
        path=out,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    snapshot_file = tmp_path / "snap.json"
    snapshot_file.write_text(first.stdout)
    second = python(
        "import json, sys\nfrom branchc import resume\n"
        "g = resume(json.load(open(sys.argv[1] if len(sys.argv) > 1 else 'snap.json')),"
        " allowed_modules={'games.counter'})\n"
        "print(g.send(2))\ntry:\n    g.send(5)\nexcept StopIteration as stop:\n    print(stop.value)\n",
        path=out,
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.split("\n")[:2] == ["15", "(17, [1, 2, 5])"]


def test_a_snapshot_moves_to_a_compatible_build_and_is_refused_by_another(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert branchc("compile", str(tree), "-o", str(out)).returncode == 0
    first = python(
        "import json\nfrom games.counter import counter\nfrom branchc import snapshot\n"
        "g = counter(3)\nnext(g)\nprint(json.dumps(snapshot(g)))\n",
        path=out,
        cwd=tmp_path,
    )
    (tmp_path / "snap.json").write_text(first.stdout)
    resume = (
        "import json\nfrom branchc import resume\n"
        "g = resume(json.load(open('snap.json')), allowed_modules={'games.counter'})\n"
        "print(g.send(2))\n"
    )
    # the same point, carrying the same variables: the snapshot goes on in the new code
    (tree / "games" / "counter.py").write_text(GAME.replace("total += helper(sent)", "total -= helper(sent)"))
    assert branchc("compile", str(tree), "-o", str(out)).returncode == 0
    moved = python(resume, path=out, cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.split() == ["-5"]
    # what the point carries changed: refused, naming the point and the difference
    (tree / "games" / "counter.py").write_text(GAME.replace("seen", "sent_values"))
    assert branchc("compile", str(tree), "-o", str(out)).returncode == 0
    second = python(resume, path=out, cwd=tmp_path)
    assert second.returncode == 1
    assert "counter waits at point 'for/value:sent', saved by another build" in second.stderr
    assert "this build no longer carries seen" in second.stderr and "it carries sent_values" in second.stderr


def test_tampered_snapshots_are_refused_without_importing_anything(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert branchc("compile", str(tree), "-o", str(out)).returncode == 0
    code = textwrap.dedent(
        """
        import copy, json, sys
        from games.counter import counter
        from branchc import resume, snapshot
        from branchc.continuation.codec import SnapshotDataError
        from branchc.continuation.errors import SnapshotError
        g = counter(3)
        next(g)
        good = snapshot(g)
        entry = good["graph"]["objects"][0] if good["graph"]["objects"] else None
        cases = {
            "not a snapshot": {"hello": 1},
            "wrong version": {**good, "branchc": 99},
            "foreign function": json.loads(json.dumps(good).replace("games.counter:counter", "os:system")),
            "unknown label": json.loads(json.dumps(good).replace('"label": 1', '"label": 7')),
            "unknown variable": json.loads(json.dumps(good).replace('"seen"', '"evil"')),
        }
        before = set(sys.modules)
        for name, data in cases.items():
            try:
                resume(data)
            except (SnapshotDataError, SnapshotError) as error:
                print(name, "->", type(error).__name__, error)
            else:
                print(name, "-> ACCEPTED")
        print("imported:", sorted(set(sys.modules) - before))
        """
    )
    done = python(code, path=out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if "ACCEPTED" in line], done.stdout
    assert "roots['gen'][1].fn: os:system: module 'os' is not a compiled module loaded here" in done.stdout
    assert "has no suspension point 7" in done.stdout
    assert "keeps no variable 'evil' at suspended 1" in done.stdout
    assert lines[-1] == "imported: []"


def test_check_reports_compiler_style_with_hints(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        textwrap.dedent(
            """
            import threading
            from branchc import resumable


            def numbers():
                yield 1


            @resumable
            def reader(path):
                f = open(path)
                it = numbers()
                line = yield f.readline()
                yield next(it)
                with threading.Lock():
                    yield "inside"
                return line


            @resumable
            async def later():
                yield 1


            @resumable
            def plain():
                return 1
            """
        )
    )
    done = branchc("check", str(bad))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert (
        f"{bad}:16:5: warning: the context manager of this `with` is a lock, and the yield at line 17 is inside "
        f"it; a snapshot there cannot carry it" in done.stderr
    )
    assert "hint: release it and drop it before the yield" in done.stderr
    lines = bad.read_text().splitlines()
    assert f"{bad}:{lines.index('async def later():') + 1}:1: error: later is async" in done.stderr
    assert (
        f"{bad}:{lines.index('def plain():') + 1}:1: error: plain has no yield, so it is not a generator" in done.stderr
    )
    syntax = tmp_path / "syntax.py"
    syntax.write_text("x = 1\ndef f(:\n    pass\n")
    done = branchc("check", str(syntax))
    assert done.returncode == 1
    assert f"{syntax}:2:7: error: syntax error: invalid syntax" in done.stderr
    assert "Traceback" not in done.stderr


def test_check_warns_about_values_that_cannot_travel(tmp_path: Path) -> None:
    warn = tmp_path / "warn.py"
    warn.write_text(
        textwrap.dedent(
            """
            from branchc import resumable


            def numbers():
                yield 1


            @resumable
            def reader(path):
                f = open(path)
                it = numbers()
                line = yield f.readline()
                yield next(it)
                f.close()
                return line
            """
        )
    )
    done = branchc("check", str(warn))
    assert done.returncode == 0
    assert f"{warn}:11:5: warning: 'f' holds an open file and is live across the yield at line 13" in done.stderr
    assert f"{warn}:12:5: warning: 'it' holds a native generator (numbers(...))" in done.stderr
    assert "hint: mark numbers @resumable so it compiles" in done.stderr


def test_compile_refuses_what_check_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from branchc import resumable\n\n@resumable\ndef plain():\n    return 1\n")
    done = branchc("compile", str(bad), "-o", str(tmp_path / "out"))
    assert done.returncode == 1
    assert f"{bad}:4:1: error: plain has no yield" in done.stderr
    missing = branchc("compile", str(tmp_path / "nope"), "-o", str(tmp_path / "out"))
    assert missing.returncode == 1
    assert "nope: no such file or folder" in missing.stderr


DEEP = {
    "loops": "\n".join(
        ["from branchc import resumable", "", "@resumable", "def gen():"]
        + [f"{'    ' * (depth + 1)}for v{depth} in range(1):" for depth in range(14)]
        + [f"{'    ' * 15}try:", f"{'    ' * 16}yield 1", f"{'    ' * 15}finally:", f"{'    ' * 16}yield 2"]
    )
    + "\n",
    "finally": "\n".join(
        ["from branchc import resumable", "", "@resumable", "def gen():"]
        + [f"{'    ' * (depth + 1)}try:" for depth in range(11)]
        + [f"{'    ' * 12}yield 0"]
        + [
            line
            for depth in reversed(range(11))
            for line in (f"{'    ' * (depth + 1)}finally:", f"{'    ' * (depth + 2)}yield {depth}")
        ]
    )
    + "\n",
    "expression": "from branchc import resumable\n\n@resumable\ndef gen():\n    return "
    + " + ".join(["(yield)"] + ["1"] * 800)
    + "\n",
}


@pytest.mark.parametrize("kind", ["loops", "finally"])
def test_check_and_compile_agree_on_what_is_too_deep(kind: str, tmp_path: Path) -> None:
    """What CPython compiles but the compiled form cannot (it nests more static blocks) is one error,
    on the source, from check and from compile alike: never a SyntaxError at import."""
    deep = tmp_path / "deep.py"
    deep.write_text(DEEP[kind])
    checked = branchc("check", str(deep))
    compiled = branchc("compile", str(deep), "-o", str(tmp_path / "out"))
    assert checked.returncode == compiled.returncode == 1
    line = next(line for line in checked.stderr.splitlines() if ": error: " in line)
    assert line.startswith(f"{deep}:") and "too many statically nested blocks" in line and "allows 20" in line
    assert line in compiled.stderr
    assert "Traceback" not in checked.stderr + compiled.stderr


def test_a_long_expression_with_a_yield_compiles_and_runs(tmp_path: Path) -> None:
    """800 terms nest deeper than Python's default recursion limit lets LibCST walk; CPython compiles it."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "deep.py").write_text(DEEP["expression"])
    assert branchc("check", str(tmp_path / "src")).returncode == 0
    assert branchc("compile", str(tmp_path / "src"), "-o", str(tmp_path / "out")).returncode == 0
    done = python(
        "from deep import gen\ng = gen()\nnext(g)\ntry:\n    g.send(5)\n"
        "except StopIteration as s:\n    print(s.value)\n",
        path=tmp_path / "out",
        cwd=tmp_path,
    )
    assert done.stdout.strip() == "805", done.stderr


def test_names_of_the_compiler_are_reserved(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from branchc import resumable\n\n_bc_rt = None\n\n@resumable\ndef gen():\n    yield 1\n")
    done = branchc("check", str(bad))
    assert done.returncode == 1
    assert f"{bad}:3:1: error: '_bc_rt': names that start with '_bc_' are reserved for branchc's compiled code" in (
        done.stderr
    )
