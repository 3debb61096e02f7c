"""Pass 2, the split: make a normalised body resumable at every yield.

The body stays a native generator, so CPython keeps its own exception rules,
`finally` semantics and generator protocol. What is added is a way back in:

- Each yield gets a label k. Before it, `_bc_label = k` records where the frame waits.
- Resuming calls the body with a resume record: the prologue restores the saved
  variables and sets `_bc_T = k`; guards (`if not _bc_T:`) skip every statement
  before the target, compound statements are entered only when the target lies in
  them, and the target yield itself resets `_bc_T` to 0 and suspends: the frame is
  then exactly where the snapshot was taken.
- `for` loops keep their iterator in a variable, so it travels and is not re-made.
- Letting go of a generator whose run goes on elsewhere (`_bc_rt.release`) closes it while
  its thread is releasing: the yield's own GeneratorExit handler then sets `_bc_T = -1`,
  which no label matches, so the exception leaves the frame with every guard, `except`
  clause and `finally` body of the user's code skipped: nothing of the program runs.
- An `except` handler that contains a yield is re-entered by raising its exception
  (kept in `_bc_excN`) inside the try; a `finally` that contains a yield records its
  pending completion (an exception, or 'return' / 'break' / 'continue') in
  `_bc_pendN`, so resuming into it restores that completion natively.
- `catches` records, per label, what each of those can hold there: the classes the
  handler's `except` clause names (`"*"` for a bare `except:`), and for a finally what the
  analysis finds can reach it: GeneratorExit when a yield lies in its try (close() there
  leaves it pending), the classes its `raise` statements name, and a bare `raise` in a
  handler there re-raises what that handler's clause names. A snapshot may hold a
  BaseException that is not an Exception only where this says one can be.

In normal running `_bc_T` is 0, so each guard costs one test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from .cst import PREFIX, assign, block, dotted, expr, if_stmt, make, name, paren, simple, stmt, walk, yield_count

__all__ = ["Lowerer", "YieldSite", "count_yields"]

T = "_bc_T"


def count_yields(node: cst.CSTNode | list) -> int:
    if isinstance(node, list):
        return sum(map(yield_count, node))
    return yield_count(node)


def clause_names(caught: cst.BaseExpression | None) -> list[str] | None:
    """The names an `except` clause catches by (`"*"`: a bare except), or None when it is an
    expression of another kind (a call, a subscript: what it gives is known only when it runs)."""
    if caught is None:
        return ["*"]
    items = [element.value for element in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
    names = [dotted(item) for item in items]
    return None if None in names else names  # type: ignore[return-value]


class _Raises(cst.CSTVisitor):
    """What a try statement's body, handlers and else can raise by name (see `pending_names`)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.handlers: list[tuple[list[str] | None, str | None]] = []  # (clause names, `as` name), inner last

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # another scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        names = clause_names(node.type)
        if names is not None and any(name.startswith(PREFIX) for name in names):
            names = []  # a `with`'s own handler (PEP 343): it re-raises what came through its body, seen there
        alias = node.name.name.value if node.name is not None and isinstance(node.name.name, cst.Name) else None
        self.handlers.append((names, alias))

    def leave_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handlers.pop()

    def visit_Raise(self, node: cst.Raise) -> None:
        if node.exc is None:  # re-raises what the innermost handler caught
            if self.handlers and self.handlers[-1][0] is not None:
                self.names.update(self.handlers[-1][0])
            return
        raised = node.exc.func if isinstance(node.exc, cst.Call) else node.exc
        name = dotted(raised)
        if name is None:
            return
        for names, alias in reversed(self.handlers):
            if alias == name:  # `except X as e: ... raise e`
                if names is not None:
                    self.names.update(names)
                return
        self.names.add(name)


def pending_names(node: cst.Try) -> list[str]:
    """What can be pending when the finally of this try runs, by the compiler's analysis: GeneratorExit
    when a yield lies in its body, handlers or else (close() at that yield), and what its `raise`
    statements name; other BaseExceptions (a KeyboardInterrupt thrown in, a SystemExit of a function
    called) are not kept by a snapshot there."""
    region: list[cst.CSTNode] = [*node.body.body, *node.handlers]
    if node.orelse is not None:
        region += list(node.orelse.body.body)
    raises = _Raises()
    for part in region:
        walk(part, raises)
    if count_yields(region):
        raises.names.add("GeneratorExit")
    return sorted(raises.names)


