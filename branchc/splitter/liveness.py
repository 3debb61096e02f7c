"""Pass 3, liveness: which variables a snapshot at each label must carry.

A control-flow graph of the lowered body, read as it runs normally
(`_bc_T` is 0, so resume guards fold away), with exception edges from every
statement in a try to its handlers and finally. A variable is live at a label if
some path from that yield reads it before writing it. The analysis errs on the
side of keeping: every name read counts as a use, a finally may continue
anywhere its pending completion could go, and a variable that a nested function
or lambda captures is kept wherever it is bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .cst import walk
from .lower import T

__all__ = ["live_variables"]


@dataclass
class _Node:
    uses: set[str] = field(default_factory=set)
    defs: set[str] = field(default_factory=set)
    label: int | None = None


class _Names(cst.CSTVisitor):
    """Reads and writes of one statement or expression; nested scopes count as reads."""

    def __init__(self) -> None:
        self.uses: set[str] = set()
        self.defs: set[str] = set()
        self.captured: set[str] = set()
        self._nested = 0

    def _store(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            if self._nested:
                return
            self.defs.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._store(element.value)
        elif isinstance(target, cst.StarredElement):
            self._store(target.value)
        else:
            walk(target, self)  # obj.attr / obj[key]: the object and key are read

    def visit_Name(self, node: cst.Name) -> None:
        (self.captured if self._nested else self.uses).add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False

    def visit_Assign(self, node: cst.Assign) -> bool:
        walk(node.value, self)
        for target in node.targets:
            self._store(target.target)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        if node.value is not None:
            walk(node.value, self)
            self._store(node.target)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        walk(node.value, self)
        walk(node.target, self)
        self._store(node.target)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        walk(node.value, self)
        self._store(node.target)
        return False

    def visit_Del(self, node: cst.Del) -> bool:
        walk(node.target, self)
        if isinstance(node.target, cst.Name):
            self.defs.add(node.target.value)
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            bound = alias.asname.name if alias.asname else alias.name
            while isinstance(bound, cst.Attribute):
                bound = bound.value
            self.defs.add(bound.value)  # type: ignore[union-attr]
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                bound = alias.asname.name if alias.asname else alias.name
                self.defs.add(bound.value)  # type: ignore[union-attr]
        return False

    def visit_Global(self, node: cst.Global) -> bool:
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False

    def _enter(self, node: cst.CSTNode) -> None:
        self._nested += 1

    def _leave(self, node: cst.CSTNode) -> None:
        self._nested -= 1

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _enter
    leave_Lambda = leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _leave

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            walk(decorator, self)
        walk(node.params, self)  # defaults are read now
        self._nested += 1
        walk(node.body, self)
        self._nested -= 1
        self.defs.add(node.name.value)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            walk(node.default, self)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        for part in (*node.decorators, *node.bases, *node.keywords):
            walk(part, self)
        self._nested += 1
        walk(node.body, self)
        self._nested -= 1
        self.defs.add(node.name.value)
        return False


def _names(*nodes: cst.CSTNode | None) -> _Names:
    names = _Names()
    for node in nodes:
        if node is not None:
            walk(node, names)
    return names


def _truth(test: cst.BaseExpression) -> bool | None:
    """The value of a test when `_bc_T` is 0, if the resume guards decide it; None when unknown."""
    if isinstance(test, cst.Name) and test.value == T:
        return False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _truth(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = _truth(test.left), _truth(test.right)
        if isinstance(test.operator, cst.And):
            return False if False in (left, right) else (True if left and right else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if isinstance(test, cst.Comparison) and (
        (isinstance(test.left, cst.Name) and test.left.value == T)
        or any(isinstance(c.comparator, cst.Name) and c.comparator.value == T for c in test.comparisons)
    ):
        return False  # labels start at 1, so `k <= _bc_T` and `_bc_T == k` are false
    return None


@dataclass
class _Try:
    dispatch: int  # where an exception raised inside goes
    final: int | None  # entry of the finally block, if any


class _Edges:
    """A directed graph's edges, each normal or exceptional (a plain dict of dicts: a graph
    library's bookkeeping cost more than the analysis)."""

    def __init__(self) -> None:
        self.succ: dict[int, dict[int, bool]] = {}  # node -> {successor: whether the edge is exceptional}
        self.pred: dict[int, dict[int, None]] = {}

    def add_node(self, node: int) -> None:
        self.succ.setdefault(node, {})
        self.pred.setdefault(node, {})

    def add_edge(self, source: int, target: int, exceptional: bool = False) -> None:
        self.add_node(source)
        self.add_node(target)
        following = self.succ[source]
        following[target] = following.get(target, False) or exceptional  # added again, it stays exceptional
        self.pred[target][source] = None


