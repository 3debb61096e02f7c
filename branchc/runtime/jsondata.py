"""The phase boundary check: only JSON data crosses from one phase to the next."""

from __future__ import annotations

import inspect
import linecache
import math
import os
from collections.abc import Callable
from typing import Any

from .errors import JsonDataError

__all__ = ["LISTED", "check_json_data", "check_phase_data", "json_data_problems", "source_place"]

#: How many bad values an error lists; the rest are counted ("and N more").
LISTED = 20

_KINDS = "JSON data is None, bool, int, float, str, list, and dict with str keys"

# What to do with values that often end up in a handoff by accident, by type name.
_ADVICE = {
    "datetime": "use .isoformat()",
    "date": "use .isoformat()",
    "time": "use .isoformat()",
    "timedelta": "use .total_seconds()",
    "Decimal": "use str() or float()",
    "UUID": "use str()",
    "tuple": "use a list",
    "set": "use a sorted list",
    "frozenset": "use a sorted list",
    "bytes": "decode or base64-encode it to a str",
    "bytearray": "decode or base64-encode it to a str",
    "PosixPath": "use str()",
    "WindowsPath": "use str()",
}


class _Found:
    """The bad values of one check: the first LISTED described, all of them counted."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.total = 0

    def add(self, text: str) -> None:
        self.total += 1
        if len(self.listed) < LISTED:
            self.listed.append(text)


def json_data_problems(value: Any, where: str) -> tuple[list[str], int]:
    """(the first LISTED bad values, each `path: what is wrong`, and how many there are in all).

    JSON data is None, bool, int, finite float, str, list and dict with str keys; a tuple
    would come back as a list after a round trip, so it is refused too. RecursionError
    escapes for data nested too deeply to check.
    """
    found = _Found()
    _check(value, where, found, set())
    return found.listed, found.total


def check_json_data(value: Any, where: str, fix: str) -> None:
    """Raise JsonDataError naming each offending key path, e.g. `handoff['x'][2]`: one bad value
    as `path: what; fix`, several one per line (at most LISTED, then how many more)."""
    try:
        listed, total = json_data_problems(value, where)
    except RecursionError:
        raise JsonDataError(f"{where}: nested too deeply to check (or to encode as JSON); {fix}") from None
    if total == 1:
        raise JsonDataError(f"{listed[0]}; {fix}", problems=listed, total=total)
    if total:
        lines = [f"{where}: {total} values are not JSON data:", *_listing(listed, total), f"  hint: {fix}"]
        raise JsonDataError("\n".join(lines), problems=listed, total=total)


def check_phase_data(
    value: Any,
    where: str,
    phase: str,
    fn: Callable[..., Any] | None,
    returned_at: Callable[[], str | None] | None = None,
) -> None:
    """What a phase hands on (`handoff` from before, `client_result`, after's `result`) must be JSON
    data; else JsonDataError naming the file:line of the `return` that gave it (`returned_at()`, asked only
    then; None: unknown) or else of the phase function's def, and every bad value by its path."""
    try:
        listed, total = json_data_problems(value, where)
    except RecursionError:
        listed, total = None, 0
    if listed is not None and not total:
        return
    place = (returned_at() if returned_at is not None else None) or phase_place(fn)
    head = f"{place}: " if place else ""
    hint = f"  hint: convert them in {phase}(): {_KINDS}"
    if listed is None:
        message = f"{head}{phase}() returned {where} nested too deeply to check (or to encode as JSON)\n{hint}"
        raise JsonDataError(message, place=place, phase=phase)
    lines = [f"{head}{phase}() returned data that is not JSON:", *_listing(listed, total), hint]
    raise JsonDataError("\n".join(lines), problems=listed, total=total, place=place, phase=phase)


def _listing(listed: list[str], total: int) -> list[str]:
    lines = [f"  {problem}" for problem in listed]
    if total > len(listed):
        lines.append(f"  and {total - len(listed)} more ({total} in all)")
    return lines


def phase_place(fn: Callable[..., Any] | None) -> str | None:
    """`file:line` of a phase function's `def` (after its decorators), the file relative to the
    working folder when it is inside it; None when `fn` has no code of its own."""
    try:
        target = inspect.unwrap(fn) if fn is not None else None
    except ValueError:  # a cycle of __wrapped__
        target = fn
    code = getattr(target, "__code__", None)
    if code is None and target is not None:  # an object with a __call__ method
        code = getattr(inspect.getattr_static(type(target), "__call__", None), "__code__", None)
    if code is None:
        return None
    line = code.co_firstlineno
    for number in range(line, line + 50):  # skip the decorators, which may span lines
        text = linecache.getline(code.co_filename, number).lstrip()
        if not text:
            break
        if text.startswith(("def ", "async def ")):
            line = number
            break
    return source_place(code.co_filename, line)


def source_place(filename: str, line: int) -> str:
    """`file:line`, the file relative to the working folder when it is inside it."""
    try:
        relative = os.path.relpath(filename)
        if not relative.startswith(os.pardir):
            filename = relative
    except ValueError:  # another drive
        pass
    return f"{filename}:{line}"


def _check(item: Any, path: str, found: _Found, ancestors: set[int]) -> None:
    if item is None or isinstance(item, (bool, int, str)):
        return
    if isinstance(item, float):
        if not math.isfinite(item):
            found.add(f"{path}: {item!r} is not JSON data (JSON has no NaN or infinity)")
        return
    if not isinstance(item, (list, dict)):
        name = type(item).__name__
        advice = "use .model_dump(mode='json')" if hasattr(item, "model_dump") else _ADVICE.get(name)
        if advice is None and hasattr(type(item), "__members__") and hasattr(item, "value"):
            advice = "use .value"  # an Enum member
        found.add(f"{path}: {name} is not JSON data" + (f" ({advice})" if advice else ""))
        return
    if id(item) in ancestors:
        found.add(f"{path}: the value contains itself (a cycle is not JSON data)")
        return
    ancestors.add(id(item))
    if isinstance(item, list):
        for index, child in enumerate(item):
            _check(child, f"{path}[{index}]", found, ancestors)
    else:
        for key, child in item.items():
            if not isinstance(key, str):
                found.add(f"{path}: key {key!r} is a {type(key).__name__}; JSON object keys are str")
                continue
            _check(child, f"{path}[{key!r}]", found, ancestors)
    ancestors.discard(id(item))
