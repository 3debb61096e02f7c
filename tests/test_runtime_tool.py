"""Tool definition errors and params validation."""

from __future__ import annotations

import functools
import os

import pytest
from _runtime_support import run
from pydantic import BaseModel, Field

from branchc import (
    Limits,
    ParamsError,
    ToolDefinitionError,
    resumable,
    run_tool,
    tool,
)
from branchc.runtime.compiled import load_compiled_tool
from branchc.runtime.errors import OutputError
from branchc.runtime.jsondata import source_place
from branchc.testing import MockClient

pytestmark = pytest.mark.anyio


class Params(BaseModel):
    count: int = Field(5, ge=2, le=10)
    name: str
    tags: list[str] = []


class Inner(BaseModel):
    x: int


class Nested(BaseModel):
    inner: Inner


# -- tool definition errors -------------------------------------------------------------


def test_client_must_be_a_generator_function():
    t = tool("t")

    def plain(handoff, ctx):
        return 1

    with pytest.raises(ToolDefinitionError, match=r"tool 't': client .*plain \(.*\.py:\d+\) must be a generator"):
        t.client(plain)
    assert t.client_fn is None


@pytest.mark.parametrize("kind", ["coroutine", "async generator"])
def test_async_client_is_refused(kind):
    t = tool("t")
    if kind == "coroutine":

        async def client(handoff, ctx):
            return 1
    else:

        async def client(handoff, ctx):
            yield 1

    with pytest.raises(ToolDefinitionError, match="must be a generator function"):
        t.client(client)


@pytest.mark.parametrize("phase", ["before", "after"])
@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_server_phase_must_not_be_a_generator(phase, kind):
    t = tool("t")
    if kind == "generator":

        def fn(*args):
            yield 1
    else:

        async def fn(*args):
            yield 1

    with pytest.raises(
        ToolDefinitionError, match=rf"tool 't': {phase} .*fn .* is a generator; {phase} runs on the server"
    ):
        getattr(t, phase)(fn)
    assert getattr(t, f"{phase}_fn") is None


@pytest.mark.parametrize("phase", ["before", "after"])
def test_server_phase_must_be_callable(phase):
    t = tool("t")
    with pytest.raises(ToolDefinitionError, match=rf"tool 't': {phase} must be a function, not 42"):
        getattr(t, phase)(42)


def test_phase_cannot_be_given_twice():
    t = tool("t")

    @t.before
    def before(params):
        return {}

    def again(params):
        return {}

    with pytest.raises(ToolDefinitionError, match="tool 't' already has a before phase"):
        t.before(again)
    assert t.before_fn is before


def test_unknown_requires_is_refused():
    with pytest.raises(ToolDefinitionError, match=r"requires=\['roots'\] is unknown; use a subset of"):
        tool("t", requires={"sampling", "roots"})


def test_known_requires_and_limits_are_kept():
    limits = Limits(max_depth=2, max_tokens=10, timeout=1.5)
    t = tool("t", requires=["sampling"], limits=limits, description="d")
    assert t.requires == frozenset({"sampling"})
    assert t.limits == limits
    assert t.description == "d"


@pytest.mark.parametrize("name", ["", "x" * 129, 5, None])
def test_bad_tool_name(name):
    with pytest.raises(ToolDefinitionError, match="give a non-empty str of at most 128 characters"):
        tool(name)


@pytest.mark.parametrize("params", [dict, Params(name="n"), "Params"])
def test_params_must_be_a_model_class(params):
    with pytest.raises(ToolDefinitionError, match="params= must be a pydantic model class"):
        tool("t", params=params)


def test_resumable_on_a_plain_function_is_refused():
    def helper(ctx):
        return 1

    with pytest.raises(
        ToolDefinitionError, match=r"@resumable applies to generator functions, and .*helper \(.*:\d+\)"
    ):
        resumable(helper)
    assert not hasattr(helper, "__branchc_resumable__")


