"""Reading and checking a workflow file: every problem at its `file.yaml:line:col`, with a hint.

The YAML is composed into nodes (PyYAML's marks give each value's line and column), then validated by
the pydantic model (each error's `loc` is mapped back to its node), then checked as a program: step
ids, where each `next` goes, template syntax (Jinja2, sandboxed), which names each template reads and
whether every path to the step saved them first, steps no path reaches, and a way to complete."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jinja2 import TemplateSyntaxError, meta, nodes
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ..runtime.errors import BranchcError
from ..runtime.inputs import InputError, read_text, yaml_loader
from ..splitter.diagnostics import Diagnostic
from .model import RESERVED_PARAMS, Branch, Foreach, Param, Shape, Step, Workflow, WorkflowFile, form_class
from .runtime import ENVIRONMENT
from .seed import SeedSyntaxError, markers, translate

__all__ = ["Source", "WorkflowError", "check_workflow", "load_workflow", "template_places"]

Path_ = tuple[Any, ...]


class WorkflowError(BranchcError, ValueError):
    """A workflow that does not check; `diagnostics` lists every problem (the message shows them)."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics if d.severity == "error"))


@dataclass
class Source:
    """A workflow file as composed: its data, and for each key path the value's and the key's node."""

    path: str
    text: str
    data: Any = None
    nodes: dict[Path_, Any] = field(default_factory=dict)
    keys: dict[Path_, Any] = field(default_factory=dict)

    def at(self, where: Path_, *, key: bool = False) -> tuple[int, int]:
        """(line, column), 1-based, of the value at `where` (or its key), else of its nearest parent."""
        where = tuple(where)
        while where:
            node = (self.keys if key else self.nodes).get(where) or self.nodes.get(where)
            if node is not None:
                return node.start_mark.line + 1, node.start_mark.column + 1
            where = where[:-1]
        return 1, 1

    def raw(self, where: Path_) -> tuple[str, int] | None:
        """The file's own text of the scalar at `where`, without its quotes or its block header, and the
        offset where it starts in the file; None for anything but a scalar."""
        node = self.nodes.get(tuple(where))
        if not isinstance(node, ScalarNode):
            return None
        start, end = node.start_mark.index, node.end_mark.index
        if node.style in ("'", '"'):
            start, end = start + 1, end - 1
        elif node.style in ("|", ">"):
            start = self.text.find("\n", start, end) + 1 or end
        return self.text[start:end], start

    def template_place(self, where: Path_, line: int, column: int = 0) -> tuple[int, int]:
        """The file's (line, column) of `line` (1-based) and 0-based `column` of the template at `where`."""
        node = self.nodes.get(tuple(where))
        if node is None:
            return self.at(where)
        start = node.start_mark
        if node.style in ("|", ">"):  # a block scalar: its text starts on the next line, indented
            number = start.line + 1 + line
            text = self.text.splitlines()[number - 1] if number <= len(self.text.splitlines()) else ""
            indent = len(text) - len(text.lstrip())
            own = node.value.split("\n")
            if node.style == "|" and line <= len(own) and own[line - 1].strip():
                indent = len(text) - len(own[line - 1])  # the block's indentation: the rest is the template's
            return number, indent + 1 + column
        quote = 1 if node.style in ("'", '"') else 0
        if line == 1:
            return start.line + 1, start.column + 1 + quote + column
        return start.line + line, 1 + column


