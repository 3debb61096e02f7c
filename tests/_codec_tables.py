"""Test data written readably, as the codec's format 1 did, turned into the format with tables.

Tests forge graphs by hand: ``["m", "mod:Card", {"rank": "A"}, ["rank"]]`` says what it means.
`tabled(graph)` turns each class reference written inline into an index into the graph's "classes"
table and each payload of named values into ``[shape, value, ...]`` with its names in "shapes" (and
a model's fields_set into an index there), appending to the tables a graph already has. What is not
in the readable form (an index already, a malformed part) is left as it is, for the decoder to judge.
"""

from __future__ import annotations

from typing import Any

# tag -> (the position of its class, the positions of its payloads of named values)
_CLASSED = {"e": (1, ()), "m": (1, (2, 4, 5)), "dc": (1, (2, 3)), "o": (1, (2, 3)), "x": (1, (3, 7))}


def tabled(graph: Any) -> Any:
    """`graph` (changed in place, and returned) with its inline class references and payloads in tables."""
    if type(graph) is not dict or "roots" not in graph:
        return graph
    classes: list = graph.get("classes", [])
    shapes: list = graph.get("shapes", [])

    def class_index(ref: str) -> int:
        if ref not in classes:
            classes.append(ref)
        return classes.index(ref)

    def shape_index(names: list) -> int:
        if names not in shapes:
            shapes.append(names)
        return shapes.index(names)

    def walk(x: Any) -> Any:
        if type(x) is dict:
            return {k: walk(v) for k, v in x.items()}
        if type(x) is not list:
            return x
        out = [walk(v) for v in x]
        if out and type(out[0]) is str and out[0] in _CLASSED:
            at, payloads = _CLASSED[out[0]]
            if len(out) > at and type(out[at]) is str:
                out[at] = class_index(out[at])
            for i in payloads:
                if len(out) > i and type(out[i]) is dict:
                    out[i] = [shape_index(list(out[i])), *out[i].values()]
            if out[0] == "m" and len(out) > 3 and type(out[3]) is list and all(type(n) is str for n in out[3]):
                out[3] = shape_index(out[3])
        return out

    graph["roots"] = walk(graph["roots"])
    if type(graph.get("objects")) is list:
        graph["objects"] = walk(graph["objects"])
    if classes:
        graph["classes"] = classes
    if shapes:
        graph["shapes"] = shapes
    return graph
