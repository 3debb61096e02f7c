"""The full-CPython handler engine (sandbox.py): containment under bubblewrap, limits, protocol, tool chaining.

Imports of os, subprocess, socket and ctypes succeed in full CPython; what is tested is that they reach nothing.
Each test checks that the engine still answers afterwards (the `engine` fixture).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import statistics
import struct
import time
from pathlib import Path

import anyio
import pytest
from _handler_support import SEED_HANDLER as DIFF_HANDLER
from _system import needs_bubblewrap

from branchc.bridge.handlers import sandbox
from branchc.bridge.handlers.engine import (
    HandlerError,
    HandlerLimitError,
    HandlerResultError,
    HandlerRuntimeError,
    HandlerSyntaxError,
    Limits,
)
from branchc.bridge.handlers.sandbox import SandboxEngine, SandboxUnavailableError, bubblewrap_available

pytestmark = pytest.mark.anyio
needs_sandbox = needs_bubblewrap()  # the sandboxed engine's tests; the unsafe mode and the refusal run anywhere

LIMITS = Limits(seconds=3.0)
HERE = Path(__file__).resolve()
PROJECT = HERE.parent.parent


@pytest.fixture
async def engine():
    """A sandboxed engine that must still answer a trivial handler after the test."""
    engine = SandboxEngine()
    yield engine
    assert await engine.run("1 + 1", None, {}, limits=LIMITS) == 2
    await engine.aclose()


async def run(engine: SandboxEngine, script: str, tool_output=None, arguments=None, **kwargs):
    return await engine.run(script, tool_output, arguments or {}, limits=kwargs.pop("limits", LIMITS), **kwargs)


def _descendants() -> list[int]:
    """Processes below this one (the sandboxes' bwrap and everything in them, as the host sees them)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


# -- containment -------------------------------------------------------------------------------------------


@needs_sandbox
async def test_host_files_are_out_of_reach(engine):
    script = f"""
import os
reached = []
for path in ["/etc/passwd", "/etc/shadow", "/etc/hostname", {str(HERE)!r}, {str(PROJECT / "pyproject.toml")!r},
             {os.getcwd()!r}, {str(PROJECT)!r}, "/home", "/var", "/srv"]:
    try:
        if os.path.isdir(path):
            os.listdir(path) and reached.append(path)
        else:
            open(path, "rb").read(1)
            reached.append(path)
    except OSError:
        pass
reached, sorted(os.listdir("/")), os.getcwd()
"""
    reached, root, cwd = await run(engine, script)
    assert reached == []
    assert cwd == sandbox.WORKDIR
    assert set(root) <= {"usr", "lib", "lib64", "lib32", "libx32", "proc", "dev", "tmp", *Path(sys_prefix()).parts}


def sys_prefix() -> str:
    return sandbox._interpreter()[0]


@needs_sandbox
async def test_server_environment_is_invisible(engine, monkeypatch):
    secret = f"branchc-secret-{os.getpid()}-{time.time_ns()}"
    monkeypatch.setenv("BRANCHC_SANDBOX_SECRET", secret)
    script = """
import os
seen = [repr(dict(os.environ))]
for entry in os.listdir("/proc"):
    if entry.isdigit() or entry == "self":
        try:
            seen.append(open(f"/proc/{entry}/environ", "rb").read().decode(errors="replace"))
        except OSError:
            pass
for pid in (os.getppid(), 1):
    try:
        seen.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
    except OSError:
        pass
"\\n".join(seen), os.getppid(), sorted(e for e in os.listdir("/proc") if e.isdigit())
"""
    seen, ppid, pids = await run(engine, script)
    assert secret not in seen
    assert "BRANCHC_SANDBOX_SECRET" not in seen
    assert ppid == 1 and os.getpid() not in map(int, pids)  # its own PID namespace: the server is not there


@needs_sandbox
async def test_writes_stay_inside_the_scratch_folder(engine, tmp_path):
    name = f"branchc-sandbox-{os.getpid()}-{time.time_ns()}"
    host_target = tmp_path / "escaped.txt"
    stdlib = os.path.dirname(os.__file__)
    script = f"""
import os
open("/tmp/{name}", "w").write("inside")
open("here.txt", "w").write("x")
inside = open("/tmp/{name}").read(), sorted(os.listdir("."))
refused = []
for path in [{str(host_target)!r}, {os.path.join(stdlib, name)!r}, "/{name}", "/usr/lib/{name}", "/dev/shm/../{name}"]:
    try:
        open(path, "w").write("escaped")
    except OSError as exc:
        refused.append(type(exc).__name__)
inside, refused
"""
    inside, refused = await run(engine, script)
    assert inside == ["inside", sorted([name, "here.txt"])]
    assert len(refused) == 5
    assert not Path("/tmp", name).exists()
    assert not host_target.exists()
    assert not Path(stdlib, name).exists()


@needs_sandbox
async def test_no_network_even_to_localhost(engine):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        script = f"""
import socket
outcome = []
for family, address in [(socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_INET, ("10.0.0.1", 80))]:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(address)
        outcome.append("connected")
    except OSError as exc:
        outcome.append(type(exc).__name__)
    finally:
        s.close()
outcome, sorted(name for _, name in socket.if_nameindex())
"""
        outcome, interfaces = await run(engine, script)
        assert "connected" not in outcome
        assert interfaces == ["lo"]
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever arrived
    finally:
        listener.close()


@needs_sandbox
async def test_ctypes_cannot_lift_the_limits(engine):
    script = """
import ctypes, resource
libc = ctypes.CDLL(None, use_errno=True)
class RLimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
raise_as = libc.setrlimit(resource.RLIMIT_AS, ctypes.byref(RLimit(1 << 40, 1 << 40)))
raise_nproc = libc.setrlimit(resource.RLIMIT_NPROC, ctypes.byref(RLimit(1 << 20, 1 << 20)))
fork = libc.fork()
unshare = libc.unshare(0x10000000)  # CLONE_NEWUSER
setuid = libc.setuid(0)
[raise_as, raise_nproc, fork, unshare, setuid, resource.getrlimit(resource.RLIMIT_AS)[1]]
"""
    *calls, memory = await run(engine, script)
    assert calls == [-1, -1, -1, -1, -1]
    assert memory == LIMITS.memory_mb << 20


@needs_sandbox
async def test_fork_bomb_is_contained_and_neighbours_still_run(engine):
    bomb = "import os\nwhile True:\n    os.fork()\nNone"
    results: dict[str, object] = {}

    async def one(key: str, script: str) -> None:
        try:
            results[key] = await run(engine, script)
        except HandlerError as exc:
            results[key] = exc

    before = set(_descendants())  # earlier tests' children (a pool, a server) are not the bomb's
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(one, "bomb", bomb)
        for index in range(3):
            group.start_soon(one, f"n{index}", f"sum(range({index} * 10))")
    assert time.monotonic() - started < LIMITS.seconds + 2
    assert isinstance(results["bomb"], HandlerLimitError)
    assert "process" in str(results["bomb"])
    assert [results[f"n{index}"] for index in range(3)] == [0, 45, 190]
    with anyio.fail_after(15):  # the kernel takes the bomb's processes down with its namespace
        while set(_descendants()) - before:
            await anyio.sleep(0.05)


@needs_sandbox
async def test_endless_loop_hits_the_time_limit(engine):
    started = time.monotonic()
    with pytest.raises(HandlerLimitError, match="time limit"):
        await run(engine, "while True:\n    pass\nNone", limits=Limits(seconds=1.0))
    assert time.monotonic() - started < 3


@needs_sandbox
async def test_ten_gigabytes_hit_the_memory_limit(engine):
    with pytest.raises(HandlerLimitError, match="memory limit"):
        await run(engine, "block = bytearray(10 * 1024**3)\nlen(block)")


@needs_sandbox
async def test_printing_a_gigabyte_hits_the_output_cap_quickly(engine):
    started = time.monotonic()
    with pytest.raises(HandlerLimitError, match="output cap"):
        await run(engine, "for _ in range(1 << 20):\n    print('x' * 1024)\nNone")
    with pytest.raises(HandlerLimitError, match="output cap"):
        await run(engine, "import os\nfor _ in range(1 << 14):\n    os.write(2, b'x' * 65536)\nNone")
    assert time.monotonic() - started < 3


@needs_sandbox
async def test_a_result_that_is_not_json_data(engine):
    with pytest.raises(HandlerResultError, match="not JSON data"):
        await run(engine, "object()")
    with pytest.raises(HandlerResultError, match="not a string"):
        await run(engine, "{1: 'a'}")
    with pytest.raises(HandlerResultError, match="last statement"):
        await run(engine, "x = 1")
    with pytest.raises(HandlerLimitError, match="output cap"):
        await run(engine, "'x' * 2_000_000")


@needs_sandbox
async def test_invalid_python_names_its_line(engine):
    with pytest.raises(HandlerSyntaxError, match=r"line 3") as caught:
        await run(engine, "a = 1\nb = 2\nc = (\nd = 4")
    assert caught.value.line == 3
    with pytest.raises(HandlerRuntimeError, match=r"ZeroDivisionError.*line 2"):
        await run(engine, "a = 1\na / 0")


# -- what handlers are for ---------------------------------------------------------------------------------


def _diff(files: int, added: int, removed: int) -> str:
    """A unified diff of `files` files, each adding `added` lines and removing `removed`."""
    parts = []
    for index in range(files):
        parts += [
            f"diff --git a/src/f{index}.py b/src/f{index}.py",
            f"--- a/src/f{index}.py",
            f"+++ b/src/f{index}.py",
            f"@@ -1,{removed + 1} +1,{added + 1} @@",
            " context line",
        ]
        parts += [f"-old line {n} of file {index}" for n in range(removed)]
        parts += [f"+new line {n} of file {index}" for n in range(added)]
    return "\n".join(parts) + "\n"


@needs_sandbox
async def test_the_seed_diff_handler(engine):
    diff = _diff(20, 70, 30)
    assert 40_000 < len(diff) < 60_000
    result = await run(engine, "\n".join(DIFF_HANDLER), diff, {"commit_a": "HEAD~10", "commit_b": "HEAD"})
    assert result == {"files_changed": 20, "insertions": 20 * 70, "deletions": 20 * 30}


@needs_sandbox
async def test_arguments_and_the_whole_language(engine):
    script = """
from dataclasses import dataclass
@dataclass
class Point:
    x: int
    y: int
def where(value):
    match value:
        case Point(x=0, y=0):
            return "origin"
        case Point(x=x, y=0):
            return f"on x at {x}"
        case _:
            return "elsewhere"
[where(Point(0, 0)), where(Point(arguments["x"], 0)), where(Point(1, 1)), tool_output["n"] * 2]
"""
    assert await run(engine, script, {"n": 21}, {"x": 5}) == ["origin", "on x at 5", "elsewhere", 42]


@needs_sandbox
async def test_tool_chaining_round_trip_and_bound(engine):
    calls: list[tuple[str, dict]] = []
    schemas = {
        "git.log": {"type": "object", "properties": {"max_count": {"type": "integer"}}},
        "echo": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }

    async def call(name: str, arguments: dict):
        calls.append((name, arguments))
        if name == "echo" and arguments["text"] == "fail":
            raise HandlerError("echo refuses 'fail'")
        return {"name": name, "arguments": arguments}

    script = """
first = tools.git_log(max_count=5)
second = tools.echo(text="hi")
try:
    tools.echo(text="fail")
    failed = None
except tools.Error as exc:
    failed = str(exc)
[first, second, failed, sorted(n for n in dir(tools) if not n.startswith("_"))]
"""
    first, second, failed, names = await run(engine, script, tools=schemas, call=call)
    assert first == {"name": "git.log", "arguments": {"max_count": 5}}
    assert second == {"name": "echo", "arguments": {"text": "hi"}}
    assert failed == "echo refuses 'fail'"
    assert "echo" in names and "git_log" in names
    assert calls == [("git.log", {"max_count": 5}), ("echo", {"text": "hi"}), ("echo", {"text": "fail"})]

    calls.clear()
    bounded = Limits(seconds=3.0, tool_calls=3)
    with pytest.raises(HandlerLimitError, match="more than 3 tool calls"):
        await run(engine, "[tools.echo(text=str(i)) for i in range(10)]", tools=schemas, call=call, limits=bounded)
    assert len(calls) == 3

    with pytest.raises(HandlerRuntimeError, match="NameError"):
        await run(engine, "tools.echo(text='x')")  # no tools offered: no `tools`


# -- memory the address-space limit does not count ----------------------------------------------------------

# Each way tries to hold twice the memory limit outside the handler's address space, and says how much it held:
# before the seccomp filter, a memfd of 12 MB at a time (under the 16 MB file size limit) and System V segments
# (attached, written, detached) held all of it, on the host's memory.
STASH = """
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
target = 2 * arguments['limit']
chunk = b'x' * (4 << 20)

def memfd(create):
    held = 0
    try:
        while held < target:
            fd = create()
            if fd < 0:
                break
            for _ in range(3):
                os.write(fd, chunk)
                held += len(chunk)
    except OSError:
        pass
    return held

def dev_shm():
    held = 0
    try:
        with open('/dev/shm/stash', 'wb') as file:
            while held < target:
                file.write(chunk)
                held += len(chunk)
    except OSError:
        pass
    return held

def system_v():
    held = 0
    while held < target:
        segment = libc.shmget(0, 16 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        if segment < 0:
            break
        address = libc.shmat(segment, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            break
        ctypes.memset(address, 1, 16 << 20)
        libc.shmdt(ctypes.c_void_p(address))
        held += 16 << 20
    return held

number = {'x86_64': 319, 'aarch64': 279}[platform.machine()]  # memfd_create, past Python's wrapper
{
    'memfd': memfd(lambda: os.memfd_create('stash')),
    'memfd by its system call': memfd(lambda: libc.syscall(number, b'stash', 0)),
    '/dev/shm': dev_shm(),
    'System V shared memory': system_v(),
}
"""


@needs_sandbox
async def test_memory_outside_the_address_space_is_refused(engine):
    limits = Limits(seconds=10.0, memory_mb=64)
    held = await run(engine, STASH, None, {"limit": limits.memory_mb << 20}, limits=limits)
    assert held == {"memfd": 0, "memfd by its system call": 0, "/dev/shm": 0, "System V shared memory": 0}


@needs_sandbox
async def test_a_refused_system_call_says_so(engine):
    with pytest.raises(HandlerRuntimeError, match="the sandbox refuses this system call"):
        await run(engine, "import os\nos.memfd_create('stash')")


def _filter_says(program: bytes, arch: int, number: int, first_argument: int = 0) -> int:
    """What a classic-BPF seccomp program returns for one system call (the instructions seccomp_program uses)."""
    data = struct.pack("<iIQ6Q", number, arch, 0, first_argument, 0, 0, 0, 0, 0)
    code = [struct.unpack("<HBBI", program[at : at + 8]) for at in range(0, len(program), 8)]
    accumulator, at = 0, 0
    while True:
        op, true, false, k = code[at]
        if op == 0x20:  # ld [k]
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif op == 0x06:  # ret k
            return k
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[op]
            at += true if taken else false
        at += 1


@pytest.mark.parametrize(
    ("machine", "arch", "numbers", "harmless"),
    [
        ("x86_64", 0xC000003E, sandbox._X86_64, {"read": 0, "write": 1, "close": 3, "mmap": 9, "openat": 257}),
        ("aarch64", 0xC00000B7, sandbox._AARCH64, {"read": 63, "write": 64, "close": 57, "mmap": 222, "openat": 56}),
    ],
)
def test_the_seccomp_filter_of_each_architecture(machine, arch, numbers, harmless):
    allow, kill, eperm, eagain = 0x7FFF0000, 0x80000000, 0x50000 | errno.EPERM, 0x50000 | errno.EAGAIN
    program = sandbox.seccomp_program(machine)
    for name in ("memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "mq_open", "unshare"):
        assert _filter_says(program, arch, numbers[name]) == eperm, name
    for name, number in harmless.items():
        assert _filter_says(program, arch, number) == allow, name
    assert _filter_says(program, arch, numbers["clone"], 0x00010000 | 0x100) == allow  # a thread
    assert _filter_says(program, arch, numbers["clone"], 0x11) == eagain  # a process
    assert _filter_says(program, arch, numbers["clone3"]) == 0x50000 | errno.ENOSYS
    assert _filter_says(program, 0x40000003, harmless["read"]) == kill  # another architecture's calls
    assert sandbox.seccomp_program("riscv64") is None


@needs_sandbox
async def test_each_run_gets_a_memory_cgroup_where_one_is_delegated(tmp_path, caplog):
    """This machine has no cgroup v2 memory delegation: a folder standing for one shows the wiring (the child
    cgroup, its memory.max, the shell that moves itself in before it runs bubblewrap)."""
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    engine = SandboxEngine(memory_cgroup=tmp_path)
    assert engine.memory_cgroup == tmp_path and "memory.max" in engine.notice
    assert await engine.run("1 + 1", None, {}, limits=Limits(seconds=3.0, memory_mb=100)) == 2
    [child] = [path for path in tmp_path.iterdir() if path.is_dir()]
    assert child.name.startswith("branchc-handler-")
    assert (child / "memory.max").read_text() == str((100 + engine.scratch_mb) << 20)
    assert (child / "cgroup.procs").read_text() == "0\n"  # the shell moved itself, and so the sandbox, in


def test_a_cgroup_that_cannot_serve_is_refused_by_name(tmp_path):
    (tmp_path / "cgroup.subtree_control").write_text("cpu pids\n")
    with pytest.raises(SandboxUnavailableError, match="does not enable the memory controller"):
        SandboxEngine(memory_cgroup=tmp_path, unsafe=True)
    with pytest.raises(SandboxUnavailableError, match="not a cgroup v2 folder"):
        SandboxEngine(memory_cgroup=tmp_path / "missing", unsafe=True)
    assert sandbox.find_memory_cgroup(None) == (None, "not asked for")


async def test_unsafe_mode_runs_without_bubblewrap_and_says_so(caplog):
    with caplog.at_level("WARNING", logger=sandbox.__name__):
        engine = SandboxEngine(unsafe=True)
    assert not engine.sandboxed
    assert "UNSAFE" in engine.notice and "UNSAFE" in caplog.text
    script = f"import os\nos.getppid(), os.path.exists({str(HERE)!r})"
    ppid, sees_host = await engine.run(script, None, {}, limits=LIMITS)
    assert ppid == os.getpid() and sees_host  # no sandbox: the worker is this process's child, on the host
    diff = _diff(3, 4, 5)
    assert await engine.run("\n".join(DIFF_HANDLER), diff, {}, limits=LIMITS) == {
        "files_changed": 3,
        "insertions": 12,
        "deletions": 15,
    }
    with pytest.raises(HandlerLimitError, match="time limit"):
        await engine.run("while True:\n    pass\nNone", None, {}, limits=Limits(seconds=0.5))


def test_without_bubblewrap_the_engine_is_refused(monkeypatch):
    monkeypatch.setenv("PATH", "")
    bubblewrap_available.cache_clear()
    try:
        reason = bubblewrap_available()
        assert reason is not None and "not installed" in reason
        assert SandboxEngine.check() == reason
        with pytest.raises(SandboxUnavailableError, match="refuses this engine"):
            SandboxEngine()
    finally:
        bubblewrap_available.cache_clear()


@needs_sandbox
async def test_overhead_per_call(engine):
    """p50 per-call overhead of a trivial handler and of the diff handler on ~50 KB (target: p50 <= 150 ms)."""
    diff = _diff(20, 70, 30)
    report = {}
    for label, script, output in [("trivial", "1", None), ("diff-50KB", "\n".join(DIFF_HANDLER), diff)]:
        times = []
        for _ in range(15):
            started = time.perf_counter()
            await run(engine, script, output)
            times.append(time.perf_counter() - started)
        times.sort()
        report[label] = {"p50_ms": round(statistics.median(times) * 1000, 1), "max_ms": round(times[-1] * 1000, 1)}
    print("sandbox overhead:", json.dumps(report))
    assert report["trivial"]["p50_ms"] <= 150 and report["diff-50KB"]["p50_ms"] <= 150
