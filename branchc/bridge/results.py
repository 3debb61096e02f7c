"""What a tools/call answers: the tool's result (JSON, or content blocks), or a tool error the model can read."""

from __future__ import annotations

import json
import os
import sysconfig
import traceback
from pathlib import Path
from typing import Any

import mcp.types as types
from pydantic import TypeAdapter, ValidationError

from ..runtime.content import ContentError
from ..runtime.content import split as split_content
from ..runtime.errors import JsonDataError, ToolPhaseError

__all__ = ["describe_failure", "error_result", "result_of", "where_it_failed"]


# Frames in these folders are not the tool's own code: branchc, the standard library, installed packages.
_NOT_TOOL_CODE = tuple(
    {str(Path(__file__).resolve().parents[1])} | {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
)


_BLOCKS = TypeAdapter(list[types.ContentBlock])


def error_result(message: str) -> types.CallToolResult:
    """A tool error the calling model can read (and the server goes on serving)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def result_of(value: Any) -> types.CallToolResult:
    """The tool's result as text (JSON), and as structured content when it is an object; a content
    result (`branchc.content.result(...)`) as its blocks, and its structured content if it has one."""
    try:
        blocks, structured = split_content(value)
        if blocks is not None:
            return types.CallToolResult(content=_BLOCKS.validate_python(blocks), structured_content=structured)
    except ContentError as error:
        return error_result(str(error))
    except ValidationError as error:
        return error_result(f"the tool's content result has a block MCP cannot carry: {error}")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    structured = value if isinstance(value, dict) else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)


def where_it_failed(error: BaseException) -> str | None:
    """`file:line` of the innermost frame in the tool's own code (not branchc's, not a library's)."""
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        filename = frame.f_code.co_filename
        if not filename.startswith(_NOT_TOOL_CODE) and not filename.startswith("<"):
            found = f"{os.path.relpath(filename)}:{line}"
    return found


def describe_failure(error: BaseException) -> str:
    if isinstance(error, ToolPhaseError):
        cause = error.error
        if getattr(cause, "names_its_place", False):  # a workflow's error: its YAML file, line and step
            return f"{error.tool}: {cause}"
        place = where_it_failed(cause)
        at = f" at {place}" if place else ""
        return f"{error.tool}: {error.phase}() failed{at}: {type(cause).__name__}: {cause}"
    if isinstance(error, JsonDataError) and error.phase is not None:
        return str(error)  # names the phase function's file:line and every bad value already
    return f"{type(error).__name__}: {error}"
