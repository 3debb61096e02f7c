"""Snapshots: a suspended compiled generator as JSON data, and back.

    {"branchc": 1, "graph": {"roots": {"gen": [0]}, "objects": [...]}}

The graph (see codec.py) holds the generator as an entry
`{"t": "gen", "fn": "module:qualname", "hash": ..., "state": ..., "label": k,
"vars": {...}, "free": {...}}`; nested compiled generators (a `yield from` in
progress, or one held in a variable) are entries of the same graph, so identity
and cycles survive. The runtime's Context handle travels as `{"t": "ctx"}` and is
re-bound on resume, never copied.

Most snapshots are of one generator holding plain data (messages, counters, its loops' range
iterators, the Context): `snapshot` and `resume` first try a short path for exactly that
(`_plain_snapshot`, `_plain_resume`, on codec.encode_plain / decode_plain), which writes and
reads the same data as the full path; anything else, including every error, goes the full way.
"""

from __future__ import annotations

import builtins
import re
import sys
import types
from typing import Any

from .codec import BUILTIN_TYPES, decode, decode_plain, encode, encode_plain
from .errors import NotSerializableError, SnapshotDataError, SnapshotError
from .generator import ResumableGenerator, make_generator
from .registry import COMPILED_MODULES, NESTED_CODE, lookup, nested_code

__all__ = [
    "ContextHandle",
    "NotSerializableError",
    "SnapshotDataError",
    "SnapshotError",
    "decode_graph",
    "encode_graph",
    "resume",
    "snapshot",
]


_PLAIN_EXTRAS: dict[type, dict] = {}