def test_resumable_on_an_async_function_is_refused():
    async def helper(ctx):
        return 1

    with pytest.raises(ToolDefinitionError, match="has no yield"):
        resumable(helper)


def test_resumable_marks_and_returns_the_same_function():
    def helper(ctx):
        yield ctx.log("info", "x")

    assert resumable(helper) is helper
    assert helper.__branchc_resumable__ is True


def test_resumable_accepts_a_compiled_factory():
    def factory(ctx):
        return iter(())

    factory.__branchc_compiled__ = True
    assert resumable(factory) is factory
    t = tool("t")
    assert t.client(factory) is factory
    assert t.client_fn is factory


def test_client_phase_is_marked_for_the_compiler_but_not_branchable():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")

    assert client.__branchc_client__ is True
    assert not hasattr(client, "__branchc_resumable__")  # a client takes (handoff, ctx): ctx.branch refuses it


@pytest.mark.parametrize("thing", [42, functools.partial(len, "ab"), None])
def test_resumable_on_a_non_function_gives_a_definition_error(thing):
    with pytest.raises(
        ToolDefinitionError, match=r"@resumable applies to generator functions, and .*\(not a function\)"
    ):
        resumable(thing)


@pytest.mark.parametrize("thing", [None, 42])
def test_client_that_is_not_a_function_gives_a_definition_error(thing):
    with pytest.raises(ToolDefinitionError, match=rf"tool 't': client {thing} \(not a function\) must be a generator"):
        tool("t").client(thing)


async def test_tool_without_client_phase_is_a_definition_error():
    with pytest.raises(
        ToolDefinitionError, match=r"^tool 't' has no client phase; decorate a generator with @t.client$"
    ):
        await run_tool(tool("t"), {}, MockClient())


# -- params --------------------------------------------------------------------------------


def _params_tool(seen: list):
    t = tool("t", params=Params)

    @t.before
    def before(params):
        seen.append(params)
        return {"n": params.count}

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return handoff

    return t


async def test_params_error_lists_every_failing_field_and_why():
    seen: list = []
    client = MockClient()
    with pytest.raises(ParamsError) as info:
        await run_tool(_params_tool(seen), {"count": 11, "tags": "x"}, client)
    error = info.value
    assert error.tool == "t"
    assert error.errors == [
        "count: Input should be less than or equal to 10 (got 11)",
        "name: Field required",
        "tags: Input should be a valid list (got 'x')",
    ]
    assert str(error) == "invalid params for t:\n" + "\n".join(f"  {line}" for line in error.errors)
    assert isinstance(error, ValueError)
    assert seen == []
    assert client.log_calls == []


async def test_params_error_names_nested_fields():
    t = tool("t", params=Nested)

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")

    with pytest.raises(ParamsError) as info:
        await run_tool(t, {"inner": {"x": "no"}, "extra": 1}, MockClient())
    assert info.value.errors == [
        "inner.x: Input should be a valid integer, unable to parse string as an integer (got 'no')",
    ]


@pytest.mark.parametrize("params", [[1, 2], "count=3", 7])
async def test_params_that_are_not_an_object(params):
    with pytest.raises(ParamsError) as info:
        await run_tool(_params_tool([]), params, MockClient())
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith("(root): Input should be a valid dictionary or instance of Params")


async def test_params_model_instance_is_passed_through():
    seen: list = []
    given = Params(name="n", count=3)
    result, _ = await run(_params_tool(seen), MockClient(), given)
    assert seen[0] is given
    assert result == {"n": 3}


async def test_params_none_uses_the_defaults():
    t = tool("t")

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "x")
        return handoff

    assert (await run(t, MockClient(), None))[0] == {}


# -- declared output ------------------------------------------------------------------------------


class Total(BaseModel):
    total: int


