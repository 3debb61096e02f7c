"""Source positions of LibCST nodes, read from CPython's `ast` instead of LibCST's PositionProvider.

PositionProvider renders the whole module to count characters, which costs as much as
parsing it again. The `ast` tree has the positions already: the n-th node of a kind in
LibCST's document order is the n-th node of the matching kind in the `ast`, sorted by
where it starts. Only the kinds diagnostics and suspension points need are indexed,
and only when first asked for.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from .cst import walk

__all__ = ["KINDS_NEEDED", "Position", "Positions"]


@dataclass(frozen=True)
class _Point:
    line: int
    column: int  # 0-based, in characters


@dataclass(frozen=True)
class Position:
    start: _Point
    end: _Point


_KINDS: dict[type[cst.CSTNode], tuple[type[ast.AST], ...]] = {
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
    cst.Yield: (ast.Yield, ast.YieldFrom),
    cst.With: (ast.With, ast.AsyncWith),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.If: (ast.If,),
    cst.Try: (ast.Try,),
    cst.TryStar: (ast.TryStar,),
    cst.ExceptHandler: (ast.ExceptHandler,),
    cst.Assign: (ast.Assign,),
    cst.AugAssign: (ast.AugAssign,),
    cst.AnnAssign: (ast.AnnAssign,),
    cst.Return: (ast.Return,),
    cst.Raise: (ast.Raise,),
    cst.Assert: (ast.Assert,),
    cst.Del: (ast.Delete,),
    cst.Match: (ast.Match,),
}


KINDS_NEEDED = tuple(_KINDS)


class _Collect(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: dict[type, list[cst.CSTNode]] = {kind: [] for kind in _KINDS}

    def on_visit(self, node: cst.CSTNode) -> bool:
        bucket = self.found.get(type(node))
        if bucket is not None:
            bucket.append(node)
        return True


def _defs(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every def, found through statements only (a def is never inside an expression)."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(node)
        for part in ("body", "orelse", "handlers", "finalbody", "cases"):
            stack.extend(getattr(node, part, ()))
    return found


_AST_KINDS = frozenset(kind for kinds in _KINDS.values() for kind in kinds)


def _by_kind(root: ast.AST) -> dict[type[ast.AST], list[ast.AST]]:
    """The nodes under `root` of the kinds positions pair, by kind (in no order: `_pair` sorts them).
    `ast.walk`, without its two generators per node."""
    found: dict[type[ast.AST], list[ast.AST]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in _AST_KINDS:
            found.setdefault(kind, []).append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                stack += [item for item in value if isinstance(item, ast.AST)]
            elif isinstance(value, ast.AST):
                stack.append(value)
    return found


class Positions:
    """`positions[node]` for the defs of the module, and for nodes inside the functions it compiles."""

    def __init__(
        self, tree: ast.Module, source: str, functions: list[cst.FunctionDef], compiled: list[cst.FunctionDef]
    ) -> None:
        self.tree = tree
        self.lines = source.splitlines()
        self.functions = functions
        self.compiled = compiled
        self.indexed: dict[cst.CSTNode, dict[type, list[cst.CSTNode]]] = {}  # filled by the compiler's walk
        self.definitions: dict[cst.FunctionDef, ast.FunctionDef | ast.AsyncFunctionDef] = {}  # of `compiled`
        self._table: dict[cst.CSTNode, Position] | None = None
        self._defs_at: dict[tuple[int, str], ast.FunctionDef | ast.AsyncFunctionDef] | None = None

    def _chars(self, line: int, byte_column: int) -> int:
        """ast columns count UTF-8 bytes; LibCST's count characters."""
        if 0 < line <= len(self.lines):
            text = self.lines[line - 1]
            if not text.isascii():
                return len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))
        return byte_column

    def _position(self, match: ast.AST) -> Position:
        end_line = match.end_lineno or match.lineno
        return Position(
            _Point(match.lineno, self._chars(match.lineno, match.col_offset)),
            _Point(end_line, self._chars(end_line, match.end_col_offset or 0)),
        )

    def _pair(self, nodes: list[cst.CSTNode], matches: list[ast.AST], table: dict) -> None:
        matches.sort(key=lambda n: (n.lineno, n.col_offset))
        if len(matches) == len(nodes):  # if the two parsers disagree, leave it unknown rather than wrong
            for node, match in zip(nodes, matches, strict=True):
                table[node] = self._position(match)

    def _build(self) -> dict[cst.CSTNode, Position]:
        table: dict[cst.CSTNode, Position] = {}
        defs = sorted(_defs(self.tree), key=lambda d: (d.lineno, d.col_offset))
        self._pair(list(self.functions), defs, table)
        by_start = {(d.lineno, d.name): d for d in defs}
        for function in self.compiled:
            where = table.get(function)
            definition = by_start.get((where.start.line, function.name.value)) if where else None
            if definition is None:
                continue
            self.definitions[function] = definition
            found = self.indexed.get(function)
            if found is None:
                collector = _Collect()
                walk(function, collector)
                found = collector.found
            by_kind = _by_kind(definition)
            for kind, nodes in found.items():
                if kind is cst.FunctionDef:
                    continue
                self._pair(nodes, [n for ast_kind in _KINDS[kind] for n in by_kind.get(ast_kind, [])], table)
        return table

    @property
    def table(self) -> dict[cst.CSTNode, Position]:
        if self._table is None:
            self._table = self._build()
        return self._table

    def __getitem__(self, node: cst.CSTNode) -> Position:
        return self.table[node]

    def __contains__(self, node: object) -> bool:
        return node in self.table

    def get(self, node: cst.CSTNode, default=None):
        return self.table.get(node, default)

    def definition(self, node: cst.FunctionDef) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The `ast` node of a compiled function, nested ones included."""
        _ = self.table
        found = self.definitions.get(node)
        where = self.table.get(node)
        if found is None and where is not None:
            if self._defs_at is None:
                self._defs_at = {(d.lineno, d.name): d for d in _defs(self.tree)}
            found = self._defs_at.get((where.start.line, node.name.value))
        return found

    def start(self, node: ast.AST) -> tuple[int, int]:
        """(line, column in characters) where an `ast` node starts, as LibCST counts."""
        return node.lineno, self._chars(node.lineno, node.col_offset)
