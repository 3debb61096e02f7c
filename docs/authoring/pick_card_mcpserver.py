"""examples/tools/pick_card.py written with the SDK's MCPServer, as a plain SDK user would.

For comparison with pick_card_branchc.py (the same tool in branchc's short form): the flow is
the same, but it runs only while the connection can carry server requests (the handshake era):
on 2026-07-28, create_message and elicit raise, and the tool would have to return
InputRequiredResult and rebuild its own state each round.
"""

import random

import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

DECK = [rank + suit for suit in "♠♥♦♣" for rank in ("A", *map(str, range(2, 11)), "J", "Q", "K")]


class CardChoice(BaseModel):
    card_number: int = Field(ge=1, le=10, description="Position of the card in the hand, from 1")


mcp = MCPServer("cards")


@mcp.tool(title="Pick a card")
async def pick_card(
    ctx: Context,
    count: int = Field(5, ge=2, le=10, description="How many cards to draw"),
    analyze: bool = Field(False, description="Ask the model to analyse the hand first"),
    seed: int | None = Field(None, description="Seed for a reproducible draw"),
) -> dict:
    """Draw cards with optional LLM analysis, then guess which one is the secret."""
    rng = random.Random(seed)
    cards = rng.sample(DECK, count)
    secret = rng.choice(cards)
    await ctx.info(f"Drew {len(cards)} cards")

    analysis = None
    if analyze:
        prompt = f"Analyze these cards: {', '.join(cards)}"
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
        result = await ctx.session.create_message(messages=[message], max_tokens=1024)
        analysis = result.content.text if result.content.type == "text" else ""

    hand = ", ".join(f"{number}. {card}" for number, card in enumerate(cards, 1))
    ask = f"Pick a card (1-{len(cards)}): {hand}"
    message = f"Analysis: {analysis}\n\n{ask}" if analysis else ask
    while True:
        choice = await ctx.elicit(message, CardChoice)
        if choice.action != "accept":
            return {"success": False, "message": "Cancelled"}
        number = choice.data.card_number
        if number <= len(cards):
            break
        await ctx.warning(f"Card {number} is not in the hand of {len(cards)}")
        message = f"There is no card {number}. {ask}"
    picked = cards[number - 1]
    return {"success": True, "picked": picked, "secret": secret, "is_winner": picked == secret}


if __name__ == "__main__":
    mcp.run()