def _compose(path: str, text: str) -> Any:
    loader = yaml_loader(text)
    try:
        return loader, loader.get_single_node()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "malformed"
        if error.problem_mark is not None and error.context_mark is not None and mark.index >= len(text.rstrip()):
            mark, problem = error.context_mark, f"{error.context}, {problem}"  # ran off the end: where it began
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise WorkflowError(
            [Diagnostic(path, line, column, "error", f"not valid YAML: {problem}", _yaml_hint(problem))]
        ) from None
    except yaml.YAMLError as error:  # the reader: a character YAML does not allow
        offset = getattr(error, "position", None) or 0
        line, column = text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)
        character = getattr(error, "character", None)
        what = f"character #x{character:04x}: " if isinstance(character, int) else ""
        problem = f"not valid YAML: {what}{getattr(error, 'reason', None) or error}"
        raise WorkflowError(
            [
                Diagnostic(
                    path,
                    line,
                    column,
                    "error",
                    problem,
                    "remove it, or write it as an escape in a double-quoted string",
                )
            ]
        ) from None
    finally:
        loader.dispose()


def _read(path: str) -> Source:
    try:
        text = read_text(path)
    except InputError as error:
        raise WorkflowError([Diagnostic(path, 1, 1, "error", str(error))]) from None
    source = Source(path, text)
    loader, root = _compose(path, text)
    problems: list[Diagnostic] = []

    def build(node: Any, where: Path_) -> Any:
        source.nodes[where] = node
        if isinstance(node, MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node) if isinstance(key_node, ScalarNode) else None
                if not isinstance(key, str):
                    line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                    hint = 'quote it, as "1": or "true":'
                    problems.append(Diagnostic(path, line, column, "error", "a key must be a plain string", hint))
                    continue
                if key in out:
                    line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                    problems.append(
                        Diagnostic(path, line, column, "error", f"the key {key!r} is given twice", "keep one")
                    )
                    continue
                source.keys[(*where, key)] = key_node
                out[key] = build(value_node, (*where, key))
            return out
        if isinstance(node, SequenceNode):
            return [build(item, (*where, index)) for index, item in enumerate(node.value)]
        try:
            return loader.construct_object(node)
        except yaml.YAMLError as error:
            line, column = node.start_mark.line + 1, node.start_mark.column + 1
            problem = getattr(error, "problem", None) or error  # its str repeats the place
            hint = "quote it, to keep it as text"
            problems.append(Diagnostic(path, line, column, "error", f"not valid YAML: {problem}", hint))
            return None

    source.data = None if root is None else build(root, ())
    if problems:
        raise WorkflowError(problems)
    return source


# -- the pydantic model's errors, at their nodes ---------------------------------------------------------------


def _model_at(where: Path_) -> type[BaseModel] | None:
    """Which model describes the mapping at `where` (for a hint listing its keys)."""
    model: type[BaseModel] | None = WorkflowFile
    rest = list(where)
    while rest and model is not None:
        part = rest.pop(0)
        if model is WorkflowFile and part == "workflow":
            model = Workflow
        elif model is Workflow and part == "steps" and rest and isinstance(rest[0], int):
            rest.pop(0)
            model = Step
        elif model is Workflow and part == "params" and rest:
            rest.pop(0)
            model = Param
        elif model is Step and part == "next" and rest and isinstance(rest[0], int):
            rest.pop(0)
            model = Branch
        elif model is Step and part == "foreach":
            model = Foreach
        elif part in ("schema", "items"):
            model = Shape
        elif model is Shape and part == "properties" and rest:
            rest.pop(0)
            model = Shape
        else:
            model = None
    return model


def _keys_of(model: type[BaseModel]) -> str:
    return ", ".join(info.alias or name for name, info in model.model_fields.items())


def _yaml_hint(problem: str) -> str:
    """What to do about a YAML syntax error, said as PyYAML words it."""
    if "anchor" in problem or "alias" in problem or "tag" in problem:
        return "write the value out in full: anchors, aliases and tags are not read"
    if "second document" in problem:
        return "remove the `---` and what follows it"
    if "tab" in problem:
        return "indent with spaces, not tabs"
    if "end of stream" in problem or "did not find expected" in problem:
        return "close the quote or bracket that opens here"
    return "indent with spaces; quote a value that holds ': ' or ' #', or starts with {, [, *, &, !, % or @"


