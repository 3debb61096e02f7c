"""The example tools, compiled, run through the runtime exactly like the native ones,
also when the client generator is snapshotted to JSON and resumed before every step."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import yaml

from branchc import run_tool
from branchc.continuation.snapshots import resume, snapshot
from branchc.runtime.loader import load_tool
from branchc.splitter import load_source
from branchc.testing import MockClient

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "pick_card": {"count": 5, "analyze": True, "seed": 7},
    "book_flight": {"destination": "LIS"},
    "tictactoe": {},
    "research": {"topic": "solid-state batteries"},
}


def compiled_tool(name: str):
    path = ROOT / "examples" / "tools" / f"{name}.py"
    module = load_source(path.read_text(), f"compiled_example_{name}", str(path))
    return getattr(module, name)


class Relay:
    """Steps a compiled generator, replacing it before every step with a copy resumed from JSON."""

    def __init__(self, generator, ctx) -> None:
        self.generator = generator
        self.ctx = ctx
        self.hops = 0
        self.kept = []  # the originals stay referenced: collecting one would run its finally blocks

    def _hop(self) -> None:
        data = json.loads(json.dumps(snapshot(self.generator)))
        self.kept.append(self.generator)
        self.generator = resume(data, context=self.ctx)
        self.hops += 1

    def send(self, value):
        self._hop()
        return self.generator.send(value)

    def throw(self, error):
        self._hop()
        return self.generator.throw(error)

    def close(self):
        return self.generator.close()


def run(tool, name, monkeypatch, tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("BRANCHC_FLIGHTS_DB", str(tmp_path / f"{name}.sqlite"))
    script = yaml.safe_load((ROOT / "examples" / "responses" / f"{name}.yaml").read_text())
    client = MockClient(script.get("sample", []), script.get("elicit", []))
    result = anyio.run(lambda: run_tool(tool, EXAMPLES[name], client, call_id="c1"))
    return result, client


def calls(client: MockClient):
    return (
        [c.model_dump() for c in client.sample_calls],
        [c.model_dump() for c in client.elicit_calls],
        client.log_calls,
        client.notify_calls,
    )


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_compiled_example_matches_native(name, monkeypatch, tmp_path):
    native = load_tool(ROOT / "examples" / "tools" / f"{name}.py", name)
    compiled = compiled_tool(name)
    assert getattr(compiled.client_fn, "__branchc_compiled__", False)
    native_result, native_client = run(native, name, monkeypatch, tmp_path / "native")
    compiled_result, compiled_client = run(compiled, name, monkeypatch, tmp_path / "compiled")
    assert compiled_result == native_result
    assert calls(compiled_client) == calls(native_client)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_compiled_example_survives_json_at_every_step(name, monkeypatch, tmp_path):
    native = load_tool(ROOT / "examples" / "tools" / f"{name}.py", name)
    compiled = compiled_tool(name)
    original = compiled.client_fn
    relays = []

    def relayed(handoff, ctx):
        relay = Relay(original(handoff, ctx), ctx)
        relays.append(relay)
        return relay

    monkeypatch.setattr(compiled, "client_fn", relayed)
    native_result, native_client = run(native, name, monkeypatch, tmp_path / "native")
    result, client = run(compiled, name, monkeypatch, tmp_path / "relayed")
    assert result == native_result
    assert calls(client) == calls(native_client)
    assert relays[0].hops >= 2
