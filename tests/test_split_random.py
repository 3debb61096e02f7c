"""Random generator programs against CPython (hypothesis).

A strategy writes small, deterministic, always-terminating generator programs: nested
if / while / for (bounded: `for` over a short range, list or string, `while` on a counter
that is bumped first thing in the body), try / except / else / finally with yields in any
clause, yields inside expressions (call arguments, binary operators, `or` / `and`,
conditional expressions, comparisons, displays), raise of builtin exceptions, early
return, break / continue, and `yield from` of a small list or of a compiled helper. A
second strategy writes the script of next / send / throw / close. `emit()` calls make the
evaluation order observable; differential.check compares every mode with the native
trace and prints the program and the script when one differs.

Newer constructs are gated by named features (FEATURES, all on by default), so a run can
select a subset while the compiler catches up: BRANCHC_FUZZ_FEATURES="with,match-guard"
(comma or space separated; "none" or an empty value: only the constructs above).

- bare-except: bare `except:` and more tuple `except (A, B):` handlers, their bodies yield
  and look at sys.exc_info();
- target-yield: yields inside subscript, attribute and slice targets, plain, chained,
  unpacked and augmented (`d[(yield)] = (yield)`, `box.items[(yield) % 3] += 1`,
  `items[(yield):(yield)] = [...]`) on program-local dicts, lists and a dataclass `Box`;
- del-yield: `del d[(yield)]`, `del items[(yield):]`, several targets;
- match-guard: `match` with yields in the subject and in guards (`case m if (yield m):`),
  over literal, or, capture, sequence, mapping and class (`Box`) patterns;
- with: `with` bodies that yield (and yields in the items, `as` targets, `with a, b:`) over
  managers that can travel: the prelude's `Manager` dataclass (emits on enter and exit,
  suppresses when told), contextlib.suppress(KeyError), contextlib.nullcontext(x);
- with-unsafe: rarely, `with Locked(...):` whose manager holds a threading.Lock: its line
  carries differential.CANNOT_TRAVEL, so the snapshot modes must refuse to snapshot inside it
  (naming the `with` line), and the compiled mode must still match CPython;
- yf-return-values: `yield from` a compiled helper returning a tuple, an exception instance
  or None, and StopIteration thrown into a generator inside `yield from`;
- walrus-comprehension: `(t := y)` in comprehensions binding the generator's variables
  (then read, perhaps unbound), and comprehensions reading a variable before it is bound.

On Python 3.12 and later, three more (none of them parses on 3.11):

- generics: PEP 695 type parameters on the generator (`def gen[T, *Ts, **P](a)`, bounds and
  constraints; PEP 696 defaults on 3.13), or the generator as a method of a generic class, with
  the parameters read in the body (`T.__name__`);
- fstring-nesting: PEP 701 f-strings, the same quotes nested, yields in the braces and in the
  format spec (`f"{x!r:>{(yield 1) or 1}}|{f"{(yield 2)}"}"`);
- type-alias: `type` statements in the program's module (`type Vec[K] = dict[str, K]`), read lazily.

BRANCHC_FUZZ_EXAMPLES sets the number of examples (default 1000).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

import pytest
from differential import CANNOT_TRAVEL, check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MODES_NOW: tuple[str, ...] = ("compiled", "raw")
if importlib.util.find_spec("branchc.continuation.snapshots") is not None:
    MODES_NOW += ("json",)

EXAMPLES = int(os.environ.get("BRANCHC_FUZZ_EXAMPLES", "1000"))

NEWER_SYNTAX = frozenset({"generics", "fstring-nesting", "type-alias"})  # features only 3.12 and later write
FEATURES = frozenset(
    {
        "bare-except",
        "target-yield",
        "del-yield",
        "match-guard",
        "with",
        "with-unsafe",
        "yf-return-values",
        "walrus-comprehension",
        *(NEWER_SYNTAX if sys.version_info >= (3, 12) else ()),
    }
)


def features_from(text: str | None) -> frozenset[str]:
    """The features a BRANCHC_FUZZ_FEATURES value selects: all when unset (or "all")."""
    if text is None:
        return FEATURES
    names = {name for name in re.split(r"[,\s]+", text) if name}
    if names == {"all"}:
        return FEATURES
    names.discard("none")
    unknown = names - FEATURES
    if unknown:
        raise ValueError(f"BRANCHC_FUZZ_FEATURES: unknown {sorted(unknown)}; known: {sorted(FEATURES)}")
    return frozenset(names)


ENABLED = features_from(os.environ.get("BRANCHC_FUZZ_FEATURES"))

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# `out` wraps emit: `emit` itself is the harness's bound list.append, and a yield inside the
# arguments makes the callee a value computed before the yield, which a JSON snapshot would copy
# (with its list); a module-level function travels by name.
PRELUDE = """
def out(x):
    emit(x)

def v(x):
    emit(("v", x))
    return x

def f(*args):
    emit(("f",) + args)
    return len(args)
