"""Resuming is safe on untrusted data, and needs nothing but the build on sys.path.

A fresh process with only the build folder on sys.path resumes a snapshot by itself: the
module is found through the build's manifest and imported from there. A crafted snapshot
cannot name anything the builds do not record (no attribute chains, no imports, no eval),
cannot swap what the resumed code calls (a kept method comes back only from an object of the class
the code took it from, where the compiler knows it), and cannot plant an exception that escapes
`except Exception` where nothing around the yield could have caught it; each attempt is refused
with an error that names the place in the data,
before anything of the program runs, and nothing new is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _codec_tables import tabled

from branchc import snapshot
from branchc.splitter.build import build

TOOL = textwrap.dedent(
    '''
    """A compiled module that keeps callables across its yields."""
    import os

    from branchc import resumable


    def run_command(text):  # a plain function of the module: a snapshot may not name it
        os.system(text)


    @resumable
    def collect(count):
        answers = []
        for _ in range(count):
            answers.append((yield len(answers)))
        print("collected", answers)
        return answers


    @resumable
    def log_each(count):
        add = []
        push = add.append
        for _ in range(count):
            push((yield "next"))
        return add


    @resumable
    def guarded():
        try:
            got = yield "go"
        except Exception as error:
            return ("caught", repr(error))
        return ("got", got)
    '''
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trust")
    (root / "src" / "tools").mkdir(parents=True)
    (root / "src" / "tools" / "__init__.py").write_text("")
    (root / "src" / "tools" / "box.py").write_text(TOOL)
    out = root / "build"
    result = build([root / "src"], out)
    assert not result.errors, result.errors
    return out


def _run(code: str, built: Path, data: object, extra_path: list[str] | None = None) -> subprocess.CompletedProcess:
    """A fresh interpreter with only the build (and branchc) importable; the snapshot comes on stdin."""
    path = [str(built), *(extra_path or [])]
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=built.parent,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
    )


def _snapshot_in_process(built: Path, function: str, sends: list) -> dict:
    code = f"""
    import json, sys
    from tools import box
    from branchc import snapshot
    generator = box.{function}(3)
    next(generator)
    for value in {sends!r}:
        generator.send(value)
    print(json.dumps(snapshot(generator)))
    """
    done = _run(code, built, None)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


RESUME = """
import json, sys
from branchc import resume
before = set(sys.modules)
data = json.load(sys.stdin)
try:
    generator = resume(data)
except Exception as error:
    print("REFUSED", type(error).__name__, error)
    print("IMPORTED", sorted(set(sys.modules) - before))
    raise SystemExit(0)
print("IMPORTED", sorted(set(sys.modules) - before))
for value in ["x", "y", "z"]:
    try:
        print("YIELD", generator.send(value))
    except StopIteration as stop:
        print("RETURN", stop.value)
        break
