"""The example tools in examples/tools/, run against a scripted MockClient, and their CLI answer files."""

import importlib.util
import sqlite3
from datetime import datetime
from pathlib import Path
from types import ModuleType

import anyio
import pytest
import yaml

from branchc import ParamsError, Tool, run_tool, tool
from branchc.testing import MockClient

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    """Import examples/tools/NAME.py by path, as the CLI does (not as a package)."""
    spec = importlib.util.spec_from_file_location(f"branchc_example_{name}", EXAMPLES / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pick_card = load_example("pick_card")
book_flight = load_example("book_flight")
tictactoe = load_example("tictactoe")
research = load_example("research")


async def run(tool_, params, client, events=None):
    return await run_tool(tool_, params, client, call_id="c1", on_event=None if events is None else events.append)


def accept(**content):
    return {"action": "accept", "content": content}


def dumped(messages):
    return [message.model_dump(mode="json") for message in messages]


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def client_result(events):
    return next(event["result"] for event in events if event["event"] == "client_result")


@pytest.mark.parametrize("name", ["pick_card", "book_flight", "tictactoe", "research"])
def test_each_example_defines_a_tool_named_like_its_file(name):
    module = load_example(name)
    defined = getattr(module, name)
    assert defined.name == name
    if defined.fn is None:  # the long form: before / client / after
        assert defined.client_fn is module.client
    else:  # the short form: the generator is the tool, its parameters the params
        assert defined.client_fn.__wrapped__ is defined.fn and defined.fn.__name__ == name


# -- pick_card ------------------------------------------------------------------------------------------

SEVEN = ["8♥", "10♠", "K♥", "3♣", "4♠"]  # the hand that seed 7 draws
HAND = "Pick a card (1-5): 1. 8♥, 2. 10♠, 3. K♥, 4. 3♣, 5. 4♠"
CARD_CHOICE_SCHEMA = {
    "properties": {
        "card_number": {
            "description": "Position of the card in the hand, from 1",
            "maximum": 10,
            "minimum": 1,
            "title": "Card Number",
            "type": "integer",
        }
    },
    "required": ["card_number"],
    "title": "CardChoice",
    "type": "object",
}


def test_pick_card_deck_and_seeded_draw():
    assert len(set(pick_card.DECK)) == 52
    assert {"7♥", "Q♠", "10♦", "A♣"} <= set(pick_card.DECK)
    assert pick_card.before(pick_card.Params(seed=7)) == {"cards": SEVEN, "secret": "8♥", "analyze": False}
    for seed in range(50):
        drawn = pick_card.before(pick_card.Params(count=10, seed=seed))
        assert len(set(drawn["cards"])) == 10
        assert drawn["secret"] in drawn["cards"]


def test_pick_card_params_are_validated():
    with pytest.raises(ParamsError, match="count"):
        anyio.run(run, pick_card.pick_card, {"count": 11}, MockClient())


@pytest.mark.anyio
async def test_pick_card_without_analysis_finds_the_secret():
    client = MockClient([], [accept(card_number=1)])
    result = await run(pick_card.pick_card, {"count": 5, "seed": 7}, client)
    assert result == {"success": True, "picked": "8♥", "secret": "8♥", "is_winner": True}
    assert client.sample_calls == []
    assert client.log_calls == [("info", "Drew 5 cards")]
    [call] = client.elicit_calls
    assert (call.key, call.message) == ("pick_card", HAND)
    assert call.requested_schema == CARD_CHOICE_SCHEMA


@pytest.mark.anyio
async def test_pick_card_with_analysis_samples_in_a_branch_and_shows_it():
    client = MockClient(["Two hearts, no pairs."], [accept(card_number=3)])
    events = []
    result = await run(pick_card.pick_card, {"count": 5, "analyze": True, "seed": 7}, client, events)
    assert result == {"success": True, "picked": "K♥", "secret": "8♥", "is_winner": False}
    [sample] = client.sample_calls
    assert dumped(sample.messages) == [user("Analyze these cards: 8♥, 10♠, K♥, 3♣, 4♠")]
    assert [call.message for call in client.elicit_calls] == [f"Analysis: Two hearts, no pairs.\n\n{HAND}"]
    branch = next(event for event in events if event["event"] == "branch")
    assert (branch["name"], branch["depth"], branch["inherit_messages"]) == ("analyze_cards", 1, False)
    assert client_result(events) == {"picked": "K♥", "cancelled": False, "analysis": "Two hearts, no pairs."}


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_pick_card_declined(action):
    client = MockClient(["A weak hand."], [{"action": action}])
    events = []
    result = await run(pick_card.pick_card, {"count": 5, "analyze": True, "seed": 7}, client, events)
    assert result == {"success": False, "message": "Cancelled"}
    assert client_result(events) == {"picked": None, "cancelled": True, "analysis": "A weak hand."}
    assert len(client.elicit_calls) == 1


@pytest.mark.anyio
async def test_pick_card_number_beyond_the_hand_is_asked_again():
    client = MockClient([], [accept(card_number=7), accept(card_number=3)])
    result = await run(pick_card.pick_card, {"count": 3, "seed": 7}, client)
    assert result == {"success": True, "picked": "K♥", "secret": "K♥", "is_winner": True}
    hand = "Pick a card (1-3): 1. 8♥, 2. 10♠, 3. K♥"
    assert [call.message for call in client.elicit_calls] == [hand, f"There is no card 7. {hand}"]
    assert client.log_calls == [("info", "Drew 3 cards"), ("warning", "Card 7 is not in the hand of 3")]


@pytest.mark.anyio
async def test_pick_card_analysis_branch_has_a_fresh_context():
    """Even when the caller has history, the analysis sample carries only its own prompt."""
    warm = tool("warm_pick_card", params=pick_card.Params, requires={"sampling", "elicitation"})
    warm.before(pick_card.before)
    warm.after(pick_card.after)

    @warm.client
    def client_with_history(handoff, ctx):
        yield ctx.sample(prompt="What game are we playing?")
        assert len(ctx.messages) == 2
        return (yield from pick_card.client(handoff, ctx))

    client = MockClient(["Guess the card.", "Spread suits."], [accept(card_number=2)])
    result = await run(warm, {"count": 5, "analyze": True, "seed": 7}, client)
    assert result == {"success": True, "picked": "10♠", "secret": "8♥", "is_winner": False}
    first, analysis = client.sample_calls
    assert dumped(first.messages) == [user("What game are we playing?")]
    assert dumped(analysis.messages) == [user("Analyze these cards: 8♥, 10♠, K♥, 3♣, 4♠")]


# -- book_flight ----------------------------------------------------------------------------------------

LIS_FOR_TWO = (
    "TP541: BER to LIS, departs 2025-09-12T07:05, 189 EUR, 4 seats left\n"
    "FR2211: BER to LIS, departs 2025-09-13T06:20, 79 EUR, 9 seats left"
)
FLIGHT_CHOICE_SCHEMA = {
    "properties": {
        "flight_id": {"description": "Id of the flight to book, e.g. TP541", "title": "Flight Id", "type": "string"}
    },
    "required": ["flight_id"],
    "title": "FlightChoice",
    "type": "object",
}


@pytest.fixture
def flights_db(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "flights.sqlite"
    monkeypatch.setenv("BRANCHC_FLIGHTS_DB", str(path))
    return path


def query(path: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(path) as connection:
        return connection.execute(sql, args).fetchall()


@pytest.mark.anyio
async def test_book_flight_books_one_row(flights_db):
    client = MockClient(["FR2211 is cheapest."], [accept(flight_id="FR2211")])
    result = await run(book_flight.book_flight, {"destination": "lis", "passengers": 2}, client)
    assert result == {
        "booked": True,
        "booking_id": 1,
        "flight": {
            "id": "FR2211",
            "origin": "BER",
            "destination": "LIS",
            "departs": "2025-09-13T06:20",
            "price": 79,
            "seats": 7,
        },
        "total_price": 158,
    }
    [sample] = client.sample_calls
    assert dumped(sample.messages) == [
        user(f"Compare these flights for 2 passenger(s) and recommend one:\n{LIS_FOR_TWO}")
    ]
    [elicit] = client.elicit_calls
    assert elicit.key == "choose_flight"
    assert elicit.message == f"FR2211 is cheapest.\n\nWhich flight should I book?\n{LIS_FOR_TWO}"
    assert elicit.requested_schema == FLIGHT_CHOICE_SCHEMA
    [(booking_id, flight_id, passengers, booked_at)] = query(flights_db, "SELECT * FROM bookings")
    assert (booking_id, flight_id, passengers) == (1, "FR2211", 2)
    assert datetime.fromisoformat(booked_at).tzinfo is not None
    assert query(flights_db, "SELECT seats FROM flights WHERE id = 'FR2211'") == [(7,)]


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_book_flight_declined_books_nothing(flights_db, action):
    client = MockClient(["Take TP541."], [{"action": action}])
    result = await run(book_flight.book_flight, {"destination": "LIS"}, client)
    assert result == {"booked": False, "message": "Booking cancelled"}
    assert query(flights_db, "SELECT COUNT(*) FROM bookings") == [(0,)]
    assert query(flights_db, "SELECT SUM(seats) FROM flights") == [(35,)]


@pytest.mark.anyio
async def test_book_flight_unknown_flight_id_is_asked_again(flights_db):
    client = MockClient(["Take TP541."], [accept(flight_id="XX999"), accept(flight_id="TP541")])
    result = await run(book_flight.book_flight, {"destination": "LIS", "passengers": 2}, client)
    assert (result["booked"], result["flight"]["id"], result["total_price"]) == (True, "TP541", 378)
    assert [call.message for call in client.elicit_calls] == [
        f"Take TP541.\n\nWhich flight should I book?\n{LIS_FOR_TWO}",
        f"There is no flight 'XX999' in the list.\n{LIS_FOR_TWO}",
    ]
    assert client.log_calls == [("warning", "Unknown flight id 'XX999'")]
    assert query(flights_db, "SELECT flight_id, passengers FROM bookings") == [("TP541", 2)]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"destination": "ZRH"}, "No flights to ZRH for 1 passenger(s)"),
        ({"destination": "BCN", "passengers": 7}, "No flights to BCN for 7 passenger(s)"),
    ],
)
async def test_book_flight_without_flights_asks_nobody(flights_db, params, message):
    client = MockClient()
    result = await run(book_flight.book_flight, params, client)
    assert result == {"booked": False, "message": message}
    assert (client.sample_calls, client.elicit_calls) == ([], [])
    assert query(flights_db, "SELECT COUNT(*) FROM bookings") == [(0,)]


