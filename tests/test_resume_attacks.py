"""Forged snapshots found by reviewing the resume path, and the letting go of generators.

The residuals of the trust model (issue 21) are here too: a method binding checked against its
owner's class, a `with`'s `__exit__` bound to the kept manager, a variable that held a def or lambda
holding only that one, no `__hash__` or `__eq__` of the program's classes run while decoding, data
and text nested 100,000 deep, and BaseExceptions that are not Exceptions only where the compiler's
analysis says a handler or finally around the yield can hold them.

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
import dataclasses


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


@dataclasses.dataclass(frozen=True)
class FrozenKey:
    v: object


class Hashed:
    def __hash__(self):
        emit("Hashed.__hash__ ran")
        return 0

    def __eq__(self, other):
        emit("Hashed.__eq__ ran")
        return self is other


class Evil:
    def append(self, value):
        emit(("Evil.append ran", value))


class Made:
    def __init__(self):
        emit("Made.__init__ ran")


class Manager:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        emit(("Manager.__exit__", kind and kind.__name__))
        return False


class Swallow:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        emit("Swallow.__exit__ ran")
        return True


@resumable
def adds_to(items):  # the owner of the method is a parameter: the compiler cannot tell its class
    add = items.append
    add((yield 1))
    yield 2
    return items


@resumable
def managed():
    with Manager():
        yield 1
        raise ValueError("inside")


@resumable
def managed_by(manager):
    with manager:
        yield 1
        raise ValueError("inside")


@resumable
def lambdas():
    f = lambda: "f"
    g = lambda: "g"
    def helper():
        return "helper"
    yield 1
    return f(), g(), helper()


@resumable
def other_lambda():
    k = lambda: "other"
    yield 1
    return k()


@resumable
def captured():
    f = lambda: "f"
    h = lambda: f()
    yield 1
    return h()


@resumable
def holds_set():
    keys = {FrozenKey(1)}
    o = yield 1
    yield 2
    return keys, o


@resumable
def handles_exit():
    try:
        yield 1
    except GeneratorExit:
        yield 2
    emit("after")


@resumable
def finally_yields():
    try:
        yield 1
    finally:
        yield 2


@resumable
def holds_handler():
    sub = handles_exit()
    next(sub)
    sub.throw(GeneratorExit())  # it waits in its handler now
    notes = []
    yield 1
    return notes, next(sub, "done")
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
    _vars(data)["o"] = ["s", ["dc", f"{program.__name__}:FrozenKey", {"v": [depth]}]]
    start = time.perf_counter()
    _refused(data, program, "DecodeLimits.max_values")
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("adds", "the code takes that method only from a list, not from a Spy"),  # `items = []`: a list
        ("adds_to", "a Spy has no method 'append'"),  # a parameter: any class, but only a method it defines
    ],
)
def test_a_bound_method_is_rebuilt_without_running_the_owners_code(program: Any, function: str, message: str) -> None:
    generator = getattr(program, function)(*([[]] if function == "adds_to" else []))
    next(generator)
    data = _snap(generator)
    (binding,) = [v[1] for v in _vars(data).values() if type(v) is list and v[0] == "@" and v[1]["t"] == "method"]
    assert binding["name"] == "append"
    binding["self"] = ["o", f"{program.__name__}:Spy", {}]
    _refused(data, program, message)


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


# -- the residuals of the trust model (issue 21) ---------------------------------------------------


def test_a_method_binding_is_checked_against_its_owners_class(program: Any) -> None:
    """`add = items.append` with `items = []`: only a list's append may come back, not another recorded
    class's method of that name (nor may `items` itself become such an object)."""
    generator = program.adds()
    next(generator)
    data = _snap(generator)
    (binding,) = [v[1] for v in _vars(data).values() if type(v) is list and v[0] == "@" and v[1]["t"] == "method"]
    binding["self"] = ["o", f"{program.__name__}:Evil", {}]
    _refused(data, program, ".self: the code takes that method only from a list, not from a Evil")
    data = _snap(generator)
    _vars(data)["items"] = ["o", f"{program.__name__}:Evil", {}]
    _refused(data, program, "vars['items']: ", "keeps only a list in 'items', not a Evil")
    release(generator)


