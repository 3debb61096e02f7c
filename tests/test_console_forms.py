"""`ConsoleClient` forms for every MCP enum form (SEP-1330) and defaults (SEP-1034): the choices are
listed numbered with their titles, taken by number or value (several comma-separated, within
min/max items), an empty answer takes the default, and a bad entry is asked again with a clear
message. Driven with scripted standard input, on the schema the runtime hands over (the pydantic
model's JSON Schema) and on the flat form the bridge makes of it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import pytest
from pydantic import BaseModel, Field
from rich.console import Console

from branchc import Titled
from branchc.bridge.elicitation import form_schema
from branchc.runtime.client import ElicitRequest
from branchc.runtime.console import ConsoleClient
from branchc.runtime.errors import InputClosedError

ROOT = Path(__file__).resolve().parent.parent


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
    colors: list[Color] = []
    single: Literal["only"]
    name: str = Field("John Doe", description="User name")
    age: int = 30
    score: float = 95.5
    verified: bool = True


DEFAULTS = {"untitled": "b", "titled": "v2", "multi": ["a"], "color": "green", "colors": []}
DEFAULTS |= {"name": "John Doe", "age": 30, "score": 95.5, "verified": True}


def ask(schema: dict[str, Any], lines: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """(the answer, what the terminal showed) for `lines` typed, after `accept`, at the form for `schema`."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in ["accept", *lines])))
    shown = io.StringIO()
    client = ConsoleClient(Console(file=shown, width=200, color_system=None))
    request = ElicitRequest(key="form", message="Fill it in", requested_schema=schema)
    answer = anyio.run(client.elicit, request)
    return answer, shown.getvalue()


def runtime_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()  # what the runtime hands the console


def bridge_schema(model: type[BaseModel]) -> dict[str, Any]:
    return form_schema(model.model_json_schema(), model.__name__)  # the flat MCP form


SCHEMAS = pytest.mark.parametrize("schema_of", [runtime_schema, bridge_schema], ids=["runtime", "mcp-form"])


@SCHEMAS
def test_every_enum_form_lists_its_choices_with_titles_and_defaults(schema_of, monkeypatch):
    #          untitled titled legacy multi titled_multi color titled_color colors single name age score verified
    typed = ["", "", "2", "", "3", "", "", "", "1", "", "", "", ""]
    answer, shown = ask(schema_of(Everything), typed, monkeypatch)
    assert answer == {
        "action": "accept",
        "content": {**DEFAULTS, "legacy": "o2", "titled_multi": ["v3"], "single": "only"},
    }
    Everything.model_validate(answer["content"])
    for line in [
        # untitled: the values themselves, numbered; the default by number and title
        "1. a\n    2. b\n    3. c\n  Untitled (one of 1-3 or a value, default 2 (b)) >",
        # titled single-select: titles, then the value
        "  Pick one\n    1. First (v1)\n    2. Second (v2)\n  Titled (one of 1-2 or a value, default 2 (Second)) >",
        # legacy enumNames
        "1. One (o1)\n    2. Two (o2)\n  Legacy (one of 1-2 or a value) >",
        # untitled multi-select with min/max items and a default
        "Multi (any of 1-3 or values, comma-separated, choose 1 to 2, default 1 (a)) >",
        # titled multi-select: a value without a title shows as itself
        "1. Uno (v1)\n    2. v2\n    3. Tres (v3)\n"
        "  Titled Multi (any of 1-3 or values, comma-separated, choose at most 2) >",
        "1. Rouge (red)\n    2. green\n  Titled Color (one of 1-2 or a value, optional) >",
        "Single (1 or a value) >",
        "Name (string, default 'John Doe') >",
        "Verified (boolean, default yes) >",
    ]:
        assert line in shown, f"{line!r} not in:\n{shown}"
    assert "Traceback" not in shown


@SCHEMAS
def test_choices_are_taken_by_number_value_or_title(schema_of, monkeypatch):
    typed = ["c", "First", "o1", "3, a", "v2,1", "1", "Rouge", "green, 1", "only", "Jane", "41", "1.5", "no"]
    answer, _ = ask(schema_of(Everything), typed, monkeypatch)
    assert answer["content"] == {
        "untitled": "c",
        "titled": "v1",
        "legacy": "o1",
        "multi": ["c", "a"],
        "titled_multi": ["v2", "v1"],
        "color": "red",
        "titled_color": "red",
        "colors": ["green", "red"],
        "single": "only",
        "name": "Jane",
        "age": 41,
        "score": 1.5,
        "verified": False,
    }
    Everything.model_validate(answer["content"])


@SCHEMAS
def test_bad_entries_are_asked_again_with_a_clear_message(schema_of, monkeypatch):
    typed = [
        *["x", "4", "0", "2"],  # untitled: not a value, numbers out of range, then choice 2
        "",  # titled: the default
        *["", "o3", "1"],  # legacy: required, so empty is no answer; not a value
        *["1,2,3", "d", "1,,2"],  # multi: too many, not a value, then two (the empty part is ignored)
        *["1,2,3", "1,1,3"],  # titled_multi: too many, then a repeated choice
        *["", "", "", "1", ""],  # color, titled_color, colors, single, name
        *["seven", ""],  # age: not a number, then the default
        *["", ""],  # score, verified
    ]
    answer, shown = ask(schema_of(Everything), typed, monkeypatch)
    assert answer["content"]["untitled"] == "b"
    assert answer["content"]["legacy"] == "o1"
    assert answer["content"]["multi"] == ["a", "b"]
    assert answer["content"]["titled_multi"] == ["v1", "v3"]  # a repeated choice counts once
    assert answer["content"]["age"] == 30
    for message in [
        "'x' is not one of the choices: type 1-3 or a value; try again",
        "'4' is not one of the choices: type 1-3 or a value; try again",
        "'0' is not one of the choices: type 1-3 or a value; try again",
        "an answer is needed: type 1-2 or a value; try again",
        "'o3' is not one of the choices: type 1-2 or a value; try again",
        "choose at most 2 (you chose 3); try again",
        "'d' is not one of the choices: type 1-3 or a value; try again",
        "'seven' is not a whole number; try again",
    ]:
        assert message in shown, f"{message!r} not in:\n{shown}"
    assert shown.count("choose at most 2 (you chose 3); try again") == 2
    assert "Traceback" not in shown


