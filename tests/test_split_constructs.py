"""Regression cases, one group per construct the random writer (test_split_random.py) learnt late:
bare and tuple `except` handlers, yields inside assignment and `del` targets, `match` with yields
in the subject and guards, `with` (managers that travel, and one that cannot), `yield from` of a
helper returning a tuple / an exception instance / None, and walrus in comprehensions.

Each program runs through differential.check with explicit scripts: CPython is the reference, in
every mode (compiled; snapshotted and resumed before every operation, raw and through JSON). A
`with` line marked differential.CANNOT_TRAVEL holds a manager that cannot travel: there the
snapshot modes must refuse to snapshot, naming that line (see differential.py).

Programs emit only immutable values or reprs (the log keeps what is emitted by reference).
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
from differential import CANNOT_TRAVEL, C, N, S, T, check, trace
from test_split_random import EXC_INFO, MANAGERS

MODES_NOW: tuple[str, ...] = ("compiled", "raw")
if importlib.util.find_spec("branchc.continuation.snapshots") is not None:
    MODES_NOW += ("json",)

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


V = """
def v(x):
    emit(("v", repr(x)))
    return x
"""

BOX = """
from dataclasses import dataclass, field

@dataclass
class Box:
    x: int = 0
    items: list = field(default_factory=lambda: [0, 1, 2, 3])
    d: dict = field(default_factory=lambda: {None: 0, 0: 1, 1: 2})
"""

MANAGER = MANAGERS  # the random writer's travelling manager

LOCKED = """
import threading

class Locked:
    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()

    def __enter__(self):
        self.lock.acquire(blocking=False)
        emit(("locked", self.name))
        return self.name

    def __exit__(self, typ, value, tb):
        self.lock.release()
        emit(("unlocked", self.name, typ and typ.__name__))
"""

HELPER = """
@resumable
def helper(kind):
    try:
        got = yield ("h", kind)
    except StopIteration as error:
        emit(("helper caught", repr(error)))
        got = error.value
    if kind == "tuple":
        return (kind, got)
    if kind == "stop":
        return StopIteration(got)
    if kind == "error":
        return ValueError("x", got)
    if kind == "bare":
        return
    yield ("again", got)
