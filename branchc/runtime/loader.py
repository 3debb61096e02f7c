"""Find the tools of a Python source file without installing it as a package."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from .errors import BranchcError
from .tool import Tool

__all__ = ["ToolLoadError", "load_tool", "load_tools"]


class ToolLoadError(BranchcError, LookupError):
    """A tool file that cannot be imported, or a tool name it does not define."""


def load_tools(path: str | Path) -> dict[str, Tool]:
    """Import `path` and return its Tool objects by tool name."""
    path = Path(path)
    if not path.is_file():
        raise ToolLoadError(f"{path}: no such file; give the path of a .py file that defines a tool")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"branchc_tools_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ToolLoadError(f"{path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise ToolLoadError(f"{path}:{error.lineno}:{error.offset}: syntax error: {error.msg}") from None
    except Exception as error:
        line = _user_line(error, path)
        raise ToolLoadError(f"{path}{line}: importing it failed: {type(error).__name__}: {error}") from error
    finally:
        sys.path.remove(str(path.parent.resolve()))
    return {value.name: value for value in vars(module).values() if isinstance(value, Tool)}


def load_tool(path: str | Path, name: str | None = None) -> Tool:
    """The tool called `name` in `path`, or its only tool when `name` is None."""
    tools = load_tools(path)
    if not tools:
        raise ToolLoadError(f"{path}: defines no tool; create one with branchc.tool(...)")
    if name is None:
        if len(tools) > 1:
            raise ToolLoadError(f"{path}: defines several tools ({', '.join(sorted(tools))}); name one")
        return next(iter(tools.values()))
    if name not in tools:
        raise ToolLoadError(f"{path}: has no tool {name!r}; it defines {', '.join(sorted(tools))}")
    return tools[name]


def _user_line(error: BaseException, path: Path) -> str:
    traceback = error.__traceback__
    line = ""
    while traceback is not None:
        if Path(traceback.tb_frame.f_code.co_filename).resolve() == path.resolve():
            line = f":{traceback.tb_lineno}"
        traceback = traceback.tb_next
    return line
