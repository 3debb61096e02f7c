"""What the encoder and the decoder share: paths, the builtin types they know, hints."""

from __future__ import annotations

import builtins
import dataclasses
import enum
import importlib
import io
import math
import re
import sys
import types
import typing
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from functools import cached_property, partial
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict

from ..errors import SnapshotDataError

Extension = Callable[[Any, Callable[[Any, str], Any], str], "dict | None"]
DecodeExtension = Callable[[dict, Callable[[Any, str], Any], str], Any]
#: "module:qualname" -> the class data may name; raises LookupError (or ValueError) to refuse it
ClassResolver = Callable[[str], Any]


def from_modules(modules: Iterable[str]) -> ClassResolver:
    """A resolver for the codec on its own: classes defined at module level in these modules (each
    imported when the data first names it), looked up through __dict__, never by getattr."""
    allowed = frozenset(modules)

    def resolve(ref: str) -> type:
        module, qualname = ref.split(":")
        if module not in allowed:
            raise LookupError(f"module {module!r} is not among the allowed modules")
        try:
            return _lookup(sys.modules.get(module) or importlib.import_module(module), qualname)
        except Exception as error:
            raise LookupError(f"cannot import {module}: {error}") from None

    return resolve


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
            part = f"[{key!r}]"
        else:
            path, key, how = path
            part = how.format(key)
        parts.append(part if len(part) <= 100 else part[:96] + "...]")  # a key from the data may be huge
    parts.append(str(path))
    parts.reverse()
    return "".join(parts)


_ATTR = ".{}"


@dataclasses.dataclass(frozen=True, slots=True)
class DecodeLimits:
    """Bounds on what `decode` builds from untrusted data (see codec/__init__.py); past one it
    raises SnapshotDataError naming the limit. Pass ``decode(..., limits=DecodeLimits(...))``
    to allow more."""

    #: Values decoded in all (about the number of JSON values: every item, key and field; a dict of
    #: scalars in a list, copied whole, counts as one), plus the parts that hashing a dict key or
    #: set item visits (a tuple shared inside a key, each time hashing meets it).
    max_values: int = 10_000_000
    #: How deeply values nest, counting through references to shared values.
    max_depth: int = 500
    #: The size of an int in hex (``["i", ...]``) or in a Fraction (whose gcd takes quadratic time).
    max_int_bits: int = 100_000
    #: How many keys of one dict (items of one set) may share a hash value.
    max_same_hash: int = 8

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or value < 1:
                raise ValueError(f"DecodeLimits.{field.name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = DecodeLimits()


def _over(path: Any, what: str, limits: DecodeLimits, name: str) -> SnapshotDataError:
    """The error for data past one of the DecodeLimits: which one, and how to raise it."""
    hint = f"over DecodeLimits.{name} = {getattr(limits, name):,} (pass decode(..., limits=DecodeLimits({name}=...)))"
    return SnapshotDataError(_fmt(path), f"{what}: {hint}")


def _show(x: Any, width: int = 60) -> str:
    """A short repr for an error message, made without running any code of the value's class
    (no __repr__ of a dataclass or model) and in bounded time, however big or shared the value."""
    text = _brief(x, 3, width)
    return text if len(text) <= width else text[: width - 3] + "..."


_REPR_AS_IS = frozenset({float, bool, type(None), complex})
_OPEN = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})"), dict: ("{", "}")}


def _brief(x: Any, depth: int, width: int) -> str:
    t = type(x)
    if t is str or t is bytes or t is bytearray:
        return repr(x[:width]) if len(x) > width else repr(x)  # a cut repr: no quote at the end
    if t is int:
        return repr(x) if x.bit_length() <= 4 * width else f"<int of {x.bit_length():,} bits>"
    if t in _REPR_AS_IS:
        return repr(x)
    if t in _OPEN:
        if not x:
            return {list: "[]", tuple: "()", set: "set()", frozenset: "frozenset()", dict: "{}"}[t]
        if depth == 0:
            return _OPEN[t][0] + "..." + _OPEN[t][1]
        parts = []
        size = 0
        for item in x.items() if t is dict else x:
            text = (
                f"{_brief(item[0], depth - 1, width)}: {_brief(item[1], depth - 1, width)}"
                if t is dict
                else _brief(item, depth - 1, width)
            )
            parts.append(text)
            size += len(text) + 2
            if size > width:
                parts.append("...")
                break
        opening, closing = _OPEN[t]
        return opening + ", ".join(parts) + ("," if t is tuple and len(x) == 1 else "") + closing
    return f"<{t.__qualname__}>"


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


_TYPING_CONSTRUCTS = frozenset(
    {typing.TypeVar, typing.ParamSpec, typing.TypeVarTuple, *(getattr(typing, "TypeAliasType", None),)} - {None}
)


