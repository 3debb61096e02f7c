"""Small helpers for building LibCST nodes, so the passes read like the code they emit."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import libcst as cst
from libcst.helpers import parse_template_statement

__all__ = [
    "PREFIX",
    "assign",
    "block",
    "contains_yield",
    "expr",
    "if_stmt",
    "name",
    "reset_counts",
    "simple",
    "stmt",
    "yield_count",
]

#: Every name the splitter introduces starts with this (one underscore: no class-private mangling).
PREFIX = "_bc_"


def name(value: str) -> cst.Name:
    return cst.Name(value)


_TEMPLATES: dict[str, cst.BaseExpression] = {}
_HOLE = re.compile(r"\{(\w+)\}")


class _Fill(cst.CSTTransformer):
    def __init__(self, parts: dict[str, cst.CSTNode]) -> None:
        self.parts = parts

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if original.value.startswith("__hole_"):
            return self.parts[original.value[7:]]  # type: ignore[return-value]
        return updated


def expr(template: str, **parts: cst.CSTNode) -> cst.BaseExpression:
    """An expression from a template with `{name}` holes; each template is parsed once."""
    parsed = _TEMPLATES.get(template)
    if parsed is None:
        parsed = _TEMPLATES[template] = cst.parse_expression(_HOLE.sub(r"__hole_\1", template))
    return parsed.visit(_Fill(parts)) if parts else parsed


def stmt(template: str, **parts: cst.CSTNode) -> cst.BaseStatement:
    return parse_template_statement(template, **parts)


def simple(small: cst.BaseSmallStatement) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])


def assign(target: str | cst.BaseAssignTargetExpression, value: cst.BaseExpression) -> cst.SimpleStatementLine:
    target_node = name(target) if isinstance(target, str) else target
    return cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(target=target_node)], value=value)])


def block(body: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    return cst.IndentedBlock(body=list(body) or [cst.SimpleStatementLine(body=[cst.Pass()])])


def if_stmt(
    test: cst.BaseExpression,
    body: Sequence[cst.BaseStatement],
    orelse: Sequence[cst.BaseStatement] | cst.If | None = None,
) -> cst.If:
    if isinstance(orelse, cst.If):
        tail: cst.If | cst.Else | None = orelse
    elif orelse:
        tail = cst.Else(body=block(orelse))
    else:
        tail = None
    return cst.If(test=test, body=block(body), orelse=tail)


#: yields per node, for the nodes of the module being compiled (cleared by `reset_counts`)
_COUNTS: dict[cst.CSTNode, int] = {}
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def yield_count(node: cst.CSTNode) -> int:
    """Yields that belong to the enclosing function (not to nested scopes), memoised per node."""
    count = _COUNTS.get(node)
    if count is not None:
        return count
    if isinstance(node, cst.FunctionDef):  # decorators and defaults run in the enclosing scope
        count = sum(yield_count(d.decorator) for d in node.decorators) + _default_yields(node.params)
    elif isinstance(node, cst.Lambda):
        count = _default_yields(node.params)
    elif isinstance(node, _SCOPES):
        count = 0
    elif isinstance(node, _COMPREHENSIONS):
        count = yield_count(node.for_in.iter)  # only the first iterable runs in the enclosing scope
    else:
        count = isinstance(node, cst.Yield) + sum(map(yield_count, node.children))
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
        if isinstance(node, (*_SCOPES, *_COMPREHENSIONS)):
            count = _scope_yields(node)  # its parts were just counted and memoised
        else:
            count = inner + isinstance(node, cst.Yield)
        _COUNTS[node] = count
        self.sums[-1] += count


def _scope_yields(node: cst.CSTNode) -> int:
    if isinstance(node, cst.FunctionDef):
        return sum(yield_count(d.decorator) for d in node.decorators) + _default_yields(node.params)
    if isinstance(node, cst.Lambda):
        return _default_yields(node.params)
    if isinstance(node, _COMPREHENSIONS):
        return yield_count(node.for_in.iter)
    return 0


def index_function(node: cst.FunctionDef, kinds: tuple[type, ...]) -> dict[type, list[cst.CSTNode]]:
    """Count yields for every node of `node` at once, and collect the nodes of `kinds`."""
    index = _Index(kinds)
    node.visit(index)
    return index.found


def reset_counts() -> None:
    _COUNTS.clear()


def contains_yield(node: cst.CSTNode | Iterable[cst.CSTNode] | None) -> bool:
    if node is None:
        return False
    if isinstance(node, cst.CSTNode):
        return yield_count(node) > 0
    return any(yield_count(item) for item in node)
