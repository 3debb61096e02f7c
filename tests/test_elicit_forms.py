"""Elicitation forms: every enum form MCP allows (SEP-1330) and defaults (SEP-1034), declared with
pydantic; the requestedSchema they make (`form_schema`), and answers validated on the way back,
in the runtime and through the real `mcp` client in both protocol eras."""

from __future__ import annotations

import warnings
from enum import StrEnum
from typing import Annotated, Any, Literal

import mcp.types as types
import pytest
from _bridge_support import KEY
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import BaseModel, Field

from branchc import ElicitValidationError, Titled, ToolDefinitionError, run_tool, tool
from branchc.bridge.elicitation import ElicitSchemaError, form_schema
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.testing import MockClient

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
warnings.simplefilter("ignore", MCPDeprecationWarning)


class Color(StrEnum):
    RED = "red"
    GREEN = "green"


class Everything(BaseModel):
    untitled: Literal["a", "b", "c"] = "b"
    titled: Annotated[Literal["v1", "v2"], Titled(v1="First", v2="Second")] = Field("v2", description="Pick one")
    legacy: Literal["o1", "o2"] = Field(json_schema_extra={"enumNames": ["One", "Two"]})
    multi: list[Literal["a", "b", "c"]] = Field(["a"], min_length=1, max_length=2)
    titled_multi: Annotated[list[Literal["v1", "v2", "v3"]], Titled({"v1": "Uno", "v3": "Tres"}), Field(max_length=2)]
    color: Color = Color.GREEN
    titled_color: Annotated[Color, Titled(red="Rouge")] | None = None
    single: Literal["only"]
    name: str = Field("John Doe", description="User name")
    age: int = 30
    score: float = 95.5
    verified: bool = True


def form(model: type[BaseModel]) -> dict[str, Any]:
    return form_schema(model.model_json_schema(), model.__name__)


def test_every_enum_form_and_every_default_reaches_the_form():
    properties = form(Everything)["properties"]
    assert properties["untitled"] == {"type": "string", "enum": ["a", "b", "c"], "title": "Untitled", "default": "b"}
    assert properties["titled"] == {
        "type": "string",
        "oneOf": [{"const": "v1", "title": "First"}, {"const": "v2", "title": "Second"}],
        "title": "Titled",
        "description": "Pick one",
        "default": "v2",
    }
    assert properties["legacy"] == {
        "type": "string",
        "enum": ["o1", "o2"],
        "enumNames": ["One", "Two"],
        "title": "Legacy",
    }
    assert properties["multi"] == {
        "type": "array",
        "items": {"type": "string", "enum": ["a", "b", "c"]},
        "title": "Multi",
        "default": ["a"],
        "minItems": 1,
        "maxItems": 2,
    }
    assert properties["titled_multi"] == {
        "type": "array",
        "items": {
            "anyOf": [{"const": "v1", "title": "Uno"}, {"const": "v2", "title": "v2"}, {"const": "v3", "title": "Tres"}]
        },
        "title": "Titled Multi",
        "maxItems": 2,
    }
    assert properties["color"]["enum"] == ["red", "green"] and properties["color"]["default"] == "green"
    assert properties["titled_color"]["oneOf"] == [
        {"const": "red", "title": "Rouge"},
        {"const": "green", "title": "green"},
    ]
    assert "default" not in properties["titled_color"]  # `None` is no answer a form can give
    assert properties["single"] == {"type": "string", "enum": ["only"], "title": "Single"}
    assert properties["name"]["default"] == "John Doe"
    assert (properties["age"]["type"], properties["age"]["default"]) == ("integer", 30)
    assert (properties["score"]["type"], properties["score"]["default"]) == ("number", 95.5)
    assert (properties["verified"]["type"], properties["verified"]["default"]) == ("boolean", True)
    assert form(Everything)["required"] == ["legacy", "titled_multi", "single"]


def test_titles_on_the_items_make_the_same_form_as_titles_on_the_list():
    class OnItems(BaseModel):
        titled_multi: list[Annotated[Literal["v1", "v2", "v3"], Titled({"v1": "Uno", "v3": "Tres"})]] = Field(
            max_length=2
        )

    assert form(OnItems)["properties"]["titled_multi"] == form(Everything)["properties"]["titled_multi"]
    assert OnItems.model_validate({"titled_multi": ["v1", "v3"]}).titled_multi == ["v1", "v3"]


def test_titled_names_a_value_that_is_not_offered():
    class Bad(BaseModel):
        size: Annotated[Literal["s", "m"], Titled(xl="Huge")]

    with pytest.raises(ToolDefinitionError, match=r"'xl' is not one of the values \['s', 'm'\]"):
        Bad.model_json_schema()


def test_titled_applies_to_choices_only():
    class Bad(BaseModel):
        size: Annotated[int, Titled(s="Small")]

    with pytest.raises(ToolDefinitionError, match="applies to a Literal or Enum of str values"):
        Bad.model_json_schema()
    with pytest.raises(ToolDefinitionError, match="at least one value"):
        Titled()