def test_a_with_exit_is_bound_to_the_kept_manager_of_its_class(program: Any) -> None:
    generator = program.managed()
    next(generator)
    data = _snap(generator)
    names = _vars(data)
    assert {"_bc_wm1", "_bc_wx1"} <= names.keys()  # the manager is kept beside its __exit__
    swallow = ["o", f"{program.__name__}:Swallow", {}]
    names["_bc_wx1"][1]["self"] = swallow  # an __exit__ that swallows the ValueError
    _refused(data, program, "takes that method only from an instance of Manager, not from a Swallow")
    data = _snap(generator)
    data["graph"]["objects"] = [swallow]
    _vars(data)["_bc_wm1"], _vars(data)["_bc_wx1"][1]["self"] = [0], [0]  # the manager swapped too
    _refused(data, program, "not from a Swallow")
    data = _snap(generator)
    _vars(data)["_bc_wm1"] = swallow  # the manager alone
    _refused(data, program, "vars['_bc_wx1']: ", "is not bound to the manager kept beside it (a Swallow)")
    assert "Swallow.__exit__ ran" not in program.log
    release(generator)


def test_a_with_exit_is_the_one_of_the_kept_manager_whatever_its_class(program: Any) -> None:
    """`with manager:` of a parameter: the compiler cannot tell its class, but the kept __exit__ is still
    the one bound to the kept manager."""
    generator = program.managed_by(program.Manager())
    next(generator)
    data = _snap(generator)
    _vars(data)["_bc_wx1"][1]["self"] = ["o", f"{program.__name__}:Swallow", {}]
    _refused(data, program, "vars['_bc_wx1']: ", "is not bound to the manager kept beside it (a Manager)")
    release(generator)
    generator = program.managed_by(program.Manager())  # unforged, it resumes and exits as it would have
    next(generator)
    resumed = resume(_snap(generator))
    release(generator)
    with pytest.raises(ValueError, match="inside"):
        next(resumed)
    assert program.log == [("Manager.__exit__", "ValueError")]


def _fn_entry(data: dict, name: str) -> dict:
    entry = _vars(data)[name][1]
    assert entry["t"] == "fn", entry
    return entry


def test_a_variable_that_held_a_lambda_holds_only_that_lambda(program: Any) -> None:
    generator = program.lambdas()
    next(generator)
    module = program.__name__
    for name, value, message in [
        ("f", ["@", {"t": "ref", "ref": f"{module}:Made"}], "a lambda of its own in 'f', not the class Made"),
        ("helper", ["@", {"t": "ref", "ref": f"{module}:Made"}], "keeps only its def helper in 'helper'"),
        ("f", ["l"], "keeps only a lambda of its own in 'f', not a list"),
    ]:
        data = _snap(generator)
        _vars(data)[name] = value
        _refused(data, program, f"vars['{name}']: ", message)
    data = _snap(generator)  # g's lambda where f's was: a lambda of the same function, but not that one
    _vars(data)["f"] = _vars(data)["g"]
    _refused(data, program, "keeps only a lambda of its own in 'f', not the function lambdas.<locals>.<lambda>")
    other = program.other_lambda()  # a lambda of another compiled function
    next(other)
    data = _snap(generator)
    _vars(data)["f"] = _vars(_snap(other))["k"]
    _refused(data, program, "keeps only a lambda of its own in 'f', not the function other_lambda.<locals>.<lambda>")
    assert "Made.__init__ ran" not in program.log
    release(generator, other)
    generator = program.lambdas()  # unforged, each comes back as itself
    next(generator)
    resumed = resume(_snap(generator))
    release(generator)
    with pytest.raises(StopIteration) as done:
        next(resumed)
    assert done.value.value == ("f", "g", "helper")


def test_a_captured_variable_that_held_a_lambda_holds_only_that_lambda(program: Any) -> None:
    generator = program.captured()
    next(generator)
    data = _snap(generator)
    cells = data["graph"]["roots"]["gen"][1]["free"]
    assert "f" in cells, cells  # `f` lives in a cell that `h` closes over
    cells["f"] = ["@", {"t": "cell", "v": ["@", {"t": "ref", "ref": f"{program.__name__}:Made"}]}]
    _refused(data, program, "free['f']: ", "keeps only a lambda of its own in 'f', not the class Made")
    release(generator)


