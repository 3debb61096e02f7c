"""Pass 5, states: the split graph of one compiled function, as the manifest records it.

A state is the code that runs between two suspensions: state 0 from the call to the first
yield, state k from the resume at yield k to the next suspension. This pass reads the
function's source (CPython's `ast`, which carries every line) as a control-flow graph, then
walks it from each state's start to every suspension it can reach. A transition is *loop*
when its path takes a loop's back edge, and *exception* when its path is an exception
raised at a yield (a failed effect, a limit, a `throw()`) or by `raise`, caught by a handler
or running a finally on the way out. Exceptions that ordinary statements might raise are
left out: they would link every state to every handler.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

__all__ = ["EFFECTS", "StateGraph", "effect_of", "state_graph"]

EFFECTS = frozenset({"sample", "elicit", "branch", "all", "log", "notify"})
RETURN, RAISE = "return", "raise"
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class StateGraph:
    """What `state_graph` found: each state's source lines, and the transitions between states."""

    lines: dict[int, list[int]]  # state -> the source lines it may run
    transitions: list[tuple[int, int | str, str]]  # (state, next state or "return"/"raise", kind)


@dataclass
class _Finally:
    entry: int
    jumps: set[str] = field(default_factory=set)  # completions that pass through it: return, break, ...


@dataclass
class _Frame:
    kind: str  # "loop" or "try"
    head: int = 0  # loop: where `continue` goes
    breaks: list[int] = field(default_factory=list)  # loop: nodes that leave by `break`
    dispatch: int | None = None  # try: where an exception goes to find its handler
    final: _Finally | None = None  # try: its finally block


