"""What the SQL stores (sqlite.py, postgres.py) share: every operation on a run's row, its history and its
segments, in SQL both databases take.

A row holds the clear columns the queries use, a sealed head and a sealed body (sealed.py); `history` and
`segments` hold a run's past checkpoints (history.py). Every write is a compare-and-swap on the version in
one transaction with what it changes beside the row (the history entry, its segments, the bytes it holds), so
of two writers on one version exactly one wins, in any thread, process or host. An unended run (waiting,
running) that expired keeps its row, unseen by every read but `expired` and `load(..., expired=True)`, until
it is ended (`end_expired`) or, ENDING_GRACE seconds on, gc removes it.

The SQL is written with `?` marks; a backend gives a connection whose `execute` and `executemany` take it
(`_use`), its write transaction (`_transaction`), and the two places the dialects differ: reading text as
its bytes (what the seal is checked on, before anything is decoded) and matching a column against a list.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from .base import (
    ANYONE,
    ENDING_GRACE,
    UNENDED,
    Rekeyed,
    RunExistsError,
    RunRecord,
    StoreDataError,
    Usage,
    _Anyone,
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
)

__all__ = ["KEPT", "NAMES", "SQL_NAME", "SQLStore"]

SQL_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # a name SQL takes unquoted, as written (a PostgreSQL schema's)

NAMES = ("fmt", "tool", "status", "owner", "version", "created", "updated", "expires", "size", "key", "head", "body")
COLUMNS = ", ".join(("run_id", *NAMES))
# an unended run that expired is kept ENDING_GRACE seconds, to be ended (base.py): what gc and create leave alone
KEPT = f"status IN ({', '.join(repr(s) for s in UNENDED)}) AND expires > ?"


class SQLStore:
    """The operations of a store of rows (see the module's doc); a backend subclasses it with its connections."""

    keys: KeyRing
    history_kept: int | None
    _appended: Appended
    _heads: Heads
    #: the errors a duplicate run id raises at INSERT (RunExistsError), let through by `_use`
    DUPLICATE: ClassVar[tuple[type[BaseException], ...]] = ()
    #: what opens a transaction that reads one snapshot of the database
    SNAPSHOT: ClassVar[str] = "BEGIN"

    # what a backend gives

    def _use(self, doing: str) -> contextlib.AbstractContextManager[Any]:
        """A connection for one operation; the database's errors become the store's, saying what it was
        `doing` (DUPLICATE errors excepted)."""
        raise NotImplementedError

    def _transaction(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """A write transaction on `conn`: committed at the end, rolled back on an error."""
        raise NotImplementedError

    @staticmethod
    def _bytes(column: str) -> str:
        """SQL of a text column's value as its bytes."""
        raise NotImplementedError

    @staticmethod
    def _among(column: str) -> str:
        """SQL that `column` is one of the list `_listed` makes of the values, at one mark."""
        raise NotImplementedError

    @staticmethod
    def _listed(values: list[str]) -> Any:
        raise NotImplementedError

    # what a read selects, in the backend's dialect (made once per backend)
    _head: ClassVar[str] = ""  # the row without its body: text as its bytes, checked by the seal before it is decoded
    _whole: ClassVar[str] = ""  # and the body, last, so a read that leaves it out does not go through its pages

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        text = ("tool", "status", "owner", "key")
        cls._head = ", ".join(["run_id", *(cls._bytes(name) if name in text else name for name in NAMES[:-1])])
        cls._whole = cls._head + ", body"

    @staticmethod
    def _raw(row: tuple) -> dict[str, Any]:
        return dict(zip(NAMES, row[1:], strict=False))

    def _record(self, row: tuple, min_version: int | None = None) -> RunRecord:
        return open_record(self.keys, row[0], self._raw(row), min_version=min_version, cache=self._heads)

    # the store

    def create(
        self, record: RunRecord, *, forked_from: tuple[str, int] | None = None, history: bool = True
    ) -> RunRecord:
        record.check()
        made = sealed_head(self.keys, record)
        row = (record.run_id, *made.sealed.columns().values())
        with self._use(f"creating run {record.run_id!r}") as conn:
            try:
                with self._transaction(conn):
                    # an expired run of the same id is gone for every reader: it gives way, unless it is kept to
                    # be ended
                    now = time.time()
                    gone = conn.execute(
                        f"DELETE FROM runs WHERE run_id = ? AND expires <= ? AND NOT ({KEPT})",
                        (record.run_id, now, now - ENDING_GRACE),
                    )
                    if gone.rowcount:
                        self._forget(conn, record.run_id)
                    conn.execute(f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * len(row))})", row)
                    appended = None
                    if history and record.status == "waiting" and self.history_kept != 0:
                        notes = {"forked_from": forked_from}
                        appended = self._append(conn, record, notes, now, None, fresh=True)
            except self.DUPLICATE:
                raise RunExistsError(f"the store already holds a run {record.run_id!r}") from None
        self._heads.put(made)
        self._appended.wrote(record.run_id, made.sealed.head, *(appended or (None, frozenset())))
        return record

    def load(self, run_id: str, *, min_version: int | None = None, expired: bool = False) -> RunRecord | None:
        now = time.time()
        where, values = "expires > ?", [now]
        if expired:  # also an unended run kept to be ended
            where, values = f"(expires > ? OR ({KEPT}))", [now, now - ENDING_GRACE]
        with self._use(f"loading run {run_id!r}") as conn:
            row = conn.execute(
                f"SELECT {self._whole} FROM runs WHERE run_id = ? AND {where}", (run_id, *values)
            ).fetchone()
        return None if row is None else self._record(row, min_version)

    def checkpoint(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        appending = appends(changes, self.history_kept)
        with self._use(f"checkpointing run {run_id!r}") as conn:  # one connection for the read and the write

            def read(body: bool, now: float) -> dict[str, Any] | None:
                row = conn.execute(
                    f"SELECT {self._whole if body else self._head} FROM runs WHERE run_id = ? AND expires > ?",
                    (run_id, now),
                ).fetchone()
                return None if row is None else self._raw(row)

            def write(sealed: Sealed, kept: str | None, on: bytes | None, now: float, record: RunRecord) -> bool:
                columns = sealed.columns()
                where, values = "run_id = ? AND version = ? AND expires > ?", [run_id, expected_version, now]
                if kept is not None:
                    del columns["body"]  # kept as it is: the record must still be sealed with its key
                    where, values = where + " AND key = ?", [*values, kept]
                if on is not None:  # written on a head known (Heads): the record must still have it
                    where, values = where + " AND head = ?", [*values, on]
                sets = ", ".join(f"{name} = ?" for name in columns)
                update = f"UPDATE runs SET {sets} WHERE {where}"
                if not appending:
                    done = conn.execute(update, [*columns.values(), *values]).rowcount == 1
                    if done:
                        self._appended.carry(run_id, on, sealed.head)
                    return done
                with self._transaction(conn):  # the record and its history entry, or neither
                    done = conn.execute(update, [*columns.values(), *values]).rowcount == 1
                    appended = self._append(conn, record, changes, now, on) if done else None
                if appended is not None:
                    self._appended.wrote(run_id, sealed.head, *appended)
                return done

            return checkpoint_sealed(self.keys, run_id, expected_version, changes, read, write, self._heads)

    # history (history.py)

    def _append(
        self, conn: Any, record: RunRecord, notes: dict[str, Any], now: float, on: bytes | None, *, fresh: bool = False
    ) -> tuple[int, frozenset[str]]:
        """Entry K of the run's history, with the segments it adds; then only the last `history_kept` kept.
        What this store appended last need not be read again when the write is made on the head it wrote
        then (Appended), nor anything for a run just created (`fresh`: its row is new, and a row of its id
        that gave way took its history with it). The new K and the segments the run holds."""
        run_id = record.run_id
        wanted = list(dict.fromkeys(parts_of(record.saved)[1]))
        known = (None, frozenset()) if fresh else self._appended.on(run_id, on)
        if known is not None:
            last, refs = known
        else:
            (last,) = conn.execute("SELECT MAX(k) FROM history WHERE run_id = ?", (run_id,)).fetchone()
            names = {segment_name(self.keys, run_id, ref): ref for ref in wanted}
            refs = frozenset(names[name] for (name,) in self._segment_rows(conn, "ref", run_id, names))
        k = 0 if last is None else last + 1
        entry = HistoryEntry.seal(self.keys, run_id, checkpoint_of(record, k, now, notes), record.saved)
        forked, copied = notes.get("forked_from"), {}
        if forked is not None:  # the parent's segments as they are sealed (a seal names no run), named anew
            theirs = segment_names(self.keys, forked[0], [ref for ref in wanted if ref not in refs])
            rows = self._segment_rows(conn, f"ref, {self._bytes('key')}, sealed", forked[0], theirs)
            copied = {theirs[name]: (key.decode(), sealed) for name, key, sealed in rows}
            conn.executemany(
                "INSERT INTO segments VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(run_id, segment_name(self.keys, run_id, ref), *kept) for ref, kept in copied.items()],
            )
            refs = refs | copied.keys()
        made = new_segments(record.saved, refs, self.keys, run_id)
        conn.executemany(
            "INSERT INTO segments VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", [(run_id, *m[1:]) for m in made]
        )
        conn.execute(
            "INSERT INTO history VALUES (?, ?, ?, ?, ?, ?)", (run_id, k, now, entry.key, entry.info, entry.head)
        )
        added = len(entry.info) + len(entry.head) + sum(len(m[3]) for m in made)
        added += sum(len(sealed) for _, sealed in copied.values())
        if self.history_kept is not None:
            dropped = "FROM history WHERE run_id = ? AND k <= ?"
            (freed,) = conn.execute(
                f"SELECT COALESCE(SUM(length(info) + length(head)), 0) {dropped}", (run_id, k - self.history_kept)
            ).fetchone()
            conn.execute(f"DELETE {dropped}", (run_id, k - self.history_kept))
            added -= freed
        # what the run's history holds, counted with its saved run by usage (the caps); segments stay with the run
        conn.execute("UPDATE runs SET hbytes = hbytes + ? WHERE run_id = ?", (added, run_id))
        return k, refs | {m[0] for m in made}

    def _segment_rows(self, conn: Any, columns: str, run_id: str, names: Any) -> list[tuple]:
        """`columns` of the run's segments stored under `names`."""
        return conn.execute(
            f"SELECT {columns} FROM segments WHERE run_id = ? AND {self._among('ref')}",
            (run_id, self._listed(list(names))),
        ).fetchall()

    @staticmethod
    def _forget(conn: Any, run_id: str) -> None:
        conn.execute("DELETE FROM history WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM segments WHERE run_id = ?", (run_id,))

    def _entries(self, run_id: str, k: int | None = None, *, heads: bool = True) -> list[HistoryEntry]:
        """The run's kept entries (or entry `k`); without their saved runs' heads unless `heads`."""
        where, values = ("run_id = ?", [run_id]) if k is None else ("run_id = ? AND k = ?", [run_id, k])
        head = "head" if heads else "NULL"
        with self._use(f"reading the history of run {run_id!r}") as conn:
            rows = conn.execute(
                f"SELECT k, at, {self._bytes('key')}, info, {head} FROM history WHERE {where} ORDER BY k", values
            ).fetchall()
        return [HistoryEntry(k, at, key.decode(), info, head or b"") for k, at, key, info, head in rows]

    def history(self, run_id: str) -> list[Checkpoint]:
        return [entry.checkpoint(self.keys, run_id) for entry in self._entries(run_id, heads=False)]

    def saved_at(self, run_id: str, k: int) -> tuple[Checkpoint, str]:
        with self._use(f"reading the history of run {run_id!r}") as conn, self._snapshot(conn):
            # one snapshot: the entry and its segments, whatever is written meanwhile
            row = conn.execute(
                f"SELECT {self._bytes('key')}, at, info, head FROM history WHERE run_id = ? AND k = ?",
                (run_id, int(k)),
            ).fetchone()
            if row is None:
                raise KeyError(k)
            entry = HistoryEntry(int(k), row[1], row[0].decode(), row[2], row[3])
            pieces, refs = entry.parts(self.keys, run_id)

            def fetch(names: list[str]) -> dict[str, tuple[str, bytes]]:
                rows = self._segment_rows(conn, f"ref, {self._bytes('key')}, sealed", run_id, names)
                return {name: (key.decode(), sealed) for name, key, sealed in rows}

            texts = opened_segments(self.keys, run_id, refs, fetch)
        return entry.checkpoint(self.keys, run_id), join_saved(run_id, pieces, refs, texts)

    @contextlib.contextmanager
    def _snapshot(self, conn: Any) -> Iterator[None]:
        conn.execute(self.SNAPSHOT)
        try:
            yield
        finally:
            conn.execute("COMMIT")

    def end_expired(self, run_id: str, expected_version: int, **changes: Any) -> RunRecord:
        with self._use(f"ending the expired run {run_id!r}") as conn:
            expired = f"expires <= ? AND {KEPT}"  # only while it is expired, unended and kept

            def read(body: bool, now: float) -> dict[str, Any] | None:
                row = conn.execute(
                    f"SELECT {self._whole if body else self._head} FROM runs WHERE run_id = ? AND {expired}",
                    (run_id, now, now - ENDING_GRACE),
                ).fetchone()
                return None if row is None else self._raw(row)

            def write(sealed: Sealed, kept: str | None, on: bytes | None, now: float, record: RunRecord) -> bool:
                columns = sealed.columns()
                where = f"run_id = ? AND version = ? AND {expired}"
                values: list[Any] = [run_id, expected_version, now, now - ENDING_GRACE]
                if kept is not None:
                    del columns["body"]
                    where, values = where + " AND key = ?", [*values, kept]
                if on is not None:
                    where, values = where + " AND head = ?", [*values, on]
                sets = ", ".join(f"{name} = ?" for name in columns)
                return conn.execute(f"UPDATE runs SET {sets} WHERE {where}", [*columns.values(), *values]).rowcount == 1

            return checkpoint_sealed(self.keys, run_id, expected_version, changes, read, write, self._heads)

    def expired(self, now: float | None = None, limit: int = 100) -> list[str]:
        now = time.time() if now is None else now
        with self._use("finding the expired runs to end") as conn:
            rows = conn.execute(
                f"SELECT run_id FROM runs WHERE expires <= ? AND {KEPT} ORDER BY expires, run_id LIMIT ?",
                (now, now - ENDING_GRACE, int(limit)),
            ).fetchall()
        return [row[0] for row in rows]

    def delete(self, run_id: str, expected_version: int | None = None) -> bool:
        self._heads.drop(run_id)
        self._appended.drop(run_id)
        with self._use(f"deleting run {run_id!r}") as conn:
            with self._transaction(conn):
                if expected_version is None:
                    gone = conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                else:
                    gone = conn.execute("DELETE FROM runs WHERE run_id = ? AND version = ?", (run_id, expected_version))
                if gone.rowcount:
                    self._forget(conn, run_id)
            if gone.rowcount or expected_version is None:
                return gone.rowcount > 0
            found = conn.execute(
                "SELECT version FROM runs WHERE run_id = ? AND expires > ?", (run_id, time.time())
            ).fetchone()
        if found is None:
            return False
        if type(found[0]) is not int:
            raise StoreDataError.bad_field(run_id, "version", f"is {found[0]!r:.60}, not an integer")
        raise stale_or_older(run_id, expected_version, found[0])

    def list(self, status: str | None = None, tool: str | None = None, limit: int = 100) -> list[RunRecord]:
        where, values = ["expires > ?"], [time.time()]
        if status is not None:
            where.append("status = ?")
            values.append(status)
        if tool is not None:
            where.append("tool = ?")
            values.append(tool)
        with self._use("listing runs") as conn:
            rows = conn.execute(
                f"SELECT {self._whole} FROM runs WHERE {' AND '.join(where)} ORDER BY updated DESC, run_id LIMIT ?",
                (*values, int(limit)),
            ).fetchall()
        return [self._record(row) for row in rows]

    def rekey(self) -> Rekeyed:
        with self._use("finding the runs to seal anew") as conn:
            (current,) = conn.execute(
                "SELECT COUNT(*) FROM runs WHERE expires > ? AND key = ?", (time.time(), self.keys.sealing_id)
            ).fetchone()
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT run_id FROM runs WHERE expires > ? AND key <> ? ORDER BY run_id",
                    (time.time(), self.keys.sealing_id),
                ).fetchall()
            ]

        def read(run_id: str, now: float) -> dict[str, Any] | None:
            with self._use(f"sealing run {run_id!r} anew") as conn:
                row = conn.execute(
                    f"SELECT {self._whole} FROM runs WHERE run_id = ? AND expires > ?", (run_id, now)
                ).fetchone()
            return None if row is None else self._raw(row)

        def write(sealed: Sealed, old_key: str) -> bool:
            with self._use(f"sealing run {sealed.run_id!r} anew") as conn:
                done = conn.execute(
                    "UPDATE runs SET key = ?, head = ?, body = ? WHERE run_id = ? AND version = ? AND key = ?",
                    (sealed.key, sealed.head, sealed.body, sealed.run_id, sealed.version, old_key),
                )
                return done.rowcount == 1

        done = rekey_sealed(self.keys, ids, read, write, int(current))
        return done._replace(refused=done.refused + self._rekey_history())

    def _rekey_segments(self, conn: Any, run_id: str) -> list[StoreDataError]:
        """The run's segments sealed and named anew with the first key; those no kept entry names, dropped."""
        try:
            names = segment_names(self.keys, run_id, refs_of(self.keys, run_id, self._entries(run_id)))
        except StoreDataError as error:
            return [error]
        sealing, refused = self.keys.sealing_id, []
        rows = conn.execute(
            f"SELECT ref, {self._bytes('key')}, sealed FROM segments WHERE run_id = ?", (run_id,)
        ).fetchall()
        for name, key, sealed in rows:
            ref, key = names.get(name), key.decode()
            if ref is None:  # of entries dropped (history=N): nothing reads it
                conn.execute("DELETE FROM segments WHERE run_id = ? AND ref = ?", (run_id, name))
                continue
            new_name = segment_name(self.keys, run_id, ref)
            if key == sealing and name == new_name:
                continue
            try:
                new_key, new_sealed = reseal_segment(self.keys, run_id, ref, key, sealed)
            except StoreDataError as error:
                refused.append(error)
                continue
            with self._transaction(conn):
                conn.execute(
                    "INSERT INTO segments VALUES (?, ?, ?, ?) ON CONFLICT (run_id, ref) DO UPDATE SET "
                    "key = excluded.key, sealed = excluded.sealed",
                    (run_id, new_name, new_key, new_sealed),
                )
                if name != new_name:
                    conn.execute("DELETE FROM segments WHERE run_id = ? AND ref = ?", (run_id, name))
        return refused

    def _rekey_history(self) -> tuple[StoreDataError, ...]:
        """History entries and segments sealed anew with the first key, each by a compare-and-swap on its key."""
        refused: list[StoreDataError] = []
        sealing = self.keys.sealing_id
        with self._use("sealing run histories anew") as conn:
            rows = conn.execute(
                f"SELECT run_id, k, at, {self._bytes('key')}, info, head FROM history WHERE key <> ?", (sealing,)
            ).fetchall()
            for run_id, k, at, key, info, head in rows:
                try:
                    new = HistoryEntry(k, at, key.decode(), info, head).resealed(self.keys, run_id)
                except StoreDataError as error:
                    refused.append(error)
                    continue
                conn.execute(
                    "UPDATE history SET key = ?, info = ?, head = ? WHERE run_id = ? AND k = ? AND key = ?",
                    (new.key, new.info, new.head, run_id, k, key.decode()),
                )
            runs = [run for (run,) in conn.execute("SELECT DISTINCT run_id FROM segments ORDER BY run_id").fetchall()]
            for run_id in runs:
                refused += self._rekey_segments(conn, run_id)
        return tuple(refused)

    def gc(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        with self._use("removing expired runs") as conn, self._transaction(conn):
            expired = f"expires <= ? AND NOT ({KEPT})"
            ids = [
                run
                for (run,) in conn.execute(
                    f"SELECT run_id FROM runs WHERE {expired}", (now, now - ENDING_GRACE)
                ).fetchall()
            ]
            conn.execute(f"DELETE FROM runs WHERE {expired}", (now, now - ENDING_GRACE))
            for run_id in ids:  # and their histories
                self._forget(conn, run_id)
            return len(ids)

    def usage(self, *statuses: str, owner: str | _Anyone | None = ANYONE) -> Usage:
        where, values = "expires > ?", [time.time()]
        if statuses:
            where += f" AND status IN ({', '.join('?' * len(statuses))})"
            values += statuses
        if owner is None:
            where += " AND owner IS NULL"
        elif owner is not ANYONE:
            where += " AND owner = ?"
            values.append(owner)
        with self._use("counting runs") as conn:
            count, size = conn.execute(  # a run holds its saved run and its history
                f"SELECT COUNT(*), COALESCE(SUM(size + hbytes), 0) FROM runs WHERE {where}", values
            ).fetchone()
        return Usage(int(count), int(size))
