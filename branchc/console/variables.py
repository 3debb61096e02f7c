"""The live variables of a waiting run, read from its saved text as JSON data.

A saved run (runtime/runstate.py `dump_run`) is one object graph of the codec (continuation/codec): the run
machine, each branch with its compiled generator, and each generator's live variables (`vars`), in the codec's
vocabulary (scalars as themselves, `["l", ...]` a list, `["m", class, payload]` a model, `[3]` a shared value in
"objects", `["@", {...}]` a generator, the Context, a compiled function). This module walks that data and says,
for each branch and each generator it delegates to, the name of each variable and its kind ("str, 12 chars",
"list, 3 items", "Verdict (model)"), and, when asked, a short preview of its value. Nothing is decoded, imported
or called: class names are only text out of the graph's table, so a run of code this process never loaded is
shown the same way, and a damaged text gives a note, not an error.

The work is bounded whatever the data: previews stop at a depth, a number of values and a length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..viz.render import readable

__all__ = ["Frame", "Variable", "waiting_frames"]

PREVIEW_CHARS = 240  # a value's preview is cut here
PREVIEW_VALUES = 200  # values one preview walks at most
PREVIEW_DEPTH = 4  # how deep a preview goes into containers
MAX_FRAMES = 64  # branches and delegates shown at most

_SEQUENCES = {"l": "list", "u": "tuple", "s": "set", "fs": "frozenset"}
_SCALARS = {
    "f": "float",
    "i": "int",
    "b": "bytes",
    "ba": "bytearray",
    "dt": "datetime",
    "tm": "time",
    "da": "date",
    "td": "timedelta",
    "tz": "timezone",
    "zi": "ZoneInfo",
    "dec": "Decimal",
    "uu": "UUID",
    "fr": "Fraction",
    "c": "complex",
    "rg": "range",
}
_ITERATORS = {
    "I": "iterator",
    "R": "reversed iterator",
    "DK": "dict keys iterator",
    "DV": "dict values iterator",
    "DI": "dict items iterator",
    "en": "enumerate",
    "zp": "zip",
    "cn": "count",
    "rp": "repeat",
    "ch": "chain",
    "mp": "map",
    "fl": "filter",
}
_CLASSED = {"e": "enum", "m": "model", "dc": "dataclass", "o": "object", "x": "exception"}


@dataclass(frozen=True)
class Variable:
    """One live variable: its name as the author wrote it (or what a compiler-made one holds), its kind, and its
    value's preview (None unless values were asked for)."""

    name: str
    kind: str
    preview: str | None = None


@dataclass
class Frame:
    """A generator a branch waits in: the branch, the function, the point it waits at and its live variables.
    `depth` 0 is the branch's own generator, 1 the one it delegates to with `yield from`, and so on."""

    branch: str
    function: str
    point: str
    depth: int
    variables: list[Variable] = field(default_factory=list)


class _Graph:
    """The codec graph of a saved run: its class table and its table of shared values."""

    def __init__(self, graph: dict[str, Any]) -> None:
        classes, objects, shapes = graph.get("classes", []), graph.get("objects", []), graph.get("shapes", [])
        self.classes = classes if isinstance(classes, list) else []
        self.objects = objects if isinstance(objects, list) else []
        self.shapes = shapes if isinstance(shapes, list) else []

    def resolve(self, value: Any, hops: int = 0) -> Any:
        """A shared value's entry (`[3]` or `{"$": 3}`), followed to what it stands for; anything else as it is."""
        while hops < 50:
            index = _reference(value)
            if index is None or not 0 <= index < len(self.objects):
                return value
            value, hops = self.objects[index], hops + 1
        return value

    def class_name(self, index: Any) -> str:
        if type(index) is int and 0 <= index < len(self.classes) and isinstance(self.classes[index], str):
            return self.classes[index].rpartition(":")[2] or "?"
        return "?"


def _reference(value: Any) -> int | None:
    if type(value) is list and len(value) == 1 and type(value[0]) is int:
        return value[0]
    if type(value) is dict and len(value) == 1 and type(value.get("$")) is int:
        return value["$"]
    return None


def _extension(value: Any) -> dict[str, Any] | None:
    if type(value) is list and len(value) == 2 and value[0] == "@" and type(value[1]) is dict:
        return value[1]
    return None


def kind_of(graph: _Graph, value: Any) -> str:
    """What a variable holds, in words, from its encoded value alone."""
    value = graph.resolve(value)
    if value is None:
        return "None"
    if type(value) is bool:
        return "bool"
    if type(value) is int:
        return "int"
    if type(value) is float:
        return "float"
    if type(value) is str:
        return f"str, {len(value)} char{'s' if len(value) != 1 else ''}"
    if type(value) is dict:
        return f"dict, {len(value)} key{'s' if len(value) != 1 else ''}"
    if type(value) is not list or not value or type(value[0]) is not str:
        return "?"
    tag = value[0]
    if tag in _SEQUENCES:
        count = len(value) - 1
        return f"{_SEQUENCES[tag]}, {count} item{'s' if count != 1 else ''}"
    if tag == "d":
        count = (len(value) - 1) // 2
        return f"dict, {count} key{'s' if count != 1 else ''}"
    if tag in _SCALARS:
        return _SCALARS[tag]
    if tag in _ITERATORS:
        return _ITERATORS[tag]
    if tag in _CLASSED and len(value) > 1:
        return f"{graph.class_name(value[1])} ({_CLASSED[tag]})"
    entry = _extension(value)
    if entry is not None:
        kind = entry.get("t")
        if kind == "gen":
            return f"generator {_function(entry.get('fn'))}"
        if kind == "ctx":
            return "the run's context"
        if kind == "ref":
            return f"reference to {str(entry.get('ref', '?')).rpartition(':')[2]}"
        return str(kind) if isinstance(kind, str) else "?"
    return "?"