_HINTS = {
    "string_pattern_mismatch": "use an identifier: letters, digits and _, not starting with a digit",
    "string_too_long": "shorten it",
    "missing": "add it",
    "too_short": "give at least one",
    "literal_error": "use one of the values it names",
    "enum": "use one of the values it names",
    "string_type": "give text (quote it when YAML would read it as a number, a boolean or null)",
    "bool_type": "give true or false",
    "bool_parsing": "give true or false",
    "int_type": "give a whole number",
    "int_parsing": "give a whole number",
    "int_from_float": "give a whole number",
    "greater_than_equal": "give a larger number",
    "less_than_equal": "give a smaller number",
    "list_type": "give a list: `- item` lines, or [a, b]",
    "dict_type": "give a mapping: `key: value` lines, or {key: value}",
    "model_type": "give a mapping: `key: value` lines, or {key: value}",
    "model_attributes_type": "give a mapping: `key: value` lines, or {key: value}",
}


_NOUNS = {
    "string_type": "text",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def _hint(kinds: list[str]) -> str:
    """The fix for a value's errors: one kind's hint, or for a value that fits none of several types (a
    union), the types it may be."""
    nouns = list(dict.fromkeys(_NOUNS[kind] for kind in kinds if kind in _NOUNS))
    if len(nouns) > 1:
        return "give " + ", or ".join(nouns)
    return next((_HINTS[kind] for kind in kinds if kind in _HINTS), "")


def _dotted(where: Path_) -> str:
    text = ""
    for part in where:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the file)"


def _model_problems(source: Source, error: ValidationError) -> list[Diagnostic]:
    grouped: dict[Path_, list[dict[str, Any]]] = {}
    tagged: set[Path_] = set()  # where a union member's tag was passed over
    for item in error.errors(include_url=False):
        where: list[Any] = []
        node_data = source.data
        for part in item["loc"]:  # keep the parts that name data (union members add their own tags)
            if isinstance(node_data, dict) and part in node_data:
                where.append(part)
                node_data = node_data[part]
            elif isinstance(node_data, list) and isinstance(part, int) and part < len(node_data):
                where.append(part)
                node_data = node_data[part]
            elif item["type"] in ("extra_forbidden", "missing") and part == item["loc"][-1]:
                where.append(part)
            elif part != "[key]":
                tagged.add(tuple(where))
        grouped.setdefault(tuple(where), []).append(item)
    for where in tagged & set(grouped):  # one member fits the kind (a list) and fails inside: drop the others
        if any(len(other) > len(where) and other[: len(where)] == where for other in grouped):
            del grouped[where]
    out = []
    for where, items in grouped.items():
        kinds = {item["type"] for item in items}
        if "extra_forbidden" in kinds:
            line, column = source.at(where, key=True)
            model = _model_at(where[:-1])
            known = f"; {model.__name__.lower()} keys are: {_keys_of(model)}" if model else ""
            message, hint = f"{_dotted(where)}: unknown key {where[-1]!r}", f"remove it or fix its spelling{known}"
        elif "missing" in kinds:
            line, column = source.at(where[:-1])
            message, hint = f"{_dotted(where)}: missing", f"add {where[-1]!r}"
        else:
            line, column = source.at(where, key=any("[key]" in item["loc"] for item in items))  # a bad name: its key
            got = items[0].get("input")
            messages = list(dict.fromkeys(item["msg"] for item in items))
            message = f"{_dotted(where)}: {' or '.join(messages) if len(messages) < 4 else messages[0]} (got {got!r})"
            if where and (where[-1] == "next" or (where[-2:-1] == ("next",) and isinstance(where[-1], int))):
                hint = "give a step id, or a list of {if: EXPRESSION, goto: STEP} with a last {goto: STEP}"
            else:
                hint = _hint([item["type"] for item in items])
        out.append(Diagnostic(source.path, line, column, "error", message, hint))
    return sorted(out, key=lambda d: (d.line, d.column))


# -- the workflow as a program ---------------------------------------------------------------------------------

_GLOBALS = frozenset(ENVIRONMENT.globals)