"""


def test_a_fresh_process_resumes_with_only_the_build_on_sys_path(built: Path) -> None:
    data = _snapshot_in_process(built, "collect", ["a"])
    done = _run(RESUME, built, data)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    imported = eval(lines[0].removeprefix("IMPORTED "))  # a list literal of module names, printed by the child
    assert {"tools", "tools.box"} <= set(imported)
    assert lines[1:] == ["YIELD 2", "collected ['a', 'x', 'y']", "RETURN ['a', 'x', 'y']"]


def test_a_module_no_manifest_lists_is_refused_and_not_imported(built: Path, tmp_path: Path) -> None:
    data = _snapshot_in_process(built, "collect", [])
    (tmp_path / "tools2").mkdir()
    (tmp_path / "tools2" / "__init__.py").write_text("print('IMPORTED TOOLS2 CODE')\n")
    (tmp_path / "tools2" / "box.py").write_text(TOOL)
    renamed = json.loads(json.dumps(data).replace('"tools.box:', '"tools2.box:'))
    done = _run(RESUME, built, renamed, extra_path=[str(tmp_path)])
    assert "IMPORTED TOOLS2 CODE" not in done.stdout
    assert "REFUSED SnapshotError" in done.stdout
    assert "no build manifest (branchc.json) on sys.path lists it" in done.stdout
    assert "tools2" not in done.stdout.split("IMPORTED", 1)[1]


def test_a_module_shadowed_by_another_folder_is_not_imported_from_there(built: Path, tmp_path: Path) -> None:
    data = _snapshot_in_process(built, "collect", [])
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("print('IMPORTED SHADOW')\n")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RESUME)],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=built.parent,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(built)])},
    )
    assert "IMPORTED SHADOW" not in done.stdout, done.stdout
    assert "REFUSED SnapshotError" in done.stdout
    assert "put that build folder first on sys.path" in done.stdout


def _crafted(data: dict, change) -> dict:
    crafted = json.loads(json.dumps(data))
    entry = crafted["graph"]["roots"]["gen"][1]
    change(entry)
    tabled(crafted["graph"])  # what was planted written readably: its classes and field names go to the tables
    return crafted


def _set_var(name: str, value) -> object:
    return lambda entry: entry["vars"].__setitem__(name, value)


ATTACKS = {
    "a module attribute chain": (
        _set_var("answers", ["@", {"t": "ref", "ref": "tools.box:os.popen"}]),
        "tools.box:os.popen is not a function a build compiled",
    ),
    "the runtime's importlib": (
        _set_var("answers", ["@", {"t": "ref", "ref": "tools.box:_bc_rt.importlib.import_module"}]),
        "is not a function a build compiled",
    ),
    "builtins.eval": (
        _set_var("answers", ["@", {"t": "ref", "ref": "builtins:eval"}]),
        "builtins:eval is not a builtin a snapshot may name",
    ),
    "builtins.getattr": (
        _set_var("answers", ["@", {"t": "ref", "ref": "builtins:getattr"}]),
        "builtins:getattr is not a builtin a snapshot may name",
    ),
    "a plain function of the module": (
        _set_var("answers", ["@", {"t": "ref", "ref": "tools.box:run_command"}]),
        "tools.box:run_command is not a function a build compiled",
    ),
    "os.popen by reference": (
        _set_var("answers", ["@", {"t": "ref", "ref": "os:popen"}]),
        "os:popen is not a function a build compiled",
    ),
    "a class outside the builds": (
        _set_var("answers", ["e", "subprocess:Popen", "x"]),
        "subprocess:Popen is not a class a build records",
    ),
    "a method where the code binds none": (
        _set_var("answers", ["@", {"t": "method", "self": ["l"], "name": "append"}]),
        "binds no method 'append' to 'answers'",
    ),
    "a global where the code binds none": (
        _set_var("answers", ["@", {"t": "global", "name": "run_command"}]),
        "binds no global 'run_command' to 'answers'",
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_crafted_snapshot_is_refused_before_anything_runs(built: Path, attack: str) -> None:
    change, message = ATTACKS[attack]
    data = _snapshot_in_process(built, "collect", ["a"])
    done = _run(RESUME, built, _crafted(data, change))
    assert done.returncode == 0, done.stderr
    assert "REFUSED" in done.stdout, done.stdout
    assert message in done.stdout, done.stdout
    assert "collected" not in done.stdout
    imported = eval(done.stdout.split("IMPORTED", 1)[1].strip())
    assert not [name for name in imported if not name.startswith(("tools", "branchc"))], imported


def test_a_spilled_callee_cannot_be_swapped(built: Path) -> None:
    """`answers.append((yield))` keeps `answers.append` across the yield: only that method may come back."""
    data = _snapshot_in_process(built, "collect", ["a"])
    entry = data["graph"]["roots"]["gen"][1]
    spilled = [name for name, value in entry["vars"].items() if isinstance(value, list) and value[:1] == ["@"]]
    assert spilled, entry["vars"]
    name = spilled[0]
    assert entry["vars"][name][1]["t"] == "method" and entry["vars"][name][1]["name"] == "append"
    for swap, message in [
        ({"t": "method", "self": entry["vars"][name][1]["self"], "name": "pop"}, "binds no method 'pop'"),
        ({"t": "method", "self": "echo hacked", "name": "append"}, "only from a list, not from a str"),
        ({"t": "global", "name": "eval"}, "binds no global 'eval'"),
        ({"t": "ref", "ref": "os:popen"}, "os:popen is not a function a build compiled"),
        ({"t": "special", "self": ["l"], "name": "__exit__"}, "binds no special '__exit__'"),
    ]:
        crafted = _crafted(data, _set_var(name, ["@", swap]))
        done = _run(RESUME, built, crafted)
        assert "REFUSED" in done.stdout and message in done.stdout, (swap, done.stdout, done.stderr)
        assert "hacked" not in done.stdout + done.stderr


def test_a_bound_method_kept_in_a_variable_survives_a_fresh_process(built: Path) -> None:
    data = _snapshot_in_process(built, "log_each", ["a"])
    done = _run(RESUME, built, data)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["YIELD next", "RETURN ['a', 'x', 'y']"]


@pytest.mark.parametrize("planted", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_a_planted_base_exception_is_refused(built: Path, planted: str) -> None:
    code = """
    import json
    from tools import box
    from branchc import snapshot
    generator = box.guarded()
    next(generator)
    print(json.dumps(snapshot(generator)))
    """
    done = _run(code, built, None)
    data = json.loads(done.stdout.splitlines()[-1])
    entry = data["graph"]["roots"]["gen"][1]
    assert entry["label"] == 1
    # plant the exception as what the resumed yield receives: a variable the code keeps is the only way in
    crafted = json.loads(json.dumps(data))
    crafted["graph"]["roots"]["gen"][1]["vars"]["got"] = ["x", f"builtins:{planted}", [], {}, None, None, False, {}]
    tabled(crafted["graph"])
    result = _run(RESUME, built, crafted)
    assert "REFUSED" in result.stdout, result.stdout
    assert "RETURN" not in result.stdout


def test_snapshot_of_a_native_generator_says_what_to_do() -> None:
    def native():
        yield 1

    with pytest.raises(TypeError, match="not a native generator; compile its function"):
        snapshot(native())


def test_finding_a_function_runs_no_attribute_hook_of_a_module_global() -> None:
    from branchc.continuation.registry import held

    class Proxy:  # a request-context proxy or a lazy importer: any attribute read fails
        def __getattr__(self, name):
            raise RuntimeError("working outside of request context")

    proxy = Proxy()
    assert held(proxy) is proxy

    def function():
        pass

    wrapper = Proxy()
    object.__setattr__(wrapper, "__wrapped__", function)
    assert held(wrapper) is function
