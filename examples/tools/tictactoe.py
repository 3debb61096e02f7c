"""Tic-tac-toe between the model (sampling) and the user (elicitation), with the whole game as history.

The seed "elicit exchange accumulation": model turns are plain user/assistant messages, user turns
are the elicit exchanges (`result.exchange.with_arguments(...)`), and every sample sees all of them.
"""

import re
from typing import Literal

from pydantic import BaseModel, Field

from branchc import Context, Message, tool

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
MAX_TRIES = 3


class Move(BaseModel):
    position: int = Field(ge=0, le=8, description="Square to take, 0-8 (top left to bottom right)")


def format_board(board: list[str]) -> str:
    """Free squares show their number, taken ones their symbol."""
    cells = [str(i) if mark == " " else mark for i, mark in enumerate(board)]
    return "\n---------\n".join(" | ".join(cells[row : row + 3]) for row in (0, 3, 6))


def parse_move(text: str) -> int | None:
    """The first number 0-8 in the model's answer."""
    found = re.search(r"(?<!\d)[0-8](?!\d)", text)
    return int(found.group()) if found else None


def winner_of(board: list[str]) -> str | None:
    for a, b, c in LINES:
        if board[a] != " " and board[a] == board[b] == board[c]:
            return board[a]
    return None


@tool(requires={"sampling", "elicitation"}, title="Tic-tac-toe")
def tictactoe(ctx: Context, user_symbol: Literal["X", "O"] = "O", model_first: bool = True):
    """Play tic-tac-toe against the model.

    Args:
        user_symbol: The user's mark; the model plays the other one.
        model_first: Whether the model makes the first move.
    """
    user = user_symbol
    model = "X" if user == "O" else "O"
    board = [" "] * 9
    moves = []
    history = []
    player = model if model_first else user
    outcome = None

    while outcome is None:
        if player == model:
            note = ""
            for _ in range(MAX_TRIES):
                prompt = f"Pick a move. Board:\n{format_board(board)}\n{note}Answer with the number of a free square."
                response = yield ctx.sample(messages=[*history, Message(role="user", content=prompt)])
                history += [Message(role="user", content=prompt), Message(role="assistant", content=response.text)]
                square = parse_move(response.text)
                if square is not None and board[square] == " ":
                    break
                yield ctx.log("warning", f"Illegal model move {response.text!r}")
                note = f"{response.text!r} is not a free square. "
            else:
                outcome = "model forfeits"
                break
        else:
            message = f"Your turn as {user}. Board:\n{format_board(board)}"
            while True:
                result = yield ctx.elicit(
                    "pickMove",
                    message=message,
                    schema=Move,
                    context={"board": board, "move_history": moves, "model_symbol": model, "user_symbol": user},
                )
                if not result.accepted or board[result.content.position] == " ":
                    break
                yield ctx.log("warning", f"Square {result.content.position} is taken")
                message = f"Square {result.content.position} is taken, pick a free one. Board:\n{format_board(board)}"
            if not result.accepted:
                outcome = "user quit"
                break
            square = result.content.position
            history.extend(
                result.exchange.with_arguments(
                    lambda c, move=square: {"boardState": format_board(c["board"]), "userMove": move}
                )
            )

        board[square] = player
        moves.append({"player": player, "position": square})
        if winner_of(board):
            outcome = "model wins" if player == model else "user wins"
        elif " " not in board:
            outcome = "draw"
        player = user if player == model else model

    winner = {"model wins": model, "user wins": user, "model forfeits": user}.get(outcome)
    return {
        "winner": winner,
        "outcome": outcome,
        "board": board,
        "moves": moves,
        "history": [m.model_dump(mode="json") for m in history],
    }
