"""The full-CPython result-handler engine: each handler runs in a fresh Python process under bubblewrap.

For handlers that need the whole language (classes, `match`, the standard library), opted into per server.
Python-level restrictions are not a boundary, so the script gets all of CPython and the containment is the
kernel's: bubblewrap gives the process new user, network, PID, IPC, UTS (and cgroup) namespaces, a root holding
only the interpreter and the system's shared libraries (read-only), an empty tmpfs as its working folder, no
environment, no capabilities and no way to make further user namespaces; the worker (sandbox_worker.py) sets
rlimits (CPU seconds, address space, file size, processes, open files) before the script runs; the server keeps
a wall-clock timeout and caps what it reads from the process, and kills the whole process tree at the end.

Where bubblewrap cannot run, `SandboxEngine()` refuses to start and says why; `unsafe=True` (the operator's
explicit flag) runs the same worker without it, with only the rlimits and the timeout, and says loudly that
this is not a sandbox.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import math
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from ...runtime.errors import BranchcError
from . import sandbox_worker
from .chaining import render_wrappers
from .engine import (
    HandlerError,
    HandlerLimitError,
    HandlerResultError,
    HandlerRuntimeError,
    HandlerSyntaxError,
    Limits,
    ToolCaller,
)

__all__ = [
    "SandboxEngine",
    "SandboxUnavailableError",
    "bubblewrap_available",
    "bubblewrap_command",
    "find_memory_cgroup",
]

log = logging.getLogger(__name__)

#: Inside the sandbox: the working folder (an empty tmpfs) and the unprivileged user the script runs as.
WORKDIR = "/tmp"
SANDBOX_UID = 65534

UNSAFE_NOTICE = (
    "UNSAFE: result handlers run in full CPython WITHOUT a sandbox (no bubblewrap): only rlimits and a "
    "timeout hold them; a handler can read the server's files and environment and reach the network"
)

_WORKER_SOURCE = Path(sandbox_worker.__file__).read_text(encoding="utf-8")
_STDERR_KEPT = 2048  # of the process's stderr, for the message when it dies without a result
_FRAME_SLACK = 64 * 1024  # a frame may carry the output cap's worth of data plus its envelope


class SandboxUnavailableError(BranchcError, RuntimeError):
    """bubblewrap cannot run here, so the server refuses the full-CPython engine (unless told it is unsafe)."""


@functools.cache
def _interpreter() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The base interpreter (never a venv's, which would need the project folder), the files and folders it
    needs read-only, and the folders to hide (installed packages: `-S` does not use them, nothing shows them)."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(
        vars={**base, "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    )
    needed = [exe]
    for key in ("stdlib", "platstdlib"):
        folder = os.path.realpath(paths[key])
        if folder not in needed and os.path.isdir(folder):
            needed.append(folder)
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        library = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
        if os.path.isfile(library):
            needed.append(os.path.realpath(library))
    hidden = tuple(
        folder
        for folder in {os.path.realpath(paths["purelib"]), os.path.realpath(paths["platlib"])}
        if os.path.isdir(folder) and any(folder.startswith(base + os.sep) for base in needed[1:])
    )
    return exe, tuple(needed), hidden


# A seccomp filter (classic BPF, handed to bwrap's --seccomp): an extra layer under the rlimits. It refuses new
# processes (fork, vfork, clone without CLONE_THREAD; clone3 says ENOSYS so glibc falls back to clone), which holds
# even where RLIMIT_NPROC does not (the kernel exempts a sandbox whose user maps to the host's root); memory that
# RLIMIT_AS does not count (memfd_create and memfd_secret, whose pages are written without being mapped, System V
# shared memory, which outlives a detach, POSIX message queues): one handler under a 256 MB limit held 944 MB in
# memfds before; and system calls a handler has no use for that widen the kernel's attack surface. (/dev/shm is
# read-only: bwrap's /dev is remounted so; the working folder is a tmpfs of `scratch_mb`.) For x86-64 and aarch64.
_DENIED = (
    # memory outside the address space
    "memfd_create memfd_secret shmget shmat shmctl shmdt mq_open "
    # administration, tracing, keys, namespaces, mounts, io_uring
    "ptrace syslog chroot acct mount umount2 swapon swapoff reboot init_module delete_module quotactl kexec_load "
    "add_key request_key keyctl unshare perf_event_open name_to_handle_at open_by_handle_at setns "
    "process_vm_readv process_vm_writev finit_module kexec_file_load bpf userfaultfd io_uring_setup io_uring_enter "
    "io_uring_register open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr"
).split()

# name -> number: x86-64 (arch/x86/entry/syscalls/syscall_64.tbl), aarch64 (include/uapi/asm-generic/unistd.h).
_X86_64 = {
    **{"fork": 57, "vfork": 58, "clone": 56, "clone3": 435},
    **{"memfd_create": 319, "memfd_secret": 447, "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67},
    **{"mq_open": 240, "ptrace": 101, "syslog": 103, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166},
    **{"swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176, "quotactl": 179},
    **{"kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272},
    **{"perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308},
    **{"process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320},
    **{"bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427},
    **{"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433},
    **{"mount_setattr": 442},
}
_AARCH64 = {  # no fork or vfork: processes are made with clone
    **{"clone": 220, "clone3": 435},
    **{"memfd_create": 279, "memfd_secret": 447, "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197},
    **{"mq_open": 180, "ptrace": 117, "syslog": 116, "chroot": 51, "acct": 89, "mount": 40, "umount2": 39},
    **{"swapon": 224, "swapoff": 225, "reboot": 142, "init_module": 105, "delete_module": 106, "quotactl": 60},
    **{"kexec_load": 104, "add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97},
    **{"perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265, "setns": 268},
    **{"process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273, "kexec_file_load": 294},
    **{"bpf": 280, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427},
    **{"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433},
    **{"mount_setattr": 442},
}
#: machine -> (AUDIT_ARCH_*, its system call numbers, whether numbers from 0x40000000 up are another ABI (x32))
_ARCHITECTURES = {
    "x86_64": (0xC000003E, _X86_64, True),
    "aarch64": (0xC00000B7, _AARCH64, False),
    "arm64": (0xC00000B7, _AARCH64, False),
}


@functools.cache
def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as bwrap reads it (struct sock_filter[]) for `machine` (this one's by default), or None on
    machines it was not written for."""
    found = _ARCHITECTURES.get(machine or platform.machine())
    if found is None or sys.byteorder != "little":
        return None
    arch, numbers, x32 = found
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000

    def errno_(number: int) -> int:
        return 0x00050000 | number

    program = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),  # anything else (x86-64's int 0x80 i386 calls, aarch64's 32-bit mode) ends the process
        (ret, 0, 0, kill),
        (ld, 0, 0, 0),  # seccomp_data.nr
    ]
    if x32:
        program += [(jge, 0, 1, 0x40000000), (ret, 0, 0, errno_(errno.ENOSYS))]  # the x32 ABI
    program += [(jeq, 0, 1, numbers["clone3"]), (ret, 0, 0, errno_(errno.ENOSYS))]
    for name in ("fork", "vfork"):
        if name in numbers:
            program += [(jeq, 0, 1, numbers[name]), (ret, 0, 0, errno_(errno.EAGAIN))]
    program += [
        (jeq, 0, 4, numbers["clone"]),  # clone: a thread (CLONE_THREAD in its flags, args[0]) may start, a process not
        (ld, 0, 0, 16),
        (jset, 0, 1, 0x00010000),
        (ret, 0, 0, allow),
        (ret, 0, 0, errno_(errno.EAGAIN)),
    ]
    for number in sorted(numbers[name] for name in _DENIED):
        program += [(jeq, 0, 1, number), (ret, 0, 0, errno_(errno.EPERM))]
    program.append((ret, 0, 0, allow))
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in program)


