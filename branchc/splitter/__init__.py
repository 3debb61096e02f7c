"""The splitter: compiles client and @resumable generators into resumable state machines.

Passes, one job each: `normalize` lifts yields out of expressions; `lower` makes the
body re-enterable at every yield; `compiler` finds the functions and emits the module.
"""

from __future__ import annotations

import sys
import types

from .compiler import CompiledFunction, CompiledModule, compile_module
from .diagnostics import CompileError, Diagnostic

__all__ = ["CompileError", "CompiledFunction", "CompiledModule", "Diagnostic", "compile_module", "load_source"]


def load_source(source: str, module_name: str, filename: str = "<string>") -> types.ModuleType:
    """Compile `source` and import the result as module `module_name` (for tests and tools)."""
    result = compile_module(source, filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module
    exec(result.code_object(filename), module.__dict__)
    return module
