"""The continuation store on Redis, for replicas on several hosts.

Layout under a key prefix (default "branchc:"): a hash per run (`PREFIX run:ID`, the record's fields as
sealed.py lays them out: the clear columns as canonical text, the sealed head and body as bytes; expiring
at the run's expiry by PEXPIREAT), and indexes the list and the caps read: `PREFIX exp` (id by
expiry, what gc sweeps), `PREFIX upd` (id by last write, newest first), `PREFIX info` (id -> "status
size") and `PREFIX usage` (count and bytes per status), and `PREFIX end` (id by expiry: the unended runs
that expired, kept ENDING_GRACE seconds more, out of the counts, to be ended). Every write is one Lua
script, so a checkpoint's compare-and-swap on the version and the indexes change atomically together; an
expired run is gone for readers at once and leaves the indexes at the next gc or usage (an unended one's
hash is kept, and dropped by Redis ENDING_GRACE seconds later). One Redis database, not Redis Cluster
(the scripts touch keys they compute).

A server that cannot be reached (down, restarting) gives a StoreUnavailableError; the client reconnects
by itself when it is back. It needs the redis package (`pip install 'branchc[redis]'`): without it,
importing this module is a MissingExtraError saying so.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ..extras import missing_extra

try:
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry
except ImportError as error:
    raise missing_extra("redis", error) from None

from .base import (
    ANYONE,
    ENDING_GRACE,
    UNENDED,
    Rekeyed,
    RunExistsError,
    RunRecord,
    StoreDataError,
    StoreUnavailableError,
    Usage,
    _Anyone,
    owner_tag,
)
from .history import (
    Appended,
    Checkpoint,
    HistoryEntry,
    appends,
    checkpoint_of,
    join_saved,
    new_segments,
    opened_segments,
    parts_of,
    refs_of,
    reseal_segment,
    retention,
    segment_name,
    segment_names,
)
from .keys import KeyRing
from .sealed import (
    Heads,
    Sealed,
    checkpoint_sealed,
    open_record,
    rekey_sealed,
    sealed_head,
    stale_or_older,
    store_keys,
)

__all__ = ["RedisStore"]

MAX_ENTRIES = 10_000_000  # a run's history entries past which its clear first/last fields are damage

FIELDS = ("fmt", "tool", "status", "owner", "version", "created", "updated", "expires", "size", "key", "head", "body")
HEAD_FIELDS = FIELDS[:-1]

# KEYS: run, exp, upd, info, usage, end. Shared helpers of every script. An unended run (waiting, running) that
# expired is kept GRACE seconds (base.ENDING_GRACE) to be ended: its hash expires that much later, and the sweep
# moves it from `exp` to `end` (and out of the usage counts) instead of forgetting it.
PRELUDE = f"local GRACE = {ENDING_GRACE!r}\n"
PRELUDE += """
local function kept(key, exp, now)
  local status = redis.call('HGET', key, 'status')
  return (status == 'waiting' or status == 'running') and tonumber(exp) > tonumber(now) - GRACE
end
local function count(status, owner, n, size)
  redis.call('HINCRBY', KEYS[5], 'n:' .. status, n)
  redis.call('HINCRBY', KEYS[5], 'b:' .. status, size)
  redis.call('HINCRBY', KEYS[5], 'n:' .. status .. ':' .. owner, n)
  redis.call('HINCRBY', KEYS[5], 'b:' .. status .. ':' .. owner, size)
end
local function unaccount(id)
  local info = redis.call('HGET', KEYS[4], id)
  if info then
    local status, size, owner = string.match(info, '^(%S+) (%d+) (%S+)$')
    if status then count(status, owner, -1, -tonumber(size)) end
    redis.call('HDEL', KEYS[4], id)
  end
end
local function account(id, status, size)
  local owner = redis.call('HGET', KEYS[1], 'owner')  -- the record's, counted by its digest (base.owner_tag)
  owner = owner and redis.sha1hex(owner) or '-'
  redis.call('HSET', KEYS[4], id, status .. ' ' .. size .. ' ' .. owner)
  count(status, owner, 1, tonumber(size))