class ContextHandle:
    """Base of the handle a generator gets from its runner (the runtime's Context): it never travels.
    A snapshot writes it as `{"t": "ctx"}`, and `resume(data, context=...)` binds the given one there."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _PLAIN_EXTRAS[cls] = {"t": "ctx"}  # the plain fast path writes it as the full path does


VERSION = 1

_HIDDEN = [
    (re.compile(r"_bc_it\d+"), "the iterator of a for loop"),
    (re.compile(r"_bc_yf\d+"), "the iterator of a `yield from`"),
    (re.compile(r"_bc_t\d+"), "a value computed before the yield"),
    (re.compile(r"_bc_exc\d+"), "the exception being handled"),
    (re.compile(r"_bc_pend\d+"), "the exception pending in a finally block"),
]


def _describe(variable: str) -> str:
    for pattern, text in _HIDDEN:
        if pattern.fullmatch(variable):
            return text
    return f"variable {variable!r}"


#: Builtins a variable may hold across a yield (a spilled callee, say): pure functions and types only.
_SAFE_BUILTINS = frozenset(
    "abs all any ascii bin bool bytes callable chr dict divmod enumerate filter float format frozenset hash "
    "hex int isinstance issubclass iter len list map max min next object oct ord pow print range repr "
    "reversed round set slice sorted str sum tuple type zip".split()
)


def _is_builtin_exception(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == "builtins"


def _function_ref(value: Any) -> str | None:
    """'module:qualname' when `value` is exactly what that name holds (so it can be named, not copied)."""
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module == "builtins":
        safe = qualname in _SAFE_BUILTINS or _is_builtin_exception(value)
        return f"builtins:{qualname}" if safe else None
    target: Any = sys.modules.get(module)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return f"{module}:{qualname}" if target is value else None


def _encode_generator(value: ResumableGenerator, child) -> dict:
    state, label, values = value.state()
    meta = value.meta
    try:
        encoded = {k: child(v, k) for k, v in values.items()}
        free = {k: child(v, k) for k, v in value.free_values().items()}
    except NotSerializableError as error:
        variable = error.path.split("[", 1)[0].split(".", 1)[0]
        where = value.source_location
        raise NotSerializableError(
            f"{meta.qualname} (waiting at {where}): {_describe(variable)}, at {error.path}",
            error.type_name,
            error.hint,
        ) from None
    return {
        "t": "gen",
        "fn": meta.ref,
        "hash": meta.hash,
        "state": state,
        "label": label,
        "vars": encoded,
        "free": free,
    }


def _encode_extension(value: Any, child, path: str) -> dict | None:
    if isinstance(value, ResumableGenerator):
        return _encode_generator(value, child)
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
            "in": meta.ref,
            "hash": meta.hash,
            "code": list(code_path),
            "closure": [child(cell, (path, "<closure>", _ATTR)) for cell in value.__closure__ or ()],
            "defaults": child(value.__defaults__, (path, "__defaults__", _ATTR)),
            "kwdefaults": child(value.__kwdefaults__, (path, "__kwdefaults__", _ATTR)),
            "dict": child(value.__dict__, (path, "__dict__", _ATTR)),
        }
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
        owner = value.__self__
        if owner is not None and not isinstance(owner, types.ModuleType) and not value.__name__.startswith("__"):
            return {"t": "method", "self": child(owner, (path, "__self__", _ATTR)), "name": value.__name__}
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        ref = _function_ref(value)
        return {"t": "ref", "ref": ref} if ref else None
    return None


_encode_extension.declines = BUILTIN_TYPES  # type: ignore[attr-defined]  # never ours: the codec need not ask


def encode_graph(roots: dict[str, Any], extension: Any = None) -> dict[str, Any]:
    """Several roots in one object graph; `extension(value, child, path)` is asked first about every
    value (a runner's own handles, say), and the compiled generators, cells and functions are
    written as `snapshot` writes them."""
    if extension is None:
        return encode(roots, extension=_encode_extension)

    def both(value: Any, child: Any, path: Any) -> dict | None:
        return extension(value, child, path) or _encode_extension(value, child, path)

    both.declines = BUILTIN_TYPES  # type: ignore[attr-defined]
    return encode(roots, extension=both)


def _plain_snapshot(generator: ResumableGenerator) -> dict[str, Any] | None:
    """The common case, in short: variables of plain data (see codec.encode_plain) and no closure.
    The same data as the full path writes; None when it does not apply."""
    state, label, values = generator.state()
    if generator.free_values():
        return None
    encoded = encode_plain(values, _PLAIN_EXTRAS)
    if encoded is None:
        return None
    meta = generator.meta
    entry = {"t": "gen", "fn": meta.ref, "hash": meta.hash, "state": state, "label": label, "vars": encoded, "free": {}}
    return {"branchc": VERSION, "graph": {"roots": {"gen": ["@", entry]}, "objects": []}}


def snapshot(generator: ResumableGenerator) -> dict[str, Any]:
    """The whole continuation of `generator` as JSON data (json.dumps always succeeds)."""
    if type(generator) is ResumableGenerator:
        data = _plain_snapshot(generator)
        if data is not None:
            return data
    if not isinstance(generator, ResumableGenerator):
        raise TypeError(
            f"snapshot() takes a compiled generator, not {type(generator).__name__}; "
            f"compile its function with `branchc compile` (or mark it @resumable and compile the module)"
        )
    return {"branchc": VERSION, "graph": encode({"gen": generator}, extension=_encode_extension)}


# Child paths are chains (parent, key, format), formatted by the codec only if an error names them.
_ATTR = ".{}"
_FN_FIELDS = frozenset({"t", "in", "hash", "code", "closure", "defaults", "kwdefaults", "dict"})
_GEN_FIELDS = frozenset({"t", "fn", "hash", "state", "label", "vars", "free"})


def _function(entry: dict, child, path: str, allowed: frozenset[str]) -> types.FunctionType:
    """A function defined inside a compiled generator: its code by position, its cells shared."""
    if entry.keys() != _FN_FIELDS:
        raise SnapshotDataError(path, f"a function entry has exactly the fields {sorted(_FN_FIELDS)}")
    if type(entry["hash"]) is not str:
        raise SnapshotDataError(f"{path}.hash", "expected a string")
    meta = lookup(entry["in"], entry["hash"], allowed)
    code = nested_code(meta, entry["code"])
    if code is None:
        raise SnapshotDataError(f"{path}.code", f"{meta.ref} has no nested function at {entry['code']!r}")
    if type(entry["closure"]) is not list or len(entry["closure"]) != len(code.co_freevars):
        raise SnapshotDataError(f"{path}.closure", f"expected {len(code.co_freevars)} cells")
    closure = tuple(child(cell, (path, i, ".closure[{}]")) for i, cell in enumerate(entry["closure"]))
    if not all(isinstance(cell, types.CellType) for cell in closure):
        raise SnapshotDataError(f"{path}.closure", "expected cells")
    defaults = child(entry["defaults"], (path, "defaults", _ATTR))
    kwdefaults = child(entry["kwdefaults"], (path, "kwdefaults", _ATTR))
    attributes = child(entry["dict"], (path, "dict", _ATTR))
    if not (defaults is None or type(defaults) is tuple) or not (kwdefaults is None or type(kwdefaults) is dict):
        raise SnapshotDataError(path, "defaults must be a tuple and kwdefaults a dict (or null)")
    if type(attributes) is not dict:
        raise SnapshotDataError(f"{path}.dict", "expected a dict")
    function = types.FunctionType(code, meta.globals, code.co_name, defaults, closure or None)
    function.__kwdefaults__ = kwdefaults
    function.__dict__.update(attributes)
    return function


def _resolve_ref(entry: dict, path: str, allowed: frozenset[str]) -> Any:
    ref = entry.get("ref")
    if set(entry) != {"t", "ref"} or type(ref) is not str or ref.count(":") != 1:
        raise SnapshotDataError(path, "a ref entry is {t, ref} with ref 'module:qualname'")
    module_name, qualname = ref.split(":")
    if module_name == "builtins":
        found = getattr(builtins, qualname, None) if qualname.isidentifier() else None
        if qualname not in _SAFE_BUILTINS and not _is_builtin_exception(found):
            raise SnapshotDataError(f"{path}.ref", f"{ref} is not a builtin a snapshot may name")
        return found
    if module_name not in allowed or module_name not in sys.modules:
        raise SnapshotDataError(f"{path}.ref", f"{ref}: module {module_name!r} is not allowed here")
    target: Any = sys.modules[module_name]
    for part in qualname.split("."):
        if not part.isidentifier() or part.startswith("__"):
            raise SnapshotDataError(f"{path}.ref", f"{ref}: {part!r} is not a plain name")
        target = getattr(target, part, None)
    if not isinstance(target, (types.FunctionType, type)):
        raise SnapshotDataError(f"{path}.ref", f"{ref} is not a function or class")
    return target


#: branchc's own data types, which any snapshot of a tool may hold (messages, sample and elicit results).
RUNTIME_MODULES = frozenset({"branchc.runtime.messages", "branchc.runtime.elicit"})


_allowed_cache: tuple[set[str], frozenset[str]] = (set(), RUNTIME_MODULES)


def _default_allowed() -> frozenset[str]:
    """The compiled modules and ours; rebuilt only when COMPILED_MODULES changed (it rarely does)."""
    global _allowed_cache
    known, allowed = _allowed_cache
    if known != COMPILED_MODULES:
        known = set(COMPILED_MODULES)
        allowed = frozenset(known) | RUNTIME_MODULES
        _allowed_cache = known, allowed
    return allowed


_TOP_FIELDS = frozenset({"branchc", "graph"})
_GRAPH_FIELDS = frozenset({"roots", "objects"})
_SCALARS = frozenset({str, int, float, bool, type(None)})  # JSON scalars decode to themselves
_STATES = ("created", "suspended", "done")


def _generator(entry: dict, child, path: str, allowed: frozenset[str], pending: list) -> ResumableGenerator:
    """A compiled generator entry: checked, its variables decoded; it is built once the whole graph is."""
    if entry.keys() != _GEN_FIELDS:
        raise SnapshotDataError(path, f"a generator entry has exactly the fields {sorted(_GEN_FIELDS)}")
    state, label = entry["state"], entry["label"]
    if state not in _STATES:
        raise SnapshotDataError(f"{path}.state", f"expected created, suspended or done, got {state!r}")
    if type(entry["hash"]) is not str:
        raise SnapshotDataError(f"{path}.hash", "expected a string")
    try:
        meta = lookup(entry["fn"], entry["hash"], allowed)
    except SnapshotError as error:
        raise SnapshotError(f"{path}.{error}") from None
    if state == "suspended" and (type(label) is not int or label not in meta.sites):
        raise SnapshotDataError(f"{path}.label", f"{meta.ref} has no suspension point {label!r}")
    variables, cells = entry["vars"], entry["free"]
    if type(variables) is not dict:
        raise SnapshotDataError(f"{path}.vars", "expected an object of variables")
    if type(cells) is not dict:
        raise SnapshotDataError(f"{path}.free", "expected an object of variables")
    shell = ResumableGenerator.__new__(ResumableGenerator)
    child.created(shell)
    values = {
        name: value if type(value) in _SCALARS else child(value, (path, name, ".vars[{!r}]"))
        for name, value in variables.items()
    }
    free = {name: child(value, (path, name, ".free[{!r}]")) for name, value in cells.items()} if cells else {}
    if not meta.restorable.issuperset(values):
        unknown = values.keys() - meta.restorable
        raise SnapshotDataError(f"{path}.vars", f"{meta.ref} has no variable {sorted(unknown)[0]!r}")
    if free:
        freevars = meta.body_code.co_freevars
        for name, cell in free.items():
            if name not in freevars or not isinstance(cell, types.CellType):
                raise SnapshotDataError(f"{path}.free[{name!r}]", f"{meta.ref} closes over no such cell")
    pending.append((shell, meta, state, label, values, free))
    return shell


def _plain_resume(graph: Any, context: Any, allowed: frozenset[str]) -> ResumableGenerator | None:
    """The common case, in short: one generator of plain variables (see codec.decode_plain), no
    table, no closure. The same generator as the full path builds; None when it does not apply
    (then the full path runs, and reports what is wrong)."""
    if type(graph) is not dict or graph.keys() != _GRAPH_FIELDS:
        return None
    roots, objects = graph["roots"], graph["objects"]
    if type(roots) is not dict or len(roots) != 1 or type(objects) is not list or objects:
        return None
    root = roots.get("gen")
    if type(root) is not list or len(root) != 2 or type(root[0]) is not str or root[0] != "@":
        return None
    entry = root[1]
    if type(entry) is not dict or entry.keys() != _GEN_FIELDS or entry["t"] != "gen":
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
    values = decode_plain(variables, {"ctx": context})
    if values is None or not meta.restorable.issuperset(values):
        return None
    return make_generator(meta, state, label, values, {})


def _single_context(entry: dict, path: str, context: Any) -> Any:
    if entry.keys() != {"t"}:
        raise SnapshotDataError(path, "a context entry has no fields besides t")
    return context


def _decode_extension(allowed: frozenset[str], pending: list, context) -> Any:
    """The codec's decode extension for compiled generators, cells, nested functions, refs and
    methods; `context(entry, child, path)` restores a Context entry."""

    def extension(entry: dict, child, path: str) -> Any:
        tag = entry.get("t")
        if tag == "gen":
            return _generator(entry, child, path, allowed, pending)
        if tag == "ctx":
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
        if tag == "method":
            name = entry.get("name")
            if set(entry) != {"t", "self", "name"} or type(name) is not str or not name.isidentifier():
                raise SnapshotDataError(path, "a method entry is {t, self, name} with an identifier name")
            if name.startswith("__"):
                raise SnapshotDataError(f"{path}.name", f"{name!r}: special methods are not restored")
            owner = child(entry["self"], (path, "self", _ATTR))
            method = getattr(owner, name, None)
            if not isinstance(method, (types.MethodType, types.BuiltinMethodType)):
                raise SnapshotDataError(f"{path}.name", f"{type(owner).__name__} has no method {name!r}")
            return method
        raise SnapshotDataError(f"{path}.t", f"unknown tag {tag!r}")

    return extension


def _build(pending: list) -> None:
    """Make the generators of a decoded graph, once every value they hold exists."""
    for shell, meta, state, label, values, free in pending:
        make_generator(meta, state, label, values, free, into=shell)


def decode_graph(graph: Any, allowed: frozenset[str], context: Any) -> dict[str, Any]:
    """The roots of `encode_graph`'s graph; only `allowed` modules may be named, and
    `context(entry, child, path)` restores each context entry."""
    pending: list = []
    roots = decode(graph, allowed_modules=allowed, extension=_decode_extension(allowed, pending, context))
    _build(pending)
    return roots


def default_allowed() -> frozenset[str]:
    """The modules a snapshot may name by default: the compiled modules of this process and branchc's data."""
    return _default_allowed()


def resume(
    data: Any, *, context: Any = None, allowed_modules: frozenset[str] | set[str] | None = None
) -> ResumableGenerator:
    """Continue a snapshot exactly where it was taken, in this process or another one.

    Only compiled functions and value types from `allowed_modules` (by default: the compiled
    modules loaded in this process) can be named by the data; nothing else is imported.
    """
    if type(data) is not dict or data.keys() != _TOP_FIELDS or data["branchc"] != VERSION:
        raise SnapshotDataError("data", f'expected {{"branchc": {VERSION}, "graph": {{...}}}}')
    allowed = frozenset(allowed_modules) | RUNTIME_MODULES if allowed_modules is not None else _default_allowed()
    generator = _plain_resume(data["graph"], context, allowed)
    if generator is not None:
        return generator
    pending: list[tuple[ResumableGenerator, Any, str, int, dict, dict]] = []
    extension = _decode_extension(allowed, pending, lambda entry, child, path: _single_context(entry, path, context))
    graph = data["graph"]
    roots = decode(graph, allowed_modules=allowed, extension=extension)
    if set(roots) != {"gen"}:
        raise SnapshotDataError("graph.roots", 'expected exactly the root "gen"')
    _build(pending)
    root = roots["gen"]
    if not isinstance(root, ResumableGenerator):
        raise SnapshotDataError("graph.roots.gen", "the root is not a compiled generator")
    return root
