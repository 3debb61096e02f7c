"""Syntax newer than 3.11 inside compiled generators, against CPython (differential.check), with a
snapshot before every step, resumed in process and in a fresh process.

- PEP 695 type parameters: on a @resumable generator (with bounds, constraints, *Ts and **P), on
  a delegated generic helper, on the ordinary methods of a generic class; their cells belong to
  the definition, so they never travel and a resume finds them again;
- PEP 696 defaults of type parameters (3.13);
- PEP 701 f-strings: the same quotes nested, yields inside the braces and in format specs;
- `type` aliases in the generator's module.

Each test names the feature the interpreter must have; older interpreters skip it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from differential import C, N, S, T, check, check_in_fresh_processes, load

from branchc import snapshot
from branchc.continuation.errors import NotSerializableError

py312 = pytest.mark.skipif(sys.version_info < (3, 12), reason="PEP 695/701 syntax: Python 3.12 or later")
py313 = pytest.mark.skipif(sys.version_info < (3, 13), reason="PEP 696 type parameter defaults: Python 3.13 or later")

PROGRAMS = {
    "generic-function": (
        py312,
        """
@resumable
def gen[T, *Ts, **P](a=2):
    total = []
    for i in range(a):
        got = yield (i, T.__name__, Ts.__name__, P.__name__)
        total.append(got)
    return total, T.__name__, gen.__type_params__[0] is T
""",
        [N, S(1), S(2), S(3)],
    ),
    "bounds-and-constraints": (
        py312,
        """
@resumable
def gen[T: int, U: (str, bytes)]():
    x = yield T.__bound__.__name__
    try:
        y = yield [c.__name__ for c in U.__constraints__]
    except ValueError as error:
        y = yield ("caught", str(error), T.__name__)
    return x, y, gen.__type_params__ == (T, U)
""",
        [N, S(1), T("ValueError", "v"), S(3)],
    ),
    "generic-class-method": (
        py312,
        """
class Box[T]:
    def __init__(self, v: T) -> None:
        self.v = v

    @resumable
    def walk(self, n: int):
        seen = []
        for i in range(n):
            seen.append((yield (self.v, i, T.__name__)))
        return seen, type(self).__type_params__[0] is T

def gen(n=3):
    return Box(7).walk(n)
""",
        [N, S("a"), S("b"), S("c")],
    ),
    "generic-class-super": (
        py312,
        """
class Base:
    def hello(self):
        return "base"

class Box[T](Base):
    @resumable
    def walk(self):
        x = yield super().hello()
        y = yield (T.__name__, type(self).__mro__[1].__name__)
        return x, y

def gen():
    return Box().walk()
""",
        [N, S(1), S(2)],
    ),
    "generic-helper": (
        py312,
        """
@resumable
def helper[T](n):
    got = yield (n, T.__name__)
    emit(("helper", n, got))
    return got, helper.__type_params__[0] is T

@resumable
def gen():
    a = yield from helper(1)
    b = yield from helper(2)
    return a, b
""",
        [N, S("x"), T("KeyError", "k"), S("y")],
    ),
    "nested-generic-def": (
        py312,
        """
@resumable
def gen():
    def inner[T](x: T) -> str:
        return f"{x}:{T.__name__}"
    v = inner(1)
    w = inner("s")
    del inner  # a function with type parameters of its own cannot travel: it is gone before the yield
    a = yield v
    b = yield (a, w)
    return a, b
""",
        [N, S(1), S(2)],
    ),
    "type-parameter-defaults": (
        py313,
        """
@resumable
def gen[T = int, *Ts = *tuple[str, ...], **P = [int, str]](a=1):
    x = yield repr(T.__default__)
    y = yield repr(Ts.__default__)
    z = yield (repr(P.__default__), T.has_default())
    return x, y, z
""",
        [N, S(1), S(2), S(3)],
    ),
    "class-type-parameter-defaults": (
        py313,
        """
class Pair[K = str, V = int]:
    @resumable
    def items(self, n):
        for i in range(n):
            yield (i, K.__default__.__name__, V.__default__.__name__)
        return "done"

def gen():
    return Pair().items(2)
""",
        [N, N, N, C],
    ),
    "f-strings": (
        py312,
        """
