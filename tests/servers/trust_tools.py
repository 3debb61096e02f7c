"""Tools whose branches run on an executor with a lying worker (tests/test_executor_trust.py).

- `Trap`: a class the build records, so a step's outcome may name it. Constructing one, calling it or
  one of its methods, formatting it, iterating it or asking it for a JSON schema appends to `SPRUNG` (in
  the process where that happens: the server's list stays empty unless the server ran something of it),
  then raises `Sprang`, so that a server that does run it stops rather than loops.
- `Bait`: plain data, which the codec writes (it refuses to write a callable Trap); a lying worker
  renames it Trap in the JSON it sends, as an attacker writes what no encoder would.
- `relay`: ctx.all of `count` branches of `echo` (log, sample, return), whose finally blocks log once.
- `explicit`: a branch that yields every kind of effect with every field filled (explicit messages with a
  tool call, model preferences, tool specs, an elicitation with context, a progress note): run elsewhere,
  each effect passes the checks and reaches the client exactly as inline.
"""

from __future__ import annotations

from pydantic import BaseModel

from branchc import Context, resumable, tool

SPRUNG: list[str] = []


class Sprang(Exception):
    """Raised by every method of Trap once it has left its mark, so that a server that runs one stops."""


def spring(what: str) -> None:
    SPRUNG.append(what)
    raise Sprang(f"the server ran Trap's {what}")


class Sprung(type):
    def __call__(cls, *args, **kwargs):
        SPRUNG.append("Sprung.__call__")  # then __init__ springs
        return super().__call__(*args, **kwargs)


class Trap(metaclass=Sprung):
    """Every way the server could run it leaves a mark (a plain class otherwise: the snapshot decoder makes
    one with object.__new__, as it makes any instance, running none of this)."""

    def __init__(self, *args, **kwargs) -> None:
        spring("__init__")

    def __call__(self, *args, **kwargs):
        spring("__call__")

    def __repr__(self) -> str:
        spring("__repr__")

    def __str__(self) -> str:
        spring("__str__")

    def __format__(self, spec: str) -> str:
        spring("__format__")

    def __bool__(self) -> bool:
        spring("__bool__")

    def __iter__(self):
        spring("__iter__")

    def __next__(self):
        spring("__next__")

    def send(self, value):
        spring("send")

    def throw(self, *args):
        spring("throw")

    def close(self) -> None:
        spring("close")

    @classmethod
    def model_json_schema(cls, *args, **kwargs) -> dict:
        spring("model_json_schema")


class Bait:
    """Plain data a worker can encode; a lying worker renames it Trap in the outcome it sends."""


class RelayParams(BaseModel):
    count: int = 2


class Pick(BaseModel):
    word: str


relay = tool("relay", description="branches that log and sample", params=RelayParams, requires={"sampling"})
explicit = tool("explicit", description="every effect, every field", requires={"sampling", "elicitation"})


@resumable
def echo(ctx: Context, word: str):
    try:
        yield ctx.log("info", f"echo {word}")
        reply = yield ctx.sample(prompt=word)
        return reply.text
    finally:
        yield ctx.log("info", f"echo {word} cleans up")


@resumable
def decoy(ctx: Context):
    yield ctx.log("info", "decoy")


@relay.client
def relay_client(handoff: dict, ctx: Context):
    replies = yield ctx.all([ctx.branch(echo, f"w{number}") for number in range(handoff["count"])])
    return {"replies": replies}


@resumable
def everything(ctx: Context):
    yield ctx.notify("starting", progress=0, total=2)
    reply = yield ctx.sample(
        messages=[
            {"role": "user", "content": "look it up"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "function": {"name": "find", "arguments": {"q": "x", "n": [1, 2.5]}}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
        ],
        system_prompt="be brief",
        max_tokens=50,
        temperature=0.5,
        stop_sequences=["\n\n"],
        model_preferences={"hints": ["small"], "speed_priority": 0.5},
        tools=[{"name": "find", "description": "finds", "input_schema": {"type": "object"}}],
        tool_choice="auto",
    )
    pick = yield ctx.elicit("pick", message="Pick a word", schema=Pick, context={"words": ["a", "b"], "n": None})
    deeper = yield ctx.all([ctx.branch(echo, "inner", max_depth=3, timeout=60.0), ctx.log("debug", "grouped")])
    yield ctx.notify("done", progress=2, total=2)
    return {"reply": reply.text, "pick": pick.content.word if pick.accepted else None, "deeper": deeper}


@explicit.client
def explicit_client(handoff: dict, ctx: Context):
    result = yield ctx.branch(everything, system_prompt="branch prompt", max_tokens=4000, inherit_messages=False)
    return result
