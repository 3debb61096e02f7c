"""Tool results as MCP content blocks: text, images, audio, embedded resources.

A tool's result is JSON data. By default the bridge answers it as one text block (the JSON),
plus structured content when it is an object. A result that needs other kinds of content is
made with `result(...)` from the block helpers here:

    from branchc import content

    return content.result(
        content.text("Here is the chart"),
        content.image(png_bytes, "image/png"),
        structured={"points": 12},
    )

The blocks are JSON data in MCP's own wire shape (binary data base64-encoded), so such a
result crosses phases, rounds and hosts like any other. It is a dict with the reserved key
`"$content"` (the list of blocks) and, optionally, `"$structured"` (the structured content,
which is what a tool's `output=` model checks). A dict result holding `"$content"` is always
read as a content result, so `"$content"` is not a key for plain results.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from .errors import BranchcError

__all__ = ["CONTENT_KEY", "STRUCTURED_KEY", "ContentError", "audio", "image", "resource", "result", "split", "text"]

CONTENT_KEY = "$content"
STRUCTURED_KEY = "$structured"
_KINDS = ("text", "image", "audio", "resource", "resource_link")


class ContentError(BranchcError, ValueError):
    """A content block or content result that MCP cannot carry; the message says which and why."""


def text(value: str) -> dict[str, Any]:
    """A text block."""
    if not isinstance(value, str):
        raise ContentError(f"content.text(...) takes a str, not {type(value).__name__}")
    return {"type": "text", "text": value}


def image(data: bytes | str, mime_type: str) -> dict[str, Any]:
    """An image block: `data` as bytes, or already base64-encoded as str."""
    return {"type": "image", "data": _base64(data, "content.image"), "mimeType": _mime(mime_type, "content.image")}


def audio(data: bytes | str, mime_type: str) -> dict[str, Any]:
    """An audio block: `data` as bytes, or already base64-encoded as str."""
    return {"type": "audio", "data": _base64(data, "content.audio"), "mimeType": _mime(mime_type, "content.audio")}


def resource(
    uri: str, *, text: str | None = None, blob: bytes | str | None = None, mime_type: str | None = None
) -> dict[str, Any]:
    """An embedded resource: exactly one of `text` or `blob` (bytes, or base64 as str)."""
    if not isinstance(uri, str) or not uri:
        raise ContentError(f"content.resource(uri={uri!r}): give the resource's URI, like 'file:///notes.txt'")
    if (text is None) == (blob is None):
        raise ContentError(f"content.resource({uri!r}): give exactly one of text= or blob=")
    body: dict[str, Any] = {"uri": uri}
    if mime_type is not None:
        body["mimeType"] = _mime(mime_type, "content.resource")
    if text is not None:
        if not isinstance(text, str):
            raise ContentError(f"content.resource({uri!r}, text=...) takes a str, not {type(text).__name__}")
        body["text"] = text
    else:
        body["blob"] = _base64(blob, "content.resource")  # type: ignore[arg-type]
    return {"type": "resource", "resource": body}


def result(*blocks: dict[str, Any], structured: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tool result of these content blocks (and, optionally, structured content)."""
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") not in _KINDS:
            raise ContentError(
                f"content.result(...): block {index} is {block!r}; make blocks with content.text, "
                f"content.image, content.audio or content.resource"
            )
    if structured is not None and not isinstance(structured, dict):
        raise ContentError(f"content.result(structured=...) takes a dict, not {type(structured).__name__}")
    out: dict[str, Any] = {CONTENT_KEY: list(blocks)}
    if structured is not None:
        out[STRUCTURED_KEY] = structured
    return out


def split(value: Any) -> tuple[list[Any] | None, Any]:
    """(the content blocks, the structured content) of a content result; (None, value) for any other result."""
    if not (isinstance(value, dict) and CONTENT_KEY in value):
        return None, value
    if extra := sorted(set(value) - {CONTENT_KEY, STRUCTURED_KEY}):
        raise ContentError(
            f"a result with the key {CONTENT_KEY!r} is a content result, which holds only {CONTENT_KEY!r} and "
            f"{STRUCTURED_KEY!r}, not {', '.join(map(repr, extra))}; make it with content.result(...), or rename it"
        )
    blocks = value[CONTENT_KEY]
    if not isinstance(blocks, list):
        raise ContentError(f"a content result's {CONTENT_KEY!r} is a list of blocks, not {type(blocks).__name__}")
    return blocks, value.get(STRUCTURED_KEY)


def _base64(data: bytes | str, where: str) -> str:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(data)).decode("ascii")
    if isinstance(data, str):
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ContentError(f"{where}(...): the str data is not base64; pass the raw bytes instead") from None
        return data
    raise ContentError(f"{where}(...): data is bytes (or base64 as str), not {type(data).__name__}")


def _mime(mime_type: str, where: str) -> str:
    if not isinstance(mime_type, str) or "/" not in mime_type:
        raise ContentError(f"{where}(...): mime_type {mime_type!r} is not a MIME type like 'image/png'")
    return mime_type
