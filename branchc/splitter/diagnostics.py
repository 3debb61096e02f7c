"""Compiler diagnostics: `path:line:col: error: message`, then a hint that says what to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BranchcError

if TYPE_CHECKING:  # the build reads diagnostics without loading LibCST
    import libcst as cst

__all__ = ["CompileError", "Diagnostic", "Reporter"]


@dataclass(frozen=True)
class Diagnostic:
    path: str
    line: int
    column: int
    severity: str  # "error" or "warning"
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}:{self.column}: {self.severity}: {self.message}"
        return f"{text}\n  hint: {self.hint}" if self.hint else text


class CompileError(BranchcError, SyntaxError):
    """Source the splitter cannot compile; `diagnostics` says where and why."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics))


class Reporter:
    """Collects diagnostics for one file; positions come from LibCST's PositionProvider."""

    def __init__(self, path: str, positions) -> None:
        self.path = path
        self.positions = positions
        self.diagnostics: list[Diagnostic] = []

    def where(self, node: cst.CSTNode) -> tuple[int, int]:
        try:
            start = self.positions[node].start
        except KeyError:
            return (0, 0)
        return (start.line, start.column + 1)

    def span(self, node: cst.CSTNode) -> list[int]:
        """[line, column, end line, end column], 1-based columns; zeros when unknown."""
        try:
            position = self.positions[node]
        except KeyError:
            return [0, 0, 0, 0]
        return [position.start.line, position.start.column + 1, position.end.line, position.end.column + 1]

    def error(self, node: cst.CSTNode, message: str, hint: str = "") -> None:
        line, column = self.where(node)
        self.diagnostics.append(Diagnostic(self.path, line, column, "error", message, hint))

    def warning(self, node: cst.CSTNode, message: str, hint: str = "") -> None:
        line, column = self.where(node)
        self.diagnostics.append(Diagnostic(self.path, line, column, "warning", message, hint))

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]
