"""Branch steps elsewhere: one step of a sub-branch as data, run by a `concurrent.futures` executor.

With an executor (`Machine.executor`), the machine ships the step of each sub-branch that can move:
the branch's compiled generator, what to send or throw into it, and a copy of the branch state its
Context reads (history, depth, system prompts) go out as one object graph of the snapshot codec, in
JSON. A worker (`run_step`, importable anywhere branchc is) resumes the generator, steps it once,
and sends back the generator as it now waits and the outcome (the effect it yielded, its return
value or the error it raised), again as one graph; the worker's copy is released, so none of the
run's cleanup runs there. Only bytes cross: the executor's own transport (pickle, for a process
pool or dask) carries two byte strings, a tuple of folders and which key to use.

The machine keeps the original generator until it adopts a step's outcome (then the original is
released), so a step that fails on the way (a worker killed) leaves the run exactly as it was, and
a step whose branch was halted meanwhile is simply dropped. Anything that cannot travel (a variable
the codec refuses, an error of a class no build records) is stepped here instead, as without an
executor, with a RuntimeWarning naming the function. Workers import the compiled modules from the
build folders named with each step: they need branchc and the build, at the same path.

Trust. The server and its workers share a step key (32 bytes: random per executor, or derived from
a key the server is given, `step_key`); nobody else holds it. A `ProcessPool` hands it to its
workers through the pool's initializer, a `DaskExecutor` through a worker plugin (so the scheduler
holds it too: a dask cluster is trusted infrastructure), and any other executor gets it inside each
task. Every message is MACed under that key and bound to its step:

    message = TAG || HEADER || "\n" || BODY
    HEADER  = {"dir":"request"|"outcome","tool":...,"run":call id,"branch":id,"step":n,"nonce":hex}
    TAG     = HMAC-SHA256(step key, HEADER || "\n" || BODY)        (32 bytes)

HEADER is canonical JSON (ASCII, this key order); BODY is the request or the outcome as JSON. `step`
counts the steps this process ships and `nonce` is 16 random bytes, so no two steps anywhere share
a header. A worker answers only a request whose TAG verifies, with the outcome header of that very
request. The machine reads an outcome only once its TAG verifies (`hmac.compare_digest`) and its
HEADER is the one it expects; anything else (no MAC, a forged or altered one, another step's
outcome, a request sent back) is refused with StepRefusedError naming the step, before anything
of it is parsed. Even then the outcome is untrusted input: it is decoded by the snapshot rules
(the snapshot decoder and its limits; only what the builds record may be named), and what the
machine acts on is checked as outcomes.py says (the branch's own generator, an effect rebuilt
through Context as compiled code makes it, bounded), or refused the same way. A refused step is
never retried; the run fails with the error as when a worker dies, its finally blocks running once.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import hmac
import itertools
import json
import os
import secrets
import sys
import threading
import warnings
import weakref
from typing import Any

from ..continuation.errors import NotSerializableError, SnapshotDataError, SnapshotError
from ..continuation.generator import is_compiled, release, release_reachable
from ..continuation.registry import meta_of
from ..continuation.snapshots import VERSION, check_version, decode_graph, encode_graph
from . import tracing
from .context import BranchState, Context, TokenAccount
from .effects import All, Branch, Elicit, Log, Notify, Sample
from .errors import BranchcError
from .outcomes import OutcomeRefused, check_outcome

__all__ = [
    "ATTEMPTS",
    "MAX_STEP_BYTES",
    "Shipment",
    "StepElsewhereError",
    "StepRefusedError",
    "executor_name",
    "install_key",
    "key_id",
    "run_step",
    "step_key",
    "uninstall_key",
]

EFFECTS = (Sample, Elicit, Log, Notify, Branch, All)
#: How often one step is tried on the executor before the run fails: a worker killed mid-step (a
#: process pool then breaks, dask loses the task) gets its step run once more, on a fresh worker.
ATTEMPTS = 2
#: The largest outcome the machine reads (bytes); a larger one is refused before its MAC is computed.
MAX_STEP_BYTES = 256 * 1024 * 1024


class StepElsewhereError(BranchcError, RuntimeError):
    """A branch step could not run on the executor (its worker died every time, or cannot load the
    tool's code). The run is as it was before that step: nothing of it ran twice or was lost."""


class StepRefusedError(StepElsewhereError):
    """A worker's answer to a branch step that the machine refuses: its MAC does not verify, it answers
    another step, or what it holds is no valid outcome (a malformed effect, say). Nothing of it was
    used, called or constructed; the run is as it was before that step, and fails with this error."""


def executor_name(executor: Any) -> str:
    """How errors name an executor: its `name` (branchc's executors have one), else its class."""
    return getattr(executor, "name", None) or type(executor).__name__


# -- the step key -------------------------------------------------------------------------------

KEY_BYTES = 32
_DERIVE = b"branchc/executor-steps/v1"


def step_key(key: bytes | str | None = None) -> bytes:
    """The secret that an executor's step messages are MACed with: 32 random bytes, or (given `key`, at
    least 16 bytes: the state key, say) HMAC-SHA256(key, "branchc/executor-steps/v1"), so the workers
    never see `key` itself and every server given the same key makes the same step key."""
    if key is None:
        return secrets.token_bytes(KEY_BYTES)
    if type(key) is str:
        key = key.encode("utf-8")
    elif isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    if type(key) is not bytes:
        raise TypeError(f"an executor's key is bytes (or str), not {type(key).__name__}")
    if len(key) < 16:
        raise ValueError(f"an executor's key has at least 16 bytes, not {len(key)}; give a random one")
    return hmac.digest(key, _DERIVE, "sha256")


def key_id(secret: bytes) -> str:
    """A name for a step key that reveals nothing of it: what a task carries to say which key a worker uses."""
    return hashlib.sha256(b"branchc/executor-step-key-id\n" + secret).hexdigest()[:32]


_KEYS: dict[str, bytes] = {}  # a worker's step keys, by key_id
_HOLDERS: dict[str, int] = {}  # how many executors installed each (two servers given one key share it)
_KEYS_LOCK = threading.Lock()


def install_key(secret: bytes) -> None:
    """Hold `secret` in this worker process: a ProcessPool's initializer, a DaskExecutor's worker plugin."""
    if type(secret) is not bytes or len(secret) < 16:
        raise ValueError("a step key is at least 16 bytes")
    ident = key_id(secret)
    with _KEYS_LOCK:
        _KEYS[ident] = secret
        _HOLDERS[ident] = _HOLDERS.get(ident, 0) + 1


def uninstall_key(secret: bytes) -> None:
    """Let go of `secret` once every executor that installed it has (a DaskExecutor's shutdown)."""
    ident = key_id(secret)
    with _KEYS_LOCK:
        left = _HOLDERS.pop(ident, 0) - 1
        if left > 0:
            _HOLDERS[ident] = left
        else:
            _KEYS.pop(ident, None)


_CARRIED: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
_CARRIED_LOCK = threading.Lock()
_PROCESS_KEY: list[bytes] = []


def _key_for(executor: Any) -> tuple[bytes, str | bytes]:
    """(the secret, what each task carries): the key id when the executor's workers hold its key
    (`step_key` and `workers_hold_key`, as branchc's executors have), else a key of this executor's
    own that travels inside each task."""
    secret = getattr(executor, "step_key", None)
    if type(secret) is bytes and len(secret) >= 16:
        return secret, key_id(secret) if getattr(executor, "workers_hold_key", False) is True else secret
    with _CARRIED_LOCK:
        try:
            secret = _CARRIED.get(executor)
            if secret is None:
                secret = _CARRIED[executor] = step_key()
        except TypeError:  # an executor that cannot be weakly referenced: this process's key
            if not _PROCESS_KEY:
                _PROCESS_KEY.append(step_key())
            secret = _PROCESS_KEY[0]
    return secret, secret


# -- messages -----------------------------------------------------------------------------------

_TAG = 32  # HMAC-SHA256
_REQUEST = b'{"dir":"request",'
_OUTCOME = b'{"dir":"outcome",'
_MAX_HEADER = 4096


def _identity(tool: str, run: str, branch: str, step: int, nonce: str) -> bytes:
    """A step's header after its direction: canonical JSON, ASCII, of a bounded length (a long tool name or
    call id, which a client may choose, is written as its digest)."""
    fields = {"tool": _short(tool), "run": _short(run), "branch": _short(branch), "step": step, "nonce": nonce}
    return json.dumps(fields, separators=(",", ":"))[1:].encode("ascii")


def _short(text: str) -> str:
    if len(text) <= 200:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _seal(secret: bytes, header: bytes, body: bytes) -> bytes:
    text = b"".join((header, b"\n", body))
    return hmac.digest(secret, text, "sha256") + text


def _open(secret: bytes, message: Any) -> tuple[bytes, bytes] | None:
    """(header, body) of a message whose MAC verifies under `secret`, else None."""
    if type(message) is not bytes or len(message) < _TAG + 2:
        return None
    view = memoryview(message)
    if not hmac.compare_digest(hmac.digest(secret, view[_TAG:], "sha256"), view[:_TAG]):
        return None
    end = message.find(b"\n", _TAG, _TAG + _MAX_HEADER)
    if end < 0:
        return None
    return message[_TAG:end], message[end + 1 :]


def _unsealed(why: str) -> bytes:
    """A worker's answer when it cannot MAC one (no key, or a request that does not verify): refused there."""
    return bytes(_TAG) + b'{"dir":"unsealed"}\n' + json.dumps({"failed": why}).encode("ascii")


# -- the worker's side ------------------------------------------------------------------------


def run_step(message: bytes, paths: tuple[str, ...] = (), key: str | bytes = "") -> bytes:
    """Step one branch once (in a worker): `message` is `Shipment`'s request, `paths` the build
    folders to import compiled modules from (put first on sys.path), `key` the id of a step key this
    worker holds (`install_key`) or the key itself. Returns the outcome, MACed for the request's step:
    ``{"branchc_step": 2, "kind": ..., "graph": ...}``; ``{"here": why}`` when the outcome cannot travel
    back (the machine then steps the branch itself); ``{"failed": why}`` when the request cannot be
    loaded here. A request whose MAC does not verify is not read at all."""
    secret = key if type(key) is bytes else _KEYS.get(key) if type(key) is str else None
    if secret is None:
        return _unsealed("this worker holds no key for the step (a worker that its executor did not start?)")
    opened = _open(secret, message)
    if opened is None or not opened[0].startswith(_REQUEST):
        return _unsealed("the request's MAC does not verify here")
    header, body = opened
    outcome_header = _OUTCOME + header[len(_REQUEST) :]

    def answer(data: dict[str, Any]) -> bytes:
        return _seal(secret, outcome_header, json.dumps(data, separators=(",", ":")).encode("ascii"))

    if sys.path[: len(paths)] != list(paths):
        for path in reversed(paths):
            if path in sys.path:
                sys.path.remove(path)
            sys.path.insert(0, path)
    kept = _kept_among(paths)  # a run finishing on a kept build steps its branches in that build's code
    if kept is None:
        return _stepped(body, answer)
    with kept.reading():
        return _stepped(body, answer)


def _kept_among(paths: tuple[str, ...]) -> Any:
    """The kept build (runtime/builds.py) whose folder is among a step's build folders, imported; None if none is."""
    from .builds import kept_build_in

    for path in paths:
        kept = kept_build_in(path)
        if kept is not None:
            return kept
    return None


def _stepped(body: bytes, answer: Any) -> bytes:
    holder = Context(None)  # type: ignore[arg-type]  # bound to the shipped state once it is decoded
    try:
        data = json.loads(body)
        check_version(data, "branchc_step", "a branch step")
        roots = decode_graph(data["graph"], lambda entry, child, path: holder)
    except (SnapshotError, SnapshotDataError, ValueError, KeyError, TypeError) as error:
        return answer({"failed": f"{type(error).__name__}: {error}"})
    generator, sent, state = roots.get("gen"), roots.get("send"), roots.get("state")
    if not is_compiled(generator) or type(state) is not BranchState or type(sent) is not list or len(sent) != 2:
        release_reachable(roots)  # refused: none of the run's cleanup runs here
        return answer({"failed": "the request is not a branch step (gen, send, state)"})
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
        return answer({"here": f"its {_KINDS[kind]} cannot travel back: {error}"})
    finally:
        release(generator)  # it goes on in the machine, from the outcome (or from the original, stepped there)
    return answer({"branchc_step": VERSION, "kind": kind, "graph": graph})


_KINDS = {"yield": "effect", "other": "yielded value", "return": "return value", "raise": "error"}


# -- the machine's side -----------------------------------------------------------------------

_STEPS = itertools.count(1)  # the steps this process ships, numbered


@dataclasses.dataclass(slots=True)
class _Sent:
    message: bytes  # the request, sealed
    future: cf.Future
    attempts: int
    name: str  # "{branch name} (branch {id})"
    paths: tuple[str, ...]
    step: int
    expected: bytes  # the header its outcome must have
    span: Any = None  # its `branchc.step` span, from submission to outcome (tracing.py), while traces record


class Shipment:
    """The steps of one batch that run on the executor: packed and submitted at once (so they run in
    parallel), taken back one by one in the machine's queue order. A submission that fails (a worker
    killed, a broken pool) is tried again, up to ATTEMPTS in all, before StepElsewhereError; an
    outcome that is refused (StepRefusedError) is not."""

    def __init__(self, executor: cf.Executor, tool: str, run: str = "") -> None:
        self.executor = executor
        self.tool = tool
        self.run = run
        self.secret, self.key = _key_for(executor)
        self.sent: dict[str, _Sent] = {}  # branch id -> its step
        self._folders: tuple[str, ...] | None = None

    def __contains__(self, ident: str) -> bool:
        return ident in self.sent

    def send(self, ident: str, generator: Any, ok: bool, value: Any, state: BranchState) -> bool:
        """Submit this branch's step; False (and a warning) when it cannot travel: it is stepped here."""
        meta = meta_of(generator.gi_code)
        try:
            body = _request(generator, ok, value, state)
        except NotSerializableError as error:
            _stepped_here(meta.qualname, str(error))
            return False
        if self._folders is None:
            self._folders = _build_folders()
        paths = tuple(dict.fromkeys((_build_root(meta.module), *self._folders)))
        step = next(_STEPS)
        identity = _identity(self.tool, self.run, ident, step, secrets.token_hex(16))
        message = _seal(self.secret, _REQUEST + identity, body)
        name = f"{state.name} (branch {ident})"
        sent = _Sent(message, self._submit(message, paths), 1, name, paths, step, _OUTCOME + identity)
        if tracing.recording():
            attributes = {"branchc.branch": name, "branchc.request_bytes": len(message)}
            sent.span = tracing.TRACER.start_span("branchc.step", attributes=attributes)
        self.sent[ident] = sent
        return True

    def take(self, ident: str, state: BranchState, original: Any) -> tuple[Any, str, Any] | None:
        """`_take`, ending the step's span (tracing.py) with what came of it, and counting where it ended."""
        span = self.sent[ident].span
        if span is None and not tracing.measuring():
            return self._take(ident, state, original)
        try:
            outcome = self._take(ident, state, original)
        except BaseException as error:
            tracing.step_ended("failed")
            if span is not None:
                tracing.failed(span, error)
            raise
        else:
            where = "here" if outcome is None else "worker"
            tracing.step_ended(where)
            if span is not None:
                span.set_attribute("branchc.where", where)
            return outcome
        finally:
            if span is not None:
                span.end()

    def _take(self, ident: str, state: BranchState, original: Any) -> tuple[Any, str, Any] | None:
        """(generator, kind, value) of this branch's step, from its worker's answer (waited for), for
        the branch whose state is `state` and generator `original`; the generator's Context is the
        branch's own. None when the step must run in this process instead (the warning says why).
        StepElsewhereError when the answer cannot be had, StepRefusedError when it is refused."""
        entry = self.sent.pop(ident)
        while True:
            try:
                message = entry.future.result()
                break
            except Exception as error:
                if entry.attempts >= ATTEMPTS:
                    raise StepElsewhereError(
                        f"{self.tool}: {entry.name} could not be stepped on {executor_name(self.executor)}: "
                        f"{type(error).__name__}: {error} (tried {entry.attempts} times); the run is as it was "
                        f"before this step"
                    ) from error
                self._retry_failed()  # every step this failure took down, at once
                entry.future, entry.attempts = self._submit(entry.message, entry.paths), entry.attempts + 1
        answer = self._read(entry, message)
        if "failed" in answer:
            raise StepElsewhereError(
                f"{self.tool}: {entry.name} cannot be loaded on {executor_name(self.executor)}: "
                f"{_why(answer, 'failed')}; its workers need branchc and the tool's build folder at the same path"
            )
        if "here" in answer:
            function = meta_of(original.gi_code).qualname
            _stepped_here(function, _why(answer, "here"))
            return None
        try:
            return outcome(answer, state, original)
        except OutcomeRefused as error:
            raise self._refused(entry, str(error)) from None

    def _read(self, entry: _Sent, message: Any) -> dict[str, Any]:
        """The outcome's JSON, once its MAC verifies and it is this step's; else StepRefusedError."""
        if type(message) is not bytes:
            raise self._refused(entry, f"it is a {type(message).__name__}, not a step message (bytes)")
        if len(message) > MAX_STEP_BYTES:
            raise self._refused(entry, f"it is larger than {MAX_STEP_BYTES:,} bytes (steps.MAX_STEP_BYTES)")
        opened = _open(self.secret, message)
        if opened is None:
            raise self._refused(
                entry,
                "its MAC does not verify: it was forged, altered on the way, or made under another key (do the "
                "executor's workers hold its key?)",
            )
        header, body = opened
        if header != entry.expected:
            raise self._refused(entry, f"it is the {_claimed(header)}, not this step's outcome")
        try:
            answer = json.loads(body)
        except RecursionError:
            raise self._refused(entry, "it is nested too deeply to read") from None
        except ValueError as error:
            raise self._refused(entry, f"it is not JSON: {error}") from None
        if type(answer) is not dict:
            raise self._refused(entry, "it is not a JSON object")
        return answer

    def _refused(self, entry: _Sent, why: str) -> StepRefusedError:
        return StepRefusedError(
            f"{self.tool}: the outcome of {entry.name}, step {entry.step}, from {executor_name(self.executor)} "
            f"is refused: {why}; nothing of it was used, and the run is as it was before this step"
        )

    def drop(self, ident: str) -> None:
        """This branch was halted before its turn: its step's outcome is not wanted."""
        entry = self.sent.pop(ident, None)
        if entry is not None:
            entry.future.cancel()
            tracing.step_ended("dropped")
            if entry.span is not None:
                entry.span.set_attribute("branchc.where", "dropped")
                entry.span.end()

    def close(self) -> None:
        for ident in list(self.sent):
            self.drop(ident)

    def _submit(self, message: bytes, paths: tuple[str, ...]) -> cf.Future:
        try:
            return self.executor.submit(run_step, message, paths, self.key)
        except Exception as error:  # a broken or shut-down executor: the step fails like one that ran
            failed: cf.Future = cf.Future()
            failed.set_exception(error)
            return failed

    def _retry_failed(self) -> None:
        """After a failure, resubmit the other steps that failed too (a broken pool fails them all)."""
        cf.wait([entry.future for entry in self.sent.values()])
        for entry in self.sent.values():
            failed = entry.future.cancelled() or entry.future.exception() is not None
            if failed and entry.attempts < ATTEMPTS:
                entry.future, entry.attempts = self._submit(entry.message, entry.paths), entry.attempts + 1


def _why(answer: dict[str, Any], key: str) -> str:
    """A worker's reason, as text of a bounded length."""
    why = answer[key]
    if type(why) is not str:
        return f"(a {type(why).__name__}, not a reason)"
    return why if len(why) <= 2000 else why[:2000] + "..."


def _claimed(header: bytes) -> str:
    """What an authentic header of another step says it is (for the error)."""
    try:
        data = json.loads(header)
    except (ValueError, RecursionError):
        data = None
    if type(data) is not dict:
        return "answer to no step"
    shown = {name: repr(data.get(name))[:200] for name in ("tool", "run", "branch", "step")}
    what = {"request": "request", "outcome": "outcome"}.get(data.get("dir"), "message")  # type: ignore[arg-type]
    return f"{what} of step {shown['step']} (branch {shown['branch']} of the {shown['tool']} run {shown['run']})"


def outcome(answer: dict[str, Any], state: BranchState, original: Any) -> tuple[Any, str, Any]:
    """(generator, kind, value) from an outcome's JSON, by the snapshot rules and outcomes.py's checks;
    OutcomeRefused says what is wrong. What was decoded of a refused outcome is released (none of its
    cleanup runs), and the original generator is left as it is."""
    try:
        check_version(answer, "branchc_step", "a branch step's outcome")
    except SnapshotDataError as error:
        raise OutcomeRefused(error.problem) from None
    if answer.keys() != {"branchc_step", "kind", "graph"}:
        raise OutcomeRefused('it is not {"branchc_step": 2, "kind": ..., "graph": ...}')
    ctx = Context(state)
    try:
        roots = decode_graph(answer["graph"], lambda entry, child, path: ctx)
    except (SnapshotError, SnapshotDataError) as error:
        raise OutcomeRefused(f"its data cannot be read here: {error}") from None
    except Exception as error:  # what the decoder did not foresee is refused just the same
        raise OutcomeRefused(f"its data cannot be read here: {type(error).__name__}: {error}") from None
    kind = answer["kind"]
    try:
        if roots.keys() != {"gen", "out"}:
            raise OutcomeRefused('its graph has not exactly the roots "gen" and "out"')
        value = check_outcome(roots["gen"], kind, roots["out"], original, ctx)
    except OutcomeRefused:
        release_reachable(roots)  # none of the decoded run's cleanup runs here
        raise
    return roots["gen"], kind, value


def _request(generator: Any, ok: bool, value: Any, state: BranchState) -> bytes:
    """The step's body: the generator, what it is sent, and what its Context reads (not its budget)."""
    shipped = dataclasses.replace(state, tokens=TokenAccount(None), children=0)

    def context(item: Any, child: Any, path: Any) -> dict | None:
        if type(item) is Context:
            if item._branch is not state:
                raise NotSerializableError(str(path), "Context", "it is another branch's Context")
            return {"t": "ctx"}
        return None

    graph = encode_graph({"gen": generator, "send": [ok, value], "state": shipped}, context)
    text = json.dumps({"branchc_step": VERSION, "graph": graph}, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


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
