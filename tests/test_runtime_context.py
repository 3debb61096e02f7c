"""Context: sample (both modes), log, notify, read-only state, and argument validation."""

from __future__ import annotations

import pytest
from _runtime_support import EchoClient, capture_ctx, run
from pydantic import TypeAdapter

from branchc import (
    AssistantToolCallMessage,
    ExtendedMessage,
    Message,
    ModelPreferences,
    SampleResult,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    tool,
)
from branchc.runtime import Log, Notify, Sample
from branchc.runtime.effects import LOG_LEVELS
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio


def one_shot(body):
    """A tool whose client is `body` (a generator function of (handoff, ctx))."""
    t = tool("t")
    t.client(body)
    return t


# -- sample: auto-tracked and explicit -------------------------------------------------------


async def test_prompt_mode_appends_the_pair_to_the_history():
    seen: dict = {}

    def body(handoff, ctx):
        seen["start"] = ctx.messages
        r1 = yield ctx.sample(prompt="one")
        seen["after_one"] = ctx.messages
        r2 = yield ctx.sample(prompt="two")
        return [r1.text, r2.text]

    client = EchoClient()
    result, events = await run(one_shot(body), client)
    assert result == ["re: one", "re: two"]
    assert seen["start"] == ()
    assert seen["after_one"] == (Message(role="user", content="one"), Message(role="assistant", content="re: one"))
    # the earlier snapshot is not changed by later samples
    assert len(seen["after_one"]) == 2
    assert client.sample_calls[0].messages == [Message(role="user", content="one")]
    assert client.sample_calls[1].messages == [
        Message(role="user", content="one"),
        Message(role="assistant", content="re: one"),
        Message(role="user", content="two"),
    ]
    assert [e["tracked"] for e in events.named("sample")] == [True, True]


async def test_explicit_mode_does_not_touch_the_history():
    seen: dict = {}

    def body(handoff, ctx):
        r = yield ctx.sample(messages=[{"role": "user", "content": "q"}, Message(role="assistant", content="a")])
        seen["after_explicit"] = ctx.messages
        r2 = yield ctx.sample(prompt="p")
        seen["after_prompt"] = ctx.messages
        return [r.text, r2.text]

    client = EchoClient(answers={"a": "explicit answer"})
    result, events = await run(one_shot(body), client)
    assert result == ["explicit answer", "re: p"]
    assert seen["after_explicit"] == ()
    assert client.sample_calls[0].messages == [
        Message(role="user", content="q"),
        Message(role="assistant", content="a"),
    ]
    assert client.sample_calls[1].messages == [Message(role="user", content="p")]
    assert seen["after_prompt"] == (Message(role="user", content="p"), Message(role="assistant", content="re: p"))
    assert [e["tracked"] for e in events.named("sample")] == [False, True]


async def test_every_sample_option_reaches_the_request():
    def body(handoff, ctx):
        yield ctx.sample(
            prompt="go",
            system_prompt="be brief",
            max_tokens=77,
            temperature=0.25,
            stop_sequences=["END", "STOP"],
            model_preferences={"hints": ["claude"], "cost_priority": 0.2},
            tools=[{"name": "calc", "description": "adds", "input_schema": {"type": "object"}}, ToolSpec(name="noop")],
            tool_choice="required",
        )
        yield ctx.sample(messages=[{"role": "user", "content": "plain"}])

    client = EchoClient()
    await run(one_shot(body), client)
    first, second = client.sample_calls
    assert first.system_prompt == "be brief"
    assert first.max_tokens == 77
    assert first.temperature == 0.25
    assert first.stop_sequences == ["END", "STOP"]
    assert first.model_preferences == ModelPreferences(hints=["claude"], cost_priority=0.2)
    assert first.tools == [
        ToolSpec(name="calc", description="adds", input_schema={"type": "object"}),
        ToolSpec(name="noop", description="", input_schema={"type": "object", "properties": {}}),
    ]
    assert first.tool_choice == "required"
    assert (second.system_prompt, second.max_tokens, second.temperature) == (None, 1024, None)
    assert (second.stop_sequences, second.model_preferences, second.tools, second.tool_choice) == (
        None,
        None,
        None,
        None,
    )