@pytest.mark.anyio
async def test_book_flight_seats_taken_while_choosing_books_nothing(flights_db):
    def someone_else_books(request):
        with sqlite3.connect(flights_db) as connection:
            connection.execute("UPDATE flights SET seats = 0 WHERE id = 'TP541'")
        return accept(flight_id="TP541")

    client = MockClient(["Take TP541."], [someone_else_books])
    result = await run(book_flight.book_flight, {"destination": "LIS"}, client)
    assert result == {"booked": False, "message": "Flight TP541 no longer has 1 free seat(s)"}
    assert query(flights_db, "SELECT COUNT(*) FROM bookings") == [(0,)]


@pytest.mark.anyio
async def test_book_flight_loads_the_csv_once(flights_db):
    for number in (1, 2):
        client = MockClient(["ok"], [accept(flight_id="LH1166")] if number == 1 else [accept(flight_id="TP541")])
        result = await run(book_flight.book_flight, {"destination": "LIS"}, client)
        assert result["booking_id"] == number
    assert query(flights_db, "SELECT COUNT(*) FROM flights") == [(8,)]
    assert query(flights_db, "SELECT id, seats FROM flights WHERE destination = 'LIS' ORDER BY id") == [
        ("FR2211", 9),
        ("LH1166", 0),
        ("TP541", 3),
    ]
    # LH1166 is full now, so a third search no longer offers it.
    assert [f["id"] for f in book_flight.before(book_flight.Params(destination="LIS"))["flights"]] == [
        "TP541",
        "FR2211",
    ]