end
local function forget(id, key)
  unaccount(id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[6], id)
  local prefix = string.sub(key, 1, #key - #id - 4)  -- key is PREFIX .. 'run:' .. id
  redis.call('DEL', prefix .. 'hist:' .. id, prefix .. 'seg:' .. id)
  return redis.call('DEL', key)
end
-- the history entry and new segments at ARGV[at...] (RedisStore._history_args; none when ARGV[at] is ''), and
-- the history and segments kept as long as the run (KEYS[7], KEYS[8]); false when the history moved on meanwhile
local function history_fits(at)
  return ARGV[at] == '' or (redis.call('HGET', KEYS[7], 'last') or '-1') == ARGV[at + 1]
end
local function append(at, expires_ms)
  local k = ARGV[at]
  if k ~= '' then
    local h = KEYS[7]
    local added = #ARGV[at + 4] + #ARGV[at + 5]
    redis.call('HSET', h, 'last', k, 'at:' .. k, ARGV[at + 2], 'key:' .. k, ARGV[at + 3], 'info:' .. k, ARGV[at + 4],
      'head:' .. k, ARGV[at + 5])
    local first = tonumber(redis.call('HGET', h, 'first') or k)
    local drop = tonumber(ARGV[at + 6])
    for j = first, drop do
      added = added - redis.call('HSTRLEN', h, 'info:' .. j) - redis.call('HSTRLEN', h, 'head:' .. j)
      redis.call('HDEL', h, 'at:' .. j, 'key:' .. j, 'info:' .. j, 'head:' .. j)
    end
    redis.call('HSET', h, 'first', math.max(first, drop + 1))
    for i = at + 7, #ARGV, 2 do
      if redis.call('HSETNX', KEYS[8], ARGV[i], ARGV[i + 1]) == 1 then added = added + #ARGV[i + 1] end
    end
    redis.call('HINCRBY', h, 'bytes', added)
  end
  redis.call('PEXPIREAT', KEYS[7], expires_ms)
  redis.call('PEXPIREAT', KEYS[8], expires_ms)
end
-- a run's bytes for the usage counts: its saved run (`size`) and what its history holds
local function held(size)
  return tonumber(size) + tonumber(redis.call('HGET', KEYS[7], 'bytes') or '0')
end
local function sweep(now, prefix)
  local gone = 0
  local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES')
  for i = 1, #ids, 2 do
    local id, exp = ids[i], ids[i + 1]
    local key = prefix .. 'run:' .. id
    if kept(key, exp, now) then
      unaccount(id)
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZADD', KEYS[6], exp, id)
    else
      forget(id, key)
      gone = gone + 1
    end
  end
  local old = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', tonumber(now) - GRACE)
  for _, id in ipairs(old) do forget(id, prefix .. 'run:' .. id) end
  return gone + #old
end
"""

# ARGV: id, now, prefix, status, size, expires, expires_ms, updated, n, then n field/value items, then the
# history's (see append)
CREATE = (
    PRELUDE
    + """
local id, now = ARGV[1], ARGV[2]
if redis.call('EXISTS', KEYS[1]) == 1 then
  local exp = redis.call('ZSCORE', KEYS[2], id)
  if not (exp and tonumber(exp) <= tonumber(now)) or kept(KEYS[1], exp, now) then return 0 end
end
forget(id, KEYS[1])
local pairs_ = {}
local n = tonumber(ARGV[9])
for i = 10, 9 + n do pairs_[#pairs_ + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs_))
redis.call('PEXPIREAT', KEYS[1], ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[6], id)
redis.call('ZADD', KEYS[3], ARGV[8], id)
append(10 + n, ARGV[7])
account(id, ARGV[4], held(ARGV[5]))
return 1
"""
)

# ARGV: id, now, expected, status, size, expires, expires_ms, updated, kept key|'', known head|'', n, then n
# field/value items, then the history's (see append). The whole record, sealed anew, if it is still at the
# expected version (and, when the body is kept, still sealed with its key; when a head is known, still with that
# head; when it appends to the history, still at the entry it follows); 0 when not: the caller reads it again.
CHECKPOINT = (
    PRELUDE
    + """
local id, now = ARGV[1], ARGV[2]
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur or cur ~= ARGV[3] then return 0 end
local exp = tonumber(redis.call('HGET', KEYS[1], 'expires'))
if exp and exp <= tonumber(now) then return 0 end
if ARGV[9] ~= '' and redis.call('HGET', KEYS[1], 'key') ~= ARGV[9] then return 0 end
if ARGV[10] ~= '' and redis.call('HGET', KEYS[1], 'head') ~= ARGV[10] then return 0 end
local n = tonumber(ARGV[11])
if not history_fits(12 + n) then return 0 end
local pairs_ = {}
for i = 12, 11 + n do pairs_[#pairs_ + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs_))
redis.call('PEXPIREAT', KEYS[1], ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[6], id)
redis.call('ZADD', KEYS[3], ARGV[8], id)
append(12 + n, ARGV[7])
unaccount(id)
account(id, ARGV[4], held(ARGV[5]))
return 1
"""
)

# CHECKPOINT of an unended run that expired and is kept (base.RunStore.end_expired): the same, but only while it is
# so; it leaves `end`
END_EXPIRED = CHECKPOINT.replace(
    "if exp and exp <= tonumber(now) then return 0 end",
    "if not exp or not (exp <= tonumber(now) and kept(KEYS[1], exp, now)) then return 0 end",
).replace("local pairs_ = {}", "redis.call('ZREM', KEYS[6], id)\nlocal pairs_ = {}")

# KEYS: run. ARGV: version, old key, new key, head, body: the record sealed anew at the same version
RESEAL = """
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'key') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'key', ARGV[3], 'head', ARGV[4], 'body', ARGV[5])
return 1
"""

# KEYS: a hash. ARGV: a field, the value it must still have, then field/value pairs to set: a compare-and-swap
SWAP = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local pairs_ = {}
for i = 3, #ARGV do pairs_[#pairs_ + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs_))
return 1
"""

# KEYS: a hash. ARGV: a field, the value it must still have, the field it moves to and its new value
MOVE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return 1
"""

# ARGV: id, expected|''
DELETE = (
    PRELUDE
    + """
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur then forget(ARGV[1], KEYS[1]) return {'missing'} end
if ARGV[2] ~= '' and cur ~= ARGV[2] then return {'stale', cur} end
forget(ARGV[1], KEYS[1])
return {'ok'}
"""
)

# ARGV: now, prefix; returns the runs swept and the usage hash
SWEEP = (
    PRELUDE
    + """
local swept = sweep(ARGV[1], ARGV[2])
return {swept, redis.call('HGETALL', KEYS[5])}
"""
)


def _stored(value: Any) -> Any:
    """A column's value as the hash holds it: numbers as their canonical text (what the seal covers)."""
    if type(value) is float:
        return repr(value)
    if type(value) is int:
        return str(value)
    return value


def _kept(raw: dict[str, Any], now: float) -> bool:
    """Whether an expired record is an unended run kept to be ended (base.ENDING_GRACE)."""
    status = raw.get("status")
    status = status.decode() if isinstance(status, bytes) else status
    try:
        return status in UNENDED and float(raw["expires"]) > now - ENDING_GRACE
    except (KeyError, TypeError, ValueError):
        return False


def _expired(raw: dict[str, Any], now: float) -> bool:
    try:
        return float(raw["expires"]) <= now
    except (KeyError, TypeError, ValueError):
        return False  # damaged: opening it names the field


class RedisStore:
    """Runs in a Redis database, under `prefix` (several stores can share one database), sealed with `keys`."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        keys: KeyRing | None = None,
        prefix: str = "branchc:",
        timeout: float = 5.0,
        client: redis.Redis | None = None,
        history: int | str | None = None,
    ) -> None:
        self.keys = store_keys(keys, f"the Redis store {url}")
        self.history_kept = retention(history)
        self._appended = Appended()
        self._heads = Heads()
        self.url = url
        self.prefix = prefix
        self.timeout = timeout
        self.client = client or redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=min(timeout, 2.0),
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
            health_check_interval=30,
        )
        self._keys = [f"{prefix}exp", f"{prefix}upd", f"{prefix}info", f"{prefix}usage", f"{prefix}end"]
        self._create = self.client.register_script(CREATE)
        self._checkpoint = self.client.register_script(CHECKPOINT)
        self._end_expired = self.client.register_script(END_EXPIRED)
        self._reseal = self.client.register_script(RESEAL)
        self._swap = self.client.register_script(SWAP)
        self._move = self.client.register_script(MOVE)
        self._delete = self.client.register_script(DELETE)
        self._sweep = self.client.register_script(SWEEP)

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

    def _run_keys(self, run_id: str) -> list[str]:
        """KEYS of a script on one run: its record, the indexes, its history and its segments."""
        return [self._key(run_id), *self._keys, f"{self.prefix}hist:{run_id}", f"{self.prefix}seg:{run_id}"]

    def _call(self, doing: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as error:
            raise StoreUnavailableError(
                f"the Redis store at {self._where()} cannot be reached while {doing} ({error}); nothing is known "
                f"to be written. Check that redis-server runs there, and retry once it answers (this client "
                f"reconnects by itself)"
            ) from None
        except redis.ResponseError as error:
            raise StoreUnavailableError(f"the Redis store at {self._where()} refused {doing}: {error}") from None

    def _where(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix://{kwargs['path']}"
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"

    @staticmethod
    def _fields(raw: dict[bytes | str, bytes]) -> dict[str, Any]:
        return {name.decode() if isinstance(name, bytes) else name: value for name, value in raw.items()}

    def _read(self, doing: str, run_id: str, names: tuple[str, ...], now: float) -> dict[str, Any] | None:
        values = self._call(doing, self.client.hmget, self._key(run_id), names)
        raw = {name: value for name, value in zip(names, values, strict=True) if value is not None}
        return None if "version" not in raw or _expired(raw, now) else raw

    @staticmethod
    def _ms(expires: float) -> int:
        return math.ceil(expires * 1000)

    def _pexpire(self, status: str, expires: float) -> int:
        """When Redis drops a record's hash: at its expiry, or ENDING_GRACE later for an unended run (kept to be
        ended)."""
        return self._ms(expires + (ENDING_GRACE if status in UNENDED else 0))

    @staticmethod
    def _pairs(sealed: Sealed, *, body: bool = True) -> list[Any]:
        pairs: list[Any] = []
        for name, value in sealed.columns().items():
            if value is None or (name == "body" and not body):
                continue  # no owner; a body kept as it is
            pairs += [name, _stored(value)]
        return pairs

    # the store

    def create(
        self, record: RunRecord, *, forked_from: tuple[str, int] | None = None, history: bool = True
    ) -> RunRecord:
        record.check()
        made = sealed_head(self.keys, record)
        sealed = made.sealed
        now = time.time()
        pairs = self._pairs(sealed)
        args = [record.run_id, repr(now), self.prefix, record.status, sealed.size, repr(sealed.expires)]
        args += [self._pexpire(record.status, record.expires), repr(sealed.updated), len(pairs), *pairs]
        appended: tuple[int, frozenset[str]] | None = None
        if history and record.status == "waiting" and self.history_kept != 0:
            history, *appended = self._history_args(record, {"forked_from": forked_from}, now, None, fresh=True)
            args += history
        else:
            args.append("")
        created = self._call(
            f"creating run {record.run_id!r}", self._create, keys=self._run_keys(record.run_id), args=args
        )
        if not created:
            raise RunExistsError(f"the store already holds a run {record.run_id!r}")
        self._heads.put(made)
        self._appended.wrote(record.run_id, sealed.head, *(appended or (None, frozenset())))
        return record

    def load(self, run_id: str, *, min_version: int | None = None, expired: bool = False) -> RunRecord | None:
        raw = self._call(f"loading run {run_id!r}", self.client.hgetall, self._key(run_id))
        if not raw:
            return None
        fields = self._fields(raw)
        now = time.time()
        if _expired(fields, now) and not (expired and _kept(fields, now)):
            return None
        return open_record(self.keys, run_id, fields, min_version=min_version, cache=self._heads)

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        return self._write(f"checkpointing run {run_id!r}", self._checkpoint, run_id, expected_version, changes)

    def end_expired(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        doing = f"ending the expired run {run_id!r}"
        return self._write(doing, self._end_expired, run_id, expected_version, changes, expired=True)

    def _write(
        self, doing: str, script: Any, run_id: str, expected_version: int, changes: dict, *, expired: bool = False
    ) -> RunRecord:
        """A compare-and-swap of `script` (CHECKPOINT, or END_EXPIRED on a run that is `expired` and kept)."""

        def read(body: bool, now: float) -> dict[str, Any] | None:
            if not expired:
                return self._read(doing, run_id, FIELDS if body else HEAD_FIELDS, now)
            names = FIELDS if body else HEAD_FIELDS
            values = self._call(doing, self.client.hmget, self._key(run_id), names)
            raw = {name: value for name, value in zip(names, values, strict=True) if value is not None}
            return raw if "version" in raw and _expired(raw, now) and _kept(raw, now) else None

        appending = appends(changes, self.history_kept)

        def write(sealed: Sealed, kept: str | None, on: bytes | None, now: float, record: RunRecord) -> bool:
            pairs = self._pairs(sealed, body=not kept)
            args = [run_id, repr(now), int(expected_version), sealed.status, sealed.size, repr(sealed.expires)]
            args += [self._pexpire(sealed.status, sealed.expires), repr(sealed.updated), kept or "", on or ""]
            args += [len(pairs), *pairs]
            appended: list[Any] = []
            if appending:
                history, *appended = self._history_args(record, changes, now, on)
                args += history
            else:
                args.append("")
            done = bool(self._call(doing, script, keys=self._run_keys(run_id), args=args))
            if done and appended:
                self._appended.wrote(run_id, sealed.head, *appended)
            elif done:
                self._appended.carry(run_id, on, sealed.head)
            return done

        return checkpoint_sealed(self.keys, run_id, expected_version, changes, read, write, self._heads)

    # history (history.py)

    def _history_args(
        self, record: RunRecord, notes: dict[str, Any], now: float, on: bytes | None, *, fresh: bool = False
    ) -> tuple[list[Any], int, frozenset[str]]:
        """A script's history part: K, the entry K follows, its time, key, info and head, the last K to drop, then
        ref, key id + newline + sealed text for each segment the run does not hold yet; and K and the segments
        the run then holds. What this store appended last is not read again for a write made on the head it
        wrote then (history.Appended)."""
        hist, seg = self._run_keys(record.run_id)[-2:]
        doing = f"appending to the history of run {record.run_id!r}"
        run_id = record.run_id
        wanted = list(dict.fromkeys(parts_of(record.saved)[1]))
        known = None if fresh else self._appended.on(run_id, on)
        if fresh:
            last, refs = None, frozenset()
        elif known is not None:
            last, refs = known
        else:
            found = self._call(doing, self.client.hget, hist, "last")
            last = None if found is None else int(found)
            names = [segment_name(self.keys, run_id, ref) for ref in wanted]
            held = self._call(doing, self.client.hmget, seg, names) if names else []
            refs = frozenset(ref for ref, value in zip(wanted, held, strict=True) if value is not None)
        k = 0 if last is None else last + 1
        entry = HistoryEntry.seal(self.keys, run_id, checkpoint_of(record, k, now, notes), record.saved)
        drop = -1 if self.history_kept is None else k - self.history_kept
        args: list[Any] = [k, -1 if last is None else last, repr(now), entry.key, entry.info, entry.head, drop]
        forked = notes.get("forked_from")
        if forked is not None:  # the parent's segments as they are sealed (a seal names no run), named anew
            theirs = segment_names(self.keys, forked[0], [ref for ref in wanted if ref not in refs])
            ordered = sorted(theirs)
            values = self._call(doing, self.client.hmget, self._run_keys(forked[0])[-1], ordered) if ordered else []
            copied = {theirs[name]: value for name, value in zip(ordered, values, strict=True) if value is not None}
            for ref, value in copied.items():
                args += [segment_name(self.keys, run_id, ref), value]
            refs = refs | copied.keys()
        made = new_segments(record.saved, refs, self.keys, run_id)
        for _, name, key, sealed in made:
            args += [name, key.encode() + b"\n" + sealed]
        return args, k, refs | {m[0] for m in made}

    def _entries(self, run_id: str, k: int | None = None, *, heads: bool = True) -> list[HistoryEntry]:
        """The run's kept entries (or entry `k`); without their saved runs' heads unless `heads`."""
        hist = self._run_keys(run_id)[-2]
        doing = f"reading the history of run {run_id!r}"
        if k is None:
            first, last = self._call(doing, self.client.hmget, hist, ["first", "last"])
            try:
                low, high = int(first or 0), int(last if last is not None else -1)
            except ValueError:
                low, high = 0, -1 - MAX_ENTRIES  # damaged: refused below
            if high - low >= MAX_ENTRIES:
                raise StoreDataError.bad_field(run_id, "history", "names more entries than a store keeps: damaged")
            ks = list(range(low, high + 1))
        else:
            ks = [k]
        parts = ("at", "key", "info", "head") if heads else ("at", "key", "info")
        names = [f"{part}:{j}" for j in ks for part in parts]
        found = self._call(doing, self.client.hmget, hist, names) if names else []
        raw = {name: value for name, value in zip(names, found, strict=True) if value is not None}
        ks = [j for j in ks if all(f"{part}:{j}" in raw for part in parts)]  # dropped meanwhile: not kept
        if not heads:
            raw |= {f"head:{j}": b"" for j in ks}
        try:
            return [
                HistoryEntry(j, float(raw[f"at:{j}"]), raw[f"key:{j}"].decode(), raw[f"info:{j}"], raw[f"head:{j}"])
                for j in ks
            ]
        except (KeyError, ValueError):
            raise StoreDataError.bad_field(run_id, "history", "has an entry with parts missing or damaged") from None

    def history(self, run_id: str) -> list[Checkpoint]:
        return [entry.checkpoint(self.keys, run_id) for entry in self._entries(run_id, heads=False)]

    def saved_at(self, run_id: str, k: int) -> tuple[Checkpoint, str]:
        found = self._entries(run_id, int(k))
        if not found:
            raise KeyError(k)
        entry = found[0]
        pieces, refs = entry.parts(self.keys, run_id)
        seg = self._run_keys(run_id)[-1]

        def fetch(names: list[str]) -> dict[str, tuple[str, bytes]]:
            values = self._call(f"reading the history of run {run_id!r}", self.client.hmget, seg, names)
            out = {}
            for name, value in zip(names, values, strict=True):
                if value is not None:
                    key, _, sealed = value.partition(b"\n")
                    out[name] = (key.decode(errors="replace"), sealed)
            return out

        texts = opened_segments(self.keys, run_id, refs, fetch)
        return entry.checkpoint(self.keys, run_id), join_saved(run_id, pieces, refs, texts)

    def expired(self, now: float | None = None, limit: int = 100) -> list[str]:
        now = time.time() if now is None else now
        self._swept(now)  # what expired since the last sweep moves to `end`
        doing = "finding the expired runs to end"
        ids = self._call(doing, self.client.zrangebyscore, self._keys[4], "-inf", repr(now), start=0, num=int(limit))
        return [ident.decode() for ident in ids]

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        self._heads.drop(run_id)
        self._appended.drop(run_id)
        expected = "" if expected_version is None else int(expected_version)
        answer = self._call(
            f"deleting run {run_id!r}",
            self._delete,
            keys=self._run_keys(run_id),
            args=[run_id, expected],
        )
        kind = answer[0].decode()
        if kind == "stale":
            try:
                actual = int(answer[1])
            except ValueError:
                raise StoreDataError.bad_field(run_id, "version", f"is {answer[1]!r:.60}, not an integer") from None
            raise stale_or_older(run_id, expected_version or 0, actual)
        return kind == "ok"

    def list(self, status: str | None = None, tool: str | None = None, limit: int = 100) -> list[RunRecord]:
        found: list[RunRecord] = []
        start, batch = 0, max(int(limit), 1) * 2
        now = time.time()
        while len(found) < limit:
            ids = self._call("listing runs", self.client.zrevrange, self._keys[1], start, start + batch - 1)
            if not ids:
                break
            start += batch
            pipe = self.client.pipeline(transaction=False)
            for ident in ids:
                pipe.hmget(self._key(ident.decode()), "status", "tool", "expires")
            heads = self._call("listing runs", pipe.execute)
            chosen = []
            for ident, (st, tl, exp) in zip(ids, heads, strict=True):
                if st is None:
                    continue  # expired (Redis dropped it) or deleted since
                if status is not None and st != status.encode():
                    continue
                if tool is not None and tl != tool.encode():
                    continue
                if _expired({"expires": exp}, now):
                    continue
                chosen.append(ident.decode())
            chosen = chosen[: limit - len(found)]
            pipe = self.client.pipeline(transaction=False)
            for ident in chosen:
                pipe.hgetall(self._key(ident))
            for ident, raw in zip(chosen, self._call("listing runs", pipe.execute), strict=True):
                if raw:
                    found.append(open_record(self.keys, ident, self._fields(raw)))
        return found

    def rekey(self) -> Rekeyed:
        doing = "finding the runs to seal anew"
        ids = [ident.decode() for ident in self._call(doing, self.client.zrange, self._keys[1], 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for ident in ids:
            pipe.hmget(self._key(ident), "key", "expires")
        sealing, now = self.keys.sealing_id.encode(), time.time()
        stale, current = [], 0
        for ident, (key, expires) in zip(ids, self._call(doing, pipe.execute), strict=True):
            if key is None or _expired({"expires": expires}, now):
                continue  # gone meanwhile, or expired
            if key == sealing:
                current += 1
            else:
                stale.append(ident)

        def read(run_id: str, now: float) -> dict[str, Any] | None:
            return self._read(f"sealing run {run_id!r} anew", run_id, FIELDS, now)

        def write(sealed: Sealed, old_key: str) -> bool:
            args = [str(sealed.version), old_key, sealed.key, sealed.head, sealed.body]
            doing = f"sealing run {sealed.run_id!r} anew"
            return bool(self._call(doing, self._reseal, keys=[self._key(sealed.run_id)], args=args))

        done = rekey_sealed(self.keys, sorted(stale), read, write, current)
        return done._replace(refused=done.refused + self._rekey_history(ids))

    def _rekey_history(self, ids: list[str]) -> tuple[StoreDataError, ...]:
        """The runs' history entries and segments sealed anew with the first key, each by a compare-and-swap on
        the key it was sealed with."""
        refused: list[StoreDataError] = []
        sealing = self.keys.sealing_id
        for run_id in ids:
            hist, seg = self._run_keys(run_id)[-2:]
            doing = f"sealing the history of run {run_id!r} anew"
            try:
                for entry in self._entries(run_id):
                    if entry.key != sealing:
                        new = entry.resealed(self.keys, run_id)
                        k = entry.k
                        args = [
                            f"key:{k}",
                            entry.key,
                            f"key:{k}",
                            new.key,
                            f"info:{k}",
                            new.info,
                            f"head:{k}",
                            new.head,
                        ]
                        self._call(doing, self._swap, keys=[hist], args=args)
                entries = self._entries(run_id)
                names = segment_names(self.keys, run_id, refs_of(self.keys, run_id, entries))
                for name, value in self._fields(self._call(doing, self.client.hgetall, seg)).items():
                    ref = names.get(name)
                    if ref is None:  # of entries dropped (history=N): nothing reads it
                        self._call(doing, self.client.hdel, seg, name)
                        continue
                    key, _, sealed = value.partition(b"\n")
                    new_name = segment_name(self.keys, run_id, ref)
                    if key.decode(errors="replace") == sealing and name == new_name:
                        continue
                    new_key, new_sealed = reseal_segment(self.keys, run_id, ref, key.decode(errors="replace"), sealed)
                    self._call(
                        doing,
                        self._move,
                        keys=[seg],
                        args=[name, value, new_name, new_key.encode() + b"\n" + new_sealed],
                    )
            except StoreDataError as error:
                refused.append(error)
        return tuple(refused)

    def _swept(self, now: float) -> tuple[int, dict[str, int]]:
        swept, flat = self._call(
            "removing expired runs", self._sweep, keys=["", *self._keys], args=[repr(now), self.prefix]
        )
        usage = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        return swept, usage

    def gc(self, now: float | None = None) -> int:
        return self._swept(time.time() if now is None else now)[0]

    def usage(self, *statuses: str, owner: str | _Anyone | None = ANYONE) -> Usage:
        _, usage = self._swept(time.time())
        names = statuses or {key[2:] for key in usage if ":" not in key[2:]}
        of = "" if owner is ANYONE else f":{owner_tag(owner)}"  # type: ignore[arg-type]
        return Usage(sum(usage.get(f"n:{s}{of}", 0) for s in names), sum(usage.get(f"b:{s}{of}", 0) for s in names))

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisStore({self._where()!r}, prefix={self.prefix!r})"
