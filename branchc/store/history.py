"""A run's past checkpoints, kept beside its record so that a run can be looked back on and forked.

Each time a run comes to wait (it is created waiting, or a checkpoint leaves it waiting with a saved run
made anew: dump_run's SavedRun), the store appends an entry K = 0, 1, 2, ...: where it waited, what it
asked, the answers that brought it there and who gave them (`Checkpoint`), and the saved run in two parts.
The parts are the run's `pieces` and `refs` (runstate.SavedRun): every full block of plain messages in a
branch's history is a segment, named by its digest and kept once per run, so a checkpoint writes its head
and the blocks it added, not the conversation again. A saved text without parts (a plain str) is one piece.

Everything but the run id, K, the time and the key id is sealed with the store's key, as records are:

    info    = AEAD(the Checkpoint as JSON,   associated data: "branchc history info", run id, K, key id)
    head    = AEAD({"refs", "sizes"} JSON, a newline, the pieces' UTF-8,
                                             associated data: "branchc history head", run id, K, key id)
    segment = AEAD(the block's JSON items,   associated data: "branchc segment", ref, key id)

and a segment opened is checked against its name (the BLAKE2b digest of its text), so one cannot stand in
for another. Retention: the store keeps the last `history` entries of each run (None: all of them, the
default); they and the run's segments go when the run goes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .base import RunMeta, RunRecord, StoreDataError
from .keys import KeyRing, SealError

__all__ = ["Appended", "Checkpoint", "HistoryEntry", "Segmented", "appends", "join_saved", "parts_of", "retention"]

INFO_LABEL = b"branchc history info\x00"
HEAD_LABEL = b"branchc history head\x00"
SEGMENT_LABEL = b"branchc segment\x00"


@dataclass(frozen=True)
class Checkpoint:
    """One entry of a run's history: the run's metadata when it came to wait (`meta`: where it waits, what
    it asks, the build and era that saved it), the `answers` that brought it here from entry K - 1 (None for
    the first), who gave them (`by`: the principal, None when no one authenticated) and when (`at`, epoch
    seconds). `forked_from`: (run id, K) when the run began as a fork of that entry."""

    k: int
    at: float
    meta: RunMeta
    answers: Any = None
    by: str | None = None
    forked_from: tuple[str, int] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "at": self.at,
            "meta": self.meta.to_json(),
            "answers": self.answers,
            "by": self.by,
            "forked_from": list(self.forked_from) if self.forked_from else None,
        }

    @classmethod
    def from_json(cls, run_id: str, data: Any) -> Checkpoint:
        """An opened entry's info (sealed: written by a key holder), its layout checked all the same."""
        try:
            forked = data["forked_from"]
            return cls(
                k=int(data["k"]),
                at=float(data["at"]),
                meta=RunMeta.from_json(run_id, data["meta"]),
                answers=data["answers"],
                by=None if data["by"] is None else str(data["by"]),
                forked_from=(str(forked[0]), int(forked[1])) if forked else None,
            )
        except (KeyError, TypeError, ValueError, IndexError) as error:
            problem = f"has an entry not laid out as a checkpoint ({error})"
            raise StoreDataError.bad_field(run_id, "history", problem) from None


def checkpoint_of(record: RunRecord, k: int, at: float, changes: dict[str, Any]) -> Checkpoint:
    """The entry K a write of `record` appends; the last round's response (kept for its retries) is left out."""
    meta = dataclasses.replace(record.meta, answers_digest=None, response=None)
    return Checkpoint(k, at, meta, changes.get("answers"), changes.get("by"), changes.get("forked_from"))


class Segmented(str):
    """A saved run rebuilt from a history entry, with the parts it was kept in (runstate.SavedRun's), so a
    fork made of it writes no segment twice."""

    pieces: tuple[str, ...]
    refs: tuple[str, ...]
    _texts: dict[str, bytes]

    def segment(self, ref: str) -> bytes:
        return self._texts[ref]


