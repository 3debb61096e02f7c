"""Snapshot cost, as ratios against baselines measured in the same run (issue 22).

1. Suspension: what a user pays to suspend a compiled generator whose live state is a chat
   history of N messages and a few scalars, and continue it elsewhere:

       text = dump_json(branchc.snapshot(gen)); branchc.resume(parse_json(text)); branchc.release(gen)

   (dump_json / parse_json: branchc.continuation.snapshots, msgspec underneath, exact), on a
   generator of a module compiled into a temp folder, with the history as pydantic models (a frozen
   BaseModel with role and content, defined in that module) and as dicts. The same with json.dumps /
   json.loads is shown too. Baselines, the same live data without branchc:

   - dicts: json.dumps + json.loads of the live data (target: at most 1.0x);
   - models: JSON plus pydantic's own dump and validate of the history; the faster of
     `[m.model_dump() for m in h]` ... `[Message.model_validate(d) for d in ...]` and
     TypeAdapter(list[Message]).dump_python / validate_python, each around json.dumps + json.loads
     (target: at most 1.5x). A pydantic model of the whole state through model_dump_json /
     model_validate_json (no json module at all) is shown too, for information.

   Size: the snapshot's JSON text against the live data's (json.dumps), target at most 1.2x.

2. Codec: encode + json + decode of the same live data (dict history), against json alone.

Steps take turns within each repeat, so machine noise hits all alike; figures are medians over
the repeats, with the spread (25th to 75th percentile) beside them, and ratios of medians with the
spread of the per-repeat ratios.

    python benchmarks/bench_codec.py [--messages 20] [--repeat 15] [--number 500] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import pstats
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

import branchc
from branchc.continuation.codec import decode, encode, from_modules
from branchc.continuation.snapshots import dump_json, parse_json
from branchc.splitter import load_source

SENTENCES = [
    "Draw five cards and tell me which one to keep.",
    "You drew the ace of spades, the queen of hearts, two sevens and the jack of clubs.",
    "Keep the ace: it ranks highest, and the pair of sevens is worth less than it looks in this game.",
    "Why not the pair?",
    "A pair only scores when the third card of the same rank turns up, which is unlikely with two sevens gone.",
    "OK, keep the ace.",
]

TOOL = """
from pydantic import BaseModel, ConfigDict

from branchc import resumable


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: str
    content: str


class State(BaseModel):
    history: list[Message]
    step: int
    topic: str
    analyze: bool
    score: float
    choice: str | None


@resumable
def chat(history, step, topic, analyze, score, choice):
    while True:
        reply = yield step
        if reply is not None:
            history = [*history, reply]
        step += 1
        if analyze and score > 1.0:
            choice = topic
"""


def live_data(messages: int) -> dict:
    history = []
    for index in range(messages):
        role = "user" if index % 2 == 0 else "assistant"
        text = " ".join(SENTENCES[(index + k) % len(SENTENCES)] for k in range(1 + index % 3))
        history.append({"role": role, "content": text})
    return {"history": history, "step": 7, "topic": "cards", "analyze": True, "score": 0.75, "choice": None}


def no_extension(value, encode_child, path):
    return None


def measure(steps: dict[str, Callable[[], Any]], repeat: int, number: int) -> dict[str, list[float]]:
    """Seconds per call of each step, one figure per repeat; the steps take turns."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeat):
        for name, fn in steps.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - start) / number)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def shown(values: list[float]) -> str:
    """The median in us, and the 25th to 75th percentile around it."""
    low, _, high = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{median(values) * 1e6:8.2f} us  ({low * 1e6:7.2f} .. {high * 1e6:7.2f})"


def ratio_spread(over: list[float], under: list[float]) -> str:
    """The ratio of medians, and the range of the per-repeat ratios' middle half."""
    ratios = [a / b for a, b in zip(over, under, strict=True)]
    low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return f"{median(over) / median(under):.2f}x (per repeat {low:.2f} .. {high:.2f})"


def load_tool(folder: Path) -> Any:
    """The compiled tool module, written to a file in `folder` and loaded from there."""
    path = folder / "bench_codec_tool.py"
    path.write_text(textwrap.dedent(TOOL))
    return load_source(path.read_text(), "bench_codec_tool", str(path))