def test_decoding_runs_no_hash_or_eq_of_a_recorded_class(program: Any) -> None:
    generator = program.holds_set()
    next(generator)
    generator.send("o")
    data = _snap(generator)
    _vars(data)["o"] = ["s", ["u", 1, ["o", f"{program.__name__}:Hashed", {}]]]
    _refused(data, program, "vars['o']: ", "Hashed.__hash__ is code of its own", "frozen dataclass")
    data = _snap(generator)
    _vars(data)["o"] = ["d", ["o", f"{program.__name__}:Hashed", {}], 1]
    _refused(data, program, "vars['o'][1]: ", "Hashed.__hash__ is code of its own")
    assert not [entry for entry in program.log if "Hashed" in str(entry)]
    # a frozen dataclass's generated __hash__ and __eq__ are not the program's own: its keys come back
    data = _snap(generator)
    assert "FrozenKey" in json.dumps(data)
    resumed = resume(data)
    release(generator)
    with pytest.raises(StopIteration) as done:
        next(resumed)
    assert done.value.value == ({program.FrozenKey(1)}, "o")


def test_encode_refuses_a_key_whose_hash_is_the_programs_own(program: Any) -> None:
    generator = program.holds_set()
    next(generator)
    generator.send({program.Hashed(): 1})
    with pytest.raises(NotSerializableError, match=r"hashing it runs code of its own: Hashed\.__hash__") as refused:
        snapshot(generator)
    assert "variable 'o', at o<key 0>" in str(refused.value)
    release(generator)


def _deep(levels: int, leaf: Any = 1) -> Any:
    for _ in range(levels):
        leaf = ["l", leaf]
    return leaf


def _deep_raw(levels: int) -> Any:
    leaf: Any = 1
    for _ in range(levels):
        leaf = [leaf]
    return leaf


@pytest.mark.parametrize(
    "where",
    ["variable", "objects", "label", "state", "fn", "fn-code", "fn-in", "fn-closure", "fn-tag", "binding", "ref"],
)
def test_a_snapshot_nested_100_000_deep_is_a_clear_error(program: Any, where: str) -> None:
    generator = program.closure()
    next(generator)
    generator.send(1)
    data = _snap(generator)
    entry = data["graph"]["roots"]["gen"][1]
    fn = entry["vars"]["f"][1]
    deep, raw = _deep(100_000), _deep_raw(100_000)
    {
        "variable": lambda: entry["vars"].__setitem__("f", deep),
        "objects": lambda: (data["graph"].__setitem__("objects", [deep]), entry["vars"].__setitem__("f", [0])),
        "label": lambda: entry.__setitem__("label", raw),
        "state": lambda: entry.__setitem__("state", raw),
        "fn": lambda: entry.__setitem__("fn", raw),
        "fn-code": lambda: fn.__setitem__("code", raw),
        "fn-in": lambda: fn.__setitem__("in", raw),
        "fn-closure": lambda: fn.__setitem__("closure", [deep]),
        "fn-tag": lambda: fn.__setitem__("t", raw),
        "binding": lambda: entry["vars"].__setitem__("f", ["@", {"t": "method", "self": deep, "name": raw}]),
        "ref": lambda: entry["vars"].__setitem__("f", ["@", {"t": "ref", "ref": raw}]),
    }[where]()
    with pytest.raises((SnapshotDataError, SnapshotError)) as refused:
        resume(data)
    assert len(str(refused.value)) < 2_000
    if where in ("variable", "objects"):
        assert "DecodeLimits.max_depth" in str(refused.value)
    release(generator)


