"""`branchc serve` with the real `mcp` client: every example end to end, in both protocol eras,
over stdio and streamable HTTP; bad input of every kind gets a clear tool error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from _bridge_support import EXAMPLES, KEY, TOOLS, Scripted, fake_llm, http_server, native_run, stdio, within
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.exceptions import MCPError as McpError

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


# -- the 2026-07-28 era's rounds, driven by hand --------------------------------------------------------


async def answer_all(client: Scripted, asked: types.InputRequiredResult) -> dict:
    """Answer every input request of one round the way the SDK client's callbacks would."""
    out = {}
    for key, request in asked.input_requests.items():
        if isinstance(request, types.CreateMessageRequest):
            out[key] = await client.sampling(None, request.params)
        else:
            out[key] = await client.elicitation(None, request.params)
    return out


async def rounds(sessions: list, name: str, arguments: dict, client: Scripted) -> tuple[object, int]:
    """Play a call to the end, round k on sessions[k % len(sessions)]; (the result, the rounds)."""
    state, responses, count = None, None, 0
    while True:
        session = sessions[count % len(sessions)].session
        result = await session.call_tool(
            name, arguments, input_responses=responses, request_state=state, allow_input_required=True
        )
        count += 1
        if not isinstance(result, types.InputRequiredResult):
            return result, count
        state, responses = result.request_state, await answer_all(client, result)


async def test_two_http_servers_sharing_a_key_serve_alternate_rounds(env):
    expected, prompts, elicits = await native_run("tictactoe", {})
    client = Scripted(prompts, elicits)
    with http_server(TOOLS, env, "--state-key", KEY) as one, http_server(TOOLS, env, "--state-key", KEY) as two:
        async with Client(one, **MODERN) as a, Client(two, **MODERN) as b:
            result, count = await within(60, rounds([a, b], "tictactoe", {}, client))
    assert same_run(structured(result), expected)
    assert count == 1 + len(prompts) + len(elicits)  # one round per question: the game alternates turns


async def test_a_server_with_another_key_refuses_the_state_and_runs_nothing(env):
    client = Scripted(*(await native_run("pick_card", {}))[1:])
    with http_server(TOOLS, env, "--state-key", KEY) as one, http_server(TOOLS, env, "--state-key", "o" * 40) as two:
        async with Client(one, **MODERN) as a, Client(two, **MODERN) as b:
            first = await a.session.call_tool("pick_card", EXAMPLES["pick_card"], allow_input_required=True)
            responses = await answer_all(client, first)
            with pytest.raises(McpError, match="Invalid or expired requestState"):
                await b.session.call_tool(
                    "pick_card",
                    EXAMPLES["pick_card"],
                    input_responses=responses,
                    request_state=first.request_state,
                    allow_input_required=True,
                )


MODERN = {"mode": "2026-07-28", **Scripted({}, []).callbacks()}  # callbacks: they declare the capabilities


