"""The default result-handler engine: Monty, an interpreter for a subset of Python written in Rust.

Why Monty: a handler is code a model wrote, so it needs a real boundary, not Python-level restrictions
(exec with trimmed builtins, audit hooks and RestrictedPython are all escapable). Monty runs the script in a
separate `monty` worker process whose interpreter has no filesystem, network, environment or subprocesses
unless the host grants them, with its own limits on time, heap memory and recursion; a worker that dies is
replaced by the pool. This engine grants nothing: every file, environment or OS call is refused.

One run: check out a fresh session from the warm pool (a worker of its own, no state from earlier runs),
feed the prelude (a `print` that only counts, and the result check), then the script. `tool_output`,
`arguments` and `tools` are its inputs. The script's last expression is wrapped in place (its lines keep
their numbers) in a call of the check, so the result is tested for JSON data inside the sandbox, where a function or an
iterator is still one (Monty hands such values to the host as their repr, a str). Each `tools.NAME(...)`
call suspends the sandbox; the engine awaits the caller's `call` and resumes it with the result, or with
the error as a `RuntimeError` the script may catch.

It needs the pydantic-monty package (`pip install 'branchc[handlers]'`): without it, importing this module
is a MissingExtraError saying so.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import re
import sys
from typing import Any

import anyio

from ...extras import missing_extra

try:
    import pydantic_monty as monty
except ImportError as error:
    raise missing_extra("handlers", error) from None

from ...runtime.jsondata import json_data_problems
from .chaining import python_name
from .engine import (
    HandlerError,
    HandlerLimitError,
    HandlerResultError,
    HandlerRuntimeError,
    HandlerSyntaxError,
    HandlerUnsupportedError,
    Limits,
    ToolCaller,
    json_size_floor,
)

__all__ = ["MAX_SCRIPT_CHARS", "MontyEngine"]

#: The longest script the engine reads (the host parses it once to find the last expression).
MAX_SCRIPT_CHARS = 1 << 20

#: Seconds past `limits.seconds` before the wall clock stops a run: Monty's own clock counts only the time
#: the script computes, so a run waiting on slow tool calls is stopped by this one.
WALL_GRACE = 0.5

_MONTY = "Monty (the default handler engine, a subset of Python)"
_HINT = "rewrite it without that, or ask for the full-CPython engine (sandbox)"
_KINDS = "JSON data is None, bool, int, float, str, list, and dict with str keys"

_PROBE = "__branchc_probe"
_SCRIPT_FEED = "<python-input-1>"  # the session's second feed: the prelude is the first

# Defined in every session before the script. `print` counts what would be printed and drops it (the worker's
# stdout is nobody's: under stdio it would be the MCP transport); past the output limit it raises, so a print
# flood stops at once instead of streaming to the time limit. `__branchc_probe` is the result check: json.dumps
# (Rust, fast) refuses functions, iterators, sets, bytes, NaN and cycles; only then does `__branchc_where`
# walk the value to name the first bad one. Tuples and non-str keys pass json.dumps: the host walk catches them.
_PRELUDE = """\
import json as __branchc_json
import math as __branchc_math

__branchc_printed = 0


def print(*args, sep=' ', end='\\n', file=None, flush=False):
    global __branchc_printed
    text = (' ' if sep is None else sep).join([str(arg) for arg in args]) + ('\\n' if end is None else end)
    __branchc_printed += len(text.encode())
    if __branchc_printed > __branchc_output:
        raise MemoryError(f'branchc: printed more than {__branchc_output} bytes (output limit)')


def __branchc_where(value):
    stack = [(value, 'result')]
    seen = set()
    while stack:
        item, path = stack.pop()
        kind = type(item)
        if item is None or kind is bool or kind is int or kind is str:
            continue
        if kind is float:
            if not __branchc_math.isfinite(item):
                return f'{path}: {item!r} is not JSON data (JSON has no NaN or infinity)'
            continue
        if kind is list:
            if id(item) not in seen:
                seen.add(id(item))
                for index in range(len(item) - 1, -1, -1):
                    stack.append((item[index], f'{path}[{index}]'))
            continue
        if kind is dict:
            if id(item) not in seen:
                seen.add(id(item))
                entries = list(item.items())
                for key, _ in entries:
                    if type(key) is not str:
                        return f'{path}: key {key!r} is a {type(key).__name__}; JSON object keys are str'
                for key, child in reversed(entries):
                    stack.append((child, f'{path}[{key!r}]'))
            continue
        return f'{path}: {kind.__name__} is not JSON data'
    return None


