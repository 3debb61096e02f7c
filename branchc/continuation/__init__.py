"""The splitter's run-time half: what compiled modules need when they run.

- `generator`: the compiled generator object and the helpers its body calls (imported by
  compiled modules as `_bc_rt`);
- `registry`: the compiled functions this process knows, by code and by name;
- `snapshots`: a suspended generator as JSON data, and resuming it;
- `codec`: live values as a JSON object graph, and back, trusting nothing in the data;
- `relocate`: compiled code that reports the source's file names and lines.

It knows nothing of tools, effects or MCP: the runtime builds on it.
"""

from .errors import NotSerializableError, SnapshotDataError, SnapshotError
from .generator import is_compiled, release
from .snapshots import ContextHandle, resume, snapshot

__all__ = [
    "ContextHandle",
    "NotSerializableError",
    "SnapshotDataError",
    "SnapshotError",
    "is_compiled",
    "release",
    "resume",
    "snapshot",
]
