"""Test helpers for tool authors."""

from .runtime.testing import MockClient, ScriptExhaustedError

__all__ = ["MockClient", "ScriptExhaustedError"]
