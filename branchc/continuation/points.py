"""What a run waiting at a suspension point carries, named so that two builds of a function agree.

A user's variable is named by its name. A variable the compiler made (`_bc_it3`: the iterator of a loop
around the point) is named by its role and rank among the live ones of that role (`~it2`: the second loop
iterator from the outside), since its number changes whenever the compiler numbers something else first.
`branchc compat` compares builds by these names, and a run moving to a new build is renamed by them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Migration", "add_migration", "by_role", "migration_for", "migrations_of"]

_MADE = re.compile(r"_bc_([a-z]+?)(\d+)$")


def by_role(names: Iterable[str]) -> dict[str, str]:
    """{variable: its name across builds} for the live variables `names` of one suspension point."""
    out: dict[str, str] = {}
    made: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        match = _MADE.match(name)
        if match:
            made.setdefault(match.group(1), []).append((int(match.group(2)), name))
        else:
            out[name] = name
    for role, numbered in made.items():
        for rank, (_, name) in enumerate(sorted(numbered), 1):
            out[name] = f"~{role}{rank}"
    return out


@dataclass(frozen=True)
class Migration:
    """An author's way for runs waiting at `point` of the function `module:qualname` in another build to go on
    at `to` in this one: `fn(variables) -> variables`, over the point's own variables by name (the compiler's are
    carried by role, continuation/snapshots.py)."""

    module: str
    qualname: str
    point: str
    to: str
    fn: Callable[[dict[str, Any]], dict[str, Any]]

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.qualname}"

    def describe(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"migration {name} ({self.ref}, {self.point!r} -> {self.to!r})"


_MIGRATIONS: dict[tuple[str, str], Migration] = {}


def add_migration(migration: Migration) -> None:
    """Register `migration` (a module defining it again replaces its own; another for the same point is an error)."""
    key = (migration.ref, migration.point)
    known = _MIGRATIONS.get(key)
    if (
        known is not None
        and known.fn.__module__ == migration.fn.__module__
        and known.fn.__qualname__ == (migration.fn.__qualname__)
    ):
        known = None  # the same migration, its module imported again
    if known is not None:
        raise ValueError(f"{migration.describe()}: {known.describe()} already takes runs from that point")
    _MIGRATIONS[key] = migration


def migration_for(ref: str, point: str) -> Migration | None:
    return _MIGRATIONS.get((ref, point))


def migrations_of(module: str) -> list[Migration]:
    return [m for m in _MIGRATIONS.values() if m.module == module]
