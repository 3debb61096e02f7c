"""Snapshots: a suspended compiled generator as JSON data, and back.

    {"branchc": 1, "graph": {"roots": {"gen": [0]}, "objects": [...]}}

The graph (see codec.py) holds the generator as an entry
`{"t": "gen", "fn": "module:qualname", "hash": ..., "state": ..., "label": k,
"vars": {...}, "free": {...}}`; nested compiled generators (a `yield from` in
progress, or one held in a variable) are entries of the same graph, so identity
and cycles survive. The runtime's Context handle travels as `{"t": "ctx"}` and is
re-bound on resume, never copied.
"""

from __future__ import annotations

import builtins
import re
import sys
import types
from typing import Any

from .codec import NotSerializableError, SnapshotDataError, decode, encode
from .context import Context
from .generator import (
    COMPILED_MODULES,
    NESTED_CODE,
    ResumableGenerator,
    SnapshotError,
    lookup,
    make_generator,
    nested_code,
)

__all__ = ["NotSerializableError", "SnapshotDataError", "SnapshotError", "resume", "snapshot"]

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


def _encode_extension(value: Any, child, path: str) -> dict | None:
    if isinstance(value, ResumableGenerator):
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
    if isinstance(value, Context):
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
            "closure": [child(cell, f"{path}.<closure>") for cell in value.__closure__ or ()],
            "defaults": child(value.__defaults__, f"{path}.__defaults__"),
            "kwdefaults": child(value.__kwdefaults__, f"{path}.__kwdefaults__"),
            "dict": child(value.__dict__, f"{path}.__dict__"),
        }
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
        owner = value.__self__
        if owner is not None and not isinstance(owner, types.ModuleType) and not value.__name__.startswith("__"):
            return {"t": "method", "self": child(owner, f"{path}.__self__"), "name": value.__name__}
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        ref = _function_ref(value)
        return {"t": "ref", "ref": ref} if ref else None
    return None


def snapshot(generator: ResumableGenerator) -> dict[str, Any]:
    """The whole continuation of `generator` as JSON data (json.dumps always succeeds)."""
    if not isinstance(generator, ResumableGenerator):
        raise TypeError(
            f"snapshot() takes a compiled generator, not {type(generator).__name__}; "
            f"compile its function with `branchc compile` (or mark it @resumable and compile the module)"
        )
    return {"branchc": VERSION, "graph": encode({"gen": generator}, extension=_encode_extension)}


def _function(entry: dict, child, path: str, allowed: frozenset[str]) -> types.FunctionType:
    """A function defined inside a compiled generator: its code by position, its cells shared."""
    fields = {"t", "in", "hash", "code", "closure", "defaults", "kwdefaults", "dict"}
    if set(entry) != fields:
        raise SnapshotDataError(path, f"a function entry has exactly the fields {sorted(fields)}")
    if type(entry["hash"]) is not str:
        raise SnapshotDataError(f"{path}.hash", "expected a string")
    meta = lookup(entry["in"], entry["hash"], allowed)
    code = nested_code(meta, entry["code"])
    if code is None:
        raise SnapshotDataError(f"{path}.code", f"{meta.ref} has no nested function at {entry['code']!r}")
    if type(entry["closure"]) is not list or len(entry["closure"]) != len(code.co_freevars):
        raise SnapshotDataError(f"{path}.closure", f"expected {len(code.co_freevars)} cells")
    closure = tuple(child(cell, f"{path}.closure[{i}]") for i, cell in enumerate(entry["closure"]))
    if not all(isinstance(cell, types.CellType) for cell in closure):
        raise SnapshotDataError(f"{path}.closure", "expected cells")
    defaults = child(entry["defaults"], f"{path}.defaults")
    kwdefaults = child(entry["kwdefaults"], f"{path}.kwdefaults")
    attributes = child(entry["dict"], f"{path}.dict")
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


def _default_allowed() -> frozenset[str]:
    return frozenset(COMPILED_MODULES) | RUNTIME_MODULES