# -- tictactoe ------------------------------------------------------------------------------------------

EMPTY = "0 | 1 | 2\n---------\n3 | 4 | 5\n---------\n6 | 7 | 8"
MOVE_SCHEMA = {
    "properties": {
        "position": {
            "description": "Square to take, 0-8 (top left to bottom right)",
            "maximum": 8,
            "minimum": 0,
            "title": "Position",
            "type": "integer",
        }
    },
    "required": ["position"],
    "title": "Move",
    "type": "object",
}


def board(*rows: str) -> str:
    return "\n---------\n".join(rows)


def prompt(grid: str, note: str = "") -> str:
    return f"Pick a move. Board:\n{grid}\n{note}Answer with the number of a free square."


def play(answers: list[str], positions: list, **params):
    """Run a game: model answers, then user positions (an int, or an answer dict)."""
    elicits = [accept(position=p) if isinstance(p, int) else p for p in positions]
    client = MockClient(answers, elicits)
    return anyio.run(run, tictactoe.tictactoe, params, client), client


def moves(*pairs: str) -> list[dict]:
    return [{"player": pair[0], "position": int(pair[1])} for pair in pairs]


def test_tictactoe_format_board_and_parse_move():
    assert tictactoe.format_board([" "] * 9) == EMPTY
    assert tictactoe.format_board(["X", " ", "O", " ", "X", " ", " ", " ", "O"]) == board(
        "X | 1 | O", "3 | X | 5", "6 | 7 | O"
    )
    assert tictactoe.parse_move("4") == 4
    assert tictactoe.parse_move("I'll take square 6, then 2") == 6
    assert tictactoe.parse_move("12 is not a square, so 3") == 3
    assert tictactoe.parse_move("9") is None
    assert tictactoe.parse_move("the centre") is None


