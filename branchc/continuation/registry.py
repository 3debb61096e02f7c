"""The compiled functions this process knows: their metadata, by code object and by name.

A compiled module registers each compiled function when it is imported (the `compiled`
decorator the splitter puts on it); a snapshot names a function as "module:qualname" plus
the hash of its compiled code, and `lookup` finds it again.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import SnapshotError

__all__ = [
    "COMPILED_MODULES",
    "NESTED_CODE",
    "FunctionMeta",
    "compiled",
    "lookup",
    "meta_of",
    "nested_code",
    "reregister",
]


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
    globals: dict[str, Any] = field(repr=False, default_factory=dict)

    @cached_property
    def ref(self) -> str:
        return f"{self.module}:{self.qualname}"


def _is_body(code: types.CodeType) -> bool:
    return code.co_argcount > 0 and code.co_varnames[code.co_argcount - 1] == "_bc_R"


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
        globals=globals_,
    )


_BY_CODE: dict[types.CodeType, FunctionMeta] = {}
# The same by id(): hashing a code object walks its constants, each time. Registered code objects
# stay alive (they are keys above), so an id found here is that code's own.
_BY_CODE_ID: dict[int, FunctionMeta] = {}


#: modules that define compiled functions in this process (the default resume allowlist)
COMPILED_MODULES: set[str] = set()
#: code of functions nested in a compiled body -> (that function, path through co_consts)
NESTED_CODE: dict[types.CodeType, tuple[FunctionMeta, tuple[int, ...]]] = {}


def _register_nested(meta: FunctionMeta) -> None:
    stack = [(meta.body_code, ())]
    while stack:
        code, path = stack.pop()
        for index, const in enumerate(code.co_consts):
            if isinstance(const, types.CodeType):
                NESTED_CODE[const] = (meta, (*path, index))
                stack.append((const, (*path, index)))


def nested_code(meta: FunctionMeta, path: Any) -> types.CodeType | None:
    """The code object at `path` inside `meta`'s body (None if the path leads nowhere)."""
    code = meta.body_code
    if not isinstance(path, list) or not path:
        return None
    for index in path:
        if type(index) is not int or not 0 <= index < len(code.co_consts):
            return None
        code = code.co_consts[index]
        if not isinstance(code, types.CodeType):
            return None
    return code


_BY_REF: dict[str, FunctionMeta] = {}


def compiled(table: dict[str, dict], qualname: str):
    """Decorator the splitter puts on each compiled function: registers its metadata."""

    def register(fn: types.FunctionType) -> types.FunctionType:
        fn.__branchc_table__ = (table, qualname)  # type: ignore[attr-defined]
        body = next(c for c in fn.__code__.co_consts if isinstance(c, types.CodeType) and _is_body(c))
        meta = _make_meta(table[qualname], fn.__module__, qualname, body, fn.__globals__)
        _BY_CODE[body] = _BY_CODE_ID[id(body)] = meta
        _BY_REF[meta.ref] = meta  # a reloaded module replaces the old one
        COMPILED_MODULES.add(meta.module)
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


def lookup(ref: str, code_hash: str, allowed_modules: frozenset[str] | None = None) -> FunctionMeta:
    """The compiled function named `module:qualname`, importing its module only if allowed."""
    meta = _BY_REF.get(ref) if type(ref) is str else None
    if meta is not None and meta.hash == code_hash:
        return meta  # the common case, in short
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise SnapshotError(f"fn: {ref!r} is not 'module:qualname'")
    meta = _BY_REF.get(ref)
    module_name = ref.split(":")[0]
    if meta is None and module_name not in sys.modules:
        if allowed_modules is None or module_name not in allowed_modules:
            raise SnapshotError(
                f"fn: {ref} is not loaded, and module {module_name!r} is not in the allowed modules; "
                f"import the compiled module first, or pass allowed_modules"
            )
        importlib.import_module(module_name)
        meta = _BY_REF.get(ref)
    if meta is None:
        meta = _find_nested(ref)
    if meta is None:
        raise SnapshotError(f"fn: {ref} is not a compiled function in this process")
    if meta.hash != code_hash:
        raise SnapshotError(
            f"{ref}: the snapshot was taken from different compiled code (hash {code_hash}, here {meta.hash}); "
            f"resume it with the build that made it"
        )
    return meta


def _find_nested(ref: str) -> FunctionMeta | None:
    """Nested compiled functions register when their enclosing function runs; find them by code."""
    module_name, qualname = ref.split(":")
    module = sys.modules.get(module_name)
    table = getattr(module, "_bc_META", None)
    if not table or qualname not in table:
        return None
    targets = {qualname, f"{qualname}.<locals>._bc_body"}
    stack = [c for c in vars(module).values() if isinstance(c, types.FunctionType)]
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
            meta = _make_meta(table[qualname], module_name, qualname, code, vars(module))
            _BY_CODE[code] = _BY_CODE_ID[id(code)] = meta
            _BY_REF[ref] = meta
            _register_nested(meta)
            return meta
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return None
