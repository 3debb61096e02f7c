"""examples/tools/pick_card.py written in branchc's short form.

For comparison with pick_card_mcpserver.py (the same tool with the SDK's MCPServer). Compiled
by `branchc serve`, this one runs in both protocol eras: on 2026-07-28 each round's state is
the generator's continuation, sealed in `request_state`. Serve it with
`branchc serve docs/authoring/pick_card_branchc.py`, or mount it on a server of your own.
"""

import random
from typing import Annotated

from pydantic import BaseModel, Field

from branchc import Context, resumable, tool

DECK = [rank + suit for suit in "♠♥♦♣" for rank in ("A", *map(str, range(2, 11)), "J", "Q", "K")]


class CardChoice(BaseModel):
    card_number: int = Field(ge=1, le=10, description="Position of the card in the hand, from 1")


@resumable
def analyze_cards(ctx: Context, cards: list[str]):
    result = yield ctx.sample(prompt=f"Analyze these cards: {', '.join(cards)}")
    return result.text


@tool(requires={"sampling", "elicitation"}, title="Pick a card")
def pick_card(
    ctx: Context,
    count: Annotated[int, Field(ge=2, le=10)] = 5,
    analyze: bool = False,
    seed: int | None = None,
):
    """Draw cards with optional LLM analysis, then guess which one is the secret.

    Args:
        count: How many cards to draw
        analyze: Ask the model to analyse the hand first
        seed: Seed for a reproducible draw
    """
    rng = random.Random(seed)
    cards = rng.sample(DECK, count)
    secret = rng.choice(cards)
    yield ctx.log("info", f"Drew {len(cards)} cards")

    analysis = None
    if analyze:  # a sub-branch with a fresh context: it sees only its own prompt
        analysis = yield ctx.branch(analyze_cards, cards, inherit_messages=False)

    hand = ", ".join(f"{number}. {card}" for number, card in enumerate(cards, 1))
    ask = f"Pick a card (1-{len(cards)}): {hand}"
    message = f"Analysis: {analysis}\n\n{ask}" if analysis else ask
    while True:
        choice = yield ctx.elicit("pick_card", message=message, schema=CardChoice, context={"cards": cards})
        if not choice.accepted:
            return {"success": False, "message": "Cancelled"}
        number = choice.content.card_number
        if number <= len(cards):
            break
        yield ctx.log("warning", f"Card {number} is not in the hand of {len(cards)}")
        message = f"There is no card {number}. {ask}"
    picked = cards[number - 1]
    return {"success": True, "picked": picked, "secret": secret, "is_winner": picked == secret}
