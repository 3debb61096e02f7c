"""Which process holds a run: written into its record, checked before another process takes the run.

A holder is the host name, the pid and the process's start time (Linux: /proc/PID/stat), so that a pid reused
by a later process is not taken for the one that held the run. On another host nothing can be checked.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

__all__ = ["describe_holder", "holder", "holder_alive"]


def _started(pid: int) -> str:
    """The start time of process `pid` as the kernel counts it (Linux), "" where that cannot be read: with the
    pid it names one process, never a later one that reuses the pid."""
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()[19]
    return ""


_me: tuple[int, str] = (0, "")  # (pid, start time) of this process, read once per pid (a fork reads it again)


def _own_start(pid: int) -> str:
    global _me
    if _me[0] != pid:
        _me = (pid, _started(pid))
    return _me[1]


def holder() -> dict[str, Any]:
    """This process, as a record names its holder (at every claim of a round: its start time is read once)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": _own_start(pid), "at": time.time()}


def holder_alive(held: Any) -> bool | None:
    """Whether the process `held` names still runs: True, False, or None when it cannot be told (another host)."""
    if not isinstance(held, dict) or not isinstance(held.get("pid"), int):
        return False
    if held.get("host") != socket.gethostname():
        return None
    pid = held["pid"]
    if pid == os.getpid():
        return held.get("started", "") == _own_start(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    started = held.get("started", "")
    return not started or started == _started(pid)


def describe_holder(held: dict[str, Any]) -> str:
    return f"process {held.get('pid')} on {held.get('host')}"
