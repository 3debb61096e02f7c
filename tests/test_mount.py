"""`branchc.bridge.mount` (mounting.py): branchc tools added to an existing SDK server
(MCPServer and the lowlevel Server), beside its own tools, prompts and resources, in both
protocol eras, with the real mcp client."""

from __future__ import annotations

import warnings

import mcp.types as types
import pytest
from _bridge_support import within
from mcp import Client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc import Context, tool
from branchc.bridge import mount
from branchc.bridge.loading import ServeLoadError

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

TOOLS = '''
from branchc import Context, tool


@tool(requires={"sampling"}, title="Haiku")
def haiku(ctx: Context, topic: str):
    """Write a haiku, then title it."""
    poem = yield ctx.sample(prompt=f"A haiku about {topic}")
    name = yield ctx.sample(prompt=f"A title for: {poem.text}")
    return {"title": name.text, "poem": poem.text}
'''


@pytest.fixture
def tools_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "mounted_tools"
    folder.mkdir()
    (folder / "mounted_haiku.py").write_text(TOOLS)
    return folder


async def sampling(ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = params.messages[-1].content_as_list[0].text
    return types.CreateMessageResult(
        role="assistant", model="scripted", content=types.TextContent(type="text", text=f"<{text}>")
    )


HAIKU = {"poem": "<A haiku about rain>", "title": "<A title for: <A haiku about rain>>"}


def mcpserver() -> MCPServer:
    mcp = MCPServer("my-server")

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @mcp.prompt()
    def review(code: str) -> str:
        return f"Review this code: {code}"

    @mcp.resource("config://app")
    def config() -> str:
        return "debug=false"

    return mcp


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_mounted_on_mcpserver_beside_its_own_tool_prompt_and_resource(tools_dir, mode):
    mcp = mcpserver()
    bridge = mount(mcp, tools_dir)
    assert set(bridge.tools) == {"haiku"}
    async with Client(mcp, mode=mode, sampling_callback=sampling) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed.keys() == {"add", "haiku"}
        assert listed["haiku"].title == "Haiku" and listed["add"].description == "Add two numbers."
        mounted = await within(30, client.call_tool("haiku", {"topic": "rain"}))
        own = await client.call_tool("add", {"a": 2, "b": 3})
        prompt = await client.get_prompt("review", {"code": "x = 1"})
        resource = await client.read_resource("config://app")
        bad = await client.call_tool("haiku", {})
    assert not mounted.is_error and mounted.structured_content == HAIKU
    assert not own.is_error and own.structured_content == {"result": 5}
    assert prompt.messages[0].content.text == "Review this code: x = 1"
    assert resource.contents[0].text == "debug=false"
    assert bad.is_error and "topic" in bad.content[0].text


def lowlevel() -> Server:
    async def list_tools(ctx, params):
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return types.ListToolsResult(tools=[types.Tool(name="shout", input_schema=schema)])

    async def call_tool(ctx, params: types.CallToolRequestParams):
        text = params.arguments["text"].upper()
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def list_prompts(ctx, params):
        return types.ListPromptsResult(prompts=[types.Prompt(name="greet")])

    async def get_prompt(ctx, params):
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text="Hello!"))
        return types.GetPromptResult(messages=[message])

    return Server(
        "low", on_list_tools=list_tools, on_call_tool=call_tool, on_list_prompts=list_prompts, on_get_prompt=get_prompt
    )


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_mounted_on_a_lowlevel_server_beside_its_own_handlers(tools_dir, mode):
    server = lowlevel()
    mount(server, tools_dir, state_key="s" * 40)
    async with Client(server, mode=mode, sampling_callback=sampling) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"haiku", "shout"}
        mounted = await within(30, client.call_tool("haiku", {"topic": "rain"}))
        own = await client.call_tool("shout", {"text": "hi"})
        prompt = await client.get_prompt("greet")
    assert not mounted.is_error and mounted.structured_content == HAIKU
    assert own.content[0].text == "HI"
    assert prompt.messages[0].content.text == "Hello!"


