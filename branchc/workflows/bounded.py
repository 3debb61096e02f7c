"""Jinja2's sandbox with bounded work: what one rendering of a workflow template may compute from the values
it is given (answers, params: client input) is capped, and passing a cap is a `TemplateLimitError` that
names it, before the work is done.

Jinja2's `ImmutableSandboxedEnvironment` keeps templates away from Python's internals and from changing
lists and dicts in place; it does not bound work: `{{ answer * 10**9 }}`, `{{ 10 ** 10**9 }}`,
`{{ 'x'|center(10**9) }}` or a loop of doublings would stall or exhaust the server. Here:

- every value a rendering builds is counted as it is built, in characters (the length of its text; a
  list or dict counts its items' text), and so is every piece of output: at most `max_build` in one
  rendering. What could be very large is counted before it is made: repetition (`*`), `+`, `~`, `%` and
  `format` (field widths and precisions included), the str methods and filters that pad, repeat, replace,
  join or wrap, and turning a list or dict into text;
- an integer has at most `max_int_digits` digits: `**` and `*` on integers are refused past that;
- `range()` has at most `max_range` items (Jinja2's own MAX_RANGE, here a clear error);
- loop iterations and calls (macros, methods, `range`, ...) are counted: at most `max_steps`, and the
  rendering stops after `max_seconds` (checked at each of them);
- the filter `urlize` (its regexes take quadratic time on crafted text) and the global `lipsum` (a
  placeholder-text generator whose size is its arguments) are not offered.

`BoundedEnvironment.limits` holds the caps (`TemplateLimits`); `Template.render` and a compiled expression
each count afresh.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import time
from _string import formatter_field_name_split  # as jinja2.sandbox reads a field name
from collections.abc import Callable, Iterable, Iterator, MappingView
from contextvars import ContextVar
from dataclasses import dataclass
from string import Formatter
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import Template, TemplateExpression
from jinja2.filters import make_attrgetter, sync_do_join
from jinja2.runtime import Namespace
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg
from markupsafe import Markup

__all__ = ["TEMPLATE_LIMITS", "BoundedEnvironment", "TemplateLimitError", "TemplateLimits"]


@dataclass(frozen=True)
class TemplateLimits:
    """What one rendering of a template (or one evaluation of an expression) may do."""

    #: Characters one rendering may build, its output included (a list or dict counts its items' text).
    max_build: int = 16 << 20
    #: Digits of an integer a template computes (CPython's own limit for turning one into text).
    max_int_digits: int = 4300
    #: Items of one `range()`.
    max_range: int = 100_000
    #: Loop iterations and calls in one rendering.
    max_steps: int = 1_000_000
    #: Seconds one rendering may take (checked at each loop iteration and call).
    max_seconds: float = 5.0


TEMPLATE_LIMITS = TemplateLimits()


class TemplateLimitError(SecurityError):
    """A template passed one of its TemplateLimits; the message says which, and the limit."""


class _Budget:
    """The counts of one rendering."""

    __slots__ = ("built", "deadline", "limits", "steps")

    def __init__(self, limits: TemplateLimits) -> None:
        self.limits = limits
        self.built = 0
        self.steps = 0
        self.deadline = time.monotonic() + limits.max_seconds

    @property
    def room(self) -> int:
        return self.limits.max_build - self.built

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise TemplateLimitError(
                f"the template ran more than {self.limits.max_steps:,} loop iterations and calls in one rendering "
                "(step limit)"
            )
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(
                f"the template took longer than {self.limits.max_seconds:g} s to render (time limit)"
            )

    def build(self, size: int, what: str) -> None:
        if size > self.room:
            so_far = f" ({self.built:,} already built)" if self.built else ""
            raise TemplateLimitError(
                f"{what} would build {size:,} characters, past the {self.limits.max_build:,} one rendering may "
                f"build{so_far} (size limit)"
            )
        self.built += size


_BUDGET: ContextVar[_Budget | None] = ContextVar("branchc_template_budget", default=None)


def _budget() -> _Budget:
    """The budget of the rendering under way; outside one (Jinja2 folding constants while it compiles), a
    fresh one, so each operation is still bounded on its own."""
    budget = _BUDGET.get()
    return budget if budget is not None else _Budget(TEMPLATE_LIMITS)


@contextlib.contextmanager
def _rendering(limits: TemplateLimits) -> Iterator[None]:
    token = _BUDGET.set(_Budget(limits))
    try:
        yield
    finally:
        _BUDGET.reset(token)


# -- sizes -------------------------------------------------------------------------------------------------


def _digits(number: int) -> int:
    """Decimal digits of an int (at most one more than the exact count), without converting it."""
    return int(abs(number).bit_length() * 0.30103) + 1


def text_size(value: Any, limit: int) -> int:
    """About len(str(value)), counted without building the text: exact for a str; for a list, tuple, set or
    dict the text of its items (a str item counted without the escapes repr may add), so within a small
    factor. The walk shares no work between repeated references, as str() does not: a list holding one
    big string a thousand times counts it a thousand times. It stops past `limit` (returns more than it)."""
    if isinstance(value, str):
        return len(value)
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif item is None or isinstance(item, bool | float):
            total += 24 if isinstance(item, float) else 5
        elif isinstance(item, int):
            total += _digits(item) + 1
        elif isinstance(item, bytes | bytearray):
            total += 4 * len(item) + 3
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset | MappingView):
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, Namespace):
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        else:
            total += 16  # an object whose text does not show its contents (a loop, a macro, a range)
        if total > limit:
            break
    return total


def _shallow(value: Any) -> int:
    """What building `value` made: a str's characters, a container's items (its items existed already)."""
    if isinstance(value, str | bytes | bytearray | list | tuple | dict | set | frozenset):
        return len(value)
    return 0


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) else None


# -- what may grow: checks made before the work ------------------------------------------------------------


def _repeat(budget: _Budget, left: Any, right: Any) -> None:
    """`left * right`: an int product, or a str, list or tuple repeated."""
    if isinstance(left, int) and isinstance(right, int):
        if left and right and _digits(left) + _digits(right) - 1 > budget.limits.max_int_digits:
            _too_many_digits(budget, f"{_short(left)} * {_short(right)}", _digits(left) + _digits(right) - 1)
        return
    for sequence, times in ((left, right), (right, left)):
        if isinstance(sequence, str | list | tuple) and isinstance(times, int) and not isinstance(times, bool):
            if times > 0 and sequence:
                one = text_size(sequence, budget.room // times + 1)
                unit = "characters" if isinstance(sequence, str) else "items"
                what = f"repeating a {type(sequence).__name__} of {len(sequence):,} {unit} {times:,} times"
                budget.build(one * times, what)


def _power(budget: _Budget, base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        digits = exponent * math.log10(abs(base))
        if digits > budget.limits.max_int_digits:
            _too_many_digits(budget, f"{_short(base)} ** {_short(exponent)}", math.ceil(digits))


def _too_many_digits(budget: _Budget, what: str, digits: int) -> None:
    raise TemplateLimitError(
        f"{what} would be an integer of about {digits:,} digits, past the {budget.limits.max_int_digits:,} a "
        "template may compute (integer limit)"
    )


def _short(value: Any) -> str:
    text = (
        repr(value) if not isinstance(value, int) or _digits(value) <= 30 else f"<an int of ~{_digits(value)} digits>"
    )
    return text if len(text) <= 40 else text[:37] + "..."


def _add(budget: _Budget, left: Any, right: Any) -> None:
    if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
        budget.build(len(left) + len(right), f"joining a {type(left).__name__} and a {type(right).__name__}")


def _printf_room(fmt: str, args: Any) -> int:
    """Room the `%` conversions of `fmt` may take beyond their values: their widths and precisions (digits
    in the format, or `*` read from `args`). One scan of the format; an unusual key may be overcounted."""
    stars = iter([arg for arg in args if isinstance(arg, int)] if isinstance(args, tuple) else [args])
    room = 0
    at = 0
    end = len(fmt)
    while (at := fmt.find("%", at)) >= 0:
        at += 1
        if at < end and fmt[at] == "(":
            close = fmt.find(")", at)
            if close < 0:
                break
            at = close + 1
        while at < end and fmt[at] in "#0- +":
            at += 1
        for part in ("width", "precision"):
            if part == "precision":
                if at >= end or fmt[at] != ".":
                    break
                at += 1
            if at < end and fmt[at] == "*":
                star = next(stars, 0)
                room += abs(star) if isinstance(star, int) else 0
                at += 1
                continue
            start = at
            while at < end and fmt[at] in "0123456789":
                at += 1
            if at > start:
                room += int(fmt[start:at]) if at - start <= 18 else 1 << 62
        while at < end and fmt[at] in "hlL":
            at += 1
        at += 1  # the conversion type
    return room


def _printf(budget: _Budget, fmt: Any, args: Any) -> None:
    if isinstance(fmt, str):
        size = len(fmt) + _printf_room(fmt, args) + text_size(args, budget.room + 1)
        budget.build(size, "this % formatting")


_ALIGN = frozenset("<>=^")


def _format_spec_room(spec: str) -> int:
    """Room a str.format field's spec (`[[fill]align][sign][z][#][0][width][grouping][.precision][type]`) asks
    for: its width and precision."""
    at = 2 if len(spec) > 1 and spec[1] in _ALIGN else 1 if spec[:1] in _ALIGN else 0
    while at < len(spec) and spec[at] in "+- z#0":
        at += 1
    room = 0
    for part in ("width", "precision"):
        if part == "precision":
            while at < len(spec) and spec[at] in ",_":
                at += 1
            if at >= len(spec) or spec[at] != ".":
                break
            at += 1
        start = at
        while at < len(spec) and spec[at] in "0123456789":
            at += 1
        if at > start:
            room += int(spec[start:at]) if at - start <= 18 else 1 << 62
    return room


class _BoundedFormatter(Formatter):
    """str.format and format_map in templates: sandboxed attribute access as Jinja2's own formatter, and
    each field's width and precision counted before the field is made."""

    def __init__(self, env: BoundedEnvironment) -> None:
        self._env = env

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, index in rest:
            obj = self._env.getattr(obj, index) if is_attr else self._env.getitem(obj, index)
        return obj, first

    def format_field(self, value: Any, format_spec: str) -> Any:
        budget = _budget()
        size = _format_spec_room(format_spec) + text_size(value, budget.room + 1)
        budget.build(size, "this str.format field")
        return format(value, format_spec)