def __branchc_probe(value):
    try:
        size = len(__branchc_json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(',', ':')).encode())
    except (TypeError, ValueError) as error:
        return (None, __branchc_where(value) or f'result: not JSON data ({type(error).__name__}: {error})', -1)
    if size > __branchc_output:
        return (None, None, size)
    return (value, None, size)
"""

# Monty's messages are read to say what went wrong; a message may be the script's own (`raise
# NotImplementedError(...)`), so each is read in one pass: plain string scanning, or a regex that cannot backtrack.
_SUSPENSIONS = re.compile(r"suspension limit \d+ exceeded")  # a literal, then digits: no overlap, no backtracking
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")  # the name's run of [\w.] cannot hold the literal's spaces
_SHOWN_MESSAGE = 2000  # characters of an exception's message in the error the calling model reads


def _clip(message: str) -> str:
    """A message as shown to the calling model: at most _SHOWN_MESSAGE characters of it."""
    if len(message) <= _SHOWN_MESSAGE:
        return message
    return f"{message[:_SHOWN_MESSAGE]}... ({len(message):,} characters in all)"


def _last_line(message: str) -> str:
    """The text a regex `...$` (no MULTILINE) ends on: the last line, before a final newline if there is one."""
    body = message[:-1] if message.endswith("\n") else message
    return body[body.rfind("\n") + 1 :]


def _unsupported(message: str) -> str | None:
    """What Monty says it does not support: the rest of the message's last line after its first
    "does not yet support " (as the regex `does not yet support (?P<what>.+)$` found it, without its
    quadratic time on a message of many such phrases and a last line without one)."""
    line = _last_line(message)
    found = line.find(_NOT_YET)
    what = line[found + len(_NOT_YET) :] if found >= 0 else ""
    return what or None


_NOT_YET = "does not yet support "


def _memory_cap(message: str) -> int | None:
    """The cap in a memory-limit message ending `> N bytes` (N a run of decimal digits), else None."""
    line = _last_line(message)
    if not line.endswith(" bytes"):
        return None
    head = line[: -len(" bytes")]
    digits = len(head) - len(head.rstrip("0123456789"))
    if not digits or digits > 20 or not head[: len(head) - digits].endswith("> "):
        return None
    return int(head[len(head) - digits :])


class _Tools:
    """What `tools` is inside the sandbox: a host object with no attributes; its method calls reach the engine."""


_Tools.__name__ = _Tools.__qualname__ = "tools"


class _Upstream:
    """What `upstream` is inside the sandbox: a host object whose attributes are the upstream servers' namespaces."""


_Upstream.__name__ = _Upstream.__qualname__ = "upstream"


