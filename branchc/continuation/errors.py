"""Errors of snapshots and resumes: a value that cannot travel, data that cannot be trusted,
a snapshot of code this process does not have."""

from __future__ import annotations

from ..errors import BranchcError

__all__ = ["NotSerializableError", "SnapshotDataError", "SnapshotError"]


class NotSerializableError(BranchcError, TypeError):
    """A live value that cannot travel; `path` starts at the root name the codec was given."""

    def __init__(self, path: str, type_name: str, hint: str) -> None:
        self.path = path
        self.type_name = type_name
        self.hint = hint
        super().__init__(f"{path}: a {type_name} cannot travel in a snapshot; {hint}")


class SnapshotDataError(BranchcError, ValueError):
    """Malformed or tampered snapshot data; `path` is the place in the data."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class SnapshotError(BranchcError, ValueError):
    """A snapshot that cannot be resumed here (wrong code, unknown function, bad data)."""
