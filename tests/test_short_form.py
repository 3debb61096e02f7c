"""The short form: `@tool` on a generator whose parameters are the tool's; title, annotations and icons;
compiled, snapshotted and resumed in a fresh process, and served in both eras with the real mcp client."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated

import mcp.types as types
import pytest
from _bridge_support import KEY, within
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import AfterValidator, BaseModel, Field, SecretStr

import branchc
from branchc import Context, ToolDefinitionError, ToolPhaseError, run_tool, tool
from branchc.bridge.loading import load_served_tools
from branchc.bridge.rounds import start_run
from branchc.bridge.server import create_server
from branchc.runtime.limits import Limits
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import dump_run
from branchc.runtime.signature import parse_docstring
from branchc.splitter.build import build
from branchc.splitter.compiler import compile_module
from branchc.testing import MockClient

warnings.simplefilter("ignore", MCPDeprecationWarning)


class Point(BaseModel):
    x: int
    y: int


# -- the schema comes from the signature and the docstring ---------------------------------------------------


@tool(requires={"sampling", "elicitation"}, title="Pick a card")
def pick_card(ctx: Context, count: Annotated[int, Field(ge=2, le=10)] = 5, analyze: bool = False):
    """Draw cards with optional LLM analysis.

    Args:
        count: How many cards
            to draw.
        analyze: Ask the model first.
    """
    answer = yield ctx.sample(prompt=f"{count} cards, analyze={analyze}")
    return {"count": count, "analyze": analyze, "text": answer.text}


def test_the_signature_is_the_input_schema_and_the_docstring_describes_it():
    assert pick_card.name == "pick_card" and pick_card.title == "Pick a card"
    assert pick_card.description == "Draw cards with optional LLM analysis."
    assert pick_card.requires == {"sampling", "elicitation"}
    schema = pick_card.input_schema
    assert schema["properties"] == {
        "count": {
            "default": 5,
            "description": "How many cards to draw.",
            "maximum": 10,
            "minimum": 2,
            "title": "Count",
            "type": "integer",
        },
        "analyze": {"default": False, "description": "Ask the model first.", "title": "Analyze", "type": "boolean"},
    }
    assert "required" not in schema  # every parameter has a default; `ctx` is not a parameter


def test_bare_tool_takes_the_function_name_and_docstring_and_a_field_description_wins():
    @tool
    def greet(ctx: Context, who: Annotated[str, Field(description="from Field")], point: Point, *, loud: bool = False):
        """Greet someone.

        Parameters
        ----------
        who : str
            from the docstring
        point : Point
            Where they stand.
        """
        yield ctx.log("info", "hi")
        return who

    assert (greet.name, greet.description, greet.title) == ("greet", "Greet someone.", None)
    props = greet.input_schema["properties"]
    assert props["who"]["description"] == "from Field"
    assert props["point"]["description"] == "Where they stand."
    assert greet.input_schema["required"] == ["who", "point"]


def test_named_short_form_and_the_package_attribute():
    @tool("custom_name", description="Given.")
    def anything(ctx: Context):
        """Not this."""
        yield ctx.log("info", "x")

    @branchc.tool(limits=Limits(max_depth=2))
    def other(ctx: Context):
        yield ctx.log("info", "x")

    assert (anything.name, anything.description) == ("custom_name", "Given.")
    assert (other.name, other.limits.max_depth) == ("other", 2)


@pytest.mark.parametrize(
    ("doc", "description", "params"),
    [
        ("One line.", "One line.", {}),
        (
            "Top.\n\n    :param a: first\n        more\n    :param int b: second\n    :returns: x",
            "Top.",
            {"a": "first more", "b": "second"},
        ),
        (
            "Top.\n\n    Args:\n        a (int): first\n        b: second\n\n    Raises:\n        c: no",
            "Top.",
            {"a": "first", "b": "second"},
        ),
    ],
)
def test_docstring_styles(doc, description, params):
    assert parse_docstring(doc) == (description, params)


def test_definition_errors_name_the_place_and_the_fix():
    def no_context(count: int):
        yield count

    with pytest.raises(ToolDefinitionError, match=r"exactly one parameter annotated Context, .*\(found none\)"):
        tool(no_context)

    def star(ctx: Context, *args):
        yield ctx.log("info", "x")

    with pytest.raises(ToolDefinitionError, match=r"\*args cannot be a tool parameter"):
        tool(star)

    def plain(ctx: Context, a: int):
        return a

    with pytest.raises(ToolDefinitionError, match="must be a generator function"):
        tool(plain)
    with pytest.raises(ToolDefinitionError, match="annotations has an unknown key 'readonly'"):
        tool("t", annotations={"readonly": True})
    with pytest.raises(ToolDefinitionError, match="each icon needs a 'src'"):
        tool("t", icons=[{"mimeType": "image/png"}])


def test_title_annotations_and_icons_in_either_form_and_in_the_manifest():
    long = tool(
        "long",
        title="Long",
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        icons=[types.Icon(src="https://example.com/a.png", mime_type="image/png")],
    )
    assert long.annotations == {"readOnlyHint": True, "openWorldHint": False}
    assert long.icons == [{"src": "https://example.com/a.png", "mimeType": "image/png"}]

    @tool(
        annotations={"destructive_hint": True}, icons=[{"src": "data:image/png;base64,AA==", "mime_type": "image/png"}]
    )
    def short(ctx: Context):
        yield ctx.log("info", "x")

    entry = short.__branchc_manifest__()
    assert entry["annotations"] == {"destructiveHint": True} and entry["form"] == "short"
    assert entry["icons"] == [{"src": "data:image/png;base64,AA==", "mimeType": "image/png"}]
    assert entry["client"] == "test_title_annotations_and_icons_in_either_form_and_in_the_manifest.<locals>.short"


# -- how the client gets its arguments, and how before/after compose ------------------------------------------------


@pytest.mark.anyio
async def test_the_client_gets_its_validated_params_as_keyword_arguments():
    seen = {}

    @tool
    def typed(ctx: Context, point: Point, copy: int = 1, tags: tuple[str, ...] = ()):
        seen.update(point=point, copy=copy, tags=tags, ctx=ctx)
        yield ctx.log("info", "x")
        return {"sum": point.x + point.y + copy}

    assert await run_tool(typed, {"point": {"x": 1, "y": 2}, "copy": 3, "tags": ["a"]}, MockClient()) == {"sum": 6}
    assert seen["point"] == Point(x=1, y=2) and seen["tags"] == ("a",) and isinstance(seen["ctx"], Context)
    with pytest.raises(branchc.ParamsError, match="point"):
        await run_tool(typed, {}, MockClient())


@pytest.mark.anyio
async def test_a_before_handoff_becomes_the_keyword_arguments_and_after_sees_it():
    class Query(BaseModel):
        city: str

    @tool(params=Query)
    def weather(ctx: Context, city: str, forecast: list[str]):
        answer = yield ctx.sample(prompt=f"Summarize for {city}: {forecast}")
        return {"summary": answer.text}

    @weather.before
    def look_up(params: Query) -> dict:
        return {"city": params.city.title(), "forecast": ["sun", "rain"]}

    @weather.after
    def stamp(handoff: dict, result: dict) -> dict:
        return {**result, "city": handoff["city"]}

    assert weather.input_schema["properties"].keys() == {"city"}  # params=, not the signature
    client = MockClient(["Mixed."])
    assert await run_tool(weather, {"city": "lisbon"}, client) == {"summary": "Mixed.", "city": "Lisbon"}
    assert client.sample_calls[0].last_text == "Summarize for Lisbon: ['sun', 'rain']"


@pytest.mark.anyio
async def test_a_handoff_that_does_not_fit_the_parameters_is_named():
    @tool
    def short(ctx: Context, city: str):
        yield ctx.log("info", city)

    @short.before
    def extra(params) -> dict:
        return {"city": "x", "country": "y"}

    with pytest.raises(ToolPhaseError, match=r"before\(\) returned 'country', which .*short has no parameter for"):
        await run_tool(short, {"city": "a"}, MockClient())


# -- validated once: the handoff is JSON, and the client's arguments come back from it by type ---------------------


class Shape(BaseModel):
    name: Annotated[str, AfterValidator(lambda s: s + "!")]
    at: Point


class Creds(BaseModel):
    user: str
    key: SecretStr


@pytest.mark.anyio
@pytest.mark.parametrize("bridge", [False, True])
async def test_each_parameter_is_validated_once_and_arrives_as_its_type(bridge):
    seen = {}

    @tool
    def once(
        ctx: Context,
        who: Annotated[str, AfterValidator(lambda s: s + "!")],
        point: Point,
        when: datetime,
        tags: list[Annotated[str, AfterValidator(str.upper)]],
        shape: Shape | None = None,
        count: Annotated[int, Field(ge=1, le=3)] = 2,
        json: str = "j",
        field_json: int = 0,  # `json` is a field under another name, and not this one
    ):
        seen.update(who=who, point=point, when=when, tags=tags, shape=shape, count=count, json=json, fj=field_json)
        yield ctx.log("info", who)
        return {"who": who}

    arguments = {"who": "bob", "point": {"x": 1, "y": 2}, "when": "2026-01-02T03:04:05Z", "tags": ["a"]}
    arguments |= {"shape": {"name": "sq", "at": {"x": 0, "y": 0}}, "json": "J", "field_json": 7}
    if bridge:  # the bridge's round 1 builds the handoff from the validated params, as a served call does
        bridge, ctx = SimpleNamespace(limits=Limits()), SimpleNamespace(request_id=1)
        handoff, machine = await start_run(bridge, ctx, once, once.validate_params(arguments), check=False)
        machine.advance()
        assert handoff["who"] == "bob!" and json.loads(json.dumps(handoff)) == handoff
    else:
        assert await run_tool(once, arguments, MockClient()) == {"who": "bob!"}
    assert seen["who"] == "bob!" and seen["tags"] == ["A"]  # not 'bob!!', 'A' (upper is idempotent anyway)
    assert seen["point"] == Point(x=1, y=2) and seen["when"] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert isinstance(seen["shape"], Shape) and seen["shape"].at == Point(x=0, y=0)
    assert seen["count"] == 2 and seen["json"] == "J" and seen["fj"] == 7

    with pytest.raises(branchc.ParamsError, match="count"):  # defaults and constraints still hold on the call
        await run_tool(once, {**arguments, "count": 9}, MockClient())


@pytest.mark.anyio
async def test_a_before_handoff_is_validated_against_the_parameters_once():
    @tool
    def greet(ctx: Context, who: Annotated[str, AfterValidator(lambda s: s + "!")]):
        yield ctx.log("info", who)
        return {"who": who}

    @greet.before
    def shout(params) -> dict:
        return {"who": params.who.upper()}  # params.who is 'bob!'

    assert await run_tool(greet, {"who": "bob"}, MockClient()) == {"who": "BOB!!"}


def test_a_parameter_that_cannot_travel_as_json_is_refused():
    def secret(ctx: Context, key: SecretStr):
        yield ctx.log("info", "x")

    def nested(ctx: Context, creds: list[Creds]):
        yield ctx.log("info", "x")

    def excluded(ctx: Context, note: Annotated[str, Field(exclude=True)] = ""):
        yield ctx.log("info", "x")

    with pytest.raises(ToolDefinitionError, match=r"parameter 'key' is a secret \(SecretStr\).*@<tool>\.before"):
        tool(secret)
    with pytest.raises(ToolDefinitionError, match=r"Creds\.key is a secret \(SecretStr\)"):
        tool(nested)
    with pytest.raises(ToolDefinitionError, match=r"parameter 'note' is excluded from dumps"):
        tool(excluded)


# -- compiled: the splitter finds it; snapshots resume in a fresh process --------------------------------------------

SOURCE = '''
"""Short-form tools, compiled."""
from typing import Annotated

from pydantic import Field

import branchc
from branchc import Context, resumable, tool as make_tool


@make_tool(requires={"sampling"}, title="Ask twice", annotations={"read_only_hint": True})
def ask_twice(ctx: Context, topic: str, times: Annotated[int, Field(ge=1, le=3)] = 1):
    """Ask about a topic, then follow up in a branch.

    Args:
        topic: What to ask about.
    """
    @resumable  # defined before a yield and live across it: the function travels with the run
    def follow(sub: Context, text: str):
        more = yield sub.sample(prompt=f"More on {text}")
        return more.text

    first = yield ctx.sample(prompt=f"Tell me about {topic}")

    second = yield ctx.branch(follow, first.text)
    return {"answers": [first.text, second] * times}


@branchc.tool
def fails(ctx: Context):
    yield ctx.log("info", "about to fail")
    raise ValueError("boom")  # line 30
'''


@pytest.fixture
def built(tmp_path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "short_form_tools.py").write_text(SOURCE)
    build([tmp_path / "src"], tmp_path / "build")
    return tmp_path / "build"


def test_the_splitter_compiles_each_short_form_generator_as_a_client():
    compiled = compile_module(SOURCE, "short_form_tools.py")
    kinds = {f.qualname: f.kind for f in compiled.functions}
    assert kinds == {"ask_twice": "client", "ask_twice.<locals>.follow": "resumable", "fails": "client"}


def test_the_manifest_records_the_short_form_tool(built):
    manifest = json.loads((built / "branchc.json").read_text())["modules"]["short_form_tools"]
    entry = next(t for t in manifest["tools"] if t["name"] == "ask_twice")
    assert (entry["client"], entry["form"], entry["title"]) == ("ask_twice", "short", "Ask twice")
    assert entry["description"] == "Ask about a topic, then follow up in a branch."
    assert entry["input_schema"]["properties"]["topic"]["description"] == "What to ask about."


RESUMER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from branchc.runtime.runstate import load_run
    handoff, machine = load_run(sys.stdin.read())
    while not machine.done:
        for request in machine.pending:
            machine.answer(request.key, "re: " + request.sample.messages[-1].content)
        machine.advance()
    modules = sorted(m for m in sys.modules if m.startswith("short_form"))
    print(json.dumps({"ok": machine.ok, "result": machine.result, "modules": modules}))
    """
)


