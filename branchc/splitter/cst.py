"""Small helpers for building LibCST nodes, so the passes read like the code they emit."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import libcst as cst
from libcst._nodes.internal import CodegenState

__all__ = [
    "PREFIX",
    "assign",
    "block",
    "generate",
    "contains_yield",
    "expr",
    "if_stmt",
    "make",
    "name",
    "paren",
    "reset_counts",
    "simple",
    "stmt",
    "walk",
    "yield_count",
]

#: Every name the splitter introduces starts with this (one underscore: no class-private mangling).
PREFIX = "_bc_"


def name(value: str) -> cst.Name:
    return cst.Name(value)


_Node = TypeVar("_Node", bound=cst.CSTNode)
_SHARED: dict[type, dict[str, cst.CSTNode]] = {}


def make(kind: type[_Node], **fields: Any) -> _Node:
    """`kind(**fields)` with its default whitespace made once: LibCST makes each one anew for every
    node (a block's header is three nodes), which costs more than the node itself. Nodes are
    immutable and no pass tells whitespace apart by identity, so one serves them all."""
    shared = _SHARED.get(kind)
    if shared is None:
        shared = {}
        for field in dataclasses.fields(kind):
            if field.default_factory is not dataclasses.MISSING:
                value = field.default_factory()
                if isinstance(value, cst.CSTNode):
                    shared[field.name] = value
        _SHARED[kind] = shared
    return kind(**{**shared, **fields})


class _Codegen(CodegenState):
    """LibCST's codegen state, without the context manager it enters at every node to record
    positions (which only its PositionProvider uses): about a third of codegen's time."""

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):  # type: ignore[override]
        return _NO_POSITIONS


_NO_POSITIONS = contextlib.nullcontext()


def _codegen(self: cst.CSTNode, state: CodegenState, **kwargs: object) -> None:
    """LibCST's `CSTNode._codegen`, calling `_codegen_impl` without `**` when there are no keywords.

    On 3.12 a call with `**` takes a C stack level, and 3.12's C recursion limit (about 1,500, which
    `sys.setrecursionlimit` does not raise) stops code generation inside an expression of some 700
    terms, which CPython itself compiles. 3.13 counts the stack instead, and 3.11 has no such limit."""
    state.before_codegen(self)
    if kwargs:
        self._codegen_impl(state, **kwargs)
    else:
        self._codegen_impl(state)
    state.after_codegen(self)


if sys.version_info[:2] == (3, 12) and cst.CSTNode._codegen.__code__.co_flags & inspect.CO_VARKEYWORDS:
    cst.CSTNode._codegen = _codegen  # type: ignore[method-assign]


def generate(module: cst.Module, node: cst.CSTNode) -> str:
    """`module.code_for_node(node)`, faster."""
    state = _Codegen(default_indent=module.default_indent, default_newline=module.default_newline)
    node._codegen(state)
    return "".join(state.tokens)


class _Template:
    """A parsed template: `{name}` holes are names `__hole_name`; `fill` rebuilds only the nodes on
    the paths from the root to the holes (the rest is shared, as LibCST nodes are immutable)."""

    __slots__ = ("paths", "root")

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.paths: set[cst.CSTNode] = set()  # the holes and every node above one
        self._mark(root)

    def _mark(self, node: cst.CSTNode) -> bool:
        found = isinstance(node, cst.Name) and node.value.startswith("__hole_")
        for child in children(node):
            found = self._mark(child) or found
        if found:
            self.paths.add(node)
        return found

    def fill(self, parts: dict[str, cst.CSTNode]) -> cst.CSTNode:
        return self._fill(self.root, parts) if parts else self.root

    def _fill(self, node: cst.CSTNode, parts: dict[str, cst.CSTNode]) -> cst.CSTNode:
        if isinstance(node, cst.Name) and node.value.startswith("__hole_"):
            return parts[node.value[7:]]
        changes: dict[str, object] = {}
        for field in _FIELDS.get(type(node)) or _fields(type(node)):
            value = getattr(node, field)
            if type(value) is tuple or type(value) is list:
                if any(item in self.paths for item in value):
                    changes[field] = [self._fill(item, parts) if item in self.paths else item for item in value]
            elif value in self.paths:
                changes[field] = self._fill(value, parts)
        return node.with_changes(**changes)


