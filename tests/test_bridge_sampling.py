"""The bridge alike in both MCP eras, with the real SDK client: sampling answers are judged by one
check (a tool use answers only a sample that offered tools), a missing capability names what would
let the tool run, a history rendered as text alternates user and assistant; and `serve` warns about
--state-key only where replicas matter (HTTP)."""

from __future__ import annotations

import itertools
import os
import socket
import stat
import subprocess
import sys
import time
import warnings

import mcp.types as types
import pytest
from _bridge_support import KEY, TOOLS, Scripted, free_port, native_run, stdio, within
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import EPHEMERAL_KEY_WARNING, create_server

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

MODES = ["legacy", "2026-07-28"]
SAMPLING_TOOLS = {"sampling_capabilities": types.SamplingCapability(tools=types.SamplingToolsCapability())}


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_FLIGHTS_DB": str(tmp_path / "flights.sqlite")}


@pytest.fixture
def served(tmp_path, env, monkeypatch):
    """A tool from source, served in process."""

    def serve(source: str, name: str) -> object:
        monkeypatch.setenv("BRANCHC_CACHE", env["BRANCHC_CACHE"])
        folder = tmp_path / f"src_{name}"
        folder.mkdir()
        (folder / f"{name}.py").write_text(source)
        return create_server(load_served_tools(folder), state_key=KEY)

    return serve


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, result
    return result.content[0].text


# -- a tool use answers only a sample that offered tools ---------------------------------------------

ASKS = """
from pydantic import BaseModel
from branchc import Context, tool

class Params(BaseModel):
    offer: bool = False

asks = tool("asks", params=Params, requires={"sampling"})

@asks.client
def client(handoff: dict, ctx: Context):
    tools = [{"name": "lookup"}] if handoff["offer"] else None
    reply = yield ctx.sample(prompt="hi", tools=tools)
    return {"text": reply.text, "calls": [call.function.name for call in reply.tool_calls]}
"""


async def answer_with_tool_use(ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResultWithTools:
    return types.CreateMessageResultWithTools(
        role="assistant",
        model="m",
        stop_reason="toolUse",
        content=[types.ToolUseContent(type="tool_use", id="c1", name="lookup", input={})],
    )


async def test_a_tool_use_answer_to_a_sample_without_tools_is_refused_alike_in_both_eras(served) -> None:
    server = served(ASKS, "asks_tools")
    texts = []
    for mode in MODES:
        async with Client(server, mode=mode, sampling_callback=answer_with_tool_use) as session:
            texts.append(error_text(await within(30, session.call_tool("asks", {}))))
    legacy, modern = texts
    assert legacy == modern
    assert "asks: client() failed at " in legacy
    assert (
        "ClientAnswerError: the client answered a sample that offered no tools with a tool call (lookup); "
        "a sample without tools= is answered with text"
    ) in legacy


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_use_answer_to_a_sample_with_tools_is_taken(served, mode) -> None:
    server = served(ASKS, "asks_offering")
    async with Client(server, mode=mode, sampling_callback=answer_with_tool_use, **SAMPLING_TOOLS) as session:
        result = await within(30, session.call_tool("asks", {"offer": True}))
    assert not result.is_error, result.content[0].text
    assert result.structured_content == {"text": "", "calls": ["lookup"]}


# -- a missing capability names what would let the tool run --------------------------------------------

NEEDS = """
from pydantic import BaseModel
from branchc import Context, tool

class Name(BaseModel):
    name: str

needs = tool("needs", requires={"sampling", "elicitation"})
needs_form = tool("needs_form", requires={"elicitation"})

@needs.client
def client(handoff: dict, ctx: Context):
    reply = yield ctx.sample(prompt="hi")
    return {"text": reply.text}

@needs_form.client
def form_client(handoff: dict, ctx: Context):
    who = yield ctx.elicit("name", message="Who?", schema=Name)
    return {"name": who.content.name}
"""


@pytest.mark.parametrize("mode", MODES)
async def test_a_missing_capability_suggests_guided_mode_and_server_side_sampling(served, mode) -> None:
    server = served(NEEDS, "needs_caps")
    async with Client(server, mode=mode) as session:  # no callbacks: the client offers neither
        both = error_text(await within(30, session.call_tool("needs", {})))
        form = error_text(await within(30, session.call_tool("needs_form", {})))
    assert both == (
        "needs requires elicitation, sampling, which the client does not offer; connect with a client that offers "
        "it, or turn on guided mode (`branchc serve --guided`, or `mount(..., guided=True)`): the calling model "
        "then answers what the client cannot, or answer samples on the server with `branchc serve --sampling "
        "provider` (or `--sampling auto`: the client when it can) and --provider-url, --provider-model "
        "(`mount(..., sampling=, provider=)`)"
    )
    assert form.startswith("needs_form requires elicitation, which the client does not offer; ")
    assert "branchc serve --guided" in form and "--sampling" not in form  # only sampling has a server-side answer


# -- a history rendered as text alternates user and assistant ---------------------------------------


class Moves(Scripted):
    """Answers tictactoe's samples with moves; keeps the messages it was sent."""

    async def sampling(self, ctx, params):
        self.sampled.append(params)
        text = {1: "4", 2: "0", 3: "6", 4: "3"}[len(self.sampled)]
        return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text=text))