async def test_messages_given_as_dicts_and_models_are_parsed_into_the_union():
    call = {"id": "c1", "function": {"name": "lookup", "arguments": {"q": "x"}}}

    def body(handoff, ctx):
        yield ctx.sample(
            messages=[
                {"role": "system", "content": "sys"},
                {"role": "assistant", "tool_calls": [call]},
                ToolResultMessage(tool_call_id="c1", content="42"),
                AssistantToolCallMessage(content="thinking", tool_calls=[ToolCall.model_validate(call)]),
                {"role": "tool", "tool_call_id": "c1", "content": "43"},
                Message(role="user", content="so?"),
            ]
        )

    client = EchoClient()
    await run(one_shot(body), client)
    messages = client.sample_calls[0].messages
    assert [type(m) for m in messages] == [
        Message, AssistantToolCallMessage, ToolResultMessage, AssistantToolCallMessage, ToolResultMessage, Message,
    ]  # fmt: skip
    assert messages[1].content is None
    assert messages[1].tool_calls[0].function.arguments == {"q": "x"}
    assert messages[1].tool_calls[0].type == "function"
    assert messages[4].content == "43"
    assert client.sample_calls[0].last_text == "so?"


def test_extended_message_discriminates_dicts_and_models():
    adapter = TypeAdapter(ExtendedMessage)
    assert type(adapter.validate_python({"role": "user", "content": "x"})) is Message
    assert type(adapter.validate_python({"role": "tool", "tool_call_id": "i", "content": "x"})) is ToolResultMessage
    calls = adapter.validate_python({"role": "assistant", "tool_calls": []})
    assert type(calls) is AssistantToolCallMessage
    model = ToolResultMessage(tool_call_id="i", content="c")
    assert adapter.validate_python(model) is model
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        adapter.validate_python({"role": "user", "content": "x", "name": "bob"})


async def test_bad_messages_raise_at_the_call_site_with_every_problem():
    ctx = await capture_ctx()
    with pytest.raises(ValueError) as info:
        ctx.sample(
            messages=[
                {"role": "user"},
                {"role": "tool", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
            ]
        )
    assert str(info.value) == (
        "ctx.sample(): bad argument:\n"
        "  0.text.content: Field required\n"
        "  1.tool_result.tool_call_id: Field required\n"
        "  2.tool_calls.tool_calls.0.id: Field required"
    )


async def test_sample_argument_errors():
    ctx = await capture_ctx()
    neither = r"with neither it continues the tracked history after tool results .* does not end with one"
    with pytest.raises(TypeError, match=neither):
        ctx.sample()
    with pytest.raises(TypeError, match=r"takes one of prompt= \(auto-tracked\) or messages= \(explicit\), not both"):
        ctx.sample("p", messages=[])
    with pytest.raises(TypeError, match=r"prompt=...\) must be a str, not int"):
        ctx.sample(5)
    for bad in (0, -3, True, 1.5, "10"):
        with pytest.raises(ValueError, match=r"max_tokens=.*give a positive int"):
            ctx.sample("p", max_tokens=bad)
    with pytest.raises(ValueError, match="use 'auto', 'required' or 'none'"):
        ctx.sample("p", tool_choice="sometimes")
    with pytest.raises(ValueError, match="cost_priority: Input should be less than or equal to 1"):
        ctx.sample("p", model_preferences={"cost_priority": 2})
    with pytest.raises(ValueError, match="name: Field required"):
        ctx.sample("p", tools=[{"description": "no name"}])
    effect = ctx.sample("p", stop_sequences=["a"])
    assert isinstance(effect, Sample)
    assert effect.stop_sequences == ("a",)
    assert effect.messages is None


async def test_a_str_stop_sequence_is_not_split_into_characters():
    ctx = await capture_ctx()
    try:
        effect = ctx.sample("p", stop_sequences="END")
    except (TypeError, ValueError) as error:
        assert "stop_sequences" in str(error)
        return
    assert effect.stop_sequences == ("END",)


@pytest.mark.parametrize("bad", [{"system_prompt": 5}, {"temperature": "hot"}])
async def test_sample_argument_types_are_checked_at_the_call_site(bad):
    ctx = await capture_ctx()
    with pytest.raises((TypeError, ValueError), match=next(iter(bad))):
        ctx.sample("p", **bad)


@pytest.mark.parametrize("bad", [{"progress": "half"}, {"total": object()}, {"progress": float("nan")}])
async def test_notify_progress_and_total_must_be_numbers(bad):
    ctx = await capture_ctx()
    with pytest.raises((TypeError, ValueError), match=next(iter(bad))):
        ctx.notify("m", **bad)


async def test_sample_error_inside_the_generator_is_catchable():
    def body(handoff, ctx):
        try:
            ctx.sample(prompt="a", messages=[])
        except TypeError as error:
            yield ctx.log("error", str(error))
        r = yield ctx.sample(prompt="fine")
        return r.text

    client = EchoClient()
    assert (await run(one_shot(body), client))[0] == "re: fine"
    assert client.log_calls[0][0] == "error"


async def test_tool_call_answers_in_prompt_mode_are_tracked_as_tool_call_messages():
    answer = SampleResult(text="", tool_calls=[ToolCall(id="t1", function={"name": "calc", "arguments": {"a": 1}})])

    def body(handoff, ctx):
        r = yield ctx.sample(prompt="add")
        return [r.tool_calls[0].id, [m.model_dump() for m in ctx.messages]]

    client = EchoClient(answers={"add": answer})
    result, _ = await run(one_shot(body), client)
    assert result[0] == "t1"
    assert result[1][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "calc", "arguments": {"a": 1}}}],
    }


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("plain", SampleResult(text="plain")),
        (
            {"text": "d", "model": "m", "stop_reason": "endTurn"},
            SampleResult(text="d", model="m", stop_reason="endTurn"),
        ),
        (SampleResult(text="s", input_tokens=3), SampleResult(text="s", input_tokens=3)),
    ],
)
async def test_sample_answer_forms(answer, expected):
    def body(handoff, ctx):
        r = yield ctx.sample(prompt="x")
        return r.model_dump()

    assert (await run(one_shot(body), MockClient([answer])))[0] == expected.model_dump()


