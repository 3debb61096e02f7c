"""A run's record as the backends store it: sealed with the ring's first key, checked whole before use.

Layout (record format 2). Columns a backend queries stay in clear: tool, status, owner, version, created,
updated, expires, size (bytes of the saved run) and key (the id of the key that sealed it). Everything else
is sealed with AES-256-GCM in two parts, each `nonce + ciphertext + tag`:

    head = AEAD(the body's nonce and tag + meta as JSON,
                associated data: "branchc record head", the run id, every clear column above)
    body = AEAD(the saved run, associated data: "branchc record body", format, run id, key id)

So the head's seal covers the whole record: each clear column (an edited status, version or expiry breaks it),
the run id (a row moved onto another run's id breaks it), and the body it goes with (another body, even
one of this run's older versions, is not the one it names). The body is sealed apart so that a checkpoint
that does not change the saved run keeps its ciphertext, and one that does need not read the old one.

Opening checks, in this order, before anything is decoded (no text decoded, no JSON parsed): the clear
columns have their types, the record format is this one, the ring has the key, the head opens, the body is
the one the head names and opens, and (when the caller names one) the version is not older than the one
a handle expects. Any failure is a StoreDataError naming the run.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import (
    RECORD_FORMAT,
    Rekeyed,
    RunMeta,
    RunNotFoundError,
    RunRecord,
    StaleRunError,
    StoreDataError,
    StoreError,
    check_changes,
)
from .keys import NONCE_BYTES, TAG_BYTES, KeyRing, SealError, StoreKeyError

__all__ = [
    "CLEAR",
    "Head",
    "Heads",
    "Sealed",
    "checkpoint_sealed",
    "open_body",
    "open_head",
    "open_record",
    "rekey_sealed",
    "seal",
    "seal_body",
    "sealed_head",
    "stale_or_older",
    "store_keys",
]

CLEAR = ("fmt", "tool", "status", "owner", "version", "created", "updated", "expires", "size", "key")
TEXT = frozenset({"tool", "status", "owner", "key"})
INTS = frozenset({"fmt", "version", "size"})
FLOATS = frozenset({"created", "updated", "expires"})
HEAD_LABEL = b"branchc record head\x00"
BODY_LABEL = b"branchc record body\x00"


@dataclass(frozen=True)
class Sealed:
    """A record as stored: its clear columns and its two sealed parts (`body` empty when not read)."""

    run_id: str
    tool: str
    status: str
    owner: str | None
    version: int
    created: float
    updated: float
    expires: float
    size: int
    key: str
    head: bytes
    body: bytes
    fmt: int = RECORD_FORMAT

    def columns(self) -> dict[str, Any]:
        """Column -> value (str, int, float, bytes or None), the run id left out."""
        return {name: getattr(self, name) for name in (*CLEAR, "head", "body")}


@dataclass(frozen=True)
class Head:
    """A record's opened head: the clear columns (checked by the seal), the nonce and tag of the body it goes
    with, and its meta, not yet decoded."""

    sealed: Sealed
    body_ref: bytes
    meta_json: bytes

    def record(self, saved: str) -> RunRecord:
        s = self.sealed
        meta = RunMeta.from_json(s.run_id, self.meta_json.decode())
        return RunRecord(s.run_id, s.tool, s.status, saved, s.version, s.created, s.updated, s.expires, meta, s.owner)


_TEXT: dict[type, Callable[[Any], bytes]] = {
    bytes: bytes,
    str: str.encode,
    int: lambda value: b"%d" % value,
    float: lambda value: repr(value).encode(),
}


def _aad(label: bytes, values: Any) -> bytes:
    """Associated data: `label`, then each value's length (-1 for None) and its canonical text (numbers as
    their shortest text, so a number read back from a backend as text binds the same)."""
    texts = []
    lengths = []
    for value in values:  # one loop: this runs for every record opened or sealed
        if value is None:
            lengths.append(-1)
            continue
        text = value if type(value) is bytes else _TEXT[type(value)](value)
        texts.append(text)
        lengths.append(len(text))
    return label + struct.pack(f">{len(lengths)}i", *lengths) + b"".join(texts)


def _copy(obj: Any, **changes: Any) -> Any:
    """`dataclasses.replace` for these frozen dataclasses (no __post_init__, no slots), without running
    __init__ field by field: it runs several times for every record a store opens or writes."""
    new = object.__new__(type(obj))
    state = new.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return new


def _ref(body: bytes) -> bytes:
    """What the head binds of the body: its nonce and its tag."""
    return body[:NONCE_BYTES] + body[-TAG_BYTES:]


def _head_aad(run_id: str, values: Any) -> bytes:
    """The head's associated data: the run id and the clear columns' `values` (in CLEAR's order)."""
    return _aad(HEAD_LABEL, (run_id, *values))


def _body_aad(run_id: str, key: Any) -> bytes:
    return _aad(BODY_LABEL, (RECORD_FORMAT, run_id, key))


def seal_body(keys: KeyRing, run_id: str, saved: bytes) -> bytes:
    """The body of a record of `run_id` holding `saved` (UTF-8), sealed with the ring's first key."""
    return keys.seal(saved, _body_aad(run_id, keys.sealing_id))


def seal(keys: KeyRing, record: RunRecord, *, body: bytes | None = None) -> Sealed:
    """`record` sealed with the ring's first key. `body`: its saved run sealed already (kept from the record
    it continues, sealed with that same key), else it is sealed here."""
    return sealed_head(keys, record, body=body).sealed


def sealed_head(keys: KeyRing, record: RunRecord, *, body: bytes | None = None) -> Head:
    """`record` sealed (see `seal`), as the Head that opening it gives."""
    saved = record.saved.encode()
    if body is None:
        body = seal_body(keys, record.run_id, saved)
    clear = (
        RECORD_FORMAT,
        record.tool,
        record.status,
        record.owner,
        record.version,
        float(record.created),
        float(record.updated),
        float(record.expires),
        len(saved),
        keys.sealing_id,
    )
    meta_json = record.meta.to_json().encode()
    head = keys.seal(_ref(body) + meta_json, _head_aad(record.run_id, clear))
    return Head(Sealed(record.run_id, *clear[1:], head, body, clear[0]), _ref(body), meta_json)


def _bad_seal(run_id: str, part: str) -> StoreDataError:
    return StoreDataError(
        f"stored run {run_id!r} is damaged: its {part} does not match its seal (the record was edited, truncated, "
        f"put back from another version or moved from another run); it cannot be loaded (delete it, e.g. "
        f"`branchc runs cancel {run_id}`, or restore the store from a backup)",
        run_id,
        "seal",
    )


def _unknown_key(run_id: str, key_id: str, keys: KeyRing) -> StoreDataError:
    return StoreDataError(
        f"stored run {run_id!r} is sealed with a key this server does not hold (key id {key_id}; its keys are "
        f"{', '.join(keys.ids)}): a key dropped from --state-key too early, a replica that has a key of its own "
        f"(replicas sharing a store share one --state-key), or a store of another deployment. Give that key "
        f"again after the sealing one (--state-key NEW,OLD) to open it, or delete the run",
        run_id,
        "key",
    )


def open_head(keys: KeyRing, run_id: str, raw: dict[str, Any], *, min_version: int | None = None) -> Head:
    """The head of the record a backend read for `run_id`, its seal checked (see the module's doc). `raw`:
    column -> value as the backend holds it (text as bytes; numbers as numbers, or their text as bytes); the
    body is not needed (nor checked) here."""
    for name in (*CLEAR, "head"):
        value = raw.get(name)
        if value is None:
            if name == "owner":
                continue
            raise StoreDataError.bad_field(run_id, name, "is missing")
        kinds = (int, bytes) if name in INTS else (float, bytes) if name in FLOATS else (bytes,)
        if type(value) not in kinds:
            raise StoreDataError.bad_field(run_id, name, f"is {value!r:.60}, not what the store wrote there")
    fmt = raw["fmt"]
    if fmt not in (RECORD_FORMAT, str(RECORD_FORMAT).encode()):
        said = (fmt.decode(errors="replace") if isinstance(fmt, bytes) else str(fmt))[:20]
        raise StoreDataError.bad_field(
            run_id,
            "fmt",
            f"says record format {said}, and this branchc reads format {RECORD_FORMAT} (format 1 records were not "
            f"sealed: an older branchc wrote it)",
        )
    key_id = raw["key"].decode(errors="replace")
    head = raw["head"]
    try:
        plain = keys.open(key_id, head, _head_aad(run_id, [raw.get(name) for name in CLEAR]))
    except SealError as error:
        if error.reason == "unknown key":
            raise _unknown_key(run_id, key_id, keys) from None
        raise _bad_seal(run_id, "head") from None
    ref_bytes = NONCE_BYTES + TAG_BYTES
    # authentic from here on: the clear columns are what a key holder wrote
    values: dict[str, Any] = {}
    for name in CLEAR:
        value = raw.get(name)
        if isinstance(value, bytes):
            text = value.decode()
            value = int(text) if name in INTS else float(text) if name in FLOATS else text
        values[name] = value
    sealed = Sealed(run_id=run_id, head=head, body=b"", **values)
    if min_version is not None and sealed.version < min_version:
        raise StoreDataError(
            f"stored run {run_id!r} is at version {sealed.version}, older than version {min_version} that it was "
            f"continued from: an older copy of the record was put back (a restored backup, or a row rolled back); "
            f"it is refused so that nothing of the run runs twice",
            run_id,
            "version",
        )
    return Head(sealed, plain[:ref_bytes], plain[ref_bytes:])


def open_body(keys: KeyRing, head: Head, body: Any) -> tuple[str, Head]:
    """The saved run in `body`, checked to be the body the opened `head` names; and the head with its body."""
    s = head.sealed
    if type(body) is not bytes or len(body) < NONCE_BYTES + TAG_BYTES or _ref(body) != head.body_ref:
        raise _bad_seal(s.run_id, "saved run")
    try:
        saved = keys.open(s.key, body, _body_aad(s.run_id, s.key))
    except SealError:
        raise _bad_seal(s.run_id, "saved run") from None
    if len(saved) != s.size:
        raise _bad_seal(s.run_id, "saved run")
    return saved.decode(), _copy(head, sealed=_copy(s, body=body))


def open_record(
    keys: KeyRing, run_id: str, raw: dict[str, Any], *, min_version: int | None = None, cache: Heads | None = None
) -> RunRecord:
    """The whole record a backend read, checked (see the module's doc); its head kept in `cache`."""
    head = open_head(keys, run_id, raw, min_version=min_version)
    saved, _ = open_body(keys, head, raw.get("body"))
    if cache is not None:
        cache.put(head)  # without its body
    return head.record(saved)


class Heads:
    """The heads a store opened or wrote last, by run id (at most `size`): what it knows of a record without
    reading it. A checkpoint that replaces the saved run of a record at the version found here need not read
    it first: it writes only if the stored record still has this very head (so nothing but what was checked
    is carried over), else it reads the record as usual."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._heads: dict[str, Head] = {}
        self._lock = threading.Lock()

    def get(self, run_id: str) -> Head | None:
        return self._heads.get(run_id)

    def put(self, head: Head) -> None:
        if head.sealed.body:
            head = _copy(head, sealed=_copy(head.sealed, body=b""))  # not kept
        with self._lock:
            self._heads.pop(head.sealed.run_id, None)
            self._heads[head.sealed.run_id] = head
            if len(self._heads) > self.size:
                del self._heads[next(iter(self._heads))]

    def drop(self, run_id: str) -> None:
        with self._lock:
            self._heads.pop(run_id, None)


def store_keys(keys: Any, store: str) -> KeyRing:
    """The ring a store was given, or a StoreKeyError saying how to give one."""
    if keys is None:
        raise StoreKeyError(
            f"{store} needs the key ring that seals its records: give keys=KeyRing([SECRET]) (or open it with "
            f"open_store(url, keys=state_keys(STATE_KEY, STATE_DIR)), as `branchc serve` and `branchc runs` do)"
        )
    if not isinstance(keys, KeyRing):
        raise TypeError(f"a store's keys are a KeyRing, not {type(keys).__name__}")
    return keys


TRIES = 8  # reads of a record a checkpoint or a rekey makes, while other writers only re-seal it (rekey)


def checkpoint_sealed(
    keys: KeyRing,
    run_id: str,
    expected: int,
    changes: dict[str, Any],
    read: Callable[[bool, float], dict[str, Any] | None],
    write: Callable[[Sealed, str | None, bytes | None, float, RunRecord], bool],
    cache: Heads,
) -> RunRecord:
    """A backend's checkpoint: `read(with_body, now)` the live record's columns (None: none), check it is at
    `expected` and opens, seal it anew with `changes`, and `write(sealed, key, head, now, record)` it if it is still at
    `expected` (when `key` is given, still sealed with that key: its body is kept as it is; when `head` is
    given, still with that head). A new saved run over a record at the version `cache` holds is written
    without the read, on that head (see Heads). A write that finds the same version re-sealed (a rekey
    meanwhile) is made again on what it reads."""
    check_changes(changes)
    known = cache.get(run_id) if "saved" in changes else None
    for _ in range(TRIES):
        now = time.time()
        if known is not None and known.sealed.version == expected:
            head, on = known, known.sealed.head
        else:
            raw = read("saved" not in changes, now)
            if raw is None:
                cache.drop(run_id)
                raise RunNotFoundError(run_id)
            head, on = open_head(keys, run_id, raw), None  # the version compared is the sealed one
            if head.sealed.version != expected:
                cache.drop(run_id)
                raise stale_or_older(run_id, expected, head.sealed.version)
        known = None
        body: bytes | None = None
        if "saved" in changes:
            saved = changes["saved"]
        else:
            saved, head = open_body(keys, head, raw.get("body"))
            if head.sealed.key == keys.sealing_id:
                body = head.sealed.body  # kept as sealed: the new head names it again
        s = head.sealed
        meta = changes["meta"] if "meta" in changes else RunMeta.from_json(run_id, head.meta_json.decode())
        record = RunRecord(
            run_id,
            s.tool,
            changes.get("status", s.status),
            saved,
            expected + 1,
            s.created,
            now,
            float(changes.get("expires", s.expires)),
            meta,
            s.owner,
        )
        made = sealed_head(keys, record, body=body)
        if write(made.sealed, s.key if body is not None else None, on, now, record):
            cache.put(made)
            return record
    cache.drop(run_id)
    raise StaleRunError(run_id, expected, expected)


def stale_or_older(run_id: str, expected: int, actual: int) -> StoreError:
    """A compare-and-swap that found another version: a writer moved the run on (StaleRunError), or its record
    is older than the one the writer had loaded, which no writer makes: an older copy was put back."""
    if actual < expected:
        return StoreDataError(
            f"stored run {run_id!r} is at version {actual}, older than version {expected} it was loaded at: an older "
            f"copy of the record was put back (a restored backup, or a row rolled back); it is refused so that "
            f"nothing of the run runs twice",
            run_id,
            "version",
        )
    return StaleRunError(run_id, expected, actual)


def rekey_sealed(
    keys: KeyRing,
    ids: list[str],
    read: Callable[[str, float], dict[str, Any] | None],
    write: Callable[[Sealed, str], bool],
    current: int = 0,
) -> Rekeyed:
    """A backend's rekey over the live runs `ids`: each one not sealed with the first key is `read(id, now)`,
    opened, sealed with the first key at the same version and `write(sealed, old_key)` by a compare-and-swap
    on its version and old key (a run a server wrote meanwhile is read again). `current`: the runs the backend
    found sealed with the first key already."""
    resealed = 0
    refused: list[StoreDataError] = []
    for run_id in ids:
        for _ in range(TRIES):
            raw = read(run_id, time.time())
            if raw is None:
                break  # ended and expired, or deleted, meanwhile
            key = raw.get("key")
            if key == keys.sealing_id.encode():
                current += 1
                break
            try:
                record = open_record(keys, run_id, raw)
            except StoreDataError as error:
                refused.append(error)
                break
            if write(seal(keys, record), key.decode()):
                resealed += 1
                break
    return Rekeyed(resealed, current, tuple(refused))
