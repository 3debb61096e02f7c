"""Pass 4, bindings: what the code itself can put into each variable.

A snapshot that comes from outside is untrusted: a forged one could swap a value the
resumed code will call (say the spilled callee of `answers.append((yield))`) for some
other function, or put a class where a lambda was. So the manifest records, per variable:

- `binds`: the callables the compiled code can bind there that are not compiled code: a
  method it took from an object (`x = obj.name`, and the spilled callee above), a global or
  builtin it named (`print(a, (yield))` spills `print`), the `__exit__` of a `with` manager.
  A resume restores such a value only into a variable that can hold it, rebuilding it from
  the object or the name, never from a reference in the data. When the compiler knows what
  the object is (below), the binding records that too: `["attr", "append", ["list"]]` is
  the `append` of a list, and of nothing else.
- `holds` (`value_kinds`): what a variable can hold, when every binding of it is one the
  compiler can classify: a display, literal or comprehension of a builtin type (`"list"`,
  `"str"`, ...), an instance made by calling a global class (`"new:Counter"`: checked on
  resume against the class that name gives, where its instances are exactly of it), a def of
  this function (`"def:helper"`), a lambda of it (`"lambda"`). A variable bound anything else
  anywhere (a parameter, a loop target, a call of a local, an attribute, an augmented
  assignment...) is absent: it may hold anything a snapshot may carry. The analysis errs on
  the side of absence: a name bound in a nested scope counts as a binding too.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import libcst as cst

from .cst import dotted, walk

__all__ = ["callable_bindings", "cst_kinds", "value_kinds"]

Binding = tuple[str, str]  # ("attr", name) | ("global", name) | ("special", "__exit__")
#: what a binding's owner can be: a set of kinds (see `value_kinds`), or None: anything
Owners = frozenset[str] | None

#: The builtin types a kind names (the runtime maps them back: registry.BUILTIN_KINDS).
_CONSTANT_KINDS = {
    bool: "bool",
    int: "int",
    float: "float",
    complex: "complex",
    str: "str",
    bytes: "bytes",
    type(None): "None",
}
_DISPLAYS = {
    ast.List: "list",
    ast.ListComp: "list",
    ast.Tuple: "tuple",
    ast.Set: "set",
    ast.SetComp: "set",
    ast.Dict: "dict",
    ast.DictComp: "dict",
    ast.JoinedStr: "str",
}
ANY = "*"


def _dotted(node: ast.expr) -> str | None:
    """`a.b.C` as "a.b.C" (a chain of names), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _kinds_of(value: ast.expr, is_global: Callable[[str], bool], direct: bool = True) -> set[str]:
    """What evaluating `value` can give, as kinds; {ANY} when the compiler cannot tell. A lambda is
    "lambda" only where it is `direct`ly what is stored (the bytecode then stores it straight into
    the variable, which a resume can check by the code: see registry.stored_functions)."""
    if isinstance(value, ast.Constant):
        kind = _CONSTANT_KINDS.get(type(value.value))
        return {kind} if kind else {ANY}
    kind = _DISPLAYS.get(type(value))
    if kind:
        return {kind}
    if isinstance(value, ast.Lambda):
        return {"lambda"} if direct else {ANY}
    if isinstance(value, ast.UnaryOp):
        if isinstance(value.op, ast.Not):
            return {"bool"}
        operand = value.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float, complex):
            return {_CONSTANT_KINDS[type(operand.value)]}  # -1, +2.5, ~3: the constant's type
        return {ANY}
    if isinstance(value, ast.IfExp):
        return _kinds_of(value.body, is_global, False) | _kinds_of(value.orelse, is_global, False)
    if isinstance(value, ast.BoolOp):  # `a or b` is one of its operands
        return set().union(*(_kinds_of(operand, is_global, False) for operand in value.values))
    if isinstance(value, ast.NamedExpr):
        return _kinds_of(value.value, is_global, direct)
    if isinstance(value, ast.Call):
        callee = _dotted(value.func)
        if callee is not None and is_global(callee.split(".", 1)[0]):
            return {f"new:{callee}"}  # an instance of that class, if it is one that makes exactly its own
    return {ANY}


