"""The root of every error branchc raises, so callers can catch them all at once."""

from __future__ import annotations

__all__ = ["BranchcError"]


class BranchcError(Exception):
    """Base of branchc's own errors."""