"""

# The compiled helper a program may delegate to: yields in a loop, a handler that returns,
# a finally, and a return value; included only when the program uses it.
HELPER = """
@resumable
def helper(n):
    total = 0
    try:
        for k in range(n):
            got = yield ("h", k)
            if got:
                total += got
    except KeyError as error:
        emit(("helper caught", str(error)))
        return "helper-caught"
    finally:
        emit(("helper finally", n))
    return total
"""

# The rest of the prelude comes in parts, each included only when the program uses it (compiling
# the prelude is part of what every example costs).

# bare-except: a bare handler has no name, so what it caught is read from sys.exc_info().
EXC_INFO = """
import sys

def cur():
    return repr(sys.exc_info()[1])
"""

# Program-local containers (target-yield, del-yield, match-guard): a dataclass travels in a
# snapshot, and its repr shows everything. Every key a script can send (None, 0..3) is in a
# dict, and every list is long enough for an index `% 3`; `fill` puts back what a `del` took.
BOX = """
from dataclasses import dataclass, field

@dataclass
class Box:
    x: int = 0
    items: list = field(default_factory=lambda: [0, 1, 2, 3])
    d: dict = field(default_factory=lambda: {None: 0, 0: 1, 1: 2, 2: 3, 3: 4})
    tag: object = None

def k(x):
    return x % 4 if type(x) is int else None

def fill(*xs):
    for x in xs:
        if type(x) is dict:
            for key in (None, 0, 1, 2, 3):
                x.setdefault(key, 0)
        else:
            x.extend([0] * (4 - len(x)))
"""

CONTAINERS = {  # name -> its first binding, at the top of gen
    "d": "d = {None: 0, 0: 1, 1: 2, 2: 3, 3: 4}",
    "items": "items = [0, 1, 2, 3]",
    "grid": "grid = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]",
    "box": "box = Box()",
    "boxes": "boxes = [Box(), Box(1)]",
}

# with: context managers that can travel in a snapshot.
MANAGERS = """
import contextlib
from dataclasses import dataclass

@dataclass
class Manager:
    name: object
    suppress: bool = False

    def __enter__(self):
        emit(("enter", self.name))
        return self

    def __exit__(self, typ, value, tb):
        emit(("exit", self.name, typ and typ.__name__))
        return self.suppress
"""

# with-unsafe: a manager holding a lock cannot travel in a snapshot.
LOCKED = """
import threading

class Locked:
    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()

    def __enter__(self):
        self.lock.acquire(blocking=False)
        emit(("locked", self.name))

    def __exit__(self, typ, value, tb):
        self.lock.release()
        emit(("unlocked", self.name, typ and typ.__name__))
"""

# yf-return-values: a compiled helper that returns a tuple, an exception instance or None, and
# may catch a StopIteration thrown into it.
HELPER2 = """
@resumable
def helper2(kind):
    try:
        got = yield ("h2", kind)
    except StopIteration as error:
        emit(("h2 caught", repr(error)))
        got = error.value
    if kind == 0:
        return (kind, got)
    if kind == 1:
        return StopIteration(got)
    if kind == 2:
        return ValueError("x", got)
    if got:
        return
    yield ("h2 again", got)