def successors(workflow: Workflow) -> dict[str, list[str | None]]:
    """Where each step may go next (None: the workflow completes), by the language's rules: a `next`
    id goes there; a conditional `next` goes to its entries' steps, and when none holds (no default)
    completes if the step has `complete`, else goes on to the following step; without `next`, a step
    completes if it has `complete`, else goes on to the following step."""
    out: dict[str, list[str | None]] = {}
    for index, step in enumerate(workflow.steps):
        following = workflow.steps[index + 1].id if index + 1 < len(workflow.steps) else None
        fallthrough: list[str | None] = [None] if step.complete is not False else [following]
        if isinstance(step.next, str):
            out[step.id] = [step.next]
        elif isinstance(step.next, list):
            gotos: list[str | None] = [branch.goto for branch in step.next]
            has_default = any(branch.if_ is None for branch in step.next)
            out[step.id] = gotos + ([] if has_default else fallthrough)
        else:
            out[step.id] = fallthrough
    return out


def _saved_before(workflow: Workflow, graph: dict[str, list[str | None]]) -> dict[str, frozenset[str]]:
    """For each step, the names saved on every path from the start to it (params included)."""
    everything = frozenset(workflow.params) | {s.save for s in workflow.steps if s.save}
    start = workflow.steps[0].id
    into: dict[str, frozenset[str]] = {step.id: everything for step in workflow.steps}
    into[start] = frozenset(workflow.params)
    saves = {step.id: ({step.save} if step.save else set()) for step in workflow.steps}
    changed = True
    while changed:
        changed = False
        for step in workflow.steps:
            preds = [other for other, targets in graph.items() if step.id in targets]
            flows = [into[pred] | saves[pred] for pred in preds]
            new = frozenset(workflow.params)  # the start runs first, with the params alone
            if step.id != start:
                new = frozenset.intersection(*flows) if flows else everything
            if new != into[step.id]:
                into[step.id], changed = new, True
    return into


def _saved_type(step: Step) -> str:
    """The JSON type of what `step` saves: a foreach's list, else its schema's type (a form's object or its
    one value, a model's JSON answer), else text."""
    if step.foreach is not None:
        return "array"
    return step.schema_.type if step.schema_ is not None else "string"


def _reachable(workflow: Workflow, graph: dict[str, list[str | None]]) -> set[str]:
    seen, todo = set(), [workflow.steps[0].id]
    while todo:
        step = todo.pop()
        if step in seen or step not in graph:
            continue
        seen.add(step)
        todo += [target for target in graph[step] if target is not None]
    return seen