class _ValueKinds(ast.NodeVisitor):
    """Every binding of every name in a function (nested scopes included: they can only add kinds)."""

    def __init__(self, is_global: Callable[[str], bool]) -> None:
        self.kinds: dict[str, set[str]] = {}
        self.handled: set[int] = set()  # ids of Name nodes classified by their statement
        self.is_global = is_global

    def add(self, name: str, kinds: set[str]) -> None:
        self.kinds.setdefault(name, set()).update(kinds)

    def target(self, target: ast.expr, value: ast.expr | None, direct: bool = True) -> None:
        if isinstance(target, ast.Name):
            self.handled.add(id(target))
            self.add(target.id, _kinds_of(value, self.is_global, direct) if value is not None else {ANY})
        elif (
            isinstance(target, (ast.Tuple, ast.List))
            and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        ):
            for inner, item in zip(target.elts, value.elts, strict=True):
                self.target(inner, item, direct=False)
        # anything else: its names are found by visit_Name, as anything

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.target(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.target(node.target, node.value)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.target(node.target, node.value)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.add(node.name, {f"def:{node.name}"} if not node.decorator_list else {ANY})
        self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.add(node.name, {ANY})
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.add(node.name, {ANY})
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load) and id(node) not in self.handled:
            self.add(node.id, {ANY})  # a for target, an augmented assignment, a with target, a del, ...

    def visit_arg(self, node: ast.arg) -> None:
        self.add(node.arg, {ANY})
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self.add((node.asname or node.name).split(".")[0], {ANY})

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.add(node.name, {ANY})
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self.add(name, {ANY})

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    def visit(self, node: ast.AST) -> None:
        """`NodeVisitor.visit`, with each class's method looked up once: this pass visits every node."""
        kind = type(node)
        method = _VISITS.get(kind)
        if method is None:
            method = _VISITS[kind] = getattr(_ValueKinds, f"visit_{kind.__name__}", _ValueKinds.generic_visit)
        method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        # match patterns (MatchAs, MatchStar, MatchMapping.rest), type aliases, type parameters: their names
        for field in ("name", "rest"):
            found = getattr(node, field, None)
            if isinstance(found, str) and not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.alias)
            ):
                self.add(found, {ANY})
        for field in node._fields:  # NodeVisitor.generic_visit, without its generator
            value = getattr(node, field, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)


_VISITS: dict[type, Callable[[_ValueKinds, ast.AST], None]] = {}


def value_kinds(definition: ast.FunctionDef | ast.AsyncFunctionDef, is_global: Callable[[str], bool]) -> dict:
    """Variable -> the kinds of value it can hold (sorted), for each variable whose every binding in
    `definition` the compiler can classify (see the module docstring); `is_global(name)` says whether
    a name the function calls is a global of its module (not a local or a free variable)."""
    visitor = _ValueKinds(is_global)
    for arg in ast.walk(definition.args):
        if isinstance(arg, ast.arg):
            visitor.add(arg.arg, {ANY})
    for statement in definition.body:
        visitor.visit(statement)
    return {name: sorted(kinds) for name, kinds in sorted(visitor.kinds.items()) if ANY not in kinds}


_CST_DISPLAYS = {
    cst.List: "list",
    cst.ListComp: "list",
    cst.Tuple: "tuple",
    cst.Set: "set",
    cst.SetComp: "set",
    cst.Dict: "dict",
    cst.DictComp: "dict",
    cst.FormattedString: "str",
}


