"""`branchc compat OLD NEW`: which waiting runs a new build can take, read from two manifests.

A run waits at a suspension point (points.py), holding the variables live there. For each point of the
old build the report gives one verdict:

- unchanged: the function's code is the same;
- compatible: the same point in changed code, carrying the same variables of the same kinds, or more,
  each new one a parameter with a literal default;
- needs a migration: the point is there, but what it carries changed (names or kinds), or, for an
  elicitation, the form it asks (the schema class's source);
- removed: no point of that name in the function, or no such function.

Points only the new build has are listed as added. A point that needs a migration, or was removed, and
for which the new build has one (`@tool.migrate`), names it, and strands nothing. Variables the compiler
makes are compared by their role, not their number: the iterator of the second loop around a point is
`~it2` in both builds, whatever loops were added elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..continuation.points import by_role

__all__ = ["VERDICTS", "Point", "compare", "points_of", "with_waiting"]

VERDICTS = ("unchanged", "compatible", "needs a migration", "removed", "added")
#: verdicts that leave a run waiting at the point with no way on, unless a migration takes it (the exit status)
STRANDING = frozenset(("needs a migration", "removed"))


@dataclass(frozen=True)
class Point:
    """One line of the report."""

    module: str
    function: str
    point: str
    verdict: str
    tool: str | None = None
    label: int | None = None  # in the old build (the new one's for an added point)
    new_label: int | None = None
    detail: str = ""
    waiting: int | None = None  # runs waiting there (with a store)
    kept: int | None = None  # of those, runs whose own build is kept here: they can finish on it (runtime/builds.py)
    migration: str | None = None  # the new build's migration that takes runs from this point (Tool.migrate)
    changes: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value not in (None, "", {})}


def points_of(manifest: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(module, qualname) -> the function's manifest entry, with `tool`: the tool whose client it is."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for module, entry in (manifest.get("modules") or {}).items():
        clients = {tool.get("client"): tool.get("name") for tool in entry.get("tools", ())}
        for function in entry.get("functions", ()):
            out[(module, function["qualname"])] = {**function, "tool": clients.get(function["qualname"])}
    return out


def carried(suspension: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """What a run waiting at `suspension` holds: variable -> the kinds it can hold ("*": anything), with the
    compiler's own variables named by role and rank (`_bc_it3`, the second iterator here, is `~it2`)."""
    kinds = suspension.get("kinds", {})
    return {role: tuple(kinds.get(name, ("*",))) for name, role in by_role(suspension.get("live", ())).items()}


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Point]:
    """The report's lines for two manifests (branchc.json), old build first."""
    before, after = points_of(old), points_of(new)
    migrations = {
        (module, migration["function"], migration["point"]): migration["by"]
        for module, entry in (new.get("modules") or {}).items()
        for tool in entry.get("tools", ())
        for migration in tool.get("migrations", ())
    }
    lines: list[Point] = []
    for key, function in before.items():
        other = after.get(key)
        theirs = {s["point"]: s for s in other["suspensions"]} if other else {}
        for suspension in function["suspensions"]:
            line = _verdict(key, function, suspension, other, theirs.get(suspension["point"]))
            by = migrations.get((*key, suspension["point"]))
            if by is not None and line.verdict in STRANDING:
                line = replace(line, migration=by, detail=f"{line.detail}; migrated by {by}")
            lines.append(line)
    for key, function in after.items():
        ours = {s["point"] for s in before[key]["suspensions"]} if key in before else set()
        for suspension in function["suspensions"]:
            if suspension["point"] not in ours:
                lines.append(
                    Point(key[0], key[1], suspension["point"], "added", function["tool"], new_label=suspension["label"])
                )
    return lines


def _verdict(
    key: tuple[str, str],
    function: dict[str, Any],
    suspension: dict[str, Any],
    other: dict[str, Any] | None,
    theirs: dict[str, Any] | None,
) -> Point:
    module, qualname = key
    base = {"module": module, "function": qualname, "point": suspension["point"], "tool": function["tool"]}
    base["label"] = suspension["label"]
    if other is None:
        return Point(**base, verdict="removed", detail=f"the new build has no function {qualname} in {module}")
    if theirs is None:
        return Point(**base, verdict="removed", detail=f"{qualname} no longer suspends at {suspension['point']}")
    base["new_label"] = theirs["label"]
    if suspension.get("asks") != theirs.get("asks"):
        detail = f"the form it asks changed ({suspension.get('asks')} -> {theirs.get('asks')})"
        return Point(**base, verdict="needs a migration", detail=detail, changes={"form": True})
    if other["hash"] == function["hash"]:
        return Point(**base, verdict="unchanged")
    was, now = carried(suspension), carried(theirs)
    gone = sorted(set(was) - set(now))
    new = sorted(set(now) - set(was))
    retyped = sorted(name for name in set(was) & set(now) if not _fits(was[name], now[name]))
    defaults = set(other.get("defaults", {}))
    if not gone and not retyped and set(new) <= defaults:
        detail = f"new, from their defaults: {', '.join(new)}" if new else ""
        return Point(**base, verdict="compatible", detail=detail, changes={"defaults": new} if new else {})
    parts = []
    if gone:
        parts.append(f"no longer carries {', '.join(gone)}")
    if new:
        parts.append(f"now carries {', '.join(new)}")
    if retyped:
        parts.append("; ".join(f"{name} was {'|'.join(was[name])}, is {'|'.join(now[name])}" for name in retyped))
    changes = {"removed": gone, "added": new, "kinds": retyped}
    return Point(**base, verdict="needs a migration", detail="; ".join(parts), changes=changes)


def _fits(was: Iterable[str], now: Iterable[str]) -> bool:
    """Whether every value the old code could leave in a variable is one the new code accepts there."""
    now = set(now)
    return "*" in now or set(was) <= now


def _counted(waits: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    for wait in waits:
        counts[wait] = counts.get(wait, 0) + 1
    return counts


def with_waiting(
    lines: list[Point], waits: Iterable[tuple[str, str, str]], kept: Iterable[tuple[str, str, str]] = ()
) -> list[Point]:
    """The report's lines with how many of `waits` (tool, function, point: one per waiting branch of a store's runs)
    wait at each point, and how many of `kept` (those of runs whose own build is kept here); a run saved without its
    points (by a branchc before them) is a line of its own, removed: it goes on only where its own build is served."""
    counts, on_kept = _counted(waits), _counted(kept)
    out = []
    for line in lines:
        if line.verdict == "added":
            out.append(line)
            continue

        def at(counted: dict[tuple[str, str, str], int], line: Point = line) -> int:
            return sum(
                n
                for (tool, function, point), n in counted.items()
                if function == line.function and point == line.point and line.tool in (None, tool)
            )

        out.append(replace(line, waiting=at(counts), kept=at(on_kept)))
    for (tool, function, point), n in sorted(counts.items()):
        if not point:  # (its build, when kept here, still takes it: `kept`)
            detail = "saved without its points (by an older branchc): it goes on only where its own build is served"
            known = on_kept.get((tool, function, point), 0)
            out.append(Point("-", function, "(unknown)", "removed", tool, detail=detail, waiting=n, kept=known))
    return out
