"""What the encoder and the decoder share: paths, the builtin types they know, hints."""

from __future__ import annotations

import dataclasses
import io
import math
import types
from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic import BaseModel

Extension = Callable[[Any, Callable[[Any, str], Any], str], "dict | None"]
DecodeExtension = Callable[[dict, Callable[[Any, str], Any], str], Any]


# Paths are built only when needed: a chain (parent, key) or (parent, key, format) down from a root name.
def format_path(path: Any) -> str:
    """The text of a path the codec hands an extension (built lazily: most are never shown)."""
    return _fmt(path)


def _fmt(path: Any) -> str:
    if type(path) is str:
        return path
    parts = []
    while type(path) is tuple:
        if len(path) == 2:
            path, key = path
            parts.append(f"[{key!r}]")
        else:
            path, key, how = path
            parts.append(how.format(key))
    parts.append(str(path))
    parts.reverse()
    return "".join(parts)


_ATTR = ".{}"


def _show(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


# Integers beyond this do not survive json.dumps (sys.int_max_str_digits); they travel as hex.
_BIG = 1 << 13_000
_NEG_BIG = -_BIG  # once: negating it in every check would build a 13000-bit int each time
_INLINE = frozenset({str, bool, type(None)})
_PLAIN = frozenset({list, dict, tuple, set, frozenset})
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

# Builtin iterator types, read through their own __reduce__ (introspection, not pickle).
_SEQ_ITERATORS = {
    type(iter(x))
    for x in ([], (), range(0), range(1 << 70), "a", "é", b"", bytearray(), {}, {}.values(), {}.items(), set())
} | {type(reversed(x)) for x in ([], (), {}, {}.values(), {}.items())}
_ITER_SOURCES = (list, tuple, str, bytes, bytearray, range)
_SEQUENCES = frozenset(_ITER_SOURCES)
# map/filter travel only with one of these functions (none of them runs code named by data).
_SAFE_FUNCS: dict[str, Any] = {
    f.__qualname__: f
    for f in (str, int, float, bool, bytes, tuple, list, abs, len, repr, ord, chr, round, sorted, str.strip)
}
_SAFE_FUNCS.update({f.__qualname__: f for f in (str.lower, str.upper, str.split, str.title, str.casefold)})
_SAFE_NAMES = {id(f): name for name, f in _SAFE_FUNCS.items()}  # by id: a callable need not be hashable

_PROCESS_MODULES = frozenset(
    "_thread threading socket _socket ssl _ssl select selectors subprocess multiprocessing asyncio _asyncio "
    "concurrent queue _queue sqlite3 _sqlite3 mmap signal contextvars _contextvars weakref _weakref".split()
)
_DATA_HINT = (
    "a snapshot holds data: None, bool, int, float, str, bytes, containers, datetime values, Decimal, UUID, "
    "Fraction, complex, enums, dataclasses, pydantic models, exceptions and builtin iterators; convert it "
    "before the yield"
)


def _why_not(x: Any) -> str:
    """The hint for a value the codec cannot carry."""
    if isinstance(x, io.IOBase):
        return "close it before the yield, or keep the path and reopen it after"
    if isinstance(x, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "make it @resumable so it compiles, or finish it before the yield"
    if isinstance(x, type):
        return "classes cannot travel; refer to the class by name after the yield"
    if isinstance(x, types.ModuleType):
        return "modules cannot travel; use a module-level import instead of a variable"
    if isinstance(x, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, partial)) or callable(x):
        return "only functions the compiler compiled can travel; refer to others by name after the yield"
    if any(c.__module__.partition(".")[0] in _PROCESS_MODULES for c in type(x).__mro__):
        return "it belongs to this process (a lock, thread, socket, ...) and cannot be moved to another process"
    return _DATA_HINT


def _lookup(obj: Any, qualname: str) -> Any:
    """Walk a qualname through __dict__ (no getattr hooks); None unless every step is a plain name."""
    for part in qualname.split("."):
        if not part.isidentifier() or part.startswith("__") or not isinstance(obj, (type, types.ModuleType)):
            return None
        obj = vars(obj).get(part)
    return obj


_MODEL_FIELDS: dict[type, frozenset[str]] = {}


def _model_fields(cls: type[BaseModel]) -> frozenset[str]:
    names = _MODEL_FIELDS.get(cls)
    if names is None:
        names = _MODEL_FIELDS[cls] = frozenset(cls.model_fields)
    return names


_DATACLASS_FIELDS: dict[type, tuple[str, ...]] = {}


def _dataclass_fields(cls: type) -> tuple[str, ...]:
    names = _DATACLASS_FIELDS.get(cls)
    if names is None:
        names = _DATACLASS_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names