def test_a_short_form_run_resumes_in_a_fresh_process_inside_its_nested_branch(built, monkeypatch):
    monkeypatch.syspath_prepend(str(built))
    monkeypatch.delitem(sys.modules, "short_form_tools", raising=False)
    tools = load_served_tools(built)
    ask = tools["ask_twice"]
    assert ask.client_fn.__branchc_compiled__ and ask.fn.__branchc_compiled__
    machine = Machine(ask.name, "1", Limits())
    handoff = ask.validate_params({"topic": "otters", "times": 2}).model_dump(mode="json")
    machine.start(ask.client_fn, handoff, ask.client_fn.__qualname__)
    machine.advance()
    [request] = machine.pending
    machine.answer(request.key, "Otters are mustelids.")
    machine.advance()  # now waiting inside the nested @resumable branch
    [request] = machine.pending
    assert request.sample.messages[-1].content == "More on Otters are mustelids."
    text = dump_run(handoff, machine)
    machine.release()
    out = subprocess.run(
        [sys.executable, "-c", RESUMER, str(built)], input=text, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "ok": True,
        "result": {"answers": ["Otters are mustelids.", "re: More on Otters are mustelids."] * 2},
        "modules": ["short_form_tools"],  # found through the build's manifest, and imported from it
    }


def test_a_nested_resumable_live_across_a_yield_travels_to_a_fresh_process(built, monkeypatch):
    monkeypatch.syspath_prepend(str(built))
    monkeypatch.delitem(sys.modules, "short_form_tools", raising=False)
    ask = load_served_tools(built)["ask_twice"]
    machine = Machine(ask.name, "1", Limits())
    handoff = ask.validate_params({"topic": "otters"}).model_dump(mode="json")
    machine.start(ask.client_fn, handoff, ask.client_fn.__qualname__)
    machine.advance()  # waiting at the first sample, with `follow` live
    text = dump_run(handoff, machine)
    assert "__branchc_meta__" not in text  # the compiler's marks are rebuilt, not carried
    machine.release()
    out = subprocess.run(
        [sys.executable, "-c", RESUMER, str(built)], input=text, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"] == {
        "answers": ["re: Tell me about otters", "re: More on re: Tell me about otters"]
    }
    forged = text.replace('"__branchc_resumable__":true', '"__branchc_compiled__":true', 1)
    assert forged != text
    out = subprocess.run(
        [sys.executable, "-c", RESUMER, str(built)], input=forged, capture_output=True, text=True, check=False
    )
    assert out.returncode != 0 and "the compiler's mark, never data" in out.stderr


