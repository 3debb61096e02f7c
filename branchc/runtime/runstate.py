"""A run between rounds as JSON text: the saved run machine and the handoff, in one object graph.

One graph, not one snapshot per branch, so identity holds across branches: a list a parent
passed to its child is still one list after a round. Each branch's Context travels with its
branch state (a generator's `ctx` is re-bound to the restored state, never copied), and every
generator is a compiled one, restored by code hash exactly as `branchc.resume` does.

The text (`dump_run`) is JSON: ``{"branchc_run": 2, "graph": ...}``, whose graph names each class
once and each set of field names once (the snapshot format 2, see continuation/snapshots.py); a run
saved in another format is refused with a RunStateError that says which. It is what a guided run
keeps and what a store may hold. For transport, `pack_run` compresses it into a shorter ASCII text
(zlib, then base64: what the bridge hands the SDK as `request_state`, which seals it), and
`unpack_run` gives the text back, refusing anything that would unpack past `max_bytes` (a
decompression bomb) before it is unpacked further. Loading never names a module outside the
compiled tools and branchc's own data types; anything malformed is a RunStateError that says where.
"""

from __future__ import annotations

import binascii
import json
import zlib
from typing import Any

from ..continuation.errors import SnapshotDataError, SnapshotError
from ..continuation.generator import release_reachable
from ..continuation.snapshots import VERSION, check_version, decode_graph, encode_graph, parse_json
from .context import BranchState, Context
from .errors import BranchcError
from .machine import Machine

__all__ = ["MAX_RUN_BYTES", "RunStateError", "dump_run", "load_run", "pack_run", "unpack_run"]

#: The most bytes of run text `unpack_run` gives back (unless told otherwise): a packed run that
#: unpacks to more is refused, having cost no more than this much memory and the time to inflate it.
MAX_RUN_BYTES = 16 * 2**20
#: What a packed run starts with: the packing's own format version.
PACKED = "z1:"
_LEVEL = 6  # zlib's default: at 1,000 rounds, a third smaller than level 1 for twice its few ms


class RunStateError(BranchcError, ValueError):
    """A saved run that cannot be continued here: malformed, or of code this server does not have."""


def _encode_context(value: Any, child: Any, path: Any) -> dict | None:
    """A run has many branches: each Context travels with its branch state."""
    if type(value) is Context:
        return {"t": "ctx", "branch": child(value._branch, (path, "branch", ".{}"))}
    return None


_encode_context.owns = lambda kind: kind is Context  # type: ignore[attr-defined]  # the codec asks by type


def _decode_context(entry: dict, child: Any, path: str) -> Context:
    if entry.keys() != {"t", "branch"}:
        raise SnapshotDataError(path, "a context entry in a run is {t, branch}")
    branch = child(entry["branch"], (path, "branch", ".{}"))
    if type(branch) is not BranchState:
        raise SnapshotDataError(f"{path}.branch", "expected a branch state")
    return Context(branch)


def dump_run(handoff: Any, machine: Machine) -> str:
    graph = encode_graph({"handoff": handoff, "machine": machine.saved()}, _encode_context)
    return _JSON.encode({"branchc_run": VERSION, "graph": graph})


# json.dumps(..., separators=(",", ":"), ensure_ascii=False), made once; the codec's graph is a tree of
# fresh lists and dicts (what is shared is written once, in "objects"), so no cycle check is needed.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)


def pack_run(text: str) -> str:
    """`dump_run`'s text, compressed, as ASCII (no character that JSON escapes): ``z1:<base64 of zlib>``."""
    raw = zlib.compress(text.encode("utf-8", "surrogatepass"), _LEVEL)
    return PACKED + binascii.b2a_base64(raw, newline=False).decode("ascii")


def unpack_run(packed: str, *, max_bytes: int = MAX_RUN_BYTES) -> str:
    """The text `pack_run` packed; RunStateError for anything else, and for a packed run that would
    unpack to more than `max_bytes` bytes (refused once that many are out, however well it compresses)."""
    if type(packed) is not str or not packed.startswith(PACKED):
        got = f"{packed[:20]!r}..." if type(packed) is str else type(packed).__name__
        raise RunStateError(f"the saved run is not packed by pack_run (expected {PACKED!r}<base64>, got {got})")
    try:
        raw = binascii.a2b_base64(packed[len(PACKED) :], strict_mode=True)
    except (binascii.Error, ValueError):
        raise RunStateError("the packed run is not base64") from None
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(raw, max_bytes + 1)  # never more than this is inflated
    except zlib.error as error:
        raise RunStateError(f"the packed run is not zlib data: {error}") from None
    if len(out) > max_bytes:
        raise RunStateError(
            f"the packed run unpacks to more than {max_bytes:,} bytes (MAX_RUN_BYTES; pass unpack_run(..., "
            f"max_bytes=...) for bigger runs)"
        )
    if not inflater.eof or inflater.unused_data:
        problem = "is cut short" if not inflater.eof else "has data past its end"
        raise RunStateError(f"the packed run {problem}")
    try:
        return out.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as error:
        raise RunStateError(f"the packed run is not UTF-8 text: {error}") from None


def load_run(text: str, emit: Any = None) -> tuple[Any, Machine]:
    """(handoff, machine) from `dump_run`'s text; `emit` receives the restored machine's events."""
    try:
        data = parse_json(text, "the saved run")
    except SnapshotDataError as error:  # nested deeper than json parses: never a RecursionError
        raise RunStateError(error.problem) from None
    except ValueError as error:
        raise RunStateError(f"the saved run is not JSON: {error}") from None
    try:
        check_version(data, "branchc_run", "the saved run")
    except SnapshotDataError as error:
        raise RunStateError(error.problem) from None
    if data.keys() != {"branchc_run", "graph"}:
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
