"""A build's manifest (branchc.json) for `branchc compat`: from a build folder, from sources (compiled as
`serve` compiles them), or from sources as they were at a git revision (compiled into a folder of its own)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from .build import MANIFEST, BuildError, build, build_folder

__all__ = ["manifest_at", "manifest_of"]


def manifest_of(path: str | Path) -> dict[str, Any]:
    """The manifest of the build `path` is, or of its sources' build (compiled when they changed)."""
    folder = build_folder(path, warn=None)
    return _with_points(json.loads((folder / MANIFEST).read_text(encoding="utf-8")), folder)


def _with_points(manifest: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`manifest`, refused (BuildError) when a build before suspension points made it: it has nothing to compare."""
    for entry in (manifest.get("modules") or {}).values():
        for function in entry.get("functions", ()):
            if any("point" not in suspension for suspension in function.get("suspensions", ())):
                raise BuildError(
                    f"{folder}: built by an older branchc (compiler {manifest.get('compiler')}), whose manifest names "
                    f"no suspension points; compile its sources again with this branchc (`branchc compile`)"
                )
    return manifest


def manifest_at(path: str | Path, revision: str) -> dict[str, Any]:
    """The manifest of the sources `path` as git's `revision` has them (BuildError when git cannot say)."""
    path = Path(path).resolve()
    where = path if path.is_dir() else path.parent
    root = Path(_git(where, "rev-parse", "--show-toplevel").decode().strip())
    inside = path.relative_to(root)
    archive = _git(root, "archive", "--format=tar", revision, "--", str(inside) if str(inside) != "." else ".")
    with tempfile.TemporaryDirectory(prefix="branchc-compat-") as name:
        folder = Path(name)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder / "src", filter="data")
        result = build([folder / "src" / inside], folder / "build")
        if result.errors:
            shown = "\n".join(str(d) for d in result.errors[:10])
            raise BuildError(f"{inside} at {revision} does not compile:\n{shown}")
        return _with_points(json.loads((folder / "build" / MANIFEST).read_text(encoding="utf-8")), folder / "build")


def _git(folder: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, check=False)
    except OSError as error:
        raise BuildError(f"--against needs git, which cannot run here: {error}") from None
    if done.returncode != 0:
        problem = done.stderr.decode(errors="replace").strip().splitlines()
        raise BuildError(f"git {args[0]} in {folder}: {problem[-1] if problem else 'failed'}")
    return done.stdout