class _Graph:
    def __init__(self, labels: dict[cst.CSTNode, tuple[int, str | None]]) -> None:
        self.labels = labels
        self.graph = _Edges()
        self.nodes: dict[int, _Node] = {}
        self.loops: list[tuple[int, list[int]]] = []  # (head, break sources)
        self.tries: list[_Try] = []
        self.captured: set[str] = set()
        self.exit = self.add(_Node())

    def add(self, node: _Node) -> int:
        ident = len(self.nodes)
        self.nodes[ident] = node
        self.graph.add_node(ident)
        if self.tries:  # an exception may leave at any point, before the node's own writes happen
            self.graph.add_edge(ident, self.tries[-1].dispatch, exceptional=True)
        return ident

    def link(self, sources: list[int], target: int) -> None:
        for source in sources:
            self.graph.add_edge(source, target)

    def stmt(self, names: _Names, preds: list[int], label: int | None = None) -> int:
        self.captured |= names.captured
        node = self.add(_Node(names.uses - {T}, names.defs, label))
        self.link(preds, node)
        return node

    # -- statements ---------------------------------------------------------------------------

    def block(self, statements, preds: list[int]) -> list[int]:
        for statement in statements:
            preds = self.statement(statement, preds)
        return preds

    def statement(self, node: cst.BaseStatement, preds: list[int]) -> list[int]:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                preds = self.small(small, preds)
            return preds
        if isinstance(node, cst.If):
            return self.if_(node, preds)
        if isinstance(node, cst.While):
            return self.loop(node, preds, _names(node.test), _truth(node.test))
        if isinstance(node, cst.For):
            head = _names(node.iter)
            head.defs |= _names_of_target(node.target)
            return self.loop(node, preds, head, None)
        if isinstance(node, (cst.Try, cst.TryStar)):
            return self.try_(node, preds)
        if isinstance(node, cst.With):
            items = _Names()
            for item in node.items:
                walk(item.item, items)
                if item.asname is not None:
                    items._store(item.asname.name)
            return self.block(node.body.body, [self.stmt(items, preds)])
        if isinstance(node, cst.Match):
            subject = self.stmt(_names(node.subject), preds)
            outs: list[int] = [subject]
            for case in node.cases:
                pattern = _names(case.pattern, case.guard)
                pattern.defs = set(pattern.uses)  # capture names bind; reading them is harmless to keep
                outs += self.block(case.body.body, [self.stmt(pattern, [subject])])
            return outs
        # def / class: one node
        return [self.stmt(_names(node), preds)]

    def small(self, node: cst.BaseSmallStatement, preds: list[int]) -> list[int]:
        label = self.labels.get(node, (None, None))[0]
        if isinstance(node, cst.Return):
            self.link([self.stmt(_names(node), preds)], self._return_target())
            return []
        if isinstance(node, cst.Raise):
            self.stmt(_names(node), preds)
            return []
        if isinstance(node, (cst.Break, cst.Continue)):
            jump = self.stmt(_Names(), preds)
            if self.loops:
                head, breaks = self.loops[-1]
                if isinstance(node, cst.Break):
                    breaks.append(jump)
                else:
                    self.graph.add_edge(jump, head)
            if self.tries and self.tries[-1].final is not None:
                self.graph.add_edge(jump, self.tries[-1].final)
            return []
        return [self.stmt(_names(node), preds, label)]

    def _return_target(self) -> int:
        for entry in reversed(self.tries):
            if entry.final is not None:
                return entry.final
        return self.exit

    def if_(self, node: cst.If, preds: list[int]) -> list[int]:
        truth = _truth(node.test)
        test = self.stmt(_names(node.test), preds)
        outs: list[int] = []
        if truth is not False:
            outs += self.block(node.body.body, [test])
        if truth is not True:
            if isinstance(node.orelse, cst.If):
                outs += self.if_(node.orelse, [test])
            elif isinstance(node.orelse, cst.Else):
                outs += self.block(node.orelse.body.body, [test])
            else:
                outs.append(test)
        return outs

    def loop(self, node, preds: list[int], head_names: _Names, truth: bool | None) -> list[int]:
        head = self.stmt(head_names, preds)
        breaks: list[int] = []
        outs: list[int] = []
        if truth is not False:
            self.loops.append((head, breaks))
            tails = self.block(node.body.body, [head])
            self.loops.pop()
            self.link(tails, head)
        if truth is not True:
            outs += self.block(node.orelse.body.body, [head]) if node.orelse else [head]
        return outs + breaks

    def try_(self, node: cst.Try, preds: list[int]) -> list[int]:
        outer = self.tries[-1] if self.tries else None
        final_entry = self.add(_Node()) if node.finalbody else None
        dispatch = self.add(_Node())
        self.tries.append(_Try(dispatch, final_entry))
        body_out = self.block(node.body.body, preds)
        self.tries.pop()
        # handlers and else run outside this try's handlers, but inside its finally
        if final_entry is not None:
            self.tries.append(_Try(final_entry, final_entry))
        outs = self.block(node.orelse.body.body, body_out) if node.orelse else body_out
        for handler in node.handlers:
            bind = _Names()
            if handler.type is not None:
                walk(handler.type, bind)
            if handler.name is not None:
                bind._store(handler.name.name)
            entry = self.stmt(bind, [dispatch])
            outs += self.block(handler.body.body, [entry])
        if final_entry is not None:
            self.tries.pop()
        escape = final_entry if final_entry is not None else (outer.dispatch if outer else self.exit)
        self.graph.add_edge(dispatch, escape)
        if final_entry is None:
            return outs
        self.link(outs, final_entry)
        final_out = self.block(node.finalbody.body.body, [final_entry])
        # the pending completion may go anywhere it came from
        for target in (outer.dispatch if outer else self.exit, self._return_target()):
            self.link(final_out, target)
        if self.loops:
            head, breaks = self.loops[-1]
            self.link(final_out, head)
            breaks.extend(final_out)
        return final_out


