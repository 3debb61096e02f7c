"""Helpers for the splitter's differential tests (test_split_programs.py, test_split_random.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_COMPILED: dict[str, object] = {}


@contextlib.contextmanager
def compile_once() -> Iterator[None]:
    """Compile each program source once, not once per mode.

    differential.trace loads the program anew for every mode (a fresh module each time, which
    is what we want); compiling is what costs, and its output depends on the source only, so
    the compiled module is cached by source text while the block runs.
    """
    import branchc.splitter as splitter

    original = getattr(splitter, "compile_module", None)
    if original is None:  # the package changed shape: run uncached
        yield
        return

    def cached(source: str, path: str = "<string>"):
        result = _COMPILED.get(source)
        if result is None:
            if len(_COMPILED) > 4096:
                _COMPILED.clear()
            result = _COMPILED[source] = original(source, path)
        return result

    splitter.compile_module = cached
    try:
        yield
    finally:
        splitter.compile_module = original
