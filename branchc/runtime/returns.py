"""Where a phase's value came from: the file:line of the `return` that gave it, for errors about that value.

A generator or a coroutine is watched through its frame: a frame object taken before its last step still
answers `f_lineno` once the frame has returned (CPython keeps a finished frame's state in the frame object
that was taken of it), which is the line of the `return` that ran. A plain function cannot be watched that
way without a profiler running through all of its calls, so its source is read instead, and only when its
value was found wanting: a function with one `return` of a value names that line; any other, its `def`.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import types
from typing import Any

from .jsondata import phase_place, source_place

__all__ = ["frame_of", "returned_from", "returned_place"]


def frame_of(runnable: Any) -> types.FrameType | None:
    """The frame of a generator or coroutine that has not finished (None for anything else)."""
    return getattr(runnable, "gi_frame", None) or getattr(runnable, "cr_frame", None)


def returned_from(frame: types.FrameType | None) -> str | None:
    """`file:line` of the `return` a finished frame ran (None when unknown)."""
    if frame is None or frame.f_lineno is None:
        return None
    return source_place(frame.f_code.co_filename, frame.f_lineno)


def returned_place(fn: Any) -> str | None:
    """`file:line` of the one `return` of a value in the source of plain function `fn`; else of its `def`."""
    line = _only_return(fn)
    if line is None:
        return phase_place(fn)
    return source_place(inspect.unwrap(fn).__code__.co_filename, line)


def _only_return(fn: Any) -> int | None:
    try:
        code = inspect.unwrap(fn).__code__
    except (AttributeError, ValueError):  # not a function of Python code, or a cycle of __wrapped__
        return None
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    block = inspect.getblock(lines[code.co_firstlineno - 1 :])
    try:
        tree = ast.parse(textwrap.dedent("".join(block)))
    except SyntaxError:
        return None
    function = next((node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    if function is None:
        return None
    found = [node.lineno for node in _own_nodes(function) if isinstance(node, ast.Return) and node.value is not None]
    return found[0] + code.co_firstlineno - 1 if len(found) == 1 else None


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of a function's own body: not those of the functions, lambdas and classes inside it."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    out: list[ast.AST] = []
    stack = [child for child in ast.iter_child_nodes(function) if not isinstance(child, nested)]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, nested))
    return out
