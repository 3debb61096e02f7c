"""The tools `branchc serve PATH` serves: PATH is source (files or folders, compiled on the fly
into a cache and rebuilt only where they changed) or a build folder from `branchc compile`.

Tools always run compiled, in both protocol eras, so a run behaves the same whichever era a
client speaks. Every model a tool elicits with is checked against what MCP forms can
express when the tool is loaded, not when a user is waiting for the form.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from ..runtime.errors import BranchcError
from ..runtime.tool import Tool
from ..splitter.build import MANIFEST, BuildError, build_folder
from .elicitation import ElicitSchemaError, elicited_models, form_schema

__all__ = ["ServeLoadError", "load_served_tools"]


class ServeLoadError(BranchcError, ValueError):
    """PATH does not give a set of tools that can be served; the message says what to fix."""


def load_served_tools(path: str | Path) -> dict[str, Tool]:
    """Every tool under `path`, compiled, by tool name."""
    path = Path(path)
    if not path.exists():
        raise ServeLoadError(f"{path}: no such file or folder; give tool sources or a build folder")
    try:
        out = build_folder(path)
    except BuildError as error:
        raise ServeLoadError(str(error)) from None
    return _import_tools(out)


def _import_tools(out: Path) -> dict[str, Tool]:
    try:
        manifest = json.loads((out / MANIFEST).read_text())["modules"]
    except (OSError, ValueError, KeyError) as error:
        raise ServeLoadError(f"{out / MANIFEST}: not a branchc build manifest ({error}); run branchc compile") from None
    root = str(out.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    tools: dict[str, Tool] = {}
    for name, entry in sorted(manifest.items()):
        if not entry.get("tools"):
            continue
        try:
            module = importlib.import_module(name)
        except Exception as error:
            where = entry.get("source", name)
            raise ServeLoadError(f"{where}: importing it failed: {type(error).__name__}: {error}") from error
        for value in vars(module).values():
            if not isinstance(value, Tool):
                continue
            if value.name in tools:
                raise ServeLoadError(f"{entry.get('source', name)}: a second tool named {value.name!r}; rename one")
            tools[value.name] = value
        _check_forms(module, entry.get("source", name))
    if not tools:
        raise ServeLoadError(f"{out}: defines no tool; create one with branchc.tool(...)")
    return tools


def _check_forms(module: object, source: str) -> None:
    try:
        text = Path(source).read_text(encoding="utf-8")
    except OSError:
        return  # a build folder moved away from its sources: forms are checked when asked
    for model, line in elicited_models(text, vars(module)):
        try:
            form_schema(model.model_json_schema(), model.__qualname__)
        except ElicitSchemaError as error:
            raise ServeLoadError(f"{source}:{line}: this elicitation cannot be an MCP form: {error}") from None