def test_tictactoe_model_wins():
    result, client = play(["4", "0", "6", "3"], [1, 8, 2])
    assert {k: v for k, v in result.items() if k != "history"} == {
        "winner": "X",
        "outcome": "model wins",
        "board": ["X", "O", "O", "X", "X", " ", "X", " ", "O"],
        "moves": moves("X4", "O1", "X0", "O8", "X6", "O2", "X3"),
    }
    assert [call.messages[-1].content for call in client.sample_calls] == [
        prompt(EMPTY),
        prompt(board("0 | O | 2", "3 | X | 5", "6 | 7 | 8")),
        prompt(board("X | O | 2", "3 | X | 5", "6 | 7 | O")),
        prompt(board("X | O | O", "3 | X | 5", "X | 7 | O")),
    ]
    assert [len(call.messages) for call in client.sample_calls] == [1, 5, 9, 13]
    assert [call.message for call in client.elicit_calls] == [
        f"Your turn as O. Board:\n{board('0 | 1 | 2', '3 | X | 5', '6 | 7 | 8')}",
        f"Your turn as O. Board:\n{board('X | O | 2', '3 | X | 5', '6 | 7 | 8')}",
        f"Your turn as O. Board:\n{board('X | O | 2', '3 | X | 5', 'X | 7 | O')}",
    ]
    assert all(call.key == "pickMove" and call.requested_schema == MOVE_SCHEMA for call in client.elicit_calls)
    assert len(result["history"]) == 4 * 2 + 3 * 2
    calls = [m["tool_calls"][0] for m in result["history"] if m.get("tool_calls")]
    assert [(c["id"], c["function"]["arguments"]["userMove"]) for c in calls] == [
        ("elicit_c1_1", 1),
        ("elicit_c1_2", 8),
        ("elicit_c1_3", 2),
    ]
    # boardState is the board the user saw, before their move.
    assert [c["function"]["arguments"]["boardState"] for c in calls] == [
        call.message.removeprefix("Your turn as O. Board:\n") for call in client.elicit_calls
    ]
    assert [m["content"] for m in result["history"] if m["role"] == "tool"] == [
        '{"position":1}',
        '{"position":8}',
        '{"position":2}',
    ]
    assert client.log_calls == []


