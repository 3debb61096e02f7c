"""Elicitation (accept/decline/cancel, exchange), client answers of the wrong shape, and MockClient."""

from __future__ import annotations

import datetime
import re

import pytest
from _runtime_support import EchoClient, capture_ctx, run
from pydantic import BaseModel, Field

from branchc import (
    AssistantToolCallMessage,
    ClientAnswerError,
    ElicitExchange,
    ElicitResult,
    ElicitValidationError,
    JsonDataError,
    Message,
    ToolCall,
    ToolPhaseError,
    ToolResultMessage,
    resumable,
    run_tool,
    tool,
)
from branchc.runtime import Elicit
from branchc.testing import MockClient, ScriptExhaustedError

pytestmark = pytest.mark.anyio


class Choice(BaseModel):
    card_number: int = Field(ge=1)
    note: str = "é"


def one_shot(body):
    """A tool whose client is `body` (a generator function of (handoff, ctx))."""
    t = tool("t")
    t.client(body)
    return t


# -- elicit ------------------------------------------------------------------------------------


async def test_accepted_elicitation_has_content_and_exchange():
    seen: dict = {}

    def body(handoff, ctx):
        r = yield ctx.elicit("pick_card", message="Pick a card", schema=Choice, context={"cards": ["a", "b", "c"]})
        seen["result"] = r
        return r.content.card_number

    client = MockClient([], [{"action": "accept", "content": {"card_number": 3}}])
    result, _ = await run(one_shot(body), client, call_id="c42")
    assert result == 3
    request = client.elicit_calls[0]
    assert (request.key, request.message) == ("pick_card", "Pick a card")
    assert request.requested_schema == Choice.model_json_schema()
    r = seen["result"]
    assert isinstance(r, ElicitResult)
    assert r.accepted is True
    assert r.action == "accept"
    assert r.content == Choice(card_number=3, note="é")
    exchange = r.exchange
    assert isinstance(exchange, ElicitExchange)
    assert exchange.context == {"cards": ["a", "b", "c"]}
    assert exchange.tool_call_id == "elicit_c42_1"
    assert exchange.request == AssistantToolCallMessage(
        content=None, tool_calls=[ToolCall(id="elicit_c42_1", function={"name": "pick_card", "arguments": {}})]
    )
    # compact JSON of the validated content, defaults included, non-ASCII kept
    assert exchange.response == ToolResultMessage(tool_call_id="elicit_c42_1", content='{"card_number":3,"note":"é"}')
    assert exchange.messages == [exchange.request, exchange.response]
    assert exchange.messages[0].tool_calls[0].function.arguments == {}
    with_args = exchange.with_arguments(lambda context: {"count": len(context["cards"])})
    assert with_args[0].tool_calls[0].function.arguments == {"count": 3}
    assert with_args[0].tool_calls[0].id == "elicit_c42_1"
    assert with_args[1] == exchange.response
    # opting in once does not change the safe default
    assert exchange.messages[0].tool_calls[0].function.arguments == {}
    with pytest.raises(TypeError, match="must return a dict of tool-call arguments, not list"):
        exchange.with_arguments(lambda context: context["cards"])


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_declined_or_cancelled_elicitation(action):
    def body(handoff, ctx):
        r = yield ctx.elicit("pick", message="m", schema=Choice)
        return [r.action, r.accepted, r.content, r.exchange]

    assert (await run(one_shot(body), MockClient([], [{"action": action}])))[0] == [action, False, None, None]


@resumable
def _elicit_in_branch(ctx):
    r = yield ctx.elicit("inner", message="inner", schema=Choice)
    return r.exchange.tool_call_id


async def test_elicit_seq_counts_every_elicitation_of_the_run():
    def body(handoff, ctx):
        first = yield ctx.elicit("outer", message="first", schema=Choice)
        inner_id = yield ctx.branch(_elicit_in_branch)
        last = yield ctx.elicit("outer", message="last", schema=Choice)
        return [first.action, inner_id, last.exchange.tool_call_id, last.exchange.request.tool_calls[0].function.name]

    answers = [{"action": "decline"}, {"action": "accept", "content": {"card_number": 1}}]
    answers.append({"action": "accept", "content": {"card_number": 2}})
    result, events = await run(one_shot(body), MockClient([], answers), call_id="X")
    assert result == ["decline", "elicit_X_2", "elicit_X_3", "outer"]
    assert [e["seq"] for e in events.named("elicit")] == [1, 2, 3]


