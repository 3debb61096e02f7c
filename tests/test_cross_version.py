"""A snapshot taken on one Python and resumed on another works, or is refused by name; never half-restored.

Each program holds, across its yields, values whose saved form each version computes from what its
own objects hold (a range iterator reduces to a position before 3.12 and to the range of what is
left since; plain objects keep their weak reference slot in or before the object), so a version
that wrote them its own way would be caught on another. Snapshots are taken here, before every
step, and resumed in every other interpreter found (`other_pythons`), which runs the rest of the
script; it must give what CPython's own generator gives here (differential.check_in_fresh_processes).
A build in a newer Python's syntax, resumed on an older one, is refused naming the module and both
versions.

The other interpreters are those that import branchc: `.venv-3.*` beside this repository (.ci/run
makes them) and those in $BRANCHC_PYTHONS (separated by the path separator).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from differential import N, S, T, check_in_fresh_processes, load

from branchc import snapshot

ROOT = Path(__file__).resolve().parent.parent
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


@functools.cache
def other_pythons() -> dict[str, str]:
    """Version ("3.12") -> an interpreter of another minor version than this one that imports branchc."""
    candidates = [str(path) for path in sorted(ROOT.glob(".venv*/bin/python"))]
    candidates += [path for path in os.environ.get("BRANCHC_PYTHONS", "").split(os.pathsep) if path]
    found: dict[str, str] = {}
    for python in candidates:
        try:
            done = subprocess.run(
                [python, "-c", "import sys, branchc; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except OSError:
            continue
        version = done.stdout.strip()
        if done.returncode == 0 and version != HERE:
            found.setdefault(version, python)
    return found


def _others(older_than: tuple[int, int] | None = None) -> list:
    """The other interpreters as test parameters (only those older than `older_than`, when given)."""
    found = {
        version: python
        for version, python in other_pythons().items()
        if older_than is None or tuple(map(int, version.split("."))) < older_than
    }
    if not found:
        older = f" older than {'.'.join(map(str, older_than))}" if older_than else ""
        reason = f"no other Python{older} with branchc installed (.ci/run makes .venv, .venv-3.12 and .venv-3.13)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason))]
    return [pytest.param(python, id=version) for version, python in sorted(found.items())]


PROGRAMS = {
    "iterators": (
        """
import itertools

@resumable
def gen():
    seen = []
    letters = iter("abcdef")
    pairs = iter({"x": 1, "y": 2, "z": 3}.items())
    numbered = enumerate(iter([10, 20, 30]), start=1)
    zipped = zip(iter([1, 2, 3]), iter("pqr"))
    backwards = reversed([1, 2, 3])
    counter = itertools.count(5, 2)
    chained = itertools.chain([1], [2, 3])
    for i in range(2, 40, 3):
        got = yield (i, next(letters), next(pairs), next(numbered), next(zipped))
        seen.append((got, next(backwards, None), next(counter), next(chained, None)))
        if len(seen) == 3:
            break
    for j in reversed(range(3)):
        seen.append((yield ("down", j)))
    for k, v in enumerate(range(1 << 70, (1 << 70) + 3)):
        seen.append((yield (k, v - (1 << 70))))
    return seen
""",
        [N, S(1), S(2), S(3), S(4), S(5), S(6), S(7), S(8), S(9)],
    ),
    "objects": (
        """
import contextlib
import dataclasses
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

from pydantic import BaseModel


class Plain:
    def __init__(self, n):
        self.n = n


class Slotted:
    __slots__ = ("a", "__weakref__")

    def __init__(self, a):
        self.a = a


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Model(BaseModel):
    name: str
    tags: list[str] = []


class Manager:
    def __enter__(self):
        emit("enter")
        return self

    def __exit__(self, *exc):
        emit(("exit", exc[0] and exc[0].__name__))
        return False


@resumable
def gen():
    plain, slotted, point = Plain(1), Slotted(2), Point(3)
    model = Model(name="m", tags=["t"])
    when = datetime(2026, 7, 28, 12, 30, tzinfo=ZoneInfo("Europe/Paris"))
    money = (Decimal("1.10"), Fraction(1, 3), complex(1, 2), b"\\x00\\xff", frozenset({1, 2}), {3, 4})
    try:
        raise ValueError("bad") from KeyError("cause")
    except ValueError as error:
        error.add_note("a note")
        caught = error
    with Manager(), contextlib.suppress(KeyError), contextlib.nullcontext(5) as five:
        got = yield (plain.n, slotted.a, point, model, when.isoformat(), money)
        plain.n += got
        raise KeyError("suppressed")
    again = yield (five, repr(caught), caught.__notes__, repr(caught.__cause__), timedelta(days=got))
    return plain.n, slotted.a, point, model.model_dump(), when.astimezone(timezone.utc), again
""",
        [N, S(2), S(3)],
    ),
    "delegation-and-closures": (
        """
@resumable
def helper(n):
    total = 0
    try:
        for k in range(n):
            total += yield ("h", k)
    finally:
        emit(("helper done", total))
    return total


@resumable
def gen():
    count = 0

    def bump():
        nonlocal count
        count += 1
        return count

    a = yield from helper(3)
    bump()
    b = yield ("between", a, count)
    try:
        c = yield from helper(2)
    except KeyError as error:
        c = ("caught", str(error))
    bump()
    return a, b, c, count
""",
        [N, S(1), S(2), S(3), S("b"), S(4), T("KeyError", "k")],
    ),
}


@pytest.mark.parametrize("python", _others())
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_resumed_on_another_python(program: str, python: str, tmp_path: Path) -> None:
    source, script = PROGRAMS[program]
    assert check_in_fresh_processes(source, script, tmp_path, python=python) >= 3


NEW_SYNTAX = """
@resumable
def gen[T]():
    got = yield T.__name__
    return got
"""


@pytest.mark.skipif(sys.version_info < (3, 12), reason="builds a program in 3.12's syntax")
@pytest.mark.parametrize("python", _others(older_than=(3, 12)))
def test_a_newer_syntax_is_refused_by_name_on_an_older_python(python: str, tmp_path: Path) -> None:
    version = next(v for v, p in other_pythons().items() if p == python)
    from branchc.splitter.build import build

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "program.py").write_text("from branchc import resumable\n" + NEW_SYNTAX)
    assert not build([tmp_path / "src"], tmp_path / "out").errors
    module = load(NEW_SYNTAX, compiled=True)
    generator = module.gen()
    next(generator)
    data = json.dumps(snapshot(generator)).replace(module.__name__, "program")
    done = subprocess.run(
        [python, "-c", "import json, sys; from branchc import resume; resume(json.load(sys.stdin))"],
        input=data,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path / "out"), "PATH": ""},
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert f"module 'program' does not import on Python {version}" in last, done.stderr
    assert f"its build was made by Python {HERE}" in last, done.stderr