def test_tictactoe_user_wins_moving_first_as_x():
    result, client = play(["3", "4"], [0, 1, 2], user_symbol="X", model_first=False)
    assert {k: v for k, v in result.items() if k != "history"} == {
        "winner": "X",
        "outcome": "user wins",
        "board": ["X", "X", "X", "O", "O", " ", " ", " ", " "],
        "moves": moves("X0", "O3", "X1", "O4", "X2"),
    }
    assert client.elicit_calls[0].message == f"Your turn as X. Board:\n{EMPTY}"
    assert dumped(client.sample_calls[0].messages)[-1] == user(prompt(board("X | 1 | 2", "3 | 4 | 5", "6 | 7 | 8")))
    # The model's first sample already sees the user's opening move as an exchange.
    assert [m["role"] for m in dumped(client.sample_calls[0].messages)] == ["assistant", "tool", "user"]


def test_tictactoe_draw():
    result, client = play(["4", "2", "3", "1", "8"], [0, 6, 5, 7])
    assert {k: v for k, v in result.items() if k != "history"} == {
        "winner": None,
        "outcome": "draw",
        "board": ["O", "X", "X", "X", "X", "O", "O", "O", "X"],
        "moves": moves("X4", "O0", "X2", "O6", "X3", "O5", "X1", "O7", "X8"),
    }
    assert (len(client.sample_calls), len(client.elicit_calls)) == (5, 4)


def test_tictactoe_illegal_model_move_is_sampled_again_with_a_note():
    result, client = play(["4", "4", "no idea", "2"], [0, {"action": "decline"}])
    assert {k: v for k, v in result.items() if k != "history"} == {
        "winner": None,
        "outcome": "user quit",
        "board": ["O", " ", "X", " ", "X", " ", " ", " ", " "],
        "moves": moves("X4", "O0", "X2"),
    }
    grid = board("O | 1 | 2", "3 | X | 5", "6 | 7 | 8")
    assert [call.messages[-1].content for call in client.sample_calls] == [
        prompt(EMPTY),
        prompt(grid),
        prompt(grid, "'4' is not a free square. "),
        prompt(grid, "'no idea' is not a free square. "),
    ]
    # Each retry sees the rejected answers before it.
    assert dumped(client.sample_calls[3].messages)[4:] == [
        user(prompt(grid)),
        assistant("4"),
        user(prompt(grid, "'4' is not a free square. ")),
        assistant("no idea"),
        user(prompt(grid, "'no idea' is not a free square. ")),
    ]
    assert client.log_calls == [("warning", "Illegal model move '4'"), ("warning", "Illegal model move 'no idea'")]


def test_tictactoe_model_forfeits_after_three_illegal_moves():
    result, client = play(["9", "the centre", "12"], [])
    assert {k: v for k, v in result.items() if k != "history"} == {
        "winner": "O",
        "outcome": "model forfeits",
        "board": [" "] * 9,
        "moves": [],
    }
    assert len(client.sample_calls) == 3
    assert client.elicit_calls == []
    assert [level for level, _ in client.log_calls] == ["warning"] * 3
    assert [m["content"] for m in result["history"]] == [
        prompt(EMPTY),
        "9",
        prompt(EMPTY, "'9' is not a free square. "),
        "the centre",
        prompt(EMPTY, "'the centre' is not a free square. "),
        "12",
    ]


