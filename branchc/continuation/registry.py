"""What a snapshot may name: the compiled functions and classes that builds record, and no more.

A compiled module registers each compiled function when it is imported (the `compiled`
decorator the splitter puts on it), with the table the compiler embedded: the module's
compiled functions (qualname, code hash, suspension points, live and restorable variables,
what each variable can be bound to) and the classes it defines. A module that is not loaded
yet is found through a build's manifest (`branchc.json`) in a folder on `sys.path`, and only
then imported, from that folder. That is the whole allowlist: a snapshot names a compiled
function, a function nested in one, a class a build records, one of a fixed list of value
types (registered by branchc's own runtime) or a builtin of a fixed list; never an arbitrary
module attribute, and nothing is imported that no manifest lists.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import importlib.util
import json
import os
import re
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .codec.common import saved_module
from .errors import SnapshotError

__all__ = [
    "NESTED_CODE",
    "FunctionMeta",
    "compiled",
    "compiled_function",
    "held",
    "lookup",
    "meta_of",
    "nested_code",
    "reading_build",
    "reading_prefix",
    "register_kept",
    "register_value_types",
    "reregister",
    "resolve_class",
    "saved_module",
    "travels",
]

MANIFEST = "branchc.json"


@dataclass
class FunctionMeta:
    module: str
    qualname: str
    hash: str
    kind: str
    sites: dict[int, tuple[int, int, bool]]
    body_code: types.CodeType
    filename: str
    restorable: frozenset[str] = frozenset()
    live: dict[int, frozenset[str]] = field(default_factory=dict)
    #: variable -> the callables the code binds there that are no compiled code, (kind, name) -> the
    #: kinds its owner can be (None: anything); see splitter/bindings.py
    binds: dict[str, dict[tuple[str, str], frozenset[str] | None]] = field(default_factory=dict)
    #: variable -> the only kinds of value it can hold (see splitter/bindings.py `value_kinds`)
    holds: dict[str, frozenset[str]] = field(default_factory=dict)
    #: label -> {the kept exception of a handler, or the pending one of a finally, around that yield:
    #: the names of the exception classes it can hold}; see splitter/lower.py
    catches: dict[int, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # compiler-made variable -> what it holds, in words
    points: dict[int, str] = field(default_factory=dict)  # label -> the point's name (splitter/points.py)
    asks: dict[int, str] = field(default_factory=dict)  # label -> the form an elicitation there asks
    defaults: dict[str, Any] = field(default_factory=dict)  # parameter -> its default, where that is a literal
    globals: dict[str, Any] = field(repr=False, default_factory=dict)
    # The cells of its type parameters (`def f[T]`, or a generic class's): the definition's, never a run's
    type_cells: dict[str, types.CellType] = field(repr=False, default_factory=dict)

    @cached_property
    def where(self) -> dict[int, dict[str, Any]]:
        """label -> what a snapshot suspended there says of its place (snapshots.py `_where`): the point, the
        names live there, and the form an elicitation there asks."""
        out: dict[int, dict[str, Any]] = {}
        for label, point in self.points.items():
            out[label] = {"point": point, "live": sorted(self.live.get(label, ()))}
            if label in self.asks:
                out[label]["asks"] = self.asks[label]
        return out

    @cached_property
    def internals(self) -> dict[str, str]:
        """The compiler's own variables a resume checks, by kind: it, yf, exc, pend, wm, wx, wf, case."""
        found = ((name, _INTERNAL.fullmatch(name)) for name in self.restorable)
        return {name: kind.group(1) for name, kind in found if kind}

    @cached_property
    def kinds(self) -> dict[Any, Any]:
        """What `allowed(kinds)` found for each set of kinds, once."""
        return {}

    def allowed(self, kinds: frozenset[str]) -> tuple[frozenset[type], frozenset[types.CodeType]] | None:
        """The exact types, and the codes of this function's own defs and lambdas, that a value of
        one of these kinds can have; None when one of them is not known for sure here (a name that
        is no class making exactly its own instances): then the value may be anything."""
        found = self.kinds.get(kinds, _UNKNOWN)
        if found is _UNKNOWN:
            found = self.kinds[kinds] = _allowed(self, kinds)
        return found

    def exception_classes(self, names: tuple[str, ...]) -> tuple[type, ...] | None:
        """The classes an except clause or a finally's analysis names (see `catches`), looked up as the
        code looks them up, through this module's globals and the builtins (by __dict__, no hook);
        None when one of them is not a class (or tuple of classes) of exceptions here."""
        return _exception_classes(self.globals, names)

    @cached_property
    def ref(self) -> str:
        return f"{self.module}:{self.qualname}"

    @cached_property
    def saved_ref(self) -> str:
        """The ref a snapshot writes: a kept build's module under its own name (see `reading_build`)."""
        return f"{saved_module(self.module)}:{self.qualname}"