@resumable
def gen():
    width = 6
    s = f"{(yield 'w')!r:>{width}}|{f"{(yield 'inner')}"}|{"nested" + f'{(yield 3):{(yield "spec")}}'}"
    t = f"{'\\\\n'.join(['a', 'b'])}{(yield s)=}"
    u = f"{f"{f"{(yield t)}"}"}"
    return s, t, u
""",
        [N, S(1), S(2), S(3), S("^5"), S(9), S("deep")],
    ),
    "f-string-throw": (
        py312,
        """
@resumable
def gen():
    try:
        s = f"{"a" + f"{(yield 1)}"}{(yield 2):{(yield 3)}}"
    except KeyError as error:
        s = yield ("caught", repr(error))
    return s
""",
        [N, S("x"), T("KeyError", "k"), S("end")],
    ),
    "type-aliases": (
        py312,
        """
type Pair = tuple[int, int]
type Vec[T] = list[T]
type Later = Undefined

@resumable
def gen():
    a = yield repr(Pair.__value__)
    b = yield repr(Vec[int])
    try:
        c = Later.__value__
    except NameError as error:
        c = yield ("lazy", str(error))
    return a, b, c, Vec.__type_params__[0].__name__
""",
        [N, S(1), S(2), S(3)],
    ),
}

CASES = [pytest.param(source, script, id=name, marks=mark) for name, (mark, source, script) in PROGRAMS.items()]


@pytest.mark.parametrize(("source", "script"), CASES)
def test_like_cpython(source: str, script: list[tuple]) -> None:
    """Compiled, and snapshotted and resumed before every step (in process, and through JSON)."""
    check(source, script)


@pytest.mark.parametrize(("source", "script"), CASES)
def test_resumed_in_a_fresh_process(source: str, script: list[tuple], tmp_path: Path) -> None:
    assert check_in_fresh_processes(source, script, tmp_path) >= 2


def refusal(source: str) -> str:
    """The message of the NotSerializableError a snapshot of `gen()`, at its first yield, raises."""
    generator = load(source, compiled=True).gen()
    next(generator)
    with pytest.raises(NotSerializableError) as refused:
        snapshot(generator)
    return str(refused.value)


@py312
def test_a_type_parameter_held_across_a_yield_is_refused_by_name() -> None:
    """A TypeVar belongs to the code, not to the run: held in a variable across a yield it is refused,
    naming the variable, the line and what to do instead."""
    message = refusal(
        """
@resumable
def gen[T]():
    kind = T
    yield 1
    return kind
"""
    )
    assert "variable 'kind'" in message and ":6" in message, message
    assert "type parameter" in message and "by name after the yield" in message, message


@py312
def test_an_instance_of_a_parameterized_class_is_refused_with_the_fix() -> None:
    """`Box[int](7)` keeps `Box[int]` in the instance's __orig_class__, which cannot travel: the error says
    where and how to make the instance instead."""
    message = refusal(
        """
class Box[T]:
    @resumable
    def walk(self):
        x = yield T.__name__
        return self, x

def gen():
    return Box[int]().walk()
"""
    )
    assert "self.__orig_class__" in message and "make it as Box(...)" in message, message


@py312
def test_a_snapshot_that_brings_its_own_type_parameter_is_refused() -> None:
    """The cell of a type parameter is the definition's: a snapshot that carries one (to put its own value in
    place of T) is refused, naming the cell, before anything runs."""
    from branchc import resume
    from branchc.continuation.errors import SnapshotDataError

    module = load(
        """
@resumable
def gen[T]():
    got = yield T.__name__
    emit(("resumed", got))
    return T.__name__, got
""",
        compiled=True,
    )
    ran: list = []
    module.emit = ran.append
    generator = module.gen()
    assert next(generator) == "T"
    data = json.loads(json.dumps(snapshot(generator)))
    entry = data["graph"]["roots"]["gen"][1]
    assert entry["free"] == {}  # T is not saved
    entry["free"] = {"T": ["@", {"t": "cell", "v": "forged"}]}
    with pytest.raises(SnapshotDataError, match=r"free\['T'\].*closes over no such cell"):
        resume(data)
    assert ran == []
    entry["free"] = {}
    with pytest.raises(StopIteration) as done:
        resume(data).send("x")
    assert done.value.value == ("T", "x") and ran == [("resumed", "x")]
