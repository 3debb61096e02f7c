"""Tools that run compiled: a path (tool sources, compiled on the fly and rebuilt only where they
changed, into their default build folder when `branchc compile` made it from them, else into the
cache; or a build folder from `branchc compile`) and the tools its build defines.

`branchc run` (one tool of a file), `branchc serve` and `branchc check` (every tool of a path)
all load tools this way, so a tool runs the same code under each. Importing a build runs each
tool module's top-level code, once, from the build folder; what goes wrong is reported as a
`LoadProblem` naming the source file, the line and what to do, never a bare traceback.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .loader import ToolLoadError
from .tool import Tool

__all__ = [
    "LoadProblem",
    "LoadedBuild",
    "CompiledLoadError",
    "compiled_build",
    "import_build",
    "load_compiled_tool",
    "load_compiled_tools",
    "tool_line",
]


class CompiledLoadError(ToolLoadError, ValueError):
    """A path whose tools cannot be compiled or imported; the message says where and what to fix.
    `out`: the build folder when the sources were compiled and written but a module failed to import."""

    out: Path | None = None


@dataclass(frozen=True)
class LoadProblem:
    """Something that keeps a build's tools from loading (or, as a warning, from loading everywhere)."""

    path: str
    line: int
    column: int
    message: str
    hint: str = ""
    severity: str = "error"

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}: {self.message}"
        return f"{text}\n  hint: {self.hint}" if self.hint else text


@dataclass
class LoadedBuild:
    """A build's tool modules, imported: the tools by name, the modules (name -> (source, module)),
    and the problems found on the way (an import that failed, two tools of one name)."""

    root: Path
    tools: dict[str, Tool] = field(default_factory=dict)
    modules: dict[str, tuple[str, ModuleType]] = field(default_factory=dict)
    problems: list[LoadProblem] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)  # module name -> its manifest entry

    @property
    def errors(self) -> list[LoadProblem]:
        return [problem for problem in self.problems if problem.severity == "error"]

    def loaded_sources(self) -> dict[str, tuple[str, ModuleType]]:
        """Every module of the build that is imported now (the tool modules and what they import):
        name -> (its source file, the module)."""
        out = dict(self.modules)
        for name, entry in self.manifest.items():
            module = sys.modules.get(name)
            if name not in out and module is not None and _from_build(module, self.root):
                out[name] = (entry.get("source", name), module)
        return out


def compiled_build(path: str | Path, **warn: Any) -> Path:
    """The build folder of `path`: the folder itself when it is a build, else its sources compiled
    (splitter.build.build_folder: into their default build folder or the cache). CompiledLoadError
    when the sources do not compile (each diagnostic, with its hint).
    `warn=fn` gets the compiler's warnings (build_folder's default prints them to stderr)."""
    from ..splitter.build import BuildError, build_folder  # the compiler: only when sources are loaded

    try:
        return build_folder(path, **warn)
    except BuildError as error:
        failed = CompiledLoadError(str(error))
        failed.out = error.out
        raise failed from None


def import_build(out: Path, *, every: bool = False) -> LoadedBuild:
    """Import every module of the build `out` that defines a tool (`every`: every compiled module);
    problems are collected, not raised (a module whose import fails is named with the source line
    where it failed)."""
    from ..splitter.build import MANIFEST

    try:
        manifest = json.loads((out / MANIFEST).read_text())["modules"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CompiledLoadError(
            f"{out / MANIFEST}: not a branchc build manifest ({error}); run branchc compile"
        ) from None
    loaded = LoadedBuild(out.resolve(), manifest=manifest)
    root = str(loaded.root)
    if sys.path[:1] != [root]:  # first: its modules are imported from it, not from a build loaded earlier
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)
    first_source: dict[str, str] = {}
    for name, entry in sorted(manifest.items()):
        if not (entry.get("tools") or (every and entry.get("functions"))):
            continue
        source = entry.get("source", name)
        try:
            module = importlib.import_module(name)
        except Exception as error:
            line = _failed_line(error, source, loaded.root)
            loaded.problems.append(
                LoadProblem(
                    source,
                    line,
                    1,
                    f"importing it failed: {type(error).__name__}: {error}",
                    "tool modules are imported when their tools are loaded; fix what fails at import",
                )
            )
            continue
        if not _from_build(module, loaded.root):
            loaded.problems.append(
                LoadProblem(
                    source,
                    1,
                    1,
                    f"the module name {name!r} is taken by another module ({getattr(module.__spec__, 'origin', None)})",
                    "rename the file: a tool module is imported under its file name",
                )
            )
            continue
        loaded.modules[name] = (source, module)
        for value in vars(module).values():
            if not isinstance(value, Tool) or loaded.tools.get(value.name) is value:
                continue  # the same tool imported into another module is not a second one
            if value.name in loaded.tools:
                line, column = tool_line(source, value.name)
                loaded.problems.append(
                    LoadProblem(
                        source,
                        line,
                        column,
                        f"a second tool named {value.name!r} (the first is in {first_source[value.name]})",
                        "tool names are unique on a server; rename one",
                    )
                )
                continue
            loaded.tools[value.name] = value
            first_source[value.name] = source
    return loaded