def parts_of(saved: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(pieces, refs) of a saved run: SavedRun's and Segmented's own, a plain str's one piece."""
    refs = getattr(saved, "refs", None)
    if refs is None:
        return (str(saved),), ()
    return tuple(saved.pieces), tuple(refs)  # type: ignore[attr-defined]


def join_saved(run_id: str, pieces: Any, refs: Any, texts: dict[str, bytes]) -> Segmented:
    """The saved run of a history entry: its pieces with each segment's text between them."""
    if (
        type(pieces) is not list
        or type(refs) is not list
        or len(pieces) != len(refs) + 1
        or not all(type(p) is str for p in pieces)
        or not all(type(r) is str for r in refs)
    ):
        raise StoreDataError.bad_field(run_id, "history", "has a head that is not {pieces, refs}")
    missing = sorted(set(refs) - texts.keys())
    if missing:
        raise StoreDataError.bad_field(
            run_id, "history", f"names segments the store does not hold ({', '.join(missing[:3])}): it is damaged"
        )
    out = [pieces[0]]
    for ref, piece in zip(refs, pieces[1:], strict=True):
        out += (texts[ref].decode(), piece)
    saved = Segmented("".join(out))
    saved.pieces, saved.refs, saved._texts = tuple(pieces), tuple(refs), {ref: texts[ref] for ref in refs}
    return saved


def appends(changes: dict[str, Any], kept: int | None) -> bool:
    """Whether a checkpoint with `changes` appends to the history (a store keeping `kept` entries): it leaves
    the run waiting with a saved run made anew (runstate.SavedRun, with its parts), not one put back as it
    was read (a plain str: a refused round's run, waiting again where it waited)."""
    return kept != 0 and changes.get("status") == "waiting" and hasattr(changes.get("saved"), "refs")


def retention(value: Any) -> int | None:
    """`--history N|all` as a store takes it: None keeps every entry; N >= 0 the last N (0: none)."""
    if value is None or value == "all":
        return None
    try:
        kept = int(value)
    except (TypeError, ValueError):
        kept = -1
    if isinstance(value, bool) or kept < 0 or str(kept) != str(value).strip():
        raise ValueError(f"history is a number of checkpoints >= 0 or 'all', not {value!r}")
    return kept


def _head_bytes(pieces: tuple[str, ...], refs: tuple[str, ...]) -> bytes:
    """A history entry's head (HistoryEntry.parts says its layout)."""
    data = [piece.encode("utf-8", "surrogatepass") for piece in pieces]
    header = json.dumps({"refs": list(refs), "sizes": [len(part) for part in data]}, separators=(",", ":"))
    return b"".join((header.encode(), b"\n", *data))


def _aad(label: bytes, *values: Any) -> bytes:
    parts = [str(value).encode() for value in values]
    return label + b"".join(len(part).to_bytes(4, "big") + part for part in parts)


@dataclass(frozen=True)
class HistoryEntry:
    """An entry as a backend stores it: K, the time, the key id, the sealed info and head."""

    k: int
    at: float
    key: str
    info: bytes
    head: bytes

    @classmethod
    def seal(cls, keys: KeyRing, run_id: str, checkpoint: Checkpoint, saved: str) -> HistoryEntry:
        pieces, refs = parts_of(saved)
        key, k = keys.sealing_id, checkpoint.k
        # answers are what a client sent: anything JSON lacks is kept as its text, never an error of the write
        info = json.dumps(checkpoint.as_json(), separators=(",", ":"), ensure_ascii=False, default=repr)
        info = info.encode("utf-8", "surrogatepass")
        return cls(
            k,
            checkpoint.at,
            key,
            keys.seal(info, _aad(INFO_LABEL, run_id, k, key)),
            keys.seal(_head_bytes(pieces, refs), _aad(HEAD_LABEL, run_id, k, key)),
        )

    def _open(self, keys: KeyRing, run_id: str, label: bytes, sealed: bytes) -> bytes:
        try:
            return keys.open(self.key, sealed, _aad(label, run_id, self.k, self.key))
        except SealError:
            raise StoreDataError.bad_field(
                run_id, f"history[{self.k}]", "does not match its seal (edited, or moved from another run or place)"
            ) from None

    def checkpoint(self, keys: KeyRing, run_id: str) -> Checkpoint:
        info = self._open(keys, run_id, INFO_LABEL, self.info)
        found = Checkpoint.from_json(run_id, json.loads(info.decode("utf-8", "surrogatepass")))
        if found.k != self.k:
            raise StoreDataError.bad_field(run_id, f"history[{self.k}]", f"holds the info of entry {found.k}")
        return found

    def parts(self, keys: KeyRing, run_id: str) -> tuple[Any, Any]:
        """(pieces, refs) of the entry's saved run. Its head is a line of JSON, `{"refs": [...], "sizes": [...]}`
        (each piece's bytes), then the pieces' UTF-8 as they are: a saved run is JSON, which a JSON string of
        it would escape quote by quote."""
        plain = self._open(keys, run_id, HEAD_LABEL, self.head)
        line, _, body = plain.partition(b"\n")
        try:
            header = json.loads(line)
            refs, sizes = header["refs"], header["sizes"]
            if sum(sizes) != len(body) or len(sizes) != len(refs) + 1 or min(sizes) < 0:
                raise ValueError("its pieces are not the sizes it says")
            pieces, at = [], 0
            for size in sizes:
                pieces.append(body[at : at + size].decode("utf-8", "surrogatepass"))
                at += size
        except (ValueError, KeyError, TypeError) as error:
            problem = f"has a head that is not laid out as pieces and segments ({error})"
            raise StoreDataError.bad_field(run_id, f"history[{self.k}]", problem) from None
        return pieces, refs

    def resealed(self, keys: KeyRing, run_id: str) -> HistoryEntry:
        """The same entry sealed with the ring's first key (a rekey)."""
        found = self.checkpoint(keys, run_id)
        pieces, refs = self.parts(keys, run_id)
        saved = Segmented("")
        saved.pieces, saved.refs = tuple(pieces), tuple(refs)
        return HistoryEntry.seal(keys, run_id, found, saved)


def seal_segment(keys: KeyRing, ref: str, text: bytes) -> tuple[str, bytes]:
    """(key id, sealed text) of the segment `ref`."""
    key = keys.sealing_id
    return key, keys.seal(text, _aad(SEGMENT_LABEL, ref, key))


def open_segment(keys: KeyRing, run_id: str, ref: str, key: str, sealed: bytes) -> bytes:
    """A segment's text, checked against its seal and its name."""
    try:
        text = keys.open(key, sealed, _aad(SEGMENT_LABEL, ref, key))
    except SealError:
        text = None
    if text is None or hashlib.blake2b(text, digest_size=16).hexdigest() != ref:
        raise StoreDataError.bad_field(run_id, f"segments[{ref}]", "does not match its seal or its name")
    return text


@dataclass(frozen=True)
class _Known:
    head: bytes
    k: int
    refs: frozenset[str]


class Appended:
    """What a store knows of the histories it appended to: per run, the last K and the segments the run
    holds, as of the record's sealed head it wrote with them (a record head is unique: a nonce). A write
    made on that very head (Heads: the store wrote the record last, and the write is conditional on the
    head) need not read them again; any other write goes by what the backend holds."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._runs: dict[str, _Known] = {}
        self._lock = threading.Lock()

    def on(self, run_id: str, head: bytes | None) -> tuple[int, frozenset[str]] | None:
        """(last K, segments) of the run when a write is made on `head` and it is the head they go with."""
        known = self._runs.get(run_id)
        return (known.k, known.refs) if known is not None and head is not None and known.head == head else None

    def wrote(self, run_id: str, head: bytes, k: int | None = None, refs: frozenset[str] = frozenset()) -> None:
        """A write of the run with the sealed `head`: appending entry `k` (the run then holds `refs`), or else
        carried over from the head it was made on when that one was known (`carry`), else forgotten."""
        with self._lock:
            self._runs.pop(run_id, None)
            if k is not None:
                self._runs[run_id] = _Known(head, k, refs)
                if len(self._runs) > self.size:
                    del self._runs[next(iter(self._runs))]

    def carry(self, run_id: str, on: bytes | None, head: bytes) -> None:
        """A write that appended nothing, made on `on`: what was known of `on` goes with `head`."""
        known = self.on(run_id, on)
        self.wrote(run_id, head, *(known or (None, frozenset())))

    def drop(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)


def segment_name(keys: KeyRing, run_id: str, ref: str, key_id: str | None = None) -> str:
    """The name a run's segment `ref` is stored under: keyed (KeyRing.name) and of the run, so that a reader
    of the store without the key can neither confirm a guess of a block's text nor see two runs share one."""
    return keys.name(f"{run_id}\0{ref}".encode(), key_id)


def segment_names(keys: KeyRing, run_id: str, refs: Iterable[str]) -> dict[str, str]:
    """name -> ref of the run's segments `refs`, under every key of the ring (each is stored under a name of
    the key that sealed it when it was written; rekey names them all anew)."""
    return {segment_name(keys, run_id, ref, key_id): ref for ref in refs for key_id in keys.ids}


def refs_of(keys: KeyRing, run_id: str, entries: Iterable[HistoryEntry]) -> set[str]:
    """The segments the run's kept `entries` name."""
    out: set[str] = set()
    for entry in entries:
        _, refs = entry.parts(keys, run_id)
        out.update(ref for ref in refs or () if type(ref) is str)
    return out


def reseal_segment(keys: KeyRing, run_id: str, ref: str, key: str, sealed: bytes) -> tuple[str, bytes]:
    """A segment sealed with the ring's first key (a rekey), checked first."""
    return seal_segment(keys, ref, open_segment(keys, run_id, ref, key, sealed))


def new_segments(saved: str, known: Iterable[str], keys: KeyRing, run_id: str) -> list[tuple[str, str, str, bytes]]:
    """(ref, name, key id, sealed text) of each segment of `saved` not among the `known` refs."""
    _, refs = parts_of(saved)
    known = set(known)
    out = []
    for ref in dict.fromkeys(refs):
        if ref not in known:
            sealed = seal_segment(keys, ref, saved.segment(ref))  # type: ignore[attr-defined]
            out.append((ref, segment_name(keys, run_id, ref), *sealed))
    return out


def opened_segments(
    keys: KeyRing, run_id: str, refs: Any, fetch: Callable[[list[str]], dict[str, tuple[str, bytes]]]
) -> dict[str, bytes]:
    """The texts of `refs`, `fetch(names)` giving name -> (key id, sealed text) for the names the store holds."""
    wanted = sorted({ref for ref in refs if type(ref) is str}) if type(refs) is list else []
    names = segment_names(keys, run_id, wanted)
    found = fetch(sorted(names)) if names else {}
    return {names[name]: open_segment(keys, run_id, names[name], key, sealed) for name, (key, sealed) in found.items()}