def cst_kinds(
    value: cst.BaseExpression, holds: dict[str, list[str]], is_global: Callable[[str], bool]
) -> frozenset[str] | None:
    """What a (lowered) expression gives, as kinds, or None when the compiler cannot tell: a display, a
    string, a call of a global, or a variable whose kinds `holds` knows."""
    kind = _CST_DISPLAYS.get(type(value))
    if kind:
        return frozenset({kind})
    if isinstance(value, (cst.SimpleString, cst.ConcatenatedString)):
        prefix = (value.prefix if isinstance(value, cst.SimpleString) else _first_string(value).prefix).lower()
        return frozenset({"bytes" if "b" in prefix else "str"})
    if isinstance(value, cst.Name) and value.value in holds:
        return frozenset(holds[value.value])
    if isinstance(value, cst.Call):
        callee = dotted(value.func)
        if callee is not None and is_global(callee.split(".", 1)[0]):
            return frozenset({f"new:{callee}"})
    return None


def _first_string(node: cst.ConcatenatedString) -> cst.SimpleString | cst.FormattedString:
    left = node.left
    return left if isinstance(left, (cst.SimpleString, cst.FormattedString)) else _first_string(left)


def _instances(kinds: Owners) -> Owners:
    """Kinds that are all instances of a class (no def or lambda, whose attributes are another matter)."""
    if kinds is None or any(kind == "lambda" or kind.startswith("def:") for kind in kinds):
        return None
    return kinds


class _Assignments(cst.CSTVisitor):
    """Assignments to names in one scope. Statements are walked by hand (most of a body is
    expressions, which only an assignment expression `(x := obj.m)` makes worth a visit)."""

    def __init__(self, walrus: bool, owner_kinds: Callable[[cst.BaseExpression], Owners]) -> None:
        self.direct: dict[str, dict[Binding, Owners]] = {}
        self.copies: dict[str, set[str]] = {}  # x = y: x can hold what y holds
        self.walrus = walrus
        self.owner_kinds = owner_kinds

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
            _merge(self.direct.setdefault(variable, {}), ("attr", value.attr.value), self.owner_kinds(value.value))
        elif isinstance(value, cst.Name) and value.value not in ("None", "True", "False"):
            self.copies.setdefault(variable, set()).add(value.value)


def _merge(found: dict[Binding, Owners], binding: Binding, owners: Owners) -> bool:
    """Add a binding with what its owner can be (None: anything); whether that allowed more."""
    if binding not in found:
        found[binding] = owners
        return True
    known = found[binding]
    if known is None or (owners is not None and owners <= known):
        return False
    found[binding] = None if owners is None else known | owners
    return True


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
    statements: list[cst.BaseStatement],
    local_names: set[str],
    exits: dict[str, Owners],
    walrus: bool = True,
    holds: dict[str, list[str]] | None = None,
    is_global: Callable[[str], bool] = lambda name: False,
) -> dict[str, list[list]]:
    """Variable -> the callables the code can bind to it, as ["attr", name], ["global", name] or
    ["special", "__exit__"] (for `exits`, the variables holding a `with` manager's exit, each with
    what its manager can be), with a third item, the kinds its owner can be, when the compiler
    knows them (`holds`: see `value_kinds`)."""
    known = holds or {}
    found = _Assignments(walrus, lambda owner: _instances(cst_kinds(owner, known, is_global)))
    found.statements(statements)
    bindings: dict[str, dict[Binding, Owners]] = {name: dict(kinds) for name, kinds in found.direct.items()}
    for variable, owners in exits.items():
        _merge(bindings.setdefault(variable, {}), ("special", "__exit__"), _instances(owners))
    for variable, sources in found.copies.items():
        for source in sources - local_names:
            _merge(bindings.setdefault(variable, {}), ("global", source), None)
    changed = True
    while changed:  # x = y copies what y can hold (to a fixed point)
        changed = False
        for variable, sources in found.copies.items():
            for source in sources & local_names:
                for binding, owners in list(bindings.get(source, {}).items()):
                    changed |= _merge(bindings.setdefault(variable, {}), binding, owners)
    out: dict[str, list[list]] = {}
    for name, kinds in sorted(bindings.items()):
        if name in local_names:
            out[name] = [
                [kind, attr] if owners is None else [kind, attr, sorted(owners)]
                for (kind, attr), owners in sorted(kinds.items())
            ]
    return out
