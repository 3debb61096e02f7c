"""Effects made but never yielded: `ctx.sample(...)` without its `yield` does nothing, and the
mistake otherwise shows only later, as an AttributeError on the effect (`answer.text`).

Read from the `ast` of a compiled function (a tool's client or a @resumable), where `ctx` is the
parameter annotated `Context`, else one called `ctx`, else the client's second parameter or a
@resumable's first (after `self` / `cls` in a method) when it is called `context` or the function
yields its effects elsewhere (`yield p.sample(...)`). Two shapes are reported, both precise:

- the call is a statement of its own: `ctx.log("info", "x")`;
- the call is assigned to a name that is never passed on (yielded, returned, put in a list, given
  to a call, ...) but only read through an attribute or an index, or not read at all:
  `answer = ctx.sample(prompt=p)` then `answer.text`.

An effect built first and yielded later (`e = ctx.sample(...); r = yield e`), gathered for
`ctx.all([...])` or returned is passed on, so it is never reported.
"""

from __future__ import annotations

import ast
import re

from .states import EFFECTS

__all__ = ["context_parameter", "may_have_unyielded", "unyielded_effects"]

# An effect call not right after `yield `: only a function with one can make an effect it never yields.
_UNPREFIXED = re.compile(rf"(?<!yield )\b\w+\s*\.\s*(?:{'|'.join(sorted(EFFECTS))})\s*\(")


def may_have_unyielded(text: str | None) -> bool:
    """False when the function's source text shows that every effect call is yielded at once (a
    cheap test that spares most functions the walk)."""
    return text is None or _UNPREFIXED.search(text) is not None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _is_context(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == "Context"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "Context"
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.rsplit(".", 1)[-1].strip() == "Context"
    return False


def context_parameter(definition: ast.FunctionDef | ast.AsyncFunctionDef, kind: str, method: bool) -> str | None:
    """The name of the function's Context parameter, or None when it has none that is clear."""
    arguments = definition.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    for argument in every:
        if _is_context(argument.annotation):
            return argument.arg
    for argument in every:  # a short-form tool's context without annotations (`def summarize(ctx, text)`)
        if argument.arg == "ctx" and argument.annotation is None:
            return "ctx"
    positional = [*arguments.posonlyargs, *arguments.args]
    static = any(
        (d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "") == "staticmethod"
        for d in definition.decorator_list
    )
    if method and not static:
        positional = positional[1:]
    index = 1 if kind == "client" else 0
    if len(positional) <= index or positional[index].annotation is not None:
        return None  # annotated as something else: not the context
    name = positional[index].arg
    if kind == "client" or name in ("ctx", "context"):
        return name  # a client is always called with the context second
    # A @resumable is given the context first by ctx.branch, but `yield from` may call it with
    # anything: take the first parameter for the context only when the function yields its effects.
    for node in ast.walk(definition):
        if isinstance(node, ast.Yield) and _effect(node.value, name):
            return name
    return None


def _effect(node: ast.AST | None, ctx: str) -> str | None:
    """`sample` for `ctx.sample(...)`, and so on; None for anything else."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == ctx
        and node.func.attr in EFFECTS
    ):
        return node.func.attr
    return None


def unyielded_effects(
    definition: ast.FunctionDef | ast.AsyncFunctionDef, kind: str, method: bool
) -> list[tuple[ast.Call, str, str]]:
    """(the effect's call, message, hint) for each effect the function makes and never yields."""
    ctx = context_parameter(definition, kind, method)
    if ctx is None:
        return []
    statements: list[ast.Call] = []  # `ctx.sample(...)` as a statement
    assigned: dict[str, list[ast.Call]] = {}  # name -> the effects assigned to it
    passed: set[str] = set()  # names read other than through an attribute or an index
    peeked: dict[str, ast.AST] = {}  # name -> its first `name.attr` / `name[...]`
    declared: set[str] = set()  # global / nonlocal: the value may be used elsewhere
    through: set[int] = set()  # ids of Name nodes read as `name.attr` / `name[...]`
    stack: list[tuple[ast.AST, bool]] = [(statement, False) for statement in reversed(definition.body)]
    while stack:
        node, nested = stack.pop()
        if not nested:
            if isinstance(node, ast.Expr) and _effect(node.value, ctx):
                statements.append(node.value)
            elif isinstance(node, ast.Assign) and _effect(node.value, ctx):
                if all(isinstance(target, ast.Name) for target in node.targets):
                    for target in node.targets:
                        assigned.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _effect(node.value, ctx):
                assigned.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                declared.update(node.names)
            elif isinstance(node, ast.Name) and node.id == ctx and isinstance(node.ctx, (ast.Store, ast.Del)):
                return []  # ctx is rebound: what it holds is not clear any more
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.value, ast.Name):
            through.add(id(node.value))
            peeked.setdefault(node.value.id, node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in through:
            passed.add(node.id)
        inner = nested or isinstance(node, _SCOPES)
        stack.extend((child, inner) for child in reversed(list(ast.iter_child_nodes(node))))

    found: list[tuple[ast.Call, str, str]] = []
    for call in statements:
        made = f"{ctx}.{call.func.attr}(...)"  # type: ignore[attr-defined]
        found.append((call, f"{made} makes an effect but does not yield it, so it never runs", f"write `yield {made}`"))
    for name, calls in assigned.items():
        if name in passed or name in declared:
            continue
        for call in calls:
            made = f"{ctx}.{call.func.attr}(...)"  # type: ignore[attr-defined]
            hint = f"write `{name} = yield {made}`"
            use = peeked.get(name)
            if use is None:
                message = f"the effect {made} is assigned to {name!r} but never yielded, so it never runs"
            else:
                shown = f"{name}.{use.attr}" if isinstance(use, ast.Attribute) else f"{name}[...]"
                message = (
                    f"{name!r} holds the effect {made}, not its result: the effect is never yielded, "
                    f"and `{shown}` at line {use.lineno} reads the effect"
                )
            found.append((call, message, hint))
    found.sort(key=lambda item: (item[0].lineno, item[0].col_offset))
    return found