_INTERNAL = re.compile(r"_bc_(it|yf|exc|pend|wm|wx|wf|case)\d+")


@dataclass(frozen=True)
class _Module:
    """A compiled module as its table or a manifest records it."""

    functions: dict[str, str]  # qualname -> code hash
    classes: frozenset[str]
    root: str | None = None  # the build folder whose manifest lists it; None once it is imported
    python: str | None = None  # the Python that built it ("3.12"), as its manifest says


def _is_body(code: types.CodeType) -> bool:
    """A compiled body: its prologue's resume state is a local (the function itself, or `_bc_body`)."""
    return "_bc_T" in code.co_varnames


def _make_meta(info: dict, module: str, qualname: str, body: types.CodeType, globals_: dict) -> FunctionMeta:
    return FunctionMeta(
        module=module,
        qualname=qualname,
        hash=info["hash"],
        kind=info["kind"],
        sites=info["sites"],
        body_code=body,
        filename=body.co_filename,
        restorable=frozenset(info["locals"]),
        live={label: frozenset(names) for label, names in info.get("live", {}).items()},
        binds={name: _bindings(kinds) for name, kinds in info.get("binds", {}).items()},
        holds={name: frozenset(kinds) for name, kinds in info.get("holds", {}).items()},
        catches={label: _names(held) for label, held in info.get("catches", {}).items()},
        notes=info.get("notes", {}),
        points=info.get("points", {}),
        asks=info.get("asks", {}),
        defaults=info.get("defaults", {}),
        globals=globals_,
    )


def _bindings(kinds: list) -> dict[tuple[str, str], frozenset[str] | None]:
    """A variable's bindings as the manifest lists them: [kind, name] or [kind, name, [owner kinds]]."""
    return {(entry[0], entry[1]): frozenset(entry[2]) if len(entry) > 2 else None for entry in kinds}


