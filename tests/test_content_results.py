"""Tool results as MCP content blocks (`branchc.content`): the helpers, and what the real `mcp`
client receives in both protocol eras (images, audio, embedded resources, structured content)."""

from __future__ import annotations

import base64
import re
import warnings

import pytest
from _bridge_support import KEY
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc import content
from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server
from branchc.runtime.content import ContentError

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
warnings.simplefilter("ignore", MCPDeprecationWarning)


def test_blocks_are_json_data_in_mcps_wire_shape():
    assert content.image(b"\x89PNG", "image/png") == {"type": "image", "data": "iVBORw==", "mimeType": "image/png"}
    assert content.audio("UklGRg==", "audio/wav") == {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
    assert content.resource("test://a", blob=b"\x00\x01") == {
        "type": "resource",
        "resource": {"uri": "test://a", "blob": "AAE="},
    }
    assert content.result(content.text("hi"), structured={"n": 1}) == {
        "$content": [{"type": "text", "text": "hi"}],
        "$structured": {"n": 1},
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: content.image("not base64!", "image/png"), "not base64; pass the raw bytes"),
        (lambda: content.image(b"x", "png"), "'png' is not a MIME type"),
        (lambda: content.resource("test://a"), "exactly one of text= or blob="),
        (lambda: content.resource("test://a", text="t", blob=b"b"), "exactly one of text= or blob="),
        (lambda: content.result({"type": "video"}), "block 0 is {'type': 'video'}"),
        (lambda: content.result(content.text("a"), structured=[1]), "structured=...) takes a dict"),
    ],
)
def test_bad_blocks_are_refused_where_they_are_made(make, message):
    with pytest.raises(ContentError, match=re.escape(message)):
        make()


SOURCE = """
import base64
from pydantic import BaseModel
from branchc import Context, content, tool

class Out(BaseModel):
    count: int

media = tool("media", description="returns every kind of content")
checked = tool("checked", description="content with a declared output", output=Out)
unchecked = tool("unchecked", description="content without the structured part its output needs", output=Out)
forged = tool("forged", description="a hand-made content result with a stray key")

@media.client
def media_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "media")
    return content.result(
        content.text("caption"),
        content.image(b"png-bytes", "image/png"),
        content.audio(b"wav-bytes", "audio/wav"),
        content.resource("test://doc", text="hello", mime_type="text/plain"),
        content.resource("test://bin", blob=b"\\x00", mime_type="application/octet-stream"),
    )

@checked.client
def checked_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "checked")
    return content.result(content.text("two"), structured={"count": 2})

@checked.after
def checked_after(handoff, result):
    return result

@unchecked.client
def unchecked_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "unchecked")
    return content.result(content.text("two"))

@forged.client
def forged_client(handoff: dict, ctx: Context):
    yield ctx.log("debug", "forged")
    return {"$content": [], "extra": 1}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_content_results_reach_the_client(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "media_tools.py").write_text(SOURCE)
    server = create_server(load_served_tools(tmp_path / "src"), state_key=KEY)
    async with Client(server, mode=mode) as session:
        media = await session.call_tool("media", {})
        checked = await session.call_tool("checked", {})
        unchecked = await session.call_tool("unchecked", {})
        forged = await session.call_tool("forged", {})
    assert not media.is_error, media.content[0].text
    text, image, audio, doc, binary = media.content
    assert (text.type, text.text) == ("text", "caption")
    assert (image.type, base64.b64decode(image.data), image.mime_type) == ("image", b"png-bytes", "image/png")
    assert (audio.type, base64.b64decode(audio.data), audio.mime_type) == ("audio", b"wav-bytes", "audio/wav")
    assert (doc.type, str(doc.resource.uri), doc.resource.text) == ("resource", "test://doc", "hello")
    assert base64.b64decode(binary.resource.blob) == b"\x00"
    assert media.structured_content is None
    assert not checked.is_error and checked.structured_content == {"count": 2} and checked.content[0].text == "two"
    assert unchecked.is_error and "a content result needs structured=" in unchecked.content[0].text
    assert forged.is_error and "holds only '$content' and '$structured', not 'extra'" in forged.content[0].text
