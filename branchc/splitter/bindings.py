"""Pass 4, bindings: which callables the code itself can put into each variable.

A snapshot that comes from outside is untrusted: a forged one could swap a value the
resumed code will call (say the spilled callee of `answers.append((yield))`) for some
other function. So the manifest records, per variable, what the compiled code can bind
there that is callable but not compiled code: a method it took from an object
(`x = obj.name`, and the spilled callee above), a global or builtin it named
(`print(a, (yield))` spills `print`), the `__exit__` of a `with` manager. A resume
restores such a value only into a variable that can hold it, rebuilding it from the
object or the name, never from a reference in the data.
"""

from __future__ import annotations

import libcst as cst

from .cst import walk

__all__ = ["callable_bindings"]

Binding = tuple[str, str]  # ("attr", name) | ("global", name) | ("special", "__exit__")


class _Assignments(cst.CSTVisitor):
    """Assignments to names in one scope. Statements are walked by hand (most of a body is
    expressions, which only an assignment expression `(x := obj.m)` makes worth a visit)."""

    def __init__(self, walrus: bool) -> None:
        self.direct: dict[str, set[Binding]] = {}
        self.copies: dict[str, set[str]] = {}  # x = y: x can hold what y holds
        self.walrus = walrus

    def statements(self, statements) -> None:
        for statement in statements:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign):
                        for target in small.targets:
                            self.assign(target.target, small.value)
                    elif isinstance(small, cst.AnnAssign) and small.value is not None:
                        self.assign(small.target, small.value)
                    if self.walrus:
                        walk(small, self)
                continue
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue  # another scope
            if self.walrus:
                for part in ("test", "iter", "subject"):
                    if getattr(statement, part, None) is not None:
                        walk(getattr(statement, part), self)
            for part in ("body", "orelse", "finalbody", "handlers", "cases"):
                self.statements(_blocks(getattr(statement, part, None)))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # another scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if isinstance(node.target, cst.Name):
            self.bind(node.target.value, node.value)

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`x = v`, and `a, b = v1, v2` item by item (a starred item can hold anything)."""
        if isinstance(target, cst.Name):
            self.bind(target.value, value)
        elif (
            isinstance(target, (cst.Tuple, cst.List))
            and isinstance(value, (cst.Tuple, cst.List))
            and len(target.elements) == len(value.elements)
            and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements))
        ):
            for inner, item in zip(target.elements, value.elements, strict=True):
                self.assign(inner.value, item.value)

    def bind(self, variable: str, value: cst.BaseExpression) -> None:
        if isinstance(value, cst.Attribute):
            if isinstance(value.value, cst.Name) and value.value.value == "_bc_rt":
                return  # the compiler's own helpers, never kept across a yield as a callable
            self.direct.setdefault(variable, set()).add(("attr", value.attr.value))
        elif isinstance(value, cst.Name) and value.value not in ("None", "True", "False"):
            self.copies.setdefault(variable, set()).add(value.value)


def _blocks(part) -> list:
    """The statements under a body, orelse, finalbody, handlers or cases field."""
    if part is None:
        return []
    if isinstance(part, (list, tuple)):
        return [statement for item in part for statement in _blocks(item)]
    if isinstance(part, cst.BaseSuite):
        return list(part.body) if isinstance(part, cst.IndentedBlock) else []
    if isinstance(part, (cst.If, cst.BaseStatement)):
        return [part]  # an elif
    return _blocks(getattr(part, "body", None))  # else / finally / except / case


def callable_bindings(
    statements: list[cst.BaseStatement], local_names: set[str], exits: list[str], walrus: bool = True
) -> dict[str, list[list[str]]]:
    """Variable -> the callables the code can bind to it, as ["attr", name], ["global", name] or
    ["special", "__exit__"] (for `exits`, the variables holding a `with` manager's exit)."""
    found = _Assignments(walrus)
    found.statements(statements)
    bindings: dict[str, set[Binding]] = {name: set(kinds) for name, kinds in found.direct.items()}
    for variable in exits:
        bindings.setdefault(variable, set()).add(("special", "__exit__"))
    for variable, sources in found.copies.items():
        for source in sources - local_names:
            bindings.setdefault(variable, set()).add(("global", source))
    changed = True
    while changed:  # x = y copies what y can hold (to a fixed point)
        changed = False
        for variable, sources in found.copies.items():
            for source in sources & local_names:
                extra = bindings.get(source, set()) - bindings.get(variable, set())
                if extra:
                    bindings.setdefault(variable, set()).update(extra)
                    changed = True
    return {name: sorted(map(list, kinds)) for name, kinds in sorted(bindings.items()) if name in local_names}