@pytest.fixture
def pick_card_server(env, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", env["BRANCHC_CACHE"])
    monkeypatch.setenv("BRANCHC_FLIGHTS_DB", env["BRANCHC_FLIGHTS_DB"])

    def make(**options):
        return create_server(load_served_tools(TOOLS / "pick_card.py"), state_key=KEY, **options)

    return make


async def first_round(session) -> types.InputRequiredResult:
    arguments = {"count": 3, "analyze": False, "seed": 1}
    asked = await session.call_tool("pick_card", arguments, allow_input_required=True)
    assert isinstance(asked, types.InputRequiredResult)
    return asked


async def again(session, asked, responses, state=None) -> object:
    arguments = {"count": 3, "analyze": False, "seed": 1}
    return await session.call_tool(
        "pick_card",
        arguments,
        input_responses=responses,
        request_state=asked.request_state if state is None else state,
        allow_input_required=True,
    )


async def test_a_tampered_state_is_refused(pick_card_server):
    async with Client(pick_card_server(), **MODERN) as client:
        asked = await first_round(client.session)
        state = asked.request_state
        tampered = state[:-5] + ("A" if state[-5] != "A" else "B") + state[-4:]
        accept = {"elicit-1": types.ElicitResult(action="accept", content={"card_number": 1})}
        with pytest.raises(McpError, match="Invalid or expired requestState"):
            await again(client.session, asked, accept, tampered)
        assert structured(await again(client.session, asked, accept))["picked"]  # the real state still works


async def test_an_expired_state_is_refused(pick_card_server):
    async with Client(pick_card_server(state_ttl=0.5), **MODERN) as client:
        asked = await first_round(client.session)
        await anyio.sleep(0.6)
        accept = {"elicit-1": types.ElicitResult(action="accept", content={"card_number": 1})}
        with pytest.raises(McpError, match="Invalid or expired requestState"):
            await again(client.session, asked, accept)


async def test_the_state_is_bound_to_the_arguments(pick_card_server):
    async with Client(pick_card_server(), **MODERN) as client:
        asked = await first_round(client.session)
        accept = {"elicit-1": types.ElicitResult(action="accept", content={"card_number": 1})}
        with pytest.raises(McpError, match="Invalid or expired requestState"):
            await client.session.call_tool(
                "pick_card",
                {"count": 4, "analyze": False, "seed": 1},
                input_responses=accept,
                request_state=asked.request_state,
                allow_input_required=True,
            )


@pytest.mark.parametrize(
    ("responses", "message"),
    [
        ({}, "input_responses lacks answers to: elicit-1"),
        (
            {
                "elicit-1": types.ElicitResult(action="decline"),
                "elicit-9": types.ElicitResult(action="decline"),
            },
            "answers to requests that were not asked: elicit-9",
        ),
        (
            {
                "elicit-1": types.CreateMessageResult(
                    role="assistant", model="m", content=types.TextContent(type="text", text="3")
                )
            },
            "input_responses['elicit-1']: expected an elicitation result",
        ),
    ],
)
async def test_answers_that_do_not_fit_the_questions_are_refused(pick_card_server, responses, message):
    async with Client(pick_card_server(), **MODERN) as client:
        asked = await first_round(client.session)
        assert set(asked.input_requests) == {"elicit-1"}
        text = error_text(await again(client.session, asked, responses))
        assert message in text
        # nothing ran: the same state, rightly answered, still finishes the call
        accept = {"elicit-1": types.ElicitResult(action="accept", content={"card_number": 2})}
        assert structured(await again(client.session, asked, accept))["success"] is True


async def test_content_failing_the_form_is_raised_in_the_tool(pick_card_server):
    async with Client(pick_card_server(), **MODERN) as client:
        asked = await first_round(client.session)
        bad = {"elicit-1": types.ElicitResult(action="accept", content={"card_number": 99})}
        text = error_text(await again(client.session, asked, bad))
    assert "ElicitValidationError" in text
    assert "card_number: Input should be less than or equal to 10" in text


# -- cancellation ----------------------------------------------------------------------------------------

SLOW = """
import os
from branchc import Context, tool

slow = tool("slow", requires={"sampling"})

@slow.client
def client(handoff: dict, ctx: Context):
    try:
        reply = yield ctx.sample(prompt="take your time")
        return reply.text
    finally:
        with open(os.environ["BRANCHC_TEST_MARKER"], "a") as marker:
            marker.write("finally ran\\n")
"""


class Stalling(Scripted):
    """Never answers a sample until cancelled; says so."""

    def __init__(self) -> None:
        super().__init__({}, [])
        self.cancelled = anyio.Event()

    async def sampling(self, ctx, params):
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()


@pytest.fixture
def slow_tool(tmp_path, env):
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "slow_tool.py").write_text(SLOW)
    marker = tmp_path / "marker.txt"
    return folder, marker, {**env, "BRANCHC_TEST_MARKER": str(marker)}


async def wait_for(path: Path, text: str) -> None:
    with anyio.fail_after(10):
        while not (path.exists() and text in path.read_text()):
            await anyio.sleep(0.05)


async def test_a_cancelled_call_runs_the_finally_blocks_and_cancels_the_sample(slow_tool):
    folder, marker, env = slow_tool
    client = Stalling()
    async with Client(stdio(folder, env), mode="legacy", **client.callbacks()) as session:
        with anyio.move_on_after(1.0) as scope:
            await session.call_tool("slow", {})
        assert scope.cancelled_caught
        await wait_for(marker, "finally ran")
        with anyio.fail_after(5):
            await client.cancelled.wait()  # the server gave up its sampling request too
        # the server goes on serving
        assert (await session.list_tools()).tools[0].name == "slow"


def test_a_dropped_connection_runs_the_finally_blocks(slow_tool):
    """The client goes away mid-call (its end of stdio closes): the run is halted, finally runs."""
    folder, marker, env = slow_tool
    server = subprocess.Popen(
        [sys.executable, "-m", "branchc", "serve", str(folder)],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}},
            "clientInfo": {"name": "t", "version": "1"},
        }
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {}}},
        ):
            server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()
        assert '"id":1' in server.stdout.readline()
        assert "sampling/createMessage" in server.stdout.readline()  # the run waits for its sample now
        assert not marker.exists()
        server.stdin.close()  # the connection drops
        assert server.wait(timeout=20) == 0
        assert marker.read_text() == "finally ran\n"
    finally:
        server.kill()
        server.wait()


# -- guided mode -------------------------------------------------------------------------------------------


