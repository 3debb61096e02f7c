"""A pydantic model as an elicitation's context (the seed's typed `ElicitResult` context): it travels as JSON, in
snapshots, saved runs and executor steps alike, and comes back in the exchange as a model of its class."""

from __future__ import annotations

import textwrap

import pytest
from _runtime_support import capture_ctx, run
from pydantic import BaseModel

from branchc import run_tool, tool
from branchc.executors import ProcessPool
from branchc.runtime.compiled import load_compiled_tool
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio

ACCEPT = {"action": "accept", "content": {"move": 4}}


class Move(BaseModel):
    move: int


class Board(BaseModel):
    cells: list[str]
    turn: str = "x"


def one_shot(body):
    t = tool("t")
    t.client(body)
    return t


async def test_a_model_context_comes_back_as_a_copy_of_that_model():
    seen = {}

    def body(handoff, ctx):
        board = Board(cells=["x", "", "o"])
        effect = ctx.elicit("move", message="Your move", schema=Move, context=board)
        board.cells.append("changed after the question")  # what was shown is what the exchange keeps
        r = yield effect
        seen["board"], seen["exchange"] = board, r.exchange
        return None

    await run(one_shot(body), MockClient([], [ACCEPT]))
    exchange = seen["exchange"]
    assert type(exchange.context) is Board
    assert exchange.context == Board(cells=["x", "", "o"])
    assert exchange.context is not seen["board"]
    call, answer = exchange.with_arguments(lambda board: {"turn": board.turn, "free": board.cells.count("")})
    assert call.tool_calls[0].function.arguments == {"turn": "x", "free": 1}
    assert answer.content == '{"move":4}'
    assert exchange.messages[0].tool_calls[0].function.arguments == {}  # nothing of it leaks by default


async def test_a_model_context_that_cannot_go_through_json_is_refused_where_it_is_made():
    class Opaque(BaseModel, arbitrary_types_allowed=True):
        handle: object

    ctx = await capture_ctx()
    with pytest.raises(TypeError, match=r"ctx.elicit\('move', context=...\): a Opaque that does not go through JSON"):
        ctx.elicit("move", message="m", schema=Move, context=Opaque(handle=object()))


TOOLS = textwrap.dedent(
    """
    from pydantic import BaseModel

    from branchc import Context, resumable, tool


    class Move(BaseModel):
        move: int


    class Board(BaseModel):
        cells: list[str]
        turn: str = "x"


    @resumable
    def ask(ctx: Context, cells: list[str]):
        r = yield ctx.elicit("move", message="Your move", schema=Move, context=Board(cells=cells))
        return [type(r.exchange.context).__qualname__, r.exchange.context.model_dump(), r.content.move]


    play = tool("play")


    @play.client
    def client(handoff: dict, ctx: Context):
        here = yield ctx.branch(ask, ["x", "", "o"])  # a sub-branch: on an executor, its step runs there
        r = yield ctx.elicit("again", message="Again?", schema=Move, context=Board(cells=["o"], turn="o"))
        kept = r.exchange  # kept across a yield: the exchange and its model travel in the saved run
        yield ctx.log("info", "saved with the exchange")
        return [here, type(kept.context).__qualname__, kept.context.turn]
    """
)


@pytest.fixture(scope="module")
def play(tmp_path_factory):
    folder = tmp_path_factory.mktemp("typed_context")
    (folder / "board_tools.py").write_text(TOOLS)
    return load_compiled_tool(folder / "board_tools.py", "play")


EXPECTED = [["Board", {"cells": ["x", "", "o"], "turn": "x"}, 4], "Board", "o"]


async def test_a_model_context_travels_in_a_saved_run(play):
    # portable: saved as JSON text at every suspension and continued from the text, as between rounds
    result = await run_tool(play, {}, MockClient([], [ACCEPT, ACCEPT]), portable=True)
    assert result == EXPECTED


async def test_a_model_context_travels_with_a_step_on_another_process(play):
    pool = ProcessPool(1)
    try:
        result = await run_tool(play, {}, MockClient([], [ACCEPT, ACCEPT]), executor=pool)
    finally:
        pool.shutdown()
    assert result == EXPECTED