_TEMPLATES: dict[str, _Template] = {}
_HOLE = re.compile(r"\{(\w+)\}")


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.C` as "a.b.C" (a chain of names), else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def paren(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` in parentheses unless it is atomic or has them already."""
    if isinstance(node, (cst.Name, cst.Integer, cst.SimpleString, cst.Attribute, cst.Call, cst.Subscript)):
        return node
    if getattr(node, "lpar", None):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def expr(template: str, **parts: cst.CSTNode) -> cst.BaseExpression:
    """An expression from a template with `{name}` holes; each template is parsed once. A part that is
    not atomic goes in parentheses, so that `not {t}` with `a or b` stays `not (a or b)`."""
    parsed = _TEMPLATES.get(template)
    if parsed is None:
        parsed = _TEMPLATES[template] = _Template(cst.parse_expression(_HOLE.sub(r"__hole_\1", template)))
    for key, part in parts.items():
        if isinstance(part, cst.BaseExpression) and not isinstance(part, cst.Yield):
            parts[key] = paren(part)
    return parsed.fill(parts)  # type: ignore[return-value]


def stmt(template: str, **parts: cst.CSTNode) -> cst.BaseStatement:
    """A statement from a template with `{name}` holes; every statement in it must contain a hole,
    so that each use makes statements of its own (passes tell statements apart by identity)."""
    parsed = _TEMPLATES.get(template)
    if parsed is None:
        parsed = _TEMPLATES[template] = _Template(cst.parse_statement(_HOLE.sub(r"__hole_\1", template)))
    return parsed.fill(parts)  # type: ignore[return-value]


def simple(small: cst.BaseSmallStatement) -> cst.SimpleStatementLine:
    return make(cst.SimpleStatementLine, body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])


def assign(target: str | cst.BaseAssignTargetExpression, value: cst.BaseExpression) -> cst.SimpleStatementLine:
    target_node = name(target) if isinstance(target, str) else target
    line = make(cst.Assign, targets=[make(cst.AssignTarget, target=target_node)], value=value)
    return make(cst.SimpleStatementLine, body=[line])


def block(body: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    return make(cst.IndentedBlock, body=list(body) or [make(cst.SimpleStatementLine, body=[cst.Pass()])])


def if_stmt(
    test: cst.BaseExpression,
    body: Sequence[cst.BaseStatement],
    orelse: Sequence[cst.BaseStatement] | cst.If | None = None,
) -> cst.If:
    if isinstance(orelse, cst.If):
        tail: cst.If | cst.Else | None = orelse
    elif orelse:
        tail = make(cst.Else, body=block(orelse))
    else:
        tail = None
    return make(cst.If, test=test, body=block(body), orelse=tail)


# LibCST's own `node.visit(visitor)` rebuilds every node it passes, even for a read-only
# visitor, so a walk costs about as much as parsing. `walk` reads the children in place.
# Their document order is the order each class's `_visit_and_replace_children` visits its
# fields, read once per class from LibCST's source; whitespace, brackets, commas and
# operators are skipped (no pass reads them).
_FIELD = re.compile(r'visit_\w+\(\s*self,\s*"(\w+)"')
_TRIVIA = frozenset(
    "asynchronous colon comma comment dot empty_lines equal first_colon first_line footer header last_line lbrace "
    "lbracket leading_lines leading_whitespace lines_after_decorators lpar newline operator posonly_ind rbrace "
    "rbracket relative rpar second_colon semicolon separator trailing_comma trailing_whitespace".split()
)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(kind: type) -> tuple[str, ...]:
    fields = _FIELDS.get(kind)
    if fields is None:
        source = inspect.getsource(kind._visit_and_replace_children)
        found = [f for f in _FIELD.findall(source) if f not in _TRIVIA and not f.startswith("whitespace")]
        fields = _FIELDS[kind] = tuple(found)
    return fields


_IS_NODE: dict[type, bool] = {}  # isinstance() on LibCST's classes goes through ABCMeta: slow


def _is_node(kind: type) -> bool:
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = issubclass(kind, cst.CSTNode)
    return known


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of `node` that carry code, in document order (no whitespace or punctuation)."""
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _fields(type(node))
    out: list[cst.CSTNode] = []
    for field in fields:
        value = getattr(node, field)
        kind = type(value)
        if kind is tuple or kind is list:
            out += [item for item in value if _is_node(type(item))]
        elif _is_node(kind):
            out.append(value)
    return out


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """`node.visit(visitor)` for a read-only visitor, without rebuilding the tree."""
    kind = type(visitor)
    if kind.on_visit is _ON_VISIT and kind.on_leave is _ON_LEAVE:
        methods = _METHODS.get(kind)
        if methods is None:
            methods = _METHODS[kind] = {}
        _dispatched(node, visitor, methods)
        return
    if visitor.on_visit(node):
        for child in children(node):
            walk(child, visitor)
    visitor.on_leave(node)