"""

# type-alias (3.12): aliases whose values are evaluated when read.
ALIASES = """
type Alias = list[int]
type Vec[K] = dict[str, K]
"""

# generics (3.12): the generator's type parameters; defaults are 3.13's (PEP 696).
TYPE_PARAMS = ("[T]", "[T: int]", "[T, *Ts]", "[T, **P]", "[T: (int, str), *Ts, **P]")
TYPE_PARAMS_313 = ("[T = int]", "[T: int = bool, *Ts = *tuple[int, ...]]", "[T, **P = [int]]")

NAMES = ("a", "b", "c")
RAISED = ("ValueError", "KeyError", "RuntimeError")
CAUGHT = ("ValueError", "KeyError", "LookupError", "Exception", "(ValueError, KeyError)")
THROWN = ("ValueError", "KeyError", "RuntimeError", "ValueError", "KeyError", "GeneratorExit", "StopIteration")
# The gated statements (each named after its feature); the compound ones need room to nest.
NEW_KINDS = (
    "bare-except",
    "target-yield",
    "target-yield",
    "del-yield",
    "match-guard",
    "match-guard",
    "with",
    "with",
    "with-unsafe",
    "yf-return-values",
    "walrus-comprehension",
    "walrus-comprehension",
)
COMPOUND_KINDS = frozenset({"bare-except", "match-guard", "with", "with-unsafe"})
# bare-except: more tuples (GeneratorExit and StopIteration among them), and a bare handler
CAUGHT_MORE = ("(KeyError, RuntimeError)", "(StopIteration, ValueError)", "(GeneratorExit, KeyError)")


class _Writer:
    """Writes one program from hypothesis draws. Budgets keep programs small: compiling
    is what a test example costs, so programs stay a dozen statements or so."""

    def __init__(self, draw, features: frozenset[str], methods: bool = True):
        self.draw = draw
        self.features = features
        self.methods = methods  # generics: the generator may be a method of a generic class
        self.statements = 0
        self.max_statements = draw(st.integers(3, 10))
        self.ids = 0
        self.uses_helper = False
        self.in_fstring = False
        self.scope: list[str] = list(NAMES)  # readable names (loop variables join while in scope)
        self.parts: set[str] = set()  # prelude parts used: "exc", "box", "managers", "locked", "helper2"
        self.containers: set[str] = set()  # program-local containers used
        self.type_params = ""  # generics: the generator's (or its class's) type parameters

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def chance(self, percent: int) -> bool:
        return self.draw(st.integers(0, 99)) < percent

    def new_id(self) -> int:
        self.ids += 1
        return self.ids

    def on(self, feature: str) -> bool:
        return feature in self.features

    # -- expressions ---------------------------------------------------------------------------
    # Two sorts keep programs meaningful (few TypeErrors): `num` is an int (or a bool) as long as
    # the script sends ints, `value` is anything printable (a num, None, a string, a display,
    # the value of a `yield from`). Yields appear in both.

    def num(self, depth: int = 0) -> str:
        if depth >= 2 or self.chance(25):
            return self.num_atom()
        kind = self.pick(
            (
                "yield",
                "yield",
                "yield",
                "call",
                "v",
                "binop",
                "binop",
                "or",
                "and",
                "ifexp",
                "compare",
                "neg",
                "not",
                "subscript",
            )
        )
        n = lambda: self.num(depth + 1)  # noqa: E731
        if kind == "yield":
            return f"(yield {self.value(depth + 1)})" if self.chance(85) else "((yield) or 0)"
        if kind == "call":
            return f"f({', '.join(self.value(depth + 1) for _ in range(self.draw(st.integers(0, 3))))})"
        if kind == "v":
            return f"v({n()})"
        if kind == "binop":
            return f"({n()} {self.pick(('+', '-', '*'))} {n()})"
        if kind in ("or", "and"):
            return f"({n()} {kind} {n()})"
        if kind == "ifexp":
            return f"({n()} if {n()} else {n()})"
        if kind == "compare":
            if self.chance(30):
                return f"({n()} < {n()} <= {n()})"
            return f"({n()} {self.pick(('==', '!=', '<', '>='))} {n()})"
        if kind == "neg":
            return f"(-{n()})"
        if kind == "subscript":
            return f"[{n()}, {n()}][{n()} % 2]"
        return f"(not {self.value(depth + 1)})"

    def value(self, depth: int = 0) -> str:
        if depth >= 2 or self.chance(25):
            return self.pick((self.num_atom(), "None", "'s'", "r"))
        kinds = ("num", "num", "num", "list", "tuple", "dict", "yieldfrom", "v", "fstring")
        kinds += ("typed",) if self.type_params or self.on("type-alias") else ()
        kind = self.pick(kinds)
        x = lambda: self.value(depth + 1)  # noqa: E731
        if kind == "num":
            return self.num(depth)
        if kind == "typed":
            return self.typed()
        if kind == "list":
            return f"[{', '.join(x() for _ in range(self.draw(st.integers(0, 3))))}]"
        if kind == "tuple":
            return f"({x()}, {x()})"
        if kind == "dict":
            return f"{{{self.num(depth + 1)}: {x()}}}"
        if kind == "v":
            return f"v({x()})"
        if kind == "fstring" and self.on("fstring-nesting") and self.chance(60):  # 3.12: quotes nest freely
            spec = f"{{(yield {self.num_atom()}) or 1}}"
            return f'f"{{ {x()}!r:>{spec} }}|{{ f"{{ {x()} }}" }}"'
        if kind == "fstring" and not self.in_fstring:  # 3.11: an f-string cannot nest its own quotes
            self.in_fstring = True
            text = f'f"{{ {x()}!r}}-{{ {self.num(depth + 1)} }}"'
            self.in_fstring = False
            return text
        if kind == "fstring":
            return x()
        if self.on("yf-return-values") and self.chance(30):
            return f"(yield from {self.helper2()})"
        if self.chance(40):
            self.uses_helper = True
            return f"(yield from helper({self.pick(('0', '1', '2'))}))"
        return f"(yield from [{x()}, {x()}])"

    def typed(self) -> str:
        """generics, type-alias: a type parameter or an alias, read in the body."""
        options = []
        if self.type_params:
            options += ["T.__name__", "repr(T.__bound__)", "repr(T.__constraints__)"]
            options += ["Ts.__name__"] if "*Ts" in self.type_params else []
            options += ["repr(T.__default__)"] if "=" in self.type_params else []
        if self.on("type-alias"):
            self.parts.add("aliases")
            options += ["repr(Alias.__value__)", "repr(Vec[int])", "Vec.__type_params__[0].__name__"]
        return self.pick(tuple(options))

    def num_atom(self) -> str:
        if self.chance(55):
            return self.pick(self.scope)
        return self.pick(("0", "1", "2", "3"))

    def test(self) -> str:
        """A condition: mostly a comparison or a yield, so both branches get taken."""
        kind = self.pick(("yield", "compare", "num"))
        if kind == "yield":
            return f"(yield {self.value(1)})"
        if kind == "compare":
            return f"{self.num(1)} {self.pick(('==', '!=', '<', '>='))} {self.num_atom()}"
        return self.num()

    # -- statements ----------------------------------------------------------------------------

    def block(self, depth: int, ctx: frozenset[str]) -> list[str]:
        count = self.draw(st.integers(2, 5) if depth == 0 else st.integers(1, 3))
        lines: list[str] = []
        for _ in range(count):
            if self.statements >= self.max_statements and lines:
                break
            lines += self.statement(depth, ctx)
        return lines

    def statement(self, depth: int, ctx: frozenset[str]) -> list[str]:
        self.statements += 1
        kinds = [
            "emit",
            "assign",
            "augassign",
            "yield",
            "yield",
            "yield-assign",
            "yield-assign",
            "yield-from",
            "raise",
            "del",
        ]
        compound = depth < 3 and self.statements < self.max_statements
        if compound:
            kinds += ["if", "for", "while", "try", "try"]
        if "loop" in ctx:
            kinds += ["break", "continue"]
        if "handler" in ctx:
            kinds += ["reraise"]
        # The gated constructs make a statement in four, whichever of them are on (so each is well
        # represented alone, and the older mix still makes most of a program).
        new = [kind for kind in NEW_KINDS if self.on(kind) and (compound or kind not in COMPOUND_KINDS)]
        kind = self.pick(tuple(new)) if new and self.chance(25) else self.pick(tuple(kinds))
        if kind == "with-unsafe" and self.on("with") and self.chance(50):
            kind = "with"  # rare: only one program in a few holds a lock
        if kind == "raise" and depth and self.chance(25):
            kind = "return"  # rare, and never at the top level: it ends the program
        if kind == "emit":
            return [f"out({self.value()})"]
        if kind == "assign":
            return [f"{self.pick(NAMES)} = {self.num()}"]
        if kind == "augassign":
            return [f"{self.pick(NAMES)} += {self.num()}"]
        if kind == "yield":
            return [f"yield {self.value(1)}"]
        if kind == "yield-assign":
            return [f"{self.pick(NAMES)} = yield {self.value(1)}"]
        if kind == "yield-from":
            if self.chance(40):
                self.uses_helper = True
                return [f"r = yield from helper({self.pick(('0', '1', '2'))})"]
            return [f"yield from [{self.value(1)}, {self.value(1)}]"]
        if kind == "raise":
            exc = f"{self.pick(RAISED)}({self.value(1)})"
            if self.chance(20):
                return [f"raise {exc} from None"]
            if self.chance(20):
                return [f"raise {exc} from {self.pick(RAISED)}({self.num_atom()})"]
            return [f"raise {exc}"]
        if kind == "reraise":
            return ["raise"]
        if kind == "del":  # unbound across a yield, then bound again
            name = self.pick(NAMES)
            return [f"del {name}", f"yield {self.value(1)}", f"{name} = {self.num()}"]
        if kind == "return":
            return [f"return {self.value()}"] if self.chance(80) else ["return"]
        if kind in ("break", "continue"):
            return [kind]
        if kind == "if":
            return self.if_(depth, ctx)
        if kind == "for":
            return self.for_(depth, ctx)
        if kind == "while":
            return self.while_(depth, ctx)
        if kind == "target-yield":
            return self.target_statement()
        if kind == "del-yield":
            return self.del_statement()
        if kind == "walrus-comprehension":
            return self.walrus_statement()
        if kind == "yf-return-values":
            return self.yield_from_statement()
        if kind == "bare-except":
            return self.try_(depth, ctx, bare=True)
        if kind == "match-guard":
            return self.match_(depth, ctx)
        if kind == "with":
            return self.with_(depth, ctx)
        if kind == "with-unsafe":
            return self.with_unsafe(depth, ctx)
        return self.try_(depth, ctx)

    def indent(self, lines: list[str]) -> list[str]:
        return ["    " + line for line in lines]

    def if_(self, depth: int, ctx: frozenset[str]) -> list[str]:
        out = [f"if {self.test()}:", *self.indent(self.block(depth + 1, ctx))]
        if self.chance(30):
            out += [f"elif {self.test()}:", *self.indent(self.block(depth + 1, ctx))]
        if self.chance(50):
            out += ["else:", *self.indent(self.block(depth + 1, ctx))]
        return out

    def for_(self, depth: int, ctx: frozenset[str]) -> list[str]:
        var = f"i{self.new_id()}"
        source = self.pick(("range(0)", "range(1)", "range(2)", "range(3)", "list"))
        if source == "list":
            source = f"[{self.num(1)}, {self.num(1)}]"
        elif self.chance(20):
            source = f"(yield {source})"  # a yield in the iterable: the sent value is iterated
            source = f"{source} or {self.pick(('range(2)', '[1]'))}"
        self.scope.append(var)
        body = self.block(depth + 1, ctx | {"loop"})
        self.scope.remove(var)
        out = [f"for {var} in {source}:", *self.indent(body)]
        if self.chance(30):
            out += ["else:", *self.indent(self.block(depth + 1, ctx))]
        return out

    def while_(self, depth: int, ctx: frozenset[str]) -> list[str]:
        var = f"w{self.new_id()}"
        bound = self.pick(("1", "2", "3"))
        condition = f"{var} < {bound}"
        if self.chance(30):
            condition = f"{condition} and (yield ({var!r}, {var}))"
        body = [f"{var} += 1", *self.block(depth + 1, ctx | {"loop"})]
        out = [f"{var} = 0", f"while {condition}:", *self.indent(body)]
        if self.chance(30):
            out += ["else:", *self.indent(self.block(depth + 1, ctx))]
        return out

    def try_(self, depth: int, ctx: frozenset[str], bare: bool = False) -> list[str]:
        """A try statement; `bare` (bare-except): one with a bare handler or a tuple one, whose bodies yield."""
        out = ["try:", *self.indent(self.block(depth + 1, ctx))]
        handlers = self.draw(st.integers(1, 2) if bare else st.integers(0, 2))
        final = handlers == 0 or self.chance(40)
        more = bare or (self.on("bare-except") and self.chance(30))
        for index in range(handlers):
            if more and index == handlers - 1 and self.chance(65):  # a bare handler comes last
                self.parts.add("exc")
                body = ["out(('bare', cur()))", *self.handler_yield(), *self.block(depth + 1, ctx | {"handler"})]
                out += ["except:", *self.indent(body)]
                continue
            caught = self.pick(CAUGHT + CAUGHT_MORE) if more else self.pick(CAUGHT)
            forced = self.handler_yield() if more and caught.startswith("(") else []
            if self.chance(50):
                name = f"e{self.new_id()}"
                body = [f"out(('caught', repr({name})))", *forced, *self.block(depth + 1, ctx | {"handler"})]
                out += [f"except {caught} as {name}:", *self.indent(body)]
            else:
                out += [f"except {caught}:", *self.indent([*forced, *self.block(depth + 1, ctx | {"handler"})])]
        if handlers and self.chance(30):
            out += ["else:", *self.indent(self.block(depth + 1, ctx))]
        if final:
            out += ["finally:", *self.indent(self.block(depth + 1, ctx))]
        return out

    def handler_yield(self) -> list[str]:
        """bare-except: a handler whose body yields (mostly first thing), then looks at what it caught."""
        if not self.chance(80):
            return []
        if self.chance(50):
            self.parts.add("exc")
            return [f"{self.pick(NAMES)} = yield ('handling', cur())"]
        return [f"yield {self.value(1)}"]

    # -- target-yield, del-yield ---------------------------------------------------------------

    def container(self, name: str) -> str:
        self.containers.add(name)
        self.parts.add("box")
        return name

    def key(self) -> str:
        """A dict key: every value a script sends (None, 0..3) is one."""
        roll = self.draw(st.integers(0, 99))
        if roll < 50:
            return f"(yield {self.value(1)})"
        if roll < 65:
            return "((yield) or 0)"
        if roll < 80:
            return f"k({self.num(1)})"
        return self.pick(("None", "0", "1", "2", "3"))

    def index(self) -> str:
        """A list index, mostly in range."""
        roll = self.draw(st.integers(0, 99))
        if roll < 25:
            return f"(yield {self.value(1)})"
        if roll < 60:
            return f"((yield {self.value(1)}) or 0) % 3"
        if roll < 80:
            return f"{self.num_atom()} % 3"
        return self.pick(("0", "1", "2", "-1"))

    def bound(self) -> str:
        """A slice bound: None and any int are fine."""
        roll = self.draw(st.integers(0, 99))
        if roll < 45:
            return f"(yield {self.value(1)})"
        if roll < 75:
            return self.num_atom()
        return ""

    def target(self, aug: bool) -> tuple[str, str, bool]:
        """(target, the container to show afterwards, whether it is a slice)."""
        kind = self.pick(("d", "d", "items", "slice", "box.x", "boxes", "box.d", "box.items", "grid", "box.tag"))
        if kind == "box.tag" and aug:
            kind = "box.x"
        if kind == "d":
            return f"{self.container('d')}[{self.key()}]", "d", False
        if kind == "items":
            return f"{self.container('items')}[{self.index()}]", "items", False
        if kind == "slice":
            return f"{self.container('items')}[{self.bound()}:{self.bound()}]", "items", True
        if kind == "box.x":
            return f"{self.container('box')}.x", "box", False
        if kind == "box.tag":
            return f"{self.container('box')}.tag", "box", False
        if kind == "boxes":
            roll = self.draw(st.integers(0, 99))  # a yield in the owner of the attribute, mostly
            owner = (
                f"((yield {self.value(1)}) or 0) % 2" if roll < 60 else f"{self.num_atom()} % 2" if roll < 85 else "-1"
            )
            return f"{self.container('boxes')}[{owner}].x", "boxes", False
        if kind == "box.d":
            return f"{self.container('box')}.d[{self.key()}]", "box", False
        if kind == "box.items":
            return f"{self.container('box')}.items[{self.index()}]", "box", False
        return f"{self.container('grid')}[{self.index()}][{self.index()}]", "grid", False

    def stored(self, target: tuple[str, str, bool]) -> str:
        if target[2]:
            return f"[{', '.join(self.num(1) for _ in range(3))}]"  # a slice stays at least 3 long
        if target[0].endswith(".tag"):
            return self.value()
        return self.num()

    def target_statement(self) -> list[str]:
        roll = self.draw(st.integers(0, 99))
        if roll < 35:
            first = self.target(aug=True)
            if first[2]:
                line = f"{first[0]} += [{self.num(1)}]"
            else:
                line = f"{first[0]} {self.pick(('+=', '+=', '-=', '*='))} {self.num()}"
            shown = [first[1]]
        elif roll < 50:
            first, second = self.target(aug=False), self.target(aug=False)
            line = f"{first[0]}, {second[0]} = {self.stored(first)}, {self.stored(second)}"
            shown = [first[1], second[1]]
        elif roll < 62:
            first = self.target(aug=True)  # not .tag: one value for both, a num or a list
            second = self.target(aug=True)
            if second[2] != first[2]:  # both slices, or neither
                slice_ = f"{self.container('items')}[{self.bound()}:{self.bound()}]", "items", True
                second = slice_ if first[2] else (f"{self.container('d')}[{self.key()}]", "d", False)
            line = f"{first[0]} = {second[0]} = {self.stored(first)}"
            shown = [first[1], second[1]]
        else:
            first = self.target(aug=False)
            line = f"{first[0]} = {self.stored(first)}"
            shown = [first[1]]
        if self.chance(60):
            return [line, f"out(repr(({', '.join(dict.fromkeys(shown))},)))"]
        return [line]

    def del_statement(self) -> list[str]:
        """`del` of items with yields in the target; `fill` puts the keys and indexes back."""
        targets, filled = [], []
        for _ in range(2 if self.chance(25) else 1):
            kind = self.pick(("d", "d", "items", "slice", "box.d", "box.items", "grid"))
            if kind == "d":
                targets.append(f"{self.container('d')}[{self.key()}]")
                filled.append("d")
            elif kind == "items":
                targets.append(f"{self.container('items')}[{self.index()}]")
                filled.append("items")
            elif kind == "slice":
                targets.append(f"{self.container('items')}[{self.bound()}:{self.bound()}]")
                filled.append("items")
            elif kind == "box.d":
                targets.append(f"{self.container('box')}.d[{self.key()}]")
                filled.append("box.d")
            elif kind == "box.items":
                targets.append(f"{self.container('box')}.items[{self.index()}]")
                filled.append("box.items")
            else:
                targets.append(f"{self.container('grid')}[{self.index()}][{self.index()}]")
                filled.append("*grid")
        filled = list(dict.fromkeys(filled))
        shown = list(dict.fromkeys(name.split(".")[0].lstrip("*") for name in filled))
        return [f"del {', '.join(targets)}", f"out(repr(({', '.join(shown)},)))", f"fill({', '.join(filled)})"]

    # -- walrus-comprehension, yf-return-values ------------------------------------------------

    def walrus_statement(self) -> list[str]:
        """`t` is bound only here: read after a comprehension that ran no iteration, it is unbound."""
        name = "t" if self.chance(50) else self.pick(NAMES)
        source = self.pick(("range(0)", "range(0)", "range(2)", "range(3)", "yield"))
        if source == "yield":  # the outermost iterable runs in the generator, so it may yield
            source = f"range((yield {self.value(1)}) or 0)"
        roll = self.draw(st.integers(0, 99))
        if roll < 20:  # reads a variable of the generator, perhaps before it is bound
            return [f"out([{self.pick(('t', *self.scope))} + y for y in {source}])"]
        if roll < 40:
            comprehension = f"[(y, ({name} := y * 2)) for y in {source}]"
        elif roll < 55:
            comprehension = f"[y for y in {source} if ({name} := y)]"
        elif roll < 65:
            comprehension = f"{{y: ({name} := y + 1) for y in {source}}}"
        elif roll < 75:
            comprehension = f"sum(({name} := y) for y in {source})"
        elif roll < 85:
            comprehension = f"({name} := {self.num()})"
        else:
            comprehension = f"[({name} := y) for y in {source}]"
        if self.chance(50):
            return [f"out({comprehension})", f"yield ({name!r}, {name})"]
        return [f"out({comprehension})", f"out(({name!r}, {name}))"]

    def helper2(self) -> str:
        self.parts.add("helper2")
        return f"helper2({self.pick(('0', '1', '2', '3')) if self.chance(80) else self.num_atom()})"

    def yield_from_statement(self) -> list[str]:
        if self.chance(60):
            return [f"r = yield from {self.helper2()}", "out(repr(r))"]
        if self.chance(50):
            return [f"out(repr((yield from {self.helper2()})))"]
        self.uses_helper = True  # the older helper: StopIteration thrown into it is not caught
        return [f"r = yield from helper({self.pick(('1', '2'))})", "out(repr(r))"]

    # -- match-guard ---------------------------------------------------------------------------

    def match_(self, depth: int, ctx: frozenset[str]) -> list[str]:
        subject = self.pick(("num", "num", "pair", "list", "box", "d"))
        if subject == "num":
            text = self.num()
        elif subject == "pair":
            text = f"({self.num(1)}, {self.num(1)})"
        elif subject == "list":
            text = f"[{', '.join(self.value(1) for _ in range(self.draw(st.integers(0, 3))))}]"
        elif subject == "box":
            self.parts.add("box")
            text = self.container("box") if self.chance(50) else f"Box({self.num(1)})"
        else:
            text = self.container("d")
        out = [f"match {text}:"]
        for _ in range(self.draw(st.integers(1, 3))):
            out += self.indent(self.case(depth, ctx, last=False))
        if self.chance(60):
            out += self.indent(self.case(depth, ctx, last=True))
        return out

    def case(self, depth: int, ctx: frozenset[str], last: bool) -> list[str]:
        names: list[str] = []

        def bind() -> str:
            names.append(f"m{self.new_id()}")
            return names[-1]

        kind = self.pick(("literal", "or", "capture", "capture", "sequence", "star", "mapping", "class", "class"))
        if kind == "literal":
            pattern = self.pick(("0", "1", "2", "None", "True", "'s'"))
        elif kind == "or":
            pattern = self.pick(("0 | 1", "2 | 3", "None | 0"))
        elif kind == "capture":
            pattern = "_" if last and self.chance(50) else bind()
        elif kind == "sequence":
            second = self.pick(("0", "1", "_", "capture"))
            pattern = f"[{bind()}, {bind() if second == 'capture' else second}]"
        elif kind == "star":
            pattern = f"({bind()}, *{bind()})"
        elif kind == "mapping":
            pattern = f"{{{self.pick(('0', '1', 'None'))}: {bind()}}}"
        else:
            self.parts.add("box")
            shape = self.pick(("Box()", "Box(0)", "Box({})", "Box(x={})", "Box(_, [{}, *_])", "Box(tag=None)"))
            pattern = shape.format(bind()) if "{}" in shape else shape
        guard = ""
        if not last or self.chance(40):  # an irrefutable case must be last and unguarded; others may be guarded
            roll = self.draw(st.integers(0, 99))
            if names and roll < 45:
                guard = f" if (yield {self.pick(names)})"
            elif roll < 70:
                guard = f" if (yield {self.value(1)})"
            elif roll < 85:
                guard = f" if {self.test()}"
        if not guard and not last and kind == "capture":
            guard = f" if (yield {names[0] if names else self.value(1)})"
        shown = f"out(('case', {pattern!r}, {', '.join(f'repr({n})' for n in names)}))" if names else ""
        body = [shown] if shown else []
        body += self.block(depth + 1, ctx)
        return [f"case {pattern}{guard}:", *self.indent(body)]

    # -- with, with-unsafe ---------------------------------------------------------------------

    def manager(self, bound: list[str]) -> str:
        kind = self.pick(("manager", "manager", "suppress", "null"))
        if kind == "suppress":
            return self.pick(("contextlib.suppress(KeyError)", "contextlib.suppress(KeyError, StopIteration)"))
        if kind == "null":
            item = f"contextlib.nullcontext({self.num(1)})"
            if self.chance(60):
                name = f"q{self.new_id()}"
                bound.append(name)
                return f"{item} as {name}"
            if self.on("target-yield") and self.chance(30):  # a yield in the `as` target
                target = self.target(aug=False)
                return f"{item} as {target[0] if not target[2] else self.container('d') + '[' + self.key() + ']'}"
            return item
        number = self.new_id()
        name = f"(yield 'm{number}')" if self.chance(20) else f"'m{number}'"  # a yield before entering
        suppress = ", True" if self.chance(30) else ""
        item = f"Manager({name}{suppress})"
        return f"{item} as m{number}" if self.chance(30) else item

    def with_body(self, depth: int, ctx: frozenset[str]) -> list[str]:
        forced = [f"{self.pick(NAMES)} = yield {self.value(1)}"] if self.chance(40) else [f"yield {self.value(1)}"]
        return [*(forced if self.chance(75) else []), *self.block(depth + 1, ctx)]

    def with_(self, depth: int, ctx: frozenset[str]) -> list[str]:
        self.parts.add("managers")
        bound: list[str] = []
        items = [self.manager(bound) for _ in range(2 if self.chance(30) else 1)]
        self.scope += bound  # nullcontext(num) as q: q is a num
        body = self.with_body(depth, ctx)
        for name in bound:
            self.scope.remove(name)
        return [f"with {', '.join(items)}:", *self.indent(body)]

    def with_unsafe(self, depth: int, ctx: frozenset[str]) -> list[str]:
        """A manager that cannot travel: the snapshot modes must refuse inside it (no yield in its items)."""
        self.parts.add("locked")
        items = [f"Locked('L{self.new_id()}')"]
        if self.on("with") and self.chance(30):
            self.parts.add("managers")
            items.insert(self.draw(st.integers(0, 1)), f"Manager('m{self.new_id()}')")
        return [f"with {', '.join(items)}:  {CANNOT_TRAVEL}", *self.indent(self.with_body(depth, ctx))]

    def program(self) -> str:
        method = False
        if self.on("generics"):
            self.type_params = self.pick(TYPE_PARAMS + (TYPE_PARAMS_313 if sys.version_info >= (3, 13) else ()))
            method = self.methods and self.chance(40)  # else the generator function itself is generic
        # The last yield makes every program a generator, even when the drawn body has no yield.
        body = [
            "b = 0",
            "c = 1",
            "r = None",
            *self.block(0, frozenset()),
        ]
        containers = [name for name in CONTAINERS if name in self.containers]
        if containers:
            body.append(f"out(repr(({', '.join(containers)},)))")
        body += ["c = yield ('last', a, b, c, r)", "return (a, b, c)"]
        parts = [PRELUDE]
        if self.uses_helper:
            parts.append(HELPER)
        parts_text = (("exc", EXC_INFO), ("box", BOX), ("managers", MANAGERS), ("locked", LOCKED), ("aliases", ALIASES))
        for part, text in parts_text:
            if part in self.parts:
                parts.append(text)
        if "helper2" in self.parts:
            parts.append(HELPER2)
        first = [CONTAINERS[name] for name in containers]
        code = self.indent(first + body)
        if method:  # generics: a method of a generic class, called through a module-level gen
            method_code = self.indent(["@resumable", "def run(self, a):", *code])
            parts.append(f"class G{self.type_params}:\n" + "\n".join(method_code) + "\n")
            parts.append("def gen(a):\n    return G().run(a)\n")
        else:
            parts.append(f"@resumable\ndef gen{self.type_params}(a):\n" + "\n".join(code) + "\n")
        return "\n".join(parts)


# Both strategies write the older constructs only unless given features: other tests draw from them
# (test_split_graph.py); test_random_program asks for ENABLED.
@st.composite
def programs(draw, features: frozenset[str] = frozenset(), methods: bool = True) -> str:
    """`methods=False`: `gen` is always the generator function itself (never a generic class's method)."""
    return _Writer(draw, features, methods).program()


def _operation(draw, first: bool, thrown: tuple[str, ...]):
    roll = draw(st.integers(0, 99))
    if first:
        if roll < 85:
            return ("next",)
        if roll < 90:
            return ("send", 1)  # TypeError: a just-started generator takes only None
        if roll < 95:
            return ("throw", draw(st.sampled_from(thrown)), "early")
        return ("close",)
    if roll < 55:
        return ("send", draw(st.integers(0, 3)))
    if roll < 70:
        return ("next",)
    if roll < 92:
        return ("throw", draw(st.sampled_from(thrown)), draw(st.sampled_from(("t1", "t2"))))
    return ("close",)


@st.composite
def scripts(draw, features: frozenset[str] = frozenset()) -> list[tuple]:
    thrown = (*THROWN, "StopIteration") if "yf-return-values" in features else THROWN
    length = draw(st.integers(2, 12))
    return [_operation(draw, index == 0, thrown) for index in range(length)]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(source=programs(ENABLED), script=scripts(ENABLED), arg=st.integers(0, 2))
def test_random_program(source, script, arg):
    check(source, script, (arg,), modes=MODES_NOW)


def test_features_from():
    assert features_from(None) == features_from("all") == FEATURES
    assert features_from("") == features_from("none") == frozenset()
    assert features_from("with, match-guard") == {"with", "match-guard"}
    with pytest.raises(ValueError, match="unknown"):
        features_from("wiht")


# What each feature alone must write into some program (a feature that writes nothing tests nothing).
FEATURE_SIGNS = {
    "bare-except": r"^\s*except:",
    "target-yield": r"^\s*(d|items|grid|box|boxes)\b.*\byield\b.*=",
    "del-yield": r"^\s*del (d|items|grid|box)\b.*\byield\b",
    "match-guard": r"^\s*case .* if \(yield",
    "with": r"^\s*with (Manager|contextlib)\b.*:",
    "with-unsafe": r"^\s*with .*Locked\(.*" + re.escape(CANNOT_TRAVEL),
    "yf-return-values": r"yield from helper2\(",
    "walrus-comprehension": r" for y in .*:=|:= .* for y in ",
    "generics": r"^(def gen|class G)\[[\s\S]*\b(T|Ts)\.__\w+__",
    "fstring-nesting": r'f"\{ .*\(yield .*\) or 1\} \}\|\{ f"',
    "type-alias": r"^type Vec\[K\][\s\S]*(Alias\.__value__|Vec\[int\]|Vec\.__type_params__)",
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_writer_feature(feature):
    """Each feature alone writes programs CPython compiles, and its construct shows up in them."""
    assert FEATURE_SIGNS.keys() == FEATURES | (set() if sys.version_info >= (3, 12) else NEWER_SYNTAX)
    sources: list[str] = []

    @settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(source=programs(frozenset({feature})))
    def collect(source):
        compile("from branchc import resumable\n" + source, "<prog>", "exec")
        sources.append(source)

    collect()
    assert any(re.search(FEATURE_SIGNS[feature], source, re.MULTILINE) for source in sources)