class Chain:
    """A suspended generator that is snapshotted, sent through JSON text, resumed, and released, over
    and over: each round continues the copy the round before made, as a run moving between hosts."""

    def __init__(self, generator: Any, dumps: Callable[[Any], str] = dump_json, loads: Callable = parse_json) -> None:
        self.generator = generator
        self.dumps, self.loads = dumps, loads
        self.phases = {"snapshot": 0.0, "json text": 0.0, "parse": 0.0, "resume": 0.0, "release": 0.0}

    def round(self) -> None:
        generator = self.generator
        text = self.dumps(branchc.snapshot(generator))
        self.generator = branchc.resume(self.loads(text))
        branchc.release(generator)

    def timed_round(self) -> None:
        """The same, with each phase timed."""
        clock, phases, generator = time.perf_counter, self.phases, self.generator
        t0 = clock()
        data = branchc.snapshot(generator)
        t1 = clock()
        text = self.dumps(data)
        t2 = clock()
        parsed = self.loads(text)
        t3 = clock()
        self.generator = branchc.resume(parsed)
        t4 = clock()
        branchc.release(generator)
        t5 = clock()
        for name, start, end in zip(phases, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5), strict=True):
            phases[name] += end - start


def suspension(args: argparse.Namespace, module: Any) -> dict[str, float]:
    live = live_data(args.messages)
    Message, State = module.Message, module.State
    models = [Message(**m) for m in live["history"]]
    scalars = {k: v for k, v in live.items() if k != "history"}
    adapter = TypeAdapter(list[Message])
    state = State(history=models, **scalars)

    def start(history: list, dumps: Callable[[Any], str] = dump_json, loads: Callable = parse_json) -> Chain:
        generator = module.chat(history, **scalars)
        assert next(generator) == scalars["step"]
        chain = Chain(generator, dumps, loads)
        chain.round()
        data = loads(dumps(branchc.snapshot(chain.generator)))
        copy = branchc.resume(data)
        assert copy.gi_frame.f_locals["history"] == history  # exact: the same values back
        branchc.release(copy)
        return chain

    dicts, modelled = start(live["history"]), start(models)
    dicts_json, modelled_json = start(live["history"], json.dumps, json.loads), start(models, json.dumps, json.loads)

    def plain() -> None:
        json.loads(json.dumps(live))

    def dump_validate() -> None:
        data = json.loads(json.dumps({**scalars, "history": [m.model_dump() for m in models]}))
        [Message.model_validate(d) for d in data["history"]]

    def adapter_python() -> None:
        data = json.loads(json.dumps({**scalars, "history": adapter.dump_python(models)}))
        adapter.validate_python(data["history"])

    def state_json() -> None:
        State.model_validate_json(state.model_dump_json())

    steps = {
        "json (dict history)": plain,
        "branchc (dict history)": dicts.round,
        "branchc (dict history), json module": dicts_json.round,
        "model_dump / model_validate + json": dump_validate,
        "TypeAdapter dump/validate_python + json": adapter_python,
        "State model_dump_json / validate_json": state_json,
        "branchc (model history)": modelled.round,
        "branchc (model history), json module": modelled_json.round,
    }
    times = measure(steps, args.repeat, args.number)
    print(f"Suspension: snapshot -> JSON text -> parse -> resume, and release; {args.messages} messages,")
    print(f"median of {args.repeat} x {args.number} rounds (25th .. 75th percentile)")
    for name, values in times.items():
        print(f"  {name:42s} {shown(values)}")

    for chain in (dicts, modelled):  # where a round's time goes
        for _ in range(args.number):
            chain.timed_round()
        total = sum(chain.phases.values())
        parts = ", ".join(f"{name} {seconds / args.number * 1e6:.1f}" for name, seconds in chain.phases.items())
        kind = "dict" if chain is dicts else "model"
        print(f"  phases, {kind} history (us): {parts}; sum {total / args.number * 1e6:.1f}")

    pydantic_names = ["model_dump / model_validate + json", "TypeAdapter dump/validate_python + json"]
    fastest = min(pydantic_names, key=lambda name: median(times[name]))
    dict_ratio = ratio_spread(times["branchc (dict history)"], times["json (dict history)"])
    print(f"time, dict history / json:  {dict_ratio}  target <= 1.0x")
    dict_json = median(times["branchc (dict history), json module"]) / median(times["json (dict history)"])
    print(f"  with json.dumps / json.loads: {dict_json:.2f}x")
    print(f"time, model history / {fastest} (the faster baseline):")
    print(f"    {ratio_spread(times['branchc (model history)'], times[fastest])}  target <= 1.5x")
    with_json = median(times["branchc (model history), json module"]) / median(times[fastest])
    print(f"  with json.dumps / json.loads: {with_json:.2f}x")
    for name in [*pydantic_names, "State model_dump_json / validate_json"]:
        if name != fastest:
            print(f"  against {name}: {median(times['branchc (model history)']) / median(times[name]):.2f}x")

    plain_size = len(json.dumps(live))
    for kind, chain in (("dict", dicts), ("model", modelled)):
        size = len(json.dumps(branchc.snapshot(chain.generator)))
        text = len(dump_json(branchc.snapshot(chain.generator)).encode())
        print(f"size, {kind} history: {size / plain_size:.2f}x ({size} / {plain_size} bytes by json.dumps)", end="")
        print(f"  target <= 1.2x; dump_json: {text} bytes")
    for chain in (dicts, modelled, dicts_json, modelled_json):
        branchc.release(chain.generator)
    return {name: median(values) for name, values in times.items()}


