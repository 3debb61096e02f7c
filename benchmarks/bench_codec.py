"""Value codec cost: snapshot + json + restore of a tool's live variables against plain json.

The live data is what a chat-style tool holds at a yield: a history of N messages
({"role", "content"} dicts, content from one line to a short paragraph) and a few scalars.
Both sides run in the same process and run; the ratios are

    time:  (encode + json.dumps + json.loads + decode) / (json.dumps + json.loads of the live data)
    size:  len(json.dumps(snapshot)) / len(json.dumps(live data))

Targets: time at most 3x, size at most 1.2x. The codec is measured with and without a no-op
extension (the generator layer always passes one).

    python benchmarks/bench_codec.py [--messages 20] [--repeat 15] [--number 500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from branchc.continuation.codec import decode, encode, from_modules

SENTENCES = [
    "Draw five cards and tell me which one to keep.",
    "You drew the ace of spades, the queen of hearts, two sevens and the jack of clubs.",
    "Keep the ace: it ranks highest, and the pair of sevens is worth less than it looks in this game.",
    "Why not the pair?",
    "A pair only scores when the third card of the same rank turns up, which is unlikely with two sevens gone.",
    "OK, keep the ace.",
]


def live_data(messages: int) -> dict:
    history = []
    for index in range(messages):
        role = "user" if index % 2 == 0 else "assistant"
        text = " ".join(SENTENCES[(index + k) % len(SENTENCES)] for k in range(1 + index % 3))
        history.append({"role": role, "content": text})
    return {"history": history, "step": 7, "topic": "cards", "analyze": True, "score": 0.75, "choice": None}


def no_extension(value, encode_child, path):
    return None


def measure(steps: dict, repeat: int, number: int) -> dict[str, float]:
    """Median seconds per call of each step; the steps take turns, so machine noise hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeat):
        for name, fn in steps.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=500)
    args = parser.parse_args()

    live = live_data(args.messages)
    allowed = frozenset()
    assert decode(json.loads(json.dumps(encode(live))), classes=from_modules(allowed)) == live

    def plain():
        json.loads(json.dumps(live))

    def codec():
        decode(json.loads(json.dumps(encode(live))), classes=from_modules(allowed))

    def codec_ext():
        decode(json.loads(json.dumps(encode(live, extension=no_extension))), classes=from_modules(allowed))

    snapshot = encode(live)
    steps = {
        "json.dumps + json.loads (live)": plain,
        "encode": lambda: encode(live),
        "json.dumps + json.loads (snapshot)": lambda: json.loads(json.dumps(snapshot)),
        "decode": lambda: decode(snapshot, classes=from_modules(allowed)),
        "snapshot + json + restore": codec,
        "... with a no-op extension": codec_ext,
    }
    results = measure(steps, args.repeat, args.number)
    base = results["json.dumps + json.loads (live)"]
    print(f"{args.messages} messages, median of {args.repeat} x {args.number} calls")
    for name, seconds in results.items():
        print(f"  {name:38s} {seconds * 1e6:8.2f} us")
    plain_size, snap_size = len(json.dumps(live)), len(json.dumps(snapshot))
    print(f"time ratio (target <= 3.0):   {results['snapshot + json + restore'] / base:.2f}x")
    print(f"  with a no-op extension:     {results['... with a no-op extension'] / base:.2f}x")
    print(f"size ratio (target <= 1.2):   {snap_size / plain_size:.2f}x ({snap_size} / {plain_size} bytes)")


if __name__ == "__main__":
    main()
