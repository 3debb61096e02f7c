"""A run between rounds as JSON text: the saved run machine and the handoff, in one object graph.

One graph, not one snapshot per branch, so identity holds across branches: a list a parent
passed to its child is still one list after a round. Each branch's Context travels with its
branch state (a generator's `ctx` is re-bound to the restored state, never copied), and every
generator is a compiled one, restored by code hash exactly as `branchc.resume` does.

The text is what the bridge hands the SDK as `request_state` (which seals it) or keeps for a
guided run. Loading it never names a module outside the compiled tools and branchc's own data
types; anything malformed is a RunStateError that says where.
"""

from __future__ import annotations

import json
from typing import Any

from ..continuation.errors import SnapshotDataError, SnapshotError
from ..continuation.generator import release_reachable
from ..continuation.snapshots import decode_graph, encode_graph
from .context import BranchState, Context
from .errors import BranchcError
from .machine import Machine

__all__ = ["RunStateError", "dump_run", "load_run"]

VERSION = 1


class RunStateError(BranchcError, ValueError):
    """A saved run that cannot be continued here: malformed, or of code this server does not have."""


def _encode_context(value: Any, child: Any, path: Any) -> dict | None:
    """A run has many branches: each Context travels with its branch state."""
    if type(value) is Context:
        return {"t": "ctx", "branch": child(value._branch, (path, "branch", ".{}"))}
    return None


def _decode_context(entry: dict, child: Any, path: str) -> Context:
    if entry.keys() != {"t", "branch"}:
        raise SnapshotDataError(path, "a context entry in a run is {t, branch}")
    branch = child(entry["branch"], (path, "branch", ".{}"))
    if type(branch) is not BranchState:
        raise SnapshotDataError(f"{path}.branch", "expected a branch state")
    return Context(branch)


def dump_run(handoff: Any, machine: Machine) -> str:
    graph = encode_graph({"handoff": handoff, "machine": machine.saved()}, _encode_context)
    return json.dumps({"branchc_run": VERSION, "graph": graph}, separators=(",", ":"), ensure_ascii=False)


def load_run(text: str, emit: Any = None) -> tuple[Any, Machine]:
    """(handoff, machine) from `dump_run`'s text; `emit` receives the restored machine's events."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise RunStateError(f"the saved run is not JSON: {error}") from None
    if type(data) is not dict or data.keys() != {"branchc_run", "graph"} or data["branchc_run"] != VERSION:
        raise RunStateError(f'the saved run is not {{"branchc_run": {VERSION}, "graph": ...}}')
    try:
        roots = decode_graph(data["graph"], _decode_context)
    except (SnapshotDataError, SnapshotError) as error:
        raise RunStateError(f"the saved run cannot be continued here: {error}") from None
    saved = roots.get("machine")
    if roots.keys() != {"handoff", "machine"} or type(saved) is not dict or saved.keys() != set(Machine._SAVED):
        release_reachable(roots)  # refused: what was rebuilt is let go of, running none of its cleanup
        raise RunStateError("the saved run holds no run machine")
    return roots["handoff"], Machine.restored(saved, emit)
