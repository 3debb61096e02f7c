"""Book a flight: search a real SQLite database, let the model compare the options, let the user choose.

The database lives only on the server: `before` queries it and hands plain data to `client`;
`after` writes the booking. The file is `$BRANCHC_FLIGHTS_DB`, by default `branchc-flights.sqlite`
in the temp folder, and is filled from `examples/data/flights.csv` on first use.
"""

import csv
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from branchc import Context, tool

FLIGHTS_CSV = Path(__file__).parent.parent / "data" / "flights.csv"


class Params(BaseModel):
    destination: str = Field(description="Airport code of the destination, e.g. LIS")
    passengers: int = Field(1, ge=1, le=9)


class FlightChoice(BaseModel):
    flight_id: str = Field(description="Id of the flight to book, e.g. TP541")


book_flight = tool(
    "book_flight",
    description="Find flights to a destination, compare them and book the one the user picks",
    params=Params,
    requires={"sampling", "elicitation"},
)


def db_path() -> str:
    return os.environ.get("BRANCHC_FLIGHTS_DB") or os.path.join(tempfile.gettempdir(), "branchc-flights.sqlite")


@contextmanager
def open_db() -> Iterator[sqlite3.Connection]:
    """A connection in one transaction; creates the tables (flights from the CSV) when missing."""
    connection = sqlite3.connect(db_path())
    connection.row_factory = sqlite3.Row
    try:
        with connection:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "flights" not in tables:
                connection.execute(
                    "CREATE TABLE flights (id TEXT PRIMARY KEY, origin TEXT, destination TEXT, departs TEXT, "
                    "price INTEGER, seats INTEGER)"
                )
                with FLIGHTS_CSV.open(newline="", encoding="utf-8") as rows:
                    connection.executemany(
                        "INSERT INTO flights VALUES (:id, :origin, :destination, :departs, :price, :seats)",
                        csv.DictReader(rows),
                    )
            connection.execute(
                "CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "flight_id TEXT NOT NULL REFERENCES flights(id), passengers INTEGER NOT NULL, booked_at TEXT NOT NULL)"
            )
            yield connection
    finally:
        connection.close()


def describe(flight: dict) -> str:
    return (
        f"{flight['id']}: {flight['origin']} to {flight['destination']}, departs {flight['departs']}, "
        f"{flight['price']} EUR, {flight['seats']} seats left"
    )


@book_flight.before
def before(params: Params) -> dict:
    with open_db() as db:
        rows = db.execute(
            "SELECT * FROM flights WHERE destination = ? AND seats >= ? ORDER BY departs",
            (params.destination.upper(), params.passengers),
        ).fetchall()
    return {
        "destination": params.destination.upper(),
        "passengers": params.passengers,
        "flights": list(map(dict, rows)),
    }


@book_flight.client
def client(handoff: dict, ctx: Context):
    flights = {flight["id"]: flight for flight in handoff["flights"]}
    who = f"{handoff['passengers']} passenger(s)"
    if not flights:
        return {"flight_id": None, "message": f"No flights to {handoff['destination']} for {who}"}

    listing = "\n".join(map(describe, flights.values()))
    analysis = yield ctx.sample(prompt=f"Compare these flights for {who} and recommend one:\n{listing}")

    message = f"{analysis.text}\n\nWhich flight should I book?\n{listing}"
    while True:
        choice = yield ctx.elicit("choose_flight", message=message, schema=FlightChoice)
        if not choice.accepted:
            return {"flight_id": None, "message": "Booking cancelled"}
        if choice.content.flight_id in flights:
            return {"flight_id": choice.content.flight_id}
        yield ctx.log("warning", f"Unknown flight id {choice.content.flight_id!r}")
        message = f"There is no flight {choice.content.flight_id!r} in the list.\n{listing}"


@book_flight.after
def after(handoff: dict, result: dict) -> dict:
    flight_id, passengers = result["flight_id"], handoff["passengers"]
    if flight_id is None:
        return {"booked": False, "message": result["message"]}
    with open_db() as db:
        # The seats may have gone while the user was choosing: take them only if still there.
        taken = db.execute(
            "UPDATE flights SET seats = seats - ? WHERE id = ? AND seats >= ?", (passengers, flight_id, passengers)
        ).rowcount
        if not taken:
            return {"booked": False, "message": f"Flight {flight_id} no longer has {passengers} free seat(s)"}
        booking = db.execute(
            "INSERT INTO bookings (flight_id, passengers, booked_at) VALUES (?, ?, ?)",
            (flight_id, passengers, datetime.now(UTC).isoformat(timespec="seconds")),
        )
        flight = dict(db.execute("SELECT * FROM flights WHERE id = ?", (flight_id,)).fetchone())
    return {
        "booked": True,
        "booking_id": booking.lastrowid,
        "flight": flight,
        "total_price": flight["price"] * passengers,
    }
