"""The cost of a checkpoint in the continuation stores, and what sealing records adds to it.

Each operation handles a realistic run text (~5 KB and ~50 KB of dump_run-shaped JSON), as the bridge
does at every suspension: `create` (a new run), `load`, `checkpoint` (a compare-and-swap that replaces
the saved run at the version it was loaded at; "same store" when this store wrote the run last, "other
replica" when two stores on the same database take turns), and a durable `round` (load, claim the run
with a status-only checkpoint, then save it: what bridge/durable.py does per 2026-07-28 round).

Two versions of the stores are measured in the same invocation, each by a worker subprocess of its own;
every figure is measured by one worker then at once by the other (who goes first alternates), --repeat
times, so drift in the machine's speed hits both alike:

- "sealed": the stores of this tree, which seal every record with AES-256-GCM (branchc/store/sealed.py);
- "before": the stores of an earlier commit (`--before REV`; by default the commit before the one that added
  branchc/store/keys.py, or HEAD while that is not committed), unpacked from `git archive` into a temporary
  folder and put first on PYTHONPATH; when that commit's stores already seal, it says so.

Each worker also measures two baselines, so every cost is given against them as well: a plain dict
write (no store at all) and the same bytes written to a file and renamed into place with os.replace (no
fsync, like SQLite's synchronous=normal). Redis is a redis-server this script starts on a free loopback
port (or --redis-url), without persistence. PostgreSQL is a server this script starts from Debian's
binaries (tests/_postgres_support.py: initdb in a temporary folder, a free loopback port) with its own
durable settings, each commit's WAL fsynced as SQLite's synchronous=full does (or --postgres-url); the
stores of a commit before it have none, and measure it not. Figures: the median of the --repeat
measurements [min-max]; the sealing overhead is sealed / before of each back-to-back pair of measurements
(median [min-max]).

    python benchmarks/bench_store.py [--count 300] [--repeat 5] [--before REV] [--no-before] [--full]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = (5_000, 50_000)
BASELINES = ("dict write", "file + os.replace")
OPS = (
    "create",
    "load",
    "checkpoint, same store",
    "checkpoint, other replica",
    "round: load+claim+save",
)


def run_text(size: int) -> str:
    """dump_run-shaped JSON of about `size` bytes: a chat history of messages."""
    messages, total = [], 0
    while total < size:
        text = f"turn {len(messages)}: " + "the quick brown fox jumps over the lazy dog " * 3
        messages.append({"t": "obj", "cls": 3, "v": {"role": "user", "content": text}})
        total += len(text) + 45
    return json.dumps({"branchc_run": 1, "graph": {"history": messages}}, separators=(",", ":"))


# -- the worker: runs in a subprocess, with the branchc it finds on its path ------------------------------


def seconds_per_op(fn: Callable[[int], None], count: int) -> float:
    fn(max(1, count // 10))  # warm up: first statements prepared, pages cached
    started = time.perf_counter()
    fn(count)
    return (time.perf_counter() - started) / count


def dict_writes(text: str) -> Callable[[int], None]:
    table: dict[str, tuple[int, str]] = {"r": (1, text)}
    texts = [text, text[:-1] + " "]

    def go(count: int) -> None:
        for index in range(count):
            version, _ = table["r"]
            table["r"] = (version + 1, texts[index % 2])

    return go


def file_writes(folder: Path, text: str) -> Callable[[int], None]:
    path, tmp = folder / "run.json", folder / "run.json.tmp"
    data = [text.encode(), (text[:-1] + " ").encode()]

    def go(count: int) -> None:
        for index in range(count):
            with open(tmp, "wb") as out:
                out.write(data[index % 2])
            os.replace(tmp, path)

    return go


class StoreOps:
    """The timed operations on one store (and, for "other replica", a second store on the same database)."""

    def __init__(self, store: Any, replica: Any, text: str, meta: Any, record_type: Any) -> None:
        self.store, self.replica, self.meta, self.new = store, replica, meta, record_type.new
        self.texts = [text, text[:-1] + " "]
        self.made: list[str] = []
        record = store.create(self.new("bench", text, ttl=3600, meta=meta))
        self.run_id, self.version = record.run_id, record.version

    def create(self, count: int) -> None:
        records = [self.new("bench", self.texts[index % 2], ttl=3600, meta=self.meta) for index in range(count)]
        create = self.store.create
        for record in records:  # the records are made outside the timing: only the store's work is timed
            create(record)
        self.made += [record.run_id for record in records]

    def load(self, count: int) -> None:
        load, run_id = self.store.load, self.run_id
        for _ in range(count):
            record = load(run_id)
        assert record is not None and record.version == self.version

    def checkpoint_same(self, count: int) -> None:
        checkpoint, run_id, version, meta = self.store.checkpoint, self.run_id, self.version, self.meta
        for index in range(count):
            version = checkpoint(run_id, version, saved=self.texts[index % 2], meta=meta).version
        self.version = version

    def checkpoint_other(self, count: int) -> None:
        stores, run_id, version, meta = (self.store, self.replica), self.run_id, self.version, self.meta
        for index in range(count):
            version = stores[index % 2].checkpoint(run_id, version, saved=self.texts[index % 2], meta=meta).version
        self.version = version

    def round(self, count: int) -> None:
        store, run_id, meta = self.store, self.run_id, self.meta
        for index in range(count):
            record = store.load(run_id)
            claimed = store.checkpoint(run_id, record.version, status="running", meta=meta)
            self.version = store.checkpoint(
                run_id, claimed.version, status="waiting", saved=self.texts[index % 2], meta=meta
            ).version

    def ops(self) -> dict[str, Callable[[int], None]]:
        fns = (self.create, self.load, self.checkpoint_same, self.checkpoint_other, self.round)
        return dict(zip(OPS, fns, strict=True))

    def tidy(self) -> None:
        """Delete the runs `create` made (untimed), so the database stays the size it was."""
        for run_id in self.made:
            self.store.delete(run_id)
        self.made.clear()

    def clean(self) -> None:
        self.tidy()
        self.store.delete(self.run_id)


def postgres_stores(args: argparse.Namespace, size: int, given: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, store, its replica) on the PostgreSQL of --postgres-url, in a schema of this worker's; none when
    this branchc has no PostgreSQL store."""
    try:
        from branchc.store.postgres import PostgresStore
    except ImportError:
        return []
    schema = re.sub(r"[^a-z0-9_]", "_", f"{args.prefix}{size}".lower())
    store = PostgresStore(args.postgres_url, schema=schema, **given)
    return [("postgresql (loopback)", store, PostgresStore(args.postgres_url, schema=schema, **given))]