# -- log, notify, read-only state -------------------------------------------------------------


async def test_log_and_notify_reach_the_client_and_send_back_none():
    def body(handoff, ctx):
        a = yield ctx.log("debug", "d")
        b = yield ctx.notify("step", progress=1, total=3)
        c = yield ctx.notify("bare")
        d = yield ctx.log("emergency", 42)
        return [a, b, c, d]

    client = MockClient()
    assert (await run(one_shot(body), client))[0] == [None, None, None, None]
    assert client.log_calls == [("debug", "d"), ("emergency", "42")]
    assert client.notify_calls == [("step", 1, 3), ("bare", None, None)]


async def test_log_levels_are_validated():
    ctx = await capture_ctx()
    assert [ctx.log(level, "m") for level in LOG_LEVELS] == [Log(level=level, message="m") for level in LOG_LEVELS]
    assert len(LOG_LEVELS) == 8
    for bad in ("verbose", "INFO", "warn", None):
        with pytest.raises(ValueError, match=r"ctx.log\(level=.*\): use one of debug, info, notice, warning, error"):
            ctx.log(bad, "m")
    assert ctx.notify("n", progress=0.5) == Notify(message="n", progress=0.5, total=None)


async def test_root_context_state_is_read_only():
    seen: dict = {}

    def body(handoff, ctx):
        seen.update(
            depth=ctx.depth,
            messages=ctx.messages,
            parent_messages=ctx.parent_messages,
            parent_system_prompt=ctx.parent_system_prompt,
            system_prompt=ctx.system_prompt,
        )
        for name in ("messages", "parent_messages", "parent_system_prompt", "system_prompt", "depth"):
            try:
                setattr(ctx, name, "x")
            except AttributeError:
                seen.setdefault("refused", []).append(name)
        try:
            ctx.extra = 1
        except AttributeError:
            seen.setdefault("refused", []).append("extra")
        yield ctx.sample(prompt="hi")
        history = ctx.messages
        try:
            history.append(Message(role="user", content="sneaky"))
        except AttributeError:
            seen["append_refused"] = True
        yield ctx.sample(prompt="again")

    client = EchoClient()
    await run(one_shot(body), client)
    assert seen["depth"] == 0
    assert seen["messages"] == ()
    assert seen["parent_messages"] == ()
    assert seen["parent_system_prompt"] is None
    assert seen["system_prompt"] is None
    assert seen["refused"] == ["messages", "parent_messages", "parent_system_prompt", "system_prompt", "depth", "extra"]
    assert seen["append_refused"] is True
    assert [m.content for m in client.sample_calls[1].messages] == ["hi", "re: hi", "again"]


async def test_branch_and_all_argument_errors():
    ctx = await capture_ctx()

    def not_marked(ctx):
        yield ctx.log("info", "x")

    with pytest.raises(
        TypeError, match=r"ctx.branch\(.*not_marked\): the function must be a generator marked @resumable"
    ):
        ctx.branch(not_marked)
    with pytest.raises(TypeError, match=r"ctx.all\(\): item 1 is a int, not an effect"):
        ctx.all([ctx.log("info", "a"), 3])
    with pytest.raises(TypeError, match="item 0 is a generator"):
        ctx.all([not_marked(ctx)])
