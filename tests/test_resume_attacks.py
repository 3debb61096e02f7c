"""Forged snapshots found by reviewing the resume path, and the letting go of generators.

Each test starts from a real snapshot of a compiled generator (through JSON), changes what an
attacker could change, and checks that the resume refuses it with SnapshotDataError or
SnapshotError, before any of the program's code (or of its classes) runs; the release tests
check that letting go of a run runs none of its cleanup, wherever its generators are kept.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import pytest
from _codec_tables import tabled
from differential import load

from branchc import release, resume, snapshot
from branchc.continuation.errors import NotSerializableError, SnapshotDataError, SnapshotError
from branchc.continuation.registry import meta_of

PROGRAM = """
class Spy:
    def __getattr__(self, name):
        emit(("Spy.__getattr__ ran", name))
        return list.append


class Key:
    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return self is other


class Temp:
    def __del__(self):
        emit(("Temp.__del__ ran", getattr(self, "path", None)))


class Idx:
    def __index__(self):
        emit("Idx.__index__ ran")
        return 0


class Holder:
    __slots__ = ("held",)

    def __init__(self, held):
        self.held = held


@resumable
def kinds():
    kind = ValueError
    yield 1
    try:
        raise kind("boom")
    except Exception as error:
        return ("caught", repr(error))


@resumable
def closure():
    class Local:
        run = "shadowed"

    n = yield 1
    f = lambda: n + 1
    yield f
    return f()


@resumable
def star(a, *args, **kw):
    yield (a, args, kw)


@resumable
def adds():
    items = []
    add = items.append
    add((yield 1))
    o = yield 2
    yield 3
    return items, o


@resumable
def sub(tag):
    try:
        yield tag
    finally:
        emit(("finally", tag))


@resumable
def holds():
    a = sub("dict key")
    next(a)
    b = sub("slot")
    next(b)
    c = sub("bound method")
    next(c)
    d = sub("exception args")
    next(d)
    e = sub("default")
    next(e)
    keep = {a: 1}
    h = Holder(b)
    s = c.send
    x = ValueError(d)
    f = lambda e=e: e
    yield 1
    emit((keep, h, s, x, f))


@resumable
def loops():
    for i in range(3):
        got = yield i
    return got


@resumable
def finals():
    try:
        yield 1
        raise ValueError("x")
    finally:
        y = yield 2
    return y


@resumable
def itself():
    me = yield 1
    yield 2
    emit(me)
"""


@pytest.fixture
def program() -> Any:
    module = load(PROGRAM, compiled=True)
    module.log = log = []
    module.emit = log.append
    return module


def _path_to(code: Any, name: str, path: tuple = ()) -> list | None:
    """Where the code object called `name` sits among `code`'s constants (nested ones too)."""
    for index, const in enumerate(code.co_consts):
        if isinstance(const, type(code)):
            if const.co_name == name:
                return [*path, index]
            found = _path_to(const, name, (*path, index))
            if found:
                return found
    return None


def _snap(generator: Any) -> dict:
    return json.loads(json.dumps(snapshot(generator)))


def _vars(data: dict) -> dict:
    return data["graph"]["roots"]["gen"][1]["vars"]


def _refused(data: dict, program: Any, *messages: str) -> str:
    tabled(data["graph"])  # what a test planted is written readably: its classes and field names go to the tables
    with pytest.raises((SnapshotDataError, SnapshotError)) as refused:
        resume(data)
    for message in messages:
        assert message in str(refused.value), str(refused.value)
    assert not [entry for entry in program.log if "ran" in str(entry)], program.log
    return str(refused.value)


