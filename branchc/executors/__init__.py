"""Where branch steps run: `open_executor(spec)` for `branchc serve --executor` and `run_tool(executor=)`.

- ``inline`` (the default): no executor, every step runs in the serving process;
- ``process`` or ``process:N``: a pool of worker processes on this machine (N, by default one per
  core), started by forkserver where there is one (spawn elsewhere), never by a fork of a
  multi-threaded server. A worker killed mid-step breaks a process pool; `ProcessPool` then starts a
  fresh one for the step's retry (the run machine tries a step twice, steps.py);
- ``dask://HOST:PORT``: the workers of a dask.distributed scheduler, on as many hosts as it has
  (`pip install 'branchc[dask]'`). Its workers need branchc and the tool's build folder at the same
  path as the server. A worker that dies mid-step gets its task rerun by the scheduler, or the
  step fails with KilledWorker and the machine tries it once more.

Each step travels as snapshot data (runtime/steps.py), so any `concurrent.futures.Executor` works;
these are the ones with a name for errors and a `shutdown` that closes everything they opened.

Each one makes a step key (`key=`: derived from the key given, the state key say, else random) and
gives it to its workers as they start: the pool through its initializer (only the server and its
child processes see it), dask through a worker plugin, which the scheduler keeps to set up workers
that join later. So a dask cluster is trusted infrastructure: its scheduler holds the step key,
whoever can submit tasks to it runs code on its workers anyway, and its members exchange pickles with
the server; secure it (TLS with certificates, `distributed.comm.require-encryption`, its own
network). Every request and outcome is MACed under the step key and bound to its step; an outcome is
decoded by the snapshot rules and its effect checked before the server acts on it (runtime/steps.py).
Another executor gets a key of its own inside each task.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import re
import secrets
import threading
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import BranchcError
from ..extras import missing_extra
from ..runtime.steps import StepElsewhereError, StepRefusedError, install_key, key_id, step_key

__all__ = [
    "DaskExecutor",
    "ExecutorSpec",
    "ExecutorSpecError",
    "ProcessPool",
    "StepElsewhereError",
    "StepRefusedError",
    "open_executor",
    "parse_executor",
]

USAGE = "inline, process (process:N for N workers) or dask://HOST:PORT"


class ExecutorSpecError(BranchcError, ValueError):
    """An executor spec that names no executor, or one that cannot be opened (the message says what to give)."""


@dataclass(frozen=True)
class ExecutorSpec:
    kind: Literal["inline", "process", "dask"]
    workers: int | None = None  # process: how many (None: one per core)
    address: str | None = None  # dask: the scheduler, tcp://HOST:PORT

    def __str__(self) -> str:
        if self.kind == "dask":
            return f"dask://{self.address.removeprefix('tcp://')}"  # type: ignore[union-attr]
        return f"process:{self.workers}" if self.workers else self.kind


_DASK = re.compile(r"dask://(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})/?")


def parse_executor(spec: str | None) -> ExecutorSpec:
    """The executor `spec` names; ExecutorSpecError (saying what to give) for anything else."""
    text = (spec or "inline").strip()
    if text == "inline":
        return ExecutorSpec("inline")
    if text == "process":
        return ExecutorSpec("process")
    if text.startswith("process:"):
        count = text.removeprefix("process:")
        if not count.isdigit() or not 1 <= int(count) <= 1024:
            raise ExecutorSpecError(f"{text!r}: process:N takes a number of workers from 1 to 1024, like process:4")
        return ExecutorSpec("process", workers=int(count))
    if text.startswith("dask:"):
        found = _DASK.fullmatch(text)
        if found is None or not 0 < int(found["port"]) < 65536:
            raise ExecutorSpecError(
                f"{text!r}: give the dask scheduler as dask://HOST:PORT, like dask://127.0.0.1:8786"
            )
        return ExecutorSpec("dask", address=f"tcp://{found['host']}:{int(found['port'])}")
    raise ExecutorSpecError(f"{text!r} is not an executor; use {USAGE}")


def open_executor(
    spec: str | ExecutorSpec | None, *, timeout: float = 10, key: bytes | None = None
) -> cf.Executor | None:
    """The executor `spec` names, ready (None for inline); shut it down when done. A dask scheduler that
    does not answer within `timeout` seconds is an ExecutorSpecError naming it; dask:// without the
    distributed package is a MissingExtraError (`pip install 'branchc[dask]'`). `key` (at least 16
    bytes, the state key say): the step key is derived from it (runtime.steps.step_key); else random."""
    parsed = spec if isinstance(spec, ExecutorSpec) else parse_executor(spec)
    if parsed.kind == "inline":
        return None
    if parsed.kind == "process":
        return ProcessPool(parsed.workers, key=key)
    return DaskExecutor(parsed.address, timeout=timeout, key=key)  # type: ignore[arg-type]


def _start_method() -> Any:
    """forkserver where there is one: workers forked from a clean server process (with branchc's runtime
    imported once, there), not from the serving process, whose threads a fork would copy mid-flight."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["branchc.runtime.steps"])
        return context
    return multiprocessing.get_context("spawn")