def test_snapshot_text_nested_100_000_deep_is_a_clear_error() -> None:
    from branchc.continuation.snapshots import parse_json
    from branchc.runtime.runstate import RunStateError, load_run

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(SnapshotDataError, match=r"JSON nested 100,000 deep .*DecodeLimits.max_depth = 500"):
        parse_json(deep)
    text = '{"branchc_run": 2, "graph": {"roots": {"handoff": ' + '["l",' * 100_000 + "1" + "]" * 100_000 + "}}}"
    with pytest.raises(RunStateError, match=r"the saved run is JSON nested 100,00\d deep \(its deepest bracket"):
        load_run(text)
    assert parse_json('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    from branchc.store import RunMeta, StoreDataError

    with pytest.raises(StoreDataError, match="its field 'meta' is JSON nested deeper than the parser takes"):
        RunMeta.from_json("run-1", deep)  # a stored record's metadata, as text


# -- BaseExceptions that are not Exceptions: only where the analysis allows them -------------------

_GE = ["x", "builtins:GeneratorExit", [], {}, None, None, False, {}]


def _planted(kind: str) -> list:
    return ["x", f"builtins:{kind}", [], {}, None, None, False, {}]


def test_a_handler_keeps_only_what_its_clause_catches(program: Any) -> None:
    generator = program.handles_exit()
    next(generator)
    with pytest.raises(RuntimeError, match="generator ignored GeneratorExit"):
        generator.close()
    data = _snap(generator)
    kept = next(name for name in _vars(data) if name.startswith("_bc_exc"))
    for planted in ("KeyboardInterrupt", "SystemExit", "ValueError"):
        _vars(data)[kept] = _planted(planted)
        _refused(data, program, f"a {planted} is not what its except clause catches (GeneratorExit)")
    resumed = resume(_snap(generator))  # what it holds, a GeneratorExit, comes back
    release(generator)
    with pytest.raises(StopIteration):
        next(resumed)
    assert program.log == ["after"]


def test_a_finally_holds_only_what_can_be_pending_there(program: Any) -> None:
    generator = program.finally_yields()
    next(generator)
    with pytest.raises(RuntimeError, match="generator ignored GeneratorExit"):
        generator.close()
    data = _snap(generator)
    pending = next(name for name in _vars(data) if name.startswith("_bc_pend"))
    assert _vars(data)[pending][0] == "x"
    for planted in ("KeyboardInterrupt", "SystemExit"):
        _vars(data)[pending] = _planted(planted)
        _refused(data, program, f"a {planted} is not what can be pending in this finally (GeneratorExit)")
    resumed = resume(_snap(generator))
    release(generator)
    with pytest.raises(GeneratorExit):
        next(resumed)


@pytest.mark.parametrize("planted", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_a_base_exception_where_nothing_can_hold_one_is_refused(program: Any, planted: str) -> None:
    generator = program.adds()  # no handler or finally around its yields
    next(generator)
    generator.send("a")
    generator.send("o")
    data = _snap(generator)
    _vars(data)["o"] = ["l", _planted(planted)]
    _refused(data, program, "vars['o']: ", f"a {planted}, a BaseException that is not an Exception", "(none here)")
    data = _snap(generator)  # in an exception's context
    _vars(data)["o"] = ["x", "builtins:ValueError", [], {}, None, _planted(planted), False, {}]
    _refused(data, program, "vars['o']: ", f"a {planted}")
    release(generator)


def test_a_base_exception_is_checked_in_the_generator_that_holds_it(program: Any) -> None:
    """A generator holds another that waits in `except GeneratorExit:`, where its GeneratorExit may be (and
    comes back); shared into the first one's variable, or a root no generator holds (as a saved run's
    handoff could), where nothing around the yield can hold one, it is refused."""
    from branchc.continuation.snapshots import decode_graph

    generator = program.holds_handler()
    next(generator)
    data = _snap(generator)
    resumed = resume(json.loads(json.dumps(data)))
    with pytest.raises(StopIteration) as done:
        next(resumed)
    assert done.value.value == ([], "done") and program.log == ["after"]
    graph = data["graph"]
    inner = _vars(data)["sub"]
    kept = next(name for name in inner[1]["vars"] if name.startswith("_bc_exc"))
    graph["objects"].append(inner[1]["vars"][kept])
    shared = len(graph["objects"]) - 1
    inner[1]["vars"][kept] = [shared]
    release(resume(json.loads(json.dumps(data))))  # shared through the table, still held where it may be
    _vars(data)["notes"] = ["l", [shared]]
    _refused(json.loads(json.dumps(data)), program, "vars['notes']: ", "a GeneratorExit, a BaseException that is not")
    del _vars(data)["notes"]
    graph["roots"]["handoff"] = [shared]
    with pytest.raises(SnapshotDataError, match="held where no except clause or finally around a generator's yield"):
        decode_graph(json.loads(json.dumps(graph)), lambda entry, child, path: None)
    release(generator)
