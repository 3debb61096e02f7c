"""What a user hands branchc as text, read within one set of limits: `branchc run --params` (JSON),
`--responses` files (YAML) and `branchc graph --trace` files (JSON).

Bad input is an `InputError` that names the place (`file:line:column`, or the key path of a value)
and, past a limit, which limit; never a traceback, and never unbounded time or memory:

- a file is read up to `max_bytes` (and no further: `/dev/zero` is refused, not read forever), and
  must be UTF-8 (else the error names the byte offset);
- values nest at most `max_depth` deep, checked before the text is parsed (deep nesting is never a
  RecursionError), and below every bound further on: pydantic serializes 255 levels (a value nested
  deeper fails in `model_dump`), the snapshot decoder decodes `DecodeLimits.max_depth` (500);
- an integer has at most `max_int_digits` digits (CPython's int-string limit, so it can be written
  back as JSON);
- YAML has no anchors or aliases here: they are refused as the document is composed, so an alias
  bomb ("billion laughs") expands nothing.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import BranchcError

__all__ = ["INPUT_LIMITS", "InputError", "InputLimits", "parse_json", "parse_yaml", "read_text", "yaml_loader"]


@dataclasses.dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds on input text; past one, InputError names it."""

    #: Bytes of one input (a file, or the text of an option).
    max_bytes: int = 16 * 1024 * 1024
    #: How deeply lists and objects nest: below pydantic's serialization depth (255), which params,
    #: answers and results pass through, and so below the snapshot decoder's (DecodeLimits.max_depth).
    max_depth: int = 200
    #: Digits of one integer: CPython's int-string limit (sys.int_max_str_digits), past which JSON
    #: text cannot hold it (json.dumps refuses it).
    max_int_digits: int = 4300


INPUT_LIMITS = InputLimits()


class InputError(BranchcError, ValueError):
    """Input text that is malformed or past one of the InputLimits; the message names the place."""


# -- files ---------------------------------------------------------------------------------------


def read_text(path: str | Path, limits: InputLimits = INPUT_LIMITS) -> str:
    """The UTF-8 text of `path`, read no further than `limits.max_bytes`."""
    try:
        with open(path, "rb") as file:
            data = file.read(limits.max_bytes + 1)
    except OSError as error:
        raise InputError(f"{path}: cannot read it: {error.strerror or error}") from None
    if len(data) > limits.max_bytes:
        raise InputError(f"{path}: larger than {limits.max_bytes:,} bytes, the limit for input files")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{path}: not UTF-8 text: byte 0x{data[error.start]:02x} at byte offset {error.start} ({error.reason})"
        ) from None


def _place(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line} column {offset - text.rfind(chr(10), 0, offset)}"


# -- JSON ----------------------------------------------------------------------------------------

# A string (to its end, or to the end of the text when it is not closed: linear, never backtracking) or a bracket.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]')


class _BigInt:
    """Stands in for an integer past max_int_digits while the text is parsed; its path is found after."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def parse_json(text: str, where: str, limits: InputLimits = INPUT_LIMITS) -> Any:
    """The JSON value of `text`; `where` names the input in errors (`--params`, a file)."""
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise InputError(f"{where}: larger than {limits.max_bytes:,} bytes, the limit for JSON input")
    _check_json_depth(text, where, limits)
    found: list[_BigInt] = []

    def parse_int(digits: str) -> Any:
        if len(digits) - digits.startswith("-") > limits.max_int_digits:
            found.append(_BigInt(len(digits) - digits.startswith("-")))
            return found[-1]
        return int(digits)

    try:
        value = json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as error:
        raise InputError(f"{where}: not valid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:  # not reached: the depth is checked first
        raise InputError(f"{where}: nested too deeply, the limit for JSON input") from None
    if found:
        path, big = _find_big_int(value)
        at = f"{path} is " if path else ""
        raise InputError(
            f"{where}: {at}an integer of {big.digits:,} digits, over the limit of {limits.max_int_digits:,} "
            f"digits for JSON input"
        )
    return value


def _check_json_depth(text: str, where: str, limits: InputLimits) -> None:
    if text.count("[") + text.count("{") <= limits.max_depth:
        return  # cannot nest deeper than it has brackets
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        char = text[match.start()]
        if char == "[" or char == "{":
            depth += 1
            if depth > limits.max_depth:
                raise InputError(
                    f"{where}: nested more than {limits.max_depth} deep at {_place(text, match.start())}, "
                    f"the limit for JSON input"
                )
        elif char == "]" or char == "}":
            depth -= 1


def _find_big_int(value: Any) -> tuple[str, _BigInt]:
    """The key path (`['a'][2]`) of the first stand-in, walked without recursion."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if type(item) is _BigInt:
            return path, item
        if type(item) is list:
            stack.extend((child, f"{path}[{index}]") for index, child in reversed(list(enumerate(item))))
        elif type(item) is dict:
            stack.extend((child, f"{path}[{key!r}]") for key, child in reversed(list(item.items())))
    raise AssertionError("no stand-in found")  # pragma: no cover