def _names(held: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {name: tuple(names) for name, names in held.items()}


_UNKNOWN = object()
#: The kinds of builtin values (see splitter/bindings.py), as the types a value of each has.
BUILTIN_KINDS: dict[str, type] = {
    "list": list,
    "dict": dict,
    "set": set,
    "tuple": tuple,
    "str": str,
    "bytes": bytes,
    "int": int,
    "float": float,
    "complex": complex,
    "bool": bool,
    "None": type(None),
}
#: Builtin classes whose call makes exactly an instance of themselves (str() may give a subclass).
_EXACT_BUILTINS = frozenset({list, dict, set, frozenset, bytearray, tuple, bool})
_TYPE_CALL = type.__dict__["__call__"]
_OBJECT_NEW = object.__dict__["__new__"]


def _own(cls: type, name: str) -> Any:
    """`name` as the class defines or inherits it, read off the __dict__s of its MRO (no hook runs)."""
    for klass in type.__dict__["__mro__"].__get__(cls):
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _by_dotted(namespace: dict[str, Any], dotted: str) -> Any:
    """A dotted global name (`errors.Cancelled`) as the code would find it: in the module's globals,
    else the builtins, then through __dict__ (no getattr hook, no import); _UNKNOWN if it is not there."""
    first, *rest = dotted.split(".")
    found = namespace.get(first, _UNKNOWN)
    if found is _UNKNOWN:
        found = vars(builtins).get(first, _UNKNOWN)
    for part in rest:
        if found is _UNKNOWN or not isinstance(found, (type, types.ModuleType)):
            return _UNKNOWN
        found = vars(found).get(part, _UNKNOWN)
    return found


def _makes_exactly(cls: Any) -> bool:
    """Whether calling `cls` can only give an instance of exactly `cls` (or raise)."""
    if not isinstance(cls, type):
        return False
    if cls in _EXACT_BUILTINS:
        return True
    if cls.__module__ == "builtins":
        return False
    return _own(type(cls), "__call__") is _TYPE_CALL and _own(cls, "__new__") is _OBJECT_NEW


def _allowed(meta: FunctionMeta, kinds: frozenset[str]) -> tuple[frozenset[type], frozenset[types.CodeType]] | None:
    classes: set[type] = set()
    codes: set[types.CodeType] = set()
    for kind in kinds:
        if kind in BUILTIN_KINDS:
            classes.add(BUILTIN_KINDS[kind])
        elif kind.startswith("new:"):
            cls = _by_dotted(meta.globals, kind[4:])
            if not _makes_exactly(cls):
                return None  # a function, or a class that may make something else: the value may be anything
            classes.add(cls)
        elif kind == "lambda" or kind.startswith("def:"):
            codes |= _nested_functions(meta, "<lambda>" if kind == "lambda" else kind[4:])
        else:
            return None  # a kind this branchc does not know: no narrowing
    return frozenset(classes), frozenset(codes)


def _nested_functions(meta: FunctionMeta, name: str) -> set[types.CodeType]:
    """The codes of the defs (lambdas) of that name in this function's own body."""
    return {
        const
        for const in meta.body_code.co_consts
        if type(const) is types.CodeType and _is_function_code(const) and const.co_name == name
    }


def stored_functions(meta: FunctionMeta) -> dict[str, frozenset[types.CodeType]]:
    """Variable -> the defs and lambdas of this function's body that its bytecode stores straight
    into it (`f = lambda: ...`, `def helper`): a closer look than the name, where it finds them."""
    found = meta.kinds.get(_STORED)
    if found is None:
        found = meta.kinds[_STORED] = _stored(meta.body_code)
    return found


_STORED = object()
_STORES = frozenset({"STORE_FAST", "STORE_DEREF", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"})


def _stored(code: types.CodeType) -> dict[str, frozenset[types.CodeType]]:
    out: dict[str, set[types.CodeType]] = {}
    instructions = list(dis.get_instructions(code))
    for index, instruction in enumerate(instructions):
        made = instruction.argval
        if instruction.opname != "LOAD_CONST" or type(made) is not types.CodeType or not _is_function_code(made):
            continue
        at = index + 1
        if at >= len(instructions) or instructions[at].opname != "MAKE_FUNCTION":
            continue
        at += 1
        while at < len(instructions) and instructions[at].opname == "SET_FUNCTION_ATTRIBUTE":
            at += 1
        while at < len(instructions) and instructions[at].opname in _STORES | {"COPY"}:
            step = instructions[at]
            if step.opname in _STORES:
                names = step.argval if isinstance(step.argval, tuple) else (step.argval,)
                for name in names[:1] if step.opname == "STORE_FAST_LOAD_FAST" else names:
                    out.setdefault(name, set()).add(made)
            at += 1
    return {name: frozenset(codes) for name, codes in out.items()}


def _exception_classes(namespace: dict[str, Any], names: tuple[str, ...]) -> tuple[type, ...] | None:
    found: list[type] = []
    for name in names:
        if name == "*":  # a bare `except:`
            found.append(BaseException)
            continue
        value = _by_dotted(namespace, name)
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, type) and issubclass(item, BaseException):
                found.append(item)
            elif type(item) is tuple:
                stack.extend(item)
            elif isinstance(item, BaseException):  # `raise STOP`, an instance kept in a global
                found.append(type(item))
            else:
                return None
    return tuple(found)


_BY_CODE: dict[types.CodeType, FunctionMeta] = {}
# The same by id(): hashing a code object walks its constants, each time. Registered code objects
# stay alive (they are keys above), so an id found here is that code's own.
_BY_CODE_ID: dict[int, FunctionMeta] = {}
_BY_REF: dict[str, FunctionMeta] = {}
#: compiled modules imported in this process, by name
_LOADED: dict[str, _Module] = {}
#: code of functions nested in a compiled body -> (that function, path through co_consts)
NESTED_CODE: dict[types.CodeType, tuple[FunctionMeta, tuple[int, ...]]] = {}
#: "module:qualname" -> a type any snapshot may hold (branchc's own messages, results, run state)
_VALUE_TYPES: dict[str, type] = {}


def register_value_types(*classes: type) -> None:
    """Let snapshots hold instances of these classes (the runtime's data: messages, results, run state)."""
    for cls in classes:
        _VALUE_TYPES[f"{cls.__module__}:{cls.__qualname__}"] = cls


def _register_nested(meta: FunctionMeta) -> None:
    stack = [(meta.body_code, ())]
    while stack:
        code, path = stack.pop()
        for index, const in enumerate(code.co_consts):
            if isinstance(const, types.CodeType):
                NESTED_CODE[const] = (meta, (*path, index))
                stack.append((const, (*path, index)))


_FUNCTION_FLAGS = 0x01 | 0x02  # CO_OPTIMIZED | CO_NEWLOCALS: a def or lambda (a class body has neither)
_COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})