def resume(
    data: Any, *, context: Any = None, allowed_modules: frozenset[str] | set[str] | None = None
) -> ResumableGenerator:
    """Continue a snapshot exactly where it was taken, in this process or another one.

    Only compiled functions and value types from `allowed_modules` (by default: the compiled
    modules loaded in this process) can be named by the data; nothing else is imported.
    """
    if type(data) is not dict or data.get("branchc") != VERSION or set(data) != {"branchc", "graph"}:
        raise SnapshotDataError("data", f'expected {{"branchc": {VERSION}, "graph": {{...}}}}')
    allowed = frozenset(allowed_modules) | RUNTIME_MODULES if allowed_modules is not None else _default_allowed()
    pending: list[tuple[ResumableGenerator, Any, str, int, dict, dict]] = []

    def extension(entry: dict, child, path: str) -> Any:
        tag = entry.get("t")
        if tag == "ctx":
            if set(entry) != {"t"}:
                raise SnapshotDataError(path, "a context entry has no fields besides t")
            return context
        if tag == "ref":
            return _resolve_ref(entry, path, allowed)
        if tag == "cell":
            if not set(entry) <= {"t", "v"}:
                raise SnapshotDataError(path, "a cell entry is {t} or {t, v}")
            cell = types.CellType()
            child.created(cell)
            if "v" in entry:
                cell.cell_contents = child(entry["v"], f"{path}.v")
            return cell
        if tag == "fn":
            return _function(entry, child, path, allowed)
        if tag == "method":
            name = entry.get("name")
            if set(entry) != {"t", "self", "name"} or type(name) is not str or not name.isidentifier():
                raise SnapshotDataError(path, "a method entry is {t, self, name} with an identifier name")
            if name.startswith("__"):
                raise SnapshotDataError(f"{path}.name", f"{name!r}: special methods are not restored")
            owner = child(entry["self"], f"{path}.self")
            method = getattr(owner, name, None)
            if not isinstance(method, (types.MethodType, types.BuiltinMethodType)):
                raise SnapshotDataError(f"{path}.name", f"{type(owner).__name__} has no method {name!r}")
            return method
        if tag != "gen":
            raise SnapshotDataError(f"{path}.t", f"unknown tag {tag!r}")
        fields = {"t", "fn", "hash", "state", "label", "vars", "free"}
        if set(entry) != fields:
            raise SnapshotDataError(path, f"a generator entry has exactly the fields {sorted(fields)}")
        state, label = entry["state"], entry["label"]
        if state not in ("created", "suspended", "done"):
            raise SnapshotDataError(f"{path}.state", f"expected created, suspended or done, got {state!r}")
        if type(entry["hash"]) is not str:
            raise SnapshotDataError(f"{path}.hash", "expected a string")
        try:
            meta = lookup(entry["fn"], entry["hash"], allowed)
        except SnapshotError as error:
            raise SnapshotError(f"{path}.{error}") from None
        if state == "suspended" and (type(label) is not int or label not in meta.sites):
            raise SnapshotDataError(f"{path}.label", f"{meta.ref} has no suspension point {label!r}")
        for part in ("vars", "free"):
            if type(entry[part]) is not dict:
                raise SnapshotDataError(f"{path}.{part}", "expected an object of variables")
        shell = ResumableGenerator.__new__(ResumableGenerator)
        child.created(shell)
        values = {name: child(value, f"{path}.vars[{name!r}]") for name, value in entry["vars"].items()}
        free = {name: child(value, f"{path}.free[{name!r}]") for name, value in entry["free"].items()}
        unknown = values.keys() - meta.restorable
        if unknown:
            raise SnapshotDataError(f"{path}.vars", f"{meta.ref} has no variable {sorted(unknown)[0]!r}")
        cells = meta.body_code.co_freevars
        for name, cell in free.items():
            if name not in cells or not isinstance(cell, types.CellType):
                raise SnapshotDataError(f"{path}.free[{name!r}]", f"{meta.ref} closes over no such cell")
        pending.append((shell, meta, state, label, values, free))
        return shell

    graph = data["graph"]
    roots = decode(graph, allowed_modules=allowed, extension=extension)
    if set(roots) != {"gen"}:
        raise SnapshotDataError("graph.roots", 'expected exactly the root "gen"')
    for shell, meta, state, label, values, free in pending:
        built = make_generator(meta, state, label, values, free)
        shell._gen, shell._body = built._gen, built._body
        shell.send, shell.throw, shell.close = built.send, built.throw, built.close
    root = roots["gen"]
    if not isinstance(root, ResumableGenerator):
        raise SnapshotDataError("graph.roots.gen", "the root is not a compiled generator")
    return root