class MontyEngine:
    """Runs handler scripts in a pool of warm Monty workers (the `ResultEngine` contract of engine.py).

    The pool starts on the first run (or `start()`), holds `min_processes` idle workers, runs at most
    `max_processes` handlers at once (later ones wait for a worker, up to `checkout_timeout` seconds), and
    recycles a worker after `max_checkouts_per_worker` runs. `aclose()` stops it."""

    name = "monty"

    def __init__(
        self,
        *,
        min_processes: int = 1,
        max_processes: int | None = None,
        checkout_timeout: float | None = 30.0,
        max_checkouts_per_worker: int | None = 1000,
    ) -> None:
        self._options = {
            "min_processes": min_processes,
            "max_processes": max_processes,
            "checkout_timeout": checkout_timeout,
            "max_checkouts_per_worker": max_checkouts_per_worker,
        }
        self._pool: monty.AsyncMonty | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def start(self) -> None:
        """Spawn the workers now (else the first run does), so no handler pays for the start."""
        await self._started()

    async def aclose(self) -> None:
        """Stop the workers; a later run is refused."""
        self._closed = True
        async with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.__aexit__(None, None, None)
                # pydantic-monty 1.4 finishes closing on a thread of its own after __aexit__ returns; a process
                # that exits at once can abort in interpreter shutdown (seen 1 exit in 6): give it a moment
                await anyio.sleep(0.05)

    async def __aenter__(self) -> MontyEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _started(self) -> monty.AsyncMonty:
        if self._closed:
            raise HandlerError("the Monty engine is closed")
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is None:
                pool = monty.AsyncMonty(**self._options)
                await pool.__aenter__()
                self._pool = pool
            return self._pool

    async def run(
        self,
        script: str,
        tool_output: Any,
        arguments: dict[str, Any],
        *,
        limits: Limits,
        tools: dict[str, dict[str, Any]] | None = None,
        call: ToolCaller | None = None,
    ) -> Any:
        """The script's result (JSON data), or a HandlerError saying why not."""
        source, probed = _prepare(script)
        lines = script.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        try:
            pool = await self._started()
        except (OSError, monty.MontyError) as error:  # no `monty` binary, or it cannot run here
            raise HandlerError(f"the Monty engine could not start its workers: {error}") from None
        bridge = _ToolBridge(tools, call, limits) if tools is not None and call is not None else None
        inputs: dict[str, Any] = {"tool_output": tool_output, "arguments": arguments}
        if bridge is not None:
            inputs["tools"] = bridge.instance
            if bridge.upstream is not None:
                inputs["upstream"] = bridge.upstream
        try:
            output = await self._run(pool, source, inputs, limits, bridge)
        except monty.MontyError as error:
            raise _translate(error, limits, lines, valid=probed) from None
        return _checked(output, probed, limits)

    async def _run(
        self,
        pool: monty.AsyncMonty,
        source: str,
        inputs: dict[str, Any],
        limits: Limits,
        bridge: _ToolBridge | None,
    ) -> Any:
        for attempt in range(3):
            session = pool.checkout(script_name="handler.py", limits=_resource_limits(limits), os_policy=_OS_POLICY)
            async with contextlib.AsyncExitStack() as stack:
                try:
                    await stack.enter_async_context(session)
                except TimeoutError as error:  # the pool's checkout_timeout: every worker is busy
                    raise HandlerError(f"no Monty worker became free in time ({error}); try again") from None
                printed = monty.CollectString(max_bytes=limits.output_bytes)  # what bypasses print(): sys.stdout
                try:
                    await session.feed_run(
                        _PRELUDE, inputs={"__branchc_output": limits.output_bytes}, print_callback=printed
                    )
                except monty.MontyCrashedError:
                    if attempt == 2:
                        raise
                    continue  # a worker that died idle (killed, out of memory): no script ran yet, take another
                # the clock starts once a worker is ours: waiting for a free one is not the script's time
                with anyio.move_on_after(limits.seconds + WALL_GRACE):
                    return await self._feed(session, source, inputs, printed, bridge)
                raise HandlerLimitError(_time_message(limits))
        raise AssertionError("unreachable")

    async def _feed(
        self,
        session: monty.AsyncMontySession,
        source: str,
        inputs: dict[str, Any],
        printed: monty.CollectString,
        bridge: _ToolBridge | None,
    ) -> Any:
        snapshot = await session.feed_start(source, inputs=inputs, print_callback=printed)
        while not isinstance(snapshot, monty.MontyComplete):
            snapshot = await _answer(snapshot, bridge)
        return snapshot.output


_OS_POLICY: monty.OSPolicy = {"sleep": "zero", "process_time": "zero"}  # a sleep would hide from the time limit


def _resource_limits(limits: Limits) -> monty.ResourceLimits:
    return {
        "max_feed_duration_secs": limits.seconds,
        "max_memory": limits.memory_mb << 20,
        "max_recursion_depth": limits.recursion,
        # every call out of the sandbox counts: tool calls, refused OS calls, undefined names
        "max_suspensions": 2 * limits.tool_calls + 100,
    }