async def test_elicit_ids_use_a_generated_call_id_when_none_is_given():
    def body(handoff, ctx):
        r = yield ctx.elicit("pick", message="m", schema=Choice)
        return r.exchange.tool_call_id

    result, events = await run(one_shot(body), MockClient([], [{"action": "accept", "content": {"card_number": 1}}]))
    call_id = events.named("start")[0]["call_id"]
    assert re.fullmatch(r"[0-9a-f]{12}", call_id)
    assert result == f"elicit_{call_id}_1"


async def test_exchange_messages_can_be_sampled_as_history():
    def body(handoff, ctx):
        r = yield ctx.elicit("pick", message="m", schema=Choice)
        answer = yield ctx.sample(messages=[*r.exchange.messages, {"role": "user", "content": "why that card?"}])
        return answer.text

    client = EchoClient(elicit_answers=[{"action": "accept", "content": {"card_number": 2}}])
    result, _ = await run(one_shot(body), client, call_id="q")
    assert result == "re: why that card?"
    sent = client.sample_calls[0].messages
    assert [type(m) for m in sent] == [AssistantToolCallMessage, ToolResultMessage, Message]
    assert sent[1].content == '{"card_number":2,"note":"é"}'


async def test_elicit_argument_errors():
    ctx = await capture_ctx()
    for key in ("not valid", "1st", "", 3):
        with pytest.raises(ValueError, match="the key must be an identifier"):
            ctx.elicit(key, message="m", schema=Choice)
    for schema in (dict, Choice(card_number=1), None):
        with pytest.raises(TypeError, match=r"schema=...\) must be a pydantic model class"):
            ctx.elicit("k", message="m", schema=schema)
    assert ctx.elicit("k", message=5, schema=Choice) == Elicit(key="k", message="5", schema=Choice, context=None)


async def test_elicit_context_must_be_json_data():
    ctx = await capture_ctx()
    with pytest.raises(JsonDataError) as info:
        ctx.elicit("pick", message="m", schema=Choice, context={"cards": [datetime.date(2024, 1, 1)]})
    assert str(info.value) == (
        "ctx.elicit('pick', context=...)['cards'][0]: date is not JSON data (use .isoformat()); "
        "pass JSON data (convert values first), or a pydantic model of it"
    )
    with pytest.raises(JsonDataError, match=r"\['t'\]: tuple is not JSON data"):
        ctx.elicit("pick", message="m", schema=Choice, context={"t": (1,)})


async def test_elicit_context_is_a_copy_taken_when_the_effect_is_made():
    def body(handoff, ctx):
        shown = {"cards": ["a", "b"]}
        effect = ctx.elicit("pick", message="m", schema=Choice, context=shown)
        shown["cards"].append("added later")
        r = yield effect
        return r.exchange.context

    result, _ = await run(one_shot(body), MockClient([], [{"action": "accept", "content": {"card_number": 1}}]))
    assert result == {"cards": ["a", "b"]}


async def test_invalid_accepted_content_is_thrown_into_the_generator():
    seen: dict = {}

    def body(handoff, ctx):
        while True:
            try:
                r = yield ctx.elicit("pick", message="m", schema=Choice)
            except ElicitValidationError as error:
                seen.setdefault("errors", []).append((error.key, error.errors, error.content, str(error)))
                continue
            return r.content.card_number

    answers = [
        {"action": "accept", "content": {"card_number": 0}},
        {"action": "accept", "content": {"card_number": "x", "note": 5}},
        {"action": "accept", "content": {"card_number": 2}},
    ]
    result, _ = await run(one_shot(body), MockClient([], answers))
    assert result == 2
    first, second = seen["errors"]
    assert first == (
        "pick",
        ["card_number: Input should be greater than or equal to 1 (got 0)"],
        {"card_number": 0},
        "elicit 'pick': the accepted content does not match the schema:\n"
        "  card_number: Input should be greater than or equal to 1 (got 0)",
    )
    assert second[1] == [
        "card_number: Input should be a valid integer, unable to parse string as an integer (got 'x')",
        "note: Input should be a valid string (got 5)",
    ]


async def test_uncaught_elicit_validation_error_fails_the_client_phase():
    def body(handoff, ctx):
        yield ctx.elicit("pick", message="m", schema=Choice)

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, MockClient([], [{"action": "accept", "content": {}}]))
    assert info.value.phase == "client"
    assert isinstance(info.value.__cause__, ElicitValidationError)
    assert info.value.__cause__.errors == ["card_number: Field required"]


# -- client answers of the wrong shape --------------------------------------------------------


