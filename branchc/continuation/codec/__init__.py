"""The value codec: the live variables of a suspended generator as plain JSON data, and back.

`encode(roots)` turns a dict of named values into one object graph::

    {"roots": {name: <value>}, "objects": [<value>, ...]}

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

`decode(data, allowed_modules=...)` rebuilds the graph. It runs no code named by the data
except constructors of the fixed builtin types here and classes (enums, pydantic models,
dataclasses, exceptions) whose module is in `allowed_modules`; it never calls pickle,
copyreg, eval or exec, and imports nothing outside `allowed_modules` (importing "a.b" also
runs the package "a"). Anything malformed raises SnapshotDataError naming the place in the
data, e.g. ``roots['history'][3]`` (JSON positions: item 0 of a tagged array is its tag).

Extension protocol (the generator layer uses it for compiled generators, its Context handle,
compiled functions, cells):

- encode: ``extension(value, encode_child, path)`` is called for every value that is not a
  scalar and not of an exact builtin container type (list, dict, tuple, set, frozenset cannot
  be anything the extension owns; their subclasses do reach it), nor of an exact type in the
  extension's optional ``declines`` attribute (say `BUILTIN_TYPES`). `path` is like
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
sharing), in much less code; they return None for anything else, and the caller then runs the
full codec, which also reports any error.

Limits: nesting depth is bounded by Python's recursion limit; a dict or set whose hashing
needs an object that sits on a cycle through that same dict or set cannot be restored; set and
dict iterators come back as iterators over a list of the items they had left; exceptions lose
their traceback (and AttributeError its `obj`); a ZoneInfo comes back only where its zone file
is installed (or with "tzdata" allowed); itertools iterators need a Python that still lets
them be reduced (up to 3.13).
"""

from ..errors import NotSerializableError, SnapshotDataError
from .common import DecodeExtension, Extension, format_path
from .decode import decode
from .encode import BUILTIN_TYPES, encode
from .plain import decode_plain, encode_plain

__all__ = [
    "BUILTIN_TYPES",
    "DecodeExtension",
    "Extension",
    "NotSerializableError",
    "SnapshotDataError",
    "decode",
    "decode_plain",
    "encode",
    "encode_plain",
    "format_path",
]
