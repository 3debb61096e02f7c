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

BRANCHC_FUZZ_EXAMPLES sets the number of examples (default 1000).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from differential import check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MODES_NOW: tuple[str, ...] = ("compiled", "raw")
if importlib.util.find_spec("branchc.continuation.snapshots") is not None:
    MODES_NOW += ("json",)

EXAMPLES = int(os.environ.get("BRANCHC_FUZZ_EXAMPLES", "1000"))

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

NAMES = ("a", "b", "c")
RAISED = ("ValueError", "KeyError", "RuntimeError")
CAUGHT = ("ValueError", "KeyError", "LookupError", "Exception", "(ValueError, KeyError)")
THROWN = ("ValueError", "KeyError", "RuntimeError", "ValueError", "KeyError", "GeneratorExit", "StopIteration")


class _Writer:
    """Writes one program from hypothesis draws. Budgets keep programs small: compiling
    is what a test example costs, so programs stay a dozen statements or so."""

    def __init__(self, draw):
        self.draw = draw
        self.statements = 0
        self.max_statements = draw(st.integers(3, 10))
        self.ids = 0
        self.uses_helper = False
        self.in_fstring = False
        self.scope: list[str] = list(NAMES)  # readable names (loop variables join while in scope)

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def chance(self, percent: int) -> bool:
        return self.draw(st.integers(0, 99)) < percent

    def new_id(self) -> int:
        self.ids += 1
        return self.ids

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
        kind = self.pick(("num", "num", "num", "list", "tuple", "dict", "yieldfrom", "v", "fstring"))
        x = lambda: self.value(depth + 1)  # noqa: E731
        if kind == "num":
            return self.num(depth)
        if kind == "list":
            return f"[{', '.join(x() for _ in range(self.draw(st.integers(0, 3))))}]"
        if kind == "tuple":
            return f"({x()}, {x()})"
        if kind == "dict":
            return f"{{{self.num(depth + 1)}: {x()}}}"
        if kind == "v":
            return f"v({x()})"
        if kind == "fstring" and not self.in_fstring:  # 3.11: an f-string cannot nest its own quotes
            self.in_fstring = True
            text = f'f"{{ {x()}!r}}-{{ {self.num(depth + 1)} }}"'
            self.in_fstring = False
            return text
        if kind == "fstring":
            return x()
        if self.chance(40):
            self.uses_helper = True
            return f"(yield from helper({self.pick(('0', '1', '2'))}))"
        return f"(yield from [{x()}, {x()}])"

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
        if depth < 3 and self.statements < self.max_statements:
            kinds += ["if", "for", "while", "try", "try"]
        if "loop" in ctx:
            kinds += ["break", "continue"]
        if "handler" in ctx:
            kinds += ["reraise"]
        kind = self.pick(tuple(kinds))
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

    def try_(self, depth: int, ctx: frozenset[str]) -> list[str]:
        out = ["try:", *self.indent(self.block(depth + 1, ctx))]
        handlers = self.draw(st.integers(0, 2))
        final = handlers == 0 or self.chance(40)
        for _ in range(handlers):
            caught = self.pick(CAUGHT)
            if self.chance(50):
                name = f"e{self.new_id()}"
                body = [f"out(('caught', repr({name})))", *self.block(depth + 1, ctx | {"handler"})]
                out += [f"except {caught} as {name}:", *self.indent(body)]
            else:
                out += [f"except {caught}:", *self.indent(self.block(depth + 1, ctx | {"handler"}))]
        if handlers and self.chance(30):
            out += ["else:", *self.indent(self.block(depth + 1, ctx))]
        if final:
            out += ["finally:", *self.indent(self.block(depth + 1, ctx))]
        return out

    def program(self) -> str:
        # The last yield makes every program a generator, even when the drawn body has no yield.
        body = [
            "b = 0",
            "c = 1",
            "r = None",
            *self.block(0, frozenset()),
            "c = yield ('last', a, b, c, r)",
            "return (a, b, c)",
        ]
        parts = [PRELUDE]
        if self.uses_helper:
            parts.append(HELPER)
        parts.append("@resumable\ndef gen(a):\n" + "\n".join(self.indent(body)) + "\n")
        return "\n".join(parts)


@st.composite
def programs(draw) -> str:
    return _Writer(draw).program()


def _operation(draw, first: bool):
    roll = draw(st.integers(0, 99))
    if first:
        if roll < 85:
            return ("next",)
        if roll < 90:
            return ("send", 1)  # TypeError: a just-started generator takes only None
        if roll < 95:
            return ("throw", draw(st.sampled_from(THROWN)), "early")
        return ("close",)
    if roll < 55:
        return ("send", draw(st.integers(0, 3)))
    if roll < 70:
        return ("next",)
    if roll < 92:
        return ("throw", draw(st.sampled_from(THROWN)), draw(st.sampled_from(("t1", "t2"))))
    return ("close",)


@st.composite
def scripts(draw) -> list[tuple]:
    length = draw(st.integers(2, 12))
    return [_operation(draw, index == 0) for index in range(length)]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(source=programs(), script=scripts(), arg=st.integers(0, 2))
def test_random_program(source, script, arg):
    check(source, script, (arg,), modes=MODES_NOW)