def _catching(effect_maker):
    def body(handoff, ctx):
        try:
            yield effect_maker(ctx)
        except ClientAnswerError as error:
            return str(error)
        return "no error"

    return one_shot(body)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            42,
            "sample #1: the client answered with a int; "
            "expected a SampleResult, a dict of its fields, or the text as a str",
        ),
        (None, "sample #1: the client answered with a NoneType; expected a SampleResult"),
        (["a"], "sample #1: the client answered with a list; expected"),
        (
            {"txt": "hi"},
            "sample #1: the client's answer is not a SampleResult:\n  txt: Extra inputs are not permitted (got 'hi')",
        ),
        ({"text": 3}, "not a SampleResult:\n  text: Input should be a valid string (got 3)"),
        ({"text": "a", "input_tokens": -1}, "input_tokens: Input should be greater than or equal to 0 (got -1)"),
    ],
)
async def test_sample_answers_of_the_wrong_shape(answer, message):
    result, _ = await run(_catching(lambda ctx: ctx.sample(prompt="x")), MockClient([answer]))
    assert message in result


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (7, "elicit #1 ('pick'): the client answered with a int; expected {'action': 'accept'|'decline'|'cancel'"),
        ("yes", "elicit #1 ('pick'): the client answered with a str"),
        ({"action": "accept"}, "elicit #1 ('pick'): an accepted elicitation needs content (a dict of the form's"),
        ({"action": "accept", "content": None}, "an accepted elicitation needs content"),
        ({"action": "ok"}, "elicit #1 ('pick'): the client's answer has the wrong shape:\n  action: Input should be"),
        ({"action": "accept", "content": {"card_number": 1}, "x": 1}, "x: Extra inputs are not permitted (got 1)"),
        ({"action": "accept", "content": [1]}, "content: Input should be a valid dictionary (got [1])"),
    ],
)
async def test_elicit_answers_of_the_wrong_shape(answer, message):
    result, _ = await run(
        _catching(lambda ctx: ctx.elicit("pick", message="m", schema=Choice)), MockClient([], [answer])
    )
    assert message in result


async def test_uncaught_client_answer_error_fails_the_client_phase():
    def body(handoff, ctx):
        yield ctx.sample(prompt="x")

    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, MockClient([12]))
    assert isinstance(info.value.__cause__, ClientAnswerError)
    assert str(info.value).startswith(
        "t: client() failed: ClientAnswerError: sample #1: the client answered with a int"
    )


async def test_elicit_content_that_is_not_json_is_a_client_answer_error():
    class Anything(BaseModel):
        x: object = None

    t = _catching(lambda ctx: ctx.elicit("pick", message="m", schema=Anything))
    result, _ = await run(t, MockClient([], [{"action": "accept", "content": {"x": object()}}]))
    assert result.startswith("elicit #1 ('pick')")


async def test_sample_tool_call_arguments_that_are_not_json_are_a_client_answer_error():
    answer = {"tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {"x": object()}}}]}
    result, _ = await run(_catching(lambda ctx: ctx.sample(prompt="x")), MockClient([answer]))
    assert result.startswith("sample #1")


# -- MockClient --------------------------------------------------------------------------------


async def test_mock_client_out_of_sample_answers_names_the_call():
    def body(handoff, ctx):
        yield ctx.sample(prompt="first")
        yield ctx.sample(prompt="second prompt")

    client = MockClient(["one"])
    with pytest.raises(ToolPhaseError) as info:
        await run_tool(one_shot(body), {}, client)
    error = info.value.__cause__
    assert isinstance(error, ScriptExhaustedError)
    assert str(error) == (
        "MockClient: sample call #2 ('second prompt') found the script empty; "
        "it has 1 answer(s) for sample calls: add one more"
    )
    assert len(client.sample_calls) == 2


async def test_mock_client_out_of_elicit_answers_names_the_call_and_truncates_long_text():
    long = "Pick one of these cards, please, and think about it carefully before you do so"

    def body(handoff, ctx):
        try:
            yield ctx.elicit("pick", message=long, schema=Choice)
        except ScriptExhaustedError as error:
            return str(error)

    result, _ = await run(one_shot(body), MockClient())
    assert result == (
        f"MockClient: elicit 'pick' call #1 ({long[:57] + '...'!r}) found the script empty; "
        "it has 0 answer(s) for elicit calls: add one more"
    )


async def test_mock_client_callable_answers_get_the_request():
    def body(handoff, ctx):
        a = yield ctx.sample(prompt="abc", max_tokens=9)
        b = yield ctx.elicit("pick", message="m", schema=Choice)
        return [a.text, b.content.card_number]

    client = MockClient(
        [lambda request: f"{request.last_text}:{request.max_tokens}"],
        [lambda request: {"action": "accept", "content": {"card_number": len(request.requested_schema["properties"])}}],
    )
    assert (await run(one_shot(body), client))[0] == ["abc:9", 2]
