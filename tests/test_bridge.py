"""`branchc serve` with the real `mcp` client: every example end to end, in both protocol eras,
over stdio and streamable HTTP; bad input of every kind gets a clear tool error."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import mcp.types as types
import pytest
from _bridge_support import EXAMPLES, KEY, TOOLS, Scripted, fake_llm, http_server, native_run, stdio, within
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc.bridge.loading import ServeLoadError, load_served_tools
from branchc.bridge.server import create_server

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

# tictactoe plays a whole game: more rounds than the client's default of 10 (2026-07-28 era)
ROUNDS = 50


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A cache of compiled tools and a flights database of this test's own."""
    return {"BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_FLIGHTS_DB": str(tmp_path / "flights.sqlite")}


def structured(result: types.CallToolResult) -> object:
    assert not result.is_error, result.content[0].text
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


def same_run(a: object, b: object) -> bool:
    """Equal up to the call id in elicitation exchange ids (`elicit_{call_id}_{seq}`)."""

    def plain(value: object) -> str:
        return re.sub(r"elicit_[^_\"]+_", "elicit_<call>_", json.dumps(value, sort_keys=True))

    return plain(a) == plain(b)


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, result
    return result.content[0].text


# -- every example, end to end ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_each_example_over_stdio_matches_the_native_run(name, mode, env):
    expected, prompts, elicits = await native_run(name, {**env, "BRANCHC_FLIGHTS_DB": env["BRANCHC_FLIGHTS_DB"] + "0"})
    client = Scripted(prompts, elicits)
    async with Client(stdio(TOOLS, env), mode=mode, input_required_max_rounds=ROUNDS, **client.callbacks()) as session:
        result = await within(60, session.call_tool(name, EXAMPLES[name]))
    assert same_run(structured(result), expected)
    assert len(client.sampled) == len(prompts)
    assert len(client.elicited) == len(elicits)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_each_example_over_http(mode, env):
    with http_server(TOOLS, env, "--state-key", KEY) as url:
        for name in sorted(EXAMPLES):
            expected, prompts, elicits = await native_run(
                name, {"BRANCHC_FLIGHTS_DB": env["BRANCHC_FLIGHTS_DB"] + name}
            )
            client = Scripted(prompts, elicits)
            async with Client(url, mode=mode, input_required_max_rounds=ROUNDS, **client.callbacks()) as session:
                result = await within(60, session.call_tool(name, EXAMPLES[name]))
            assert same_run(structured(result), expected), name


# -- the handshake era's details -----------------------------------------------------------------------


@pytest.fixture
def served(tmp_path, env, monkeypatch):
    """Tools from source written into the test's folder, served in process."""

    def serve(source: str, name: str = "tool_under_test") -> object:
        monkeypatch.setenv("BRANCHC_CACHE", env["BRANCHC_CACHE"])
        folder = tmp_path / f"src_{name}"
        folder.mkdir()
        (folder / f"{name}_{id(source)}.py").write_text(source)
        return create_server(load_served_tools(folder), state_key=KEY)

    return serve


ECHO = """
from pydantic import BaseModel, Field
from branchc import Context, tool

class Params(BaseModel):
    word: str = Field(min_length=2)
    times: int = Field(ge=1, le=3)

class Name(BaseModel):
    name: str

echo = tool("echo", description="echo a word", params=Params, requires={"sampling", "elicitation"})

@echo.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", "starting")
    yield ctx.notify("half way", progress=1, total=2)
    reply = yield ctx.sample(prompt=handoff["word"] * handoff["times"])
    who = yield ctx.elicit("name", message="Who?", schema=Name)
    if handoff["word"] == "boom":
        raise ValueError("the word was boom")
    return {"reply": reply.text, "name": who.content.name}
"""


async def test_logs_and_progress_reach_the_client(served):
    client = Scripted({"hihi": "hello"}, [{"action": "accept", "content": {"name": "Ada"}}])
    async with Client(served(ECHO), mode="legacy", **client.callbacks()) as session:
        result = await session.call_tool("echo", {"word": "hi", "times": 2}, progress_callback=client.on_progress)
    assert structured(result) == {"reply": "hello", "name": "Ada"}
    assert client.logs == ["starting"]
    assert client.progress == [(1, 2, "half way")]
    assert client.elicited[0].requested_schema == {
        "type": "object",
        "properties": {"name": {"type": "string", "title": "Name"}},
        "required": ["name"],
    }


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_bad_arguments_list_each_field(served, mode):
    async with Client(served(ECHO), mode=mode, **Scripted({}, []).callbacks()) as session:
        text = error_text(await session.call_tool("echo", {"word": "x", "times": 9}))
    assert "word: String should have at least 2 characters" in text
    assert "times: Input should be less than or equal to 3" in text