def test_tictactoe_illegal_user_move_is_asked_again():
    result, client = play(["4", "8"], [4, 0, {"action": "cancel"}])
    assert (result["outcome"], result["moves"]) == ("user quit", moves("X4", "O0", "X8"))
    grid = board("0 | 1 | 2", "3 | X | 5", "6 | 7 | 8")
    assert [call.message for call in client.elicit_calls] == [
        f"Your turn as O. Board:\n{grid}",
        f"Square 4 is taken, pick a free one. Board:\n{grid}",
        f"Your turn as O. Board:\n{board('O | 1 | 2', '3 | X | 5', '6 | 7 | X')}",
    ]
    assert client.log_calls == [("warning", "Square 4 is taken")]
    # Only the legal answer enters the history; its id counts every elicitation of the call.
    exchange = [m for m in result["history"] if m["role"] == "tool"]
    assert exchange == [{"role": "tool", "tool_call_id": "elicit_c1_2", "content": '{"position":0}'}]


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_tictactoe_user_quits(action):
    result, client = play(["4"], [{"action": action}])
    assert result == {
        "winner": None,
        "outcome": "user quit",
        "board": [" ", " ", " ", " ", "X", " ", " ", " ", " "],
        "moves": moves("X4"),
        "history": [user(prompt(EMPTY)), assistant("4")],
    }
    assert len(client.elicit_calls) == 1


def test_tictactoe_history_has_the_seeds_shape():
    """The seed's "Resulting Conversation History" after model, user, model."""
    result, client = play(["4", "2"], [0, {"action": "decline"}])
    expected = [
        user(prompt(EMPTY)),
        assistant("4"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "elicit_c1_1",
                    "type": "function",
                    "function": {
                        "name": "pickMove",
                        "arguments": {"boardState": board("0 | 1 | 2", "3 | X | 5", "6 | 7 | 8"), "userMove": 0},
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "elicit_c1_1", "content": '{"position":0}'},
        user(prompt(board("O | 1 | 2", "3 | X | 5", "6 | 7 | 8"))),
        assistant("2"),
    ]
    assert result["history"] == expected
    # What the model saw: the whole history so far, then the new prompt.
    assert dumped(client.sample_calls[0].messages) == expected[:1]
    assert dumped(client.sample_calls[1].messages) == expected[:5]


# -- research -------------------------------------------------------------------------------------------


def research_prompt(angle: str) -> str:
    return f"Research CRDTs, focusing on its {angle}. Summarize in one paragraph."


@pytest.mark.anyio
async def test_research_maps_three_fresh_branches_and_reduces():
    client = MockClient(["Born in 2011.", "Used in editors.", "Metadata growth.", "CRDTs: mature, some costs."])
    events = []
    result = await run(research.research, {"topic": "CRDTs"}, client, events)
    assert result == {
        "topic": "CRDTs",
        "findings": [
            {"angle": "history", "summary": "Born in 2011."},
            {"angle": "current state", "summary": "Used in editors."},
            {"angle": "open problems", "summary": "Metadata growth."},
        ],
        "answer": "CRDTs: mature, some costs.",
    }
    assert [dumped(call.messages) for call in client.sample_calls] == [
        [user(research_prompt("history"))],
        [user(research_prompt("current state"))],
        [user(research_prompt("open problems"))],
        [
            user(
                "Combine these findings about CRDTs into one answer:\n\n"
                "History: Born in 2011.\n\nCurrent state: Used in editors.\n\nOpen problems: Metadata growth."
            )
        ],
    ]
    branches = [event for event in events if event["event"] == "branch"]
    assert [(b["branch"], b["name"], b["inherit_messages"]) for b in branches] == [
        ("0.1", "investigate", False),
        ("0.2", "investigate", False),
        ("0.3", "investigate", False),
    ]
    assert client.notify_calls == [("Investigating CRDTs from 3 angles", 0, 3), ("Combining the findings", 3, 3)]
    assert client.log_calls == [
        ("info", "Finished: history"),
        ("info", "Finished: current state"),
        ("info", "Finished: open problems"),
    ]


class SlowClient(MockClient):
    """Answers samples after yielding to the event loop, and counts how many are in flight at once."""

    in_flight = 0
    most_in_flight = 0

    async def sample(self, request):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await anyio.sleep(0.01)
        self.in_flight -= 1
        return await super().sample(request)


@pytest.mark.anyio
async def test_research_branches_run_concurrently():
    client = SlowClient(["a", "b", "c", "all"])
    result = await run(research.research, {"topic": "CRDTs"}, client)
    assert client.most_in_flight == 3
    assert result["answer"] == "all"
    assert [f["angle"] for f in result["findings"]] == ["history", "current state", "open problems"]


# -- the CLI's scripted answers -------------------------------------------------------------------------

RESPONSES = {
    "pick_card": ({"count": 5, "analyze": True}, lambda r: r["success"] is True and r["picked"] is not None),
    "book_flight": ({"destination": "LIS"}, lambda r: r["booked"] is True and r["flight"]["id"] == "TP541"),
    "tictactoe": ({}, lambda r: r["outcome"] == "model wins" and r["winner"] == "X"),
    "research": (
        {"topic": "solid-state batteries"},
        lambda r: len(r["findings"]) == 3 and r["answer"].startswith("Solid"),
    ),
    # this repository's own last commit (CI clones it whole)
    "git_diff": ({"repo": str(EXAMPLES.parent)}, lambda r: r.startswith("diff --git a/")),
    "travel_agent": ({"question": "Is it warm in Lisbon today?"}, lambda r: "24 °C" in r["answer"]),
}


def test_every_example_has_a_responses_file():
    assert sorted(path.stem for path in (EXAMPLES / "responses").glob("*.yaml")) == sorted(RESPONSES)
    assert sorted(path.stem for path in (EXAMPLES / "tools").glob("*.py")) == sorted(RESPONSES)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(RESPONSES))
