"""A real PostgreSQL (Debian's `postgresql` package) in a folder of its own, for the store tests.

`initdb` runs once per process, into a template: a role `branchc` with a password (over TCP the server asks
for it, scram-sha-256) owning a database `branchc`, as a platform team would hand one out; the superuser
`postgres` connects over the server's unix socket without one (what the tests use to edit rows below the
store's API). Each server copies the template (a fraction of a second) and listens on a free loopback port
and on a socket in its folder. As root (CI) initdb and the server run as the `postgres` user, which initdb
requires, in a folder that user owns. Without the binaries a test skips, naming Debian's package.

    server = PostgresServer().start()   # server.url: postgresql://branchc:PASSWORD@127.0.0.1:PORT/branchc
    server.kill()                        # SIGKILL, server and backends; start() again recovers from its WAL
    server.remove()
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from _system import not_installed


def _bin_folder() -> Path | None:
    """Debian's binaries (not on PATH: /usr/lib/postgresql/VERSION/bin), the newest first; else those on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name or 0), reverse=True)
    for folder in [*found, *filter(None, [os.path.dirname(shutil.which("initdb") or "")])]:
        if all(os.access(Path(folder) / name, os.X_OK) for name in ("initdb", "postgres")):
            return Path(folder)
    return None


BIN = _bin_folder()
SKIP_REASON = not_installed("PostgreSQL (initdb, postgres)", "postgresql")
needs_postgres = pytest.mark.skipif(BIN is None, reason=SKIP_REASON)  # a mark: the test skips without them

ROLE, PASSWORD, DATABASE = "branchc", "branchc-test-password", "branchc"
AS_ROOT = os.geteuid() == 0
_started: list[PostgresServer] = []  # stopped at exit, should a test not get to it
_template: Path | None = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_owner() -> dict[str, Any]:
    """Popen's arguments that run a program as `postgres` when this is root (initdb refuses root)."""
    return {"user": "postgres", "group": "postgres", "extra_groups": []} if AS_ROOT else {}


def _folder(prefix: str) -> Path:
    """A new folder under the system's temp folder (as root: `postgres` owns it; pytest's are root's, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if AS_ROOT:
        shutil.chown(folder, "postgres", "postgres")
    return folder


def _template_folder() -> Path:
    """The initialized data folder every server copies: made once per process."""
    global _template
    if _template is None:
        assert BIN is not None, SKIP_REASON
        folder = _folder("branchc-pg-template-")
        atexit.register(shutil.rmtree, folder, True)
        secret = folder / "pw"
        secret.write_text("unused\n")  # the superuser's password; it connects over the socket, trusted
        if AS_ROOT:
            shutil.chown(secret, "postgres", "postgres")
        data = folder / "data"
        command = [str(BIN / "initdb"), "-D", str(data), "-U", "postgres", f"--pwfile={secret}", "-E", "UTF8"]
        command += ["--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "--no-instructions"]
        done = subprocess.run(command, capture_output=True, text=True, **_as_owner())
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")
        server = PostgresServer(data=data).start()
        try:
            with server.admin("postgres") as conn:
                conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
                conn.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        finally:
            server.stop()
        _template = data
    return _template


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(stat).read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:  # after the command's ")": state, ppid, ...
                found.append(int(Path(stat).parent.name))
    return found


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie does not: it only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class PostgresServer:
    """`postgres` on a free loopback port and a socket in its folder, started and stopped by the test; fsync
    off unless `durable` (a killed server loses nothing all the same: what it committed is in the OS's page
    cache; only a machine that stops would)."""

    def __init__(self, port: int | None = None, *, data: Path | None = None, durable: bool = False) -> None:
        assert BIN is not None, SKIP_REASON
        self.port = port or free_port()
        self.data = data  # the template's, when made from it
        self.folder: Path | None = None if data is None else data.parent
        self.durable = durable  # PostgreSQL's own settings: each commit's WAL written to disk (fsync), as run
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{ROLE}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> PostgresServer:
        if self.data is None:
            self.folder = _folder("branchc-pg-")
            self.data = self.folder / "data"
            subprocess.run(["cp", "-a", str(_template_folder()), str(self.data)], check=True)
        assert self.folder is not None
        log = self.folder / "postgres.log"
        args = [str(BIN / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.folder)]
        args += ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "logging_collector=off"]
        if not self.durable:
            args += ["-c", "fsync=off", "-c", "full_page_writes=off"]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **_as_owner()
            )
        _started.append(self)
        deadline = time.monotonic() + 20
        while not self.accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"postgres did not accept connections on port {self.port}:\n{text}")
            time.sleep(0.02)
        return self

    def accepts(self) -> bool:
        import psycopg

        try:
            with self.admin("postgres"):
                return True
        except psycopg.OperationalError:
            return False

    @contextlib.contextmanager
    def admin(self, database: str = DATABASE):
        """The superuser's connection over the socket (autocommit): below any store's API."""
        import psycopg

        with psycopg.connect(
            host=str(self.folder), port=self.port, user="postgres", dbname=database, autocommit=True, connect_timeout=2
        ) as conn:
            yield conn

    def stop(self) -> None:
        """A fast shutdown (SIGINT: sessions are ended, what was committed is kept)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def kill(self) -> None:
        """SIGKILL to the server and to every process of it (each backend is a session of its own), as a
        crash would; it returns once they are all gone."""
        if self.process is not None:
            children = _children(self.process.pid)
            for pid in [self.process.pid, *children]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait()
            deadline = time.monotonic() + 10
            while any(_running(pid) for pid in children) and time.monotonic() < deadline:
                time.sleep(0.01)
        self.process = None

    def remove(self) -> None:
        self.stop()
        if self.folder is not None and self.data != _template:
            shutil.rmtree(self.folder, ignore_errors=True)


@atexit.register
def _stop_all() -> None:
    for server in _started:
        server.kill()
        if server.folder is not None and server.data != _template:
            shutil.rmtree(server.folder, ignore_errors=True)


def url_of(store: Any) -> str:
    """The URL that opens `store` again (a PostgresStore's `url` leaves out its password): its schema too."""
    return f"{store.url.replace(f'{ROLE}@', f'{ROLE}:{PASSWORD}@', 1)}?schema={store.schema}"


_raw: dict[str, Any] = {}


@contextlib.contextmanager
def raw(store: Any):
    """A connection of the store's role to its database and schema, below the store's API (autocommit): one
    per schema, kept open for the next edit (a new one when its server went away meanwhile)."""
    import psycopg

    url = url_of(store)
    conn = _raw.get(url)
    if conn is None or conn.closed or conn.broken:
        conn = _raw[url] = psycopg.connect(
            url.partition("?")[0], autocommit=True, options=f"-c search_path={store.schema}"
        )
    yield conn
