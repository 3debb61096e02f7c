"""`branchc compile` / `branchc check`: compile trees of source files, write modules and a manifest.

For each source file, OUT gets a module of the same name (folders keep their
package structure): the compiled text, readable, which on import gives its
functions the source's file name and line numbers (see runtime/relocate.py), so
tracebacks point at what you wrote. `OUT/branchc.json` describes every compiled
function and every tool.
An unchanged file (same content hash, same compiler) is not compiled again.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from .compiler import COMPILER_VERSION, CompiledModule, compile_module
from .diagnostics import CompileError, Diagnostic

__all__ = ["BuildResult", "SourceFile", "build", "check", "find_sources"]

MANIFEST = "branchc.json"


@dataclass(frozen=True)
class SourceFile:
    path: Path  # as given (for messages)
    relative: Path  # where it goes under OUT

    @property
    def module(self) -> str:
        parts = list(self.relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)


@dataclass
class BuildResult:
    compiled: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def find_sources(sources: Iterable[str | Path]) -> list[SourceFile]:
    """Python files under each source (a file, or a folder searched recursively)."""
    found: list[SourceFile] = []
    for source in map(Path, sources):
        if source.is_dir():
            for path in sorted(source.rglob("*.py")):
                if not any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(source).parts):
                    found.append(SourceFile(path, path.relative_to(source)))
        elif source.is_file():
            found.append(SourceFile(source, Path(source.name)))
        else:
            raise FileNotFoundError(f"{source}: no such file or folder")
    return found


def _digest(text: str) -> str:
    return hashlib.sha256(f"{COMPILER_VERSION}\0{text}".encode()).hexdigest()


def check(sources: Iterable[str | Path]) -> list[Diagnostic]:
    """Diagnostics for every file; nothing is written."""
    diagnostics: list[Diagnostic] = []
    for source in find_sources(sources):
        diagnostics += _compile(source)[1]
    return diagnostics


def _compile(source: SourceFile) -> tuple[CompiledModule | None, list[Diagnostic]]:
    try:
        text = source.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return None, [Diagnostic(str(source.path), 1, 1, "error", f"cannot read it: {error}")]
    try:
        result = compile_module(text, str(source.path))
    except CompileError as error:
        return None, error.diagnostics
    return result, result.diagnostics


def build(
    sources: Iterable[str | Path],
    out: str | Path,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> BuildResult:
    """Compile `sources` into `out`; files whose content did not change since the last build are kept."""
    out = Path(out)
    files = find_sources(sources)
    manifest_path = out / MANIFEST
    previous: dict[str, Any] = {}
    if manifest_path.is_file():
        try:
            previous = json.loads(manifest_path.read_text())["modules"]
        except (ValueError, KeyError, TypeError):
            previous = {}
    result = BuildResult()
    modules: dict[str, Any] = {}
    for index, source in enumerate(files):
        if progress is not None:
            progress(index, len(files), str(source.path))
        text = source.path.read_text(encoding="utf-8")
        digest = _digest(text)
        target = out / source.relative
        old = previous.get(source.module)
        if old and old.get("hash") == digest and target.is_file():
            modules[source.module] = old
            result.cached.append(source.module)
            continue
        compiled, diagnostics = _compile(source)
        result.diagnostics += diagnostics
        if compiled is None:
            continue
        _write(target, compiled)
        modules[source.module] = {
            "source": str(source.path),
            "hash": digest,
            "functions": [f.manifest() for f in compiled.functions],
            "tools": [],
        }
        result.compiled.append(source.module)
    if progress is not None:
        progress(len(files), len(files), "")
    if not result.errors:
        _describe_tools(out, {name: modules[name] for name in result.compiled}, result)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "branchc": __version__,
        "compiler": COMPILER_VERSION,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "modules": modules,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return result


def _write(target: Path, compiled: CompiledModule) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    text = compiled.module_text(str(Path(compiled.path).resolve())) if compiled.functions else compiled.code
    target.write_text(text, encoding="utf-8")


def _describe_tools(out: Path, modules: dict[str, Any], result: BuildResult) -> None:
    """Import the compiled modules and record each tool: name, description, schema, requires, limits."""
    from ..runtime.tool import Tool

    root = str(out.resolve())
    sys.path.insert(0, root)
    try:
        for name, entry in modules.items():
            if not entry["functions"]:
                continue
            sys.modules.pop(name, None)
            try:
                module = importlib.import_module(name)
            except Exception as error:  # user code: report, do not crash
                result.diagnostics.append(
                    Diagnostic(entry["source"], 1, 1, "error", f"importing the compiled module failed: {error!r}")
                )
                continue
            entry["tools"] = [
                {
                    "name": value.name,
                    "description": value.description,
                    "input_schema": value.input_schema,
                    "requires": sorted(value.requires),
                    "limits": value.limits.model_dump(exclude_none=True),
                    "client": getattr(value.client_fn, "__qualname__", None),
                }
                for value in vars(module).values()
                if isinstance(value, Tool)
            ]
    finally:
        sys.path.remove(root)
