"""The splitter: compiles client and @resumable generators into resumable state machines.

Passes, one job each: `normalize` lifts yields out of expressions; `lower` makes the
body re-enterable at every yield; `compiler` finds the functions and emits the module.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from .diagnostics import CompileError, Diagnostic

if TYPE_CHECKING:
    from .compiler import CompiledFunction, CompiledModule, compile_module

__all__ = ["CompileError", "CompiledFunction", "CompiledModule", "Diagnostic", "compile_module", "load_source"]

_COMPILER = frozenset({"CompiledFunction", "CompiledModule", "compile_module"})


def __getattr__(name: str) -> Any:
    """The compiler's names, loaded on first use: `branchc.splitter.build` finds an up-to-date build
    without importing LibCST."""
    if name in _COMPILER:
        from . import compiler

        return getattr(compiler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_source(source: str, module_name: str, filename: str = "<string>") -> types.ModuleType:
    """Compile `source` and import the result as module `module_name` (for tests and tools)."""
    from .compiler import compile_module

    result = compile_module(source, filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module
    exec(result.code_object(filename), module.__dict__)
    return module
