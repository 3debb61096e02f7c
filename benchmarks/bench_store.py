"""Checkpoints per second: compare-and-swap writes of a run's saved text to the continuation stores.

Each checkpoint replaces a realistic run text (~5 KB and ~50 KB of dump_run-shaped JSON) at the
version it was loaded at, as the bridge will at every suspension. Against two baselines measured in
the same run: a plain dict write (no store at all) and the same bytes written to a file and renamed
into place with os.replace (no fsync, like SQLite's synchronous=normal). Redis is a redis-server this
script starts on a free loopback port (or --redis-url).

    python benchmarks/bench_store.py [--count 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from branchc.store import RunMeta, RunRecord, WaitPoint
from branchc.store.redis import RedisStore
from branchc.store.sqlite import SQLiteStore

META = RunMeta(
    era="2026-07-28",
    run_format=1,
    code_hash="9f2c" * 16,
    waits=(WaitPoint("0", "client", 42, "tools/research.py"),),
    pending=({"key": "sample-3", "kind": "sample", "summary": "Summarise the findings so far"},),
)


def run_text(size: int) -> str:
    """dump_run-shaped JSON of about `size` bytes: a chat history of messages."""
    messages, total = [], 0
    while total < size:
        text = f"turn {len(messages)}: " + "the quick brown fox jumps over the lazy dog " * 3
        messages.append({"t": "obj", "cls": 3, "v": {"role": "user", "content": text}})
        total += len(text) + 45
    return json.dumps({"branchc_run": 1, "graph": {"history": messages}}, separators=(",", ":"))


def rate(fn, count: int, repeat: int) -> float:
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn(count)
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


def dict_writes(text: str):
    table: dict[str, tuple[int, str]] = {"r": (1, text)}
    texts = [text, text[:-1] + " "]

    def go(count: int) -> None:
        for index in range(count):
            version, _ = table["r"]
            table["r"] = (version + 1, texts[index % 2])

    return go


def file_writes(folder: Path, text: str):
    path, tmp = folder / "run.json", folder / "run.json.tmp"
    data = [text.encode(), (text[:-1] + " ").encode()]

    def go(count: int) -> None:
        for index in range(count):
            with open(tmp, "wb") as out:
                out.write(data[index % 2])
            os.replace(tmp, path)

    return go


def store_writes(store, text: str):
    record = store.create(RunRecord.new("bench", text, ttl=3600, meta=META))
    state = {"version": record.version}
    texts = [text, text[:-1] + " "]

    def go(count: int) -> None:
        version = state["version"]
        for index in range(count):
            version = store.checkpoint(record.run_id, version, saved=texts[index % 2], meta=META).version
        state["version"] = version

    return go


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="checkpoints per measurement")
    parser.add_argument("--repeat", type=int, default=5, help="measurements; the median is reported")
    parser.add_argument("--redis-url", help="an existing Redis (default: start redis-server here)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proc, url = (None, args.redis_url) if args.redis_url else start_redis(folder)
        try:
            print(f"checkpoints/s, median of {args.repeat} x {args.count} (ratios: store / baseline)")
            for size in (5_000, 50_000):
                text = run_text(size)
                rows = [
                    ("dict write (baseline)", dict_writes(text)),
                    ("file + os.replace (baseline)", file_writes(folder, text)),
                ]
                stores = [
                    SQLiteStore(folder / f"normal-{size}.db", synchronous="normal"),
                    SQLiteStore(folder / f"full-{size}.db", synchronous="full"),
                ]
                if url:
                    stores.append(RedisStore(url, prefix=f"bench{size}:"))
                names = ["sqlite WAL synchronous=normal", "sqlite WAL synchronous=full", "redis (localhost)"]
                rows += [(name, store_writes(store, text)) for name, store in zip(names, stores, strict=False)]
                print(f"\nrun text {len(text.encode()):,} bytes")
                results = {name: rate(fn, args.count, args.repeat) for name, fn in rows}
                base_dict = results["dict write (baseline)"]
                base_file = results["file + os.replace (baseline)"]
                for name, value in results.items():
                    ratios = f"vs file x{value / base_file:6.2f}   vs dict x{value / base_dict:.5f}"
                    print(f"  {name:32} {value:>12,.0f}/s   {ratios}")
                for store in stores:
                    store.close()
            if not url:
                print("\n(redis-server not installed: Redis not measured)")
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    main()
