"""The continuation store on Redis, for replicas on several hosts.

Layout under a key prefix (default "branchc:"): a hash per run (`PREFIX run:ID`, the record's fields,
expiring at the run's expiry by PEXPIREAT), and indexes the list and the caps read: `PREFIX exp` (id by
expiry, what gc sweeps), `PREFIX upd` (id by last write, newest first), `PREFIX info` (id -> "status
size") and `PREFIX usage` (count and bytes per status). Every write is one Lua script, so a checkpoint's
compare-and-swap on the version and the indexes change atomically together; an expired run is gone for
readers at once (Redis drops its hash) and leaves the indexes at the next gc or usage. One Redis
database, not Redis Cluster (the scripts touch keys they compute).

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
    RunExistsError,
    RunNotFoundError,
    RunRecord,
    StaleRunError,
    StoreDataError,
    StoreUnavailableError,
    Usage,
    check_changes,
    checked_record,
    digest,
)

__all__ = ["RedisStore"]

FIELDS = ("fmt", "tool", "status", "saved", "digest", "size", "version", "created", "updated", "expires", "meta")
INTS = frozenset({"fmt", "size", "version"})
FLOATS = frozenset({"created", "updated", "expires"})

# KEYS: run, exp, upd, info, usage. Shared helpers of every script.
PRELUDE = """
local function unaccount(id)
  local info = redis.call('HGET', KEYS[4], id)
  if info then
    local status, size = string.match(info, '^(%S+) (%d+)$')
    if status then
      redis.call('HINCRBY', KEYS[5], 'n:' .. status, -1)
      redis.call('HINCRBY', KEYS[5], 'b:' .. status, -tonumber(size))
    end
    redis.call('HDEL', KEYS[4], id)
  end
end
local function account(id, status, size)
  redis.call('HSET', KEYS[4], id, status .. ' ' .. size)
  redis.call('HINCRBY', KEYS[5], 'n:' .. status, 1)
  redis.call('HINCRBY', KEYS[5], 'b:' .. status, tonumber(size))
end
local function forget(id, key)
  unaccount(id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  return redis.call('DEL', key)
end
local function sweep(now, prefix)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, id in ipairs(ids) do forget(id, prefix .. 'run:' .. id) end
  return #ids
end
"""

# ARGV: id, now, prefix, status, size, expires, expires_ms, updated, then field/value pairs
CREATE = (
    PRELUDE
    + """
local id, now = ARGV[1], ARGV[2]
if redis.call('EXISTS', KEYS[1]) == 1 then
  local exp = redis.call('ZSCORE', KEYS[2], id)
  if not (exp and tonumber(exp) <= tonumber(now)) then return 0 end
end
forget(id, KEYS[1])
local pairs_ = {}
for i = 9, #ARGV do pairs_[#pairs_ + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs_))
redis.call('PEXPIREAT', KEYS[1], ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[6], id)
redis.call('ZADD', KEYS[3], ARGV[8], id)
account(id, ARGV[4], ARGV[5])
return 1
"""
)

# ARGV: id, now, expected, status|'', size|'', expires|'', expires_ms|'', updated, with_saved(0/1), pairs...
CHECKPOINT = (
    PRELUDE
    + """
local id, now = ARGV[1], ARGV[2]
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur then return {'missing'} end
local exp = tonumber(redis.call('HGET', KEYS[1], 'expires'))
if exp and exp <= tonumber(now) then return {'missing'} end
if cur ~= ARGV[3] then return {'stale', cur} end
local status = ARGV[4]
if status == '' then status = redis.call('HGET', KEYS[1], 'status') end
local size = ARGV[5]
if size == '' then size = redis.call('HGET', KEYS[1], 'size') end
local pairs_ = {'version', tostring(tonumber(cur) + 1)}
for i = 10, #ARGV do pairs_[#pairs_ + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs_))
if ARGV[6] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[7])
  redis.call('ZADD', KEYS[2], ARGV[6], id)