class _ToolBridge:
    """`tools` (and `upstream`, with the tools of upstream servers, named `SERVER:TOOL`) for one run: which Python
    names are which tools, and how many calls were made. Each namespace is a host object whose method calls and
    attribute reads come back here by the object's id."""

    def __init__(self, tools: dict[str, dict[str, Any]], call: ToolCaller, limits: Limits) -> None:
        self.instance = monty.ClassInstance(_Tools())
        self.call = call
        self.limit = limits.tool_calls
        self.max_bytes = limits.output_bytes
        self.made = 0
        self.spaces: dict[int, tuple[str, dict[str, str]]] = {}  # host object id -> (its prefix, python -> tool)
        self.params: dict[str, dict[str, str]] = {}  # tool -> python keyword -> its property
        self.names = self._space(
            self.instance, "tools", {name: schema for name, schema in tools.items() if ":" not in name}
        )
        self.upstream: Any = None
        self.servers: dict[str, Any] = {}  # python name of a server -> its host object
        upstream = {name: schema for name, schema in tools.items() if ":" in name}
        if upstream:
            self.upstream = monty.ClassInstance(_Upstream())
            self.spaces[self.upstream.id] = ("upstream", {})
            by_server: dict[str, dict[str, dict[str, Any]]] = {}
            for name, schema in upstream.items():
                by_server.setdefault(name.split(":", 1)[0], {})[name] = schema
            for server, named in sorted(by_server.items()):
                py = python_name(server)
                if py in self.servers:
                    continue
                instance = monty.ClassInstance(type(f"upstream.{py}", (), {})())
                self.servers[py] = instance
                self._space(instance, f"upstream.{py}", named, strip=True)

    def _space(
        self, instance: Any, prefix: str, tools: dict[str, dict[str, Any]], *, strip: bool = False
    ) -> dict[str, str]:
        names: dict[str, str] = {}
        for name in sorted(tools):
            py = python_name(name.split(":", 1)[1] if strip else name)
            if py in names:
                continue  # two tools with one Python name: the first (sorted) keeps it
            names[py] = name
            properties = tools[name].get("properties") or {}
            self.params[name] = {python_name(key): key for key in properties}
        self.spaces[instance.id] = (prefix, names)
        return names

    async def lookup(self, snapshot: monty.AsyncNameLookupSnapshot) -> monty.AsyncSnapshot:
        """`tools.NAME` read without a call (`f = tools.git_log`): a host function whose calls come back here by
        its name; `upstream.SERVER`: that server's namespace; anything else is an AttributeError."""
        py = snapshot.variable_name
        if self.upstream is not None and snapshot.object_id == self.upstream.id:
            server = self.servers.get(py)
            return await snapshot.resume(value=server) if server is not None else await snapshot.resume()
        prefix, names = self.spaces[snapshot.object_id]
        if py not in names:
            return await snapshot.resume()

        def tool(**arguments: Any) -> Any:  # never runs: the engine answers each call of it (`answer`)
            raise AssertionError("a tool function runs through MontyEngine")

        tool.__name__ = tool.__qualname__ = f"{prefix}.{py}"
        return await snapshot.resume(value=tool)

    def space_of(self, name: str) -> int | None:
        """The host object whose tool a function named `PREFIX.NAME` (read off it earlier) is."""
        prefix = name.rsplit(".", 1)[0]
        return next((ident for ident, (own, _) in self.spaces.items() if own == prefix), None)

    async def answer(self, snapshot: monty.AsyncFunctionSnapshot, space: int, py: str) -> monty.AsyncSnapshot:
        prefix, names = self.spaces[space]
        if py not in names:
            known = ", ".join(f"{prefix}.{n}" for n in sorted(names)) or "none"
            error: BaseException = AttributeError(f"{prefix} has no tool {py!r} (the tools are: {known})")
            return await snapshot.resume({"exception": error})
        if snapshot.args:
            error = TypeError(f"{prefix}.{py}() takes keyword arguments only: {prefix}.{py}(name=value, ...)")
            return await snapshot.resume({"exception": error})
        self.made += 1
        if self.made > self.limit:
            raise HandlerLimitError(f"the handler called more than {self.limit} tools (tool call limit)")
        keys = self.params[names[py]]
        arguments = {keys.get(key, key): value for key, value in snapshot.kwargs.items()}
        if json_size_floor(arguments, self.max_bytes) > self.max_bytes:  # checked here: the sandbox is not believed
            error = ValueError(f"{prefix}.{py}(): the arguments are more than {self.max_bytes} bytes of JSON")
            return await snapshot.resume({"exception": error})
        try:
            result = await self.call(names[py], arguments)
        except HandlerError as failed:
            return await snapshot.resume({"exception": RuntimeError(str(failed))})
        return await snapshot.resume({"return_value": result})