def _int(value: int) -> cst.Integer:
    return cst.Integer(str(value))


def in_range(lo: int, hi: int) -> cst.BaseExpression:
    if lo == hi:
        return expr(f"{T} == {lo}")
    return expr(f"{lo} <= {T} <= {hi}")


# try: save what the handler's name held; on resume: put it back (or unbind it again)
_KEEP_NAME = "try:\n    {saved} = {held}\nexcept _bc_rt.NameError:\n    {saved} = _bc_rt.UNBOUND\n"
_RESTORE_NAME = "if {saved} is _bc_rt.UNBOUND:\n    del {held}\nelse:\n    {held} = {saved}\n"


@dataclass
class YieldSite:
    """One suspension point: its label, the original yield node, and whether it delegates."""

    label: int
    node: cst.Yield
    delegates: bool


@dataclass
class _Frame:
    kind: str  # "loop" or "fin"
    ident: int = 0
    crossing: set[str] = field(default_factory=set)


class Lowerer:
    def __init__(self, origin: dict[cst.CSTNode, cst.CSTNode], line_of: Callable[[cst.CSTNode], int]) -> None:
        self.origin = origin  # normalised yield or for -> the node in the source
        self.line_of = line_of  # a source node -> its line (0: unknown)
        self.label = 0
        self.ids = 0
        self.sites: list[YieldSite] = []
        self.stack: list[_Frame] = []
        self.yield_nodes: dict[cst.CSTNode, tuple[int, str | None]] = {}  # small statement -> (label, target)
        self.names: set[str] = set()  # the variables this pass introduces
        self.handler_vars: dict[int, list[str]] = {}  # label -> variables a resume there reads
        self.pending_vars: dict[int, list[str]] = {}  # label -> completion vars live there
        # label -> {exception variable around it: the names of the classes it can hold (None: unknown)}
        self.catches: dict[int, dict[str, list[str] | None]] = {}

    def new_id(self) -> int:
        self.ids += 1
        return self.ids

    def span(self, statements: list[cst.BaseStatement]) -> tuple[int, int]:
        n = count_yields(statements)
        return self.label + 1, self.label + n

    # -- blocks -----------------------------------------------------------------------------

    def block(self, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """A block that contains labels: skip what precedes the resume target."""
        out: list[cst.BaseStatement] = []
        group: list[cst.BaseStatement] = []
        for statement in statements:
            if not count_yields(statement):
                group += self.plain([statement])
                continue
            if group:
                out.append(if_stmt(expr(f"not {T}"), group))
                group = []
            out += self.labelled(statement)
        if group:  # a try body or else clause is entered while resuming into a later clause
            out.append(if_stmt(expr(f"not {T}"), group))
        return out

    def any_block(self, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return self.block(statements) if count_yields(statements) else self.plain(statements)

    def labelled(self, node: cst.BaseStatement) -> list[cst.BaseStatement]:
        if isinstance(node, cst.SimpleStatementLine):
            return self.yield_line(node)
        if isinstance(node, cst.If):
            return [self.if_(node)]
        if isinstance(node, cst.While):
            return [self.while_(node)]
        if isinstance(node, cst.For):
            return [self.for_(node)]
        if isinstance(node, cst.Try):
            return [self.try_(node)]
        if isinstance(node, cst.Match):
            return [self.match(node)]
        raise AssertionError(f"unexpected labelled statement {type(node).__name__}")  # the checker refused it

    # -- yields -----------------------------------------------------------------------------

    def yield_line(self, line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
        small = line.body[0]
        node = small.value  # Expr or Assign: both keep the yield in .value
        assert isinstance(node, cst.Yield), "normalisation leaves yields in statement position"
        self.label += 1
        k = self.label
        delegates = isinstance(node.value, cst.From)
        self.sites.append(YieldSite(k, self.origin.get(node, node), delegates))
        out: list[cst.BaseStatement] = []
        if delegates:
            sub = f"_bc_yf{k}"
            self.names.add(sub)
            out.append(if_stmt(expr(f"not {T}"), [assign(sub, expr("_bc_rt.yf_iter({e})", e=node.value.item))]))
            delegate = expr(f"{sub} if not {T} else _bc_rt.rejoin({sub}, ({T} := 0))")
            new = node.with_changes(value=node.value.with_changes(item=delegate))
        else:
            value = node.value if node.value is not None else name("None")
            new = node.with_changes(value=expr(f"{{v}} if not {T} else ({T} := 0)", v=paren(value)))
        statement = small.with_changes(value=new)
        target = small.targets[0].target.value if isinstance(small, cst.Assign) else None
        self.yield_nodes[statement] = (k, target)
        # try blocks cost nothing in CPython 3.11 until something is raised
        released = make(
            cst.ExceptHandler,
            type=expr("_bc_rt.GeneratorExit"),
            body=block([assign(T, expr("_bc_rt.on_exit()")), simple(cst.Raise())]),
        )
        guarded = make(
            cst.Try, body=block([self.marked(line.with_changes(body=[statement]), node)]), handlers=[released]
        )
        suspend = [assign("_bc_label", _int(k)), guarded]
        out.append(if_stmt(expr(f"not {T} or {T} == {k}"), suspend))
        if delegates:
            out.append(assign(f"_bc_yf{k}", name("None")))
        return out

    # -- compound statements ----------------------------------------------------------------

    def entry(self, test: cst.BaseExpression, body: list[cst.BaseStatement]) -> cst.BaseExpression:
        """Enter a body when its test holds in normal running, or when resuming into it."""
        a, b = self.span(body)
        if b >= a:
            return expr(f"(not {T} and {{test}}) or {{rng}}", test=paren(test), rng=in_range(a, b))
        return expr(f"not {T} and {{test}}", test=paren(test))

    def if_(self, node: cst.If) -> cst.If:
        body = list(node.body.body)
        condition = self.entry(node.test, body)
        new_body = self.any_block(body)
        orelse: list[cst.BaseStatement] = []
        if isinstance(node.orelse, cst.If):
            orelse = [node.orelse]
        elif isinstance(node.orelse, cst.Else):
            orelse = list(node.orelse.body.body)
        tail = None
        if orelse:
            c, d = self.span(orelse)
            else_test = expr(f"not {T} or {{rng}}", rng=in_range(c, d)) if d >= c else expr(f"not {T}")
            tail = make(cst.If, test=else_test, body=block(self.any_block(orelse)))
        return make(cst.If, test=condition, body=block(new_body), orelse=tail, leading_lines=node.leading_lines)

    def guard(self, lo: int, hi: int, body: list[cst.BaseStatement], node: cst.CSTNode) -> cst.If:
        return make(
            cst.If,
            test=expr(f"not {T} or {{rng}}", rng=in_range(lo, hi)),
            body=block(body),
            leading_lines=getattr(node, "leading_lines", ()),
        )

    def while_(self, node: cst.While) -> cst.If:
        lo, hi = self.span([node])
        body = list(node.body.body)
        condition = self.entry(node.test, body)
        self.stack.append(_Frame("loop"))
        new_body = self.any_block(body)
        self.stack.pop()
        orelse = make(cst.Else, body=block(self.any_block(list(node.orelse.body.body)))) if node.orelse else None
        loop = make(cst.While, test=condition, body=block(new_body), orelse=orelse)
        return self.guard(lo, hi, [loop], node)

    def for_(self, node: cst.For) -> cst.If:
        lo, hi = self.span([node])
        body = list(node.body.body)
        a, b = self.span(body)
        ident = self.new_id()
        iterator, item = f"_bc_it{ident}", f"_bc_v{ident}"
        self.names |= {iterator, item}
        self.stack.append(_Frame("loop"))
        new_body = self.any_block(body)
        self.stack.pop()
        for label in range(a, b + 1):  # resuming into the body reads the iterator
            self.handler_vars.setdefault(label, []).append(iterator)
        orelse = make(cst.Else, body=block(self.any_block(list(node.orelse.body.body)))) if node.orelse else None
        if b < a:
            # Only `else` holds labels: resuming there means the loop had ended.
            source = expr(f"{{e}} if not {T} else ()", e=paren(node.iter))
            loop = node.with_changes(iter=source, body=block(new_body), orelse=orelse)
            return self.guard(lo, hi, [loop], node)
        setup = if_stmt(
            expr(f"not {T}"), [self.marked(assign(iterator, expr("_bc_rt.iter({e})", e=paren(node.iter))), node)]
        )
        release = make(cst.Finally, body=block([assign(iterator, name("None"))]))  # as CPython drops it on exit
        # resuming into the body: one dummy step re-enters it; into `else`: the loop had ended
        source = expr(
            f"{iterator} if not {T} else (_bc_rt.resume_iter({iterator}) if {{rng}} else ())", rng=in_range(a, b)
        )
        bind = if_stmt(expr(f"not {T}"), [assign(node.target, name(item))])
        loop = make(cst.For, target=name(item), iter=source, body=block([bind, *new_body]), orelse=orelse)
        return self.guard(lo, hi, [setup, make(cst.Try, body=block([loop]), finalbody=release)], node)

    def try_(self, node: cst.Try) -> cst.If:
        lo, hi = self.span([node])
        ident = self.new_id()
        exc, ctx, pend = f"_bc_exc{ident}", f"_bc_ctx{ident}", f"_bc_pend{ident}"
        self.names |= {exc, ctx, pend}
        final = list(node.finalbody.body.body) if node.finalbody else []
        fin_labels = count_yields(final) > 0
        if fin_labels:
            frame = _Frame("fin", ident)
            self.stack.append(frame)

        # The body and else run (skipped) while resuming into a later clause: guard them even without labels.
        body_labels = count_yields(list(node.body.body)) > 0
        body = self.skippable(list(node.body.body))
        h_lo = self.label + 1
        handlers = [self.handler(h, exc, ctx, ident) for h in node.handlers]
        h_hi = self.label
        if h_hi >= h_lo or body_labels:
            handlers = self.resume_matching(node.handlers, handlers, h_lo)
        orelse = make(cst.Else, body=block(self.skippable(list(node.orelse.body.body)))) if node.orelse else None
        if fin_labels:
            self.stack.pop()
        f_lo = self.label + 1
        new_final = self.any_block(final)
        f_hi = self.label
        for label in range(h_lo, h_hi + 1):
            self.handler_vars.setdefault(label, []).append(exc)
        label = h_lo
        for source in node.handlers:  # what each handler's kept exception can be: what its clause names
            count = count_yields(list(source.body.body))
            for inside in range(label, label + count):
                self.catches.setdefault(inside, {})[exc] = clause_names(source.type)
            label += count
        if fin_labels:
            pending = pending_names(node)
            for label in range(f_lo, f_hi + 1):
                self.pending_vars.setdefault(label, []).append(pend)
                self.catches.setdefault(label, {})[pend] = pending
                if "return" in frame.crossing:
                    self.pending_vars[label].append("_bc_rv")

        inner_body: list[cst.BaseStatement] = []
        if h_hi >= h_lo:
            reenter: list[cst.BaseStatement] = []
            for variable in sorted({h.name.name.value for h in node.handlers if h.name is not None}):
                # the handler binds its name to the exception again: keep what the name held
                saved, held = name(f"_bc_hv{ident}_{variable}"), name(variable)
                reenter.append(stmt(_KEEP_NAME, saved=saved, held=held))
                self.names.add(f"_bc_hv{ident}_{variable}")
            reenter += [assign(ctx, expr(f"{exc}.__context__")), simple(cst.Raise(exc=name(exc)))]
            inner_body.append(if_stmt(expr(f"{T} and {{rng}}", rng=in_range(h_lo, h_hi)), reenter))
        inner_body += body

        if not fin_labels:
            # a plain finally runs only in normal running: not while a released frame unwinds
            guarded_final = [if_stmt(expr(f"not {T}"), new_final)] if new_final else new_final
            finalbody = node.finalbody.with_changes(body=block(guarded_final)) if node.finalbody else None
            new = node.with_changes(body=block(inner_body), handlers=handlers, orelse=orelse, finalbody=finalbody)
            return self.guard(lo, hi, [new], node)

        outer_body: list[cst.BaseStatement] = [
            if_stmt(expr(f"{T} and {{rng}}", rng=in_range(f_lo, f_hi)), self.dispatch(pend, ctx, frame.crossing))
        ]
        if handlers or orelse:
            outer_body.append(make(cst.Try, body=block(inner_body), handlers=handlers, orelse=orelse))
        else:
            outer_body += inner_body
        record = make(
            cst.ExceptHandler,
            type=expr("_bc_rt.BaseException"),
            name=make(cst.AsName, name=name("_bc_x")),
            body=block(
                [
                    if_stmt(
                        expr(f"{T} and {{rng}}", rng=in_range(f_lo, f_hi)),
                        [assign(make(cst.Attribute, value=name("_bc_x"), attr=name("__context__")), name(ctx))],
                    ),
                    assign(pend, name("_bc_x")),
                    simple(cst.Raise()),
                ]
            ),
        )
        # the finally done, let go of the pending exception: kept in a local, its traceback would hold this
        # frame (and every live variable in it) in a cycle until the collector ran (CPython's own `except ... as`
        # deletes its name for the same reason)
        let_go = assign(pend, name("None"))
        outer = make(
            cst.Try,
            body=block(outer_body),
            handlers=[record],
            finalbody=make(cst.Finally, body=block([*new_final, let_go])),
        )
        # nothing is pending unless we resume into the finally itself
        init = if_stmt(expr("not ({rng})", rng=in_range(f_lo, f_hi)), [assign(pend, name("None"))])
        return self.guard(lo, hi, [init, outer], node)

    def dispatch(self, pend: str, ctx: str, crossing: set[str]) -> list[cst.BaseStatement]:
        """Re-create the completion that was pending when the finally suspended."""
        reraise = if_stmt(
            expr(f"{pend} is not None"), [assign(ctx, expr(f"{pend}.__context__")), simple(cst.Raise(exc=name(pend)))]
        )
        if not crossing:
            return [reraise]
        branches: list[cst.BaseStatement] = []
        for kind in ("return", "break", "continue"):
            if kind in crossing:
                if kind == "return":
                    action = self.completion("return", name("_bc_rv"))
                else:
                    action = self.completion(kind, None)
                branches.append(if_stmt(expr(f"{pend} == '{kind}'"), action))
        return [if_stmt(expr(f"{pend}.__class__ is _bc_rt.str"), branches, [reraise])]

    def handler(self, handler: cst.ExceptHandler, exc: str, ctx: str, ident: int) -> cst.ExceptHandler:
        statements = list(handler.body.body)
        if not count_yields(statements):
            return handler.with_changes(body=block(self.plain(statements)))
        prefix: list[cst.BaseStatement] = []
        resumed = [assign(make(cst.Attribute, value=name(exc), attr=name("__context__")), name(ctx))]
        if handler.name is not None:
            variable = handler.name.name.value
            prefix.append(assign(exc, handler.name.name))
            saved = f"_bc_hv{ident}_{variable}"
            resumed.append(stmt(_RESTORE_NAME, saved=name(saved), held=name(variable)))
            new = handler
        else:  # a bare `except:` is `except BaseException:`, which can bind a name
            caught = handler.type if handler.type is not None else expr("_bc_rt.BaseException")
            new = handler.with_changes(
                type=caught, name=make(cst.AsName, name=name(exc)), whitespace_after_except=cst.SimpleWhitespace(" ")
            )
        prefix.append(if_stmt(name(T), resumed))
        return new.with_changes(body=block([*prefix, *self.block(statements)]))

    def resume_matching(self, original, handlers, first_label: int) -> list[cst.ExceptHandler]:
        """While `_bc_T` is set, no `except` expression is evaluated (they may have side effects):
        resuming, the re-raised exception reaches the handler that holds the label; a released
        frame (`_bc_T` is -1) matches no handler at all."""
        out = []
        label = first_label
        for source, handler in zip(original, handlers, strict=True):
            count = count_yields(list(source.body.body))
            if count:
                chosen = expr("_bc_rt.BaseException if {rng} else ()", rng=in_range(label, label + count - 1))
            else:
                chosen = expr("()")
            caught = paren(handler.type) if handler.type is not None else expr("_bc_rt.BaseException")
            handler = handler.with_changes(
                type=expr(f"{{e}} if not {T} else ({{c}})", e=caught, c=chosen),
                whitespace_after_except=cst.SimpleWhitespace(" "),
            )
            label += count
            out.append(handler)
        return out

    def skippable(self, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        if count_yields(statements):
            return self.block(statements)
        return [if_stmt(expr(f"not {T}"), self.plain(statements))] if statements else []

    def match(self, node: cst.Match) -> cst.If:
        lo, hi = self.span([node])
        ident = self.new_id()
        case_var = f"_bc_case{ident}"
        self.names.add(case_var)
        selectors = []
        for index, case in enumerate(node.cases):
            selectors.append(case.with_changes(body=block([assign(case_var, _int(index))])))
        chooser = node.with_changes(cases=selectors)
        branches: list[tuple[cst.BaseExpression, list[cst.BaseStatement]]] = []
        for index, case in enumerate(node.cases):
            statements = list(case.body.body)
            a, b = self.span(statements)
            chosen = expr(f"not {T} and {case_var} == {index}")
            test = expr("{c} or {rng}", c=chosen, rng=in_range(a, b)) if b >= a else chosen
            branches.append((test, self.any_block(statements)))
        chain: cst.If | None = None
        for test, body in reversed(branches):
            chain = make(cst.If, test=test, body=block(body), orelse=chain)
        setup = if_stmt(expr(f"not {T}"), [assign(case_var, expr("-1")), chooser])
        return self.guard(lo, hi, [setup, chain], node)

    # -- return / break / continue across a finally that yields ------------------------------

    def completion(self, kind: str, value: cst.BaseExpression | None) -> list[cst.BaseStatement]:
        fins: list[_Frame] = []
        for frame in reversed(self.stack):
            if frame.kind == "loop":
                if kind != "return":
                    break
                continue
            fins.append(frame)
            frame.crossing.add(kind)
        final: cst.BaseSmallStatement
        if kind == "return":
            final = cst.Return(value=value)
        else:
            final = cst.Break() if kind == "break" else cst.Continue()
        if not fins:
            return [simple(final)]
        out: list[cst.BaseStatement] = []
        if kind == "return":
            self.names.add("_bc_rv")
            out.append(assign("_bc_rv", value if value is not None else name("None")))
            final = cst.Return(value=name("_bc_rv"))
        for frame in fins:
            out.append(assign(f"_bc_pend{frame.ident}", cst.SimpleString(f"'{kind}'")))
        out.append(simple(final))
        return out

    def marked(self, line: cst.SimpleStatementLine, written: cst.CSTNode) -> cst.SimpleStatementLine:
        """A rewritten line, marked `# line N` with the source line it stands for (so that tracebacks
        and frame lines point there)."""
        number = self.line_of(self.origin.get(written, written))
        if not number:
            return line
        comment = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(f"# line {number}"))
        return line.with_changes(trailing_whitespace=comment)

    def plain(self, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """Yield-free statements: unchanged, except return/break/continue that cross a yielding finally."""
        if not any(frame.kind == "fin" for frame in self.stack):
            return list(statements)
        out: list[cst.BaseStatement] = []
        for statement in statements:
            out += self.plain_one(statement)
        return out

    def plain_one(self, node: cst.BaseStatement) -> list[cst.BaseStatement]:
        if isinstance(node, cst.SimpleStatementLine):
            out: list[cst.BaseStatement] = []
            kept: list[cst.BaseSmallStatement] = []
            for small in node.body:
                if isinstance(small, (cst.Return, cst.Break, cst.Continue)):
                    if kept:
                        out.append(node.with_changes(body=kept))
                        kept = []
                    kind = {cst.Return: "return", cst.Break: "break", cst.Continue: "continue"}[type(small)]
                    out += self.completion(kind, getattr(small, "value", None))
                else:
                    kept.append(small)
            if kept:
                out.append(node.with_changes(body=kept))
            return out
        if isinstance(node, cst.If):
            orelse = node.orelse
            if isinstance(orelse, cst.If):
                orelse = make(cst.Else, body=block(self.plain_one(orelse)))
            elif isinstance(orelse, cst.Else):
                orelse = orelse.with_changes(body=block(self.plain(list(orelse.body.body))))
            return [node.with_changes(body=block(self.plain(list(node.body.body))), orelse=orelse)]
        if isinstance(node, (cst.While, cst.For)):
            self.stack.append(_Frame("loop"))
            body = self.plain(list(node.body.body))
            self.stack.pop()
            orelse = (
                node.orelse.with_changes(body=block(self.plain(list(node.orelse.body.body)))) if node.orelse else None
            )
            return [node.with_changes(body=block(body), orelse=orelse)]
        if isinstance(node, (cst.Try, cst.TryStar)):
            handlers = [h.with_changes(body=block(self.plain(list(h.body.body)))) for h in node.handlers]
            orelse = (
                node.orelse.with_changes(body=block(self.plain(list(node.orelse.body.body)))) if node.orelse else None
            )
            final = (
                node.finalbody.with_changes(body=block(self.plain(list(node.finalbody.body.body))))
                if node.finalbody
                else None
            )
            return [
                node.with_changes(
                    body=block(self.plain(list(node.body.body))), handlers=handlers, orelse=orelse, finalbody=final
                )
            ]
        if isinstance(node, cst.With):
            return [node.with_changes(body=block(self.plain(list(node.body.body))))]
        if isinstance(node, cst.Match):
            cases = [c.with_changes(body=block(self.plain(list(c.body.body)))) for c in node.cases]
            return [node.with_changes(cases=cases)]
        return [node]
