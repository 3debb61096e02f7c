"""Make compiled code report the source's file name and line numbers, so tracebacks point at
what you wrote, not at the generated module.

The compiler records, for each generated line that carries source code, the source line and
the column shift. `relocated_code` compiles generated text with those positions; `relocate`
runs at the end of a compiled module's import and gives its functions the relocated code.
"""

from __future__ import annotations

import ast
import bisect
import gc
import sys
import threading
import types
from contextlib import contextmanager
from typing import Any

__all__ = ["RECURSION_LIMIT", "deeply", "gc_paused", "relocate_functions", "relocated_code", "relocation_paused"]

LineMap = dict[int, tuple[int, int | None]]  # generated line -> (source line, column shift; None: unknown)


@contextmanager
def gc_paused():
    """CPython 3.11 can fail building an AST ("AST constructor recursion depth mismatch") when a
    garbage collection runs a finalizer in the middle; building one is quick, so hold collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: Syntax trees are walked recursively (LibCST: a frame or two per level; CPython's AST to code: C frames),
#: and a 500-term expression is deeper than Python's default limit allows: compiling runs in a thread
#: with room for what CPython compiles from source.
RECURSION_LIMIT = 40_000
_STACK_SIZE = 512 << 20


def deeply(function, *args):
    """`function(*args)` in a thread with a big stack and a high recursion limit (its error is raised here)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, function(*args)))
        except BaseException as error:  # handed to the caller's thread as it is
            outcome.append((False, error))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    try:
        stack = threading.stack_size(_STACK_SIZE)
        try:
            thread = threading.Thread(target=run, name="branchc-compile")
            thread.start()
        except RuntimeError:  # no room for such a stack (a memory limit, say): this thread will do
            thread = None
        finally:
            threading.stack_size(stack)
        if thread is None:
            sys.setrecursionlimit(limit)  # this thread's stack is the usual one: so is its limit
            run()
        else:
            thread.join()
    finally:
        sys.setrecursionlimit(limit)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def relocated_code(text: str, line_map: LineMap, filename: str) -> types.CodeType:
    return deeply(_relocated_code, text, line_map, filename)


def _relocated_code(text: str, line_map: LineMap, filename: str) -> types.CodeType:
    with gc_paused():
        tree = ast.parse(text)
    if line_map:
        known = sorted(line_map)

        def source_line(line: int) -> tuple[int, int | None]:
            if line in line_map:
                return line_map[line]
            index = bisect.bisect_left(known, line)  # a generated line: the next line from the source
            return line_map[known[min(index, len(known) - 1)]][0], None

        for node in ast.walk(tree):
            if not hasattr(node, "lineno"):
                continue
            start, delta = source_line(node.lineno)
            end, end_delta = source_line(node.end_lineno or node.lineno)
            node.lineno, node.end_lineno = start, max(start, end)
            if delta is None or end_delta is None:
                node.col_offset = node.end_col_offset = 0
            else:
                node.col_offset = max(0, node.col_offset + delta)
                node.end_col_offset = max(0, (node.end_col_offset or 0) + end_delta)
    with gc_paused():
        code = compile(tree, filename, "exec", dont_inherit=True)
    return _rename_bodies(code)


def _is_body(code: types.CodeType) -> bool:
    """A compiled function's nested body (`_bc_body`, which takes its cells last as `_bc_C`)."""
    return code.co_argcount > 0 and code.co_varnames[code.co_argcount - 1] == "_bc_C"


def _rename_bodies(code: types.CodeType, owner: types.CodeType | None = None) -> types.CodeType:
    """Each body takes its function's name, so a traceback reads `in analyze`, not `in _bc_body`;
    what is defined inside it gets the qualified name it has natively."""
    consts = tuple(
        _rename_bodies(c, code)
        if isinstance(c, types.CodeType)
        else c.replace("._bc_body.<locals>.", ".", 1)  # a class's __qualname__ is a constant of its body
        if isinstance(c, str) and "._bc_body.<locals>." in c
        else c
        for c in code.co_consts
    )
    if owner is not None and _is_body(code):
        code = code.replace(co_name=owner.co_name, co_qualname=owner.co_qualname)
    elif "._bc_body.<locals>." in code.co_qualname:
        code = code.replace(co_qualname=code.co_qualname.replace("._bc_body.<locals>.", ".", 1))
    return code.replace(co_consts=consts)


def _functions(code: types.CodeType) -> dict[tuple[str, int], types.CodeType]:
    found: dict[tuple[str, int], types.CodeType] = {}
    stack = [code]
    while stack:
        current = stack.pop()
        for const in current.co_consts:
            if isinstance(const, types.CodeType):
                if not _is_body(const):
                    found[(const.co_qualname, const.co_firstlineno)] = const
                stack.append(const)
    return found


_PAUSED = False


@contextmanager
def relocation_paused():
    """Imports that only read a module's tools (`branchc compile` describing them) skip relocation."""
    global _PAUSED
    paused, _PAUSED = _PAUSED, True
    try:
        yield
    finally:
        _PAUSED = paused


def relocate_functions(
    module_globals: dict[str, Any], lines: list[tuple[int, int, int]], source: str
) -> list[types.FunctionType]:
    """Swap in relocated code for the module's functions and methods (same code, source positions);
    returns the functions that got new code."""
    if _PAUSED:
        return []

    loader = module_globals.get("__loader__")
    try:
        text = loader.get_source(module_globals["__name__"]) if loader is not None else None
    except (ImportError, OSError):
        text = None
    if text is None:
        return []
    line_map = {line: (source_line, delta) for line, source_line, delta in lines}
    relocated = _functions(relocated_code(text, line_map, source))
    # generated first lines -> source first lines, to match old code objects with new ones
    first = {line: source_line for line, (source_line, _) in line_map.items()}
    targets: list[types.FunctionType] = []
    swapped: list[types.FunctionType] = []
    for value in list(module_globals.values()):
        if isinstance(value, type) and value.__module__ == module_globals["__name__"]:
            targets += [m for m in vars(value).values() if isinstance(m, types.FunctionType)]
        elif isinstance(value, types.FunctionType):
            targets.append(value)
        elif isinstance(getattr(value, "__dict__", None), dict) and isinstance(
            vars(value).get("__wrapped__"), types.FunctionType
        ):
            targets.append(vars(value)["__wrapped__"])  # a function held by an object (a short-form tool)
    for function in targets:
        while hasattr(function, "__wrapped__") and isinstance(function.__wrapped__, types.FunctionType):
            function = function.__wrapped__
        old = function.__code__
        key = (old.co_qualname, first.get(old.co_firstlineno, -1))
        new = relocated.get(key)
        if new is None or new.co_freevars != old.co_freevars:
            continue
        function.__code__ = new
        swapped.append(function)
    return swapped