async def _answer(snapshot: Any, bridge: _ToolBridge | None) -> Any:
    """Answer one suspension of the sandbox: a tool call, or a refusal of everything else."""
    if isinstance(snapshot, monty.AsyncFunctionSnapshot):
        if snapshot.is_os_function:
            return await snapshot.resume_not_handled()  # Monty's refusal: PermissionError, unsupported, ...
        name = str(snapshot.function_name)
        if bridge is not None and snapshot.object_id in bridge.spaces:
            return await bridge.answer(snapshot, snapshot.object_id, name)  # tools.NAME(...), upstream.S.NAME(...)
        if bridge is not None and snapshot.object_id is None and (space := bridge.space_of(name)) is not None:
            return await bridge.answer(snapshot, space, name.rsplit(".", 1)[1])  # f = tools.NAME; f(...)
        return await snapshot.resume({"exception": NameError(f"name {name!r} is not defined")})
    if isinstance(snapshot, monty.AsyncNameLookupSnapshot):
        if bridge is not None and snapshot.object_id in bridge.spaces:
            return await bridge.lookup(snapshot)
        return await snapshot.resume()  # an undefined name: NameError
    raise HandlerError("the handler waits on something that never completes (Monty: awaiting an external future)")


def _prepare(script: str) -> tuple[str, bool]:
    """The script with its last expression wrapped, on the same line, in the in-sandbox result check; and
    whether it is wrapped. A script CPython cannot parse runs as given: Monty reports its errors."""
    if not isinstance(script, str):
        raise HandlerError(f"the script is a {type(script).__name__}, not a str")
    if len(script) > MAX_SCRIPT_CHARS:
        raise HandlerLimitError(f"the script is {len(script)} characters, more than {MAX_SCRIPT_CHARS} (script limit)")
    text = script.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return text, False
    if not tree.body:
        raise HandlerResultError("the script is empty: its last expression is the result")
    last = tree.body[-1]
    if not isinstance(last, ast.Expr) or last.end_lineno is None or last.end_col_offset is None:
        kind = type(last).__name__.lower()
        raise HandlerResultError(
            f"line {last.lineno}: the script must end with an expression, whose value is the result"
            f" (it ends with a statement: {kind}); add a last line such as `summary`"
        )
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(lineno: int, col: int) -> int:  # ast columns count UTF-8 bytes
        return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    begin, end = offset(last.lineno, last.col_offset), offset(last.end_lineno, last.end_col_offset)
    return f"{text[:begin]}{_PROBE}(({text[begin:end]})){text[end:]}", True


def _checked(output: Any, probed: bool, limits: Limits) -> Any:
    """The result once it is known to be JSON data within the output limit. The in-sandbox check (the probe)
    only gives a clear message early: the script can redefine it, so the host measures the value itself,
    first with a walk that stops past the cap (json_size_floor), then exactly, before it is encoded or returned."""
    if probed:
        if not (isinstance(output, tuple) and len(output) == 3):
            raise HandlerResultError("the result could not be checked (the script replaced the engine's check)")
        value, problem, size = output
        if problem is not None:
            raise HandlerResultError(f"{_clip(str(problem))}; {_KINDS}")
        if isinstance(size, int) and size > limits.output_bytes:
            raise HandlerLimitError(_too_large(size, limits))
    else:
        value = output
    if json_size_floor(value, limits.output_bytes) > limits.output_bytes:
        raise HandlerLimitError(_too_large(None, limits))
    try:
        listed, total = json_data_problems(value, "result")
    except RecursionError:
        raise HandlerResultError("the result is nested too deeply to check (or to encode as JSON)") from None
    if total:
        more = f" (and {total - 1} more)" if total > 1 else ""
        raise HandlerResultError(f"{_clip(listed[0])}{more}; {_KINDS}")
    try:
        size = len(_dumps(value))
    except (ValueError, RecursionError):  # an int past CPython's int-string limit, or a nesting json refuses
        raise HandlerResultError(
            "the result cannot be encoded as JSON (an integer too long, or nested too deeply)"
        ) from None
    if size > limits.output_bytes:
        raise HandlerLimitError(_too_large(size, limits))
    return value


