"""Pass 1, normalisation: lift every yield out of expressions into a statement of its own.

Afterwards a yield appears only as `yield v`, `x = yield v`, `yield from e` or
`x = yield from e` (x a plain name, v and e yield-free). A `with` whose body yields
becomes the try / except / finally of PEP 343, so that the split can re-enter it like
any other try: the manager and its bound `__exit__` are variables, and `__enter__` is
not called again on resume. Evaluation order is kept
exactly: a sibling evaluated before a yield is spilled into a temporary first
(literals excepted), as regenerator does; `and`/`or`, conditional expressions and
comparison chains keep their short-circuits.
"""

from __future__ import annotations

import functools

import libcst as cst

from .cst import PREFIX, assign, block, contains_yield, expr, generate, if_stmt, name, simple, stmt

__all__ = ["Normalizer"]

_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)
_CONSTANT_NAMES = {"None", "True", "False"}


def _is_literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, _LITERALS):
        return True
    if isinstance(node, cst.Name):
        return node.value in _CONSTANT_NAMES
    if isinstance(node, cst.ConcatenatedString):
        return _is_literal(node.left) and _is_literal(node.right)
    return False


def _children(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The sub-expressions of `node`, in the order CPython evaluates them."""
    if isinstance(node, cst.Attribute):
        return [node.value]
    if isinstance(node, cst.Subscript):
        kids = [node.value]
        for element in node.slice:
            part = element.slice
            if isinstance(part, cst.Index):
                kids.append(part.value)
            else:
                kids.extend(x for x in (part.lower, part.upper, part.step) if x is not None)
        return kids
    if isinstance(node, cst.Call):
        return [node.func, *(arg.value for arg in node.args)]
    if isinstance(node, cst.BinaryOperation):
        return [node.left, node.right]
    if isinstance(node, cst.UnaryOperation):
        return [node.expression]
    if isinstance(node, cst.Comparison):
        return [node.left, *(target.comparator for target in node.comparisons)]
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return [element.value for element in node.elements]
    if isinstance(node, cst.Dict):
        kids = []
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                kids += [element.key, element.value]
            else:
                kids.append(element.value)
        return kids
    if isinstance(node, cst.FormattedString):
        return _fstring_children(node.parts)
    if isinstance(node, cst.ConcatenatedString):
        return [node.left, node.right]
    if isinstance(node, cst.NamedExpr):
        return [node.value]
    if isinstance(node, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
        return [node.for_in.iter]
    if isinstance(node, cst.Await):
        return [node.expression]
    if isinstance(node, cst.Lambda):
        return _defaults(node.params)
    return []


def _defaults(params: cst.Parameters) -> list[cst.BaseExpression]:
    """Default values, in the order CPython evaluates them (positional, then keyword-only)."""
    positional = [p.default for p in (*params.posonly_params, *params.params) if p.default is not None]
    return positional + [p.default for p in params.kwonly_params if p.default is not None]


def _unpacked(node: cst.BaseExpression) -> dict[cst.CSTNode, str]:
    """Children that are unpacked (`*a`, `**m`) where they stand."""
    found: dict[cst.CSTNode, str] = {}
    if isinstance(node, cst.Call):
        for arg in node.args:
            if arg.star:
                found[arg.value] = arg.star
    elif isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        for element in node.elements:
            if isinstance(element, cst.StarredElement):
                found[element.value] = "*"
    elif isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.StarredDictElement):
                found[element.value] = "**"
    return found


def _sole_positional(call: cst.Call) -> bool:
    """`f(*a, k=...)`: CPython hands `a` to the call as it is (and names f in its error); with any other
    positional argument it builds a list first ("Value after * must be an iterable")."""
    return sum(1 for arg in call.args if arg.keyword is None and arg.star != "**") == 1


def _fstring_children(parts) -> list[cst.BaseExpression]:
    kids = []
    for part in parts:
        if isinstance(part, cst.FormattedStringExpression):
            kids.append(part.expression)
            if part.format_spec:
                kids.extend(_fstring_children(part.format_spec))
    return kids


class _Replace(cst.CSTTransformer):
    """Swap nodes by identity in one pass (deep_replace rebuilds the tree, losing identities)."""

    def __init__(self, replacements: dict[cst.CSTNode, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node not in self.replacements

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        return self.replacements.get(original, updated)


class Normalizer:
    """Rewrites one function body. `unsupported` collects (node, message, hint) for the checker."""

    def __init__(self) -> None:
        self.temps = 0
        self.unsupported: list[tuple[cst.CSTNode, str, str]] = []
        self.origin: dict[cst.CSTNode, cst.CSTNode] = {}  # each yield made here -> the yield in the source
        self.withs: list[cst.With] = []  # each `with` lowered here (the n-th uses _bc_wm{n}, _bc_wx{n}, _bc_wf{n})
        self.managers: list[cst.BaseExpression] = []  # the n-th `with`'s manager expression, as written
        self.with_origin: dict[cst.With, cst.With] = {}  # the inner `with` of several items -> the statement

    def temp(self) -> str:
        self.temps += 1
        return f"{PREFIX}t{self.temps}"

    def refuse(self, node: cst.CSTNode, message: str, hint: str) -> None:
        self.unsupported.append((node, message, hint))

    # -- expressions ------------------------------------------------------------------------

    def lift(self, node: cst.BaseExpression) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
        """(statements to run first, an equivalent yield-free expression)."""
        if not contains_yield(node):
            return [], node
        if isinstance(node, cst.Yield):
            pre, value = self.lift_yield(node)
            target = self.temp()
            return [*pre, assign(target, value)], name(target)
        if isinstance(node, cst.BooleanOperation) and contains_yield(node.right):
            return self.lift_boolean(node)
        if isinstance(node, cst.IfExp) and contains_yield([node.body, node.orelse]):
            return self.lift_ifexp(node)
        if isinstance(node, cst.Comparison) and len(node.comparisons) > 1:
            return self.lift_chain(node)
        if isinstance(node, cst.FormattedString):
            return self.lift_fstring(node)
        kids = _children(node)
        if isinstance(node, cst.BooleanOperation):
            kids = [node.left]
        elif isinstance(node, cst.IfExp):
            kids = [node.test]
        unpacked = _unpacked(node)
        last = max(i for i, kid in enumerate(kids) if contains_yield(kid))
        pre: list[cst.BaseStatement] = []
        replacements: dict[cst.CSTNode, cst.CSTNode] = {}
        for index, kid in enumerate(kids[: last + 1]):
            kid_pre, new_kid = self.lift(kid)
            pre += kid_pre
            star = unpacked.get(kid)
            if index < last and (star or not _is_literal(new_kid)):
                spilled = self.temp()
                # `*a` and `**m` are unpacked where they stand, before what follows is evaluated (in a
                # call, `**m` with CPython's error, "f() argument after ** must be a mapping"), except
                # a call's only positional `*a`, which CPython hands to the call as it is
                if star == "*" and isinstance(node, cst.Call) and _sole_positional(node):
                    value = new_kid  # the call itself unpacks it, after the other arguments
                elif star == "**" and isinstance(node, cst.Call):
                    value = expr("_bc_rt.star_kwargs({f}, {v})", f=replacements.get(kids[0], kids[0]), v=new_kid)
                elif star:
                    value = expr("(*{v},)", v=new_kid) if star == "*" else expr("{**{v}}", v=new_kid)
                else:
                    value = new_kid
                pre.append(assign(spilled, value))
                new_kid = name(spilled)
            if new_kid is not kid:
                replacements[kid] = new_kid
        return pre, node.visit(_Replace(replacements))

    def lift_fstring(self, node: cst.FormattedString) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
        """Each `{value:spec}` is formatted where it stands: a part before a later yield is spilled
        already formatted, so a bad format spec fails before the later yield, as in CPython."""
        parts = []
        for part in node.parts:  # `{expr=}` shows the expression's text: keep it before the lift renames it
            if isinstance(part, cst.FormattedStringExpression) and part.equal is not None:
                render = functools.partial(generate, cst.Module(body=[]))
                shown = "".join(
                    render(piece)
                    for piece in (
                        part.whitespace_before_expression,
                        part.expression,
                        part.whitespace_after_expression,
                        part.equal,
                    )
                )
                parts.append(cst.FormattedStringText(shown.replace("{", "{{").replace("}", "}}")))
                conversion = part.conversion or (None if part.format_spec else "r")
                part = part.with_changes(equal=None, conversion=conversion)
            parts.append(part)
        holes = [i for i, p in enumerate(parts) if isinstance(p, cst.FormattedStringExpression)]
        last = max(i for i in holes if contains_yield(parts[i]))
        pre: list[cst.BaseStatement] = []
        new_parts = list(parts)
        for index in holes:
            if index > last:
                break
            part = parts[index]
            value_pre, value = self.lift(part.expression)
            pre += value_pre
            spec = part.format_spec
            if spec and contains_yield(list(spec)):
                if not _is_literal(value):  # the value is evaluated before its format spec
                    held = self.temp()
                    pre.append(assign(held, value))
                    value = name(held)
                inner = cst.FormattedString(parts=list(spec), start='f"', end='"')
                spec_pre, spec_value = self.lift_fstring(inner)
                pre += spec_pre
                spec = spec_value.parts if isinstance(spec_value, cst.FormattedString) else spec
            lifted = part.with_changes(expression=value, format_spec=spec)
            if index < last:
                spilled = self.temp()
                single = cst.FormattedString(parts=[lifted], start='f"', end='"')
                pre.append(assign(spilled, single))
                lifted = cst.FormattedStringExpression(expression=name(spilled))
            new_parts[index] = lifted
        return pre, node.with_changes(parts=new_parts)

    def lift_yield(self, node: cst.Yield) -> tuple[list[cst.BaseStatement], cst.Yield]:
        """Lift what is inside a yield; the yield itself stays."""
        if isinstance(node.value, cst.From):
            pre, item = self.lift(node.value.item)
            new = node.with_changes(value=node.value.with_changes(item=item))
        elif node.value is None:
            pre, new = [], node.with_changes()
        else:
            pre, value = self.lift(node.value)
            new = node.with_changes(value=value)
        self.origin[new] = self.origin.get(node, node)
        return pre, new

    def lift_boolean(self, node: cst.BooleanOperation) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
        pre, left = self.lift(node.left)
        target = self.temp()
        pre.append(assign(target, left))
        right_pre, right = self.lift(node.right)
        test = name(target) if isinstance(node.operator, cst.And) else expr("not {t}", t=name(target))
        pre.append(if_stmt(test, [*right_pre, assign(target, right)]))
        return pre, name(target)

    def lift_ifexp(self, node: cst.IfExp) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
        pre, test = self.lift(node.test)
        target = self.temp()
        body_pre, body = self.lift(node.body)
        else_pre, orelse = self.lift(node.orelse)
        pre.append(if_stmt(test, [*body_pre, assign(target, body)], [*else_pre, assign(target, orelse)]))
        return pre, name(target)

    def lift_chain(self, node: cst.Comparison) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
        """`a < b < c` evaluates b once and stops at the first false comparison."""
        pre, left = self.lift(node.left)
        first = self.temp()
        pre.append(assign(first, left))
        result = self.temp()

        def step(index: int, operand: str) -> list[cst.BaseStatement]:
            target = node.comparisons[index]
            right_pre, right = self.lift(target.comparator)
            following = self.temp()
            compare = cst.Comparison(left=name(operand), comparisons=[target.with_changes(comparator=name(following))])
            out = [*right_pre, assign(following, right), assign(result, compare)]
            if index + 1 < len(node.comparisons):
                out.append(if_stmt(name(result), step(index + 1, following)))
            return out

        return [*pre, *step(0, first)], name(result)

    # -- statements -------------------------------------------------------------------------

    def body(self, statements) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for statement in statements:
            out += self.statement(statement)
        return out

    def statement(self, node: cst.BaseStatement) -> list[cst.BaseStatement]:
        if isinstance(node, cst.SimpleStatementLine):
            if len(node.body) == 1 and not contains_yield(node):
                return [node]
            out: list[cst.BaseStatement] = []
            for small in node.body:
                line = simple(small).with_changes(leading_lines=node.leading_lines if not out else ())
                out += self.small(small, line) if contains_yield(small) else [line]
            return out
        if not contains_yield(node):
            return [node]
        if isinstance(node, cst.If):
            return self.if_(node)
        if isinstance(node, cst.While):
            return self.while_(node)
        if isinstance(node, cst.For):
            return self.for_(node)
        if isinstance(node, cst.Try):
            return [self.try_(node)]
        if isinstance(node, cst.Match):
            return self.match(node)
        if isinstance(node, cst.FunctionDef):
            return self.function_def(node)
        if isinstance(node, cst.With):
            return self.with_(node)
        if isinstance(node, cst.TryStar):
            self.refuse(node, "yield inside try/except* is not supported", "use try/except, or move the yield out")
            return [node]
        return [node]

    def small(self, node: cst.BaseSmallStatement, line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
        first = self.temps
        out = self.small_statement(node, line)
        if self.temps > first and not isinstance(node, (cst.Return, cst.Raise)):
            # temporaries hold what CPython keeps on its stack: let them go when the statement is done
            out += [assign(f"{PREFIX}t{n}", name("None")) for n in range(first + 1, self.temps + 1)]
        return out

    def small_statement(self, node: cst.BaseSmallStatement, line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
        if isinstance(node, cst.Expr):
            if isinstance(node.value, cst.Yield):
                pre, value = self.lift_yield(node.value)
                return [*pre, line.with_changes(body=[node.with_changes(value=value)])]
            pre, value = self.lift(node.value)
            return [*pre, line.with_changes(body=[node.with_changes(value=value)])]
        if isinstance(node, cst.Assign):
            if any(contains_yield(target.target) for target in node.targets):
                pre, value = self.evaluated(node.value)
                for target in node.targets:  # the value first, then each target left to right
                    pre += self.store(target.target, value)
                return pre
            if isinstance(node.value, cst.Yield):
                pre, value = self.lift_yield(node.value)
                if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                    return [*pre, line.with_changes(body=[node.with_changes(value=value)])]
                target = self.temp()
                return [*pre, assign(target, value), line.with_changes(body=[node.with_changes(value=name(target))])]
            pre, value = self.lift(node.value)
            return [*pre, line.with_changes(body=[node.with_changes(value=value)])]
        if isinstance(node, cst.AnnAssign):
            # In a function CPython does not evaluate the annotation of a target that is not a name.
            if node.value is None:  # `x[(yield)]: T` evaluates the target's parts, and stores nothing
                pre, target = self.lift(node.target)
                return [*pre, simple(cst.Expr(cst.Tuple(elements=[cst.Element(p) for p in _children(target)])))]
            if contains_yield(node.target):
                pre, value = self.evaluated(node.value)
                return [*pre, *self.store(node.target, value)]
            pre, value = self.lift(node.value)
            return [*pre, line.with_changes(body=[node.with_changes(value=value)])]
        if isinstance(node, cst.Del):
            return self.delete(node.target)
        if isinstance(node, cst.AugAssign):
            return self.augassign(node, line)
        if isinstance(node, cst.Return):
            pre, value = self.lift(node.value)
            return [*pre, line.with_changes(body=[node.with_changes(value=value)])]
        if isinstance(node, cst.Raise):
            parts = [p for p in (node.exc, node.cause.item if node.cause else None) if p is not None]
            pre, both = self.lift(cst.Tuple(elements=[cst.Element(p) for p in parts]))
            values = [element.value for element in both.elements]
            new = node.with_changes(exc=values[0])
            if node.cause is not None:
                new = new.with_changes(cause=node.cause.with_changes(item=values[1]))
            return [*pre, line.with_changes(body=[new])]
        if isinstance(node, cst.Assert):
            pre, test = self.lift(node.test)
            if node.msg is not None and contains_yield(node.msg):
                msg_pre, msg = self.lift(node.msg)
                failing = if_stmt(
                    expr("not {t}", t=test),
                    [*msg_pre, stmt_raise_assertion(msg)],
                )
                return [*pre, if_stmt(name("__debug__"), [failing])]
            return [*pre, line.with_changes(body=[node.with_changes(test=test)])]
        self.refuse(node, "yield inside this statement is not supported", "assign the yielded value to a name first")
        return [line]

    def function_def(self, node: cst.FunctionDef) -> list[cst.BaseStatement]:
        """Decorators and defaults run in this scope, in this order, before the def binds its name."""
        pre: list[cst.BaseStatement] = []
        replacements: dict[cst.CSTNode, cst.CSTNode] = {}
        for part in [d.decorator for d in node.decorators] + _defaults(node.params):
            part_pre, value = self.lift(part)
            pre += part_pre
            spilled = self.temp()
            pre.append(assign(spilled, value))
            replacements[part] = name(spilled)
        return [*pre, node.visit(_Replace(replacements))]

    def evaluated(self, value: cst.BaseExpression) -> tuple[list[cst.BaseStatement], cst.BaseExpression]:
        """(statements, a name or literal holding `value`): the value is evaluated before what follows."""
        pre, value = self.lift(value)
        if isinstance(value, cst.Name) or _is_literal(value):
            return pre, value
        held = self.temp()
        return [*pre, assign(held, value)], name(held)

    def store(self, target: cst.BaseExpression, value: cst.BaseExpression) -> list[cst.BaseStatement]:
        """Store an evaluated value into `target` as CPython does: a tuple or list target unpacks
        the value first, then stores each item left to right; an attribute or subscript target
        evaluates its parts (yields included) just before its own store."""
        if not contains_yield(target):
            return [assign(target, value)]
        if isinstance(target, (cst.Tuple, cst.List)):
            items: list[cst.BaseElement] = []
            parts: list[tuple[str, cst.BaseExpression]] = []
            for element in target.elements:
                held = self.temp()
                parts.append((held, element.value))
                items.append(
                    cst.StarredElement(name(held))
                    if isinstance(element, cst.StarredElement)
                    else cst.Element(name(held))
                )
            out = [assign(cst.Tuple(elements=items), value)]
            for held, part in parts:
                out += self.store(part, name(held))
            return out
        pre, stored = self.lift(target)  # the object, then the key or slice parts, with earlier ones spilled
        return [*pre, assign(stored, value)]

    def delete(self, target: cst.BaseExpression) -> list[cst.BaseStatement]:
        """`del a, b[(yield)]`: each target in turn, its parts evaluated just before it is deleted."""
        if isinstance(target, (cst.Tuple, cst.List)):
            return [statement for element in target.elements for statement in self.delete(element.value)]
        pre, deleted = self.lift(target)
        return [*pre, simple(cst.Del(target=deleted))]

    def augassign(self, node: cst.AugAssign, line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
        """`t op= v`: CPython evaluates the target's object and key, reads the target, then evaluates v,
        and stores back into the same object and key: each goes into a temporary first."""
        target = node.target
        pre: list[cst.BaseStatement] = []
        if isinstance(target, cst.Name):
            store: cst.BaseAssignTargetExpression = target
        elif isinstance(target, (cst.Attribute, cst.Subscript)):
            replacements: dict[cst.CSTNode, cst.CSTNode] = {}
            for part in _children(target):
                part_pre, value = self.lift(part)
                pre += part_pre
                if not _is_literal(value):
                    held = self.temp()
                    pre.append(assign(held, value))
                    value = name(held)
                replacements[part] = value
            store = target.visit(_Replace(replacements))
        else:
            self.refuse(node, "yield in an augmented assignment to this target", "assign the yielded value first")
            return [line]
        load: cst.BaseExpression = store
        current = self.temp()
        pre.append(assign(current, load))
        value_pre, value = self.lift(node.value)
        pre += value_pre
        pre.append(simple(cst.AugAssign(target=name(current), operator=node.operator, value=value)))
        pre.append(assign(store, name(current)))
        return pre

    def if_(self, node: cst.If) -> list[cst.BaseStatement]:
        pre, test = self.lift(node.test)
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            lowered = self.if_(orelse)
            if len(lowered) == 1 and isinstance(lowered[0], cst.If):
                orelse = lowered[0]
            else:
                orelse = cst.Else(body=block(lowered))
        elif isinstance(orelse, cst.Else):
            orelse = orelse.with_changes(body=block(self.body(orelse.body.body)))
        return [*pre, node.with_changes(test=test, body=block(self.body(node.body.body)), orelse=orelse)]

    def while_(self, node: cst.While) -> list[cst.BaseStatement]:
        body = self.body(node.body.body)
        orelse = self.body(node.orelse.body.body) if node.orelse else []
        if not contains_yield(node.test):
            new_else = cst.Else(body=block(orelse)) if node.orelse else None
            return [node.with_changes(body=block(body), orelse=new_else)]
        # The test yields: test at the top of an endless loop; a flag tells `else` (false test) from `break`.
        pre, test = self.lift(node.test)
        flag = self.temp()
        exit_test = if_stmt(expr("not {t}", t=test), [assign(flag, name("True")), simple(cst.Break())])
        loop = cst.While(test=name("True"), body=block([*pre, exit_test, *body]))
        out: list[cst.BaseStatement] = [assign(flag, name("False")), loop]
        if orelse:
            out.append(if_stmt(name(flag), orelse))
        return out

    def for_(self, node: cst.For) -> list[cst.BaseStatement]:
        pre, iterable = self.lift(node.iter)
        orelse = node.orelse.with_changes(body=block(self.body(node.orelse.body.body))) if node.orelse else None
        body = self.body(node.body.body)
        target = node.target
        if contains_yield(target):  # `for d[(yield)] in items`: each item is stored as the body begins
            item = self.temp()
            body = [*self.store(target, name(item)), *body]
            target = name(item)
        new = node.with_changes(target=target, iter=iterable, body=block(body), orelse=orelse)
        self.origin[new] = self.origin.get(node, node)  # its lines point at the `for` in the source
        return [*pre, new]

    def try_(self, node: cst.Try) -> cst.Try:
        handlers = []
        for handler in node.handlers:
            if contains_yield(handler.type):
                self.refuse(handler, "yield inside an except clause's type", "compute the exception type before try")
            handlers.append(handler.with_changes(body=block(self.body(handler.body.body))))
        orelse = node.orelse.with_changes(body=block(self.body(node.orelse.body.body))) if node.orelse else None
        final = node.finalbody.with_changes(body=block(self.body(node.finalbody.body.body))) if node.finalbody else None
        return node.with_changes(
            body=block(self.body(node.body.body)), handlers=handlers, orelse=orelse, finalbody=final
        )

    def with_(self, node: cst.With) -> list[cst.BaseStatement]:
        """`with m as v: body` (PEP 343, as CPython 3.11 runs it):

            _bc_wmN = m
            _bc_wxN, _bc_tK = _bc_rt.with_enter(_bc_wmN)   # __enter__ and __exit__ looked up on the type
            _bc_wfN = True
            try:
                try:
                    v = _bc_tK
                    body
                except BaseException:
                    _bc_wfN = False
                    if not _bc_wxN(*_bc_rt.exc_info()):
                        raise
            finally:
                if _bc_wfN:
                    _bc_wxN(None, None, None)

        Several items nest, left to right."""
        if node.asynchronous is not None:
            self.refuse(node, "yield inside `async with`", "branchc compiles plain generators; use `with`")
            return [node]
        first, *rest = node.items
        body = list(node.body.body)
        written = self.with_origin.get(node, node)
        if rest:
            body = [
                cst.With(items=[*rest[:-1], rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)], body=block(body))
            ]
            self.with_origin[body[0]] = written
        self.withs.append(written)
        self.managers.append(first.item)
        n = len(self.withs)
        manager, exit_, flag = name(f"{PREFIX}wm{n}"), name(f"{PREFIX}wx{n}"), name(f"{PREFIX}wf{n}")
        pre, value = self.lift(first.item)
        entered = self.temp()
        enter = stmt("{x}, {v} = _bc_rt.with_enter({m})", x=exit_, v=name(entered), m=manager)
        inner: list[cst.BaseStatement] = []
        if first.asname is not None:
            target = first.asname.name
            inner += self.statement(simple(cst.Assign(targets=[cst.AssignTarget(target)], value=name(entered))))
            inner.append(assign(entered, name("None")))
        inner += self.body(body)
        suppress = if_stmt(expr("not {x}(*_bc_rt.exc_info())", x=exit_), [simple(cst.Raise())])
        handler = cst.ExceptHandler(
            type=expr("_bc_rt.BaseException"),
            body=block([assign(flag, name("False")), suppress]),
            whitespace_after_except=cst.SimpleWhitespace(" "),
        )
        normal_exit = if_stmt(flag, [simple(cst.Expr(expr("{x}(None, None, None)", x=exit_)))])
        guarded = cst.Try(
            body=block([cst.Try(body=block(inner), handlers=[handler])]),
            finalbody=cst.Finally(body=block([normal_exit])),
            leading_lines=node.leading_lines,
        )
        return [*pre, assign(manager, value), enter, assign(flag, name("True")), guarded]

    def match(self, node: cst.Match) -> list[cst.BaseStatement]:
        pre, subject = self.lift(node.subject)
        if not any(contains_yield(case.guard) for case in node.cases):  # a pattern cannot hold a yield
            cases = [case.with_changes(body=block(self.body(case.body.body))) for case in node.cases]
            return [*pre, node.with_changes(subject=subject, cases=cases)]
        return [*pre, *self.match_guards(node, subject)]

    def match_guards(self, node: cst.Match, subject: cst.BaseExpression) -> list[cst.BaseStatement]:
        """A guard that yields runs outside the native `match`: the cases are matched in runs that
        end at such a case (its guard taken off); when the pattern matched, the guard is evaluated,
        and if it is false, matching goes on with the next run, on the same subject, as CPython
        does. The chosen case's body runs last.

            _bc_tS = subject; _bc_tC = -1
            match _bc_tS:                      # cases up to the first that yields in its guard
                case P0 if G0: _bc_tC = 0
                case P1: _bc_tC = 1
            if _bc_tC == 1 and not G1: _bc_tC = -1
            if _bc_tC == -1:
                match _bc_tS: ...              # the next run
            if _bc_tC == 0: body0 / elif _bc_tC == 1: body1 ..."""
        held, chosen = self.temp(), self.temp()
        out: list[cst.BaseStatement] = [assign(held, subject), assign(chosen, expr("-1"))]
        runs: list[list[tuple[int, cst.MatchCase]]] = [[]]
        for index, case in enumerate(node.cases):
            runs[-1].append((index, case))
            if contains_yield(case.guard):
                runs.append([])
        for number, run in enumerate(r for r in runs if r):
            cases = []
            for index, case in run:
                guard = None if contains_yield(case.guard) else case.guard
                cases.append(case.with_changes(guard=guard, body=block([assign(chosen, cst.Integer(str(index)))])))
            steps: list[cst.BaseStatement] = [cst.Match(subject=name(held), cases=cases)]
            last, case = run[-1]
            if contains_yield(case.guard):
                guard_pre, guard = self.lift(case.guard)
                failed = if_stmt(expr("not {g}", g=guard), [assign(chosen, expr("-1"))])
                steps.append(if_stmt(expr(f"{chosen} == {last}"), [*guard_pre, failed]))
            out += steps if number == 0 else [if_stmt(expr(f"{chosen} == -1"), steps)]
        chain: cst.If | None = None
        for index, case in reversed(list(enumerate(node.cases))):
            chain = cst.If(test=expr(f"{chosen} == {index}"), body=block(self.body(case.body.body)), orelse=chain)
        return [*out, chain] if chain is not None else out


def stmt_raise_assertion(message: cst.BaseExpression) -> cst.SimpleStatementLine:
    return simple(cst.Raise(exc=cst.Call(func=name("AssertionError"), args=[cst.Arg(message)])))