class _Checker:
    def __init__(self, source: Source, workflow: Workflow, originals: dict[Path_, str] | None = None) -> None:
        self.source = source
        self.workflow = workflow
        # the templates as the file wrote them in the seed's syntax (seed.py), by path; `workflow` holds their
        # translations (None: the file writes Jinja2's syntax)
        self.originals = originals or {}
        self.seed = originals is not None
        self.out: list[Diagnostic] = []

    def error(self, where: Path_, message: str, hint: str = "", *, place: tuple[int, int] | None = None) -> None:
        line, column = place or self.source.at(("workflow", *where))
        self.out.append(Diagnostic(self.source.path, line, column, "error", message, hint))

    def warning(self, where: Path_, message: str, hint: str = "") -> None:
        line, column = self.source.at(("workflow", *where))
        self.out.append(Diagnostic(self.source.path, line, column, "warning", message, hint))

    def run(self) -> list[Diagnostic]:
        workflow = self.workflow
        ids: dict[str, int] = {}
        for index, step in enumerate(workflow.steps):
            if step.id in ids:
                self.error(("steps", index, "id"), f"a second step {step.id!r}", "step ids are unique; rename one")
            ids.setdefault(step.id, index)
        taken = RESERVED_PARAMS | {form_class(step.id) for step in workflow.steps if step.answer_by == "user"}
        for name in sorted(taken & workflow.params.keys(), key=list(workflow.params).index):
            why = "the tool's context takes that name" if name == "ctx" else "the workflow's tool keeps it for itself"
            place = self.source.at(("workflow", "params", name), key=True)
            self.error(("params", name), f"a param named {name!r}: {why}", "rename it", place=place)
        known = ", ".join(ids)
        for index, step in enumerate(workflow.steps):
            self._check_step(index, step, ids, known)
        if not any(step.complete is not False for step in workflow.steps):
            self.error(
                ("steps",),
                "no step completes the workflow",
                "give the last step `complete: true` (or a result template)",
                place=self.source.at(("workflow", "steps"), key=True),
            )
        if self.out:  # the flow needs known steps
            return self.out
        graph = successors(workflow)
        reachable = _reachable(workflow, graph)
        for index, step in enumerate(workflow.steps):
            if step.id not in reachable:
                hint = "go to it from a `next`, or remove it"
                self.warning(("steps", index, "id"), f"no path reaches step {step.id!r}", hint)
        self._check_names(graph)
        return self.out

    def _check_step(self, index: int, step: Step, ids: dict[str, int], known: str) -> None:
        here = ("steps", index)
        if isinstance(step.next, str) and step.next not in ids:
            self.error((*here, "next"), f"next: unknown step {step.next!r}", f"the steps are: {known}")
        if isinstance(step.next, list):
            for number, branch in enumerate(step.next):
                if branch.goto not in ids:
                    message = f"next: unknown step {branch.goto!r}"
                    self.error((*here, "next", number, "goto"), message, f"the steps are: {known}")
                if branch.if_ is None and number != len(step.next) - 1:
                    message = "a default (an entry without `if`) before other entries"
                    self.error((*here, "next", number), message, "move it last")
                if branch.if_ is not None:
                    self._syntax((*here, "next", number, "if"), branch.if_, expression=True)
        if isinstance(step.next, str) and step.complete is not False:
            self.error((*here, "complete"), "both `next: STEP` and `complete`", "a step goes on or completes; drop one")
        following = index + 1 < len(self.workflow.steps)
        default = isinstance(step.next, str) or (isinstance(step.next, list) and step.next[-1].if_ is None)
        if not following and not default and step.complete is False:
            self.error(
                (*here, "id"),
                f"the last step {step.id!r} neither completes nor goes anywhere",
                "give it `complete: true`, or a `next`",
            )
        self._syntax((*here, "instruction"), step.instruction)
        if isinstance(step.complete, str):
            self._syntax((*here, "complete"), step.complete)
        if step.system_prompt is not None:
            self._syntax((*here, "system_prompt"), step.system_prompt)
        if step.answer_by == "user":
            self._check_form(here, step.schema_)
        if step.schema_ is not None and step.save is None:
            self.warning((*here, "schema"), "a schema but no `save`: the answer is not kept", "add `save: NAME`")

    def _check_form(self, here: Path_, shape: Shape | None) -> None:
        if shape is None or shape.type != "object":
            if shape is not None and shape.type == "array" and (shape.items is None or shape.items.enum is None):
                message = "a user step's array answer must be a choice"
                self.error((*here, "schema"), message, "give `items: {enum: [...]}`")
            return
        for name, prop in (shape.properties or {}).items():
            if prop.type == "object" or (prop.type == "array" and (prop.items is None or prop.items.enum is None)):
                self.error(
                    (*here, "schema", "properties", name),
                    f"the form field {name!r} is {prop.type}: an MCP form holds flat fields",
                    "use string, integer, number, boolean, an enum, or an array of an enum",
                )
        for number, name in enumerate(shape.required or ()):
            if name not in (shape.properties or {}):
                message = f"step {self.workflow.steps[here[1]].id!r}: required names {name!r}, which is not a property"
                self.error((*here, "schema", "required", number), message, f"add {name!r} to properties, or drop it")

    def _syntax(self, where: Path_, text: str, *, expression: bool = False) -> Any:
        full = ("workflow", *where)
        try:
            if expression:
                return ENVIRONMENT.parse("{{ " + text + " }}")
            return ENVIRONMENT.parse(text)
        except TemplateSyntaxError as error:
            line, column = self.source.template_place(full, error.lineno or 1)
            step = self.workflow.steps[where[1]].id
            self.error(
                where,
                f"step {step!r}: {_dotted(where[2:])}: template syntax error: {error.message}",
                "templates are Jinja2: {{ name }}, {% for x in list %}…{% endfor %}, {% if … %}…{% endif %}",
                place=(line, column),
            )
            return None

    def _check_names(self, graph: dict[str, list[str | None]]) -> None:
        workflow = self.workflow
        before = _saved_before(workflow, graph)
        savers: dict[str, list[str]] = {}
        for step in workflow.steps:
            if step.save:
                savers.setdefault(step.save, []).append(step.id)
        for index, step in enumerate(workflow.steps):
            here = ("steps", index)
            available = set(before[step.id])
            after = available | ({step.save} if step.save else set())
            if step.foreach is not None:
                if step.foreach.in_ not in available:
                    self._unsaved((*here, "foreach", "in"), step.id, step.foreach.in_, savers, None)
                else:
                    self._check_list((*here, "foreach", "in"), step.id, step.foreach.in_)
                available |= {step.foreach.as_, "loop"}
            templates: list[tuple[Path_, str, set[str], bool]] = [
                ((*here, "instruction"), step.instruction, available, False)
            ]
            if step.system_prompt is not None:
                templates.append(((*here, "system_prompt"), step.system_prompt, available, False))
            if isinstance(step.complete, str):
                templates.append(((*here, "complete"), step.complete, after, False))
            for number, branch in enumerate(step.next if isinstance(step.next, list) else ()):
                if branch.if_ is not None:
                    templates.append(((*here, "next", number, "if"), branch.if_, after, True))
            for where, text, names, expression in templates:
                tree = self._syntax(where, text, expression=expression)
                if tree is None:
                    continue
                tested = {  # `name is defined` guards a read of a name that may not be saved yet
                    test.node.name
                    for test in tree.find_all(nodes.Test)
                    if test.name in ("defined", "undefined") and isinstance(test.node, nodes.Name)
                }
                for name in sorted(meta.find_undeclared_variables(tree) - _GLOBALS - names - tested):
                    self._unsaved(where, step.id, name, savers, text, expression)

    def _check_list(self, where: Path_, step: str, name: str) -> None:
        """A foreach runs over a list: every param or step that gives `name` must give a list."""
        workflow = self.workflow
        givers = []
        if name in workflow.params:
            givers.append((f"the param {name!r}", workflow.params[name].type, "`type: array`"))
        for other in workflow.steps:
            if other.save == name:
                givers.append((f"step {other.id!r}", _saved_type(other), "schema: {type: array}"))
        for who, kind, fix in givers:
            if kind != "array":
                message = f"step {step!r}: foreach runs over {name!r}, which {who} gives as {kind}, not a list"
                self.error(where, message, f"give {who} {fix}")

    def _unsaved(
        self,
        where: Path_,
        step: str,
        name: str,
        savers: dict[str, list[str]],
        text: str | None,
        expression: bool = False,
    ) -> None:
        place = None
        if text is not None:
            place = self._name_place(("workflow", *where), text, name, expression)
        field = _dotted(where[2:])  # where is ("steps", index, ...): the step's own field, as foreach.in, next[0].if
        if name in savers:
            by = ", ".join(repr(s) for s in savers[name])
            message = f"step {step!r}: {field} reads {name!r}, which is not saved on every path to it (saved by {by})"
            hint = f"save {name!r} in a step that always runs before {step!r}, or go to {step!r} only after it"
        else:
            message = f"step {step!r}: {field} reads {name!r}, which no step saves and no param gives"
            hint = f"add `save: {name}` to an earlier step, or a param {name!r}; saved names: " + (
                ", ".join(sorted({*savers, *self.workflow.params})) or "none"
            )
        self.error(where, message, hint, place=place)

    def _name_place(self, where: Path_, text: str, name: str, expression: bool = False) -> tuple[int, int] | None:
        """Where the template first reads `name`: found in the file's own text of the scalar (so folded lines,
        quotes and escapes cannot shift it), else in the template's text, mapped to the file. A template in the
        seed's syntax is read through its translation (seed.py), and the place mapped back to the seed's text."""
        raw = self.source.raw(where)
        if raw is not None and (found := self._first_read(raw[0], name, expression)) is not None:
            offset = raw[1] + found
            text_before = self.source.text[:offset]
            return text_before.count("\n") + 1, offset - (text_before.rfind("\n") + 1) + 1
        original = self.originals.get(where, text)
        found = self._first_read(original, name, expression)
        if found is None:
            return None
        line, start = original.count("\n", 0, found) + 1, original.rfind("\n", 0, found) + 1
        return self.source.template_place(where, line, found - start)

    def _first_read(self, text: str, name: str, expression: bool) -> int | None:
        if not self.seed or expression:
            return _first_read(text, name, expression)
        try:
            translation = translate(text)
        except SeedSyntaxError:
            return None
        found = _first_read(translation.text, name, expression)
        return None if found is None else translation.source_offset(found)


