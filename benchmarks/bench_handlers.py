"""Result handlers (issue 13): what a handler saves the caller, and what it costs the server, per engine.

The git_diff example (examples/tools/git_diff.py, served compiled by branchc in process, through the real
`mcp` client on an in-memory transport) diffs the last commit of a repository made here: about 50 KB of
diff. Each call is made three ways, interleaved round by round so a slow spell hits all alike: without a
handler; with the seed's handler (files changed, insertions, deletions) on the Monty engine; the same on the
full-CPython engine under bubblewrap (skipped, saying so, where bubblewrap cannot run). Every result is checked.

Reported: the bytes and tokens of the raw output against the handler's result (tokens: a 4-characters-per-
token estimate, the usual rule of thumb for English and code with OpenAI/Anthropic tokenizers), and the
latency each engine adds per call, p50 and p99, against the call without a handler in the same run.

    python benchmarks/bench_handlers.py [--calls 200] [--kb 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client

from branchc.bridge.handlers.monty import MontyEngine
from branchc.bridge.handlers.sandbox import SandboxEngine, bubblewrap_available
from branchc.bridge.handlers.wrap import add_result_handlers
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server

ROOT = Path(__file__).resolve().parent.parent
SEED_HANDLER = [
    "summary = {'files_changed': 0, 'insertions': 0, 'deletions': 0}",
    "for line in tool_output.split('\\n'):",
    "    if line.startswith('---') or line.startswith('+++'):",
    "        continue",
    "    if line.startswith('diff --git'):",
    "        summary['files_changed'] += 1",
    "    elif line.startswith('+'):",
    "        summary['insertions'] += 1",
    "    elif line.startswith('-'):",
    "        summary['deletions'] += 1",
    "summary",
]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def make_repo(folder: Path, kb: int) -> dict[str, int]:
    """A repository whose last commit's diff is about `kb` KB: edits spread over 20 files."""
    git(folder, "init", "-q", "-b", "main")
    files = 20
    lines = kb * 1024 // (files * 2 * 40)  # each changed line appears twice in a diff (- and +), ~40 bytes
    for n in range(files):
        text = "".join(f"value_{n}_{i} = {i}  # the first version\n" for i in range(lines))
        (folder / f"module_{n}.py").write_text(text)
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "first")
    for n in range(files):
        text = "".join(f"value_{n}_{i} = {i * 2}  # the second one\n" for i in range(lines))
        (folder / f"module_{n}.py").write_text(text)
    git(folder, "commit", "-q", "-am", "second")
    return {"files_changed": files, "insertions": files * lines, "deletions": files * lines}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(repo: Path, expected: dict[str, int], calls: int, warm: int) -> dict[str, Any]:
    tools = load_served_tools(ROOT / "examples" / "tools" / "git_diff.py")
    engines: dict[str, Any] = {"monty": MontyEngine()}
    problem = bubblewrap_available()
    if problem is None:
        engines["bubblewrap"] = SandboxEngine()
    servers = {"none": create_server(tools, state_key="k" * 40)}
    for name, engine in engines.items():
        servers[name] = create_server(tools, state_key="k" * 40)
        add_result_handlers(servers[name], engine)
    timings: dict[str, list[float]] = {name: [] for name in servers}
    sizes: dict[str, int] = {}
    try:
        clients = {}
        async with Client(servers["none"], mode="2026-07-28") as plain:
            clients["none"] = plain
            async with Client(servers["monty"], mode="2026-07-28") as monty:
                clients["monty"] = monty
                if "bubblewrap" in servers:
                    async with Client(servers["bubblewrap"], mode="2026-07-28") as bwrap:
                        clients["bubblewrap"] = bwrap
                        await rounds(clients, repo, expected, calls, warm, timings, sizes)
                else:
                    await rounds(clients, repo, expected, calls, warm, timings, sizes)
    finally:
        for engine in engines.values():
            await engine.aclose()
    return {"timings": timings, "sizes": sizes, "bubblewrap": problem}


async def rounds(clients, repo, expected, calls, warm, timings, sizes) -> None:
    handled = {"repo": str(repo), "result_handler": {"language": "python", "script": SEED_HANDLER}}
    for index in range(warm + calls):
        for name, client in clients.items():
            arguments = {"repo": str(repo)} if name == "none" else handled
            started = time.perf_counter()
            result = await client.call_tool("git_diff", arguments)
            took = time.perf_counter() - started
            check(name, result, expected)
            if index >= warm:
                timings[name].append(took)
            sizes[name] = len("".join(b.text for b in result.content[:1] if isinstance(b, types.TextContent)).encode())


def check(name: str, result: types.CallToolResult, expected: dict[str, int]) -> None:
    text = result.content[0].text
    assert not result.is_error, (name, text)
    if name == "none":
        assert text.startswith("diff --git"), text[:80]
    else:
        assert json.loads(text) == expected, (name, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--kb", type=int, default=50)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ.setdefault("BRANCHC_CACHE", str(Path(folder) / "cache"))
        repo = Path(folder) / "repo"
        repo.mkdir()
        expected = make_repo(repo, options.kb)
        found = anyio.run(measure, repo, expected, options.calls, options.warm)
    sizes, timings = found["sizes"], found["timings"]
    raw = sizes["none"]
    print(f"git_diff of the last commit, {options.calls} calls each (after {options.warm} warm-up), interleaved\n")
    print(f"{'output':<24}{'bytes':>10}{'tokens (~4 chars)':>20}")
    print(f"{'raw diff':<24}{raw:>10}{raw // 4:>20}")
    handled = sizes["monty"]
    print(f"{'handler result':<24}{handled:>10}{max(1, handled // 4):>20}   ({raw / handled:,.0f}x smaller)\n")
    base = timings["none"]
    print(f"{'engine':<14}{'p50 ms':>10}{'p99 ms':>10}{'p50 added':>12}{'p99 added':>12}")
    for name, values in timings.items():
        p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
        added = ""
        if name != "none":
            added = f"{p50 - percentile(base, 0.5) * 1000:>12.2f}{p99 - percentile(base, 0.99) * 1000:>12.2f}"
        print(f"{name:<14}{p50:>10.2f}{p99:>10.2f}{added}")
    if found["bubblewrap"] is not None:
        print(f"\nbubblewrap: skipped ({found['bubblewrap']})")
    print("\ntargets: p50 added <= 10 ms with Monty, <= 150 ms with bubblewrap")
    print(f"median of the call without a handler: {statistics.median(base) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
