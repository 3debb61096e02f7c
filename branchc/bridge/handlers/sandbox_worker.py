"""The handler's side of the full-CPython engine (sandbox.py): one run of one handler script, then exit.

It runs as `python -I -S -B -c <this file's source> <limits as JSON>`, inside bubblewrap (or, in unsafe mode,
without it), so it may import only the standard library: nothing of branchc is reachable there. The protocol is
one JSON document per line: the request comes on fd 0, frames go out on fd 1 (`ready`, `call`, `done`), and
tool replies come back on fd 0. Both are moved to private descriptors before the script runs, with fds 0 and 1
pointing at /dev/null and `sys.stdout` / `sys.stderr` replaced by a bounded sink, so nothing the script prints
or writes can mix with the protocol. Everything here is a convenience for clear error messages; the boundary is
the sandbox and the rlimits, which the script cannot raise.
"""

from __future__ import annotations

import ast
import errno
import io
import json
import math
import os
import resource
import sys
import threading
import types

FILENAME = "<handler>"


class ToolError(Exception):
    """A tool call the server refused or that failed: the message says why."""


class _OutputLimit(Exception):
    """The script printed more than its output cap."""


class _Sink(io.TextIOBase):
    """Where the script's prints go: counted and dropped, with a cap (prints are not part of the result)."""

    def __init__(self, state: dict) -> None:
        self._state = state

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        state = self._state
        state["printed"] += len(text)
        if state["printed"] > state["cap"]:
            state["over"] = True
            raise _OutputLimit(f"the handler printed more than its output cap ({state['cap']} bytes)")
        return len(text)