def codec(args: argparse.Namespace) -> None:
    live = live_data(args.messages)
    allowed = frozenset()
    assert decode(json.loads(json.dumps(encode(live))), classes=from_modules(allowed)) == live

    def plain():
        json.loads(json.dumps(live))

    def round_trip():
        decode(json.loads(json.dumps(encode(live))), classes=from_modules(allowed))

    def round_trip_ext():
        decode(json.loads(json.dumps(encode(live, extension=no_extension))), classes=from_modules(allowed))

    snapshot = encode(live)
    steps = {
        "json.dumps + json.loads (live)": plain,
        "encode": lambda: encode(live),
        "json.dumps + json.loads (snapshot)": lambda: json.loads(json.dumps(snapshot)),
        "decode": lambda: decode(snapshot, classes=from_modules(allowed)),
        "snapshot + json + restore": round_trip,
        "... with a no-op extension": round_trip_ext,
    }
    times = measure(steps, args.repeat, args.number)
    base = times["json.dumps + json.loads (live)"]
    print(f"\nCodec: encode + json + decode of the live data; {args.messages} messages")
    for name, values in times.items():
        print(f"  {name:42s} {shown(values)}")
    plain_size, snap_size = len(json.dumps(live)), len(json.dumps(snapshot))
    print(f"time ratio (target <= 3.0):   {ratio_spread(times['snapshot + json + restore'], base)}")
    print(f"  with a no-op extension:     {ratio_spread(times['... with a no-op extension'], base)}")
    print(f"size ratio (target <= 1.2):   {snap_size / plain_size:.2f}x ({snap_size} / {plain_size} bytes)")


def profile(args: argparse.Namespace, module: Any) -> None:
    """cProfile of the suspension rounds, for each history."""
    live = live_data(args.messages)
    scalars = {k: v for k, v in live.items() if k != "history"}
    for kind, history in (("dict", live["history"]), ("model", [module.Message(**m) for m in live["history"]])):
        generator = module.chat(history, **scalars)
        next(generator)
        chain = Chain(generator)
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [chain.round() for _ in range(args.number * 4)])  # noqa: B023
        print(f"\n-- profile, {kind} history, {args.number * 4} rounds --")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        branchc.release(chain.generator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=500)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the suspension rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sys.path.insert(0, folder)
        try:
            importlib.invalidate_caches()
            module = load_tool(Path(folder))
            suspension(args, module)
            codec(args)
            if args.profile:
                profile(args, module)
        finally:
            sys.path.remove(folder)


if __name__ == "__main__":
    main()
