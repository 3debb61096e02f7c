"""The seed's template syntax, `${name}` and `${foreach x in xs}…${/foreach}`, as the same sandboxed Jinja2
templates the language otherwise writes: `{{ name }}` and `{% for x in xs %}…{% endfor %}`.

The seed's workflows (`bidirectional-guided-workflows.md`) write templates this way, so a workflow written
as the seed writes it runs as it is: its templates are translated once, when the file is read, and from
there on are checked, compiled and rendered like any other. A translation keeps every line where it was and
knows, for each offset of the Jinja2 text, the offset of the seed's text it came from, so that a problem
found in the translation is reported at its place in the file. One file writes one syntax: the first
template marker in the file decides, and a marker of the other is an error at its place.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["JINJA_MARKS", "SEED_MARK", "SeedSyntaxError", "Translation", "markers", "translate"]

SEED_MARK = "${"
JINJA_MARKS = ("{{", "{%", "{#")
_MARKERS = re.compile(r"\$\{|\{\{|\{%|\{#")
_FOREACH = re.compile(r"foreach\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(\S.*?)\s*", re.DOTALL)
_OPENERS, _CLOSERS = "([{", ")]}"


class SeedSyntaxError(ValueError):
    """A `${...}` that is not one of the seed's forms; `offset` is where it starts in the text."""

    def __init__(self, offset: int, message: str) -> None:
        self.offset = offset
        super().__init__(message)


def markers(text: str) -> list[tuple[int, str]]:
    """(offset, "seed" or "jinja") of each template marker in `text`."""
    return [(found.start(), "seed" if found.group() == SEED_MARK else "jinja") for found in _MARKERS.finditer(text)]


@dataclass(frozen=True)
class Translation:
    """The Jinja2 text, and where its pieces came from: `spans` holds (Jinja2 offset, seed offset) where a
    piece copied as it is starts; a delimiter written in place of `${` or `}` maps to that `${`."""

    text: str
    spans: tuple[tuple[int, int], ...]

    def source_offset(self, offset: int) -> int:
        """The offset in the seed's text of the Jinja2 text's `offset`."""
        index = bisect.bisect_right(self.spans, (offset, float("inf"))) - 1
        if index < 0:
            return offset
        start, source = self.spans[index]
        return source + (offset - start)


def translate(text: str) -> Translation:
    """`text` in the seed's syntax as Jinja2 text; SeedSyntaxError for a `${` that is not closed, empty, or an
    unknown form."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    position = 0

    def copy(start: int, end: int) -> None:
        nonlocal length
        if end > start:
            spans.append((length, start))
            out.append(text[start:end])
            length += end - start

    def write(piece: str, at: int) -> None:
        nonlocal length
        spans.append((length, at))
        out.append(piece)
        length += len(piece)

    while (start := text.find(SEED_MARK, position)) >= 0:
        copy(position, start)
        end = _closing(text, start + len(SEED_MARK))
        if end is None:
            raise SeedSyntaxError(start, "a ${ that is not closed: write ${name}, ${foreach x in xs} or ${/foreach}")
        inner_start, inner_end = start + len(SEED_MARK), end
        inner = text[inner_start:inner_end]
        stripped = inner.strip()
        if not stripped:
            raise SeedSyntaxError(start, "an empty ${}: write the name or expression to show, as ${name}")
        if stripped == "/foreach":
            write("{% endfor %}", start)
        elif re.match(r"foreach\s", stripped):
            found = _FOREACH.fullmatch(inner.lstrip())
            if found is None:
                raise SeedSyntaxError(start, "a foreach is written ${foreach NAME in LIST}")
            offset = inner_start + (len(inner) - len(inner.lstrip()))
            write("{% for ", start)
            copy(offset + found.start(1), offset + found.end(1))
            write(" in ", start)
            copy(offset + found.start(2), offset + found.end(2))
            write(" %}", start)
        elif stripped.startswith("/"):
            raise SeedSyntaxError(start, f"${{{stripped}}} closes nothing the seed's syntax opens: write ${{/foreach}}")
        else:
            write("{{ ", start)
            copy(inner_start, inner_end)
            write(" }}", start)
        position = end + 1
    copy(position, len(text))
    return Translation("".join(out), tuple(spans))


def _closing(text: str, start: int) -> int | None:
    """The offset of the `}` that closes a `${` whose inside starts at `start`: brackets and quoted strings
    inside it are skipped, so `${ {'a': 1}['a'] }` closes at its last brace."""
    depth, quote, index = 0, None, start
    while index < len(text):
        char = text[index]
        if quote is not None:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            if char == "}" and depth == 0:
                return index
            depth -= 1
        elif char == "\n" and depth == 0:
            return None  # a ${ closes on its own line
        index += 1
    return None
