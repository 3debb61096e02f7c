"""The phase boundary check: only JSON data crosses from one phase to the next."""

from __future__ import annotations

import math
from typing import Any

from .errors import JsonDataError

__all__ = ["check_json_data"]


def check_json_data(value: Any, where: str, fix: str) -> None:
    """Raise JsonDataError naming the first offending key path, e.g. `handoff['x'][2]`.

    JSON data is None, bool, int, finite float, str, list and dict with str keys;
    a tuple would come back as a list after a round trip, so it is refused too.
    """
    try:
        _check(value, where, fix, set())
    except RecursionError:
        raise JsonDataError(f"{where}: nested too deeply to check (or to encode as JSON); {fix}") from None


def _check(item: Any, path: str, fix: str, ancestors: set[int]) -> None:
    if item is None or isinstance(item, (bool, int, str)):
        return
    if isinstance(item, float):
        if not math.isfinite(item):
            raise JsonDataError(f"{path}: {item!r} is not JSON data (JSON has no NaN or infinity); {fix}")
        return
    if not isinstance(item, (list, dict)):
        hint = " (use .model_dump(mode='json'))" if hasattr(item, "model_dump") else ""
        raise JsonDataError(f"{path}: {type(item).__name__} is not JSON data{hint}; {fix}")
    if id(item) in ancestors:
        raise JsonDataError(f"{path}: the value contains itself (a cycle is not JSON data); {fix}")
    ancestors.add(id(item))
    if isinstance(item, list):
        for index, child in enumerate(item):
            _check(child, f"{path}[{index}]", fix, ancestors)
    else:
        for key, child in item.items():
            if not isinstance(key, str):
                raise JsonDataError(f"{path}: key {key!r} is a {type(key).__name__}; JSON object keys are str; {fix}")
            _check(child, f"{path}[{key!r}]", fix, ancestors)
    ancestors.discard(id(item))