class _Flow:
    """The control-flow graph of a function body: nodes carry lines, and labels for yields."""

    def __init__(self, labels: Callable[[ast.AST], int | None], lines: Collection[int]) -> None:
        self.label_of = labels
        self.yield_lines = lines
        self.nodes: list[dict] = []  # lines, and a label (a yield) or a terminal ("return"/"raise")
        self.out: list[list[tuple[int, dict]]] = []  # node -> (successor, edge data)
        self.stack: list[_Frame] = []
        self.entry = self.node()
        self.exits = {RETURN: self.node(terminal=RETURN), RAISE: self.node(terminal=RAISE)}

    def node(self, lines: range | list[int] = (), **data) -> int:
        self.nodes.append({"lines": lines, **data})
        self.out.append([])
        return len(self.nodes) - 1

    def link(self, sources: list[int], target: int, **data) -> None:
        for source in sources:
            self.out[source].append((target, data))

    # -- completions: raise, return, break, continue, through any finally on the way -----------

    def jump(self, source: int, kind: str, when: str | None = None, *, escape: bool = True) -> None:
        """Link `source` to where a completion of `kind` goes; `escape=False` stops at the function's
        edge (an exception that may escape from anywhere is drawn only where something catches it)."""
        edge = {"when": when} if when else {}
        for frame in reversed(self.stack):
            if frame.kind == "loop" and kind in ("break", "continue"):
                if kind == "break":
                    if when:  # leave through a pass-through node, so the `when` stays on this edge
                        out = self.node()
                        self.link([source], out, **edge)
                        source = out
                    frame.breaks.append(source)
                else:
                    self.link([source], frame.head, back=True, **edge)
                return
            if frame.kind != "try":
                continue
            if kind == RAISE and frame.dispatch is not None:
                self.link([source], frame.dispatch, raised=True, **edge)
                return
            if frame.final is not None:
                frame.final.jumps.add(kind)
                self.link([source], frame.final.entry, pending=kind, raised=kind == RAISE, **edge)
                return
        if escape:
            self.link([source], self.exits[kind], raised=kind == RAISE, **edge)

    # -- expressions: the yields in them, in the order the compiler labelled them -----------------

    def expression(self, parts: list[ast.AST], lines: range, preds: list[int]) -> list[int]:
        yields: list[tuple[int, ast.AST, bool]] = []
        for part in parts:
            if self.may_yield(part):
                _yields(part, False, yields, self.label_of)
        first = self.node(lines)
        self.link(preds, first)
        if not yields:
            return [first]
        yields.sort(key=lambda found: found[0])
        before, labelled = first, []
        for label, node, optional in yields:
            suspend, after = self.node(label=label), self.node()
            self.link([before], suspend)
            self.link([suspend], after)
            if optional:  # from the junction before it to the one after: runs of them skip together
                self.link([before], after)
            if isinstance(node, ast.YieldFrom):  # each value the delegate yields suspends here again
                self.link([suspend], suspend)
            labelled.append(suspend)
            before = after
        end = yields[-1][1].end_lineno or lines.stop - 1
        last = self.node(range(end, lines.stop))
        self.link([before], last)
        if any(frame.dispatch is not None or frame.final is not None for frame in self.stack):
            # an effect that fails raises at its yield: draw it where a handler or finally sees it
            for suspend in labelled:
                self.jump(suspend, RAISE, escape=False)
        return [last]

    def may_yield(self, node: ast.AST) -> bool:
        """Whether a labelled yield may lie in `node`: one starts on a line it spans (a def's or class's
        decorators lie above it: those are always looked at)."""
        start = getattr(node, "lineno", None)
        if start is None or isinstance(node, _NESTED):
            return True
        end = node.end_lineno or start
        return any(start <= line <= end for line in self.yield_lines)

    # -- statements ---------------------------------------------------------------------------

    def block(self, statements: list[ast.stmt], preds: list[int]) -> list[int]:
        for statement in statements:
            preds = self.statement(statement, preds)
        return preds

    def statement(self, node: ast.stmt, preds: list[int]) -> list[int]:
        lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        method = getattr(self, "_" + type(node).__name__, None)
        if method is not None:
            return method(node, preds)
        if isinstance(node, _NESTED):  # only its decorators, defaults and bases run here
            return self.expression([node], range(node.lineno, node.lineno + 1), preds)
        return self.expression([node], lines, preds)

    def _Return(self, node: ast.Return, preds: list[int]) -> list[int]:
        for out in self.expression([node], _lines(node), preds):
            self.jump(out, RETURN)
        return []

    def _Raise(self, node: ast.Raise, preds: list[int]) -> list[int]:
        for out in self.expression([node], _lines(node), preds):
            self.jump(out, RAISE)
        return []

    def _Break(self, node: ast.Break, preds: list[int]) -> list[int]:
        self.jump(self.expression([], _lines(node), preds)[0], "break")
        return []

    def _Continue(self, node: ast.Continue, preds: list[int]) -> list[int]:
        self.jump(self.expression([], _lines(node), preds)[0], "continue")
        return []

    def _If(self, node: ast.If, preds: list[int]) -> list[int]:
        test = self.expression([node.test], _lines(node.test, node.lineno), preds)
        truth = _truth(node.test)
        outs = self.block(node.body, test) if truth is not False else []
        if truth is not True:
            outs += self.block(node.orelse, test) if node.orelse else test
        return outs

    def _While(self, node: ast.While, preds: list[int]) -> list[int]:
        head = self.node()
        self.link(preds, head)
        test = self.expression([node.test], _lines(node.test, node.lineno), [head])
        return self._loop(node, head, test, _truth(node.test))

    def _For(self, node: ast.For, preds: list[int]) -> list[int]:
        source = self.expression([node.iter], _lines(node.iter, node.lineno), preds)
        head = self.node(range(node.lineno, node.target.end_lineno + 1))
        self.link(source, head)
        target = self.expression([node.target], range(node.lineno, node.target.end_lineno + 1), [head])
        return self._loop(node, head, target, None)

    def _loop(self, node: ast.While | ast.For, head: int, test: list[int], truth: bool | None) -> list[int]:
        frame = _Frame("loop", head=head)
        self.stack.append(frame)
        tails = self.block(node.body, test) if truth is not False else []
        self.stack.pop()
        self.link(tails, head, back=True)
        outs = [] if truth is True else (self.block(node.orelse, test) if node.orelse else test)
        return outs + frame.breaks

    def _With(self, node: ast.With, preds: list[int], item: int = 0) -> list[int]:
        """Like a try whose finally is the manager's __exit__ (run on the `with` line), which may
        also swallow the exception: then the run goes on after the block. Several items nest."""
        part = node.items[item]
        header = range(part.context_expr.lineno, (part.context_expr.end_lineno or node.lineno) + 1)
        entered = self.expression([part], header, preds)
        final = _Finally(self.node(range(node.lineno, node.lineno + 1)))
        self.stack.append(_Frame("try", final=final))
        if item + 1 < len(node.items):
            outs = self._With(node, entered, item + 1)
        else:
            outs = self.block(node.body, entered)
        self.stack.pop()
        self.link(outs, final.entry, pending="normal")
        after = self.node()
        self.link([final.entry], after, when="normal")
        if RAISE in final.jumps:
            self.link([final.entry], after, when=RAISE)  # suppressed
        for kind in sorted(final.jumps):
            self.jump(final.entry, kind, when=kind)
        return [after]

    def _Match(self, node: ast.Match, preds: list[int]) -> list[int]:
        """Cases are tried in order: the next one when a pattern does not match or its guard is false."""
        subject = self.expression([node.subject], _lines(node.subject, node.lineno), preds)
        outs: list[int] = []
        tried = list(subject)
        for case in node.cases:
            pattern = self.expression([], range(case.pattern.lineno, case.pattern.lineno + 1), tried)
            if case.guard is not None:
                guard = self.expression([case.guard], _lines(case.guard), pattern)
                outs += self.block(case.body, guard)
                tried = pattern + guard
            else:
                outs += self.block(case.body, pattern)
                tried = pattern
        return outs + tried

    def _Try(self, node: ast.Try, preds: list[int]) -> list[int]:
        final = _Finally(self.node()) if node.finalbody else None
        dispatch = self.node() if node.handlers else None
        if dispatch is not None and final is not None and not any(map(_catches_all, node.handlers)):
            final.jumps.add(RAISE)  # what no handler catches runs the finally on its way out
            self.link([dispatch], final.entry, pending=RAISE)
        if dispatch is not None and final is None and not any(map(_catches_all, node.handlers)):
            self.jump(dispatch, RAISE, escape=False)  # what no handler here catches, an outer try may
        self.stack.append(_Frame("try", dispatch=dispatch, final=final))
        outs = self.block(node.body, self.expression([], range(node.lineno, node.lineno + 1), preds))
        self.stack.pop()
        self.stack.append(_Frame("try", final=final))  # handlers and else: inside the finally only
        outs = self.block(node.orelse, outs)
        for handler in node.handlers:
            entry = self.node(range(handler.lineno, handler.lineno + 1))
            self.link([dispatch], entry)
            outs += self.block(handler.body, [entry])
        self.stack.pop()
        if final is None:
            return outs
        self.link(outs, final.entry, pending="normal")
        ends = self.block(node.finalbody, [final.entry])
        after = self.node()
        self.link(ends, after, when="normal")
        for kind in sorted(final.jumps):
            for end in ends:
                self.jump(end, kind, when=kind)
        return [after]

    _TryStar = _Try