class WrongDefault(BaseModel):
    size: Literal["s", "m"] = "xl"  # type: ignore[assignment]


class WrongNames(BaseModel):
    size: Literal["s", "m"] = Field(json_schema_extra={"enumNames": ["Small"]})


class FreeTextList(BaseModel):
    tags: list[str]


class NumberChoice(BaseModel):
    level: Literal[1, 2, 3]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (WrongDefault, r"WrongDefault\.size: the default 'xl' is not one of the values \['s', 'm'\]"),
        (WrongNames, r"WrongNames\.size: enumNames \['Small'\] is not one str title per enum value"),
        (FreeTextList, r"FreeTextList\.tags: a list whose items are not str enum values"),
        (NumberChoice, r"NumberChoice\.level: a choice whose options are not str enum values"),
    ],
)
def test_forms_mcp_cannot_express_are_refused_naming_the_field(model, message):
    with pytest.raises(ElicitSchemaError, match=message):
        form(model)


# -- answers on the way back: only offered values, min/max items -------------------------------------------


class Order(BaseModel):
    size: Annotated[Literal["s", "m", "l"], Titled(s="Small", m="Medium", l="Large")]
    extras: Annotated[list[Literal["ham", "olives", "cheese"]], Titled(ham="Ham"), Field(min_length=1, max_length=2)]


order = tool("order", requires={"elicitation"})


@order.client
def order_client(handoff: dict, ctx):
    refused = []
    while True:
        try:
            answer = yield ctx.elicit("order", message="Your order?", schema=Order)
        except ElicitValidationError as error:
            refused.append(error.errors)
            continue
        return {"order": answer.content.model_dump(), "refused": refused}


GOOD = {"size": "m", "extras": ["ham", "cheese"]}
BAD = [
    ({"size": "xl", "extras": ["ham"]}, "size: Input should be 's', 'm' or 'l' (got 'xl')"),
    ({"size": "s", "extras": ["pineapple"]}, "extras.0: Input should be 'ham', 'olives' or 'cheese' (got 'pineapple')"),
    ({"size": "s", "extras": []}, "extras: List should have at least 1 item after validation, not 0 (got [])"),
    ({"size": "s", "extras": ["ham", "olives", "cheese"]}, "extras: List should have at most 2 items after validation"),
]


@pytest.mark.anyio
async def test_answers_outside_the_choices_are_refused_in_the_runtime():
    answers = [{"action": "accept", "content": content} for content, _ in BAD] + [{"action": "accept", "content": GOOD}]
    result = await run_tool(order, {}, MockClient([], answers))
    assert result["order"] == GOOD
    assert len(result["refused"]) == len(BAD)
    for errors, (_, expected) in zip(result["refused"], BAD, strict=True):
        assert len(errors) == 1 and errors[0].startswith(expected), errors


ORDER_SOURCE = """
from typing import Annotated, Literal
from pydantic import BaseModel, Field
from branchc import Context, ElicitValidationError, Titled, tool

class Order(BaseModel):
    size: Annotated[Literal["s", "m", "l"], Titled(s="Small", m="Medium", l="Large")]
    extras: Annotated[list[Literal["ham", "olives", "cheese"]], Titled(ham="Ham"), Field(min_length=1, max_length=2)]

order = tool("order", description="asks for an order", requires={"elicitation"})

@order.client
def client(handoff: dict, ctx: Context):
    refused = []
    while True:
        try:
            answer = yield ctx.elicit("order", message="Your order?", schema=Order)
        except ElicitValidationError as error:
            refused.append(error.errors)
            continue
        return {"order": answer.content.model_dump(), "refused": refused}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_titled_forms_reach_the_mcp_client_and_wrong_answers_are_refused(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "order_tool.py").write_text(ORDER_SOURCE)
    server = create_server(load_served_tools(tmp_path / "src"), state_key=KEY)
    answers = [content for content, _ in BAD] + [GOOD]
    asked: list[Any] = []

    async def elicitation(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.requested_schema)
        return types.ElicitResult(action="accept", content=answers[len(asked) - 1])

    async with Client(server, mode=mode, elicitation_callback=elicitation, input_required_max_rounds=10) as session:
        result = await session.call_tool("order", {})
    assert not result.is_error, result.content[0].text
    assert result.structured_content["order"] == GOOD
    refused = result.structured_content["refused"]
    assert len(refused) == len(BAD)
    for errors, (_, expected) in zip(refused, BAD, strict=True):
        assert len(errors) == 1 and errors[0].startswith(expected), errors
    assert asked[0]["properties"] == {
        "size": {
            "type": "string",
            "oneOf": [
                {"const": "s", "title": "Small"},
                {"const": "m", "title": "Medium"},
                {"const": "l", "title": "Large"},
            ],
            "title": "Size",
        },
        "extras": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "ham", "title": "Ham"},
                    {"const": "olives", "title": "olives"},
                    {"const": "cheese", "title": "cheese"},
                ]
            },
            "title": "Extras",
            "minItems": 1,
            "maxItems": 2,
        },
    }
