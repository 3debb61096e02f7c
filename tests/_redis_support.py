"""A real redis-server on a free loopback port, in a temp folder, for the store tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from _system import needs, not_installed

REDIS_SERVER = shutil.which("redis-server")
SKIP_REASON = not_installed("redis-server", "redis-server")
needs_redis = needs("redis-server", "redis-server")  # a mark: the test skips without redis-server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ping(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """`redis-server --port N --bind 127.0.0.1 --save '' --appendonly no` (or durable: appendonly, fsync
    always, so a restart keeps what was written), started and stopped by the test."""

    def __init__(self, folder: Path, port: int | None = None, durable: bool = False) -> None:
        assert REDIS_SERVER, SKIP_REASON
        self.folder = folder
        self.port = port or free_port()
        self.durable = durable
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--dir", str(self.folder), "--protected-mode", "no"]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.process = subprocess.Popen(
            args, cwd=self.folder, stdout=(self.folder / "redis.log").open("ab"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 10
        while not ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}:\n{log}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