class Toppings(BaseModel):
    some: list[Literal["ham", "olives", "cheese"]] = Field(min_length=2, max_length=2)
    any_: Annotated[list[Literal["ham", "olives"]], Titled(ham="Ham")] = Field(["ham"], alias="any")


@SCHEMAS
def test_min_and_max_items(schema_of, monkeypatch):
    typed = ["", "1", "1,2,3", "cheese, 1", "-"]
    answer, shown = ask(schema_of(Toppings), typed, monkeypatch)
    assert answer["content"] == {"some": ["cheese", "ham"], "any": []}
    Toppings.model_validate(answer["content"])
    assert "Some (any of 1-3 or values, comma-separated, choose exactly 2) >" in shown
    assert "Any (any of 1-2 or values, comma-separated, - for none, default 1 (Ham)) >" in shown
    assert "choose at least 2 (you chose 0); try again" in shown
    assert "choose at least 2 (you chose 1); try again" in shown
    assert "choose at most 2 (you chose 3); try again" in shown


def test_a_list_of_free_values_is_comma_separated_and_validated(monkeypatch):
    class Tags(BaseModel):  # no MCP form (the bridge refuses it), but `run --interactive` can ask it
        tags: list[str] = Field(max_length=2)
        scores: list[int] = []

    answer, shown = ask(Tags.model_json_schema(), ["a, b, c", "a,b", "1, x", "1, 2"], monkeypatch)
    assert answer["content"] == {"tags": ["a", "b"], "scores": [1, 2]}
    assert "['a', 'b', 'c'] is too long; try again" in shown
    assert "'x' is not a whole number; try again" in shown


def test_an_optional_choice_left_empty_is_left_out_and_the_model_fills_it(monkeypatch):
    class Maybe(BaseModel):
        size: Literal["s", "m"] | None = None
        sizes: list[Literal["s", "m"]] | None = None

    answer, shown = ask(Maybe.model_json_schema(), ["", ""], monkeypatch)
    assert answer["content"] == {}
    assert Maybe.model_validate(answer["content"]) == Maybe()
    assert "Size (one of 1-2 or a value, optional) >" in shown
    assert "Sizes (any of 1-2 or values, comma-separated, optional) >" in shown


def test_a_value_that_looks_like_a_number_is_taken_as_the_value(monkeypatch):
    class Digits(BaseModel):
        pick: Literal["2", "1", "x"]

    answer, _ = ask(Digits.model_json_schema(), ["1"], monkeypatch)
    assert answer["content"] == {"pick": "1"}  # the value "1", not choice 1 ("2")
    answer, _ = ask(Digits.model_json_schema(), ["3"], monkeypatch)
    assert answer["content"] == {"pick": "x"}


def test_markup_in_titles_and_values_is_shown_as_typed(monkeypatch):
    class Marked(BaseModel):
        pick: Annotated[Literal["[b]x[/b]"], Titled({"[b]x[/b]": "[red]Red[/red]"})]

    answer, shown = ask(Marked.model_json_schema(), ["1"], monkeypatch)
    assert answer["content"] == {"pick": "[b]x[/b]"}
    assert "1. [red]Red[/red] ([b]x[/b])" in shown


def test_input_that_ends_in_a_choice_is_the_clear_error(monkeypatch):
    with pytest.raises(InputClosedError, match="standard input ended while answering elicit 'form'"):
        ask(runtime_schema(Toppings), ["1"], monkeypatch)


# -- end to end: `branchc run --interactive` with input piped ---------------------------------------

ORDER_SOURCE = """
from typing import Annotated, Literal
from pydantic import BaseModel, Field
from branchc import Context, Titled, tool

class Order(BaseModel):
    size: Annotated[Literal["s", "m", "l"], Titled(s="Small", m="Medium", l="Large")] = "m"
    extras: Annotated[list[Literal["ham", "olives", "cheese"]], Titled(ham="Ham"), Field(min_length=1, max_length=2)]

order = tool("order", description="asks for an order", requires={"elicitation"})

@order.client
def client(handoff: dict, ctx: Context):
    answer = yield ctx.elicit("order", message="Your order?", schema=Order)
    return answer.content.model_dump()
"""


def test_branchc_run_interactive_asks_for_titled_choices(tmp_path: Path) -> None:
    tool_file = tmp_path / "order_tool.py"
    tool_file.write_text(ORDER_SOURCE)
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "run", str(tool_file), "--interactive"],
        input="accept\nXL\n\n\nham,olives,cheese\n3, Ham\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"size": "m", "extras": ["cheese", "ham"]}
    for expected in [
        "1. Small (s)",
        "2. Medium (m)",
        "Size (one of 1-3 or a value, default 2 (Medium)) >",
        "'XL' is not one of the choices: type 1-3 or a value; try again",
        "1. Ham (ham)",
        "2. olives",
        "Extras (any of 1-3 or values, comma-separated, choose 1 to 2) >",
        "choose at least 1 (you chose 0); try again",
        "choose at most 2 (you chose 3); try again",
    ]:
        assert expected in done.stderr, f"{expected!r} not in:\n{done.stderr}"
    assert "Traceback" not in done.stderr
