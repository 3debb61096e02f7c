"""The compiler's version, apart from the compiler: an up-to-date build is known without loading it."""

from __future__ import annotations

__all__ = ["COMPILER_VERSION"]

COMPILER_VERSION = "7"