end
redis.call('ZADD', KEYS[3], ARGV[8], id)
unaccount(id)
if status and size and string.match(size, '^%d+$') then account(id, status, size) end
local fields = {'fmt', 'tool', 'status', 'digest', 'size', 'version', 'created', 'updated', 'expires', 'meta'}
if ARGV[9] == '1' then fields[#fields + 1] = 'saved' end
return {'ok', redis.call('HMGET', KEYS[1], unpack(fields))}
"""
)

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


class RedisStore:
    """Runs in a Redis database, under `prefix` (several stores can share one database)."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "branchc:",
        timeout: float = 5.0,
        client: redis.Redis | None = None,
    ) -> None:
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
        self._keys = [f"{prefix}exp", f"{prefix}upd", f"{prefix}info", f"{prefix}usage"]
        self._create = self.client.register_script(CREATE)
        self._checkpoint = self.client.register_script(CHECKPOINT)
        self._delete = self.client.register_script(DELETE)
        self._sweep = self.client.register_script(SWEEP)

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

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

    def _record(self, run_id: str, raw: dict[bytes | str, bytes | None]) -> RunRecord:
        fields: dict[str, Any] = {}
        for name in FIELDS:
            value = raw.get(name.encode(), raw.get(name))
            if value is None:
                continue
            try:
                text = value.decode() if isinstance(value, bytes) else value
            except UnicodeDecodeError:
                raise StoreDataError.bad_field(run_id, name, "is not UTF-8 text") from None
            try:
                fields[name] = int(text) if name in INTS else float(text) if name in FLOATS else text
            except ValueError:
                fields[name] = text  # checked_record names it: "is '12x', not an integer"
        return checked_record(run_id, fields)

    @staticmethod
    def _ms(expires: float) -> int:
        return math.ceil(expires * 1000)

    # the store

    def create(self, record: RunRecord) -> RunRecord:
        record.check()
        size = record.size
        pairs = {
            "fmt": 1,
            "tool": record.tool,
            "status": record.status,
            "saved": record.saved,
            "digest": digest(record.saved),
            "size": size,
            "version": record.version,
            "created": repr(record.created),
            "updated": repr(record.updated),
            "expires": repr(record.expires),
            "meta": record.meta.to_json(),
        }
        args = [record.run_id, repr(time.time()), self.prefix, record.status, size, repr(record.expires)]
        args += [self._ms(record.expires), repr(record.updated)]
        for name, value in pairs.items():
            args += [name, value]
        made = self._call(
            f"creating run {record.run_id!r}", self._create, keys=[self._key(record.run_id), *self._keys], args=args
        )
        if not made:
            raise RunExistsError(f"the store already holds a run {record.run_id!r}")
        return record

    def load(self, run_id: str) -> RunRecord | None:
        raw = self._call(f"loading run {run_id!r}", self.client.hgetall, self._key(run_id))
        if not raw:
            return None
        record = self._record(run_id, raw)
        return record if record.expires > time.time() else None

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        check_changes(changes)
        now = time.time()
        status = changes.get("status", "")
        pairs: list[Any] = ["updated", repr(now)]
        size: Any = ""
        if status:
            pairs += ["status", status]
        if "saved" in changes:
            saved = changes["saved"]
            size = len(saved.encode())
            pairs += ["saved", saved, "digest", digest(saved), "size", size]
        if "meta" in changes:
            pairs += ["meta", changes["meta"].to_json()]
        expires: Any = ""
        expires_ms: Any = ""
        if "expires" in changes:
            expires = repr(float(changes["expires"]))
            expires_ms = self._ms(changes["expires"])
            pairs += ["expires", expires]
        args = [run_id, repr(now), int(expected_version), status, size, expires, expires_ms, repr(now)]
        args += ["0" if "saved" in changes else "1", *pairs]
        answer = self._call(
            f"checkpointing run {run_id!r}", self._checkpoint, keys=[self._key(run_id), *self._keys], args=args
        )
        kind = answer[0].decode()
        if kind == "missing":
            raise RunNotFoundError(run_id)
        if kind == "stale":
            try:
                actual = int(answer[1])
            except ValueError:
                raise StoreDataError.bad_field(run_id, "version", f"is {answer[1]!r:.60}, not an integer") from None
            raise StaleRunError(run_id, expected_version, actual)
        names = ["fmt", "tool", "status", "digest", "size", "version", "created", "updated", "expires", "meta"]
        raw = dict(zip(names, answer[1], strict=False))
        if "saved" in changes:
            raw["saved"] = changes["saved"]
        else:
            raw["saved"] = answer[1][-1]
        return self._record(run_id, raw)

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        expected = "" if expected_version is None else int(expected_version)
        answer = self._call(
            f"deleting run {run_id!r}",
            self._delete,
            keys=[self._key(run_id), *self._keys],
            args=[run_id, expected],
        )
        kind = answer[0].decode()
        if kind == "stale":
            raise StaleRunError(run_id, expected_version or 0, int(answer[1]))
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
                try:
                    if float(exp) <= now:
                        continue
                except (TypeError, ValueError):
                    pass  # damaged: loading it below names the field
                chosen.append(ident.decode())
            chosen = chosen[: limit - len(found)]
            pipe = self.client.pipeline(transaction=False)
            for ident in chosen:
                pipe.hgetall(self._key(ident))
            for ident, raw in zip(chosen, self._call("listing runs", pipe.execute), strict=True):
                if raw:
                    found.append(self._record(ident, raw))
        return found

    def _swept(self, now: float) -> tuple[int, dict[str, int]]:
        swept, flat = self._call(
            "removing expired runs", self._sweep, keys=["", *self._keys], args=[repr(now), self.prefix]
        )
        usage = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        return swept, usage

    def gc(self, now: float | None = None) -> int:
        return self._swept(time.time() if now is None else now)[0]

    def usage(self, *statuses: str) -> Usage:
        _, usage = self._swept(time.time())
        names = statuses or {key[2:] for key in usage}
        return Usage(sum(usage.get(f"n:{s}", 0) for s in names), sum(usage.get(f"b:{s}", 0) for s in names))

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisStore({self._where()!r}, prefix={self.prefix!r})"
