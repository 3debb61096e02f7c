"""The value codec: the live variables of a suspended generator as plain JSON data, and back.

`encode(roots)` turns a dict of named values into one object graph::

    {"classes": ["module:qualname", ...], "shapes": [[name, ...], ...],
     "roots": {name: <value>}, "objects": [<value>, ...]}

The two tables name each class and each set of field names once per graph (each is written only
when not empty); values refer to them by index, so a thousand messages of one model cost their
data and a few digits each, not their class reference and field names every time.

A value is written where it is used, in a vocabulary that stays close to the JSON of the
same data (so a snapshot costs little more than that JSON to write, store and read):

- None, bool, int, str and finite floats are themselves;
- a dict whose keys are all str (and not "$") is a JSON object of values;
- everything else is a JSON array whose first item is a short tag: ``["l", 1, 2]`` is a list,
  ``["u", ...]`` a tuple, ``["d", key, value, ...]`` any other dict, ``["f", "nan"]`` a float
  JSON has no literal for, ``["dt", "2024-05-01T12:00:00", tz, fold]`` a datetime, ...
  (the `_ENCODERS` / `_DECODERS` tables are the full list);
- an object met more than once (aliasing, cycles) is written once into "objects" and
  referenced by index wherever it occurs: ``[3]`` or ``{"$": 3}``. Both forms mean objects[3];
  the second exists because shared values are moved to the table after encoding, in place.

Strings never go to the table: their identity is not observable in practice.

NotSerializableError paths start at the root name: ``history[3]['when']``, ``point.tags[0]``,
``err.args[1]``, ``tags<item 2>`` (a set, in iteration order), ``counts<key 0>`` (a dict key),
``it<source>[4]`` (what an iterator runs over).

An instance of a plain class (made by `object.__new__`, no builtin base but object, no
pickling hooks: a context manager object, say) is ``["o", class, attributes, slots]``: `class`
is an index into "classes", and a payload of named values (attributes, slots, a model's or a
dataclass's fields, an exception's attributes) is ``[shape, value, ...]``, `shape` an index into
"shapes" that names the values in order (a model's fields_set is a shape index too).
`encode(..., classes=policy)` names only the classes `policy(cls)` accepts (the snapshot layer
accepts what a build records), and raises NotSerializableError for the rest.

`decode(data, classes=resolver, limits=DecodeLimits())` rebuilds the graph. Decoding is done on
untrusted data, so it runs no code named by the data except constructors of the fixed builtin
types here and classes (enums, pydantic models, dataclasses, exceptions, plain classes) that
`resolver("module:qualname")` gives (`from_modules(names)` gives those defined in the named
modules; the snapshot layer, those a build records). The codec never calls pickle, copyreg, eval
or exec, and imports nothing: the resolver decides what it imports. Anything malformed raises
SnapshotDataError naming the place in the data, e.g. ``roots['history'][3]`` (JSON positions:
item 0 of a tagged array is its tag; ``objects[4][1]`` for a class index out of range,
``shapes[2][0]`` for a table entry that is no name). In detail:

- models, dataclasses, plain objects and user exceptions are made with `object.__new__` (an exception: its
  builtin base's `__new__`) and filled with `object.__setattr__` or their `__dict__`: no
  `__new__`, `__init__`, `__post_init__`, `__setattr__`, validator or `model_post_init` of theirs
  runs (a data descriptor of the class named like a field, a property say, still takes the
  value: that is how the value was read). An attribute that would hide a method of the class
  (``{"describe": ...}`` in an instance `__dict__`) is refused, and so is a model's fields_set
  naming no field;
- what decoding does run of an allowed class: a Flag's constructor (with an int) for a
  combination of flags; the `__hash__` and `__eq__` of a dict key or set item (a frozen
  dataclass or model, an enum: as the program did when it built the dict); the `__iter__` of an
  iterator that an enumerate, zip, map or filter runs over (other objects are refused there);
- exceptions must be Exception subclasses: a SystemExit, KeyboardInterrupt, GeneratorExit (any
  BaseException that is not an Exception) would escape `except Exception` where the resumed
  code raises it again, so neither `encode` nor `decode` takes one (as a value, a cause or a
  context). A builtin exception is called with its args only where they are what its C code
  trusts (a UnicodeDecodeError's start and end within its object, a SyntaxError's details), and
  must come back as the class named (OSError(2, ...) would make a FileNotFoundError);
- time zone keys are relative paths of plain names (no "..", no leading "/"), looked up in the
  system's tz files; ISO texts are at most 64 characters; base64 is strict.

Bounds (`DecodeLimits`, a frozen dataclass; past one, SnapshotDataError names the limit and how
to raise it: ``decode(..., limits=DecodeLimits(max_depth=2000))``). Decoding takes time and
memory in proportion to the size of the data; the limits keep that proportion, and its total, small:

- max_values (10,000,000): values decoded in all (about the number of JSON values; a dict of
  scalars in a list, copied whole, counts as one), plus the
  values that hashing dict keys and set items visits (a tuple shared inside a key counts each
  time hashing meets it: tuple hashes are not cached, and sharing makes them exponential);
- max_depth (500): how deeply values nest, counted through references to shared values too (a
  chain of table entries, each referring to the one before, nests as deep as if written inline:
  hashing a tuple nested a million deep crashes CPython). Python's recursion limit also bounds
  decoding (about 250 to 1000 levels of inline nesting, by kind), with the same kind of error;
- max_int_bits (100,000): an int in hex, or either part of a Fraction (the gcd that reduces a
  Fraction takes quadratic time: about 14 ms at this size, more than a second at 1,000,000 bits);
  `encode` refuses bigger ints, so that what it writes is what decode takes;
- max_same_hash (8): how many keys of one dict (items of one set) may share a hash value. int,
  float, tuple, Decimal, Fraction, frozenset hashes are the same in every process, so data can
  make thousands of keys collide (``k * (2**61 - 1)``), and building the dict takes quadratic
  time; str (and bytes) hashes are salted per process. Repeated equal keys (items) are refused
  too: nothing `encode` writes has them.

What an extension decodes through `decode_child` counts against the same limits.

Extension protocol (the generator layer uses it for compiled generators, its Context handle,
compiled functions, cells):

- encode: ``extension(value, encode_child, path)`` is called for every value that is not a
  scalar and not of an exact builtin container type (list, dict, tuple, set, frozenset cannot
  be anything the extension owns; their subclasses do reach it), nor of an exact type in the
  extension's optional ``declines`` attribute (say `BUILTIN_TYPES`), nor of a type for which its
  optional ``owns(type)`` says False (asked once per type and encoding: an extension that answers
  by type alone, as the generator layer's does, is then never called for a history's thousand
  models). `path` is like
  ``"history[3]['when']"`` once formatted: it comes as a lazy chain, `format_path(path)` gives the
  text (child paths may be chains too: ``(path, "name", ".{}")``). The value is already
  registered, so a child may refer back to it.
  The extension returns a JSON dict ``{"t": tag, ...}`` (stored as ``["@", entry]``) or None
  to let the codec handle the value; return None before encoding any child.
  ``encode_child(child, child_path)`` returns the child's JSON: put it into the entry as it is
  (no copy): if the child turns out to be shared it is turned into a reference in place.
- decode: ``extension(entry, decode_child, path)`` is called with that dict and returns the
  object, or raises SnapshotDataError. ``decode_child(json_value, child_path)`` decodes a child;
  `child_path` is a str, or a chain ``(parent_path, key, "{!r}-style format")`` that is only
  formatted (parent text + format.format(key)) if an error names it. A child may be a list,
  dict, model, ... that is still being filled (a cycle runs through the entry): do not look
  inside it. If the extension's object is mutable and may sit on a cycle, it calls
  ``decode_child.created(obj)`` before decoding children, so references back get obj.

Identity is keyed by ``id()`` for the duration of one `encode` call (values are alive through
the roots; temporaries made by the codec or handed to encode_child are kept alive meanwhile).
`encode` first tries an optimistic pass that writes lists and str-keyed dicts without its memo
and only checks, at the end, that none of them came twice; if one did (sharing, a cycle), it
encodes again with the memo. The output is the same either way (an extension may be asked
twice about the same value, so it should not count on being asked once).

Fast paths: `encode_plain(values)` / `decode_plain(values)` do what `encode` / `decode` do, for
graphs of plain data only (scalars, lists and str-keyed dicts of them, range iterators, no
sharing), in much less code; they return None for anything else (or past the `limits`), and the caller
then runs the full codec, which also reports any error.

Limits of the format: a dict or set whose hashing needs an object that sits on a cycle through
that same dict or set cannot be restored; set and dict iterators come back as iterators over a
list of the items they had left; exceptions lose their traceback (and AttributeError its `obj`);
a ZoneInfo comes back only where its zone file is installed;
itertools iterators need a Python that still lets them be reduced (up to 3.13).
"""

from ..errors import NotSerializableError, SnapshotDataError
from .common import DEFAULT_LIMITS, ClassResolver, DecodeExtension, DecodeLimits, Extension, format_path, from_modules
from .decode import decode
from .encode import BUILTIN_TYPES, encode
from .plain import decode_plain, encode_plain

__all__ = [
    "BUILTIN_TYPES",
    "DEFAULT_LIMITS",
    "ClassResolver",
    "DecodeExtension",
    "DecodeLimits",
    "Extension",
    "NotSerializableError",
    "SnapshotDataError",
    "decode",
    "decode_plain",
    "encode",
    "encode_plain",
    "format_path",
    "from_modules",
]
