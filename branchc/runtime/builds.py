"""Builds kept by content, so that a run outlives the deploy that replaced its code (Temporal's worker versioning).

Each build a server serves is kept in the build cache under its id, a digest of its modules' files (`keep_build`),
and each record names the id of the build that saved it. After a deploy, a run goes on in the served build where its
points allow, as it is or through the author's migration (continuation/snapshots.py); where they do not, it finishes
on the build that saved it, kept beside the served one (`load_run_or_kept`).

A kept build is imported under a package of its own, `_bcb_<id>`, so that its modules and the served build's, of the
same names, are loaded at once. When it is kept, its absolute imports of its own modules are rewritten to that
package, line for line (tracebacks point where they did). Snapshots keep naming modules as the build named them
(continuation/registry.py `reading_build`), so a run can still move to a newer build at a later round. `branchc runs
gc` drops the kept builds no stored run names (`drop_unused_builds`).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..continuation.codec.common import saved_module
from ..continuation.registry import reading_build, reading_prefix, register_kept
from .runstate import RunStateError, load_run
from .tool import Tool

__all__ = [
    "KeptBuild",
    "build_id",
    "builds_root",
    "drop_unused_builds",
    "keep_build",
    "kept_build",
    "kept_build_in",
    "kept_builds",
    "load_run_or_kept",
    "reading_kept",
    "saved_build_of",
    "served_with",
]

MANIFEST = "branchc.json"
_ID = re.compile(r"[0-9a-f]{16}")
#: a kept build younger than this is never dropped: a server may be about to save its first run
KEEP_AT_LEAST = 3600.0


def builds_root() -> Path:
    """Where kept builds live: the build cache's `builds` folder."""
    from ..splitter.build import cache_root

    return cache_root() / "builds"