_ON_VISIT, _ON_LEAVE = cst.CSTVisitor.on_visit, cst.CSTVisitor.on_leave
_METHODS: dict[type, dict[type, tuple[Any, Any]]] = {}  # visitor class -> node class -> (visit_X, leave_X)


def _dispatched(node: cst.CSTNode, visitor: cst.CSTVisitor, methods: dict[type, tuple[Any, Any]]) -> None:
    """`walk` for a visitor that keeps CSTVisitor's own dispatch to `visit_X` / `leave_X`: each
    class's methods looked up once, not by name at every node."""
    kind = type(node)
    found = methods.get(kind)
    if found is None:
        owner = type(visitor)
        found = methods[kind] = (_method(owner, f"visit_{kind.__name__}"), _method(owner, f"leave_{kind.__name__}"))
    visit, leave = found
    if visit is None or visit(visitor, node) is not False:
        for child in children(node):
            _dispatched(child, visitor, methods)
    if leave is not None:
        leave(visitor, node)


def _method(owner: type, name: str) -> Any:
    """`owner`'s method `name`, or None for none or LibCST's stub for it (marked a no-op): not called."""
    method = getattr(owner, name, None)
    return None if getattr(method, "_is_no_op", False) else method


#: yields per node, for the nodes of the module being compiled (cleared by `reset_counts`)
_COUNTS: dict[cst.CSTNode, int] = {}
# Nodes with a scope of their own: only parts of them run in the enclosing one.
_NESTED = frozenset(
    {cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp}
)


def yield_count(node: cst.CSTNode) -> int:
    """Yields that belong to the enclosing function (not to nested scopes), memoised per node."""
    count = _COUNTS.get(node)
    if count is None:
        kind = type(node)
        if kind in _NESTED:
            count = _scope_yields(node)
        else:  # a plain loop: under sum(map(...)) each level would take C stack too (3.12 limits it)
            count = kind is cst.Yield
            for child in children(node):
                count += yield_count(child)
        _COUNTS[node] = count
    return count


def _default_yields(params: cst.Parameters) -> int:
    every = (*params.posonly_params, *params.params, *params.kwonly_params)
    return sum(yield_count(p.default) for p in every if p.default is not None)


class _Index(cst.CSTVisitor):
    """One walk over a function: the yield count of every node (as `yield_count` defines it),
    and the nodes of the kinds in `kinds`, in document order (for source positions)."""

    def __init__(self, kinds: tuple[type, ...]) -> None:
        self.sums: list[int] = [0]
        self.found: dict[type, list[cst.CSTNode]] = {kind: [] for kind in kinds}

    def on_visit(self, node: cst.CSTNode) -> bool:
        bucket = self.found.get(type(node))
        if bucket is not None:
            bucket.append(node)
        self.sums.append(0)
        return True

    def on_leave(self, node: cst.CSTNode) -> None:
        inner = self.sums.pop()
        kind = type(node)
        if kind in _NESTED:
            count = _scope_yields(node)  # its parts were just counted and memoised
        else:
            count = inner + (kind is cst.Yield)
        _COUNTS[node] = count
        self.sums[-1] += count


def _scope_yields(node: cst.CSTNode) -> int:
    kind = type(node)
    if kind is cst.FunctionDef:  # decorators and defaults run in the enclosing scope
        return sum(yield_count(d.decorator) for d in node.decorators) + _default_yields(node.params)
    if kind is cst.Lambda:
        return _default_yields(node.params)
    if kind is cst.ClassDef:
        return 0
    return yield_count(node.for_in.iter)  # a comprehension: only the first iterable runs outside


def index_function(node: cst.FunctionDef, kinds: tuple[type, ...]) -> dict[type, list[cst.CSTNode]]:
    """Count yields for every node of `node` at once, and collect the nodes of `kinds`."""
    index = _Index(kinds)
    walk(node, index)
    return index.found


def reset_counts() -> None:
    _COUNTS.clear()


def contains_yield(node: cst.CSTNode | Iterable[cst.CSTNode] | None) -> bool:
    if node is None:
        return False
    if isinstance(node, cst.CSTNode):
        return yield_count(node) > 0
    return any(yield_count(item) for item in node)