# -- YAML ----------------------------------------------------------------------------------------

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when it is there


class _RefusingError(yaml.MarkedYAMLError):
    """A YAML document branchc refuses: an alias, an anchor, or a limit passed."""


def _loader(limits: InputLimits) -> type:
    class Loader(_BaseLoader):
        """The safe loader, composing without recursion and without anchors or aliases."""

        def get_single_node(self) -> Any:
            self.get_event()  # stream start
            document = None
            if not self.check_event(StreamEndEvent):
                self.get_event()  # document start
                document = self._compose()
                self.get_event()  # document end
            if not self.check_event(StreamEndEvent):
                event = self.get_event()
                raise ComposerError(None, None, "a second document: give one", event.start_mark)
            self.get_event()  # stream end
            return document

        def _compose(self) -> Any:
            stack: list[Any] = []  # the open collections; a mapping's pending key is kept with it
            keys: list[Any] = []
            while True:
                event = self.get_event()
                if isinstance(event, AliasEvent):
                    raise _RefusingError(
                        None, None, f"an alias (*{event.anchor}): aliases are not allowed here", event.start_mark
                    )
                if getattr(event, "anchor", None) is not None:
                    raise _RefusingError(
                        None, None, f"an anchor (&{event.anchor}): anchors are not allowed here", event.start_mark
                    )
                if isinstance(event, ScalarEvent):
                    tag = event.tag
                    if tag is None or tag == "!":
                        tag = self.resolve(ScalarNode, event.value, event.implicit)
                    node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
                elif isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                    if len(stack) >= limits.max_depth:
                        deep = f"nested more than {limits.max_depth} deep, the limit for input"
                        raise _RefusingError(None, None, deep, event.start_mark)
                    kind = SequenceNode if isinstance(event, SequenceStartEvent) else MappingNode
                    tag = event.tag
                    if tag is None or tag == "!":
                        tag = self.resolve(kind, None, event.implicit)
                    stack.append(kind(tag, [], event.start_mark, None, flow_style=event.flow_style))
                    keys.append(None)
                    continue
                elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
                    node = stack.pop()
                    keys.pop()
                    node.end_mark = event.end_mark
                else:  # pragma: no cover - the parser gives nothing else inside a document
                    raise ComposerError(None, None, f"unexpected {type(event).__name__}", event.start_mark)
                if not stack:
                    return node
                parent = stack[-1]
                if isinstance(parent, SequenceNode):
                    parent.value.append(node)
                elif keys[-1] is None:
                    keys[-1] = node
                else:
                    parent.value.append((keys[-1], node))
                    keys[-1] = None

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except yaml.YAMLError:
                raise
            except (ValueError, TypeError, OverflowError) as error:  # a date with no such day, say
                raise ConstructorError(None, None, str(error), node.start_mark) from None

        def construct_yaml_int(self, node: Any) -> Any:
            if len(node.value) > limits.max_int_digits:
                raise _RefusingError(
                    None,
                    None,
                    f"an integer of {len(node.value):,} characters, over the limit of {limits.max_int_digits:,} "
                    f"digits for input",
                    node.start_mark,
                )
            return super().construct_yaml_int(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    return Loader


_LOADERS: dict[InputLimits, type] = {}


def yaml_loader(text: str, limits: InputLimits = INPUT_LIMITS) -> Any:
    """A loader over `text` for who needs the YAML nodes and their marks (a checker that reports line and
    column): the same limits and refusals as parse_yaml. `get_single_node()`, then `dispose()` it."""
    loader = _LOADERS.get(limits) or _LOADERS.setdefault(limits, _loader(limits))
    return loader(text)


def parse_yaml(text: str, where: str, limits: InputLimits = INPUT_LIMITS) -> Any:
    """The YAML value of `text` (one document, safe types, no anchors or aliases)."""
    if len(text) > limits.max_bytes:
        raise InputError(f"{where}: larger than {limits.max_bytes:,} bytes, the limit for input files")
    loader = _LOADERS.get(limits) or _LOADERS.setdefault(limits, _loader(limits))
    try:
        return yaml.load(text, Loader=loader)  # a safe loader: SafeConstructor
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        place = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        what = "refused" if isinstance(error, _RefusingError) else "not valid YAML"
        problem = error.problem or error.context or "malformed"
        raise InputError(f"{where}{place}: {what}: {problem}") from None
    except yaml.YAMLError as error:  # the reader: a character YAML does not allow
        character, position = getattr(error, "character", None), getattr(error, "position", None)
        what = f"character #x{character:04x}" if isinstance(character, int) else "a character"
        at = f" at offset {position}" if position is not None else ""
        raise InputError(f"{where}: not valid YAML: {what}{at}: {getattr(error, 'reason', error)}") from None
