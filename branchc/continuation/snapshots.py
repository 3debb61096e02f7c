"""Snapshots: a suspended compiled generator as JSON data, and back.

    {"branchc": 2, "graph": {"classes": [...], "shapes": [...], "roots": {"gen": [0]}, "objects": [...]}}

The graph (see codec/__init__.py) names each class once, in its "classes" table, and each set of
field names once, in "shapes" (format 2; format 1 wrote them at every instance, and is refused
with a clear error). It holds the generator as an entry
`{"t": "gen", "fn": "module:qualname", "hash": ..., "state": ..., "label": k,
"vars": {...}, "free": {...}}`; nested compiled generators (a `yield from` in
progress, or one held in a variable) are entries of the same graph, so identity
and cycles survive. The runtime's Context handle travels as `{"t": "ctx"}` and is
re-bound on resume, never copied.

What a snapshot names is checked against the builds (see registry.py): compiled functions,
the classes a build records, value types and a fixed list of builtins. A snapshot is untrusted
input, so what each variable may hold is checked against what the compiler recorded the code can
put there (splitter/bindings.py, splitter/lower.py), before anything of the program runs:

- A callable the compiler saw the code bind to a variable (a method taken from an object, a
  global, a `with` manager's `__exit__`) travels as that binding, `{"t": "method" | "special" |
  "global"}`, and is rebuilt from the object or the name: a bound method is never restored
  anywhere else. Its method is the one the owner's class defines, read off the MRO's
  `__dict__`s (no `__getattr__`, property or descriptor of the class runs), and where the
  compiler knows what the owner is (`items = []`; `c = Counter()` of a global class that makes
  exactly its own instances; the `with Manager():` of an `__exit__`), the owner is exactly of
  that class: a forged `add = items.append` cannot become another recorded class's `append`.
  Where the compiler cannot tell (a parameter, an attribute), the owner may be any object a
  snapshot may hold, which is no more than forging the owner's variable itself could do.
- A `with`'s kept `__exit__` (`_bc_wxN`) is bound to the manager kept beside it (`_bc_wmN`): the
  very object, whose class is the one the `with` made where the compiler knows it.
- A variable every binding of which the compiler classifies (`value_kinds`) holds only what
  those make: exactly a builtin type for a display, literal or comprehension; an instance of
  exactly the global class it called (where that class makes only its own instances); a def
  or lambda of this very function, the one the bytecode stores there (registry.stored_functions;
  its name, where the bytecode does not say). So a kept lambda cannot become a recorded class
  (whose `__init__` would run when called) nor another function, in a variable or a cell.
- The exception a handler keeps (`_bc_excN`) is one its `except` clause catches, and one
  pending in a finally (`_bc_pendN`) an Exception or what can reach that finally. A
  BaseException that is not an Exception (GeneratorExit, KeyboardInterrupt, SystemExit, a
  class deriving from one) is taken only where the compiler's analysis allows one at that
  yield (FunctionMeta.catches: a clause naming it, GeneratorExit pending after a close() at a
  yield in the try, what the try raises by name), in that generator's variables (also inside
  containers, objects and exception chains; the kept or pending one itself only of its own
  clause's or finally's classes); one anywhere else (in a generator waiting where nothing
  around its yield can hold that class, or outside every generator) is refused at `snapshot()`
  and at `resume()`, so none is planted where nothing could have caught it, to escape
  `except Exception`.
- Decoding runs no code of the program's classes (see codec/__init__.py: no `__hash__` or
  `__eq__` of theirs either), and data nested deeper than DecodeLimits.max_depth, or JSON text
  deeper than the parser takes (`parse_json`), is a SnapshotDataError, never a RecursionError.

What no check here can tell is data forged within those bounds (other values of the kinds a
variable may hold, where the compiler cannot narrow them): sealing a record at rest keeps those out.

Most snapshots are of one generator holding plain data (messages as dicts or pydantic models,
counters, its loops' range iterators, the Context): `snapshot` and `resume` first try a short path
for exactly that (`_plain_snapshot`, `_plain_resume`, on codec.encode_plain / decode_plain), which
writes and reads the same data as the full path, within the same limits and checks; anything else,
including every error, goes the full way.

`dump_json` / `parse_json` are the JSON text of a snapshot: msgspec writes and reads it several times
faster than the json module, and the json module takes over wherever msgspec would not give exactly
what json gives (lone surrogates, NaN, ints past sys.int_max_str_digits, nesting past its depth).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import re
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from .codec import BUILTIN_TYPES, DEFAULT_LIMITS, DecodeLimits, decode, decode_plain, encode, encode_plain
from .codec.common import _not_an_exception, _show, slot_members
from .codec.plain import PlainTables
from .errors import NotSerializableError, SnapshotDataError, SnapshotError
from .generator import free_cells, is_compiled, make_generator, release, source_location, state
from .points import Migration, by_role, migration_for
from .registry import (
    NESTED_CODE,
    FunctionMeta,
    compiled,
    compiled_function,
    current,
    held,
    lookup,
    meta_of,
    nested_code,
    register_value_types,
    resolve_class,
    saved_module,
    stored_functions,
    travels,
)

__all__ = [
    "ContextHandle",
    "NotSerializableError",
    "SnapshotDataError",
    "SnapshotError",
    "check_version",
    "decode_graph",
    "dump_json",
    "encode_graph",
    "parse_json",
    "resume",
    "snapshot",
]


_PLAIN_EXTRAS: dict[type, dict] = {}

# Context managers of the standard library that hold only data: a `with` spanning a yield can keep them.
register_value_types(contextlib.suppress, contextlib.nullcontext)


class ContextHandle:
    """Base of the handle a generator gets from its runner (the runtime's Context): it never travels.
    A snapshot writes it as `{"t": "ctx"}`, and `resume(data, context=...)` binds the given one there."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _PLAIN_EXTRAS[cls] = {"t": "ctx"}  # the plain fast path writes it as the full path does


VERSION = 3
#: Formats this branchc reads: 2 is 3 without the suspension points of generator entries (a run in it cannot
#: move to a changed build: see `_moved`).
READS = (2, 3)


def check_version(data: Any, key: str, what: str) -> None:
    """Refuse a document whose format version (``data[key]``) is not one this branchc reads, saying which it is."""
    found = data.get(key) if type(data) is dict else None
    if found in READS and type(found) is int:
        return
    if type(found) is int and 0 < found < VERSION:
        problem = (
            f"{what} is in format {found}, written by an older branchc; this branchc reads formats "
            f"{', '.join(map(str, READS))} only (class references and field names in tables): make it again with "
            f"this version"
        )
    elif type(found) is int and found > VERSION:
        problem = f"{what} is in format {found}, written by a newer branchc; this branchc reads format {VERSION}"
    else:
        problem = f"expected {what} as {{{key!r}: {VERSION}, ...}}, got no format version"
    raise SnapshotDataError(key, problem)


# A string (to its end, or to the end of the text when it is not closed: linear, never backtracking) or a bracket.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]')


# msgspec reads and writes JSON several times faster than the json module. What it reads, it reads as
# json.loads does, and it refuses the rest, which json.loads then reads or refuses with its own error:
# lone surrogates (escaped, or in a str), NaN and Infinity, numbers that overflow a float, a BOM, and
# ints longer than sys.int_max_str_digits. It never turns an int into a float (as orjson does past 64 bits).
_fast_decode = msgspec.json.Decoder().decode
_fast_encode = msgspec.json.Encoder().encode
_TEXTS = (str, bytes, bytearray)


def dump_json(data: Any) -> str:
    """The JSON text of snapshot data (what `snapshot` and `encode_graph` return: JSON types only, finite
    floats), compact, other than ASCII as it is; parse_json and json.loads read back exactly that data.
    A str with a lone surrogate, which UTF-8 cannot hold, is written by the json module (escaped)."""
    try:
        return _fast_encode(data).decode("utf-8")
    except (TypeError, ValueError, OverflowError):
        return json.dumps(data, separators=(",", ":"))


def parse_json(text: str | bytes, what: str = "the snapshot", limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """The JSON value of a snapshot's (a saved run's, a step's) text, which is untrusted: text nested
    deeper than Python's json parser takes here (it recurses: 100,000 levels are a RecursionError in
    every CPython) is a SnapshotDataError naming the depth, the place and the limits, never a
    RecursionError; what parses and nests deeper than DecodeLimits.max_depth is refused by the decoder.
    Malformed JSON raises ValueError (json.JSONDecodeError), as json.loads does."""
    if type(text) in _TEXTS:
        try:
            return _fast_decode(text)
        except Exception:  # what msgspec refuses, json.loads reads or refuses, in its words
            pass
    try:
        return json.loads(text)
    except RecursionError:
        pass
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    depth = deepest = 0
    where = 0
    for match in _JSON_TOKENS.finditer(text):
        char = text[match.start()]
        if char == "[" or char == "{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, match.start()
        elif char == "]" or char == "}":
            depth -= 1
    line = text.count("\n", 0, where) + 1
    column = where - text.rfind("\n", 0, where)
    problem = (
        f"{what} is JSON nested {deepest:,} deep (its deepest bracket at line {line} column {column}), deeper than "
        f"Python's json parser takes within the recursion limit ({sys.getrecursionlimit():,}); a snapshot's values "
        f"nest at most DecodeLimits.max_depth = {limits.max_depth:,} deep"
    )
    raise SnapshotDataError("data", problem)


_HIDDEN = [
    (re.compile(r"_bc_it\d+"), "the iterator of a for loop"),
    (re.compile(r"_bc_yf\d+"), "the iterator of a `yield from`"),
    (re.compile(r"_bc_t\d+"), "a value computed before the yield"),
    (re.compile(r"_bc_exc\d+"), "the exception being handled"),
    (re.compile(r"_bc_pend\d+"), "the exception pending in a finally block"),
]


def _describe(variable: str, meta: FunctionMeta | None = None) -> str:
    if meta is not None and variable in meta.notes:
        return meta.notes[variable]
    for pattern, text in _HIDDEN:
        if pattern.fullmatch(variable):
            return text
    return f"variable {variable!r}"


#: Builtins a snapshot may name (a variable holding `len`, say): pure functions and types, nothing
#: that does I/O, builds classes or reaches attributes.
_SAFE_BUILTINS = frozenset(
    "abs all any ascii bin bool bytes callable chr dict divmod enumerate filter float format frozenset hash "
    "hex int isinstance issubclass iter len list map max min next oct ord pow range repr "
    "reversed round set slice sorted str sum tuple zip".split()
)


def _is_builtin_exception(value: Any) -> bool:
    """A builtin exception class that `except Exception` catches (SystemExit and kin never travel)."""
    return isinstance(value, type) and issubclass(value, Exception) and value.__module__ == "builtins"


def _escapes_except_exception(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Exception)


def _ref(value: Any) -> str | None:
    """'module:qualname' when a snapshot may name `value`: a compiled function reachable by its
    name, a class a build records, a safe builtin or builtin exception class."""
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module == "builtins":
        safe = qualname in _SAFE_BUILTINS or _is_builtin_exception(value)
        return f"builtins:{qualname}" if safe and getattr(builtins, qualname, None) is value else None
    if isinstance(value, type):
        if not travels(value) or _escapes_except_exception(value):
            return None
        return f"{saved_module(module)}:{qualname}"
    meta = getattr(value, "__branchc_meta__", None)
    if meta is None or meta.ref != f"{module}:{qualname}":
        return None
    target: Any = sys.modules.get(module)
    for part in qualname.split("."):
        target = vars(target).get(part) if isinstance(target, (type, types.ModuleType)) else None
    return meta.saved_ref if held(target) is value else None


_BOUND = (types.MethodType, types.BuiltinMethodType)


def _encode_binding(meta: FunctionMeta, variable: str, value: Any, child) -> list | None:
    """A callable the code bound to `variable`, as that binding; None when it is none of them."""
    kinds = meta.binds.get(variable)
    if not kinds:
        return None
    if isinstance(value, _BOUND):
        owner, name = value.__self__, value.__name__
        if owner is not None and not isinstance(owner, types.ModuleType) and value == _method(owner, name):
            for kind, tag in (("attr", "method"), ("special", "special")):
                if (kind, name) in kinds and _owner_problem(meta, kinds[kind, name], owner) is None:
                    return ["@", {"t": tag, "self": child(owner, (variable, "__self__", _ATTR)), "name": name}]
    for kind, name in kinds:
        if kind == "global" and value is meta.globals.get(name, getattr(builtins, name, _NOTHING)):
            return ["@", {"t": "global", "name": name}]
    return None


def _owner_problem(meta: FunctionMeta, owners: frozenset[str] | None, owner: Any) -> str | None:
    """Why `owner` cannot be the object a binding took its method from, or None: where the compiler
    knows what that object is (a list display, an instance of a global class), it is exactly of
    that class."""
    if owners is None:
        return None
    allowed = meta.allowed(owners)
    if allowed is None or type(owner) in allowed[0]:
        return None
    return f"the code takes that method only from {_kinds_text(owners)}, not from {_what(owner)}"


def _kinds_text(kinds: frozenset[str]) -> str:
    words = []
    for kind in sorted(kinds):
        if kind.startswith("new:"):
            words.append(f"an instance of {kind[4:]}")
        elif kind.startswith("def:"):
            words.append(f"its def {kind[4:]}")
        elif kind == "lambda":
            words.append("a lambda of its own")
        else:
            words.append(f"a {kind}")
    return " or ".join(words)


def _what(value: Any) -> str:
    """A value's kind in words, read off its type (nothing of it runs)."""
    kind = type(value)
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    if kind is types.FunctionType:
        return f"the function {value.__code__.co_qualname}"
    return f"a {kind.__qualname__}"


def _kind_problem(meta: FunctionMeta, variable: str, value: Any) -> str | None:
    """Why `value` cannot be what `variable` holds, or None: a variable whose every binding the compiler
    classified holds only what those bindings make (see splitter/bindings.py): exactly a builtin type
    of a display or literal, an instance of the global class it called, or a def or lambda of this
    very function, the one the code stores there (read off the bytecode) where it can tell."""
    kinds = meta.holds.get(variable)
    if kinds is None:
        return None
    allowed = _allowed_for(meta, variable, kinds)
    if allowed is None:
        return None
    classes, codes = allowed
    if type(value) in classes or (type(value) is types.FunctionType and value.__code__ in codes):
        return None
    return f"{meta.ref} keeps only {_kinds_text(kinds)} in {variable!r}, not {_what(value)}"


def _allowed_for(meta: FunctionMeta, variable: str, kinds: frozenset[str]) -> Any:
    key = ("variable", variable)
    found = meta.kinds.get(key, _NOTHING)
    if found is _NOTHING:
        found = meta.allowed(kinds)
        if found is not None and found[1]:  # defs and lambdas: the ones stored into this variable
            stored = stored_functions(meta).get(variable, frozenset())
            codes: set[types.CodeType] = set()
            for kind in kinds:
                if kind == "lambda" or kind.startswith("def:"):
                    name = "<lambda>" if kind == "lambda" else kind[4:]
                    named = {code for code in found[1] if code.co_name == name}
                    codes |= (named & stored) or named
            found = (found[0], frozenset(codes))
        meta.kinds[key] = found
    return found


_NOTHING = object()


def _encode_variables(meta: FunctionMeta, values: dict[str, Any], child) -> dict[str, Any]:
    out = {}
    for name, value in values.items():
        binding = _encode_binding(meta, name, value, child) if meta.binds else None
        out[name] = binding if binding is not None else child(value, name)
    return out


def _encode_generator(value: types.GeneratorType, child) -> dict:
    status, label, values = state(value)
    meta = meta_of(value.gi_code)
    try:
        encoded = _encode_variables(meta, values, child)
        free = {k: child(v, k) for k, v in free_cells(value).items()}
    except NotSerializableError as error:
        variable = error.path.split("[", 1)[0].split(".", 1)[0].split("<", 1)[0]
        where = source_location(value)
        raise NotSerializableError(
            f"{meta.qualname} (waiting at {where}): {_describe(variable, meta)}, at {error.path}",
            error.type_name,
            error.hint,
        ) from None
    held = _encoding.held
    if held is not None:  # for the check of the BaseExceptions it holds (see _check_encoded)
        held.append((meta, status, label, values, free_cells(value), value))
    encoder = getattr(child, "__self__", None)  # the codec's encoder: it memoizes what it has met
    if encoder is not None and type(encoder.memo.get(id(value))) is int:  # met again inside itself
        raise NotSerializableError(
            f"{meta.qualname} (waiting at {source_location(value)})",
            "generator",
            "it holds itself through its variables, and a resume builds a generator from its variables; "
            "drop the reference to it (or to the generator that holds it) before the yield",
        )
    return {
        "t": "gen",
        "fn": meta.saved_ref,
        "hash": meta.hash,
        "state": status,
        "label": label,
        "vars": encoded,
        "free": free,
        **_where(meta, status, label),
    }


def _where(meta: FunctionMeta, status: str, label: int) -> dict[str, Any]:
    """A suspended generator's point, what is live there (bound or not yet) and the form an elicitation there
    asks: what a changed build of its function needs to take it (`_moved`)."""
    if status != "suspended" or label not in meta.points:
        return {}
    return meta.where[label]


def _encode_extension(value: Any, child, path: str) -> dict | None:
    if type(value) is types.GeneratorType:
        return _encode_generator(value, child) if is_compiled(value) else None
    if isinstance(value, ContextHandle):
        return {"t": "ctx"}
    if isinstance(value, types.CellType):
        try:
            return {"t": "cell", "v": child(value.cell_contents, path)}
        except ValueError:
            return {"t": "cell"}  # empty: the variable is not bound yet
    if isinstance(value, types.FunctionType) and value.__code__ in NESTED_CODE:
        meta, code_path = NESTED_CODE[value.__code__]
        return {
            "t": "fn",
            "in": meta.saved_ref,
            "hash": meta.hash,
            "code": list(code_path),
            "closure": [child(cell, (path, "<closure>", _ATTR)) for cell in value.__closure__ or ()],
            "defaults": child(value.__defaults__, (path, "__defaults__", _ATTR)),
            "kwdefaults": child(value.__kwdefaults__, (path, "__kwdefaults__", _ATTR)),
            "dict": child(_own_attributes(value), (path, "__dict__", _ATTR)),
            "compiled": _compiled_key(value),
        }
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        ref = _ref(value)
        return {"t": "ref", "ref": ref} if ref else None
    return None


_encode_extension.declines = BUILTIN_TYPES  # type: ignore[attr-defined]  # never ours: the codec need not ask
_OWNED = (ContextHandle, types.CellType, types.FunctionType, types.BuiltinFunctionType, type)


def _owns(kind: type) -> bool:
    """The types whose values `_encode_extension` may write (it returns None for every other value)."""
    return kind is types.GeneratorType or issubclass(kind, _OWNED)


_encode_extension.owns = _owns  # type: ignore[attr-defined]  # asked once per type by the codec


class _Encoding(threading.local):
    held: list[tuple] | None = None  # (meta, state, label, values, cells, generator) of each generator encoded


_encoding = _Encoding()


def _encoded(roots: dict[str, Any], extension: Any) -> dict[str, Any]:
    """`encode` of a snapshot's roots: BaseExceptions that are not Exceptions are taken where the
    generators holding them may hold them (see _check_placed), and refused elsewhere."""
    found: list[BaseException] = []
    outer, _encoding.held = _encoding.held, []
    try:
        graph = encode(roots, extension=extension, classes=travels, base_exceptions=found)
        if found:
            _check_encoded(_encoding.held, found, roots)
    finally:
        _encoding.held = outer
    return graph


def _check_encoded(held: list[tuple], found: list[BaseException], roots: Any) -> None:
    wrong = _misplaced(held, found, roots)
    if wrong is None:
        return
    entry, name, exception, names = wrong
    kind = type(exception)
    problem = f"{kind.__qualname__} is a BaseException but not an Exception (it would escape `except Exception`)"
    where = "the snapshot"
    if entry is not None:
        meta = entry[0]
        where = f"{meta.qualname} (waiting at {source_location(entry[5])}): {_describe(name, meta)}"
        allowed = ", ".join(names) if names else "none"
    else:
        allowed = "none: it is held by no generator"
    hint = (
        f"{problem}; a snapshot holds one only where an except clause or a finally around the yield can hold "
        f"it (here: {allowed}): handle it before the yield, or keep only what you need of it"
    )
    raise NotSerializableError(where, f"{kind.__module__}.{kind.__qualname__}", hint)


def encode_graph(roots: dict[str, Any], extension: Any = None) -> dict[str, Any]:
    """Several roots in one object graph; `extension(value, child, path)` is asked first about every
    value (a runner's own handles, say), and the compiled generators, cells and functions are
    written as `snapshot` writes them."""
    if extension is None:
        return _encoded(roots, _encode_extension)

    def both(value: Any, child: Any, path: Any) -> dict | None:
        return extension(value, child, path) or _encode_extension(value, child, path)

    both.declines = BUILTIN_TYPES  # type: ignore[attr-defined]
    owns = getattr(extension, "owns", None)
    if owns is not None:  # the caller's extension says which types it may write: ask only about those
        both.owns = lambda kind: owns(kind) or _owns(kind)  # type: ignore[attr-defined]
    return _encoded(roots, both)


def _plain_snapshot(generator: types.GeneratorType) -> dict[str, Any] | None:
    """The common case, in short: variables of plain data and models of it (see codec.encode_plain)
    and no closure. The same data as the full path writes; None when it does not apply."""
    if generator.gi_code.co_freevars:
        return None
    status, label, values = state(generator)
    tables = PlainTables(travels)
    encoded = encode_plain(values, _PLAIN_EXTRAS, tables)
    if encoded is None:
        return None
    meta = meta_of(generator.gi_code)
    entry = {"t": "gen", "fn": meta.saved_ref, "hash": meta.hash, "state": status, "label": label, "vars": encoded}
    entry["free"] = {}
    entry.update(_where(meta, status, label))
    graph = tables.tables()  # "classes" and "shapes" when models were written, as `encode` writes them
    graph["roots"] = {"gen": ["@", entry]}
    graph["objects"] = []
    return {"branchc": VERSION, "graph": graph}


def snapshot(generator: types.GeneratorType) -> dict[str, Any]:
    """The whole continuation of a compiled generator as JSON data (json.dumps always succeeds)."""
    if not is_compiled(generator):
        kind = "a native generator" if type(generator) is types.GeneratorType else f"a {type(generator).__name__}"
        raise TypeError(
            f"snapshot() takes a generator of a compiled function, not {kind}; compile its function with "
            f"`branchc compile` (or mark it @resumable and compile the module)"
        )
    data = _plain_snapshot(generator)
    if data is not None:
        return data
    return {"branchc": VERSION, "graph": _encoded({"gen": generator}, _encode_extension)}


# Child paths are chains (parent, key, format), formatted by the codec only if an error names them.
_ATTR = ".{}"
_FN_FIELDS = frozenset({"t", "in", "hash", "code", "closure", "defaults", "kwdefaults", "dict", "compiled"})
_GEN_FIELDS = frozenset({"t", "fn", "hash", "state", "label", "vars", "free"})
_GEN_WHERE = frozenset({"point", "live", "asks"})  # a suspended generator's point (format 3)


def _function(entry: dict, child, path: str, allowed: frozenset[str] | None) -> types.FunctionType:
    """A function defined inside a compiled generator: its code by position, its cells shared."""
    if entry.keys() != _FN_FIELDS:
        raise SnapshotDataError(path, f"a function entry has exactly the fields {sorted(_FN_FIELDS)}")
    if type(entry["hash"]) is not str:
        raise SnapshotDataError(f"{path}.hash", "expected a string")
    meta = lookup(entry["in"], entry["hash"], allowed)
    code = nested_code(meta, entry["code"])
    if code is None:
        raise SnapshotDataError(f"{path}.code", f"{meta.ref} has no nested function at {_show(entry['code'])}")
    if type(entry["closure"]) is not list or len(entry["closure"]) != len(code.co_freevars):
        raise SnapshotDataError(f"{path}.closure", f"expected {len(code.co_freevars)} cells")
    closure = tuple(child(cell, (path, i, ".closure[{}]")) for i, cell in enumerate(entry["closure"]))
    if not all(type(cell) is types.CellType for cell in closure):
        raise SnapshotDataError(f"{path}.closure", "expected cells")
    defaults = child(entry["defaults"], (path, "defaults", _ATTR))
    kwdefaults = child(entry["kwdefaults"], (path, "kwdefaults", _ATTR))
    attributes = child(entry["dict"], (path, "dict", _ATTR))
    if not (defaults is None or type(defaults) is tuple) or not (kwdefaults is None or type(kwdefaults) is dict):
        raise SnapshotDataError(path, "defaults must be a tuple and kwdefaults a dict (or null)")
    if type(attributes) is not dict:
        raise SnapshotDataError(f"{path}.dict", "expected a dict")
    if marks := _MARKS.intersection(attributes):
        raise SnapshotDataError(f"{path}.dict", f"{sorted(marks)[0]} is the compiler's mark, never data")
    function = types.FunctionType(code, meta.globals, code.co_name, defaults, closure or None)
    function.__kwdefaults__ = kwdefaults
    function.__dict__.update(attributes)
    key = entry["compiled"]
    if key is not None:  # a compiled nested function: registered again, as its def registered it
        table = meta.globals["_bc_META"]
        if type(key) is not str or key != code.co_qualname or key not in table["functions"]:
            raise SnapshotDataError(f"{path}.compiled", f"{_show(key)} is not the compiled function at this code")
        compiled(table, key)(function)
    return function


#: What the splitter's `compiled` mark puts on a function: rebuilt from the code when it comes back.
_MARKS = frozenset({"__branchc_table__", "__branchc_meta__", "__branchc_compiled__"})


def _own_attributes(function: types.FunctionType) -> dict[str, Any]:
    return {name: value for name, value in function.__dict__.items() if name not in _MARKS}


def _compiled_key(function: types.FunctionType) -> str | None:
    table = function.__dict__.get("__branchc_table__")
    return None if table is None else table[1]


def _resolve_ref(entry: dict, path: str, allowed: frozenset[str] | None) -> Any:
    """A function or class by name: only what `_ref` writes (never an attribute chain)."""
    ref = entry.get("ref")
    if set(entry) != {"t", "ref"} or type(ref) is not str or ref.count(":") != 1:
        raise SnapshotDataError(path, "a ref entry is {t, ref} with ref 'module:qualname'")
    module_name, qualname = ref.split(":")
    if module_name == "builtins":
        found = vars(builtins).get(qualname) if qualname.isidentifier() else None
        if qualname not in _SAFE_BUILTINS and not _is_builtin_exception(found):
            raise SnapshotDataError(f"{path}.ref", f"{ref} is not a builtin a snapshot may name")
        return found
    try:
        if "." not in qualname or "<" in qualname:
            known = _known_kind(ref, allowed)
            if known is not None:
                return known
        return compiled_function(ref, allowed)
    except SnapshotError as error:
        raise SnapshotDataError(f"{path}.ref", str(error)) from None


def _known_kind(ref: str, allowed: frozenset[str] | None) -> Any:
    """A class a build records, or None (then `ref` must be a compiled function)."""
    try:
        found = resolve_class(ref, allowed)
    except SnapshotError:
        return None
    if _escapes_except_exception(found):
        raise SnapshotError(f"{ref} is a BaseException that is not an Exception: a snapshot may not name it")
    return found


def _decode_binding(meta: FunctionMeta, variable: str, entry: dict, child, path: Any) -> Any:
    """A callable the code bound to `variable` (see `_encode_binding`), rebuilt from its object or name."""
    tag, name = entry.get("t"), entry.get("name")
    kinds = meta.binds.get(variable, {})
    where = f"{path}.vars[{variable!r}]"
    if type(name) is not str or (tag, name) not in {("method" if k == "attr" else k, n) for k, n in kinds}:
        raise SnapshotDataError(
            where, f"{meta.ref} binds no {tag} {_show(name)} to {variable!r}: a snapshot may not put it there"
        )
    if tag == "global":
        if set(entry) != {"t", "name"}:
            raise SnapshotDataError(where, "a global entry is {t, name}")
        found = meta.globals.get(name, vars(builtins).get(name, _NOTHING))
        if found is _NOTHING:
            raise SnapshotDataError(where, f"{name!r} is not defined in {meta.module}")
        return found
    if set(entry) != {"t", "self", "name"}:
        raise SnapshotDataError(where, f"a {tag} entry is {{t, self, name}}")
    owner = child(entry["self"], (path, variable, ".vars[{!r}].self"))
    problem = _owner_problem(meta, kinds["attr" if tag == "method" else tag, name], owner)
    if problem is not None:
        raise SnapshotDataError(f"{where}.self", problem)
    method = _method(owner, name)
    if method is None:
        raise SnapshotDataError(where, f"a {type(owner).__name__} has no method {name!r}")
    return method


_METHOD_KINDS = (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)


def _method(owner: Any, name: str) -> Any:
    """`owner.name` when it is a method its class defines (a def, or a builtin type's method), bound
    without running anything of the class: no __getattr__, property or descriptor of its own."""
    cls = type(owner)
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _NOTHING)
        if found is not _NOTHING:
            return found.__get__(owner, cls) if type(found) in _METHOD_KINDS else None
    return None


_TOP_FIELDS = frozenset({"branchc", "graph"})
_GRAPH_FIELDS = frozenset({"roots", "objects"})
_GRAPH_TABLES = _GRAPH_FIELDS | {"classes", "shapes"}
_SCALARS = frozenset({str, int, float, bool, type(None)})  # JSON scalars decode to themselves
_STATES = ("created", "suspended", "done")


def _generator(entry: dict, child, path: str, allowed: frozenset[str] | None, made: _Made) -> types.GeneratorType:
    """A compiled generator entry: checked, its variables decoded; it is built once the whole graph is."""
    if not _GEN_FIELDS <= entry.keys() <= _GEN_FIELDS | _GEN_WHERE:
        raise SnapshotDataError(
            path, f"a generator entry has the fields {sorted(_GEN_FIELDS)}, and {sorted(_GEN_WHERE)} when suspended"
        )
    state, label = entry["state"], entry["label"]
    if type(state) is not str or state not in _STATES:
        raise SnapshotDataError(f"{path}.state", f"expected created, suspended or done, got {_show(state)}")
    if type(entry["hash"]) is not str:
        raise SnapshotDataError(f"{path}.hash", "expected a string")
    variables, cells = entry["vars"], entry["free"]
    if type(variables) is not dict:
        raise SnapshotDataError(f"{path}.vars", "expected an object of variables")
    moved, migration = False, None
    try:
        meta = lookup(entry["fn"], entry["hash"], allowed)
    except SnapshotError as error:
        if state == "suspended" and "point" in entry:
            meta, label, variables, migration = _moved(entry, allowed, path)
        elif state != "suspended":
            meta, variables = _moved_unstarted(entry, allowed, path, error)
        else:
            raise SnapshotError(f"{path}.{error}") from None
        moved = True
    if state == "suspended" and (type(label) is not int or label not in meta.sites):
        raise SnapshotDataError(f"{path}.label", f"{meta.ref} has no suspension point {_show(label)}")
    if "point" in entry and not moved:
        _check_form(entry, meta, label, f"{path}: {meta.ref} waits at point {entry['point']!r}")
    if type(cells) is not dict:
        raise SnapshotDataError(f"{path}.free", "expected an object of variables")
    allowed_names = _restorable_at(meta, state, label)
    if migration is None and not allowed_names.issuperset(variables):
        unknown = sorted(variables.keys() - allowed_names)[0]
        raise SnapshotDataError(f"{path}.vars", f"{meta.ref} keeps no variable {unknown!r} at {state} {label}")
    values = {}
    for name, value in variables.items():
        if type(value) in _SCALARS:
            values[name] = value
        elif _is_binding(value):
            values[name] = _decode_binding(meta, name, value[1], child, path)
        else:
            values[name] = child(value, (path, name, ".vars[{!r}]"))
    free = {name: child(value, (path, name, ".free[{!r}]")) for name, value in cells.items()} if cells else {}
    if migration is not None:
        values = _migrated(entry, meta, label, values, migration, path)
    if state == "suspended":
        _check_internals(meta, allowed_names, values, path, label)
    if meta.holds:
        try:
            _check_kinds(meta, values, path)
        except SnapshotDataError as error:
            if not moved:
                raise
            how = "without a migration" if migration is None else f"as {migration.describe()} leaves it"
            raise SnapshotError(
                f"{path}: {meta.ref} waits at point {entry['point']!r}, saved by another build, where a variable holds "
                f"what this build's code cannot put there ({error}): it cannot continue here {how}"
            ) from None
    if free:
        freevars = meta.body_code.co_freevars
        for name, cell in free.items():
            if name not in freevars or name in meta.type_cells or type(cell) is not types.CellType:
                raise SnapshotDataError(f"{path}.free[{name!r}]", f"{meta.ref} closes over no such cell")
            try:
                problem = _kind_problem(meta, name, cell.cell_contents) if name in meta.holds else None
            except ValueError:  # an empty cell: the variable is not bound yet
                problem = None
            if problem is not None:
                raise SnapshotDataError(f"{path}.free[{name!r}]", problem)
    try:
        generator = make_generator(meta, state, label, values, free)
    except (TypeError, ValueError) as error:  # arguments a not-started generator cannot take, say
        raise SnapshotDataError(path, f"cannot restore: {type(error).__name__}: {error}") from None
    made.append(generator)
    made.held.append((meta, state, label, values, free, path))
    return generator


def _moved(
    entry: dict, allowed: frozenset[str] | None, path: str
) -> tuple[FunctionMeta, int, dict[str, Any], Migration | None]:
    """A suspended generator of another build of its function, moved to this one: (this build's function, the
    label of its point here, its variables by their names here, and the migration they go through, if any).

    As it is, where its point is compatible (what `branchc compat` calls so): the point is here, an elicitation
    there asks the same form, and it carries the same variables (the compiler's own compared by role,
    continuation/points.py), or more here, each a parameter with a literal default (given that default). Else
    through the migration the author wrote for the point (continuation/points.py), the variables returned as they
    are for `_migrated` once they are decoded. Each value is then checked as any snapshot's is, against what this
    build's code can put in its variable. Anything else is a SnapshotError that names the point and what differs."""
    point, variables, live = entry["point"], entry["vars"], entry.get("live")
    if type(point) is not str or type(entry.get("asks", "")) is not str:
        raise SnapshotDataError(f"{path}.point", "expected the point's name")
    if type(live) is not list or any(type(name) is not str for name in live) or not variables.keys() <= set(live):
        raise SnapshotDataError(f"{path}.live", "expected the names live at the point, its variables among them")
    where = f"{path}: {entry['fn']} waits at point {point!r}, saved by another build (code hash {entry['hash']})"
    try:
        meta = current(entry["fn"], allowed)
    except SnapshotError as error:  # not in this build at all
        raise SnapshotError(f"{path}.{error} (the run waits in it at point {point!r})") from None
    labels = {name: label for label, name in meta.points.items()}
    label, old = labels.get(point), by_role(live)
    problem = "this build of it has no such point"
    if label is not None:
        new = by_role(meta.live.get(label, ()))
        problem = _incompatible(entry, meta, label, old, new)
        if problem is None:
            here = {role: name for name, role in new.items()}
            moved = {here[old[name]]: value for name, value in variables.items()}
            for name, role in new.items():
                if role not in old.values():
                    moved[name] = meta.defaults[name]
            return meta, label, moved, None
    migration = migration_for(meta.ref, point)
    if migration is None:
        raise SnapshotError(f"{where}; {problem}: it cannot continue here without a migration")
    label = labels.get(migration.to)
    if label is None:
        raise SnapshotError(f"{where}; {migration.describe()} moves it to a point this build of it does not have")
    new = by_role(meta.live.get(label, ()))
    made = sorted({r for r in old.values() if r[0] == "~"} ^ {r for r in new.values() if r[0] == "~"})
    if made:
        raise SnapshotError(
            f"{where}; the loops, `with` blocks and handlers around point {migration.to!r} differ from those around "
            f"{point!r} ({', '.join(made)}): {migration.describe()} cannot move it"
        )
    return meta, label, variables, migration


def _moved_unstarted(
    entry: dict, allowed: frozenset[str] | None, path: str, error: SnapshotError
) -> tuple[FunctionMeta, dict[str, Any]]:
    """A generator of another build not started yet (its variables: its arguments), or finished (none), moved to
    this one where its function takes the same parameters (or more, each with a literal default, which it
    gets); else the SnapshotError of the code it names."""
    try:
        meta = current(entry["fn"], allowed)
    except SnapshotError:
        raise SnapshotError(f"{path}.{error}") from None
    variables = dict(entry["vars"])
    if entry["state"] == "created":
        params = _restorable_at(meta, "created", None)
        missing = params - variables.keys()
        if variables.keys() - params or not missing <= meta.defaults.keys():
            raise SnapshotError(f"{path}.{error}; this build's {meta.ref} takes other parameters") from None
        variables.update({name: meta.defaults[name] for name in missing})
    return meta, variables


def _incompatible(entry: dict, meta: FunctionMeta, label: int, old: dict[str, str], new: dict[str, str]) -> str | None:
    """Why a run waiting at the same point in another build cannot go on here as it is; None when it can."""
    if entry.get("asks") != meta.asks.get(label):
        return f"the form it asked ({entry.get('asks')}) is not the form this build asks there ({meta.asks.get(label)})"
    gone = sorted(name for name, role in old.items() if role not in new.values())
    added = sorted(name for name, role in new.items() if role not in old.values() and name not in meta.defaults)
    parts = [f"this build no longer carries {', '.join(gone)}" if gone else ""]
    parts.append(f"it carries {', '.join(added)} (without a literal default) there" if added else "")
    return "; ".join(part for part in parts if part) or None


def _migrated(
    entry: dict, meta: FunctionMeta, label: int, values: dict[str, Any], migration: Migration, path: str
) -> dict[str, Any]:
    """The variables of a run moved by an author's migration: the compiler's by role, the author's as the migration
    returns them from the old point's (every name one this build has live at the new point)."""
    where = f"{path}: {meta.ref} waits at point {entry['point']!r}, saved by another build; {migration.describe()}"
    old, here = by_role(entry["live"]), {role: name for name, role in by_role(meta.live.get(label, ())).items()}
    made = {here[old[name]]: value for name, value in values.items() if old[name][0] == "~"}
    own = {name: value for name, value in values.items() if old[name][0] != "~"}
    try:
        result = migration.fn(own)
    except Exception as error:
        raise SnapshotError(f"{where} raised {type(error).__name__}: {error}") from None
    if type(result) is not dict or any(type(name) is not str for name in result):
        raise SnapshotError(f"{where} returned {type(result).__name__}, not a dict of variables by name")
    live = {name for name, role in by_role(meta.live.get(label, ())).items() if role[0] != "~"}
    if unknown := sorted(result.keys() - live):
        raise SnapshotError(
            f"{where} returned {', '.join(unknown)}, which {meta.ref} does not keep at point {migration.to!r} (it "
            f"keeps {', '.join(sorted(live)) or 'nothing'})"
        )
    return {**made, **result}


def _check_form(entry: dict, meta: FunctionMeta, label: int, where: str) -> None:
    """An elicitation a run waits on was asked with a form (its schema class's source): this code must ask the
    same one there, or the answer to the old form would be read as the new one (the class may change while
    the function does not)."""
    if entry.get("asks") != meta.asks.get(label):
        raise SnapshotError(
            f"{where}; the form it asked ({entry.get('asks')}) is not the form this build asks there "
            f"({meta.asks.get(label)}): it cannot continue here without a migration"
        )


def _check_kinds(meta: FunctionMeta, values: dict[str, Any], path: str) -> None:
    for name, value in values.items():
        if name in meta.holds:
            problem = _kind_problem(meta, name, value)
            if problem is not None:
                raise SnapshotDataError(f"{path}.vars[{name!r}]", problem)


_COMPLETIONS = frozenset({"return", "break", "continue"})


def _check_internals(meta: FunctionMeta, live: frozenset[str], values: dict[str, Any], path: str, label: int) -> None:
    """The compiler's own variables at a suspension point are always bound, and hold what it put
    there: a resume must not fail inside the generated code (nor raise what no program raises).
    The exception a handler keeps is one its `except` clause catches, and one pending in a finally
    an Exception, or a BaseException the analysis finds can reach it (see `catches`); a `with`'s
    kept __exit__ is the one of the kept manager, bound to it."""
    catches = meta.catches.get(label, {})
    for name, kind in meta.internals.items():
        if name not in live:
            continue
        where = f"{path}.vars[{name!r}]"
        if name not in values:
            raise SnapshotDataError(f"{path}.vars", f"{meta.ref} needs {_describe(name, meta)} ({name}) here")
        value = values[name]
        problem = None
        if kind in ("it", "yf"):
            ok = any("__next__" in klass.__dict__ for klass in type(value).__mro__)
        elif kind == "exc":
            ok = isinstance(value, BaseException)
            problem = _caught_problem(meta, catches.get(name), value) if ok else None
        elif kind == "pend":
            ok = value is None or isinstance(value, BaseException) or (type(value) is str and value in _COMPLETIONS)
            problem = _caught_problem(meta, catches.get(name), value, pending=True) if ok else None
        elif kind == "wf":
            ok = type(value) is bool
        elif kind == "case":
            ok = type(value) is int
        elif kind == "wx":  # a binding (checked where it was decoded), of the manager kept beside it
            ok = type(value) in _BOUND
            manager = values.get(name.replace("_bc_wx", "_bc_wm"), _NOTHING)
            if ok and manager is not _NOTHING and value.__self__ is not manager:
                problem = f"{_describe(name, meta)} is not bound to the manager kept beside it ({_what(manager)})"
        else:  # wm: what it holds is checked by its kind (see _kind_problem)
            ok = True
        if not ok:
            what = _describe(name, meta)
            raise SnapshotDataError(where, f"{what} cannot hold an object of type {type(value).__name__}")
        if problem is not None:
            raise SnapshotDataError(where, problem)


def _caught_problem(meta: FunctionMeta, names: tuple[str, ...] | None, value: Any, pending: bool = False) -> str | None:
    """Why an exception cannot be the one a handler keeps (the one pending in a finally), or None:
    a handler keeps what its clause catches (an Exception, where the clause is not known until it
    runs); a finally, an Exception, or a BaseException that the analysis finds can reach it."""
    if not isinstance(value, BaseException):
        return None
    base = _not_an_exception(type(value)) is not None
    if pending and not base:
        return None
    classes = meta.exception_classes(names) if names is not None else None
    if classes is None:
        if not base:
            return None
        what = "the finally's try" if pending else "its except clause"
        return f"a {type(value).__qualname__} is a BaseException that is not an Exception, and {what} cannot hold one"
    if _caught(type(value), classes):
        return None
    where = "can be pending in this finally" if pending else "its except clause catches"
    return f"a {type(value).__qualname__} is not what {where} ({', '.join(names)})"


def _caught(kind: type, classes: tuple[type, ...]) -> bool:
    """Whether `except classes` catches an exception of this class (its MRO, read off the type: no hook)."""
    mro = type.__dict__["__mro__"].__get__(kind)
    return any(cls in mro for cls in classes)


_BINDINGS = frozenset({"method", "special", "global"})


def _is_binding(value: Any) -> bool:
    return (
        type(value) is list
        and len(value) == 2
        and value[0] == "@"
        and type(value[1]) is dict
        and type(value[1].get("t")) is str
        and value[1]["t"] in _BINDINGS
    )


def _restorable_at(meta: FunctionMeta, state: str, label: Any) -> frozenset[str]:
    """The variables a snapshot in this state may hold: the live ones at a suspension point, the
    parameters of a generator not started yet, none once it is done."""
    if state == "suspended":
        return meta.live.get(label, meta.restorable)
    if state == "created":
        code = meta.body_code
        count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        return frozenset(code.co_varnames[:count]) - {"_bc_C"}  # CO_VARARGS, CO_VARKEYWORDS
    return frozenset()


def _plain_resume(
    graph: Any, context: Any, allowed: frozenset[str] | None, limits: DecodeLimits
) -> types.GeneratorType | None:
    """The common case, in short: one generator of plain variables and models of them (see
    codec.decode_plain), no closure. The same generator as the full path builds; None when it does
    not apply (then the full path runs, and reports what is wrong)."""
    if type(graph) is not dict:
        return None
    keys = graph.keys()
    if keys == _GRAPH_FIELDS:
        tables = None
    elif _GRAPH_FIELDS <= keys <= _GRAPH_TABLES:
        tables = PlainTables.read(graph, _resolver(allowed), limits)
        if tables is None:
            return None
    else:
        return None
    roots, objects = graph["roots"], graph["objects"]
    if type(roots) is not dict or len(roots) != 1 or type(objects) is not list or objects:
        return None
    root = roots.get("gen")
    if type(root) is not list or len(root) != 2 or type(root[0]) is not str or root[0] != "@":
        return None
    entry = root[1]
    if type(entry) is not dict or entry.keys() - _GEN_WHERE != _GEN_FIELDS or entry["t"] != "gen":
        return None
    state, label, variables, free = entry["state"], entry["label"], entry["vars"], entry["free"]
    if state not in _STATES or type(entry["hash"]) is not str or type(variables) is not dict:
        return None
    if type(free) is not dict or free:
        return None
    try:
        meta = lookup(entry["fn"], entry["hash"], allowed)
    except SnapshotError:
        return None
    if state == "suspended" and (type(label) is not int or label not in meta.sites):
        return None
    if entry.get("asks") != meta.asks.get(label) and "point" in entry:
        return None  # the full path refuses it, saying why
    live = _restorable_at(meta, state, label)
    if not live.issuperset(variables) or meta.body_code.co_freevars:
        return None
    # decode counts the root and its ["@", entry] (3 values), and nests the variables one level inside it
    values = decode_plain(variables, {"ctx": context}, limits=limits, tables=tables, level=2, counted=3)
    if values is None:
        return None
    try:
        if state == "suspended":
            _check_internals(meta, live, values, "", label)
        if meta.holds:
            _check_kinds(meta, values, "")
    except SnapshotDataError:
        return None  # the full path reports it, with the place
    try:
        return make_generator(meta, state, label, values, {})
    except (TypeError, ValueError):
        return None  # the full path reports it


def _single_context(entry: dict, path: str, context: Any) -> Any:
    if entry.keys() != {"t"}:
        raise SnapshotDataError(path, "a context entry has no fields besides t")
    return context


def _decode_extension(
    allowed: frozenset[str] | None, context, made: _Made, runner_tags: frozenset[str] = frozenset({"ctx"})
) -> Any:
    """The codec's decode extension for compiled generators, cells, nested functions, refs and
    methods; `context(entry, child, path)` restores a Context entry and every entry of the runner's
    own `runner_tags`."""

    def extension(entry: dict, child, path: str) -> Any:
        tag = entry.get("t")
        if tag == "gen":
            return _generator(entry, child, path, allowed, made)
        if type(tag) is str and tag in runner_tags:
            return context(entry, child, path)
        if tag == "ref":
            return _resolve_ref(entry, path, allowed)
        if tag == "cell":
            if not set(entry) <= {"t", "v"}:
                raise SnapshotDataError(path, "a cell entry is {t} or {t, v}")
            cell = types.CellType()
            child.created(cell)
            if "v" in entry:
                cell.cell_contents = child(entry["v"], (path, "v", _ATTR))
            return cell
        if tag == "fn":
            return _function(entry, child, path, allowed)
        if type(tag) is str and tag in _BINDINGS:
            raise SnapshotDataError(
                path, f"a {tag} entry may only be the value of a variable the compiled code binds it to"
            )
        raise SnapshotDataError(f"{path}.t", f"unknown tag {_show(tag)}")

    return extension


def decode_graph(
    graph: Any,
    context: Any,
    allowed: frozenset[str] | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
    runner_tags: frozenset[str] = frozenset({"ctx"}),
) -> dict[str, Any]:
    """The roots of `encode_graph`'s graph; `context(entry, child, path)` restores each context
    entry (and each entry whose tag is one of the runner's `runner_tags`), and `allowed`, when given,
    narrows the modules the data may name."""
    made = _Made()
    found: list[BaseException] = []
    with _released_on_failure(made):
        extension = _decode_extension(allowed, context, made, runner_tags)
        roots = decode(graph, classes=_resolver(allowed), extension=extension, limits=limits, base_exceptions=found)
        if found:
            _check_placed(made.held, found, roots)
        return roots


class _Made(list):
    """The generators a decoding rebuilt, and `held`: (meta, state, label, values, cells, path) of each."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple] = []


# -- BaseExceptions that are not Exceptions --------------------------------------------------------
#
# A snapshot may hold one (a GeneratorExit, a KeyboardInterrupt, a SystemExit, a user's class
# deriving from one) only where the compiler's analysis says one can be (FunctionMeta.catches):
# as the exception a handler keeps, of a class its `except` clause names; as the one pending in a
# finally, of a class that can reach it (GeneratorExit, when a yield lies in its try; what its
# `raise` statements name); and, in any variable of that generator (in containers, objects and
# exception chains too, but not inside another generator, which is checked on its own), of a class
# one of those can hold at that yield. Every one the codec met must sit in such a place: none is
# planted where nothing around the yield could have caught it, to escape `except Exception`.


def _placement(meta: FunctionMeta, status: str, label: Any) -> tuple[tuple[type, ...], list[str]]:
    """The exception classes the handlers and finally blocks around this yield can hold, and their names."""
    if status != "suspended":
        return (), []
    classes: list[type] = []
    names: list[str] = []
    for caught in meta.catches.get(label, {}).values():
        found = meta.exception_classes(caught)
        if found is not None:
            classes += found
            names += [name for name in caught if name not in names]
    return tuple(classes), names


def _misplaced(held: list[tuple], found: list[BaseException], roots: Any) -> tuple | None:
    """(the generator's entry, the variable, the exception, what may be held there) for the first
    BaseException that is not an Exception and sits where nothing around its yield can hold it: in
    a generator's variables, or in the roots outside any generator (its entry then None)."""
    for exception in _base_exceptions_in(roots):
        return None, None, exception, []
    placed: set[int] = set()
    for entry in held:
        meta, status, label, values, cells = entry[:5]
        classes, names = _placement(meta, status, label)
        contents = dict(values)
        for name, cell in cells.items():
            try:
                contents.setdefault(name, cell.cell_contents)
            except ValueError:
                pass  # empty: not bound yet
        for name, value in contents.items():
            for exception in _base_exceptions_in(value):
                if not _caught(type(exception), classes):
                    return entry, name, exception, names
                placed.add(id(exception))
    for exception in found:
        if id(exception) not in placed:
            return None, None, exception, []
    return None


def _check_placed(held: list[tuple], found: list[BaseException], roots: Any) -> None:
    wrong = _misplaced(held, found, roots)
    if wrong is None:
        return
    entry, name, exception, names = wrong
    what = f"a {type(exception).__qualname__}, a BaseException that is not an Exception"
    if entry is None:
        raise SnapshotDataError(
            "graph", f"{what}, is held where no except clause or finally around a generator's yield can hold one"
        )
    meta, path = entry[0], entry[5]
    allowed = ", ".join(names) if names else "none here"
    raise SnapshotDataError(
        f"{path}.vars[{name!r}]",
        f"{what}: {meta.ref} holds one only where an except clause or a finally around the yield can ({allowed})",
    )


_LEAVES = frozenset({str, int, float, bool, bytes, bytearray, complex, type(None)})


def _base_exceptions_in(value: Any) -> Iterator[BaseException]:
    """The BaseExceptions that are not Exceptions a value holds: itself, in containers (keys too),
    exception args, attributes and chains, objects' attributes and slots, cells, functions and bound
    methods; not inside a generator (a compiled one is checked on its own), nor an iterator. Read off
    __dict__s and slots: nothing of the program runs."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _LEAVES or id(item) in seen or isinstance(item, (type, types.ModuleType, types.GeneratorType)):
            continue
        seen.add(id(item))
        if kind in (list, tuple, set, frozenset):
            stack.extend(item)
        elif kind is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, BaseException):
            if _not_an_exception(kind) is not None:
                yield item
            stack += [item.args, item.__context__, item.__cause__, _EXC_DICT.__get__(item)]
        elif kind is types.CellType:
            try:
                stack.append(item.cell_contents)
            except ValueError:
                pass
        elif kind is types.FunctionType:
            stack += [item.__defaults__, item.__kwdefaults__, item.__closure__, item.__dict__]
        elif kind in _BOUND:
            stack.append(item.__self__)
        else:
            try:
                attributes = object.__getattribute__(item, "__dict__")
            except (AttributeError, TypeError):
                attributes = None
            if type(attributes) is dict:
                stack.extend(attributes.values())
            for member in slot_members(kind).values():
                try:
                    stack.append(member.__get__(item, kind))
                except AttributeError:
                    pass


_EXC_DICT = BaseException.__dict__["__dict__"]


@contextmanager
def _released_on_failure(made: list[types.GeneratorType]) -> Iterator[None]:
    """Generators rebuilt before the rest of the data was refused are let go of, not closed: the
    run was never continued here, so none of its cleanup may run here."""
    try:
        yield
    except BaseException:
        release(*made)
        raise


def _resolver(allowed: frozenset[str] | None) -> Any:
    return lambda ref: resolve_class(ref, allowed)


def resume(
    data: Any,
    *,
    context: Any = None,
    allowed_modules: frozenset[str] | set[str] | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> types.GeneratorType:
    """Continue a snapshot exactly where it was taken, in this process or another one.

    The data may name only compiled functions and the classes their builds record (modules
    loaded here, or listed by a build's `branchc.json` in a folder on sys.path, which are then
    imported from there), branchc's own value types and a few builtins; `allowed_modules`
    narrows that to these modules. The Context handle is bound to `context`; `limits` bounds the
    time and memory decoding may take (see codec.DecodeLimits).
    """
    check_version(data, "branchc", "the snapshot")
    if data.keys() != _TOP_FIELDS:
        raise SnapshotDataError("data", f'expected {{"branchc": {VERSION}, "graph": {{...}}}}')
    allowed = frozenset(allowed_modules) if allowed_modules is not None else None
    generator = _plain_resume(data["graph"], context, allowed, limits)
    if generator is not None:
        return generator
    made = _Made()
    found: list[BaseException] = []
    extension = _decode_extension(allowed, lambda entry, child, path: _single_context(entry, path, context), made)
    graph = data["graph"]
    with _released_on_failure(made):
        roots = decode(graph, classes=_resolver(allowed), extension=extension, limits=limits, base_exceptions=found)
        if found:
            _check_placed(made.held, found, roots)
        if set(roots) != {"gen"}:
            raise SnapshotDataError("graph.roots", 'expected exactly the root "gen"')
        root = roots["gen"]
        if not is_compiled(root):
            raise SnapshotDataError("graph.roots.gen", "the root is not a compiled generator")
    return root
