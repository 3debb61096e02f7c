"""Small helpers for building LibCST nodes, so the passes read like the code they emit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import libcst as cst
from libcst.helpers import parse_template_expression, parse_template_statement

__all__ = [
    "PREFIX",
    "YieldFinder",
    "assign",
    "block",
    "contains_yield",
    "expr",
    "if_stmt",
    "name",
    "simple",
    "stmt",
]

#: Every name the splitter introduces starts with this (one underscore: no class-private mangling).
PREFIX = "_bc_"


def name(value: str) -> cst.Name:
    return cst.Name(value)


def expr(template: str, **parts: cst.CSTNode) -> cst.BaseExpression:
    return parse_template_expression(template, **parts)


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


class YieldFinder(cst.CSTVisitor):
    """Finds yields that belong to the function being compiled (not to nested scopes)."""

    def __init__(self) -> None:
        self.found: list[cst.Yield] = []

    def visit_Yield(self, node: cst.Yield) -> bool:
        self.found.append(node)
        return True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def _comprehension(self, node: cst.CSTNode) -> bool:
        # Only the outermost iterable of a comprehension runs in the enclosing scope.
        node.for_in.iter.visit(self)  # type: ignore[attr-defined]
        return False

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def contains_yield(node: cst.CSTNode | Iterable[cst.CSTNode] | None) -> bool:
    if node is None:
        return False
    finder = YieldFinder()
    nodes = [node] if isinstance(node, cst.CSTNode) else list(node)
    for item in nodes:
        item.visit(finder)
        if finder.found:
            return True
    return False