def _seccomp_fd() -> int | None:
    """A fresh descriptor holding the filter (bwrap reads it to the end, so one per sandbox)."""
    program = seccomp_program()
    if program is None:
        return None
    fd = os.memfd_create("branchc-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def bubblewrap_command(bwrap: str, *, scratch_bytes: int, seccomp_fd: int | None = None) -> list[str]:
    """bwrap and its options, up to the command it runs: the whole sandbox in one place, to read and audit."""
    exe, needed, hidden = _interpreter()
    argv = [
        bwrap,
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--disable-userns",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "sandbox",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--cap-drop",
        "ALL",
    ]
    # The system's shared libraries (the interpreter's and its extension modules'), read-only; merged-/usr
    # systems have /lib and /lib64 as symlinks, which are recreated as such.
    for folder in ("/usr/lib", "/usr/lib64", "/usr/lib32"):
        if os.path.isdir(folder) and not os.path.islink(folder):
            argv += ["--ro-bind", folder, folder]
    for folder in ("/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    for path in needed:
        argv += ["--ro-bind", path, path]
    for folder in hidden:
        argv += ["--tmpfs", folder, "--remount-ro", folder]
    # /dev is a tmpfs of bwrap's (null, zero, random, ...): read-only, or /dev/shm would be unbounded memory.
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    argv += ["--size", str(scratch_bytes), "--tmpfs", WORKDIR, "--chdir", WORKDIR]
    argv += ["--remount-ro", "/"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return [*argv, exe]


def _python_argv(limits: dict[str, Any]) -> list[str]:
    """The interpreter's options and the worker: isolated (`-I`: no environment, no user site, no script
    folder on sys.path), no site (`-S`), no bytecode written (`-B`), UTF-8 throughout."""
    return ["-I", "-S", "-B", "-X", "utf8", "-c", _WORKER_SOURCE, json.dumps(limits)]


@functools.cache
def bubblewrap_available() -> str | None:
    """None when bubblewrap can run the engine's sandbox here; otherwise why not, for the operator."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (no `bwrap` on PATH)"
    seccomp = _seccomp_fd()
    argv = [*bubblewrap_command(bwrap, scratch_bytes=1 << 20, seccomp_fd=seccomp), "-I", "-S", "-c", "pass"]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={},
            timeout=30,
            check=False,
            pass_fds=() if seccomp is None else (seccomp,),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not be started: {exc}"
    finally:
        if seccomp is not None:
            os.close(seccomp)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[:500] or f"exit status {done.returncode}"
        return f"bubblewrap cannot make a sandbox here ({said}); are unprivileged user namespaces disabled?"
    return None


#: The cgroup v2 unified hierarchy, where `find_memory_cgroup("auto")` looks.
CGROUP_ROOT = Path("/sys/fs/cgroup")
_CGROUP_PREFIX = "branchc-handler-"


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 folder, when /sys/fs/cgroup is the unified hierarchy (not a hybrid one)."""
    if not (CGROUP_ROOT / "cgroup.controllers").is_file():
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    return None if own is None else CGROUP_ROOT / own.lstrip("/")


def find_memory_cgroup(setting: str | os.PathLike[str] | None = "auto") -> tuple[Path | None, str]:
    """The cgroup v2 folder under which each handler run gets a cgroup of its own with `memory.max` (or None),
    and why not. `setting`: a folder, "auto" (this process's own cgroup, when it may hold such children), or
    None. A folder serves when its `cgroup.subtree_control` enables the memory controller and it is writable: a
    cgroup delegated to the server (systemd's `Delegate=yes`) that holds no process itself, since the kernel
    lets a cgroup enable controllers for its children only then (its root excepted)."""
    if setting is None:
        return None, "not asked for"
    folder = _own_cgroup() if setting == "auto" else Path(setting)
    if folder is None:
        return None, f"{CGROUP_ROOT} is not a cgroup v2 unified hierarchy"
    try:
        controllers = (folder / "cgroup.subtree_control").read_text(encoding="utf-8").split()
    except OSError as exc:
        return None, f"{folder} is not a cgroup v2 folder ({exc.strerror or exc})"
    if "memory" not in controllers:
        return None, f"{folder}/cgroup.subtree_control does not enable the memory controller for its children"
    if not os.access(folder, os.W_OK) or shutil.which("sh") is None:
        return None, f"{folder} is not writable here (or there is no `sh` to enter a child cgroup)"
    return folder, f"each handler in a cgroup of its own under {folder}, with memory.max"


def _make_cgroup(parent: Path, memory_bytes: int) -> Path:
    """A fresh cgroup for one run, its memory (the page cache, tmpfs and shared memory included) capped."""
    child = parent / f"{_CGROUP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
    try:
        child.mkdir()
        (child / "memory.max").write_text(str(memory_bytes), encoding="ascii")
        if (child / "memory.swap.max").exists():
            (child / "memory.swap.max").write_text("0", encoding="ascii")
    except OSError as exc:
        _remove_cgroup_now(child)
        raise HandlerError(f"the handler's cgroup could not be made under {parent}: {exc}") from None
    return child


def _in_cgroup(child: Path, argv: list[str]) -> list[str]:
    """`argv` run by a shell that first moves itself into `child` (writing 0 to cgroup.procs moves the writer),
    so the sandbox and everything in it start there."""
    return [shutil.which("sh") or "/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(child / "cgroup.procs"), *argv]


def _remove_cgroup_now(child: Path) -> bool:
    try:
        child.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False  # the kernel has not yet let go of the processes that ran in it
        log.warning("could not remove the handler cgroup %s: %s", child, exc)
    return True


async def _remove_cgroup(child: Path) -> None:
    for _ in range(40):
        if _remove_cgroup_now(child):
            return
        await anyio.sleep(0.05)
    log.warning("the handler cgroup %s stayed busy; it is left behind", child)


class _Lines:
    """Newline-delimited frames from a byte stream, each at most `limit` bytes."""

    def __init__(self, stream: ByteReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._scanned = 0

    async def readline(self, limit: int) -> bytes | None:
        """The next frame, None at the end of the stream, HandlerLimitError past `limit`."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > limit:
                raise HandlerLimitError(f"the handler sent more than its output cap ({limit} bytes) at once")
            try:
                chunk = await self._stream.receive(1 << 16)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return None
            self._buffer += chunk


def _kill(process: Process) -> None:
    """SIGKILL to the process group: bwrap, and through --die-with-parent and the PID namespace, all inside."""
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _with_line(message: str, line: Any) -> str:
    return f"{message} (line {line})" if isinstance(line, int) else message


class SandboxEngine:
    """`ResultEngine` running full CPython, one bubblewrapped process per handler run.

    `processes`: RLIMIT_NPROC inside the sandbox (threads count too); `scratch_mb`: the size of the tmpfs
    working folder and the largest file the script may write; `startup_seconds`: how long the process may take
    to start and compile the script before the handler's own time limit begins; `memory_cgroup`: a cgroup v2
    folder under which each run gets a cgroup of its own whose `memory.max` is the memory limit plus the scratch
    folder (it counts what RLIMIT_AS does not: page cache, tmpfs, shared memory), "auto" (this process's own
    cgroup, when it can hold such children; else none) or None (find_memory_cgroup). With or without one, the
    seccomp filter refuses memfds, System V shared memory and message queues, and /dev/shm is read-only.
    """

    def __init__(
        self,
        *,
        unsafe: bool = False,
        processes: int = 16,
        scratch_mb: int = 16,
        startup_seconds: float = 10.0,
        memory_cgroup: str | os.PathLike[str] | None = "auto",
    ) -> None:
        self.processes = processes
        self.scratch_mb = scratch_mb
        self.startup_seconds = startup_seconds
        self.unsafe = unsafe
        self.memory_cgroup, why = find_memory_cgroup(memory_cgroup)
        if self.memory_cgroup is None and memory_cgroup not in (None, "auto"):
            raise SandboxUnavailableError(f"memory_cgroup={str(memory_cgroup)!r} cannot be used: {why}")
        if unsafe:
            self.name = "python-unsafe"
            self.bwrap = None
            self.notice = UNSAFE_NOTICE
            log.warning(UNSAFE_NOTICE)
            return
        reason = bubblewrap_available()
        if reason is not None:
            raise SandboxUnavailableError(
                f"the full-CPython handler engine needs bubblewrap, and {reason}. The server refuses this "
                "engine; install bubblewrap (Debian: bubblewrap), or start the server with the explicit unsafe "
                "flag to run handlers without a sandbox (only rlimits and a timeout: not a boundary)"
            )
        self.name = "python-sandbox"
        self.bwrap = shutil.which("bwrap")
        self.notice = "result handlers run in full CPython under bubblewrap"
        if self.memory_cgroup is not None:
            self.notice += f" ({why})"

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None

    @staticmethod
    def check() -> str | None:
        """Why this engine cannot sandbox here (None: it can): what the server says at start."""
        return bubblewrap_available()

    def _worker_limits(self, limits: Limits) -> dict[str, Any]:
        return {
            "cpu_seconds": math.ceil(limits.seconds) + 1,
            "memory_bytes": limits.memory_mb << 20,
            "file_bytes": self.scratch_mb << 20,
            "open_files": 64,
            "processes": self.processes,
            "count_user_processes": self.unsafe,
            "output_bytes": limits.output_bytes,
            "recursion": limits.recursion,
        }

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
        """The script's result (JSON data), or a HandlerError."""
        if tools is not None and call is None:
            raise ValueError("SandboxEngine.run: `tools` needs `call` to run them")
        try:
            request = json.dumps(
                {
                    "script": script,
                    "tool_output": tool_output,
                    "arguments": arguments,
                    "tools": None if tools is None else render_wrappers(tools),
                },
                allow_nan=False,
            ).encode()
        except (TypeError, ValueError) as exc:
            raise HandlerError(f"the tool's output or arguments are not JSON data: {exc}") from None

        python = _python_argv(self._worker_limits(limits))
        scratch = seccomp = None
        if self.bwrap is not None:
            seccomp = _seccomp_fd()
            sandbox = bubblewrap_command(self.bwrap, scratch_bytes=self.scratch_mb << 20, seccomp_fd=seccomp)
            argv, cwd = [*sandbox, *python], "/"
        else:
            scratch = tempfile.TemporaryDirectory(prefix="branchc-handler-")
            argv, cwd = [_interpreter()[0], *python], scratch.name
        cgroup = None
        try:
            try:
                if self.memory_cgroup is not None:  # memory.max: what the rlimits miss (page cache, shared memory)
                    cgroup = _make_cgroup(self.memory_cgroup, (limits.memory_mb + self.scratch_mb) << 20)
                    argv = _in_cgroup(cgroup, argv)
                process = await anyio.open_process(
                    argv, env={}, cwd=cwd, start_new_session=True, pass_fds=() if seccomp is None else (seccomp,)
                )
            finally:
                if seccomp is not None:
                    os.close(seccomp)
            try:
                return await self._supervise(process, request + b"\n", limits, tools, call)
            finally:
                with anyio.CancelScope(shield=True):
                    _kill(process)
                    await process.wait()
                    await process.aclose()
        finally:
            if scratch is not None:
                scratch.cleanup()
            if cgroup is not None:
                with anyio.CancelScope(shield=True):
                    await _remove_cgroup(cgroup)

    async def _supervise(
        self,
        process: Process,
        request: bytes,
        limits: Limits,
        tools: dict[str, dict[str, Any]] | None,
        call: ToolCaller | None,
    ) -> Any:
        """Talk to the worker under the time limit while draining its stderr, then judge how it ended."""
        stderr = bytearray()
        flooded = False

        async def drain() -> None:
            nonlocal flooded
            assert process.stderr is not None
            total = 0
            try:
                async for chunk in process.stderr:
                    total += len(chunk)
                    stderr.extend(chunk[: max(0, _STDERR_KEPT - len(stderr))])
                    if total > limits.output_bytes:
                        flooded = True
                        _kill(process)
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

        done: dict[str, Any] | None = None
        failure: HandlerError | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(drain)
            with anyio.CancelScope(deadline=anyio.current_time() + self.startup_seconds) as clock:
                try:
                    done = await self._converse(process, request, limits, tools, call, clock)
                except HandlerError as exc:
                    failure = exc
            if done is None and failure is None and not clock.cancelled_caught:
                # The worker ended without a result: let the exit status and stderr arrive, briefly.
                with anyio.move_on_after(1.0):
                    await process.wait()
            group.cancel_scope.cancel()

        if failure is not None:
            raise failure
        if done is not None:
            return self._outcome(done)
        if flooded:
            raise HandlerLimitError(f"the handler wrote more than its output cap ({limits.output_bytes} bytes)")
        if clock.cancelled_caught:
            raise HandlerLimitError(f"the handler ran past its time limit ({limits.seconds:g} s of wall-clock time)")
        raise self._died(process.returncode, bytes(stderr), limits)

    async def _converse(
        self,
        process: Process,
        request: bytes,
        limits: Limits,
        tools: dict[str, dict[str, Any]] | None,
        call: ToolCaller | None,
        clock: anyio.CancelScope,
    ) -> dict[str, Any] | None:
        """The protocol, parent side: send the request, answer `call` frames, return the `done` frame (None:
        the worker ended without one)."""
        assert process.stdin is not None and process.stdout is not None
        frames = _Lines(process.stdout)
        frame_limit = limits.output_bytes + _FRAME_SLACK
        calls = 0
        try:
            await process.stdin.send(request)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # it died before reading: the exit status says why
        while True:
            line = await frames.readline(frame_limit)
            if line is None:
                return None
            try:
                frame = json.loads(line)
                op = frame["op"]
            except (ValueError, TypeError, KeyError):
                raise HandlerRuntimeError("the handler's process broke the engine's protocol") from None
            if op == "done":
                return frame
            if op == "ready":  # the script starts now: from here on it has its own time limit
                clock.deadline = anyio.current_time() + limits.seconds
                continue
            if op != "call":
                raise HandlerRuntimeError("the handler's process broke the engine's protocol")
            calls += 1
            if calls > limits.tool_calls:
                raise HandlerLimitError(f"the handler made more than {limits.tool_calls} tool calls")
            reply = await self._tool_call(frame.get("name"), frame.get("arguments"), tools, call)
            try:
                await process.stdin.send(reply)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return None

    @staticmethod
    async def _tool_call(
        name: Any, arguments: Any, tools: dict[str, dict[str, Any]] | None, call: ToolCaller | None
    ) -> bytes:
        """One tool call for the handler; a failure goes back to the script, as `tools.Error`."""
        if tools is None or call is None or not isinstance(name, str) or not isinstance(arguments, dict):
            reply: dict[str, Any] = {"error": "this handler cannot call tools"}
        else:
            try:
                reply = {"result": await call(name, arguments)}
            except HandlerError as exc:
                reply = {"error": str(exc)}
        try:
            return json.dumps(reply, allow_nan=False).encode() + b"\n"
        except (TypeError, ValueError):
            return json.dumps({"error": f"the tool {name!r} returned something that is not JSON data"}).encode() + b"\n"

    @staticmethod
    def _outcome(done: dict[str, Any]) -> Any:
        if done.get("ok") is True and "result" in done:
            return done["result"]
        error = done.get("error")
        if not isinstance(error, dict):
            raise HandlerRuntimeError("the handler's process broke the engine's protocol")
        message, line, kind = str(error.get("message")), error.get("line"), error.get("kind")
        if kind == "syntax":
            raise HandlerSyntaxError(_with_line(message, line), line if isinstance(line, int) else None)
        if kind == "limit":
            raise HandlerLimitError(_with_line(message, line))
        if kind == "result":
            raise HandlerResultError(message)
        raise HandlerRuntimeError(_with_line(message, line))

    @staticmethod
    def _died(returncode: int | None, stderr: bytes, limits: Limits) -> HandlerError:
        """The error for a worker that ended without a `done` frame (bwrap reports a signal as 128 + n)."""
        code = returncode if returncode is not None else 0
        number = -code if code < 0 else code - 128 if code > 128 else 0
        if number == signal.SIGXCPU:
            return HandlerLimitError(f"the handler passed its CPU time limit ({math.ceil(limits.seconds) + 1} s)")
        if number == signal.SIGXFSZ:
            return HandlerLimitError("the handler passed its file size limit")
        if number:
            name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
            return HandlerLimitError(
                f"the handler's process was killed by {name}, most likely on passing its memory limit "
                f"({limits.memory_mb} MB)"
            )
        said = stderr.decode(errors="replace").strip()
        detail = f": {said[-500:]}" if said else ""
        return HandlerRuntimeError(f"the handler's process ended without a result (exit status {code}){detail}")

    async def aclose(self) -> None:
        """Nothing to stop: every run's process ends with the run."""