def _str_method(budget: _Budget, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Checks for the str methods whose result may be much larger than the string."""
    text = method.__self__
    name = method.__name__
    what = f"str.{name}()"
    if name in ("center", "ljust", "rjust", "zfill"):
        width = _as_int(args[0] if args else kwargs.get("width"))
        if width is not None:
            budget.build(max(width, len(text)), what)
    elif name == "expandtabs":
        size = _as_int(args[0] if args else kwargs.get("tabsize", 8))
        if size is not None:
            budget.build(len(text) + text.count("\t") * max(size, 0), what)
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        _replacing(budget, text, args[0], args[1], _as_int(args[2]) if len(args) > 2 else kwargs.get("count"), what)
    elif name == "join" and args and isinstance(args[0], list | tuple | str):
        _joining(budget, args[0], text, what)
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.build(len(text) * max(longest, 1), what)


def _replacing(budget: _Budget, text: str, old: str, new: str, count: Any, what: str) -> None:
    times = len(text) + 1 if old == "" else text.count(old)
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    budget.build(len(text) + times * max(len(new) - len(old), 0), what)


def _joining(budget: _Budget, items: list[Any] | tuple[Any, ...] | str, separator: str, what: str) -> None:
    if isinstance(items, str):
        size = len(items)
    else:
        size = sum(text_size(item, budget.room + 1) for item in items)
    budget.build(size + len(separator) * max(len(items) - 1, 0), what)


# -- filters ------------------------------------------------------------------------------------------------

_STRINGIFYING = frozenset(
    "capitalize center e escape forceescape format indent lower pprint replace safe string striptags title "
    "trim truncate upper urlencode wordcount wordwrap xmlattr".split()
)


def _filter_checks(budget: _Budget, name: str) -> Callable[..., None] | None:
    """The check made before the filter `name` runs (its arguments as the filter takes them), if any."""

    def center(value: Any, width: int = 80) -> None:
        if isinstance(width, int):
            budget.build(max(width, 0), "the center filter")

    def indent(s: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> None:
        if isinstance(s, str):
            step = len(width) if isinstance(width, str) else max(width, 0) if isinstance(width, int) else 0
            budget.build(len(s) + (s.count("\n") + 1) * step, "the indent filter")

    def format_(value: Any, *args: Any, **kwargs: Any) -> None:
        _printf(budget, value, kwargs or args)

    def replace(s: Any, old: Any, new: Any, count: Any = None) -> None:
        if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
            _replacing(budget, s, old, new, count, "the replace filter")

    def wordwrap(s: Any, width: int = 79, break_long_words: bool = True, wrapstring: Any = None, **_: Any) -> None:
        if isinstance(s, str) and isinstance(width, int):
            lines = 2 * len(s) // max(width, 1) + s.count("\n") + 1
            budget.build(
                len(s) + lines * (len(wrapstring) if isinstance(wrapstring, str) else 2), "the wordwrap filter"
            )

    def batch(value: Any, linecount: Any, fill_with: Any = None) -> None:
        if fill_with is not None and isinstance(linecount, int):
            each = text_size(fill_with, budget.room + 1) + 2
            budget.build(max(linecount, 0) * each, "the batch filter's filling")

    def slice_(value: Any, slices: Any, fill_with: Any = None) -> None:
        if isinstance(slices, int):
            budget.build(2 * max(slices, 0), "the slice filter")  # each slice a list, "[]" at least

    checks = {
        "center": center,
        "indent": indent,
        "format": format_,
        "replace": replace,
        "wordwrap": wordwrap,
        "batch": batch,
        "slice": slice_,
    }
    return checks.get(name)


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` (the filter `name`) with its work counted: a step, the check before it, the text of a list
    or dict it turns into text, and what it returns."""
    passes = _PassArg.from_obj(function) is not None

    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        given = args[1:] if passes else args
        check = _filter_checks(budget, name)
        if check is not None:
            try:
                check(*given, **kwargs)
            except TypeError:
                pass  # arguments the filter will refuse itself, with its own message
        if name in _STRINGIFYING and given and not isinstance(given[0], str):
            budget.build(text_size(given[0], budget.room + 1), f"the {name} filter on a {type(given[0]).__name__}")
        result = function(*args, **kwargs)
        budget.build(_shallow(result), f"the {name} filter")
        return result

    return bounded


def _join(eval_ctx: Any, value: Iterable[Any], d: str = "", attribute: str | int | None = None) -> str:
    """The join filter, its items and their text counted before they are joined."""
    if attribute is not None:
        value = map(make_attrgetter(eval_ctx.environment, attribute), value)
    items = list(value)
    _joining(_budget(), items, str(d), "the join filter")
    return sync_do_join(eval_ctx, items, d)


_join.jinja_pass_arg = _PassArg.eval_context  # type: ignore[attr-defined]


def _sum(environment: Any, iterable: Iterable[Any], attribute: str | int | None = None, start: Any = 0) -> Any:
    """The sum filter; a sum of lists (`start=[]`) is joined in one pass, its items counted, not re-copied."""
    if attribute is not None:
        iterable = map(make_attrgetter(environment, attribute), iterable)
    if isinstance(start, list | tuple):
        budget = _budget()
        parts = [start, *iterable]
        if all(isinstance(part, type(start)) for part in parts):
            budget.build(sum(len(part) for part in parts), "the sum filter")
            joined = [item for part in parts for item in part]
            return joined if isinstance(start, list) else tuple(joined)
        return sum(parts[1:], start)
    return sum(iterable, start)


_sum.jinja_pass_arg = _PassArg.environment  # type: ignore[attr-defined]


def _tojson(value: Any, indent: int | str | None = None) -> str:
    """JSON text of a value (non-ASCII kept), written piece by piece and counted as it grows (an indent of at
    most MAX_INDENT, so that each piece is small)."""
    budget = _budget()
    if (len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0) > MAX_INDENT:
        raise TemplateLimitError(f"the tojson filter's indent is at most {MAX_INDENT} (size limit): {_short(indent)}")
    pieces: list[str] = []
    size = 0
    for piece in json.JSONEncoder(ensure_ascii=False, indent=indent).iterencode(value):
        size += len(piece)
        if size > budget.room:
            budget.build(size, "the tojson filter")
        pieces.append(piece)
    budget.build(size, "the tojson filter")
    return "".join(pieces)


def _loop(iterable: Iterable[Any]) -> Iterator[Any]:
    """What every `{% for %}` iterates (the code generator puts it there): one step per item."""
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


_LOOP_FILTER = "_branchc_loop"
#: The widest indent of the tojson filter.
MAX_INDENT = 16


# -- the environment ----------------------------------------------------------------------------------------


class _CountingGenerator(CodeGenerator):
    """Jinja2's code generator, with each loop's items, each `~` and each list, tuple and dict literal
    counted (through the environment)."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in node.find_all(nodes.For):
            counted = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None, lineno=loop.iter.lineno)
            counted.set_environment(self.environment)
            loop.iter = counted
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
            super().visit_Concat(node, frame)
            return
        self.write("environment.bounded_concat((")
        for item in node.nodes:
            self.visit(item, frame)
            self.write(", ")
        self.write("))")

    def _counted(self, visit: Callable[[Any, Frame], None], node: Any, frame: Frame) -> None:
        self.write("environment.bounded_literal(")
        visit(node, frame)
        self.write(")")

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self._counted(super().visit_List, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self._counted(super().visit_Dict, node, frame)

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx != "load":
            super().visit_Tuple(node, frame)  # an assignment's target: `{% for key, value in ... %}`
            return
        self._counted(super().visit_Tuple, node, frame)


class _BoundedTemplate(Template):
    def render(self, *args: Any, **kwargs: Any) -> str:
        with _rendering(self.environment.limits):  # type: ignore[attr-defined]
            return super().render(*args, **kwargs)


class _BoundedExpression(TemplateExpression):
    def __init__(self, template: Template, undefined_to_none: bool, limits: TemplateLimits) -> None:
        super().__init__(template, undefined_to_none)
        self._limits = limits

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _rendering(self._limits):
            return super().__call__(*args, **kwargs)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox with the work of each rendering bounded by `limits` (module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _CountingGenerator
    template_class = _BoundedTemplate

    def __init__(self, *args: Any, limits: TemplateLimits = TEMPLATE_LIMITS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.finalize = _output
        self.globals["range"] = self._range
        self.globals.pop("lipsum", None)
        self.filters.pop("urlize", None)
        self.filters.update({"join": _join, "sum": _sum, "tojson": _tojson})
        self.filters = {name: _bounded_filter(name, function) for name, function in self.filters.items()}
        self.filters[_LOOP_FILTER] = _loop

    def add_filter(self, name: str, function: Callable[..., Any]) -> None:
        """A filter of one's own, counted like the others (its result, and a step per use)."""
        self.filters[name] = _bounded_filter(name, function)

    def _range(self, *args: int) -> range:
        made = range(*args)
        if len(made) > self.limits.max_range:
            raise TemplateLimitError(
                f"range({', '.join(map(_short, args))}) has {len(made):,} items, past the {self.limits.max_range:,} "
                "a template may make (range limit)"
            )
        return made

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if operator == "*":
            _repeat(budget, left, right)
        elif operator == "**":
            _power(budget, left, right)
        elif operator == "+":
            _add(budget, left, right)
        elif operator == "%":
            _printf(budget, left, right)
        try:
            return self.binop_table[operator](left, right)
        except OverflowError as error:  # a float power out of range
            raise TemplateLimitError(f"{_short(left)} {operator} {_short(right)}: {error} (float range)") from None

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if isinstance(getattr(__obj, "__self__", None), str) and getattr(__obj, "__name__", None):
            if __obj.__name__ == "join" and len(args) == 1 and not isinstance(args[0], list | tuple | str):
                args = (list(args[0]),)  # a generator's items, counted before they are joined
            _str_method(budget, __obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        budget.build(_shallow(result), f"calling {getattr(__obj, '__name__', type(__obj).__name__)}")
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """str.format / format_map of a string, run by the bounded formatter (Jinja2's, counted)."""
        if getattr(value, "__name__", None) not in ("format", "format_map") or not isinstance(
            getattr(value, "__self__", None), str
        ):
            return None
        text = value.__self__
        if isinstance(text, Markup):
            return super().wrap_str_format(value)  # not in workflows (no autoescape)
        formatter = _BoundedFormatter(self)
        is_map = value.__name__ == "format_map"

        def formatted(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument, and no keyword arguments")
                kwargs, args = args[0], ()
            budget = _budget()
            budget.build(len(text), "str.format()")
            return formatter.vformat(text, args, kwargs)

        return functools.update_wrapper(formatted, value)

    def bounded_concat(self, parts: tuple[Any, ...]) -> str:
        """`a ~ b ~ ...`: its text counted before it is made."""
        budget = _budget()
        budget.build(sum(text_size(part, budget.room + 1) for part in parts), "this ~ concatenation")
        return "".join(map(str, parts))

    def bounded_literal(self, value: Any) -> Any:
        """A list, tuple or dict written in the template: its text counted (nested literals repeat a value)."""
        budget = _budget()
        budget.build(text_size(value, budget.room + 1) if value else 0, f"this {type(value).__name__} literal")
        return value

    def compile_expression(self, source: str, undefined_to_none: bool = True) -> TemplateExpression:
        compiled = super().compile_expression(source, undefined_to_none)
        return _BoundedExpression(compiled._template, undefined_to_none, self.limits)


def _output(value: Any) -> Any:
    """Every `{{ ... }}` as it is written out: its text counted before it is made."""
    budget = _budget()
    budget.build(text_size(value, budget.room + 1), "this output")
    return value