@pytest.mark.parametrize(("result", "ok"), [({"total": 3}, True), ({"total": "many"}, False), ({}, False)])
async def test_a_declared_output_model_checks_the_result(result, ok):
    t = tool("typed", output=Total)

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "done")
        return result

    if ok:
        assert await run_tool(t, {}, MockClient()) == result
        assert t.output_schema["properties"]["total"]["type"] == "integer"
        return
    with pytest.raises(OutputError) as info:
        await run_tool(t, {}, MockClient())
    place = f"{os.path.relpath(__file__)}:{client.__code__.co_firstlineno + 3}"  # its return, not its def
    assert info.value.place == place
    assert str(info.value).startswith(f"{place}: typed: the result does not fit its output model:\n  total:")


def test_output_must_be_a_model():
    with pytest.raises(ToolDefinitionError, match="output= must be a pydantic model class"):
        tool("t", output=dict)


async def test_a_tool_may_return_its_output_model_itself():
    t = tool("typed", output=Total)

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "done")
        return Total(total=3)

    assert await run_tool(t, {}, MockClient()) == {"total": 3}


async def test_after_may_return_the_output_model_and_gets_the_clients_as_data():
    t = tool("typed", output=Total)
    seen = []

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "done")
        return Total(total=1)

    @t.after
    async def after(handoff, result):
        seen.append(result)
        return Total(total=result["total"] + 1)

    assert await run_tool(t, {}, MockClient()) == {"total": 2}
    assert seen == [{"total": 1}]


def _place(fn, offset: int) -> str:
    return f"{os.path.relpath(fn.__code__.co_filename)}:{fn.__code__.co_firstlineno + offset}"


async def test_an_output_error_names_the_return_that_gave_the_value():
    t = tool("typed", output=Total)

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "done")
        if handoff.get("a"):
            return {"total": 1}
        return {"total": "many"}

    with pytest.raises(OutputError) as info:
        await run_tool(t, {}, MockClient())
    assert info.value.place == _place(client, 5)  # the second return, the one that ran


@pytest.mark.parametrize("form", ["async", "sync, one return", "sync, two returns"])
async def test_an_after_error_names_its_return_where_it_can(form):
    t = tool("typed", output=Total)

    @t.client
    def client(handoff, ctx):
        yield ctx.log("info", "done")
        return {"total": 1}

    if form == "async":

        async def after(handoff, result):
            if result["total"] > 5:
                return {"total": 0}
            return {"total": "many"}

        where = _place(after, 3)  # its frame tells which return ran
    elif form == "sync, one return":

        def after(handoff, result):
            value = {"total": "many"}
            return value

        where = _place(after, 2)  # the source has one return of a value
    else:

        def after(handoff, result):
            if result["total"] > 5:
                return {"total": 0}
            return {"total": "many"}

        where = _place(after, 0)  # which one ran is not known: its def
    t.after(after)
    with pytest.raises(OutputError) as info:
        await run_tool(t, {}, MockClient())
    assert info.value.place == where


async def test_a_compiled_tool_restored_from_its_saved_run_names_its_return_in_the_source(tmp_path):
    source = tmp_path / "typed_tool.py"
    source.write_text(
        "from pydantic import BaseModel\n"
        "from branchc import Context, tool\n"
        "\n"
        "\n"
        "class Total(BaseModel):\n"
        "    total: int\n"
        "\n"
        "\n"
        "typed = tool('typed', output=Total)\n"
        "\n"
        "\n"
        "@typed.client\n"
        "def client(handoff: dict, ctx: Context):\n"
        "    r = yield ctx.sample(prompt='how many?')\n"
        "    if r.text == 'none':\n"
        "        return {'total': 0}\n"
        "    return {'total': r.text}\n"
    )
    compiled = load_compiled_tool(source, "typed")
    with pytest.raises(OutputError) as info:  # saved and restored at its sample (portable), then returns there
        await run_tool(compiled, {}, MockClient(["many"]), portable=True)
    assert info.value.place == source_place(str(source), 17)