@pytest.mark.anyio
async def test_an_error_in_a_compiled_short_form_tool_names_its_source_line(built, monkeypatch):
    monkeypatch.syspath_prepend(str(built))
    monkeypatch.delitem(sys.modules, "short_form_tools", raising=False)
    tools = load_served_tools(built)
    with pytest.raises(ToolPhaseError) as caught:
        await run_tool(tools["fails"], {}, MockClient())
    frames = []
    tb = caught.value.__cause__.__traceback__
    while tb is not None:
        frames.append((Path(tb.tb_frame.f_code.co_filename).name, tb.tb_lineno))
        tb = tb.tb_next
    assert ("short_form_tools.py", 30) in frames


# -- over MCP: tools/list and the 2026-07-28 rounds ------------------------------------------------------------------


class Answers:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def sampling(self, ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = params.messages[-1].content_as_list[0].text
        self.asked.append(text)
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=f"re: {text}")
        )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_short_form_tool_over_mcp_lists_its_metadata_and_runs(built, mode, monkeypatch):
    monkeypatch.syspath_prepend(str(built))
    monkeypatch.delitem(sys.modules, "short_form_tools", raising=False)
    server = create_server(load_served_tools(built), state_key=KEY)
    answers = Answers()
    async with Client(server, mode=mode, sampling_callback=answers.sampling) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        ask = listed["ask_twice"]
        assert ask.title == "Ask twice"
        assert ask.annotations == types.ToolAnnotations(read_only_hint=True)
        assert ask.description == "Ask about a topic, then follow up in a branch."
        assert ask.input_schema["required"] == ["topic"]
        result = await within(30, client.call_tool("ask_twice", {"topic": "otters"}))
    assert not result.is_error, result.content
    assert result.structured_content == {
        "answers": ["re: Tell me about otters", "re: More on re: Tell me about otters"]
    }
    assert answers.asked == ["Tell me about otters", "More on re: Tell me about otters"]
