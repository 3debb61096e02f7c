"""Draw cards, optionally let the model analyse them in a sub-branch, and let the user guess the secret one.

The seed's example: `before` (server) draws the cards and hides a secret, `client` talks to the
model and the user, `after` (server again) reveals whether the user found the secret.
"""

import random

from pydantic import BaseModel, Field

from branchc import Context, resumable, tool

DECK = [rank + suit for suit in "♠♥♦♣" for rank in ("A", *map(str, range(2, 11)), "J", "Q", "K")]


class Params(BaseModel):
    count: int = Field(5, ge=2, le=10, description="How many cards to draw")
    analyze: bool = Field(False, description="Ask the model to analyse the hand first")
    seed: int | None = Field(None, description="Seed for a reproducible draw")


class CardChoice(BaseModel):
    card_number: int = Field(ge=1, le=10, description="Position of the card in the hand, from 1")


pick_card = tool(
    "pick_card",
    description="Draw cards with optional LLM analysis, then guess which one is the secret",
    params=Params,
    requires={"sampling", "elicitation"},
)


@pick_card.before
def before(params: Params) -> dict:
    rng = random.Random(params.seed)
    cards = rng.sample(DECK, params.count)
    return {"cards": cards, "secret": rng.choice(cards), "analyze": params.analyze}


@resumable
def analyze_cards(ctx: Context, cards: list[str]):
    result = yield ctx.sample(prompt=f"Analyze these cards: {', '.join(cards)}")
    return result.text


@pick_card.client
def client(handoff: dict, ctx: Context):
    cards = handoff["cards"]
    yield ctx.log("info", f"Drew {len(cards)} cards")

    analysis = None
    if handoff["analyze"]:
        # A fresh context: the analysis sees only its own prompt, not the caller's history.
        analysis = yield ctx.branch(analyze_cards, cards, inherit_messages=False, max_depth=1)

    hand = ", ".join(f"{number}. {card}" for number, card in enumerate(cards, 1))
    ask = f"Pick a card (1-{len(cards)}): {hand}"
    message = f"Analysis: {analysis}\n\n{ask}" if analysis else ask
    while True:
        choice = yield ctx.elicit("pick_card", message=message, schema=CardChoice, context={"cards": cards})
        if not choice.accepted:
            return {"picked": None, "cancelled": True, "analysis": analysis}
        number = choice.content.card_number
        if number <= len(cards):
            return {"picked": cards[number - 1], "cancelled": False, "analysis": analysis}
        yield ctx.log("warning", f"Card {number} is not in the hand of {len(cards)}")
        message = f"There is no card {number}. {ask}"


@pick_card.after
def after(handoff: dict, result: dict) -> dict:
    if result["cancelled"]:
        return {"success": False, "message": "Cancelled"}
    return {
        "success": True,
        "picked": result["picked"],
        "secret": handoff["secret"],
        "is_winner": result["picked"] == handoff["secret"],
    }