def _too_large(size: int | None, limits: Limits) -> str:
    cap = limits.output_bytes
    how = f"{size} bytes of JSON, more than {cap}" if size is not None else f"more than {cap} bytes of JSON"
    return f"the result is {how} (output limit): return a smaller summary"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _time_message(limits: Limits) -> str:
    return f"the handler ran longer than {limits.seconds:g} s (time limit)"


def _where(error: monty.MontyError, lines: list[str]) -> tuple[int | None, str]:
    """The line of the script where `error` happened (its innermost frame in the script), and its text as
    the script has it (not as wrapped by the result check)."""
    frames = error.traceback() if isinstance(error, (monty.MontyRuntimeError, monty.MontySyntaxError)) else []
    mine = [frame for frame in frames if frame.filename == _SCRIPT_FEED]
    if not mine:
        return None, ""
    line = mine[-1].line
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return line, text[:200]


def _at(line: int | None, text: str) -> str:
    if line is None:
        return ""
    return f" (line {line}: {text})" if text else f" (line {line})"


def _translate(error: monty.MontyError, limits: Limits, lines: list[str], *, valid: bool) -> HandlerError:
    """A Monty error as the HandlerError the calling model reads; `valid`: CPython parsed the script, so a
    syntax error from Monty is a construct Monty lacks (e.g. `@=`), not a mistake in the script."""
    if isinstance(error, monty.MontyCrashedError):
        if error.timed_out:
            return HandlerLimitError(_time_message(limits))
        return HandlerError(f"the Monty worker running the handler died ({error}); it has been replaced, try again")
    if isinstance(error, monty.MontySyntaxError):
        line, text = _where(error, lines)
        if valid:
            where = f"line {line}: " if line is not None else ""
            return HandlerUnsupportedError(f"{where}{_MONTY} cannot parse this valid Python ({error}): {_HINT}", line)
        return HandlerSyntaxError(f"invalid Python: {error}{_at(line, text)}", line)
    if isinstance(error, monty.MontyConversionError):
        return HandlerError(f"a value could not cross into the Monty sandbox: {error}")
    if not isinstance(error, monty.MontyRuntimeError):
        return HandlerError(f"Monty failed: {error}")
    inner = error.exception()
    kind, message = type(inner).__name__, str(inner)
    line, text = _where(error, lines)
    if kind == "NotImplementedError" and (what := _unsupported(message)) is not None:
        where = f"line {line}: " if line is not None else ""
        return HandlerUnsupportedError(f"{where}{_MONTY} does not support {what}: {_HINT}", line)
    if kind == "TimeoutError" and "time limit exceeded" in message:
        return HandlerLimitError(_time_message(limits))
    if kind == "MemoryError" and message.startswith("branchc: printed"):
        return HandlerLimitError(f"{_clip(message[len('branchc: ') :])}{_at(line, text)}")
    if kind == "MemoryError" and "memory limit exceeded" in message:
        cap = _memory_cap(message)
        if cap == limits.output_bytes and limits.output_bytes != limits.memory_mb << 20:
            return HandlerLimitError(f"the handler printed more than {limits.output_bytes} bytes (output limit)")
        return HandlerLimitError(
            f"the handler used more than {limits.memory_mb} MB of memory (memory limit){_at(line, text)}"
        )
    if kind == "RecursionError" and "maximum recursion depth" in message:
        return HandlerLimitError(
            f"the handler recursed deeper than {limits.recursion} calls (recursion limit){_at(line, text)}"
        )
    if kind == "RuntimeError" and _SUSPENSIONS.search(message):
        return HandlerLimitError(
            f"the handler called out of the sandbox (tools, files, undefined names) too many times{_at(line, text)}"
        )
    if kind == "ModuleNotFoundError" and (module := _NO_MODULE.search(message)):
        if module[1].split(".")[0] in sys.stdlib_module_names:
            message += " (Monty has a part of the standard library: json, re, math, collections, itertools, ...)"
    shown = f"{kind}: {_clip(message)}" if message else kind
    return HandlerRuntimeError(f"{shown}{_at(line, text)}")