@pytest.mark.parametrize("mode", MODES)
async def test_a_history_rendered_as_text_alternates_roles_and_keeps_every_message(env, mode) -> None:
    _, _, elicits = await native_run("tictactoe", {})
    client = Moves({}, elicits)
    async with Client(stdio(TOOLS, env), mode=mode, input_required_max_rounds=50, **client.callbacks()) as session:
        assert not (await within(60, session.call_tool("tictactoe", {}))).is_error
    assert len(client.sampled) >= 2
    for params in client.sampled:
        roles = [message.role for message in params.messages]
        assert roles[0] == "user"
        assert all(a != b for a, b in itertools.pairwise(roles)), roles
        assert all(block.type == "text" for m in params.messages for block in m.content_as_list)
    texts = [message.content_as_list[0].text for message in client.sampled[1].messages]
    # the exchange is still there, in the turns it belongs to: the call with the assistant, the result with the user
    call = next(text for text in texts if "[tool call pickMove#elicit_" in text)
    result = next(text for text in texts if "[tool result elicit_" in text)
    assert texts.index(call) % 2 == 1 and texts.index(result) % 2 == 0
    assert texts[0] == client.sampled[0].messages[0].content_as_list[0].text  # the first prompt, unchanged


# -- the --state-key warning ---------------------------------------------------------------------------


def _serve_stderr(env: dict[str, str], *args: str, http: bool) -> str:
    """What `branchc serve` says on stderr as it starts (HTTP: once it listens; stdio: until input ends)."""
    command = [sys.executable, "-m", "branchc", "serve", str(TOOLS / "pick_card.py"), *args]
    full_env = {**os.environ, **env}
    if not http:
        done = subprocess.run(command, input="", capture_output=True, text=True, env=full_env, timeout=60)
        return done.stderr
    port = free_port()
    process = subprocess.Popen(
        [*command, "--http", f"127.0.0.1:{port}"],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "did not listen"
                time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    output = process.stderr.read()
    process.stderr.close()
    return output


def test_serving_over_stdio_does_not_warn_about_the_state_key(env) -> None:
    assert "state key" not in _serve_stderr(env, http=False)


def test_serving_without_a_state_key_keeps_one_in_the_state_folder_and_does_not_warn(env, tmp_path) -> None:
    """serve makes the key once (mode 0600) and seals with it from then on, so no process-only key is used."""
    state = tmp_path / "state"
    env = {**env, "BRANCHC_STATE_DIR": str(state), "BRANCHC_STATE_KEY": ""}
    assert EPHEMERAL_KEY_WARNING not in _serve_stderr(env, http=True)
    key = (state / "state.key").read_bytes()
    assert stat.S_IMODE((state / "state.key").stat().st_mode) == 0o600 and len(key.strip()) >= 32
    assert "state key" not in _serve_stderr(env, http=True) and (state / "state.key").read_bytes() == key
    assert "state key" not in _serve_stderr(env, "--state-key", KEY, http=True)


def test_create_server_without_keys_warns_over_http_that_only_this_process_continues(env) -> None:
    server = create_server({}, state_key=None)
    assert server.state_keys is None  # what serve_http warns of (EPHEMERAL_KEY_WARNING)
    assert create_server({}, state_key=KEY).state_keys is not None
