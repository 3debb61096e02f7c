"""Helpers shared by the runtime tests: clients, an event recorder, a fake compiled generator."""

from __future__ import annotations

import json
from typing import Any

import anyio

from branchc import run_tool, tool
from branchc.testing import MockClient

CAPS = frozenset({"sampling", "elicitation"})


class EchoClient:
    """A client that answers every sample with ``re: <prompt>``, optionally after a delay per prompt.

    It records the requests it got, the prompts it finished and the prompts cancelled mid-sample.
    """

    def __init__(
        self,
        *,
        delays: dict[str, float] | None = None,
        answers: dict[str, Any] | None = None,
        elicit_answers: list[Any] | None = None,
        capabilities: frozenset[str] = CAPS,
    ) -> None:
        self.capabilities = capabilities
        self.delays = delays or {}
        self.answers = answers or {}
        self.elicit_answers = list(elicit_answers or [])
        self.sample_calls: list[Any] = []
        self.elicit_calls: list[Any] = []
        self.log_calls: list[tuple[str, str]] = []
        self.notify_calls: list[tuple[str, float | None, float | None]] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []

    async def sample(self, request: Any) -> Any:
        self.sample_calls.append(request)
        text = request.last_text
        delay = self.delays.get(text)
        if delay is not None:
            try:
                await anyio.sleep(delay)
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(text)
                raise
        self.finished.append(text)
        answer = self.answers.get(text, f"re: {text}")
        return answer(request) if callable(answer) else answer

    async def elicit(self, request: Any) -> Any:
        self.elicit_calls.append(request)
        return self.elicit_answers.pop(0)

    async def log(self, level: str, message: str) -> None:
        self.log_calls.append((level, message))

    async def notify(self, message: str, progress: float | None, total: float | None) -> None:
        self.notify_calls.append((message, progress, total))


class Events:
    """An on_event callback that keeps each event after a JSON round trip, and notes any that fail."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.raw: list[dict[str, Any]] = []
        self.not_json: list[tuple[dict[str, Any], str]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.raw.append(event)
        try:
            self.events.append(json.loads(json.dumps(event, allow_nan=False)))
        except (TypeError, ValueError) as error:
            self.not_json.append((event, repr(error)))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]

    @property
    def names(self) -> list[str]:
        return [e["event"] for e in self.events]


async def run(t: Any, client: Any = None, params: Any = None, **kwargs: Any) -> tuple[Any, Events]:
    """run_tool with an Events recorder; asserts that every event was JSON data."""
    events = Events()
    result = await run_tool(t, params, client if client is not None else MockClient(), on_event=events, **kwargs)
    assert events.not_json == []
    return result, events


async def capture_ctx() -> Any:
    """The Context of a finished trivial run: its methods still make effects (plain data)."""
    box: dict[str, Any] = {}
    t = tool("capture")

    @t.client
    def client(handoff, ctx):
        box["ctx"] = ctx
        yield ctx.log("debug", "captured")

    await run_tool(t, {}, MockClient())
    return box["ctx"]


class FakeCompiled:
    """A hand-written object with the generator protocol that wraps a native generator.

    It stands in for a compiled state machine: it has no gi_frame, and it records every protocol
    call so tests can check that the runtime only uses send/throw.
    """

    def __init__(self, generator: Any, calls: list[tuple[str, str]], source_location: str | None = None) -> None:
        self._generator = generator
        self._calls = calls
        if source_location is not None:
            self.source_location = source_location

    def __iter__(self) -> FakeCompiled:
        self._calls.append(("__iter__", ""))
        return self

    def __next__(self) -> Any:
        self._calls.append(("__next__", ""))
        return next(self._generator)

    def send(self, value: Any) -> Any:
        self._calls.append(("send", type(value).__name__))
        return self._generator.send(value)

    def throw(self, error: BaseException, *rest: Any) -> Any:
        self._calls.append(("throw", type(error).__name__))
        return self._generator.throw(error, *rest)

    def close(self) -> None:
        self._calls.append(("close", ""))
        self._generator.close()


def compiled(fn: Any, calls: list[tuple[str, str]], source_location: str | None = None) -> Any:
    """A factory that looks like a compiled function: calling it returns a FakeCompiled."""

    def factory(*args: Any, **kwargs: Any) -> FakeCompiled:
        return FakeCompiled(fn(*args, **kwargs), calls, source_location)

    factory.__name__ = fn.__name__
    factory.__qualname__ = fn.__qualname__
    factory.__branchc_resumable__ = True
    factory.__branchc_compiled__ = True
    return factory


def entries(value: Any) -> list[dict]:
    """Every JSON object in a saved run or snapshot, depth first (a generator's entry among them)."""
    if isinstance(value, dict):
        return [value, *(entry for item in value.values() for entry in entries(item))]
    if isinstance(value, list):
        return [entry for item in value for entry in entries(item)]
    return []
