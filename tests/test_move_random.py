"""Random generator programs moving between two builds at every suspension (hypothesis; continuation/snapshots.py).

The programs and scripts of tests/test_split_random.py. The second build of a program is the same program
with a loop added first thing in `gen` that never runs: its code hash differs, so every snapshot of the
first build must move to resume in it (`_moved`), and the compiler's iterator of every other loop is
renumbered (`_bc_it1` becomes `_bc_it2`), so the move must map the compiler's variables by role. Before
each operation of the script the generator is snapshotted (JSON) and resumed in the other build, turn
about: the trace must be exactly the one the program gives snapshotted and resumed in its own build at
every step (tests/differential.py's "json" mode, which itself matches CPython but for the differences
that mode documents).
"""

from __future__ import annotations

import ast
import itertools
import json
import sys
import types
from typing import Any

import pytest
from differential import CANNOT_TRAVEL, _logged, apply, trace
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_split_random import ENABLED, EXAMPLES, programs, scripts

from branchc.continuation.registry import reregister
from branchc.continuation.snapshots import resume, snapshot
from branchc.splitter import compile_module

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

_names = itertools.count()


def probed(source: str) -> str | None:
    """`source` with `for _probe in (): pass` first in each `gen` (None where that cannot go first)."""
    lines = source.splitlines()
    found = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef) and node.name == "gen"]
    if not found or any(isinstance(node.body[0], (ast.Global, ast.Nonlocal, ast.Expr)) for node in found):
        return None
    for node in sorted(found, key=lambda node: node.body[0].lineno, reverse=True):
        first = node.body[0]
        indent = lines[first.lineno - 1][: first.col_offset]
        lines.insert(first.lineno - 1, f"{indent}for _probe in (): pass")
    return "\n".join(lines) + "\n"


def builds(old: str, new: str) -> tuple[types.ModuleType, types.ModuleType, list[Any]]:
    """Both programs compiled and loaded as one module name (as a deploy replaces a module), and their log."""
    name = f"moved_{next(_names)}"
    log: list[Any] = []
    made = []
    for source in (old, new):
        code = compile_module("from branchc import resumable\n" + source, "<prog>").code_object(f"<{name}>")
        module = types.ModuleType(name)
        module.__file__ = f"<{name}>"
        sys.modules[name] = module
        exec(code, module.__dict__)
        module.emit = log.append  # type: ignore[attr-defined]
        made.append(module)
    return made[0], made[1], log


def activate(module: types.ModuleType) -> None:
    """Make `module` the build this process has of its name: the module, and its compiled functions' records."""
    sys.modules[module.__name__] = module
    for value in vars(module).values():
        for fn in [value, *(vars(value).values() if isinstance(value, type) else ())]:
            if isinstance(fn, types.FunctionType) and hasattr(fn, "__branchc_table__"):
                reregister(fn)


def moved_trace(old: str, new: str, script: list[tuple], args: tuple) -> list[Any]:
    """The script's trace, the generator snapshotted and resumed in the other build before every operation."""
    from branchc import release

    first, second, log = builds(old, new)
    activate(first)
    generator = first.gen(*args)
    out: list[Any] = []
    for turn, op in enumerate(script):
        data = json.loads(json.dumps(snapshot(generator)))
        activate(second if turn % 2 == 0 else first)
        resumed = resume(data)
        release(generator)
        generator = resumed
        result = apply(generator, op)
        out.append((op, result, [_logged(value) for value in log]))
    return out


@settings(
    max_examples=max(20, EXAMPLES // 5),
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(source=programs(ENABLED), script=scripts(ENABLED), arg=st.integers(0, 2))
def test_a_random_program_moves_between_builds_at_every_suspension(source, script, arg):
    assume(CANNOT_TRAVEL not in source)
    new = probed(source)
    assume(new is not None)
    expected = trace(source, script, "json", (arg,))
    assert moved_trace(source, new, script, (arg,)) == expected, f"\n{source}\n{script}"