class ProcessPool(cf.Executor):
    """A process pool that outlives its workers: once a worker dies (killed, out of memory) a
    `ProcessPoolExecutor` is broken for good, so the next submission starts a fresh one. The steps that
    were in flight fail with BrokenProcessPool, and the run machine resubmits them (here, to the new pool).
    Each worker gets the pool's step key (derived from `key`, else random) from the pool's initializer."""

    workers_hold_key = True

    def __init__(self, max_workers: int | None = None, mp_context: Any = None, *, key: bytes | None = None) -> None:
        self.step_key = step_key(key)
        self.max_workers = max_workers or os.cpu_count() or 1
        self._context = mp_context or _start_method()
        self._lock = threading.Lock()
        self._pool = self._new()
        self.renewed = 0  # how often a broken pool was replaced
        self.name = f"a process pool ({self.max_workers} workers)"

    def _new(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(
            self.max_workers, mp_context=self._context, initializer=install_key, initargs=(self.step_key,)
        )

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
        with self._lock:
            try:
                return self._pool.submit(fn, *args, **kwargs)
            except BrokenProcessPool:
                _retire(self._pool)
                self._pool = self._new()
                self.renewed += 1
                return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def _retire(pool: cf.ProcessPoolExecutor) -> None:
    """Shut a broken pool down, and kill what is left of its workers. When a pool breaks, CPython's manager thread
    kills its workers and then joins them; a worker started by a submission that raced the break is not among those
    it killed, and that join (at the latest, at interpreter exit) would wait for it for ever."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        with contextlib.suppress(Exception):  # gone already
            worker.kill()


class DaskExecutor(cf.Executor):
    """The workers of a dask.distributed scheduler as a `concurrent.futures` executor. Every submission is
    a new task (never merged with an equal one, so a retried step runs again); `shutdown` also closes the
    client when this executor opened it. `scheduler`: an address (tcp://HOST:PORT) or a `distributed.Client`.
    The step key (derived from `key`, else random) reaches every worker, present and future, through a
    worker plugin registered with the scheduler (which therefore holds it too); `shutdown` takes it back."""

    workers_hold_key = True

    def __init__(self, scheduler: Any, *, timeout: float = 10, key: bytes | None = None) -> None:
        self.step_key = step_key(key)
        try:
            import distributed

            from ._dask import StepKeyPlugin
        except ImportError as error:
            raise missing_extra("dask", error) from None
        self._owned = not isinstance(scheduler, distributed.Client)
        if self._owned:
            try:
                client = distributed.Client(scheduler, timeout=timeout, set_as_default=False)
            except (OSError, TimeoutError) as error:
                raise ExecutorSpecError(
                    f"no dask scheduler answers at {scheduler} ({type(error).__name__}: {error}); start one "
                    f"(`dask scheduler`, and `dask worker {scheduler}` on each host) or fix the address"
                ) from None
        else:
            client = scheduler
        self.client = client
        self._plugin = f"branchc-step-key-{key_id(self.step_key)}-{secrets.token_hex(4)}"  # one per executor
        try:
            client.register_plugin(StepKeyPlugin(self.step_key), name=self._plugin)
        except BaseException:
            if self._owned:
                client.close()
            raise
        self._executor = client.get_executor(pure=False)
        self.name = f"the dask scheduler at {client.scheduler.address}"

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future:
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._executor.shutdown(wait=wait and not cancel_futures)
        try:
            self.client.unregister_worker_plugin(self._plugin)  # the workers and the scheduler let go of the key
        except Exception:  # a client or cluster already gone holds no key to take back
            pass
        if self._owned:
            self.client.close()