def _first_read(text: str, name: str, expression: bool) -> int | None:
    """The offset in `text` of the template's first read of the variable `name` (a name token that does
    not follow a `.`), walking the lexer's tokens through the text; None when it does not lex."""
    wrapped = "{{ " + text + " }}" if expression else text
    try:
        tokens = list(ENVIRONMENT.lex(wrapped))
    except TemplateSyntaxError:
        return None
    offset, previous = 0, ""
    for _, kind, value in tokens:
        offset = wrapped.find(value, offset)
        if offset < 0:  # the lexer changed the text (its newlines): no place
            return None
        if kind == "name" and value == name and previous != ".":
            return offset - 3 if expression else offset
        previous = value if kind != "whitespace" else previous
        offset += len(value)
    return None


def load_workflow(path: str | Path) -> tuple[Workflow, list[Diagnostic]]:
    """The workflow in the file `path` and its warnings; WorkflowError lists every error."""
    source = _read(str(path))
    if not isinstance(source.data, dict) or "workflow" not in source.data:
        raise WorkflowError(
            [Diagnostic(str(path), 1, 1, "error", "not a workflow file", "a workflow file starts with `workflow:`")]
        )
    try:
        workflow = WorkflowFile.model_validate(source.data).workflow
    except ValidationError as error:
        raise WorkflowError(_model_problems(source, error)) from None
    workflow, originals, problems = _one_syntax(source, workflow)
    if problems:
        raise WorkflowError(problems)
    found = _Checker(source, workflow, originals).run()
    if any(d.severity == "error" for d in found):
        raise WorkflowError(sorted(found, key=lambda d: (d.line, d.column)))
    return workflow, found


