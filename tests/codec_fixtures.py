"""Classes the codec tests send through snapshots: the one module those tests allow."""

from __future__ import annotations

import dataclasses
from enum import Enum, Flag, IntEnum, StrEnum

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

# Calls that a restore must not make (it rebuilds state, it does not re-run constructors).
CALLS: list[str] = []


class Color(Enum):
    RED = 1
    GREEN = 2


class Level(IntEnum):
    LOW = 1
    HIGH = 2


class Mode(StrEnum):
    READ = "r"
    WRITE = "w"


class Perm(Flag):
    R = 4
    W = 2
    X = 1


class Outer:
    class Inner(Enum):
        A = "a"


class Card(BaseModel):
    rank: str
    suit: str = "spades"

    @field_validator("rank")
    @classmethod
    def count(cls, value: str) -> str:
        CALLS.append("Card.validate")
        return value


class Hand(BaseModel):
    model_config = ConfigDict(extra="allow")

    cards: list[Card] = []
    owner: str | None = None
    _secret: int = PrivateAttr(default=0)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)

    x: int


class Tree(BaseModel):
    name: str
    parent: Tree | None = None
    children: list[Tree] = []


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0
    tags: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        CALLS.append("Point.__post_init__")


@dataclasses.dataclass(frozen=True)
class FrozenPoint:
    x: int
    y: int


@dataclasses.dataclass(slots=True)
class Slotted:
    a: int
    b: list


@dataclasses.dataclass(eq=False)
class Node:
    value: int
    next: Node | None = None


class ToolError(Exception):
    """An exception whose __init__ signature differs from its args."""

    def __init__(self, code: int, message: str) -> None:
        CALLS.append("ToolError.__init__")
        super().__init__(f"{code}: {message}")
        self.code = code


class NotAModel:
    pass
