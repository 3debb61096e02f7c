"""docs/authoring/: the same card game with the SDK's MCPServer and with branchc's short form gives the
same schema, asks the same questions and returns the same result, with the real mcp client."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import mcp.types as types
import pytest
from _bridge_support import KEY, within
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc.bridge.loading import load_served_tools
from branchc.bridge.server import create_server

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]
warnings.simplefilter("ignore", MCPDeprecationWarning)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "authoring"
ARGS = {"count": 4, "analyze": True, "seed": 7}


def mcpserver():
    spec = importlib.util.spec_from_file_location("pick_card_mcpserver", DOCS / "pick_card_mcpserver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.mcp


class Script:
    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.forms: list[tuple[str, dict]] = []
        self.picks = [7, 2]  # one card beyond the hand first: asked again

    async def sampling(self, ctx, params):
        self.prompts.append(params.messages[-1].content_as_list[0].text)
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text="Two hearts.")
        )

    async def elicitation(self, ctx, params):
        self.forms.append((params.message, params.requested_schema))
        return types.ElicitResult(action="accept", content={"card_number": self.picks[len(self.forms) - 1]})


async def play(server, mode: str) -> tuple[dict, dict, Script]:
    script = Script()
    async with Client(
        server, mode=mode, sampling_callback=script.sampling, elicitation_callback=script.elicitation
    ) as client:
        [listed] = [t for t in (await client.list_tools()).tools if t.name == "pick_card"]
        result = await within(30, client.call_tool("pick_card", ARGS))
    assert not result.is_error, result.content
    return listed.input_schema, json.loads(result.content[0].text), script


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_same_tool_in_both_styles_plays_the_same_game(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    sdk_schema, sdk_result, sdk = await play(mcpserver(), "legacy")  # MCPServer's tool needs the back-channel
    branchc_server = create_server(load_served_tools(DOCS / "pick_card_branchc.py"), state_key=KEY)
    schema, result, ours = await play(branchc_server, mode)
    assert result == sdk_result == {"success": True, "picked": "10♠", "secret": "8♥", "is_winner": False}
    assert ours.prompts == sdk.prompts == ["Analyze these cards: 8♥, 10♠, K♥, 3♣"]
    assert [message for message, _ in ours.forms] == [message for message, _ in sdk.forms]
    assert ours.forms[0][0].startswith("Analysis: Two hearts.\n\nPick a card (1-4)")
    assert schema["properties"] == sdk_schema["properties"]