_TEMPLATE_FIELDS = ("instruction", "system_prompt", "complete")


def _templates(workflow: Workflow) -> list[tuple[int, str, str]]:
    """(step index, field, text) of each template of `workflow`, in file order within each step."""
    out = []
    for index, step in enumerate(workflow.steps):
        for name in _TEMPLATE_FIELDS:
            text = getattr(step, name)
            if isinstance(text, str):
                out.append((index, name, text))
    return out


def _file_place(source: Source, where: Path_, offset: int) -> tuple[int, int]:
    """The file's (line, column) of `offset` in the file's own text of the scalar at `where`."""
    raw = source.raw(where)
    if raw is None:
        return source.at(where)
    at = raw[1] + offset
    return source.text.count("\n", 0, at) + 1, at - (source.text.rfind("\n", 0, at) + 1) + 1


def _one_syntax(source: Source, workflow: Workflow) -> tuple[Workflow, dict[Path_, str] | None, list[Diagnostic]]:
    """The workflow with its templates in Jinja2's syntax: as they are, or translated from the seed's (seed.py),
    with the originals by path; or the problems: a file mixing the two syntaxes (the first marker in the file
    decides), or a `${...}` that is not one of the seed's forms, each at its place."""
    found = []  # (file place, kind, where, offset in the file's text of the scalar)
    for index, name, text in _templates(workflow):
        where = ("workflow", "steps", index, name)
        raw = source.raw(where)
        for offset, kind in markers(raw[0] if raw is not None else text):
            found.append((_file_place(source, where, offset), kind))
    if not found:
        return workflow, None, []
    found.sort()
    (first_line, first_column), syntax = found[0]
    problems = []
    for (line, column), kind in found:
        if kind != syntax:
            writes = "${name}, the seed's syntax" if syntax == "seed" else "{{ name }}, Jinja2's syntax"
            other = "Jinja2's {{ ... }} / {% ... %}" if kind == "jinja" else "the seed's ${...}"
            problems.append(
                Diagnostic(
                    source.path,
                    line,
                    column,
                    "error",
                    f"this template mixes in {other}: the file writes its templates as {writes} "
                    f"(first at {first_line}:{first_column})",
                    "write every template of a file in one syntax",
                )
            )
    if problems or syntax == "jinja":
        return workflow, None, problems
    originals: dict[Path_, str] = {}
    steps = list(workflow.steps)
    for index, name, text in _templates(workflow):
        where = ("workflow", "steps", index, name)
        try:
            translated = translate(text).text
        except SeedSyntaxError as error:
            raw = source.raw(where)
            try:  # the same error in the file's own text, for its place
                translate(raw[0] if raw is not None else text)
                line, column = source.at(where)
            except SeedSyntaxError as in_file:
                line, column = _file_place(source, where, in_file.offset)
            step = steps[index].id
            hint = "the seed's templates are ${name}, ${a.b[0]}, and ${foreach x in xs} ... ${/foreach}"
            problems.append(Diagnostic(source.path, line, column, "error", f"step {step!r}: {name}: {error}", hint))
            continue
        originals[where] = text
        written = {**steps[index]._written, name: text}
        steps[index] = steps[index].model_copy(update={name: translated})
        steps[index]._written = written
    return workflow.model_copy(update={"steps": steps}), originals, problems