def _is_function_code(code: types.CodeType) -> bool:
    """The code of a def or lambda: what a function object nested in a compiled body can run."""
    return code.co_flags & _FUNCTION_FLAGS == _FUNCTION_FLAGS and code.co_name not in _COMPREHENSIONS


def nested_code(meta: FunctionMeta, path: Any) -> types.CodeType | None:
    """The code of the def or lambda at `path` inside `meta`'s body (None if the path leads
    nowhere else: a class body or a comprehension is not a function a snapshot may rebuild)."""
    code = meta.body_code
    if type(path) is not list or not path:
        return None
    for index in path:
        if type(index) is not int or not 0 <= index < len(code.co_consts):
            return None
        code = code.co_consts[index]
        if type(code) is not types.CodeType:
            return None
    return code if _is_function_code(code) else None


def compiled(table: dict[str, Any], qualname: str):
    """Decorator the splitter puts on each compiled function: registers its metadata, and its module."""

    def register(fn: types.FunctionType) -> types.FunctionType:
        fn.__branchc_table__ = (table, qualname)  # type: ignore[attr-defined]
        code = fn.__code__
        body = code if _is_body(code) else next(c for c in code.co_consts if type(c) is types.CodeType and _is_body(c))
        info = table["functions"][qualname]
        meta = _make_meta(info, fn.__module__, qualname, body, fn.__globals__)
        if "type_params" in info:
            cells = zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True)
            meta.type_cells = {name: cell for name, cell in cells if name in info["type_params"]}
        _BY_CODE[body] = _BY_CODE_ID[id(body)] = meta
        _BY_REF[meta.ref] = meta  # a reloaded module replaces the old one
        if meta.module not in _LOADED or _LOADED[meta.module].functions is not table["functions"]:
            hashes = {name: info["hash"] for name, info in table["functions"].items()}
            _LOADED[meta.module] = _Module(hashes, frozenset(table["classes"]))
        _register_nested(meta)
        fn.__branchc_compiled__ = True  # type: ignore[attr-defined]
        fn.__branchc_meta__ = meta  # type: ignore[attr-defined]
        return fn

    return register


def reregister(fn: types.FunctionType) -> None:
    """After `relocate` swapped a compiled function's code: register the new body."""
    table, qualname = fn.__branchc_table__  # type: ignore[attr-defined]
    compiled(table, qualname)(fn)


def meta_of(code: types.CodeType) -> FunctionMeta:
    """The metadata of a compiled body's code."""
    return _BY_CODE_ID.get(id(code)) or _BY_CODE[code]


# -- builds on sys.path -------------------------------------------------------------------------

_MANIFESTS: dict[str, tuple[float, dict[str, _Module]]] = {}  # folder -> (the manifest's mtime, its modules)


def _manifest(folder: str) -> dict[str, _Module]:
    """The modules a build folder's manifest lists (none if it has no readable manifest)."""
    path = os.path.join(folder or ".", MANIFEST)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return {}
    cached = _MANIFESTS.get(folder)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    modules: dict[str, _Module] = {}
    root = os.path.realpath(folder or ".")
    try:
        with open(path, encoding="utf-8") as file:
            manifest = json.load(file)
        python = manifest.get("python") if isinstance(manifest.get("python"), str) else None
        for name, entry in manifest["modules"].items():
            functions = {f["qualname"]: f["hash"] for f in entry.get("functions", [])}
            modules[name] = _Module(functions, frozenset(entry.get("classes", [])), root, python)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        modules = {}  # not a manifest this branchc wrote: it lists nothing
    _MANIFESTS[folder] = (mtime, modules)
    return modules


