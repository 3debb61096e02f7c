"""The tools `branchc serve PATH` serves: PATH is source (files or folders, compiled on the fly
and rebuilt only where they changed, into their default build folder when `branchc compile` made it
from them, else into a cache) or a build folder from `branchc compile`.

Tools always run compiled, in both protocol eras, so a run behaves the same whichever era a
client speaks (loading is shared with `branchc run`: runtime/compiled.py). Every model a tool
elicits with is checked against what MCP forms can express when the tool is loaded, not when a
user is waiting for the form. `served_tools` collects every problem (what `branchc check`
reports); `load_served_tools` refuses the first.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ..runtime.compiled import CompiledLoadError, LoadedBuild, LoadProblem, compiled_build, import_build, tool_line
from ..runtime.errors import BranchcError
from ..runtime.tool import Tool
from ..workflows import WorkflowError, find_workflows, workflow_build
from .elicitation import ElicitSchemaError, elicited_models, form_schema
from .guided import RESUME_TOOL
from .workflow_tools import WorkflowTools

__all__ = ["ServeLoadError", "load_served_tools", "served_tools"]


class ServeLoadError(BranchcError, ValueError):
    """PATH does not give a set of tools that can be served; the message says what to fix."""


def load_served_tools(path: str | Path, *, guided: bool = False, **warn: Any) -> dict[str, Tool]:
    """Every tool under `path`, compiled, by tool name; ServeLoadError names the first problem.
    `warn=fn` gets the compiler's warnings (splitter.build.build_folder)."""
    try:
        tools, problems = served_tools(path, guided=guided, **warn)
    except CompiledLoadError as error:
        raise ServeLoadError(str(error)) from None
    if errors := [problem for problem in problems if problem.severity == "error"]:
        raise ServeLoadError(str(errors[0]))
    if not tools:
        raise ServeLoadError(f"{path}: defines no tool; create one with branchc.tool(...)")
    return tools


def served_tools(
    path: str | Path, *, guided: bool = False, checking: bool = False, **warn: Any
) -> tuple[dict[str, Tool], list[LoadProblem]]:
    """(the tools under `path`, every problem that keeps `branchc serve` from serving them).

    A tool named like guided mode's resume tool is an error with `guided`, else a warning (only
    `serve --guided` refuses it). CompiledLoadError when `path` holds nothing to load (missing,
    not compiling, not a build). `checking` (`branchc check`, which knows the sources compile): a
    module that fails to import while it is built is imported again, to name the line that fails."""
    path = Path(path)
    if not path.exists():
        raise CompiledLoadError(f"{path}: no such file or folder; give tool sources or a build folder")
    workflows = [] if path.is_dir() and (path / "branchc.json").is_file() else find_workflows(path)
    if path.is_file() and workflows:  # a workflow file: no Python sources beside it
        loaded = LoadedBuild(path.resolve())
    else:
        try:
            out = compiled_build(path, **warn)
        except CompiledLoadError as error:
            if not checking or error.out is None:
                raise
            out = error.out
        loaded = import_build(out, every=checking)
    if workflows:
        _add_workflows(loaded, path, checking, **warn)
    problems = [*loaded.problems, *_form_problems(loaded)]
    if RESUME_TOOL in loaded.tools:
        source = _source_of(loaded, RESUME_TOOL, str(path))
        line, column = tool_line(source, RESUME_TOOL)
        problems.append(
            LoadProblem(
                source,
                line,
                column,
                f"a tool is named {RESUME_TOOL!r}, the tool guided mode adds; `branchc serve --guided` refuses it",
                "rename the tool",
                "error" if guided else "warning",
            )
        )
    for name in sorted(WorkflowTools(loaded.tools).names & loaded.tools.keys()):
        source = _source_of(loaded, name, str(path))
        line, column = tool_line(source, name)
        message = f"a tool is named {name!r}, a name the guided tools of the workflows served beside it take"
        problems.append(LoadProblem(source, line, column, message, "rename the tool"))
    return loaded.tools, problems


def _add_workflows(loaded: LoadedBuild, path: Path, checking: bool, **warn: Any) -> None:
    """The tools of the workflow files under `path` (compiled through their generated modules), added
    to `loaded`; a workflow that does not check is a CompiledLoadError listing its problems."""
    try:
        extra = import_build(workflow_build(path, **warn), every=checking)
    except WorkflowError as error:
        raise CompiledLoadError(str(error)) from None
    loaded.problems += extra.problems
    loaded.modules.update(extra.modules)
    loaded.manifest.update(extra.manifest)
    for name, tool in extra.tools.items():
        if name in loaded.tools:
            source = _source_of(extra, name, str(path))
            message = f"a second tool named {name!r} (a workflow's name is its tool's name)"
            loaded.problems.append(LoadProblem(source, 1, 1, message, "tool names are unique on a server; rename one"))
            continue
        loaded.tools[name] = tool


def _source_of(loaded: LoadedBuild, name: str, default: str) -> str:
    for source, module in loaded.modules.values():
        if any(isinstance(value, Tool) and value.name == name for value in vars(module).values()):
            return source
    return default


def _form_problems(loaded: LoadedBuild) -> list[LoadProblem]:
    """Each elicit call whose `schema=` model MCP forms cannot express, at the call, naming the model."""
    problems: list[LoadProblem] = []
    for source, module in loaded.loaded_sources().values():
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a build folder moved away from its sources: forms are checked when asked
        for model, line, column in elicited_models(text, vars(module)):
            try:
                form_schema(model.model_json_schema(), model.__qualname__)
            except ElicitSchemaError as error:
                defined = _class_line(text, model.__qualname__)
                where = f" (line {defined})" if defined else ""
                problems.append(
                    LoadProblem(
                        source,
                        line,
                        column,
                        f"this elicitation cannot be an MCP form: {error}",
                        f"make {model.__qualname__}{where} flat, or elicit the nested part with a form of its own",
                    )
                )
    return problems


def _class_line(text: str, qualname: str) -> int | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == qualname:
            return node.lineno
    return None