"""

CASES: list = []


def case(ident: str, source: str, *scripts: list, args: tuple = (), parts: tuple[str, ...] = ()) -> None:
    assert scripts, ident
    program = "".join(parts) + textwrap.dedent(source)
    for index, script in enumerate(scripts):
        CASES.append(pytest.param(program, script, args, id=f"{ident}-{index}"))


# -- bare-except: bare and tuple handlers whose bodies yield -------------------------------------

case(
    "bare-except-yields",
    """
    @resumable
    def gen():
        try:
            raise ValueError("v")
        except:
            got = yield ("handling", cur())
            emit(("after resume", got, cur()))
        emit(("after handler", cur()))
        return got
    """,
    [N, S(5)],
    [N, T("KeyError", "k")],
    [N, C],
    parts=(EXC_INFO,),
)
case(
    "bare-except-catches-thrown",
    """
    @resumable
    def gen():
        try:
            yield 1
        except:
            emit(("caught", cur()))
            yield 2
        yield 3
    """,
    [N, T("KeyError", "k"), N, N],
    [N, T("StopIteration", "s"), N],
    [N, C],  # catches GeneratorExit, then yields: RuntimeError
    [N, T("GeneratorExit", "g")],
    parts=(EXC_INFO,),
)
case(
    "bare-except-reraise-after-yield",
    """
    @resumable
    def gen():
        try:
            try:
                raise KeyError("inner")
            except:
                yield "in handler"
                raise
        except LookupError as error:
            emit(("outer", repr(error), repr(error.__context__)))
        return "done"
    """,
    [N, N],
    [N, T("ValueError", "during")],
)
case(
    "tuple-except-yields",
    """
    @resumable
    def gen(n):
        for i in range(n):
            try:
                if i == 0:
                    raise KeyError(i)
                yield ("body", i)
            except (ValueError, KeyError) as error:
                got = yield ("handling", repr(error))
                emit(("got", got))
            except (StopIteration, GeneratorExit):
                yield "stop or exit"
        return n
    """,
    [N, S(1), T("ValueError", "v"), N, N],
    [N, S(1), T("StopIteration", "s"), N, N],
    [N, S(1), C],
    args=(3,),
)

# -- target-yield: yields inside subscript, attribute and slice targets --------------------------

case(
    "target-subscript-order",
    """
    @resumable
    def gen():
        d = {}
        d[(yield "key?")] = (yield "value?")  # the value first, then the key
        emit(repr(d))
        return repr(d)
    """,
    [N, S("v"), S("k")],
    [N, S("v"), T("KeyError", "k")],
)
case(
    "target-nested-subscript",
    """
    @resumable
    def gen():
        box = {"k": [0, 1, 2]}
        box[(yield "outer?")][(yield "index?")] = v((yield "value?"))
        emit(repr(box))
    """,
    [N, S(9), S("k"), S(1), N],
    [N, S(9), S("k"), S(5)],
    parts=(V,),
)
case(
    "target-attribute-subscript",
    """
    @resumable
    def gen():
        box = Box()
        box.items[(yield "index?")] = yield "value?"
        box.d[(yield "key?")] = 7
        [box, Box(9)][(yield "which?")].x = 5
        emit(repr(box))
        return repr(box)
    """,
    [N, S(8), S(2), S(0), S(1)],
    [N, S(8), S(2), S(0), S(0)],
    parts=(BOX,),
)
case(
    "target-slice",
    """
    @resumable
    def gen():
        items = [0, 1, 2, 3]
        items[(yield "start?"):(yield "stop?")] = [v(7), v(8)]
        emit(repr(items))
        return items
    """,
    [N, S(1), S(3)],
    [N, N, S(2)],
    parts=(V,),
)
case(
    "target-chained-and-unpacked",
    """
    @resumable
    def gen():
        d, items = {}, [0, 0]
        d[(yield "k1")] = items[(yield "i1")] = yield "value"
        d[(yield "k2")], items[(yield "i2")] = (yield "a"), (yield "b")
        emit(repr((d, items)))
    """,
    [N, S(5), S("x"), S(0), S("a"), S("b"), S("y"), S(1), N],
)
case(
    "target-aug-subscript",
    """
    @resumable
    def gen():
        d = {"k": 10}
        d[(yield "key?")] += (yield "amount?")
        emit(repr(d))
        return d["k"]
    """,
    [N, S("k"), S(5)],
    [N, S("missing")],
)
case(
    "target-aug-nested-yield-in-key",  # spilled key `(yield (yield))`: a snapshot skips the outer yield
    """
    @resumable
    def gen():
        d = {None: 0, 0: 1}
        d[(yield (yield "k"))] += 1
        emit(repr(d))
    """,
    [N, S(0), S(0)],
    [N, N, S(0)],
)
case(
    "target-aug-yield-in-call-in-key",
    """
    @resumable
    def gen():
        d = {"k": 1}
        d[v((yield "key?"))] += 1
        emit(repr(d))
    """,
    [N, S("k")],
    parts=(V,),
)
case(
    "target-aug-attribute-owner",
    """
    @resumable
    def gen():
        box = Box()
        box.d[(yield "key?")] += 1
        (box if (yield "which?") else Box(5)).x += (yield "amount?")
        emit(repr(box))
    """,
    [N, S(0), S(True), S(3)],
    [N, S(1), S(False), S(3)],
    parts=(BOX,),
)
case(
    "target-aug-nested-subscript",  # the owner `grid[(yield)]` holds a yield too
    """
    @resumable
    def gen():
        grid = [[0, 1], [2, 3]]
        grid[(yield "row?")][(yield "column?")] += (yield "amount?")
        emit(repr(grid))
        return grid
    """,
    [N, S(1), S(0), S(10)],
    [N, S(1), S(0), T("KeyError", "k")],
)
case(
    "target-aug-slice",
    """
    @resumable
    def gen():
        items = [0, 1, 2, 3]
        items[(yield "start?"):(yield "stop?")] += [9]
        emit(repr(items))
    """,
    [N, S(1), S(2)],
    [N, N, N],
)

# -- del-yield -----------------------------------------------------------------------------------

case(
    "del-subscript",
    """
    @resumable
    def gen():
        d = {None: 0, 0: 1, 1: 2}
        del d[(yield "key?")]
        emit(repr(d))
        return repr(d)
    """,
    [N, S(0)],
    [N, N],
    [N, S(5)],
)
case(
    "del-slice-and-several",
    """
    @resumable
    def gen():
        items, d = [0, 1, 2, 3, 4], {"a": 1, "b": 2}
        del items[(yield "start?"):(yield "stop?")]
        emit(repr(items))
        del d[(yield "key?")], items[(yield "index?")]
        emit(repr((d, items)))
    """,
    [N, S(1), S(3), S("a"), S(0)],
    [N, S(1), S(3), S("zz"), S(0)],
)
case(
    "del-attribute-subscript",
    """
    @resumable
    def gen():
        box = Box()
        del box.items[(yield "index?")], box.d[(yield "key?")]
        emit(repr(box))
    """,
    [N, S(1), S(None)],
    [N, S(1), T("ValueError", "v")],
    parts=(BOX,),
)

# -- match-guard: yields in the subject and in guards ---------------------------------------------

case(
    "match-subject-and-guards",
    """
    @resumable
    def gen():
        match (yield "subject?"):
            case 0:
                emit("zero")
            case [first, *rest] if (yield ("sequence", first)):
                emit(("sequence", first, repr(rest)))
            case {"k": value} if (yield ("mapping", value)):
                emit(("mapping", value))
            case Box(x=x) if (yield ("box", x)):
                emit(("box", x))
            case x if (yield x):
                emit(("guarded", repr(x)))
            case _:
                emit("fallthrough")
        return "done"
    """,
    [N, S(0)],
    [N, S([1, 2]), S(True)],
    [N, S([1, 2]), S(False), S(False)],
    [N, S({"k": 3}), S(1)],
    [N, S(7), S(1)],
    [N, S(7), S(0)],
    [N, S(7), T("KeyError", "in guard")],
    parts=(BOX,),
)
case(
    "match-class-pattern-guard",
    """
    @resumable
    def gen(n):
        for box in (Box(0), Box(n)):
            match box:
                case Box(0) if (yield "zero?"):
                    emit("zero")
                case Box(x, [first, *_]) if x > (yield ("x", x)):
                    emit(("big", x, first))
                case _:
                    emit(("other", repr(box)))
    """,
    [N, S(True), S(1), N],
    [N, S(False), S(5), S(1), N],
    args=(3,),
    parts=(BOX,),
)

# -- with: managers that travel ------------------------------------------------------------------

case(
    "with-manager-body-yields",
    """
    @resumable
    def gen():
        with Manager("m") as m:
            got = yield ("inside", m.name)
            emit(("got", got))
        return got
    """,
    [N, S(1)],
    [N, T("KeyError", "k")],
    [N, C],
    parts=(MANAGER,),
)
case(
    "with-suppressing",
    """
    @resumable
    def gen():
        with Manager("quiet", True):
            yield 1
            raise ValueError("swallowed")
        with contextlib.suppress(KeyError):
            yield 2
        yield 3
        return "end"
    """,
    [N, N, N, N],
    [N, T("RuntimeError", "r"), T("KeyError", "k"), N],
    [N, N, T("ValueError", "v")],
    [N, C],  # the manager suppresses GeneratorExit, then the generator yields: RuntimeError
    parts=(MANAGER,),
)
case(
    "with-several-items-and-targets",
    """
    @resumable
    def gen():
        with Manager((yield "name?")) as first, contextlib.nullcontext((yield "value?")) as value:
            got = yield (first.name, value)
            emit(("got", got))
        for i in range(3):
            with Manager(i):
                if (yield i):
                    break
        return "end"
    """,
    [N, S("a"), S(1), S(2), S(0), S(1)],
    [N, S("a"), S(1), T("KeyError", "k")],
    [N, S("a"), S(1), S(2), S(0), S(0), S(0)],
    parts=(MANAGER,),
)
case(
    "with-nested-and-return",
    """
    @resumable
    def gen():
        with Manager("outer"):
            with contextlib.suppress(KeyError), Manager("inner"):
                yield 1
                raise KeyError("inner")
            if (yield 2):
                return "early"
        return "late"
    """,
    [N, N, S(1)],
    [N, N, S(0)],
    [N, N, T("ValueError", "v")],
    parts=(MANAGER,),
)

# -- with-unsafe: a manager that cannot travel in a snapshot --------------------------------------

case(
    "with-unsafe-lock",
    f"""
    @resumable
    def gen():
        yield "before"
        with Locked("L") as name:  {CANNOT_TRAVEL}
            got = yield ("locked", name)
            emit(("got", got))
        yield "after"
        return got
    """,
    [N, N, S(1), N],
    [N, N, T("KeyError", "k"), N],
    [N, N, C],
    parts=(LOCKED,),
)
case(
    "with-unsafe-nested",
    f"""
    @resumable
    def gen():
        with Manager("m"), Locked("L"):  {CANNOT_TRAVEL}
            yield 1
            with Manager("n"):
                yield 2
        yield 3
    """,
    [N, N, N, N],
    [N, N, T("ValueError", "v")],
    parts=(MANAGER, LOCKED),
)

# -- yf-return-values ------------------------------------------------------------------------------

case(
    "yf-return-values",
    """
    @resumable
    def gen():
        results = []
        for kind in ("tuple", "stop", "error", "bare", "none"):
            result = yield from helper(kind)
            emit(repr(result))
            results.append(repr(result))
        return results
    """,
    [N, S(1), S(2), S(3), S(4), S(0), N],
    [N, T("StopIteration", "s"), T("StopIteration", 7), N, N, N, N],
    parts=(HELPER,),
)
case(
    "yf-returned-exception-travels",
    """
    @resumable
    def gen():
        error = yield from helper("error")
        got = yield repr(error)
        stop = yield from helper("stop")
        yield repr((error, stop, got))
        return stop
    """,
    [N, S(1), S(2), S(3), N, N],
    parts=(HELPER,),
)
case(
    "yf-stopiteration-thrown",
    """
    @resumable
    def gen():
        try:
            first = yield from helper("none")
        except RuntimeError as error:
            emit(("runtime", repr(error), repr(error.__cause__)))
            first = "converted"
        try:
            second = yield from [1, 2]
        except StopIteration as error:
            emit(("stop", repr(error)))
            second = "caught"
        return (first, second)
    """,
    [N, T("StopIteration", "a"), T("StopIteration", "b"), N, T("StopIteration", "c")],
    [N, S(0), T("StopIteration", "b")],
    [N, N, N, T("StopIteration", "c")],
    parts=(HELPER,),
)

# -- walrus-comprehension ------------------------------------------------------------------------

case(
    "walrus-comprehension-binds",
    """
    @resumable
    def gen(n):
        squares = [(t := y * y) for y in range((yield "n?") or n)]
        got = yield ("last", t, squares)
        total = sum((s := y) for y in range(got or 2))
        return (t, s, total)
    """,
    [N, S(3), S(4)],
    [N, N, N],
    [N, S(2), T("ValueError", "v")],
    args=(2,),
)
case(
    "walrus-comprehension-unbound",
    """
    @resumable
    def gen():
        count = yield "count?"
        values = [(t := y) for y in range(count)]
        yield ("values", values)
        yield ("t", t)
    """,
    [N, S(0), N],
    [N, S(2), N, N],
)
case(
    "comprehension-reads-before-binding",
    """
    @resumable
    def gen():
        count = yield "count?"
        try:
            emit([q + y for y in range(count)])
        except NameError as error:
            emit(("name error", str(error)))
        q = yield "q?"
        return [q + y for y in range(count)]
    """,
    [N, S(0), S(1)],
    [N, S(2), S(1)],
)


# -- found while fixing the above: templates that lost parentheses, and generator objects ---------

case(
    "unparenthesized-tuples",
    """
    @resumable
    def gen():
        for v in 1, 2:
            emit(("for", v))
            yield v
        for w in *[3], 4, 5:
            yield w
        try:
            x = yield "x"
        finally:
            yield "cleanup"
        return x, 2
    """,
    [N, N, N, N, N, S(7), N, N],
    [N, N, N, N, N, S(7), C],
)
case(
    "not-of-a-lifted-boolean",
    """
    @resumable
    def gen():
        count = 0
        while (yield "more?") or count < 1:
            count += 1
            if count > 3:
                break
        assert (yield "assert?") or count, "message"
        return count
    """,
    [N, S(0), S(1), S(0), S(1), N],
    [N, S(1), S(1), S(1), S(1), S(0)],
)
case(
    "generator-object-is-a-generator",
    """
    import copy
    import inspect
    import pickle
    import types

    @resumable
    def sub():
        yield 1

    @resumable
    def gen():
        g = sub()
        emit((type(g).__name__, isinstance(g, types.GeneratorType), inspect.isgenerator(g)))
        emit((g.__name__, g.__qualname__, g.gi_code is sub.__code__, inspect.isgeneratorfunction(sub)))
        for attempt in (copy.copy, pickle.dumps):
            try:
                attempt(g)
            except TypeError as error:
                emit(("refused", str(error)))
        yield next(g)
    """,
    [N, N],
)
case(
    "stopiteration-thrown-into-yield-from",
    """
    @resumable
    def inner():
        try:
            yield 1
        except StopIteration as error:
            emit(("inner caught", repr(error)))
            yield 2
        return "inner done"

    @resumable
    def gen():
        try:
            got = yield from inner()
        except Exception as error:
            emit(("outer caught", repr(error)))
            got = "lost"
        yield got
    """,
    [N, T("StopIteration", "x"), N, N],
    [N, T("StopIteration", "x"), T("StopIteration", "y"), N],
)

case(
    "unpacking-in-a-call-before-a-yield",
    """
    def f(*a, **k):
        emit(("f", a, sorted(k.items())))

    def said(error):  # without the module, whose name differs between the native and compiled loads
        return str(error).split(".", 1)[-1] if "argument after" in str(error) else str(error)

    class Keys:
        def keys(self):
            emit("keys")
            return ["z"]

        def __getitem__(self, key):
            emit(("get", key))
            return 1

    @resumable
    def gen():
        for one, many in [(1, [1, 2]), ({"a": 1}, None), (Keys(), "ab"), (None, 5)]:
            try:
                f(**one, k=(yield "k"))
            except TypeError as error:
                emit(("kw", said(error)))
            try:
                f(*many, (yield "p"))
            except TypeError as error:
                emit(("star", said(error)))
            try:
                f(*many, k=(yield "q"))
            except TypeError as error:
                emit(("star-k", said(error)))
        try:
            f(*1, (yield 1))
        except TypeError as error:
            emit(("literal", said(error)))
    """,
    [N] * 16,
)


@pytest.mark.parametrize(("source", "script", "args"), CASES)
def test_construct(source, script, args):
    check(source, script, args, modes=MODES_NOW)


def test_untravelable_steps_found_natively():
    """The harness itself: before which operations the native generator waits inside a marked `with`."""
    source = LOCKED + textwrap.dedent(
        f"""
        @resumable
        def gen():
            yield 0
            with Locked("L"):  {CANNOT_TRAVEL}
                yield 1
                with Locked("M"):  {CANNOT_TRAVEL}
                    yield 2
            yield 3
        """
    )
    lines = ("from branchc import resumable\n" + source).splitlines()
    outer, inner = (number for number, line in enumerate(lines, 1) if CANNOT_TRAVEL in line)
    untravelable: list[tuple[int, ...]] = []
    trace(source, [N, N, N, N, N, N], "native", (), untravelable)
    assert untravelable == [(), (), (outer,), (outer, inner), (), ()]
