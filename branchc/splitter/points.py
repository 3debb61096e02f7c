"""Pass 6, points: a name for each suspension that survives unrelated edits.

A waiting run outlives the code that started it, so where it waits must be named by where the yield
sits, not by its state number: the path of compound statements around it (which loop, which branch of
an `if`, which part of a `try`) and the effect it waits on with its key: an elicitation's own key, a
branch's function, or else the variable the yield's value goes to. In
`while True: choice = yield ctx.elicit("choose_flight", ...)` the point is `while/elicit:choose_flight`;
in `for step in steps: reply = yield ctx.sample(...)` it is `for/sample:reply`. Adding a statement
elsewhere, renumbering the states, reformatting or editing a comment leaves it as it was; moving the
yield into another block renames it (a compatibility report then says the old point was removed).
Statements are named by kind, not counted: a loop added before another renames nothing in it.

Two yields that would get the same name in one function get an ordinal in source order (`log`,
`log#2`). A trailing comment pins a name by hand, and then nothing but that comment names
the point: `reply = yield ctx.sample(prompt=...)  # point: ask_budget`.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Iterator

from .states import effect_of

__all__ = ["PIN", "form_asked", "point_names"]

#: A hand-pinned name: `# point: NAME` on a line of the yield's own statement.
PIN = re.compile(r"#\s*point:\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*$")

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_YIELDS = (ast.Yield, ast.YieldFrom)


def point_names(
    definition: ast.FunctionDef | ast.AsyncFunctionDef,
    lines: list[str],
    label_of: Callable[[ast.AST], int | None],
) -> tuple[dict[int, str], list[tuple[ast.AST, str, str]]]:
    """({label: point name} for every yield of `definition` that `label_of` knows, [(node, message, hint)]
    for names that cannot be given: a pin used twice, or a pin equal to another point's own name)."""
    found: list[tuple[str, int]] = []  # (structural name, label), in source order
    pins: dict[int, tuple[str, ast.AST]] = {}
    for path, node, target in _yields(definition.body, ()):
        label = label_of(node)
        if label is None:
            continue
        found.append(("/".join((*path, _effect(node, target))), label))
        pin = _pin(node, lines)
        if pin is not None:
            pins[label] = (pin, node)
    names: dict[int, str] = {}
    seen: dict[str, int] = {}
    for name, label in found:
        seen[name] = seen.get(name, 0) + 1
        names[label] = name if seen[name] == 1 else f"{name}#{seen[name]}"
    problems: list[tuple[ast.AST, str, str]] = []
    pinned: dict[str, int] = {}
    for label, (pin, node) in pins.items():
        if pin in pinned:
            problems.append((node, f"two suspensions are pinned as point {pin!r}", "give each pin its own name"))
        elif pin in names.values() and names[label] != pin:
            problems.append(
                (node, f"point {pin!r} is also the name of another suspension", "pin a name no yield has already")
            )
        pinned[pin] = label
    for pin, label in pinned.items():
        names[label] = pin
    return names, problems


def form_asked(node: ast.AST, module: ast.Module) -> str | None:
    """For an elicitation, what identifies the form it asks: its schema class's name and a digest of the class's
    source when the module defines it, else the schema expression's text. A run waiting there was asked that
    form, so a new build whose form differs cannot take the answer unseen (`branchc compat` says so)."""
    if not isinstance(node, ast.Yield) or effect_of(node)["kind"] != "elicit":
        return None
    schema = next((k.value for k in node.value.keywords if k.arg == "schema"), None)  # type: ignore[union-attr]
    if schema is None:
        return None
    if isinstance(schema, ast.Name):
        for statement in module.body:
            if isinstance(statement, ast.ClassDef) and statement.name == schema.id:
                digest = hashlib.sha256(ast.unparse(statement).encode()).hexdigest()[:12]
                return f"{schema.id}@{digest}"
    return ast.unparse(schema)


def _effect(node: ast.Yield | ast.YieldFrom, target: str | None) -> str:
    """The last part of a point's name: the effect, with its key when it has one."""
    effect = effect_of(node)
    kind = effect["kind"]
    if kind == "yield from":
        return f"yield from:{effect['targets'][0]}" if effect["targets"] else "yield from"
    key = effect.get("key") or (effect["targets"][0] if kind == "branch" and effect["targets"] else None)
    if key is None:
        key = target
    return f"{kind}:{key}" if key else kind


def _pin(node: ast.AST, lines: list[str]) -> str | None:
    for line in lines[node.lineno - 1 : (node.end_lineno or node.lineno)]:
        match = PIN.search(line)
        if match:
            return match.group(1)
    return None


Found = tuple[tuple[str, ...], ast.AST, "str | None"]


def _yields(body: list[ast.stmt], path: tuple[str, ...]) -> Iterator[Found]:
    """(path of blocks, yield, the variable it is assigned to) for every yield in `body`, in source order; a
    path part names the kind of a compound statement that holds a yield and, for one with several blocks,
    which (no ordinal: two yields whose whole names agree get one, so a loop added elsewhere renames nothing)."""
    for statement in body:
        base = _compound(statement)
        if base is None:
            target, value = _assigned(statement), getattr(statement, "value", None)
            yield from ((path, node, target if node is value else None) for node in _own_yields(statement))
            continue
        if next(_own_yields(statement), None) is None:
            continue
        for head in _heads(statement):
            yield from ((path, node, None) for node in _own_yields(head))
        for part, block in _blocks(statement):
            yield from _yields(block, (*path, f"{base}:{part}" if part else base))


def _assigned(statement: ast.stmt) -> str | None:
    """The variable a `name = <value>` (or `name: T = <value>`) statement binds."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        target = statement.target
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


def _compound(statement: ast.stmt) -> str | None:
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return "for"
    if isinstance(statement, ast.While):
        return "while"
    if isinstance(statement, ast.If):
        return "if"
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return "with"
    if isinstance(statement, ast.Try) or type(statement).__name__ == "TryStar":
        return "try"
    if isinstance(statement, ast.Match):
        return "match"
    return None


def _heads(statement: ast.stmt) -> list[ast.AST]:
    """The expressions a compound statement evaluates itself: a yield there sits beside the statement."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter]
    if isinstance(statement, (ast.While, ast.If)):
        return [statement.test]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in statement.items]
    if isinstance(statement, ast.Match):
        return [statement.subject]
    return []


def _blocks(statement: ast.stmt) -> list[tuple[str, list[ast.stmt]]]:
    if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
        return [("", statement.body), ("else", statement.orelse)]
    if isinstance(statement, ast.If):
        return [("then", statement.body), ("else", statement.orelse)]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [("", statement.body)]
    if isinstance(statement, ast.Match):
        return [(f"case {ast.unparse(case.pattern)}", case.body) for case in statement.cases]
    handlers = [
        (f"except {ast.unparse(handler.type)}" if handler.type is not None else "except", handler.body)
        for handler in statement.handlers
    ]
    return [("body", statement.body), *handlers, ("else", statement.orelse), ("finally", statement.finalbody)]


def _own_yields(node: ast.AST) -> Iterator[ast.AST]:
    """The yields in `node` outside nested scopes, in source order (an inner yield before the one it is in)."""
    if isinstance(node, _NESTED):
        return
    for child in ast.iter_child_nodes(node):
        yield from _own_yields(child)
    if isinstance(node, _YIELDS):
        yield node