def _names_of_target(target: cst.BaseExpression) -> set[str]:
    names = _Names()
    names._store(target)
    return names.defs


def _postorder(succ: dict[int, dict[int, bool]]) -> list[int]:
    """Every node after all it leads to (but around loops): the order that settles a backward
    analysis in about one visit a node."""
    order: list[int] = []
    seen: set[int] = set()
    for root in succ:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(succ[root]))]
        while stack:
            node, following = stack[-1]
            for after in following:
                if after not in seen:
                    seen.add(after)
                    stack.append((after, iter(succ[after])))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def live_variables(
    statements: list[cst.BaseStatement], labelled: dict[cst.CSTNode, tuple[int, str | None]]
) -> tuple[dict[int, set[str]], set[str]]:
    """(label -> variables live just after that yield, variables captured by nested scopes)."""
    graph = _Graph(labelled)
    ends = graph.block(statements, [])
    graph.link(ends, graph.exit)

    succ, pred = graph.graph.succ, graph.graph.pred
    live_in: dict[int, set[str]] = {n: set() for n in graph.nodes}

    def outs(ident: int) -> tuple[set[str], set[str]]:
        normal: set[str] = set()
        exceptional: set[str] = set()
        for following, raised in succ[ident].items():
            (exceptional if raised else normal).update(live_in[following])
        return normal, exceptional

    work = _postorder(succ)[::-1]  # successors first: a try's handlers are made before its body
    waiting = set(work)
    while work:
        ident = work.pop()
        waiting.discard(ident)
        info = graph.nodes[ident]
        normal, exceptional = outs(ident)
        new = info.uses | (normal - info.defs) | exceptional
        if new != live_in[ident]:
            live_in[ident] = new
            for before in pred[ident]:
                if before not in waiting:
                    waiting.add(before)
                    work.append(before)

    targets = {label: target for label, target in labelled.values()}
    result: dict[int, set[str]] = {}
    for ident, info in graph.nodes.items():
        if info.label is not None:
            normal, exceptional = outs(ident)  # a throw() at the yield leaves before the assignment
            target = targets.get(info.label)
            result[info.label] = (normal - ({target} if target else set())) | exceptional
    return result, graph.captured