def load_compiled_tools(path: str | Path, **warn: Any) -> dict[str, Tool]:
    """Every tool under `path`, compiled, by name; CompiledLoadError names the first problem.
    `warn=fn` gets the compiler's warnings (as compiled_build)."""
    path = Path(path)
    if not path.exists():
        raise CompiledLoadError(f"{path}: no such file or folder; give tool sources or a build folder")
    loaded = import_build(compiled_build(path, **warn))
    if loaded.errors:
        raise CompiledLoadError(str(loaded.errors[0])) from None
    if not loaded.tools:
        raise CompiledLoadError(f"{path}: defines no tool; create one with branchc.tool(...)")
    return loaded.tools


def load_compiled_tool(path: str | Path, name: str | None = None, **warn: Any) -> Tool:
    """The tool called `name` in the file `path` (its only tool when `name` is None), compiled."""
    path = Path(path)
    if not path.is_file():
        raise CompiledLoadError(f"{path}: no such file; give the path of a .py file that defines a tool")
    tools = load_compiled_tools(path, **warn)
    if name is None:
        if len(tools) > 1:
            raise CompiledLoadError(f"{path}: defines several tools ({', '.join(sorted(tools))}); name one")
        return next(iter(tools.values()))
    if name not in tools:
        raise CompiledLoadError(f"{path}: has no tool {name!r}; it defines {', '.join(sorted(tools))}")
    return tools[name]


def tool_line(source: str, name: str) -> tuple[int, int]:
    """(line, column) of the `tool("name", ...)` call in the file `source`, or of the `def name` a bare
    `@tool` names; (1, 1) when not found."""
    try:
        tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return 1, 1
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == name
            and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("tool", "Tool")
        ):
            return node.lineno, node.col_offset + 1
        if isinstance(node, ast.FunctionDef) and node.name == name and any(map(_bare_tool, node.decorator_list)):
            return node.lineno, node.col_offset + 1
    return 1, 1


def _bare_tool(decorator: ast.expr) -> bool:
    """`@tool` or `@tool(...)` without a name: the tool is named after the function."""
    if isinstance(decorator, ast.Call):
        if decorator.args and isinstance(decorator.args[0], ast.Constant):
            return False
        decorator = decorator.func
    return getattr(decorator, "id", getattr(decorator, "attr", None)) == "tool"


def _from_build(module: ModuleType, root: Path) -> bool:
    """Whether `module` was imported from the build `root` (its `__file__` names the source instead)."""
    filename = getattr(getattr(module, "__spec__", None), "origin", None)
    return filename is not None and root in Path(filename).resolve().parents


def _failed_line(error: BaseException, source: str, root: Path) -> int:
    """The last line of `source` in the error's traceback. Compiled functions report their source's
    lines; a module's top-level code, failing before the module's last line relocated it, reports
    the generated module's lines: these are mapped back through that last line's table."""
    line = 1
    try:
        wanted = Path(source).resolve()
    except OSError:
        return line
    for frame, number in traceback.walk_tb(error.__traceback__):
        try:
            filename = Path(frame.f_code.co_filename).resolve()
        except OSError:
            continue
        if filename == wanted and number:
            line = number
        elif root in filename.parents and number:
            line = _source_line(filename, number, wanted) or line
    return line


def _source_line(compiled: Path, number: int, source: Path) -> int | None:
    """The source line of line `number` of a compiled module, from its relocation table (its last line:
    `_bc_rt.relocate(globals(), [(generated, source, shift), ...], 'source path')`)."""
    try:
        last = compiled.read_text(encoding="utf-8").rstrip().rsplit("\n", 1)[-1]
        call = ast.parse(last).body[0].value  # type: ignore[attr-defined]
        table, named = ast.literal_eval(call.args[1]), ast.literal_eval(call.args[2])
    except (OSError, SyntaxError, ValueError, AttributeError, IndexError, UnicodeDecodeError):
        return None
    if Path(named).resolve() != source:
        return None
    before = [entry for entry in table if entry[0] <= number]
    return max(before, key=lambda entry: entry[0])[1] if before else None