def worker(args: argparse.Namespace) -> None:
    """Set up every store and baseline with this process's branchc, say so (a JSON line), then measure what
    each line of stdin names (["SIZE", "NAME"]): seconds per operation, a JSON line, until stdin ends."""
    import branchc
    from branchc.store import RunMeta, RunRecord, WaitPoint
    from branchc.store.redis import RedisStore
    from branchc.store.sqlite import SQLiteStore

    try:
        from branchc.store import KeyRing
    except ImportError:  # before sealing: the stores take no keys
        KeyRing = None
    meta = RunMeta(
        era="2026-07-28",
        run_format=1,
        code_hash="9f2c" * 16,
        waits=(WaitPoint("0", "client", 42, "tools/research.py"),),
        pending=({"key": "sample-3", "kind": "sample", "summary": "Summarise the findings so far"},),
    )
    sealed = KeyRing is not None
    given: dict[str, Any] = {"keys": KeyRing.generate()} if sealed else {}
    kinds = [("sqlite synchronous=normal", "normal")] + ([("sqlite synchronous=full", "full")] if args.full else [])
    fns: dict[str, dict[str, Callable[[int], None]]] = {}
    all_ops: list[StoreOps] = []
    stores: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="branchc-bench-store-") as tmp:
        folder = Path(tmp)
        for size in SIZES:
            text = run_text(size)
            found = fns[str(size)] = {
                BASELINES[0]: dict_writes(text),
                BASELINES[1]: file_writes(folder, text),
            }
            pairs = [
                (name, SQLiteStore(folder / f"{kind}-{size}.db", synchronous=kind, **given)) for name, kind in kinds
            ]
            if args.redis_url:
                pairs.append(("redis (loopback)", RedisStore(args.redis_url, prefix=f"{args.prefix}{size}:", **given)))
            replicas = {}
            if args.postgres_url:
                for name, store, replica in postgres_stores(args, size, given):
                    pairs.append((name, store))
                    replicas[name] = replica
            for name, store in pairs:
                replica = replicas.get(name) or (
                    RedisStore(args.redis_url, prefix=store.prefix, **given)
                    if name.startswith("redis")
                    else SQLiteStore(store.path, synchronous=store.synchronous, **given)
                )
                ops = StoreOps(store, replica, text, meta, RunRecord)
                all_ops.append(ops)
                stores += [store, replica]
                found.update({f"{name} | {op}": fn for op, fn in ops.ops().items()})
        ready = {"sealed": sealed, "package": str(Path(branchc.__file__).parent)}
        print(json.dumps({**ready, "names": {size: list(found) for size, found in fns.items()}}), flush=True)
        try:
            for line in sys.stdin:
                size, name = json.loads(line)
                value = seconds_per_op(fns[size][name], args.count)
                for ops in all_ops:
                    ops.tidy()
                print(json.dumps(value), flush=True)
        finally:
            for ops in all_ops:
                ops.clean()  # untimed: a Redis given with --redis-url is left as it was
            for store in stores:
                store.close()