def _set_limits(limits: dict) -> None:
    """Hard and soft limits alike, so the script cannot raise them again (that needs CAP_SYS_RESOURCE)."""
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"]))
    nproc = limits["processes"]
    if limits.get("count_user_processes"):
        # Unsafe mode: RLIMIT_NPROC counts every process of this user on the host, so allow that many more.
        uid = os.getuid()
        mine = 0
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    mine += os.stat(f"/proc/{entry}").st_uid == uid
                except OSError:
                    pass
        nproc += mine
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    memory = limits["memory_bytes"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def _check_json(value: object, depth: int = 0) -> str | None:
    """Why `value` is not JSON data, or None."""
    if depth > 100:
        return "it is nested more than 100 levels deep"
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number"
    if isinstance(value, list | tuple):
        for item in value:
            why = _check_json(item, depth + 1)
            if why:
                return why
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"the key {key!r} is not a string"
            why = _check_json(item, depth + 1)
            if why:
                return why
        return None
    return f"a {type(value).__name__} is not JSON data"


def _line_of(exc: BaseException) -> int | None:
    """The deepest line of the handler's own code in the traceback."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(exc: BaseException, limits: dict, state: dict) -> dict:
    """An error frame for an exception that ended the script."""
    line = _line_of(exc)
    if state["over"] or isinstance(exc, _OutputLimit):
        return {"kind": "limit", "type": "OutputLimit", "message": str(exc), "line": line}
    if isinstance(exc, MemoryError):
        message = f"the handler passed its memory limit ({limits['memory_bytes'] >> 20} MB)"
        return {"kind": "limit", "type": "MemoryError", "message": message, "line": line}
    if isinstance(exc, RecursionError):
        message = f"the handler passed its recursion limit ({limits['recursion']} calls deep)"
        return {"kind": "limit", "type": "RecursionError", "message": message, "line": line}
    if (isinstance(exc, OSError) and exc.errno == errno.EAGAIN) or (
        isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)
    ):
        message = (
            f"the handler passed its process limit (it may not start processes; at most {limits['processes']} "
            f"threads): {exc}"
        )
        return {"kind": "limit", "type": type(exc).__name__, "message": message, "line": line}
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        message = f"the handler passed its file size limit ({limits['file_bytes']} bytes)"
        return {"kind": "limit", "type": "OSError", "message": message, "line": line}
    text = str(exc)
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, PermissionError) and exc.errno == errno.EPERM and exc.filename is None:
        message += " (the sandbox refuses this system call: no shared memory, new processes or administration)"
    return {"kind": "runtime", "type": type(exc).__name__, "message": message, "line": line}


def main() -> None:
    limits = json.loads(sys.argv[1])
    _set_limits(limits)
    me = os.getpid()
    # The protocol moves to private descriptors; 0 and 1 become /dev/null for whatever the script does.
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    lock = threading.Lock()

    def send(frame: dict) -> None:
        if os.getpid() != me:  # a process the script forked never speaks the protocol
            os._exit(1)
        proto_out.write(json.dumps(frame).encode() + b"\n")
        proto_out.flush()

    def finish(frame: dict) -> None:
        send({"op": "done", **frame})
        os._exit(0)  # no interpreter teardown: the parent is waiting

    request = json.loads(proto_in.readline())
    state = {"printed": 0, "cap": limits["output_bytes"], "over": False}
    sys.stdout = sys.stderr = _Sink(state)
    # A real module, so what looks its module up (dataclasses, pickle, typing) finds it.
    module = types.ModuleType("__handler__")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    namespace.update(tool_output=request["tool_output"], arguments=request["arguments"])
    if request.get("tools") is not None:
        namespace["tools"], upstream = _make_tools(request["tools"], send, proto_in, lock)
        if upstream is not None:
            namespace["upstream"] = upstream

    try:
        tree = ast.parse(request["script"], FILENAME)
        if not tree.body or not isinstance(tree.body[-1], ast.Expr):
            finish({"error": {"kind": "result", "type": "NoResult", "line": None, "message": _NO_RESULT}})
        body = compile(ast.Module(tree.body[:-1], type_ignores=[]), FILENAME, "exec")
        last = compile(ast.Expression(tree.body[-1].value), FILENAME, "eval")
    except SyntaxError as exc:
        message = f"SyntaxError: {exc.msg}"
        finish({"error": {"kind": "syntax", "type": "SyntaxError", "message": message, "line": exc.lineno}})
    except (MemoryError, RecursionError) as exc:
        finish({"error": {"kind": "syntax", "type": type(exc).__name__, "line": None, "message": _TOO_COMPLEX}})

    sys.setrecursionlimit(len(_stack()) + limits["recursion"] + 20)
    send({"op": "ready"})
    try:
        exec(body, namespace)
        result = eval(last, namespace)
    except BaseException as exc:
        if os.getpid() != me:
            os._exit(1)
        finish({"error": _describe(exc, limits, state)})
    if os.getpid() != me:
        os._exit(0)
    sys.setrecursionlimit(1000)
    if state["over"]:
        message = f"the handler printed more than its output cap ({state['cap']} bytes)"
        finish({"error": {"kind": "limit", "type": "OutputLimit", "message": message, "line": None}})
    why = _check_json(result)
    if why is None:
        try:
            encoded = json.dumps(result, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as exc:
            why = str(exc)
    if why is not None:
        message = f"the script's last expression is not JSON data: {why}"
        finish({"error": {"kind": "result", "type": "ResultError", "message": message, "line": None}})
    if len(encoded) > limits["output_bytes"]:
        message = f"the result is {len(encoded)} bytes of JSON, over the output cap ({limits['output_bytes']} bytes)"
        finish({"error": {"kind": "limit", "type": "OutputLimit", "message": message, "line": None}})
    proto_out.write(b'{"op": "done", "ok": true, "result": ' + encoded.encode() + b"}\n")
    proto_out.flush()
    os._exit(0)


_NO_RESULT = "the script's last statement must be an expression: its value is the result"
_TOO_COMPLEX = "the script is too deeply nested to compile"


def _stack() -> list:
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _make_tools(wrappers: str, send, proto_in, lock) -> tuple[object, object | None]:
    """The `tools` namespace, and `upstream` when the server has upstream servers: the typed wrappers
    (chaining.py renders them from the tools' input schemas), each ending in `_call(name, arguments)`, a `call`
    frame answered by one reply line."""

    def call(name: str, arguments: dict) -> object:
        with lock:  # one call at a time on the pipe; the server counts them and ends a run past its limit
            send({"op": "call", "name": name, "arguments": arguments})
            reply = proto_in.readline()
        if not reply:
            os._exit(1)  # the server went away
        answer = json.loads(reply)
        if "error" in answer:
            raise ToolError(answer["error"])
        return answer["result"]

    unset = object()
    scope = {
        "__name__": "tools",
        "_call": call,
        "_UNSET": unset,
        "_given": lambda given: {key: value for key, value in given.items() if value is not unset},
        "Any": object,  # only ever an annotation
    }
    exec(compile(wrappers, "<tools>", "exec"), scope)
    tools = scope["tools"]
    tools.Error = ToolError
    upstream = scope.get("upstream")
    if upstream is not None:
        upstream.Error = ToolError
    return tools, upstream


if __name__ == "__main__":
    main()
