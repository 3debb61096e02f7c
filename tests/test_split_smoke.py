"""First differential checks of the splitter (the full corpus is in test_split_programs.py)."""

import pytest
from differential import check

N = ("next",)


def S(v):
    return ("send", v)


def T(name, msg="x"):
    return ("throw", name, msg)


C = ("close",)

PROGRAMS = [
    (
        """
@resumable
def gen():
    x = yield 1
    y = yield x + 1
    return x + y
""",
        [N, S(2), S(3), N],
    ),
    (
        """
@resumable
def gen():
    total = 0
    for i in range(4):
        x = yield i
        if x:
            total += x
        else:
            continue
        emit(total)
    else:
        emit("else")
    return total
""",
        [N, S(1), N, S(5), N, N],
    ),
    (
        """
@resumable
def gen():
    try:
        yield 1
    except ValueError as e:
        emit(("caught", str(e)))
        y = yield "in handler"
        raise
    finally:
        emit("finally")
        yield "fin"
""",
        [N, T("ValueError", "boom"), S(3), N, N],
    ),
    (
        """
def a():
    emit("a")
    return 1

def c():
    emit("c")
    return 3

def f(*args):
    emit(("f", args))
    return sum(args)

@resumable
def gen():
    r = f(a(), (yield "b"), c())
    s = 10 + (yield r)
    t = (yield 1) or (yield 2)
    u = [a(), (yield 3), c()]
    return r, s, t, u
""",
        [N, S(2), S(5), S(0), S(7), S(9), N],
    ),
    (
        """
@resumable
def gen():
    i = 0
    while i < 3:
        try:
            x = yield i
            if x == "b":
                break
            if x == "r":
                return "ret"
        finally:
            emit(("fin", i))
            y = yield ("f", i)
            emit(("after", y))
        i += 1
    return "end"
""",
        [N, S("b"), S("y"), N],
    ),
    (
        """
@resumable
def gen():
    i = 0
    while i < 3:
        try:
            x = yield i
            if x == "r":
                return "ret"
        finally:
            y = yield ("f", i)
        i += 1
    return "end"
""",
        [N, S("r"), S("y"), N],
    ),
    (
        """
@resumable
def gen():
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            yield "handling"
            raise ValueError("outer")
    except ValueError as e:
        yield ("got", repr(e.__context__))
        raise RuntimeError("final") from e
""",
        [N, N, N, N],
    ),
    (
        """
@resumable
def gen():
    try:
        yield 1
        yield 2
    finally:
        emit("cleanup")
""",
        [N, C, N],
    ),
    (
        """
@resumable
def gen():
    try:
        yield 1
    finally:
        yield "ignored"
""",
        [N, C, N],
    ),
    (
        """
@resumable
def gen():
    x = yield 1
    if x > 1:
        y = yield "big"
    elif x > 0:
        y = yield "small"
    else:
        y = yield "zero"
    match y:
        case [a, b]:
            z = yield ("pair", a, b)
        case {"k": v}:
            z = yield ("dict", v)
        case _:
            z = yield "other"
    return z
""",
        [N, S(1), S([4, 5]), S("done")],
    ),
    (
        """
def inner():
    x = yield "i1"
    emit(("inner got", x))
    y = yield "i2"
    return x, y

@resumable
def gen():
    r = yield from inner()
    s = yield from [10, 20]
    return r, s
""",
        [N, S("a"), T("KeyError", "k")],
    ),
    (
        """
@resumable
def sub():
    x = yield "s1"
    try:
        y = yield "s2"
    except ValueError:
        y = "handled"
    return x, y

@resumable
def gen():
    r = yield from sub()
    return r
""",
        [N, S(1), T("ValueError"), N],
    ),
    (
        """
@resumable
def gen():
    x = yield
    raise StopIteration("pep479")
""",
        [N, S(1)],
    ),
    (
        """
@resumable
def gen(a, b=2, *rest, c, d=4, **kw):
    x = yield (a, b, rest, c, d, kw)
    del a
    try:
        a
    except UnboundLocalError as e:
        yield str(e)
    return x
""",
        [N, S(5), N],
    ),
]


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
def test_program(index):
    source, script = PROGRAMS[index]
    args = (1, 2, 3) if "c, d=4" in source else ()
    if args:
        check(source.replace("gen(a, b=2, *rest, c, d=4, **kw)", "gen(a, b=2, *rest, c=7, d=4, **kw)"), script, args)
    elif "yield from inner()" in source:
        check(source, script, modes=("compiled", "raw"))  # a native generator cannot travel as JSON
    elif 'yield "ignored"' in source:
        check(source, script, modes=("compiled", "raw"))  # a pending GeneratorExit cannot travel as JSON
    else:
        check(source, script)


def test_a_native_generator_in_progress_cannot_travel():
    from differential import load

    from branchc.continuation.snapshots import NotSerializableError, snapshot

    module = load(PROGRAMS[10][0], compiled=True)
    module.emit = print
    generator = module.gen()
    next(generator)
    with pytest.raises(
        NotSerializableError, match=r"gen \(waiting at <prog_\d+_c>:11\): the iterator of a `yield from`"
    ):
        snapshot(generator)


def test_a_closure_travels_and_a_forged_cell_is_refused():
    import json

    from differential import load

    from branchc import resume, snapshot
    from branchc.continuation.codec import SnapshotDataError

    module = load(
        "def outer(base):\n"
        "    @resumable\n"
        "    def gen(n):\n"
        "        x = yield base + n\n"
        "        return x * base\n"
        "    return gen\n"
        "gen = outer(5)\n",
        compiled=True,
    )
    generator = module.gen(1)
    assert next(generator) == 6
    text = json.dumps(snapshot(generator))
    again = resume(json.loads(text))
    with pytest.raises(StopIteration) as stop:
        again.send(3)
    assert stop.value.value == 15
    forged = json.loads(text.replace('"free": {"base"', '"free": {"evil"'))
    with pytest.raises(SnapshotDataError, match=r"free\['evil'\]: .*closes over no such cell"):
        resume(forged)