# -- the driver ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(folder: Path) -> tuple[subprocess.Popen | None, str | None]:
    server = shutil.which("redis-server")
    if server is None:
        return None, None
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    return None, None


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL of this run's, with its own durable settings (fsync per commit); its URL, or None when
    Debian's binaries are not here."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _postgres_support import BIN, PostgresServer

    if BIN is None:
        yield None
        return
    server = PostgresServer(durable=True).start()
    try:
        yield server.url
    finally:
        server.remove()


def unpack_before(rev: str | None, folder: Path) -> tuple[Path, str] | None:
    """The branchc package of commit `rev` of this script's repository, unpacked under `folder` (read from git
    with `git archive`: the repository, its index and its working tree are left as they are); None, saying
    why, when there is no such commit here."""
    repo = Path(__file__).resolve().parent.parent
    try:
        if rev is None:  # the commit before the one that added the keys, once that is committed; else HEAD
            added = subprocess.run(
                ["git", "-C", str(repo), "log", "-1", "--diff-filter=A", "--format=%H", "--", "branchc/store/keys.py"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            rev = f"{added}^" if added else "HEAD"
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", commit, "branchc"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"(no 'before' measurement: commit {rev!r} cannot be read from git here: {error})")
        return None
    target = folder / f"before-{commit}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:  # older 3.11 patch releases; it is this repository's own archive
            tar.extractall(target)
    return target, commit


class Worker:
    """A worker subprocess measuring with the branchc of `path` (None: the one this Python imports)."""

    def __init__(self, args: argparse.Namespace, tag: str, path: Path | None) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--count", str(args.count)]
        command += ["--prefix", f"bench-{tag}-{time.monotonic_ns()}:"]
        if args.redis_url:
            command += ["--redis-url", args.redis_url]
        if args.postgres_url:
            command += ["--postgres-url", args.postgres_url]
        if args.full:
            command.append("--full")
        env = dict(os.environ)
        if path is not None:  # that tree's branchc first, ahead of the one installed (editable or not)
            env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [env.get("PYTHONPATH")])])
        self.tag = tag
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = json.loads(self._line())

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.tag} worker failed (exit {self.proc.wait()}; its stderr is above)")
        return line

    def measure(self, size: str, name: str) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([size, name]) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def spread(values: list[float], form: str) -> str:
    return f"{format(statistics.median(values), form)} [{format(min(values), form)}-{format(max(values), form)}]"


def report(runs: dict[str, list[dict[str, Any]]]) -> None:
    tags = list(runs)
    paired = tags == ["before", "sealed"]
    for size in SIZES:
        key = str(size)
        print(f"\nrun text {len(run_text(size).encode()):,} bytes")
        for base in BASELINES:
            cells = "   ".join(
                f"{tag}: {spread([run['results'][key][base] * 1e6 for run in runs[tag]], '.2f')} µs" for tag in tags
            )
            print(f"  baseline {base + ':':20} {cells}")
        names = [name for name in runs[tags[-1]][0]["results"][key] if name not in BASELINES]
        head = "".join(f"{tag + ' µs [min-max]':>24}{'÷file':>7}{'÷dict':>7}" for tag in tags)
        if paired:
            head += f"{'sealed/before [min-max]':>26}"
        print(f"  {'store | operation':54}{head}")
        for name in names:
            line = f"  {name:54}"
            for tag in tags:
                if name not in runs[tag][0]["results"][key]:
                    line += f"{'-':>24}{'':>14}"
                    continue
                micros = [run["results"][key][name] * 1e6 for run in runs[tag]]
                file, dict_ = (
                    statistics.median(run["results"][key][name] / run["results"][key][base] for run in runs[tag])
                    for base in (BASELINES[1], BASELINES[0])
                )
                line += f"{spread(micros, '.0f'):>24}{file:>6.1f}x{dict_:>6.0f}x"
            if paired and name in runs["before"][0]["results"][key]:
                ratios = [
                    after["results"][key][name] / before["results"][key][name]
                    for after, before in zip(runs["sealed"], runs["before"], strict=True)
                ]
                line += f"{'x' + spread(ratios, '.2f'):>26}"
            print(line)
    per_second(runs[tags[-1]])