def _why_not(x: Any) -> str:
    """The hint for a value the codec cannot carry."""
    if isinstance(x, io.IOBase):
        return "close it before the yield, or keep the path and reopen it after"
    if isinstance(x, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "make it @resumable so it compiles, or finish it before the yield"
    if isinstance(x, type):
        return "classes cannot travel; refer to the class by name after the yield"
    if type(x) in _TYPING_CONSTRUCTS:
        return "a type parameter or type alias is part of the code, not of the run; refer to it by name after the yield"
    if typing.get_origin(x) is not None:
        return (
            "a parameterized type (Box[int]) is part of the code, not of the run; refer to it by name after the "
            "yield (an instance made as Box[int](...) keeps one in __orig_class__: make it as Box(...))"
        )
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


# Builtin exception attributes that args do not imply, restored as keywords (OSError: positional).
_EXC_KEYWORDS = ((OSError, ("filename", "filename2")), (ImportError, ("name", "path")), (NameError, ("name",)))
_EXC_KEYWORDS += ((AttributeError, ("name",)),)


def _not_an_exception(cls: type) -> str | None:
    """Why instances of cls may not travel: a BaseException that is not an Exception (SystemExit,
    KeyboardInterrupt, GeneratorExit, ...) escapes `except Exception` where it is raised again."""
    if not issubclass(cls, Exception):
        return f"{_type_name(cls)} is a BaseException but not an Exception (it would escape `except Exception`)"
    for base in cls.__mro__:  # an Exception that is also a SystemExit, say, still exits
        if not issubclass(base, Exception) and base not in (BaseException, BaseExceptionGroup, object):
            what = f"{_type_name(cls)} derives from {_type_name(base)}, a BaseException but not an Exception"
            return f"{what} (raised, it acts as one)"
    return None


def _flag_problem(cls: type, value: Any) -> str | None:
    """Why a combination of flags may not travel: a value that is no int, or has bits that no member
    has. Each value a Flag class is called with stays in its cache for the life of the process
    (an IntFlag takes any int): data may ask only for combinations of the class's own members."""
    if type(value) is not int:
        return f"expected an integer, got {_show(value)}"
    mask = getattr(cls, "_flag_mask_", None)
    if type(mask) is int and (value < 0 or value & ~mask):
        return f"{_show(value)} has bits that no member of {cls.__qualname__} has"
    return None


def _span_problem(args: tuple | list, text_at: int, types_: tuple) -> str | None:
    text, start, end = args[text_at], args[text_at + 1], args[text_at + 2]
    if not isinstance(text, types_) or type(start) is not int or type(end) is not int:
        return "expected an object of the right type, and int start and end"
    if not 0 <= start <= end <= len(text):
        return f"start {start} and end {end} are not positions in its object (0 to {len(text)})"
    return None


def _exception_args_problem(cls: type, args: tuple | list) -> str | None:
    """What is wrong with the args of a builtin exception, where its C code trusts them (a
    UnicodeDecodeError whose start is negative crashes the interpreter when it is printed) or the
    traceback module does (a SyntaxError's details); None if they are fine."""
    if cls in (UnicodeDecodeError, UnicodeEncodeError):
        text = (bytes, bytearray) if cls is UnicodeDecodeError else str
        if len(args) != 5 or not isinstance(args[0], str) or not isinstance(args[4], str):
            return "expected (encoding, object, start, end, reason)"
        return _span_problem(args, 1, text)
    if cls is UnicodeTranslateError:
        if len(args) != 4 or not isinstance(args[3], str):
            return "expected (object, start, end, reason)"
        return _span_problem(args, 0, str)
    if issubclass(cls, SyntaxError) and len(args) == 2:  # (message, details): the details become attributes
        details = args[1]
        if type(details) is not tuple or len(details) not in (4, 6):
            return "expected (message, (filename, lineno, offset, text[, end_lineno, end_offset]))"
        for part, kind in zip(details, (str, int, int, str, int, int), strict=False):
            if part is not None and (not isinstance(part, kind) or type(part) is bool):
                return "expected str or None for its filename and text, int or None for its lines and offsets"
    return None


def _hides_method(attr: Any) -> bool:
    """Whether an instance attribute of that name would hide a class attribute that is code: a
    function or method (a non-data descriptor) or anything callable; cached_property is meant to be hidden."""
    if isinstance(attr, cached_property):
        return False
    kind = type(attr).__mro__
    getter = any("__get__" in vars(c) for c in kind)
    setter = any("__set__" in vars(c) or "__delete__" in vars(c) for c in kind)
    return (getter and not setter) or any("__call__" in vars(c) for c in kind)


def _hidden_method(cls: type, names: Any) -> str | None:
    """The first of `names` that, as an instance attribute, would hide a method of cls (so that
    calling that method would call the attribute instead), or None."""
    mro = cls.__mro__
    for name in names:
        for c in mro:
            attr = vars(c).get(name, _hidden_method)
            if attr is not _hidden_method:
                if _hides_method(attr):
                    return name
                break
    return None


_MEMBER = type(type("_Slotted", (), {"__slots__": ("x",)}).__dict__["x"])  # a __slots__ member descriptor
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
_POINTER = 8 if sys.maxsize > 2**32 else 4  # a slot or the weakref list


def slot_members(cls: type) -> dict[str, Any]:
    """The __slots__ members of a class and its bases, by name (their descriptors)."""
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if type(slots) is str else slots:
            member = klass.__dict__.get(name)
            if type(member) is _MEMBER:
                members[name] = member
    return members


def plain_class(cls: type) -> bool:
    """A class whose instances are their attributes: made by object.__new__, no builtin base but
    object, no pickling hooks of its own (a context manager class, say). Its instances travel as
    their __dict__ and slots, and come back without running any of its code."""
    if cls.__new__ is not object.__new__ or cls.__module__ == "builtins":
        return False
    for klass in cls.__mro__[:-1]:  # a class statement makes a mutable type; C types are immutable
        if klass.__module__ == "builtins" or klass.__flags__ & _IMMUTABLE_TYPE:
            return False
        if klass.__module__.partition(".")[0] in _PROCESS_MODULES:
            return False  # a thread, a socket, ...: it belongs to this process
    # Its slots, and the weak reference and __dict__ pointers when they sit in the object (since 3.12
    # they live before it, at a negative offset, as __dict__ already did).
    pointers = len(slot_members(cls)) + (cls.__weakrefoffset__ > 0) + (cls.__dictoffset__ > 0)
    if cls.__basicsize__ != object.__basicsize__ + pointers * _POINTER:
        return False  # a C struct of its own (an extension type): not just its attributes
    hooks = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__")
    return not any(getattr(cls, hook, None) is not getattr(object, hook, None) for hook in hooks)


def finalizer(cls: type) -> bool:
    """Whether instances run code of their class when they go (a __del__): a restored one would run
    it with whatever the snapshot put in it, so such classes do not travel."""
    return any("__del__" in klass.__dict__ for klass in cls.__mro__ if klass is not object)


# -- what hashing a dict key or set item runs -------------------------------------------------------
#
# Building a dict or set hashes its keys, and compares those whose hashes are alike: decoding must run
# no code of the program's classes, so a key may only be of a class whose __hash__ and __eq__ are
# builtin (a str, a tuple, a plain object's identity), an enum's, or generated by dataclasses (frozen,
# or unsafe_hash) or pydantic (a frozen model): checked by identity of the function or, for a
# dataclass, by its code against what dataclasses generates for those fields; and what those hash
# (a tuple's items, a dataclass's or model's fields) likewise. A class that writes its own is refused,
# by `encode` and by `decode` alike.

#: Exact types whose hash and comparisons are the standard library's own.
HASH_SAFE = frozenset(
    {str, int, float, bool, type(None), bytes, complex, Decimal, Fraction, uuid.UUID, range}
    | {date, datetime, time, timedelta, timezone, ZoneInfo}
)
_TRUSTED_OWNERS = frozenset({enum.Enum, BaseModel, Decimal, Fraction, uuid.UUID, date, datetime, time, timedelta})
_TRUSTED_OWNERS |= {timezone, ZoneInfo}
_OBJECT_CLASS = object.__dict__["__class__"]
_HASH_CHECKED: dict[int, tuple[type, str | None]] = {}  # id(class) -> (the class, kept alive; its problem)
_PYDANTIC_HASH: list[Any] = []  # the code of pydantic's generated __hash__, found once


def _defined(cls: type, name: str) -> tuple[type | None, Any]:
    """(the class of cls's MRO that defines `name`, what it holds there), read off __dict__s."""
    for klass in type.__dict__["__mro__"].__get__(cls):
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, None


def _pydantic_hash_code() -> Any:
    if not _PYDANTIC_HASH:

        class _Frozen(BaseModel):
            model_config = ConfigDict(frozen=True)
            x: int = 0

        _PYDANTIC_HASH.append(getattr(_Frozen.__dict__.get("__hash__"), "__code__", None))
    return _PYDANTIC_HASH[0]


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    return (a.co_code, a.co_consts, a.co_names, a.co_varnames, a.co_freevars, a.co_cellvars, a.co_argcount) == (
        b.co_code,
        b.co_consts,
        b.co_names,
        b.co_varnames,
        b.co_freevars,
        b.co_cellvars,
        b.co_argcount,
    ) and a.co_flags == b.co_flags


def _generated(owner: type, name: str, function: Any) -> bool:
    """Whether `function` is the `name` that dataclasses generates for this dataclass's fields: the
    same code as a dataclass made now with those fields and options gets (and `hash` the builtin)."""
    params = owner.__dict__.get("__dataclass_params__")
    if type(function) is not types.FunctionType or params is None:
        return False
    if name == "__hash__" and function.__globals__.get("hash", builtins.hash) is not builtins.hash:
        return False
    spec = [(f.name, object, dataclasses.field(compare=f.compare, hash=f.hash)) for f in dataclasses.fields(owner)]
    try:
        reference = dataclasses.make_dataclass(
            "_Reference", spec, eq=params.eq, frozen=params.frozen, unsafe_hash=params.unsafe_hash
        )
    except Exception:
        return False
    made = reference.__dict__.get(name)
    return type(made) is types.FunctionType and _same_code(function.__code__, made.__code__)


_C_FUNCTIONS = (types.WrapperDescriptorType, types.MethodDescriptorType, types.BuiltinFunctionType)


def _trusted(owner: type | None, name: str, function: Any) -> bool:
    if owner is None or owner is object or owner.__module__ == "builtins" or owner in _TRUSTED_OWNERS:
        return True
    if type(function) in _C_FUNCTIONS:  # a builtin's own (`__hash__ = object.__hash__`)
        return True
    if name == "__hash__" and getattr(function, "__code__", None) is _pydantic_hash_code():
        return True
    return dataclasses.is_dataclass(owner) and _generated(owner, name, function)


def hash_problem(cls: type) -> str | None:
    """Why hashing or comparing an instance of `cls` as a dict key or set item would run code of the
    program's own (its __hash__ or __eq__, or a __class__ of its own that a dataclass's __eq__ reads),
    or None. Checked once per class."""
    found = _HASH_CHECKED.get(id(cls))
    if found is None or found[0] is not cls:
        found = _HASH_CHECKED[id(cls)] = (cls, _hash_problem(cls))
    return found[1]


def _hash_problem(cls: type) -> str | None:
    owner, function = _defined(cls, "__hash__")
    if function is None:
        return None  # unhashable: hash() refuses it, running nothing
    for name in ("__hash__", "__eq__"):
        owner, function = _defined(cls, name)
        if not _trusted(owner, name, function):
            return f"{cls.__qualname__}.{name} is code of its own ({owner.__qualname__}.{name})"  # type: ignore[union-attr]
    if _defined(cls, "__class__")[1] is not _OBJECT_CLASS:
        return f"{cls.__qualname__} defines a __class__ of its own"
    return None


#: The hint for a key or set item whose class hashes with code of its own.
KEY_HINT = (
    "a restore builds dicts and sets without running code of the program's classes: key by a tuple of its "
    "fields, an enum, or a frozen dataclass or pydantic model (whose __hash__ and __eq__ are generated)"
)


def key_problem(key: Any, fields: Callable[[Any], Iterable[Any]]) -> tuple[type, str] | None:
    """(class, why) for the first value that hashing or comparing `key` would run code of the program's
    own for: the key, a tuple's or frozenset's items, a dataclass's or model's fields (`fields(obj)`
    gives them, read without running its code); None when there is none."""
    stack = [key]
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind in HASH_SAFE:
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        if kind is tuple or kind is frozenset:
            stack.extend(value)
            continue
        problem = hash_problem(kind)
        if problem is not None:
            return kind, problem
        if issubclass(kind, BaseModel) or (dataclasses.is_dataclass(kind) and not issubclass(kind, enum.Enum)):
            stack.extend(fields(value))  # what its generated __hash__ and __eq__ read
    return None


def written_tables(class_index: dict[str, int], shape_index: dict[tuple[str, ...], int]) -> dict[str, list]:
    """A document's "classes" and "shapes" tables from the indexes an encoding built (each only when not empty)."""
    tables: dict[str, list] = {}
    if class_index:
        tables["classes"] = list(class_index)
    if shape_index:
        tables["shapes"] = [list(names) for names in shape_index]
    return tables


_KEPT_PACKAGE = re.compile(r"_bcb_[0-9a-f]+\.")


def saved_module(name: str) -> str:
    """A module's name as a snapshot writes it: a module of an older build kept beside the served one is
    imported as `_bcb_<build>.module` (runtime/builds.py), and written under the name its build gave it."""
    if name.startswith("_bcb_"):
        found = _KEPT_PACKAGE.match(name)
        if found is not None:
            return name[found.end() :]
    return name