def _known(module: str) -> _Module | None:
    """A compiled module loaded here, or listed by the manifest of a build folder on sys.path (the
    first that lists it, as the import would find it)."""
    loaded = _LOADED.get(module)
    if loaded is not None:
        return loaded
    for folder in sys.path:
        if isinstance(folder, str):
            listed = _manifest(folder).get(module)
            if listed is not None:
                return listed
    return None


def _import(module: str, known: _Module) -> types.ModuleType:
    """Import a module a manifest lists, from that build folder only (and its packages likewise);
    one loaded already must have been loaded from there too."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        if known.root is not None and not (isinstance(origin, str) and _inside(origin, known.root)):
            raise SnapshotError(
                f"module {module!r} is loaded from {origin or 'nowhere'}, not from the build at {known.root} "
                f"that lists it; import it from the build"
            )
        return loaded
    if known.root is None:
        raise SnapshotError(f"module {module!r} was compiled here but is not loaded any more")
    parts = module.split(".")
    for end in range(1, len(parts) + 1):
        name = ".".join(parts[:end])
        if name in sys.modules:
            continue
        listed = name == module or name in _manifest_of(known.root)
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None and spec is not None and not listed:
            continue  # a namespace package: no code of its own
        if not listed or origin is None or not _inside(origin, known.root):
            raise SnapshotError(
                f"module {name!r} would be imported from {origin or 'nowhere'}, not from the build at "
                f"{known.root} that lists it; put that build folder first on sys.path"
            )
    try:
        return importlib.import_module(module)
    except SyntaxError as error:  # a build of a newer Python's syntax (`def f[T]`, say) on an older one
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise SnapshotError(
            f"module {module!r} does not import on Python {here}: {error.msg} ({error.filename}:{error.lineno}); "
            f"its build was made by Python {known.python}: resume the run on that Python, or one that reads its syntax"
        ) from None


def _manifest_of(root: str) -> dict[str, _Module]:
    for folder, (_, modules) in _MANIFESTS.items():
        if os.path.realpath(folder or ".") == root:
            return modules
    return {}


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), root]) == root


def _split(ref: Any, what: str) -> tuple[str, str]:
    if type(ref) is not str:  # data: never its repr (a list nested 100,000 deep has none)
        raise SnapshotError(f"{what}: expected 'module:qualname', got a {type(ref).__name__}")
    shown = repr(ref) if len(ref) <= 200 else repr(ref[:200]) + "..."
    if ref.count(":") != 1:
        raise SnapshotError(f"{what}: {shown} is not 'module:qualname'")
    module, qualname = ref.split(":")
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise SnapshotError(f"{what}: {shown} does not name a module")
    if not all(part.isidentifier() or part == "<locals>" for part in qualname.split(".")):
        raise SnapshotError(f"{what}: {shown} does not name a function or class")
    return module, qualname


def _check_modules(module: str, modules: frozenset[str] | None, ref: str) -> None:
    if modules is not None and module not in modules:
        raise SnapshotError(f"{ref}: module {module!r} is not among the modules this resume allows")


# -- kept builds -----------------------------------------------------------------------------------
# An older build kept beside the one served (runtime/builds.py) is imported under a package of its own,
# `_bcb_<id>.module`, so both are loaded at once. Snapshots always name modules as the build named them:
# `saved_module` strips the package when one is written, and `reading_build` says which build a snapshot
# read now names.

#: the kept build a snapshot is read in: (its package's prefix, the modules it has), or None (the served build)
_READING: ContextVar[tuple[str, frozenset[str]] | None] = ContextVar("branchc_reading_build", default=None)


@contextmanager
def reading_build(prefix: str, modules: frozenset[str]) -> Iterator[None]:
    """While inside: a snapshot's `module:qualname` of one of `modules` names `prefix + module`, that module
    of the kept build (the rounds of a run that finishes on it run inside)."""
    token = _READING.set((prefix, modules))
    try:
        yield
    finally:
        _READING.reset(token)


def reading_prefix() -> str | None:
    """The package prefix of the kept build snapshots are read in now (see `reading_build`), or None."""
    reading = _READING.get()
    return reading[0] if reading is not None else None


def register_kept(prefix: str, modules: dict[str, tuple[dict[str, str], frozenset[str]]]) -> None:
    """Record the modules of a kept build imported under `prefix`: name -> (qualname -> code hash, classes), as
    its manifest lists them (a module of classes only registers nothing of its own when imported)."""
    for name, (functions, classes) in modules.items():
        if prefix + name not in _LOADED:
            _LOADED[prefix + name] = _Module(functions, classes)


def _here(ref: Any) -> Any:
    """A ref as a snapshot writes it -> the name of what it names in this process (see `reading_build`)."""
    reading = _READING.get()
    if reading is None or type(ref) is not str:
        return ref
    prefix, modules = reading
    return prefix + ref if ref.partition(":")[0] in modules else ref


# -- what a snapshot names ------------------------------------------------------------------------


def lookup(ref: Any, code_hash: str, modules: frozenset[str] | None = None) -> FunctionMeta:
    """The compiled function named `module:qualname` with this code hash; its module is imported
    only if a manifest on sys.path lists it (and `modules`, when given, names it), and the hash it
    lists is this one."""
    ref = _here(ref)
    meta = _BY_REF.get(ref) if type(ref) is str else None
    if meta is not None and meta.hash == code_hash and (modules is None or meta.module in modules):
        return meta  # the common case, in short
    known, qualname = _listed(ref, modules)
    if known.functions[qualname] != code_hash:
        raise SnapshotError(
            f"{ref}: the snapshot was taken from different compiled code (hash {code_hash}, here "
            f"{known.functions[qualname]}); resume it with the build that made it"
        )
    meta = current(ref, modules)
    if meta.hash != code_hash:
        raise SnapshotError(
            f"{ref}: the snapshot was taken from different compiled code (hash {code_hash}, here {meta.hash}); "
            f"resume it with the build that made it"
        )
    return meta


def current(ref: Any, modules: frozenset[str] | None = None) -> FunctionMeta:
    """The compiled function named `module:qualname` as this process has it, whatever code a snapshot was
    taken from (for a run moving to a new build: snapshots.py); imported as `lookup` imports."""
    ref = _here(ref)
    known, qualname = _listed(ref, modules)
    module = _split(ref, "fn")[0]
    _import(module, known)
    meta = _BY_REF.get(ref) or _find_nested(module, qualname)
    if meta is None:
        raise SnapshotError(f"fn: {ref} is not a compiled function in this process")
    return meta


def _listed(ref: Any, modules: frozenset[str] | None) -> tuple[_Module, str]:
    """(its module as a manifest lists it, its qualname) of a compiled function a snapshot names."""
    module, qualname = _split(ref, "fn")
    _check_modules(module, modules, ref)
    known = _known(module)
    if known is None:
        raise SnapshotError(
            f"fn: {ref}: module {module!r} is not a compiled module loaded here, and no build manifest "
            f"({MANIFEST}) on sys.path lists it; put the build folder on sys.path"
        )
    if qualname not in known.functions:
        raise SnapshotError(f"fn: {ref} is not a function that module's build compiled")
    return known, qualname


def _find_nested(module_name: str, qualname: str) -> FunctionMeta | None:
    """Nested compiled functions register when their enclosing function runs; find them by code."""
    module = sys.modules.get(module_name)
    table = getattr(module, "_bc_META", None)
    if not isinstance(table, dict) or qualname not in table.get("functions", ()):
        return None
    targets = {qualname, f"{qualname}.<locals>._bc_body"}
    values = list(vars(module).values())
    stack = [c for c in [*values, *map(held, values)] if isinstance(c, types.FunctionType)]
    stack += [
        m
        for c in vars(module).values()
        if isinstance(c, type)
        for m in vars(c).values()
        if isinstance(m, types.FunctionType)
    ]
    codes = [f.__code__ for f in stack]
    while codes:
        code = codes.pop()
        if code.co_qualname in targets and _is_body(code):
            meta = _make_meta(table["functions"][qualname], module_name, qualname, code, vars(module))
            _BY_CODE[code] = _BY_CODE_ID[id(code)] = meta
            _BY_REF[meta.ref] = meta
            _register_nested(meta)
            return meta
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return None


def _by_name(module: types.ModuleType, qualname: str) -> Any:
    """Walk a qualname through __dict__ only (no getattr hooks, no imports); an object there that
    holds a function (see `held`) stands for it."""
    found: Any = module
    for part in qualname.split("."):
        if not isinstance(found, (type, types.ModuleType)):
            return None
        found = vars(found).get(part)
    return held(found)


def held(value: Any) -> Any:
    """The function `value` stands for: itself, or the one it holds as `__wrapped__` in its own
    __dict__ (a tool made by a decorator, a functools.wraps wrapper), followed a few levels;
    read through __dict__ only, so no getattr hook or property runs."""
    for _ in range(8):
        if isinstance(value, (type, types.ModuleType)):
            return value
        try:
            own = object.__getattribute__(value, "__dict__")
        except Exception:  # no __dict__, or a class's own __dict__ property that fails: nothing is held
            return value
        if type(own) is not dict or own.get("__branchc_meta__") is not None:
            return value
        inner = own.get("__wrapped__")
        if not callable(inner):
            return value
        value = inner
    return value


def compiled_function(ref: Any, modules: frozenset[str] | None = None) -> types.FunctionType:
    """The public compiled function `module:qualname` (a variable that held one, by name)."""
    ref = _here(ref)
    module, qualname = _split(ref, "ref")
    _check_modules(module, modules, ref)
    known = _known(module)
    if known is None or qualname not in known.functions:
        raise SnapshotError(f"ref: {ref} is not a function a build compiled")
    found = _by_name(_import(module, known), qualname)
    meta = getattr(found, "__branchc_meta__", None)
    if not isinstance(found, types.FunctionType) or meta is None or meta.ref != ref:
        raise SnapshotError(f"ref: {ref} is not a compiled function here")
    return found


def resolve_class(ref: Any, modules: frozenset[str] | None = None) -> type:
    """The class `module:qualname`: a value type, or a class a build records (its module imported
    if a manifest lists it); SnapshotError otherwise."""
    found = _VALUE_TYPES.get(ref) if type(ref) is str else None
    if found is not None:
        return found
    ref = _here(ref)
    resolved = _RESOLVED.get(ref) if type(ref) is str else None
    if resolved is not None:  # found before in a compiled module loaded here: the same checks, in short
        found, known, loaded, module, qualname = resolved
        if (
            _LOADED.get(module) is known
            and (modules is None or module in modules)
            and sys.modules.get(module) is loaded
            and _by_name(loaded, qualname) is found
            and found.__module__ == module
            and found.__qualname__ == qualname
        ):
            return found
    module, qualname = _split(ref, "class")
    known = _known(module)
    if known is None or qualname not in known.classes:
        raise SnapshotError(
            f"{ref} is not a class a build records: a snapshot holds instances of classes defined at "
            f"module level in the compiled modules (and branchc's own data types)"
        )
    _check_modules(module, modules, ref)
    loaded = _import(module, known)
    found = _by_name(loaded, qualname)
    if not isinstance(found, type) or found.__module__ != module or found.__qualname__ != qualname:
        raise SnapshotError(f"{ref} is not a class defined there")
    if _LOADED.get(module) is known:  # its module's record and the module itself say whether it still holds
        if len(_RESOLVED) > 4096:  # modules made on the fly (a test's, say) are not kept for ever
            _RESOLVED.clear()
        _RESOLVED[ref] = (found, known, loaded, module, qualname)
    return found


#: "module:qualname" -> (the class, the record of its compiled module, that module, the module's name, the
#: qualname): what resolve_class found, taken again while the module's record, the module and the name are
#: the same (a reloaded or rebuilt module, or a name bound anew, resolves afresh)
_RESOLVED: dict[str, tuple[type, _Module, types.ModuleType, str, str]] = {}


def travels(cls: type) -> bool:
    """Whether a snapshot may name this class (see `resolve_class`)."""
    ref = f"{cls.__module__}:{cls.__qualname__}"
    if _VALUE_TYPES.get(ref) is cls:
        return True
    known = _LOADED.get(cls.__module__) or _known(cls.__module__)
    return known is not None and cls.__qualname__ in known.classes