async def test_an_unknown_tool_is_named(served):
    async with Client(served(ECHO), mode="legacy") as session:
        text = error_text(await session.call_tool("nope", {}))
    assert "unknown tool 'nope'" in text and "echo" in text


async def test_a_missing_capability_is_named_not_a_hang(served):
    client = Scripted({"hihi": "hello"}, [])
    async with Client(served(ECHO), mode="legacy", **client.callbacks(elicitation=False)) as session:
        text = error_text(await within(10, session.call_tool("echo", {"word": "hi", "times": 2})))
    assert "requires elicitation, sampling" in text or "requires elicitation" in text
    assert client.sampled == []


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_failing_tool_is_a_tool_error_with_its_line_and_the_server_keeps_serving(served, mode):
    answers = [{"action": "accept", "content": {"name": "Ada"}}] * 2
    client = Scripted({"boomboom": "bang", "hihi": "hello"}, answers)
    async with Client(served(ECHO), mode=mode, **client.callbacks()) as session:
        text = error_text(await session.call_tool("echo", {"word": "boom", "times": 2}))
        again = await session.call_tool("echo", {"word": "hi", "times": 2})
    assert text.startswith("echo: client() failed at ")
    assert ".py:21: ValueError: the word was boom" in text
    assert structured(again) == {"reply": "hello", "name": "Ada"}


NESTED = """
from pydantic import BaseModel
from branchc import Context, tool

class Address(BaseModel):
    street: str

class Form(BaseModel):
    name: str
    address: Address

ask = tool("ask", requires={"elicitation"})

@ask.client
def client(handoff: dict, ctx: Context):
    answer = yield ctx.elicit("form", message="Where?", schema=Form)
    return answer.action
"""


def test_a_form_mcp_cannot_express_is_refused_when_the_tool_is_loaded(served):
    with pytest.raises(ServeLoadError) as info:
        served(NESTED, "nested")
    message = str(info.value)
    assert ".py:16: this elicitation cannot be an MCP form" in message
    assert "Form.address: a field of JSON type 'object'" in message


def test_serving_a_missing_path_says_what_to_give(tmp_path):
    with pytest.raises(ServeLoadError, match="no such file or folder"):
        load_served_tools(Path(tmp_path / "nowhere"))


# -- server-side sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_provider_sampling_answers_samples_for_a_client_that_cannot(mode, env, tmp_path):
    log = tmp_path / "llm.jsonl"
    elicits = [{"action": "accept", "content": {"card_number": 2}}]
    client = Scripted({}, elicits)
    with fake_llm(log) as url:
        args = ["--sampling", "auto", "--provider-url", url, "--provider-model", "tiny"]
        async with Client(stdio(TOOLS, env, *args), mode=mode, **client.callbacks(sampling=False)) as session:
            result = await within(60, session.call_tool("pick_card", EXAMPLES["pick_card"]))
    value = structured(result)
    assert value["success"] is True and value["picked"] == "10♠"
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert [body["model"] for body in sent] == ["tiny"]
    assert sent[0]["messages"][-1]["content"].startswith("Analyze these cards: 8♥, 10♠")
    assert client.sampled == []  # the client was never asked to sample


async def test_a_failing_provider_is_an_error_at_the_sample(env, tmp_path):
    source = ECHO.replace('prompt=handoff["word"] * handoff["times"]', 'prompt="please fail"')
    folder = tmp_path / "failing"
    folder.mkdir()
    (folder / "echo_fails.py").write_text(source)
    with fake_llm(tmp_path / "llm.jsonl") as url:
        args = ["--sampling", "provider", "--provider-url", url, "--provider-model", "tiny"]
        async with Client(stdio(folder, env, *args), mode="legacy", **Scripted({}, []).callbacks()) as session:
            text = error_text(await within(60, session.call_tool("echo", {"word": "hi", "times": 1})))
    assert "ProviderError: the model endpoint" in text and "answered 500" in text