def _lines(node: ast.AST, start: int | None = None) -> range:
    return range(start or node.lineno, (node.end_lineno or node.lineno) + 1)


def _catches_all(handler: ast.ExceptHandler) -> bool:
    return handler.type is None or _dotted(handler.type) == "BaseException"


def _evaluated_at_definition(node: ast.AST) -> list[ast.AST]:
    """What a nested def, lambda or class evaluates where it stands (its body runs elsewhere)."""
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *(keyword.value for keyword in node.keywords)]
    arguments = node.args
    defaults = [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]
    return defaults if isinstance(node, ast.Lambda) else [*node.decorator_list, *defaults]


def _truth(test: ast.expr) -> bool | None:
    return bool(test.value) if isinstance(test, ast.Constant) else None


def _yields(node: ast.AST, optional: bool, found: list, label_of) -> None:
    """The labelled yields under `node`, in no particular order; `optional` when they may be skipped."""
    if isinstance(node, _NESTED):
        for part in _evaluated_at_definition(node):
            _yields(part, optional, found, label_of)
        return
    if isinstance(node, (ast.Yield, ast.YieldFrom)):
        label = label_of(node)
        if label is not None:  # a delegate may finish without ever suspending
            found.append((label, node, optional or isinstance(node, ast.YieldFrom)))
    if isinstance(node, ast.IfExp):
        _yields(node.test, optional, found, label_of)
        _yields(node.body, True, found, label_of)
        _yields(node.orelse, True, found, label_of)
        return
    if isinstance(node, ast.Assert):  # the message is evaluated only when the test fails
        _yields(node.test, optional, found, label_of)
        if node.msg is not None:
            _yields(node.msg, True, found, label_of)
        return
    if isinstance(node, ast.Compare):  # a chain stops at the first false comparison
        _yields(node.left, optional, found, label_of)
        for index, value in enumerate(node.comparators):
            _yields(value, optional or index > 0, found, label_of)
        return
    if isinstance(node, ast.BoolOp):
        for index, value in enumerate(node.values):
            _yields(value, optional or index > 0, found, label_of)
        return
    for child in ast.iter_child_nodes(node):
        _yields(child, optional, found, label_of)


