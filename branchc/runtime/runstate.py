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
import dataclasses
import hashlib
import operator
import re
import sys
import zlib
from typing import Any

from pydantic import BaseModel

from ..continuation.errors import SnapshotDataError, SnapshotError
from ..continuation.generator import release_reachable
from ..continuation.snapshots import VERSION, check_version, decode_graph, dump_json, encode_graph, parse_json
from .client import ElicitRequest, SampleRequest
from .context import BranchState, Context
from .errors import BranchcError
from .limits import Limits
from .machine import Call, Machine, Request, _Branch
from .messages import Message
from .toolcalls import ToolCallState, ToolResult

__all__ = [
    "MAX_RUN_BYTES",
    "SEGMENT_MESSAGES",
    "RunStateError",
    "SavedRun",
    "dump_run",
    "load_run",
    "pack_run",
    "unpack_run",
]

#: The most bytes of run text `unpack_run` gives back (unless told otherwise): a packed run that
#: unpacks to more is refused, having cost no more than this much memory and the time to inflate it.
MAX_RUN_BYTES = 16 * 2**20
#: What a packed run starts with: the packing's own format version.
PACKED = "z1:"
_LEVEL = 6  # zlib's default: at 1,000 rounds, a third smaller than level 1 for twice its few ms
#: Messages of a branch's history in one segment: a store keeps each full block of them once (SavedRun).
SEGMENT_MESSAGES = 32
_MARK = "\x00branchc segment"  # and the segment's digest: what stands for a segment in the head
_MARKS = re.compile(r'"\\u0000branchc segment ([0-9a-f]{32})"')  # a mark as JSON writes it


class RunStateError(BranchcError, ValueError):
    """A saved run that cannot be continued here: malformed, or of code this server does not have."""


_BRANCH_FIELDS = tuple(field.name for field in dataclasses.fields(BranchState) if field.name != "messages")
_ROLES = frozenset(("user", "assistant", "system"))
_MESSAGE_FIELDS = frozenset(("role", "content"))
_new = object.__new__
_setattr = object.__setattr__


def _refs_in_loop(values: list[Any]) -> int:
    for value in values:
        return sys.getrefcount(value)
    raise AssertionError


#: A value's references while `_history` looks at it, when nothing but the branch's list holds it.
_ALONE = _refs_in_loop([object()])