def per_second(runs: list[dict[str, Any]]) -> None:
    """Each store's checkpoints (same store) and durable rounds per second, of this tree's stores: one over
    the median seconds of an operation [the slowest measurement's - the fastest's]."""
    print("\nper second, this tree's stores: median [min-max]")
    stores = list(dict.fromkeys(name.split(" | ")[0] for name in runs[0]["results"][str(SIZES[0])] if " | " in name))
    for op in ("checkpoint, same store", "round: load+claim+save"):
        print(f"  {op}")
        for store in stores:
            cells = []
            for size in SIZES:
                rates = [1 / run["results"][str(size)][f"{store} | {op}"] for run in runs]
                cells.append(f"{len(run_text(size).encode()) // 1000} KB: {spread(rates, ',.0f'):>22}/s")
            print(f"    {store:28}" + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="operations per measurement")
    parser.add_argument("--repeat", type=int, default=5, help="measurements of each figure; the median is reported")
    parser.add_argument("--before", help="the commit whose stores are 'before' (default: the last before sealing)")
    parser.add_argument("--no-before", action="store_true", help="measure only this tree's stores")
    parser.add_argument("--full", action="store_true", help="also SQLite with synchronous=full (fsync per write)")
    parser.add_argument("--redis-url", help="an existing Redis (default: start redis-server here)")
    parser.add_argument("--postgres-url", help="an existing PostgreSQL (default: start one here, from Debian's)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="bench:", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="branchc-bench-store-") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        proc, args.redis_url = (None, args.redis_url) if args.redis_url else start_redis(folder)
        if not args.postgres_url:
            args.postgres_url = stack.enter_context(postgres_server())
        try:
            trees: dict[str, Path | None] = {}
            if not args.no_before and (found := unpack_before(args.before, folder)) is not None:
                trees["before"], commit = found
            trees["sealed"] = None
            workers: dict[str, Worker] = {}
            try:
                for tag, path in trees.items():
                    workers[tag] = Worker(args, tag, path)
                if "before" in workers and workers["before"].ready["package"] == workers["sealed"].ready["package"]:
                    raise SystemExit("both workers import the same branchc package: PYTHONPATH did not take effect")
                names = workers["sealed"].ready["names"]
                runs: dict[str, list[dict[str, Any]]] = {tag: [] for tag in trees}
                started = time.perf_counter()
                for index in range(args.repeat):
                    for tag in trees:
                        runs[tag].append({"results": {size: {} for size in names}})
                    turn = index
                    for size, measured in names.items():
                        for name in measured:  # each figure measured by both in turn, the first alternating
                            turn += 1
                            for tag in list(trees) if turn % 2 else list(reversed(trees)):
                                if name in workers[tag].ready["names"][size]:  # (no PostgreSQL before it was)
                                    runs[tag][-1]["results"][size][name] = workers[tag].measure(size, name)
            finally:
                for each in workers.values():
                    each.close()
            first = {tag: each.ready for tag, each in workers.items()}
            python = sys.version.split()[0]
            print(f"python {python}; {args.repeat} measurements of each figure, {args.count} ops each")
            for tag, run in first.items():
                what = "seals its records" if run["sealed"] else "does not seal (digest-checked records)"
                where = f"commit {commit}" if tag == "before" else "this tree"
                print(f"  {tag:7} = branchc of {where}: {what}")
            if "before" in first and first["before"]["sealed"]:
                print(f"  note: commit {commit} already seals; choose the commit before sealing with --before REV")
            report(runs)
            print(
                "\n  µs per op: median of the measurements [min-max]. ÷file, ÷dict: the operation's cost in "
                "baseline writes of\n  the same bytes, measured by the same worker (median). sealed/before: the "
                "ratio of each back-to-back pair\n  of measurements (median [min-max]); above 1, sealing costs more."
            )
            if not args.redis_url:
                print("\n(redis-server not installed: Redis not measured)")
            if not args.postgres_url:
                print("\n(PostgreSQL not installed (Debian: apt-get install postgresql): not measured)")
            print(f"\n({time.perf_counter() - started:.0f} s)")
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    main()