async def test_responses_file_runs_the_tool_to_completion(name, flights_db):
    script = yaml.safe_load((EXAMPLES / "responses" / f"{name}.yaml").read_text(encoding="utf-8"))
    assert set(script) <= {"sample", "elicit"}
    client = MockClient(script.get("sample", []), script.get("elicit", []))
    params, check = RESPONSES[name]
    module = load_example(name)
    tools = {value.name: value for value in vars(module).values() if isinstance(value, Tool)}  # ctx.call_tool's
    result = await run_tool(getattr(module, name), params, client, call_id="c1", tools=tools)
    assert check(result), result
    # Every scripted answer is used: none is missing, none is left over.
    assert len(client.sample_calls) == len(script.get("sample", []))
    assert len(client.elicit_calls) == len(script.get("elicit", []))


@pytest.mark.anyio
async def test_the_agent_loop_runs_the_models_tool_use_and_goes_on_from_the_results():
    module = load_example("travel_agent")
    script = yaml.safe_load((EXAMPLES / "responses" / "travel_agent.yaml").read_text(encoding="utf-8"))
    client = MockClient(script["sample"], [])
    tools = {"airport": module.airport, "weather": module.weather}
    result = await run_tool(module.travel_agent, {"question": "Is it warm in Lisbon today?"}, client, tools=tools)
    assert result["answer"].startswith("Yes: it is sunny")
    first, second, third = client.sample_calls
    assert [spec.name for spec in first.tools] == ["airport", "weather"]
    assert first.tools[0].input_schema["properties"]["city"]["type"] == "string"
    # each next sample holds the model's tool_use and the tool's real result, under the model's own call id
    kinds = [(m.role, getattr(m, "tool_call_id", None)) for m in third.messages]
    assert kinds == [("user", None), ("assistant", None), ("tool", "call_1"), ("assistant", None), ("tool", "call_2")]
    assert third.messages[2].content == '{"city":"Lisbon","code":"LIS"}'
    assert third.messages[4].content == '{"code":"LIS","weather":"sunny, 24 °C"}'
    assert len(second.messages) == 3
    assert client.tool_calls == []  # both are tools of this server: none reached the client
