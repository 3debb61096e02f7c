"""Lying workers for tests/test_executor_trust.py: stand-ins for `steps.run_step` that run the step as a
worker would, then answer with what an attack makes of the genuine outcome. They run in the workers of a
real process pool (or dask cluster), which import them from this folder by name."""

from __future__ import annotations

import json
import secrets
import sys
from typing import Any

from branchc.continuation.snapshots import decode_graph, encode_graph
from branchc.runtime import steps
from branchc.runtime.context import Context
from branchc.runtime.effects import All, Branch, Elicit, Log, Sample
from branchc.runtime.messages import Message

#: What a worker that holds the key sends instead of a valid outcome (its MAC is right).
INVALID = (
    "class",
    "branch_of_class",
    "branch_of_client",
    "log_of_trap",
    "elicit_schema",
    "sample_message",
    "all_with_trap",
    "all_nested",
    "raise_trap",
    "other_trap",
    "wrong_generator",
    "unfinished_return",
    "deep",
    "not_json",
    "another_step",
)
#: What a worker without the key (or someone on the way) sends.
FORGED = ("forged", "no_mac", "unsealed_text", "altered", "none")


def held_keys() -> list[bytes]:
    """The step keys this worker process holds."""
    return sorted(steps._KEYS.values())


def lying_step(attack: str, message: bytes, paths: tuple[str, ...], key: Any) -> Any:
    genuine = steps.run_step(message, paths, key)
    secret = key if type(key) is bytes else steps._KEYS[key]
    header, body = steps._open(secret, genuine)
    answer = json.loads(body)
    holder = Context(None)  # type: ignore[arg-type]
    roots = decode_graph(answer["graph"], lambda entry, child, path: holder)
    generator, out = roots["gen"], roots["out"]
    module = sys.modules["trust_tools"]  # the build's, imported by the step
    trap = module.Bait()  # renamed Trap in the JSON below: the codec would not write a callable Trap
    kind = "yield"
    if attack in ("class", "forged", "no_mac", "unsealed_text"):
        out = module.Trap
    elif attack == "branch_of_class":
        out = Branch(fn=module.Trap)
    elif attack == "branch_of_client":
        out = Branch(fn=module.relay_client)  # compiled, but not @resumable
    elif attack == "log_of_trap":
        out = Log("info", trap)
    elif attack == "elicit_schema":
        out = Elicit("pick", "Pick", module.Trap, None)
    elif attack == "sample_message":
        out = Sample(prompt=None, messages=(Message.model_construct(role="user", content=trap),))
    elif attack == "all_with_trap":
        out = All((Log("info", "fine"), trap))
    elif attack == "all_nested":
        out = Log("info", "deep down")
        for _ in range(100):
            out = All((out,))
    elif attack in ("raise_trap", "other_trap"):
        kind, out = ("raise", trap) if attack == "raise_trap" else ("other", trap)
        if kind == "raise":
            generator = module.echo(holder, "w")
            generator.close()  # finished, as after a raise
    elif attack == "wrong_generator":
        generator = module.decoy(holder)
    elif attack == "unfinished_return":
        kind, out = "return", "done early"
    if attack == "deep":
        text = '{"branchc_step":2,"kind":"yield","graph":' + "[" * 100_000 + "]" * 100_000 + "}"
    elif attack == "not_json":
        text = '{"branchc_step":2,'
    else:
        graph = encode_graph({"gen": generator, "out": out})
        text = json.dumps({"branchc_step": 2, "kind": kind, "graph": graph})
        text = text.replace('"trust_tools:Bait"', '"trust_tools:Trap"')
    steps.release(generator)
    data = text.encode()
    if attack == "another_step":
        data = body
        header = header.replace(b'"step":', b'"step":1', 1)  # an authentic outcome of step 1N
    if attack == "forged":
        return steps._seal(secrets.token_bytes(32), header, data)
    if attack == "no_mac":
        return header + b"\n" + data
    if attack == "unsealed_text":
        return text
    if attack == "altered":  # one bit of the body flipped on the way
        at = len(genuine) - len(body) // 2
        return genuine[:at] + bytes([genuine[at] ^ 1]) + genuine[at + 1 :]
    if attack == "none":
        return None
    return steps._seal(secret, header, data)