def template_places(path: str | Path, workflow: Workflow) -> dict[str, list[tuple[int, int]]]:
    """Where each template of `workflow` (read from `path`) is in the file, for errors at run time: keyed as
    the generated module keys its texts (`step.instruction`, `step.system_prompt`, `step.complete`,
    `step.next.N`), the file's (line, column) of each of the template's lines."""
    source = _read(str(path))
    places: dict[str, list[tuple[int, int]]] = {}
    for index, step in enumerate(workflow.steps):
        here = ("workflow", "steps", index)
        texts: list[tuple[str, Path_, str | None]] = [
            ("instruction", (*here, "instruction"), step.instruction),
            ("system_prompt", (*here, "system_prompt"), step.system_prompt),
            ("complete", (*here, "complete"), step.complete if isinstance(step.complete, str) else None),
        ]
        for number, branch in enumerate(step.next if isinstance(step.next, list) else ()):
            texts.append((f"next.{number}", (*here, "next", number, "if"), branch.if_))
        for key, where, text in texts:
            if text is not None:
                lines = range(1, text.count("\n") + 2)
                places[f"{step.id}.{key}"] = [source.template_place(where, line) for line in lines]
    return places


def check_workflow(path: str | Path) -> list[Diagnostic]:
    """Every problem of the workflow file `path`, errors and warnings, in file order."""
    try:
        return load_workflow(path)[1]
    except WorkflowError as error:
        return error.diagnostics