@pytest.mark.parametrize("planted", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_a_class_that_escapes_except_exception_cannot_be_named(program: Any, planted: str) -> None:
    generator = program.kinds()
    next(generator)
    data = _snap(generator)
    _vars(data)["kind"] = ["@", {"t": "ref", "ref": f"builtins:{planted}"}]
    _refused(data, program, f"builtins:{planted} is not a builtin a snapshot may name")


def test_a_nested_function_cannot_be_built_from_a_class_body(program: Any) -> None:
    generator = program.closure()
    next(generator)
    generator.send(1)
    data = _snap(generator)
    entry = _vars(data)["f"][1]
    assert entry["t"] == "fn"
    entry["code"], entry["closure"] = _path_to(meta_of(generator.gi_code).body_code, "Local"), []
    _refused(data, program, "has no nested function at")
    assert "run" not in vars(program)  # the class body never ran as a function on the module's globals


@pytest.mark.parametrize(
    ("args", "kw"),
    [(["cn", 0], {}), (["I", ["rg", 0, 10**8, 1], 0], {}), (["rp", 0, 10**7], {}), (["u"], ["d", 1, 2])],
)
def test_forged_arguments_of_a_generator_not_started_are_refused_at_once(program: Any, args, kw) -> None:
    data = _snap(program.star(1, 2, k=3))
    _vars(data)["args"], _vars(data)["kw"] = args, kw
    start = time.perf_counter()
    _refused(data, program, "must be a tuple and **kw a dict with str keys")
    assert time.perf_counter() - start < 1  # refused before unpacking, not after


def test_keys_whose_hash_reads_their_attributes_count_against_the_limit(program: Any) -> None:
    generator = program.adds()
    next(generator)
    generator.send("a")
    generator.send("o")
    data = _snap(generator)
    depth = 30  # each level refers twice to the one below: hashing it naively visits 2**30 tuples
    objects = [["u", 1, 2], *(["u", [i], [i]] for i in range(depth))]
    data["graph"]["objects"] = objects
    _vars(data)["o"] = ["s", ["o", f"{program.__name__}:Key", {"v": [depth]}]]
    start = time.perf_counter()
    _refused(data, program, "DecodeLimits.max_values")
    assert time.perf_counter() - start < 2


def test_a_bound_method_is_rebuilt_without_running_the_owners_code(program: Any) -> None:
    generator = program.adds()
    next(generator)
    data = _snap(generator)
    (binding,) = [v[1] for v in _vars(data).values() if type(v) is list and v[0] == "@" and v[1]["t"] == "method"]
    assert binding["name"] == "append"
    binding["self"] = ["o", f"{program.__name__}:Spy", {}]
    _refused(data, program, "a Spy has no method 'append'")


@pytest.mark.parametrize(
    "value",
    [
        ["en", ["I", ["l", 1], 0], ["o", "{m}:Idx", {}]],
        ["rp", 0, ["o", "{m}:Idx", {}]],
        ["cn", ["o", "{m}:Idx", {}]],
        ["o", "{m}:Temp", {"path": "/etc/passwd"}],
    ],
    ids=["enumerate-start", "repeat-times", "count-start", "finalizer"],
)
def test_no_class_code_runs_while_decoding(program: Any, value: list) -> None:
    generator = program.adds()
    next(generator)
    generator.send("a")
    generator.send("o")
    data = _snap(generator)
    _vars(data)["o"] = json.loads(json.dumps(value).replace("{m}", program.__name__))
    _refused(data, program)
    gc.collect()
    assert not [entry for entry in program.log if "ran" in str(entry)], program.log


def test_a_refused_snapshot_runs_none_of_the_cleanup_of_what_it_rebuilt(program: Any) -> None:
    generator = program.sub("x")
    next(generator)
    data = _snap(generator)
    data["graph"]["roots"]["gen"] = ["l", data["graph"]["roots"]["gen"]]
    _refused(data, program, "the root is not a compiled generator")
    gc.collect()
    assert program.log == []
    release(generator)


def test_release_lets_go_of_generators_wherever_they_are_kept(program: Any) -> None:
    generator = program.holds()
    next(generator)
    release(generator)
    gc.collect()
    assert program.log == []


def test_release_leaves_other_generators_alone(program: Any) -> None:
    """A generator that is not being released, closed meanwhile (here: collected), still runs its cleanup."""
    victim = program.sub("victim")
    next(victim)
    cycle: list = [victim]
    cycle.append(cycle)
    del victim
    generator = program.holds()
    next(generator)
    gc.disable()
    try:
        del cycle
        callbacks = gc.callbacks

        def collect_during_release(phase: str, info: dict) -> None:
            pass

        callbacks.append(collect_during_release)
        try:
            release(generator)
            gc.collect()
        finally:
            callbacks.remove(collect_during_release)
    finally:
        gc.enable()
    assert program.log == [("finally", "victim")]


def test_a_generator_that_holds_itself_is_refused_at_snapshot(program: Any) -> None:
    generator = program.itself()
    next(generator)
    generator.send(generator)
    with pytest.raises(NotSerializableError, match="it holds itself through its variables"):
        snapshot(generator)
    release(generator)


def test_the_compilers_own_variables_must_be_there_and_hold_what_it_put(program: Any) -> None:
    generator = program.loops()
    next(generator)
    data = _snap(generator)
    iterator = next(name for name in _vars(data) if name.startswith("_bc_it"))
    del _vars(data)[iterator]
    _refused(data, program, "needs the iterator of a for loop")
    generator = program.finals()
    next(generator)
    next(generator)
    data = _snap(generator)
    pending = next(name for name in _vars(data) if name.startswith("_bc_pend"))
    _vars(data)[pending] = 5
    _refused(data, program, "cannot hold an object of type int")