def build_id(folder: str | Path) -> str:
    """The id of a build folder: a digest of its modules' names, files and bytes (not of where it is)."""
    folder = Path(folder)
    modules = _manifest(folder)["modules"]
    digest = hashlib.sha256()
    for name, entry in sorted(modules.items()):
        data = (folder / entry["file"]).read_bytes()
        digest.update(f"{name}\0{entry['file']}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def package_of(ident: str) -> str:
    """The package a kept build's modules are imported under."""
    return f"_bcb_{ident}"


def keep_build(folder: str | Path) -> str:
    """Keep the build `folder` in the cache under its id, unless it is kept already; its id."""
    folder = Path(folder)
    ident = build_id(folder)
    target = builds_root() / ident
    if target.is_dir():
        with contextlib.suppress(OSError):
            os.utime(target)  # kept again: `drop_unused_builds` counts its age from now
        return ident
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".{ident}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        _write_kept(folder, scratch, ident)
        os.rename(scratch, target)  # whole or not at all
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        if not target.is_dir():
            raise
    return ident  # (kept by another process first, from the same files, when the rename found it there)


def _write_kept(folder: Path, scratch: Path, ident: str) -> None:
    package = scratch / package_of(ident)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A build kept by branchc (runtime/builds.py)."""\n', encoding="utf-8")
    manifest = _manifest(folder)
    tops = {name.split(".")[0] for name in manifest["modules"]}
    for entry in manifest["modules"].values():
        text = (folder / entry["file"]).read_text(encoding="utf-8")
        out = package / entry["file"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_imports_kept(text, tops, package_of(ident)), encoding="utf-8")
    shutil.copyfile(folder / MANIFEST, scratch / MANIFEST)


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def _imports_kept(text: str, tops: set[str], package: str) -> str:
    """The module `text` with its absolute imports of the build's own modules (`tops`: their first names) made
    imports from `package`, on the same lines."""
    if not text.endswith("\n"):
        text += "\n"  # an import on the last line: the lines its padding joins need one after it
    lines = text.encode("utf-8").splitlines(keepends=True)
    edits: list[tuple[int, int, int, int, str]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in tops:
            aliases = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in node.names)
            new = f"from {package}.{node.module} import {aliases}"
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in tops for a in node.names):
            new = "; ".join(_import_kept(alias, tops, package) for alias in node.names)
        else:
            continue
        new += " \\\n" * (node.end_lineno - node.lineno)  # the lines it spanned, joined, so the rest stay put
        edits.append((node.lineno - 1, node.col_offset, node.end_lineno - 1, node.end_col_offset, new))
    for first, start, last, end, new in sorted(edits, reverse=True):
        head, tail = lines[first][:start], lines[last][end:]
        lines[first : last + 1] = [head + new.encode("utf-8") + tail]
    return b"".join(lines).decode("utf-8")


def _import_kept(alias: ast.alias, tops: set[str], package: str) -> str:
    name, top = alias.name, alias.name.split(".")[0]
    if top not in tops:
        return f"import {name} as {alias.asname}" if alias.asname else f"import {name}"
    if alias.asname:
        return f"import {package}.{name} as {alias.asname}"
    if "." not in name:
        return f"import {package}.{name} as {name}"
    return f'__import__("{package}.{name}"); import {package}.{top} as {top}'  # `import a.b` binds a


@dataclass(frozen=True)
class KeptBuild:
    """A kept build, imported: its id, the modules it has (as it names them), its tools by name."""

    id: str
    modules: frozenset[str]
    tools: dict[str, Tool]

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Inside: snapshots read name this build's modules (a round of a run that finishes here runs inside)."""
        return reading_build(package_of(self.id) + ".", self.modules)


_KEPT: dict[str, KeptBuild] = {}
_KEPT_LOCK = threading.Lock()


class KeptBuildError(RunStateError):
    """A kept build that cannot be imported here."""


def kept_build(ident: Any) -> KeptBuild | None:
    """The kept build `ident` (a record's), imported once per process; None when no build of that id is kept."""
    if type(ident) is not str or not _ID.fullmatch(ident):
        return None  # a record of an older branchc (a folder's path), or none
    return _kept_at(builds_root() / ident)


def kept_build_in(folder: str) -> KeptBuild | None:
    """The kept build in `folder` (a branch step's build folder, runtime/steps.py: a worker's cache may be another
    one), imported once per process; None when `folder` holds no kept build."""
    return _kept_at(Path(folder)) if _ID.fullmatch(os.path.basename(folder)) else None


def _kept_at(folder: Path) -> KeptBuild | None:
    ident = folder.name
    with _KEPT_LOCK:
        found = _KEPT.get(ident)
        if found is None:
            if not (folder / MANIFEST).is_file() or not (folder / package_of(ident) / "__init__.py").is_file():
                return None
            found = _KEPT[ident] = _load_kept(ident, folder)
        return found


def _load_kept(ident: str, folder: Path) -> KeptBuild:
    package = package_of(ident)
    if package not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            package, folder / package / "__init__.py", submodule_search_locations=[str(folder / package)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        spec.loader.exec_module(module)
    modules = _manifest(folder)["modules"]
    register_kept(
        package + ".",
        {
            name: ({f["qualname"]: f["hash"] for f in entry.get("functions", [])}, frozenset(entry.get("classes", [])))
            for name, entry in modules.items()
        },
    )
    tools: dict[str, Tool] = {}
    for name in sorted(modules):
        try:
            module: ModuleType = importlib.import_module(f"{package}.{name}")
        except Exception as error:
            raise KeptBuildError(
                f"the kept build {ident} does not import here: its module {name!r} fails with "
                f"{type(error).__name__}: {error}"
            ) from None
        tools.update((value.name, value) for value in vars(module).values() if isinstance(value, Tool))
    return KeptBuild(ident, frozenset(modules), tools)


def kept_builds() -> dict[str, float]:
    """Every kept build's id -> when it was last kept (seconds since the epoch)."""
    root = builds_root()
    if not root.is_dir():
        return {}
    out = {}
    for folder in root.iterdir():
        if _ID.fullmatch(folder.name) and (folder / MANIFEST).is_file():
            out[folder.name] = folder.stat().st_mtime
    return out


def served_with(ident: str, store: str) -> None:
    """Note that a server keeps its runs of the kept build `ident` in `store` (its URL): the cache is the machine's,
    and `drop_unused_builds` for one store must not drop a build the runs of another still need."""
    users = builds_root() / ident / "stores"
    users.mkdir(exist_ok=True)
    (users / _store_mark(store)).write_text(store.split("?", 1)[0] + "\n", encoding="utf-8")


def _store_mark(store: str) -> str:
    return hashlib.sha256(store.split("?", 1)[0].encode()).hexdigest()[:16]


def drop_unused_builds(used: Iterable[str], *, store: str | None = None, now: float | None = None) -> list[str]:
    """Drop the kept builds that no id in `used` (the builds `store`'s runs name) names, that were last kept over
    KEEP_AT_LEAST ago (a server that just started may not have saved a run yet), and that no other store's server
    served (`served_with`: this store's note is taken back), and what killed processes left half written; the ids
    dropped."""
    used, now = set(used), time.time() if now is None else now
    dropped = []
    for ident, kept_at in sorted(kept_builds().items()):
        if ident in used or now - kept_at < KEEP_AT_LEAST or ident in _KEPT:
            continue
        users = builds_root() / ident / "stores"
        if store is not None:
            with contextlib.suppress(OSError):
                (users / _store_mark(store)).unlink()
        if users.is_dir() and any(users.iterdir()):
            continue  # another store's runs may still need it
        shutil.rmtree(builds_root() / ident, ignore_errors=True)
        dropped.append(ident)
    for scratch in builds_root().glob(".*.tmp") if builds_root().is_dir() else ():  # left by a killed process
        with contextlib.suppress(OSError):
            if now - scratch.stat().st_mtime > KEEP_AT_LEAST:
                shutil.rmtree(scratch, ignore_errors=True)
    return dropped


def load_run_or_kept(text: str, build: Any, emit: Any = None) -> tuple[Any, Any, KeptBuild | None]:
    """(handoff, machine, None) of the saved run `text` in the served build, moved where its points allow; else
    (handoff, machine, the kept build) read in `build`, the kept build that saved it. RunStateError with the
    served build's reason (the point it waits at) when it is not kept, or cannot read it either."""
    try:
        return (*load_run(text, emit), None)
    except RunStateError as refused:
        try:
            kept = kept_build(build) if build else None
        except RunStateError as broken:  # kept, but it does not import here
            raise RunStateError(f"{refused}; nor can the build that saved it: {broken}") from None
        if kept is None:
            if type(build) is str and _ID.fullmatch(build):
                raise RunStateError(
                    f"{refused}; and the build that saved it ({build}) is not kept here (`branchc runs gc` dropped "
                    f"it, or it was served on another machine): serve that build again to finish the run, or write "
                    f"a migration"
                ) from None
            raise
        try:
            with kept.reading():
                return (*load_run(text, emit), kept)
        except RunStateError as again:
            raise RunStateError(f"{refused}; nor can the build that saved it ({build}), kept here: {again}") from None


def reading_kept(tools: Mapping[str, Tool]) -> Mapping[str, Tool]:
    """The tools of the kept build a round reads its run in (see `KeptBuild.reading`), else `tools`."""
    prefix = reading_prefix()
    kept = _KEPT.get(prefix[5 : 5 + 16]) if prefix else None
    return kept.tools if kept is not None else tools


def saved_build_of(module: str) -> str | None:
    """The id of the kept build a module was imported from (None: not from a kept build)."""
    if module.startswith("_bcb_") and saved_module(module) != module:
        return module[5 : 5 + 16]
    return None