async def guide_to_the_end(session, name: str, arguments: dict, prompts: dict, elicits: list) -> tuple[object, int]:
    """Play the calling model: answer each guided request, call branchc_resume, until the result."""
    result = await session.call_tool(name, arguments)
    steps, elicited = 0, 0
    while True:
        value = structured(result)
        if not (isinstance(value, dict) and value.get("status") == "waiting_for_answers"):
            return value, steps
        answers = {}
        for request in value["requests"]:
            if request["kind"] == "sample":
                answers[request["key"]] = prompts[request["messages"][-1]["content"]]
            else:
                answer = elicits[elicited]
                elicited += 1
                answers[request["key"]] = answer["content"] if answer["action"] == "accept" else answer["action"]
        action = value["next_action"]
        assert action["tool"] == "branchc_resume" and action["arguments"]["state_id"] == value["state_id"]
        result = await session.call_tool("branchc_resume", {"state_id": value["state_id"], "answers": answers})
        steps += 1


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("name", ["pick_card", "research"])
async def test_guided_mode_lets_the_calling_model_answer(env, mode, name):
    expected, prompts, elicits = await native_run(name, {})
    async with Client(stdio(TOOLS, env, "--guided"), mode=mode) as session:  # no sampling, no elicitation
        assert "branchc_resume" in {tool.name for tool in (await session.list_tools()).tools}
        value, steps = await within(60, guide_to_the_end(session, name, EXAMPLES[name], prompts, elicits))
    assert same_run(value, expected)
    assert steps >= 2


async def test_a_guided_state_id_continues_once_and_unknown_ones_are_named(env):
    async with Client(stdio(TOOLS, env, "--guided"), mode="legacy") as session:
        first = structured(await session.call_tool("pick_card", {"count": 2, "seed": 3}))
        (request,) = first["requests"]
        assert request["kind"] == "elicit" and request["schema"]["properties"]["card_number"]["type"] == "integer"
        answers = {request["key"]: {"card_number": 1}}
        done = structured(
            await session.call_tool("branchc_resume", {"state_id": first["state_id"], "answers": answers})
        )
        assert done["success"] is True
        again = error_text(
            await session.call_tool("branchc_resume", {"state_id": first["state_id"], "answers": answers})
        )
        bogus = error_text(await session.call_tool("branchc_resume", {"state_id": "nope", "answers": {}}))
    assert "is unknown, already used or expired" in again and "'nope' is unknown" in bogus


async def test_without_guided_mode_a_client_lacking_capabilities_is_told_which(env):
    async with Client(stdio(TOOLS, env), mode="2026-07-28") as session:
        text = error_text(await session.call_tool("pick_card", {"count": 2}))
    assert "pick_card requires elicitation, sampling, which the client does not offer" in text


# -- output schema ----------------------------------------------------------------------------------------

TYPED = """
from pydantic import BaseModel
from branchc import Context, tool

class Out(BaseModel):
    total: int

adder = tool("adder", output=Out)

@adder.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", "adding")
    return {"total": 3}
"""


async def test_a_declared_output_schema_is_listed(served):
    async with Client(served(TYPED, "typed"), mode="legacy", **Scripted({}, []).callbacks()) as session:
        (listed,) = (await session.list_tools()).tools
        assert listed.output_schema["properties"]["total"]["type"] == "integer"
        assert structured(await session.call_tool("adder", {})) == {"total": 3}


# -- tool calls in a history ------------------------------------------------------------------------------


class Recording(Scripted):
    """Scripted, answering each sample with its position; it keeps the messages it was sent."""

    async def sampling(self, ctx, params):
        self.sampled.append(params)
        moves = {1: "4", 2: "0", 3: "6", 4: "3"}
        text = moves[len(self.sampled)]
        return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text=text))


@pytest.mark.parametrize("tools", [True, False])
async def test_elicitations_in_a_history_reach_the_client_as_tool_use_or_as_text(env, tools):
    _, _, elicits = await native_run("tictactoe", {})
    client = Recording({}, elicits)
    options = (
        {"sampling_capabilities": types.SamplingCapability(tools=types.SamplingToolsCapability())} if tools else {}
    )
    async with Client(stdio(TOOLS, env), mode="legacy", **client.callbacks(), **options) as session:
        assert not (await within(60, session.call_tool("tictactoe", {}))).is_error
    second = client.sampled[1].messages  # after the user's first move, which is an elicitation exchange
    kinds = [[block.type for block in message.content_as_list] for message in second]
    if tools:
        assert ["tool_use"] in kinds and ["tool_result"] in kinds
        use = next(b for m in second for b in m.content_as_list if b.type == "tool_use")
        result = next(b for m in second for b in m.content_as_list if b.type == "tool_result")
        assert use.name == "pickMove" and result.tool_use_id == use.id
    else:
        assert all(kind == ["text"] for kind in kinds)
        texts = [message.content_as_list[0].text for message in second]
        assert any("[tool call pickMove#elicit_" in text for text in texts)  # merged into the assistant's turn
        assert any("[tool result elicit_" in text for text in texts)  # and into the user's
