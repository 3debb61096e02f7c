"""Generative invocation (issue 13): a `result_handler` script on any tool call (bridge/handlers/wrap.py).

Real parts: a plain `mcp` SDK server (MCPServer) adopting it in a few lines, driven by the real client in both
protocol eras; `branchc serve --result-handlers` over stdio with the git_diff example on a real git repository
made here; the Monty engine (its own tests, test_handlers_monty.py, attack it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _handler_support import SEED_HANDLER
from mcp import Client, StdioServerParameters
from mcp.server import MCPServer
from pydantic import BaseModel

from branchc.bridge.handlers.chaining import render_wrappers
from branchc.bridge.handlers.monty import MontyEngine
from branchc.bridge.handlers.wrap import add_result_handlers

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A small repository whose last commit changes 3 files: 6 lines added, 2 removed."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\ntwo\nthree\n")
    (repo / "b.txt").write_text("alpha\nbeta\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "a.txt").write_text("one\n2\nthree\nfour\n")  # 1 line changed (+1 -1), 1 added
    (repo / "b.txt").write_text("alpha\n")  # 1 removed
    (repo / "c.txt").write_text("x\ny\nz\nw\n")  # 4 added
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "second")
    return repo


EXPECTED = {"files_changed": 3, "insertions": 6, "deletions": 2}


class Lines(BaseModel):
    lines: int


def plain_server(repo: Path) -> MCPServer:
    """A plain SDK server with two tools, as a user already has it."""
    mcp = MCPServer("plain")

    @mcp.tool(structured_output=False)  # text: what a handler sees as tool_output
    def diff(base: str = "HEAD~1", head: str = "HEAD") -> str:
        """The diff between two revisions."""
        return git(repo, "diff", "--no-color", base, head, "--")

    @mcp.tool()
    def count_lines(text: str) -> Lines:
        """How many lines a text has."""
        return Lines(lines=len(text.splitlines()))

    return mcp


@pytest.fixture
async def engine():
    engine = MontyEngine()
    try:
        yield engine
    finally:
        await engine.aclose()


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_plain_sdk_server_adopts_result_handlers_in_a_few_lines(repo, engine, mode):
    server = plain_server(repo)
    add_result_handlers(server, engine)
    async with Client(server, mode=mode) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert listed.pop("result_handler_tools").input_schema["properties"] == {}  # the wrappers' one place
        for tool in listed.values():
            parameter = tool.input_schema["properties"]["result_handler"]
            assert parameter["properties"]["language"] == {"const": "python"}
            assert "result_handler" not in tool.input_schema.get("required", [])
        raw = await client.call_tool("diff", {})
        handled = await client.call_tool("diff", {"result_handler": {"language": "python", "script": SEED_HANDLER}})
    assert not raw.is_error and text_of(raw).startswith("diff --git a/a.txt")
    assert not handled.is_error, text_of(handled)
    assert json.loads(handled.content[0].text) == EXPECTED
    raw_bytes = handled.structured_content["raw_output_bytes"]
    assert handled.structured_content["result"] == EXPECTED and raw_bytes > len(handled.content[0].text)
    assert f"from {raw_bytes} bytes of raw tool output" in handled.content[1].text


async def test_a_handler_sees_the_arguments_and_a_script_as_one_string(repo, engine):
    server = plain_server(repo)
    add_result_handlers(server, engine)
    script = "[arguments['base'], len(tool_output.splitlines()) > 5]"
    async with Client(server, mode="2026-07-28") as client:
        result = await client.call_tool(
            "diff", {"base": "HEAD~1", "result_handler": {"language": "python", "script": script}}
        )
    assert json.loads(result.content[0].text) == ["HEAD~1", True]


async def test_handler_failures_are_tool_errors_and_the_server_goes_on(repo, engine):
    server = plain_server(repo)
    add_result_handlers(server, engine)
    async with Client(server, mode="2026-07-28") as client:
        bad = await client.call_tool("diff", {"result_handler": {"language": "python", "script": "x = (1,\ny = 2"}})
        assert bad.is_error and "line" in text_of(bad), text_of(bad)
        wrong = await client.call_tool("diff", {"result_handler": {"language": "ruby", "script": "1"}})
        assert wrong.is_error and "result_handler" in text_of(wrong) and "language" in text_of(wrong)
        not_json = await client.call_tool("diff", {"result_handler": {"language": "python", "script": "{1, 2}"}})
        assert not_json.is_error and "JSON" in text_of(not_json), text_of(not_json)
        handler = {"language": "python", "script": "tool_output['lines'] * 10"}  # the structured result
        fine = await client.call_tool("count_lines", {"text": "a\nb", "result_handler": handler})
    assert not fine.is_error and json.loads(fine.content[0].text) == 20


async def test_a_handler_calls_other_tools_through_typed_wrappers(repo, engine):
    server = plain_server(repo)
    add_result_handlers(server, engine)
    script = [
        "n = tools.count_lines(text=tool_output)['lines']",
        "{'lines': n, 'again': tools.count_lines(text='a\\nb\\nc')['lines']}",
    ]
    async with Client(server, mode="2026-07-28") as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        described = listed["diff"].input_schema["properties"]["result_handler"]["description"]
        guide = listed["result_handler_tools"].description
        fetched = await client.call_tool("result_handler_tools", {})
        result = await client.call_tool("diff", {"result_handler": {"language": "python", "script": script}})
        unknown = await client.call_tool(
            "diff", {"result_handler": {"language": "python", "script": "tools.nope(x=1)"}}
        )
        badargs = await client.call_tool(
            "diff", {"result_handler": {"language": "python", "script": "tools.count_lines(text=5)"}}
        )
        nested = await client.call_tool(
            "diff",
            {"result_handler": {"language": "python", "script": "tools.count_lines(text='a', result_handler={})"}},
        )
    assert "def count_lines(*, text: str) -> Any:" in guide  # the typed wrapper, shown to the model once
    assert "def count_lines" not in described and "result_handler_tools" in described  # named, not repeated
    assert "def count_lines(*, text: str) -> Any:" in fetched.content[0].text
    lines = len(git(repo, "diff", "--no-color", "HEAD~1", "HEAD", "--").splitlines())
    assert json.loads(result.content[0].text) == {"lines": lines, "again": 3}
    assert unknown.is_error and "no tool 'nope'" in text_of(unknown), text_of(unknown)
    assert badargs.is_error and "do not fit the tool's schema" in text_of(badargs), text_of(badargs)
    assert nested.is_error and "cannot have a result_handler" in text_of(nested), text_of(nested)


async def test_the_calls_a_handler_makes_are_bounded(repo, engine):
    from branchc.bridge.handlers.engine import Limits

    server = plain_server(repo)
    add_result_handlers(server, engine, limits=Limits(tool_calls=3))
    script = ["total = 0", "for i in range(10):", "    total += tools.count_lines(text='a')['lines']", "total"]
    async with Client(server, mode="2026-07-28") as client:
        result = await client.call_tool("diff", {"result_handler": {"language": "python", "script": script}})
    assert result.is_error and "more than 3 tools" in text_of(result), text_of(result)


class Gate:
    """A ResultEngine whose runs wait until the test opens the gate: handlers that take a while."""

    name = "gate"

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.open = anyio.Event()

    async def run(self, script: str, tool_output: Any, arguments: dict[str, Any], **_: Any) -> Any:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.open.wait()
            return tool_output
        finally:
            self.running -= 1

    async def aclose(self) -> None:
        pass


async def capped_calls(wait_seconds: float) -> tuple[dict[str, types.CallToolResult], list[str], Gate]:
    """Three calls with a handler on a server that runs two at once: the third starts while two wait in the
    engine, and the gate opens once it has waited (refused) or is waiting (within `wait_seconds`)."""
    server = MCPServer("capped")
    ran: list[str] = []

    @server.tool(structured_output=False)
    def echo(text: str) -> str:
        ran.append(text)
        return text

    gate = Gate()
    handlers = add_result_handlers(server, gate, max_running=2, wait_seconds=wait_seconds, chaining=False)
    assert (handlers.max_running, handlers.wait_seconds) == (2, wait_seconds)
    handler = {"language": "python", "script": "tool_output"}
    results: dict[str, types.CallToolResult] = {}
    with anyio.fail_after(60):  # without the cap, "c" runs and waits at the gate: a failure, not a hang
        await _capped_calls(server, gate, handler, results, ran, wait_seconds)
    return results, ran, gate


async def _capped_calls(
    server: MCPServer,
    gate: Gate,
    handler: dict[str, Any],
    results: dict[str, types.CallToolResult],
    ran: list[str],
    wait: float,
) -> None:
    async with Client(server, mode="2026-07-28") as client:

        async def call(text: str) -> None:
            results[text] = await client.call_tool("echo", {"text": text, "result_handler": handler})

        async with anyio.create_task_group() as group:
            for text in ("a", "b"):
                group.start_soon(call, text)
            while gate.running < 2:
                await anyio.sleep(0.01)
            if wait < 1:
                await call("c")  # every place taken: it waits, then is refused
            else:
                group.start_soon(call, "c")
                await anyio.sleep(0.2)  # it waits for a place
                assert "c" not in ran and gate.running == 2
            gate.open.set()


async def test_handlers_at_once_are_capped_and_a_call_past_the_cap_is_refused():
    results, ran, gate = await capped_calls(wait_seconds=0.3)
    refused = results["c"]
    assert refused.is_error
    assert "runs at most 2 calls with a result handler at once" in text_of(refused)
    assert "the tool did not run" in text_of(refused)
    assert sorted(ran) == ["a", "b"] and gate.most == 2
    assert [json.loads(results[text].content[0].text) for text in "ab"] == ["a", "b"]


async def test_a_call_past_the_cap_waits_for_a_place():
    results, ran, gate = await capped_calls(wait_seconds=30)
    assert not any(result.is_error for result in results.values())
    assert sorted(ran) == ["a", "b", "c"] and gate.most == 2


def test_typed_wrappers_are_valid_python_from_the_schemas():
    source = render_wrappers(
        {
            "git.log": {
                "type": "object",
                "properties": {
                    "max_count": {"type": "integer", "description": "How many commits"},
                    "path": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                },
            },
            "echo": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        }
    )
    calls: list[Any] = []
    unset = object()
    scope = {
        "Any": Any,
        "_UNSET": unset,
        "_given": lambda args: {k: v for k, v in args.items() if v is not unset},
        "_call": lambda name, args: calls.append((name, args)) or len(calls),
    }
    exec(compile(source, "<wrappers>", "exec"), scope)  # the generated source, run as an engine would run it
    tools = scope["tools"]
    assert tools.git_log(max_count=5) == 1 and tools.echo(text="hi") == 2
    assert calls == [("git.log", {"max_count": 5}), ("echo", {"text": "hi"})]
    assert "max_count: int = _UNSET, path: str | None = _UNSET" in source
    assert "max_count: How many commits" in source


def test_serve_result_handlers_runs_the_git_diff_example(repo, tmp_path):
    """`branchc serve examples/tools --result-handlers` over stdio, the real client, the example tool."""
    import anyio

    async def main() -> tuple[Any, Any]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "branchc", "serve", str(ROOT / "examples" / "tools"), "--result-handlers"],
            env={**os.environ, "BRANCHC_CACHE": str(tmp_path / "cache")},
        )
        async with Client(params, mode="legacy") as client:
            raw = await client.call_tool("git_diff", {"repo": str(repo)})
            handled = await client.call_tool(
                "git_diff", {"repo": str(repo), "result_handler": {"language": "python", "script": SEED_HANDLER}}
            )
        return raw, handled

    raw, handled = anyio.run(main)
    assert not raw.is_error and text_of(raw).startswith("diff --git")
    assert not handled.is_error, text_of(handled)
    assert handled.structured_content["result"] == EXPECTED


def test_serve_refuses_the_cpython_engine_where_bubblewrap_cannot_run(tmp_path):
    """No bwrap on the PATH: `serve` says why at start and refuses that engine; --unsafe-handlers serves anyway,
    saying loudly that handlers run in no sandbox."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip())
    env = {**os.environ, "PATH": str(bin_dir), "BRANCHC_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "branchc", "serve", str(ROOT / "examples" / "tools"), "--result-handlers"]
    refused = subprocess.run(
        [*command, "--handler-engine", "cpython"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode == 1
    assert "bubblewrap, which cannot run here" in refused.stderr and "--unsafe-handlers" in refused.stderr
    unsafe = subprocess.run(
        [*command, "--handler-engine", "cpython", "--unsafe-handlers"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,  # stdio ends at once: the server starts, then stops
    )
    assert "IN NO SANDBOX" in unsafe.stderr, unsafe.stderr


def _many_tools(count: int) -> MCPServer:
    mcp = MCPServer("many")
    for index in range(count):

        def tool(text: str, times: int = 1) -> str:
            return text * times

        tool.__name__ = f"tool_{index}"
        tool.__doc__ = f"Tool number {index}, which repeats a text."
        mcp.tool()(tool)
    return mcp


async def test_the_wrappers_are_described_once_so_tools_list_grows_linearly(engine):
    sizes = []
    for count in (1, 5, 10):
        server = _many_tools(count)
        add_result_handlers(server, engine)
        async with Client(server, mode="2026-07-28") as client:
            listed = await client.list_tools()
        guide = next(tool for tool in listed.tools if tool.name == "result_handler_tools")
        assert all(f"def tool_{index}(" in guide.description for index in range(count))
        assert not any("def tool_" in json.dumps(t.input_schema) for t in listed.tools if t is not guide)
        sizes.append(len(listed.model_dump_json(by_alias=True, exclude_none=True)))
    per_tool = [(sizes[1] - sizes[0]) / 4, (sizes[2] - sizes[1]) / 5]  # bytes each added tool costs
    assert per_tool[1] < per_tool[0] * 1.2  # each tool adds about the same: no wrapper is repeated per tool


async def test_without_chaining_no_wrappers_are_listed_and_a_handler_calls_nothing(repo, engine):
    server = plain_server(repo)
    add_result_handlers(server, engine, chaining=False)
    async with Client(server, mode="2026-07-28") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        handled = await client.call_tool(
            "diff", {"result_handler": {"language": "python", "script": "tools.count_lines(text='a')"}}
        )
    assert "result_handler_tools" not in names
    assert handled.is_error and "tools" in text_of(handled)


UPSTREAM = ROOT / "tests" / "servers" / "upstream_tools.py"


@pytest.mark.parametrize("kind", ["monty", "cpython"])
async def test_a_handler_calls_upstream_tools_through_their_wrappers(repo, engine, kind, tmp_path, monkeypatch):
    from branchc.bridge.upstream import Upstreams

    if kind == "cpython":
        from branchc.bridge.handlers.sandbox import SandboxEngine, bubblewrap_available

        why = bubblewrap_available()
        if why is not None:
            pytest.skip(f"the full-CPython engine's sandbox: {why} (Debian: apt-get install bubblewrap)")
        chosen: Any = SandboxEngine()
    else:
        chosen = engine
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("UPSTREAM_MARKS", str(tmp_path / "marks"))
    upstreams = Upstreams([f"up=stdio:{sys.executable} -m branchc serve {UPSTREAM}"])
    try:
        server = plain_server(repo)
        add_result_handlers(server, chosen, upstreams=upstreams)  # given: handlers may call them
        script = [
            "found = upstream.up.lookup(q='lisbon')",
            "[found['found'], tools.count_lines(text='a\\nb')['lines']]",
        ]
        async with Client(server, mode="2026-07-28") as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            result = await client.call_tool("diff", {"result_handler": {"language": "python", "script": script}})
            asking = await client.call_tool(
                "diff", {"result_handler": {"language": "python", "script": "upstream.up.confirm(q='x')"}}
            )
    finally:
        upstreams.close()
        if kind == "cpython":
            await chosen.aclose()
    guide = listed["result_handler_tools"].description
    assert "class upstream:" in guide and "def lookup(*, q: str) -> Any:" in guide and "Look a word up" in guide
    assert not result.is_error, text_of(result)
    assert json.loads(result.content[0].text) == ["LISBON", 2]
    assert asking.is_error and "asks for input, which a handler cannot give" in text_of(asking)