async def test_a_server_without_tools_gets_them(tools_dir):
    server = Server("bare")
    mount(server, tools_dir, state_key="s" * 40)
    async with Client(server, mode="2026-07-28", sampling_callback=sampling) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["haiku"]
        assert (await within(30, client.call_tool("haiku", {"topic": "rain"}))).structured_content == HAIKU
        unknown = await client.call_tool("nope", {})
    assert unknown.is_error and "unknown tool 'nope'" in unknown.content[0].text


def test_mount_refuses_what_it_cannot_serve(tools_dir):
    @tool
    def native(ctx: Context):
        yield ctx.log("info", "not compiled")

    with pytest.raises(ServeLoadError, match="'native' is not compiled"):
        mount(Server("s"), [native])
    with pytest.raises(TypeError, match=r"an MCPServer or a mcp\.server\.Server"):
        mount(object(), tools_dir)
    taken = MCPServer("taken")

    @taken.tool()
    def haiku(topic: str) -> str:
        return topic

    with pytest.raises(ValueError, match="haiku: the server has a tool of that name already"):
        mount(taken, tools_dir)
    sealed = mcpserver()
    handlers = {method: sealed._lowlevel_server.get_request_handler(method) for method in ("tools/list", "tools/call")}
    with pytest.raises(ValueError, match="seals request_state already"):
        mount(sealed, tools_dir, state_key="k" * 40)
    # a refused mount leaves the server as it was
    assert {method: sealed._lowlevel_server.get_request_handler(method) for method in handlers} == handlers

    resumes = MCPServer("resumes")

    @resumes.tool()
    def branchc_resume(state_id: str) -> str:
        return state_id

    with pytest.raises(ValueError, match="branchc_resume: the server has a tool of that name already"):
        mount(resumes, tools_dir, guided=True)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_mounted_workflows_bring_their_guided_tools_and_prompts_beside_the_servers_own(tools_dir, mode):
    workflow = "workflow:\n  name: greet\n  steps:\n    - id: hello\n      instruction: Say hello\n      save: reply\n"
    (tools_dir / "greet.yaml").write_text(workflow + "      complete: '{{ reply }}!'\n")
    mcp = mcpserver()
    mount(mcp, tools_dir)
    async with Client(mcp, mode=mode) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert {"add", "haiku", "greet", "start_greet", "workflow_submit", "workflow_continue"} <= listed
        assert {p.name for p in (await client.list_prompts()).prompts} == {"greet", "review"}
        assert "start_greet" in (await client.get_prompt("greet")).messages[0].content.text
        own = await client.get_prompt("review", {"code": "x = 1"})  # the server's own prompt, still its own
        assert own.messages[0].content.text == "Review this code: x = 1"
        step = (await within(30, client.call_tool("start_greet", {}))).structured_content
        assert step["instruction"] == "Say hello" and step["next_action"]["tool"] == "workflow_submit"
        done = await client.call_tool("workflow_submit", {"state_id": step["state_id"], "answer": "hi"})
        assert done.structured_content["result"] == "hi!"


async def test_mounted_guided_runs_keep_the_settings_caps_as_create_server_does(tools_dir):
    """Guided runs of a mounted server wait under the guided settings (here one run at most), in memory."""
    server = lowlevel()
    mount(server, tools_dir, state_key="s" * 40, guided=True, guided_max_runs=1)
    async with Client(server, mode="2026-07-28") as client:  # it cannot sample: the calling model answers
        first = await within(30, client.call_tool("haiku", {"topic": "rain"}))
        second = await within(30, client.call_tool("haiku", {"topic": "snow"}))
    assert not first.is_error and first.structured_content["status"] == "waiting_for_answers"
    assert second.is_error and "--guided-max-runs 1" in second.content[0].text, second