def _history(messages: list[Any], child: Any, path: Any, alone: int) -> list[Any]:
    """A branch's history as flat data: ``role, content`` for each text message nothing else holds (most
    of a conversation: JSON copies these at C speed, and they are rebuilt without validation: a sealed
    run is the server's own), ``0, entry`` for any other (held elsewhere too, so its identity is kept
    by the codec, or a tool-call message)."""
    out: list[Any] = []
    add = out.extend
    for message in messages:
        if type(message) is Message and sys.getrefcount(message) <= alone:
            state = message.__dict__
            role, content = state["role"], state["content"]
            if type(content) is str and type(role) is str:
                add((role, content))
                continue
        add((0, child(message, (path, len(out) // 2))))
    return out


def _run_extension(holders: dict[str, int], marked: list[tuple[dict, list, int]], blocks: dict[str, list]) -> Any:
    """The run's own values: each Context travels with its branch state, and each branch state with
    its history as flat data; `holders`: branch id -> how many lists besides the branch's own hold its
    messages (a pending sample's, which the saved run does not repeat). A history with full blocks of
    plain messages goes in `marked` as (its entry, the history with a mark for each, how many), their items in
    `blocks`."""

    def extension(value: Any, child: Any, path: Any) -> dict | None:
        kind = type(value)
        if kind is Context:
            return {"t": "ctx", "branch": child(value._branch, (path, "branch", ".{}"))}
        if kind is BranchState:
            fields = {name: getattr(value, name) for name in _BRANCH_FIELDS}
            alone = _ALONE + holders.get(value.id, 0)
            history = _history(value.messages, child, (path, "messages", ".{}"), alone)
            entry = {"t": "branch", "fields": child(fields, path), "history": history}
            if len(history) >= _BLOCK:
                marked.append((entry, *_marked(value, history, blocks)))
            return entry
        if kind is _Saved:
            return _machine_entry(value.machine, child, path)
        return None

    extension.owns = lambda kind: kind in _OWNED  # type: ignore[attr-defined]
    return extension


_BLOCK = 2 * SEGMENT_MESSAGES  # a segment's items: role, content for each message


def _marked(state: BranchState, history: list[Any], blocks: dict[str, list]) -> tuple[list[Any], int]:
    """`history` with a mark for each full block of plain messages (none kept by the codec: those name
    values elsewhere in the graph), the block's items in `blocks` by their digest. The digests are kept on
    the branch state with the items they were taken of (the same str objects, so the same text): a round
    digests only the blocks it added."""
    known = state.__dict__.get("_bc_blocks") or []
    found: list[tuple[list[Any], str | None]] = []
    out: list[Any] = []
    for start in range(0, len(history) - _BLOCK + 1, _BLOCK):
        items = history[start : start + _BLOCK]
        index = len(found)
        if index < len(known) and all(map(operator.is_, known[index][0], items)):
            items, ref = known[index]
        else:
            ref = None if 0 in items[::2] else hashlib.blake2b(_items_json(items), digest_size=16).hexdigest()
        found.append((items, ref))
        if ref is None:
            out += items
        else:
            blocks[ref] = items
            out.append(f"{_MARK} {ref}")
    _setattr(state, "_bc_blocks", found)
    out += history[len(found) * _BLOCK :]
    return out, sum(ref is not None for _, ref in found)


def _items_json(items: list[Any]) -> bytes:
    """A block's items as JSON, comma-separated (no brackets): what stands in the text for its mark."""
    return dump_json(items).encode()[1:-1]


class SavedRun(str):
    """dump_run's text, with the parts a store keeps apart so that a checkpoint writes only what it added:
    `pieces` and the segment of each of `refs` between them, joined, are the text. A segment is a full block
    of SEGMENT_MESSAGES plain messages of a branch's history, named by the BLAKE2b digest of its text, so a
    block is named the same at every later checkpoint (and in every fork)."""

    pieces: tuple[str, ...]
    refs: tuple[str, ...]
    _blocks: dict[str, list[Any]]

    def segment(self, ref: str) -> bytes:
        """The text that stands for `ref` (UTF-8): its messages' JSON items, comma-separated."""
        return _items_json(self._blocks[ref])


def _saved_run(text: str, data: dict[str, Any], marked: list[tuple[dict, list, int]], blocks: dict) -> SavedRun:
    """The text, and its parts: the graph dumped again with each history's marks (a few KB for a long
    conversation), split at them."""
    saved = SavedRun(text)
    saved.pieces, saved.refs, saved._blocks = (text,), (), {}
    if blocks:
        for entry, history, _ in marked:
            entry["history"] = history
        parts = _MARKS.split(dump_json(data))
        # a mark is a string no message is; a run holding one as a value of its own is kept whole
        if len(parts) // 2 == sum(count for _, _, count in marked):
            saved.pieces, saved.refs, saved._blocks = tuple(parts[0::2]), tuple(parts[1::2]), blocks
    return saved


class _Saved:
    """A machine as the run's graph holds it: one entry in short (`_machine_entry`), not a tree of dataclasses."""

    __slots__ = ("machine",)

    def __init__(self, machine: Machine) -> None:
        self.machine = machine


_OWNED = frozenset((Context, BranchState, _Saved))
_SAMPLE_FIELDS = tuple(SampleRequest.model_fields)
_REQUEST_FIELDS = tuple(field.name for field in dataclasses.fields(Request))


def _machine_entry(machine: Machine, child: Any, path: Any) -> dict:
    """The machine's own structure as plain JSON, the values in it (generators, branch states, what a
    request carries) through the codec. Its branches, groups and requests are its own: nothing else holds
    them, so they need no identity of their own in the graph."""
    branches = [
        [ident, child(b.state, (path, ident)), child(b.generator, (path, ident)), child(b.parent, path), b.wait]
        for ident, b in machine.branches.items()
    ]
    requests = []
    for request in machine.requests.values():
        sample = request.sample
        if sample is not None:
            state = sample.__dict__
            if len(sample.__pydantic_fields_set__) != len(_SAMPLE_FIELDS):
                sample = child(sample, (path, request.key))
            else:
                messages = None if _mirrors(request, machine.branches) else child(state["messages"], path)
                sample = [messages, *(child(state[name], path) for name in _SAMPLE_FIELDS[1:])]
        requests.append(
            [
                request.key,
                request.branch,
                child(request.where, path),
                request.kind,
                request.number,
                child(request.deadline, path),
                sample,
                child(request.prompt, path),
                request.prompt_tokens,
                request.reserved,
                child(request.elicit, path),
                child(request.schema, path),
                child(request.context, (path, request.key, ".{}")),
                *([True] if request.continues else []),  # written only when set: a run of before it reads as ever
            ]
        )
    entry = {
        "t": "machine",
        "tool": machine.tool,
        "call": machine.call_id,
        "limits": child(machine.limits, path),
        "counts": [machine.samples, machine.elicits, machine.groups_made],
        "branches": branches,
        "groups": child(machine.groups, path),
        "requests": requests,
    }
    if machine.tool_calls:  # a run that made tool calls: their count, and those it waits on (a run without says none)
        entry["counts"].append(machine.tool_calls)
        entry["calls"] = [
            [c.key, c.branch, child(c.where, path), c.number, child(c.call, (path, c.key))]
            for c in machine.calls.values()
        ]
    return entry


def _decode_machine(entry: dict, child: Any, path: str) -> dict[str, Any]:
    """Machine.saved()'s dict from `_machine_entry`'s entry, every part checked for its kind."""
    if entry.keys() - {"calls"} != _MACHINE_FIELDS:
        raise SnapshotDataError(
            path, "a machine entry is {t, tool, call, limits, counts, branches, groups, requests} and perhaps calls"
        )
    tool, call, counts = entry["tool"], entry["call"], entry["counts"]
    if type(tool) is not str or type(call) is not str:
        raise SnapshotDataError(f"{path}.tool", "expected the tool's name and the call's id")
    if (
        type(counts) is not list
        or len(counts) != (4 if "calls" in entry else 3)
        or any(type(count) is not int for count in counts)
    ):
        raise SnapshotDataError(f"{path}.counts", "expected [samples, elicitations, groups] and tool calls with calls")
    limits = child(entry["limits"], f"{path}.limits")
    if type(limits) is not Limits:
        raise SnapshotDataError(f"{path}.limits", "expected the run's limits")
    groups = child(entry["groups"], f"{path}.groups")
    if type(groups) is not dict:
        raise SnapshotDataError(f"{path}.groups", "expected an object")
    branches, requests = entry["branches"], entry["requests"]
    if type(branches) is not list or type(requests) is not list:
        raise SnapshotDataError(path, "expected lists of branches and requests")
    saved_branches: dict[str, _Branch] = {}
    for index, item in enumerate(branches):
        where = f"{path}.branches[{index}]"
        if type(item) is not list or len(item) != 5 or type(item[0]) is not str or type(item[4]) not in (str, NONE):
            raise SnapshotDataError(where, "expected [id, state, generator, parent, wait]")
        state = child(item[1], f"{where}[1]")
        if type(state) is not BranchState:
            raise SnapshotDataError(f"{where}[1]", "expected a branch state")
        saved_branches[item[0]] = _Branch(state, child(item[2], f"{where}[2]"), child(item[3], f"{where}[3]"), item[4])
    saved_requests: dict[str, Request] = {}
    for index, item in enumerate(requests):
        where = f"{path}.requests[{index}]"
        if type(item) is not list or len(item) not in (len(_REQUEST_FIELDS) - 1, len(_REQUEST_FIELDS)):
            raise SnapshotDataError(where, f"expected [{', '.join(_REQUEST_FIELDS)}] (the last one only when true)")
        fields = dict(zip(_REQUEST_FIELDS, [*item, False][: len(_REQUEST_FIELDS)], strict=True))
        if fields["continues"] is not True and fields["continues"] is not False:
            raise SnapshotDataError(f"{where}.continues", "expected true")
        for name in ("where", "deadline", "prompt", "elicit", "schema", "context"):
            fields[name] = child(fields[name], f"{where}.{name}")
        fields["sample"] = _decode_sample(fields["sample"], child, f"{where}.sample")
        problem = _request_problem(fields)
        if problem is not None:
            raise SnapshotDataError(f"{where}.{problem[0]}", problem[1])
        saved_requests[fields["key"]] = Request(**fields)
    return {
        "tool": tool,
        "call_id": call,
        "limits": limits,
        "samples": counts[0],
        "elicits": counts[1],
        "groups_made": counts[2],
        "branches": saved_branches,
        "groups": groups,
        "requests": saved_requests,
        "calls": _decode_calls(entry.get("calls", []), child, f"{path}.calls"),
        "tool_calls": counts[3] if len(counts) == 4 else 0,
    }


_MACHINE_FIELDS = frozenset(("t", "tool", "call", "limits", "counts", "branches", "groups", "requests"))


def _decode_calls(items: Any, child: Any, path: str) -> dict[str, Call]:
    """The tool calls a saved run waits on, each part checked for its kind."""
    if type(items) is not list:
        raise SnapshotDataError(path, "expected a list of tool calls")
    calls: dict[str, Call] = {}
    for index, item in enumerate(items):
        where = f"{path}[{index}]"
        if type(item) is not list or len(item) != 5 or type(item[0]) is not str or type(item[1]) is not str:
            raise SnapshotDataError(where, "expected [key, branch, where, number, call]")
        if type(item[3]) is not int:
            raise SnapshotDataError(f"{where}[3]", "expected the call's number")
        target = child(item[2], f"{where}[2]")
        state = child(item[4], f"{where}[4]")
        if type(target) is not list or type(state) is not ToolCallState:
            raise SnapshotDataError(where, "expected where the call's outcome goes and the call's state")
        problem = _call_problem(state)
        if problem is not None:
            raise SnapshotDataError(f"{where}[4].{problem[0]}", problem[1])
        calls[item[0]] = Call(item[0], item[1], target, item[3], state)
    return calls


def _call_problem(state: ToolCallState) -> tuple[str, str] | None:
    """(field, problem) of a tool call read back that the machine could not use; None when it can."""
    kinds: dict[str, tuple[type, ...]] = {
        "name": (str,), "arguments": (dict,), "server": (str, NONE), "id": (str,), "answers": (bool,),
        "deadline": (float, int, NONE), "started": (bool,), "upstream_state": (str, NONE), "asked": (dict,),
        "replies": (dict,), "step": (int,),
    }  # fmt: skip
    for name, allowed in kinds.items():
        if type(getattr(state, name, None)) not in allowed:
            return name, f"expected {' or '.join(kind.__name__ for kind in allowed)}"
    if state.phase not in ("call", "running", "after", "asking"):
        return "phase", "expected call, running, after or asking"
    outcome = state.outcome
    if outcome is not None and not (
        type(outcome) is tuple
        and len(outcome) == 2
        and (
            (outcome[0] is True and type(outcome[1]) is ToolResult)
            or (outcome[0] is False and isinstance(outcome[1], Exception))
        )
    ):
        return "outcome", "expected (True, a ToolResult) or (False, an exception)"
    return None


NONE = type(None)


def _decode_sample(item: Any, child: Any, path: str) -> SampleRequest | None:
    if item is None:
        return None
    if type(item) is not list:
        sample = child(item, path)
        if type(sample) is not SampleRequest:
            raise SnapshotDataError(path, "expected a sample request")
        return sample
    if len(item) != len(_SAMPLE_FIELDS):
        raise SnapshotDataError(path, f"expected [{', '.join(_SAMPLE_FIELDS)}]")
    values = [None if item[0] is None else child(item[0], f"{path}[0]")]
    values += [child(value, f"{path}[{index}]") for index, value in enumerate(item[1:], 1)]
    if values[0] is not None and type(values[0]) is not list:
        raise SnapshotDataError(f"{path}[0]", "expected the sample's messages")
    return SampleRequest.model_construct(**dict(zip(_SAMPLE_FIELDS, values, strict=True)))


def _request_problem(fields: dict[str, Any]) -> tuple[str, str] | None:
    """(field, problem) of a request read back that Machine could not use; None when it can."""
    kinds = {
        "key": str, "branch": str, "where": list, "number": int, "prompt_tokens": int, "reserved": int,
    }  # fmt: skip
    for name, kind in kinds.items():
        if type(fields[name]) is not kind:
            return name, f"expected {kind.__name__}"
    if fields["kind"] not in ("sample", "elicit"):
        return "kind", "expected 'sample' or 'elicit'"
    if type(fields["deadline"]) not in (float, int, NONE):
        return "deadline", "expected a time or null"
    if type(fields["prompt"]) not in (Message, NONE):
        return "prompt", "expected a message or null"
    if type(fields["elicit"]) not in (ElicitRequest, NONE):
        return "elicit", "expected an elicitation request or null"
    schema = fields["schema"]
    if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return "schema", "expected a model class or null"
    return None


def _decode_entry(entry: dict, child: Any, path: str) -> Any:
    tag = entry.get("t")
    if tag == "branch":
        return _decode_branch(entry, child, path)
    if tag == "machine":
        return _decode_machine(entry, child, path)
    if entry.keys() != {"t", "branch"}:
        raise SnapshotDataError(path, "a context entry in a run is {t, branch}")
    branch = child(entry["branch"], (path, "branch", ".{}"))
    if type(branch) is not BranchState:
        raise SnapshotDataError(f"{path}.branch", "expected a branch state")
    return Context(branch)


def _decode_branch(entry: dict, child: Any, path: str) -> BranchState:
    if entry.keys() != {"t", "fields", "history"}:
        raise SnapshotDataError(path, "a branch entry in a run is {t, fields, history}")
    fields = child(entry["fields"], (path, "fields", ".{}"))
    # `tools` is missing from a run saved before branches had it: such a branch may call any tool, as then
    if type(fields) is not dict or fields.keys() | {"tools"} != set(_BRANCH_FIELDS):
        raise SnapshotDataError(f"{path}.fields", f"expected the fields {', '.join(_BRANCH_FIELDS)}")
    tools = fields.get("tools")
    if tools is not None and (type(tools) is not tuple or any(type(name) is not str for name in tools)):
        raise SnapshotDataError(f"{path}.fields.tools", "expected a tuple of tool names, or null")
    history = entry["history"]
    if type(history) is not list or len(history) % 2:
        raise SnapshotDataError(f"{path}.history", "expected a list of role, content pairs")
    messages: list[Any] = []
    for index in range(0, len(history), 2):
        role, content = history[index], history[index + 1]
        if type(role) is str and type(content) is str and role in _ROLES:
            message = _new(Message)  # what Message(role=role, content=content) holds, made without validation
            _setattr(message, "__dict__", {"role": role, "content": content})
            _setattr(message, "__pydantic_fields_set__", set(_MESSAGE_FIELDS))
            _setattr(message, "__pydantic_extra__", None)
            _setattr(message, "__pydantic_private__", None)
        elif role == 0 and type(role) is int:
            message = child(content, f"{path}.history[{index + 1}]")
        else:
            raise SnapshotDataError(
                f"{path}.history[{index}]", f"expected a role ({', '.join(sorted(_ROLES))}) and its text, or 0"
            )
        messages.append(message)
    return BranchState(**fields, messages=messages)


_RUN_TAGS = frozenset(("ctx", "branch", "machine"))


def _mirrors(request: Any, branches: dict[str, Any]) -> bool:
    """Whether a tracked sample's message list is its branch's history plus its prompt (as _sample makes
    it): the saved run keeps the history once, and the list is made again on load."""
    sample, branch = request.sample, branches.get(request.branch)
    if sample is None or request.prompt is None or branch is None:
        return False
    history, messages = branch.state.messages, sample.messages
    return (
        len(messages) == len(history) + 1
        and messages[-1] is request.prompt
        and all(map(operator.is_, messages, history))
    )


def dump_run(handoff: Any, machine: Machine) -> SavedRun:
    machine.saved()  # checks that it may be saved now
    holders: dict[str, int] = {}
    for request in machine.requests.values():
        if _mirrors(request, machine.branches):
            holders[request.branch] = holders.get(request.branch, 0) + 1
    marked: list[tuple[dict, list, int]] = []
    blocks: dict[str, list] = {}
    graph = encode_graph({"handoff": handoff, "machine": _Saved(machine)}, _run_extension(holders, marked, blocks))
    data = {"branchc_run": VERSION, "graph": graph}
    text = dump_json(data)
    machine.saved_bytes = len(text)
    return _saved_run(text, data, marked, blocks)


def _mirror_histories(saved: dict[str, Any]) -> None:
    """Give each tracked sample saved without its message list (see _mirrors) its branch's history plus
    its prompt again, as the same objects."""
    requests, branches = saved["requests"], saved["branches"]
    if type(requests) is not dict or type(branches) is not dict:
        return  # Machine.restored refuses it
    for key, request in requests.items():
        sample = getattr(request, "sample", None)
        if not isinstance(sample, SampleRequest) or sample.messages is not None:
            continue
        branch = branches.get(getattr(request, "branch", None))
        state = getattr(branch, "state", None)
        if type(state) is not BranchState or type(request.prompt) is not Message:
            raise RunStateError(f"the saved run's request {key!r} has no history to take its messages from")
        request.sample = sample.model_copy(update={"messages": [*state.messages, request.prompt]})


def pack_run(text: str) -> str:
    """`dump_run`'s text, compressed, as ASCII (no character that JSON escapes): ``z1:<base64 of zlib>``."""
    data = text.encode("utf-8", "surrogatepass")
    # a window no larger than the text: the same output, without setting up (and clearing) zlib's largest
    # tables for a text of a few KB, which took most of the time of packing one
    window = min(15, max(9, len(data).bit_length()))
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, window, max(1, min(8, window - 7)))
    raw = packer.compress(data) + packer.flush()
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
        roots = decode_graph(data["graph"], _decode_entry, runner_tags=_RUN_TAGS)
    except (SnapshotDataError, SnapshotError) as error:
        raise RunStateError(f"the saved run cannot be continued here: {error}") from None
    saved = roots.get("machine")
    if roots.keys() != {"handoff", "machine"} or type(saved) is not dict or saved.keys() != set(Machine._SAVED):
        release_reachable(roots)  # refused: what was rebuilt is let go of, running none of its cleanup
        raise RunStateError("the saved run holds no run machine")
    try:
        _mirror_histories(saved)
    except RunStateError:
        release_reachable(roots)
        raise
    return roots["handoff"], Machine.restored(saved, emit)
