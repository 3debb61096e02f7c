"""The tools the official MCP conformance suite's server scenarios call (tests/test_conformance.py).

`npx @modelcontextprotocol/conformance server --url … --scenario NAME` expects, per scenario, a
tool of a given name and behaviour (the scenario's description says which); these are they,
written as ordinary branchc tools and served by `branchc serve --http`.

The suite's logging and progress tools ask for ~50 ms pauses between notifications; they are
left out here (a client phase has no sleep effect, and blocking the server's event loop would be
worse), and the scenarios check only that the notifications arrive, in order.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from branchc import Context, Titled, content, tool

# A 1x1 red PNG and a 1-sample silent WAV: the smallest real image and sound.
RED_PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
SILENT_WAV = base64.b64decode("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==")


# -- tools-call-simple-text, -image, -audio, -embedded-resource, -mixed-content, -error ---------------

simple_text = tool("test_simple_text", description="Returns simple text")
image_content = tool("test_image_content", description="Returns an image (a 1x1 red PNG)")
audio_content = tool("test_audio_content", description="Returns audio (a silent WAV)")
embedded_resource = tool("test_embedded_resource", description="Returns an embedded text resource")
mixed_content = tool("test_multiple_content_types", description="Returns text, an image and a resource")
error_handling = tool("test_error_handling", description="Always fails")


@simple_text.client
def simple_text_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "answering with text")
    return "This is a simple text response for testing."


@image_content.client
def image_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "answering with an image")
    return content.result(content.image(RED_PIXEL_PNG, "image/png"))


@audio_content.client
def audio_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "answering with audio")
    return content.result(content.audio(SILENT_WAV, "audio/wav"))


@embedded_resource.client
def embedded_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "answering with a resource")
    return content.result(
        content.resource(
            "test://embedded-resource", text="This is an embedded resource content.", mime_type="text/plain"
        )
    )


@mixed_content.client
def mixed_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "answering with three kinds of content")
    return content.result(
        content.text("Multiple content types test:"),
        content.image(RED_PIXEL_PNG, "image/png"),
        content.resource(
            "test://mixed-content-resource",
            text=json.dumps({"test": "data", "value": 123}),
            mime_type="application/json",
        ),
    )


@error_handling.client
def error_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "about to fail")
    raise RuntimeError("This tool intentionally returns an error for testing")


# -- tools-call-with-logging, tools-call-with-progress --------------------------------------------------

with_logging = tool("test_tool_with_logging", description="Sends three info log messages")
with_progress = tool("test_tool_with_progress", description="Reports progress 0, 50, 100 of 100")


@with_logging.client
def logging_client(handoff: dict, ctx: Context):
    yield ctx.log("info", "Tool execution started")
    yield ctx.log("info", "Tool processing data")
    yield ctx.log("info", "Tool execution completed")
    return "Logged three messages"


@with_progress.client
def progress_client(handoff: dict, ctx: Context):
    for done in (0, 50, 100):
        yield ctx.notify(f"{done}% done", progress=done, total=100)
    return "Reported progress 0, 50, 100"


# -- tools-call-sampling, tools-call-elicitation ------------------------------------------------------------


class Prompt(BaseModel):
    prompt: str = Field(description="The prompt to send to the LLM")


class Message(BaseModel):
    message: str = Field(description="The message to show the user")


class UserInfo(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


sampling = tool("test_sampling", description="Asks the client's LLM", params=Prompt, requires={"sampling"})
elicitation = tool("test_elicitation", description="Asks the user", params=Message, requires={"elicitation"})


@sampling.client
def sampling_client(handoff: dict, ctx: Context):
    answer = yield ctx.sample(prompt=handoff["prompt"], max_tokens=100)
    return f"LLM response: {answer.text}"


@elicitation.client
def elicitation_client(handoff: dict, ctx: Context):
    answer = yield ctx.elicit("user_info", message=handoff["message"], schema=UserInfo)
    got = answer.content.model_dump() if answer.accepted else None
    return f"User response: action={answer.action}, content={json.dumps(got)}"


# -- elicitation-sep1034-defaults, elicitation-sep1330-enums ----------------------------------------------


class Defaults(BaseModel):
    name: str = Field("John Doe", description="User name")
    age: int = Field(30, description="User age")
    score: float = Field(95.5, description="User score")
    status: Literal["active", "inactive", "pending"] = Field("active", description="User status")
    verified: bool = Field(True, description="Verification status")


class Enums(BaseModel):
    untitledSingle: Literal["option1", "option2", "option3"]  # camelCase: the scenario's field names
    titledSingle: Annotated[
        Literal["value1", "value2", "value3"],
        Titled(value1="First Option", value2="Second Option", value3="Third Option"),
    ]
    legacyEnum: Literal["opt1", "opt2", "opt3"] = Field(
        json_schema_extra={"enumNames": ["Option One", "Option Two", "Option Three"]}
    )
    untitledMulti: list[Literal["option1", "option2", "option3"]] = Field(min_length=1)
    titledMulti: Annotated[
        list[Literal["value1", "value2", "value3"]],
        Titled(value1="First Choice", value2="Second Choice", value3="Third Choice"),
        Field(min_length=1, max_length=3),
    ]


defaults = tool("test_elicitation_sep1034_defaults", description="A form with defaults", requires={"elicitation"})
enums = tool("test_elicitation_sep1330_enums", description="A form with every enum form", requires={"elicitation"})


@defaults.client
def defaults_client(handoff: dict, ctx: Context):
    answer = yield ctx.elicit("defaults", message="Please review and update the form fields", schema=Defaults)
    got = answer.content.model_dump() if answer.accepted else None
    return f"Elicitation completed: action={answer.action}, content={json.dumps(got)}"


@enums.client
def enums_client(handoff: dict, ctx: Context):
    answer = yield ctx.elicit("enums", message="Please pick your options", schema=Enums)
    got = answer.content.model_dump() if answer.accepted else None
    return f"Elicitation completed: action={answer.action}, content={json.dumps(got)}"


# -- json-schema-2020-12 -----------------------------------------------------------------------------------------


class address(BaseModel):  # lower case: the scenario looks for the $defs key "address"
    street: str | None = None
    city: str | None = None


Address = address  # a field named `address` cannot be annotated `address` (the name is the field's own there)


class SchemaParams(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"}
    )

    name: str | None = None
    address: Address | None = None


json_schema = tool(
    "json_schema_2020_12_tool", description="Tool with JSON Schema 2020-12 features", params=SchemaParams
)


@json_schema.client
def json_schema_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "echoing the arguments")
    return handoff