def state_graph(
    function: ast.FunctionDef, label_of: Callable[[ast.AST], int | None], lines: Collection[int]
) -> StateGraph:
    """The states of `function` and the transitions between them; `label_of` names each yield's label,
    and `lines` are where the labelled yields start (the expressions elsewhere are not searched)."""
    flow = _Flow(label_of, lines)
    ends = flow.block(function.body, [flow.entry])
    for end in ends:
        flow.jump(end, RETURN)
    nodes, out = flow.nodes, flow.out
    starts = {0: flow.entry}
    starts.update((data["label"], node) for node, data in enumerate(nodes) if data.get("label") is not None)
    lines: dict[int, list[int]] = {}
    transitions: list[tuple[int, int | str, str]] = []
    for state, start in sorted(starts.items()):
        seen: set[tuple[int, str, str | None]] = set()
        covered: set[int] = set()
        found: dict[tuple[int | str, str], None] = {}
        work = deque([(start, "normal", None)])
        while work:
            node, kind, pending = work.popleft()
            for target, edge in out[node]:
                when = edge.get("when")
                if when is not None and pending is not None and when != pending:
                    continue
                step = "exception" if edge.get("raised") or kind == "exception" else kind
                if edge.get("back") and step == "normal":
                    step = "loop"
                after = edge.get("pending", None if when else pending)
                data = nodes[target]
                if data.get("label") is not None:
                    found[(data["label"], step)] = None
                elif data.get("terminal") is not None:
                    found[(data["terminal"], "exception" if data["terminal"] == RAISE else step)] = None
                elif (target, step, after) not in seen:
                    seen.add((target, step, after))
                    covered.update(data["lines"])
                    work.append((target, step, after))
        lines[state] = sorted(covered)
        transitions += [(state, target, kind) for target, kind in found]
    return StateGraph(lines, transitions)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return None


def effect_of(node: ast.Yield | ast.YieldFrom) -> dict:
    """What a yield suspends on, read from its syntax: the effect, and the functions it runs."""
    if isinstance(node, ast.YieldFrom):
        call = node.value
        target = _dotted(call.func) if isinstance(call, ast.Call) else None
        return {"kind": "yield from", "targets": [target] if target else []}
    value = node.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in EFFECTS):
        return {"kind": "value", "targets": []}
    kind = value.func.attr
    effect: dict = {"kind": kind, "targets": []}
    if (
        kind == "elicit"
        and value.args
        and isinstance(value.args[0], ast.Constant)
        and isinstance(value.args[0].value, str)
    ):
        effect["key"] = value.args[0].value
    calls = [value] if kind == "branch" else [n for n in ast.walk(value) if n is not value]
    for call in calls:
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "branch":
            target = _dotted(call.args[0]) if call.args else None
            if target and target not in effect["targets"]:
                effect["targets"].append(target)
    return effect
