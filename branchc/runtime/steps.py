"""Branch steps elsewhere: one step of a sub-branch as data, run by a `concurrent.futures` executor.

With an executor (`Machine.executor`), the machine ships the step of each sub-branch that can move:
the branch's compiled generator, what to send or throw into it, and a copy of the branch state its
Context reads (history, depth, system prompts) go out as one object graph of the snapshot codec, in
JSON text. A worker (`run_step`, importable anywhere branchc is) resumes the generator, steps it
once, and sends back the generator as it now waits and the outcome (the effect it yielded, its
return value or the error it raised), again as one graph; the worker's copy is released, so none of
the run's cleanup runs there. Only text crosses: the executor's own transport (pickle, for a process
pool or dask) carries two strings and a tuple of folders, and what comes back is decoded by the
codec, which trusts nothing in it.

The machine keeps the original generator until it adopts a step's outcome (then the original is
released), so a step that fails on the way (a worker killed) leaves the run exactly as it was, and
a step whose branch was halted meanwhile is simply dropped. Anything that cannot travel (a variable
the codec refuses, an error of a class no build records) is stepped here instead, as without an
executor, with a RuntimeWarning naming the function. Workers import the compiled modules from the
build folders named with each step: they need branchc and the build, at the same path.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import sys
import warnings
from typing import Any

from ..continuation.errors import NotSerializableError, SnapshotDataError, SnapshotError
from ..continuation.generator import is_compiled, release, release_reachable
from ..continuation.registry import meta_of
from ..continuation.snapshots import VERSION, check_version, decode_graph, encode_graph
from .context import BranchState, Context, TokenAccount
from .effects import All, Branch, Elicit, Log, Notify, Sample
from .errors import BranchcError

__all__ = ["ATTEMPTS", "Shipment", "StepElsewhereError", "executor_name", "run_step"]

EFFECTS = (Sample, Elicit, Log, Notify, Branch, All)
#: How often one step is tried on the executor before the run fails: a worker killed mid-step (a
#: process pool then breaks, dask loses the task) gets its step run once more, on a fresh worker.
ATTEMPTS = 2


class StepElsewhereError(BranchcError, RuntimeError):
    """A branch step could not run on the executor (its worker died every time, or cannot load the
    tool's code). The run is as it was before that step: nothing of it ran twice or was lost."""


def executor_name(executor: Any) -> str:
    """How errors name an executor: its `name` (branchc's executors have one), else its class."""
    return getattr(executor, "name", None) or type(executor).__name__


# -- the worker's side ------------------------------------------------------------------------


def run_step(text: str, paths: tuple[str, ...] = ()) -> str:
    """Step one branch once (in a worker): `text` is `Shipment`'s request, `paths` the build folders
    to import compiled modules from (put first on sys.path). Returns the outcome as JSON text:
    ``{"branchc_step": 2, "graph": ...}``; ``{"here": why}`` when the outcome cannot travel back (the
    machine then steps the branch itself); ``{"failed": why}`` when the request cannot be loaded here."""
    if sys.path[: len(paths)] != list(paths):
        for path in reversed(paths):
            if path in sys.path:
                sys.path.remove(path)
            sys.path.insert(0, path)
    holder = Context(None)  # type: ignore[arg-type]  # bound to the shipped state once it is decoded
    try:
        data = json.loads(text)
        check_version(data, "branchc_step", "a branch step")
        roots = decode_graph(data["graph"], lambda entry, child, path: holder)
    except (SnapshotError, SnapshotDataError, ValueError, KeyError, TypeError) as error:
        return json.dumps({"failed": f"{type(error).__name__}: {error}"})
    generator, sent, state = roots.get("gen"), roots.get("send"), roots.get("state")
    if not is_compiled(generator) or type(state) is not BranchState or type(sent) is not list or len(sent) != 2:
        release_reachable(roots)  # refused: none of the run's cleanup runs here
        return json.dumps({"failed": "the request is not a branch step (gen, send, state)"})
    ok, value = sent
    holder._branch = state
    try:
        effect = generator.send(value) if ok else generator.throw(value)
    except StopIteration as stop:
        kind, out = "return", stop.value
    except Exception as error:
        kind, out = "raise", error
    else:
        kind, out = ("yield", effect) if isinstance(effect, EFFECTS) else ("other", type(effect).__name__)
    try:
        graph = encode_graph({"gen": generator, "out": out})
    except NotSerializableError as error:
        return json.dumps({"here": f"its {_KINDS[kind]} cannot travel back: {error}"})
    finally:
        release(generator)  # it goes on in the machine, from the text (or from the original, stepped there)
    return json.dumps({"branchc_step": VERSION, "kind": kind, "graph": graph}, separators=(",", ":"))


_KINDS = {"yield": "effect", "other": "yielded value", "return": "return value", "raise": "error"}


# -- the machine's side -----------------------------------------------------------------------


class Here(Exception):
    """This step runs in the machine's process after all (the message says why)."""


class Shipment:
    """The steps of one batch that run on the executor: packed and submitted at once (so they run in
    parallel), taken back one by one in the machine's queue order. A submission that fails (a worker
    killed, a broken pool) is tried again, up to ATTEMPTS in all, before StepElsewhereError."""

    def __init__(self, executor: cf.Executor, tool: str) -> None:
        self.executor = executor
        self.tool = tool
        self.sent: dict[str, list[Any]] = {}  # branch id -> [request text, future, attempts, name, paths]
        self._folders: tuple[str, ...] | None = None

    def __contains__(self, ident: str) -> bool:
        return ident in self.sent

    def send(self, ident: str, generator: Any, ok: bool, value: Any, state: BranchState) -> bool:
        """Submit this branch's step; False (and a warning) when it cannot travel: it is stepped here."""
        meta = meta_of(generator.gi_code)
        try:
            text = _request(generator, ok, value, state)
        except NotSerializableError as error:
            _stepped_here(meta.qualname, str(error))
            return False
        if self._folders is None:
            self._folders = _build_folders()
        paths = tuple(dict.fromkeys((_build_root(meta.module), *self._folders)))
        self.sent[ident] = [text, self._submit(text, paths), 1, f"{state.name} (branch {ident})", paths]
        return True

    def take(self, ident: str) -> dict[str, Any]:
        """The worker's answer for this branch (waiting for it); StepElsewhereError when it cannot be had."""
        entry = self.sent.pop(ident)
        text, future, attempts, name, paths = entry
        while True:
            try:
                answer = json.loads(future.result())
                break
            except Exception as error:
                if attempts >= ATTEMPTS:
                    raise StepElsewhereError(
                        f"{self.tool}: {name} could not be stepped on {executor_name(self.executor)}: "
                        f"{type(error).__name__}: {error} (tried {attempts} times); the run is as it was before "
                        f"this step"
                    ) from error
                self._retry_failed()  # every step this failure took down, at once
                future, attempts = self._submit(text, paths), attempts + 1
        if "failed" in answer:
            raise StepElsewhereError(
                f"{self.tool}: {name} cannot be loaded on {executor_name(self.executor)}: {answer['failed']}; its "
                f"workers need branchc and the tool's build folder at the same path"
            )
        return answer

    def drop(self, ident: str) -> None:
        """This branch was halted before its turn: its step's outcome is not wanted."""
        entry = self.sent.pop(ident, None)
        if entry is not None:
            entry[1].cancel()

    def close(self) -> None:
        for ident in list(self.sent):
            self.drop(ident)

    def _submit(self, text: str, paths: tuple[str, ...]) -> cf.Future:
        try:
            return self.executor.submit(run_step, text, paths)
        except Exception as error:  # a broken or shut-down executor: the step fails like one that ran
            failed: cf.Future = cf.Future()
            failed.set_exception(error)
            return failed

    def _retry_failed(self) -> None:
        """After a failure, resubmit the other steps that failed too (a broken pool fails them all)."""
        cf.wait([entry[1] for entry in self.sent.values()])
        for entry in self.sent.values():
            failed = entry[1].cancelled() or entry[1].exception() is not None
            if failed and entry[2] < ATTEMPTS:
                entry[1], entry[2] = self._submit(entry[0], entry[4]), entry[2] + 1


def outcome(answer: dict[str, Any], state: BranchState, original: Any) -> tuple[Any, str, Any]:
    """(generator, kind, value) from a worker's answer for the branch whose generator is `original`;
    the generator's Context is the branch's own. Here when the step must run in this process instead
    (the warning says why)."""
    function = meta_of(original.gi_code).qualname
    if "here" in answer:
        _stepped_here(function, answer["here"])
        raise Here(answer["here"])
    ctx = Context(state)
    try:
        check_version(answer, "branchc_step", "a branch step's outcome")
        roots = decode_graph(answer["graph"], lambda entry, child, path: ctx)
        generator, kind = roots["gen"], answer["kind"]
        if kind not in _KINDS or not is_compiled(generator):
            release_reachable(roots)
            raise SnapshotDataError("kind", f"{kind!r} is not an outcome of a step")
    except (SnapshotError, SnapshotDataError, KeyError, TypeError) as error:
        _stepped_here(function, f"its outcome cannot be read here: {error}")
        raise Here(str(error)) from None
    return generator, kind, roots["out"]


def _request(generator: Any, ok: bool, value: Any, state: BranchState) -> str:
    """The step as text: the generator, what it is sent, and what its Context reads (not its budget)."""
    shipped = dataclasses.replace(state, tokens=TokenAccount(None), children=0)

    def context(item: Any, child: Any, path: Any) -> dict | None:
        if type(item) is Context:
            if item._branch is not state:
                raise NotSerializableError(str(path), "Context", "it is another branch's Context")
            return {"t": "ctx"}
        return None

    graph = encode_graph({"gen": generator, "send": [ok, value], "state": shipped}, context)
    return json.dumps({"branchc_step": VERSION, "graph": graph}, separators=(",", ":"), ensure_ascii=False)


def _stepped_here(function: str, why: str) -> None:
    warnings.warn(f"{function}: a step runs in this process, not on the executor: {why}", RuntimeWarning, stacklevel=2)


_ROOTS: dict[tuple[str, str], str] = {}


def _build_root(module: str) -> str:
    """The build folder a compiled module was imported from (the sys.path entry its name resolves in)."""
    origin = getattr(getattr(sys.modules.get(module), "__spec__", None), "origin", None) or ""
    root = _ROOTS.get((module, origin))
    if root is None:
        root = os.path.dirname(origin)
        for _ in range(module.count(".") + (os.path.basename(origin) == "__init__.py")):
            root = os.path.dirname(root)
        _ROOTS[module, origin] = root
    return root


def _build_folders() -> tuple[str, ...]:
    """Every build folder on sys.path (a folder with a manifest), for classes of other modules."""
    return tuple(p for p in sys.path if isinstance(p, str) and p and os.path.isfile(os.path.join(p, "branchc.json")))