def _function(name: Any) -> str:
    return str(name).rpartition(":")[2] if isinstance(name, str) else "?"


class _Preview:
    """A short text of an encoded value, Python-like, within PREVIEW_VALUES values and PREVIEW_DEPTH levels."""

    def __init__(self, graph: _Graph) -> None:
        self.graph = graph
        self.left = PREVIEW_VALUES

    def text(self, value: Any, depth: int = 0) -> str:
        self.left -= 1
        if self.left < 0 or depth > PREVIEW_DEPTH:
            return "…"
        value = self.graph.resolve(value)
        if value is None or type(value) in (bool, int, float):
            return str(value)
        if type(value) is str:
            return repr(value[:PREVIEW_CHARS])
        if type(value) is dict:
            return "{" + self._items(((repr(k), v) for k, v in value.items()), depth, ": ") + "}"
        if type(value) is not list or not value or type(value[0]) is not str:
            return "?"
        tag, rest = value[0], value[1:]
        if tag == "l":
            return "[" + self._each(rest, depth) + "]"
        if tag == "u":
            return "(" + self._each(rest, depth) + ("," if len(rest) == 1 else "") + ")"
        if tag in ("s", "fs"):
            return ("{" if tag == "s" else "frozenset({") + self._each(rest, depth) + ("}" if tag == "s" else "})")
        if tag == "d":
            pairs = ((self.text(rest[i], depth + 1), rest[i + 1]) for i in range(0, len(rest) - 1, 2))
            return "{" + self._items(pairs, depth, ": ") + "}"
        if tag in ("m", "dc") and len(value) > 2:
            return self._fields(value, depth)
        if tag == "e" and len(value) > 2:
            return f"{self.graph.class_name(value[1])}.{value[2]}"
        if tag in _SCALARS and len(rest) >= 1 and type(rest[0]) in (str, int, float):
            return f"{_SCALARS[tag]}({', '.join(json.dumps(part) for part in rest[:3])})"
        return f"<{kind_of(self.graph, value)}>"

    def _each(self, values: list[Any], depth: int) -> str:
        return self._items(((None, v) for v in values), depth, "")

    def _items(self, pairs: Any, depth: int, between: str) -> str:
        parts, size = [], 0
        for key, value in pairs:
            if self.left <= 0 or size > PREVIEW_CHARS:
                parts.append("…")
                break
            part = (f"{key}{between}" if key is not None else "") + self.text(value, depth + 1)
            parts.append(part)
            size += len(part) + 2
        return ", ".join(parts)

    def _fields(self, value: list[Any], depth: int) -> str:
        """A model's or dataclass's fields: its payload is [shape, value, ...], the shape naming them in order."""
        name = self.graph.class_name(value[1])
        payload = value[2] if type(value[2]) is list else []
        shapes = self.graph.shapes
        names = shapes[payload[0]] if payload and type(payload[0]) is int and 0 <= payload[0] < len(shapes) else []
        pairs = zip((n if isinstance(n, str) else "?" for n in names), payload[1:], strict=False)
        return f"{name}(" + self._items(pairs, depth, "=") + ")"


def _clip(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def waiting_frames(saved: str, *, values: bool = False) -> tuple[list[Frame], str | None]:
    """(each generator the run's branches wait in, with its live variables; a note when the text cannot be read
    so). `values`: also a preview of each value (for operators: a run's variables hold what its users said)."""
    if not saved:
        return [], "the run holds no saved state (it has ended, or has not waited yet)"
    try:
        data = json.loads(saved)
    except (ValueError, RecursionError):
        return [], "the saved run is not JSON this console can read"
    graph_data = data.get("graph") if isinstance(data, dict) else None
    if not isinstance(graph_data, dict) or not isinstance(graph_data.get("roots"), dict):
        return [], "the saved run has no object graph"
    graph = _Graph(graph_data)
    machine = _extension(graph.resolve(graph_data["roots"].get("machine")))
    if machine is None or not isinstance(machine.get("branches"), list):
        return [], "the saved run holds no run machine"
    frames: list[Frame] = []
    for item in machine["branches"]:
        if type(item) is not list or len(item) < 3 or type(item[0]) is not str:
            continue
        generator, depth = _extension(graph.resolve(item[2])), 0
        while generator is not None and generator.get("t") == "gen" and len(frames) < MAX_FRAMES:
            frame = Frame(item[0], _function(generator.get("fn")), str(generator.get("point") or ""), depth)
            delegate = None
            variables = generator.get("vars") if isinstance(generator.get("vars"), dict) else {}
            for name, value in sorted(variables.items()):
                entry = _extension(graph.resolve(value))
                if entry is not None and entry.get("t") == "ctx":
                    continue  # the run's handle: the same in every generator, and no data of the run's
                if entry is not None and entry.get("t") == "gen" and str(name).startswith("_bc_yf"):
                    delegate = entry  # the generator it waits in through `yield from`: a frame of its own
                preview = _clip(_Preview(graph).text(value)) if values else None
                frame.variables.append(Variable(readable(str(name)), kind_of(graph, value), preview))
            frames.append(frame)
            generator, depth = delegate, depth + 1
    return frames, None
