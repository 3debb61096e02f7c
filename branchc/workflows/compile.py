"""A workflow as the source of a short-form tool: one generator whose `while` loop runs a step per
turn, each step a branch that renders its instruction, yields `ctx.sample` or `ctx.elicit`, saves the
answer and picks the next step. The module is written to the cache and compiled by the splitter like
any tool source, so a workflow's runs snapshot, resume, serve in both eras and draw as graphs exactly
as a Python tool's do: one engine. Its live state at every yield is the saved values and the step id."""

from __future__ import annotations

import hashlib
import json
import os
import pprint
import re
import textwrap
from pathlib import Path
from typing import Any

from ..splitter.build import MANIFEST, build_folder, cache_root
from ..splitter.diagnostics import Diagnostic
from .check import WorkflowError, load_workflow, template_places
from .model import Shape, Step, Workflow, form_class

__all__ = ["find_workflows", "generate_module", "is_workflow_file", "module_name", "workflow_build"]

_PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}
_WORKFLOW_KEY = re.compile(r"^workflow\s*:", re.MULTILINE)


def is_workflow_file(path: Path) -> bool:
    """A .yaml / .yml file with a top-level `workflow:` key (responses files and the like are not)."""
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        with path.open(encoding="utf-8") as handle:
            return bool(_WORKFLOW_KEY.search(handle.read(1 << 16)))
    except (OSError, UnicodeDecodeError):
        return False


def find_workflows(path: str | Path) -> list[Path]:
    """The workflow files at `path`: the file itself, or those under a folder (builds, hidden folders
    and the cache are passed over, as the Python sources' search does)."""
    path = Path(path)
    if path.is_file():
        return [path] if is_workflow_file(path) else []
    found: list[Path] = []
    skipped = os.path.realpath(cache_root())
    for folder, folders, names in os.walk(path):
        folders[:] = [
            name
            for name in folders
            if not name.startswith(".")
            and name != "__pycache__"
            and not os.path.isfile(os.path.join(folder, name, MANIFEST))
            and os.path.realpath(os.path.join(folder, name)) != skipped
        ]
        found += [Path(folder, name) for name in names if is_workflow_file(Path(folder, name))]
    return sorted(found)


def module_name(path: Path, root: Path | None = None) -> str:
    """The generated module's name: `workflow_` and the file's path under `root` (its folder when
    None) without the suffix, as an identifier, so `a/flow.yaml` and `b/flow.yaml` do not clash."""
    relative = path.relative_to(root) if root is not None and root != path else Path(path.name)
    name = "workflow_" + re.sub(r"\W", "_", "__".join(relative.with_suffix("").parts))
    if len(name) > 100:  # a file name's limit is 255 bytes: a deep path keeps its stem and a digest
        digest = hashlib.sha256(str(relative).encode()).hexdigest()[:12]
        name = f"workflow_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)[:60]}_{digest}"
    return name


def _type(shape: Shape | Any, enum: list[Any] | None = None) -> str:
    """The Python annotation of a shape (or a param)."""
    enum = enum if enum is not None else getattr(shape, "enum", None)
    if enum:
        return f"Literal[{', '.join(repr(value) for value in enum)}]"
    if shape.type == "array":
        return f"list[{_type(shape.items) if shape.items is not None else 'Any'}]"
    if shape.type == "object":
        return "dict[str, Any]"
    return _PY_TYPES[shape.type]


def _field(annotation: str, description: str, default: Any, required: bool) -> str:
    """A parameter's annotation (with its description) and default, as the short form reads them."""
    text = f"Annotated[{annotation}, Field(description={description!r})]" if description else annotation
    return text if required else f"{text} = {default!r}"


def _schema(shape: Shape) -> dict[str, Any]:
    """A shape as the JSON Schema the run checks answers against."""
    out: dict[str, Any] = {"type": shape.type}
    for key in ("description", "title", "default", "enum", "required"):
        if getattr(shape, key) not in (None, ""):
            out[key] = getattr(shape, key)
    if shape.items is not None:
        out["items"] = _schema(shape.items)
    if shape.properties is not None:
        out["properties"] = {name: _schema(prop) for name, prop in shape.properties.items()}
    return out


def _form_class(step: Step) -> tuple[str, bool]:
    """The pydantic model of a user step's form, and whether it wraps one value in an `answer` field."""
    name = form_class(step.id)
    shape = step.schema_
    lines = [f"class {name}(BaseModel):", f'    """The form of step {step.id!r}."""', ""]
    if shape is None or shape.type != "object":
        annotation = _type(shape) if shape is not None else "str"
        description = (shape.description if shape is not None else "") or "Your answer"
        lines.append(f"    answer: {annotation} = Field(description={description!r})")
        return "\n".join(lines), True
    required = set(shape.required or ())
    for field, prop in (shape.properties or {}).items():
        args = [] if field in required else [repr(prop.default)]
        if prop.description or prop.title:
            args.append(f"description={(prop.description or prop.title)!r}")
        lines.append(f"    {field}: {_type(prop)} = Field({', '.join(args)})")
    if not shape.properties:
        lines.append("    pass")
    return "\n".join(lines), False


def generate_module(
    workflow: Workflow,
    source: str,
    lines: dict[str, int],
    places: dict[str, list[tuple[int, int]]] | None = None,
) -> str:
    """The Python source of the workflow's tool. `lines`: each step's line in the YAML file; `places`: each
    template line's (line, column) in it (check.template_places), for errors at run time."""
    texts: dict[str, str] = {}
    steps: dict[str, dict[str, Any]] = {}
    forms: list[str] = []
    body: list[str] = []
    requires = sorted({"elicitation" if step.answer_by == "user" else "sampling" for step in workflow.steps})
    order = [step.id for step in workflow.steps]
    for index, step in enumerate(workflow.steps):
        following = order[index + 1] if index + 1 < len(order) else None
        texts[f"{step.id}.instruction"] = step.instruction
        if step.system_prompt is not None:
            texts[f"{step.id}.system_prompt"] = step.system_prompt
        if isinstance(step.complete, str):
            texts[f"{step.id}.complete"] = step.complete
        for number, branch in enumerate(step.next if isinstance(step.next, list) else ()):
            if branch.if_ is not None:
                texts[f"{step.id}.next.{number}"] = branch.if_
        keyword = "if" if index == 0 else "elif"
        body.append(f"        {keyword} step == {step.id!r}:  # {Path(source).name}:{lines[step.id]}")
        ask, wrapped, form = _ask(step)
        if form:
            forms.append(form)
        steps[step.id] = {
            "answer_by": step.answer_by,
            "save": step.save,
            "schema": None if step.schema_ is None else _schema(step.schema_),
            "wrapped": wrapped,
            "foreach": step.foreach is not None,
            # whether the answer is used (kept, checked, or the result): guided serving then asks for it
            "uses_answer": step.save is not None or step.schema_ is not None or step.complete is True,
        }
        indent = "            "
        values = "saved"
        if step.foreach is not None:
            body += [
                f"{indent}loop_items = W.items({step.id!r}, {step.foreach.in_!r}, saved)",
                f"{indent}idle = W.idle(step, idle, loop_items)",
                f"{indent}loop_answers = []",
                f"{indent}loop_index = 0",
                f"{indent}while loop_index < len(loop_items):",
            ]
            indent += "    "
            values = (
                f"{{**saved, {step.foreach.as_!r}: loop_items[loop_index], "
                f"'loop': W.loop(loop_index, len(loop_items))}}"
            )
        body.append(f"{indent}question = W.render({step.id!r}, 'instruction', {values})")
        body += [indent + line for line in ask(values)]
        # after each yield the code reads `step`, so the step id is live at every suspension: it is in each
        # snapshot, and guided serving reads it there (runtime.position) to say which step waits
        if step.answer_by == "user":
            body += [
                f"{indent}if not reply.accepted:",
                f"{indent}    return {{'status': reply.action, 'step': step, 'result': None, 'saved': saved}}",
                f"{indent}kept = W.form(step, reply.content)",
            ]
        else:
            body.append(f"{indent}kept = W.answer(step, reply.text)")
        body.append(f"{indent}idle = 0")  # a question was asked: the steps are not going round idle
        if step.foreach is not None:
            body += [f"{indent}loop_answers.append(kept)", f"{indent}loop_index += 1"]
            indent = indent[:-4]
            body.append(f"{indent}kept = loop_answers")
        if step.save:
            body.append(f"{indent}saved[{step.save!r}] = kept")
        body += _goto(step, following, indent)
    form_text = "\n\n\n".join(forms)
    params = []
    for name, param in workflow.params.items():
        annotation = _type(param, param.enum)
        required = param.default is None
        params.append(f"    {name}: {_field(annotation, param.description, param.default, required)},")
    saved_init = "{" + ", ".join(f"{name!r}: {name}" for name in workflow.params) + "}"
    line_table = json.dumps(lines)
    return f'''"""Generated by branchc from the workflow {Path(source).name}: edit the workflow, not this file."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from branchc import Context, tool
from branchc.workflows.runtime import Templates

W = Templates(
    {source!r},
    {line_table},
    {json.dumps(texts, indent=8, ensure_ascii=False)[:-1]}    }},
    steps={textwrap.indent(pprint.pformat(steps, sort_dicts=False, width=100), "    ").lstrip()},
    name={workflow.name!r},
    description={workflow.description!r},
    guidance={workflow.guidance!r},
    places={json.dumps(places or {})},
)
{chr(10) * 2 + form_text + chr(10) if form_text else ""}

@tool({workflow.name!r}, description={workflow.description!r}, requires={set(requires)!r})
def {workflow.name}(
    ctx: Context,
{chr(10).join(params)}
):
    saved = {saved_init}
    step = {order[0]!r}
    idle = 0
    while True:
{chr(10).join(body)}
'''


def _ask(step: Step) -> tuple[Any, bool, str]:
    """(lines that yield the step's question given the template values' expression, whether the form
    wraps one value, the form class's source). Each yield is pinned as the point of its step's id (splitter/
    points.py), so a run waits at a point named after its step whatever the generated code around it."""
    system = f", system_prompt=W.render({step.id!r}, 'system_prompt', saved)" if step.system_prompt else ""
    tokens = f", max_tokens={step.max_tokens}" if step.max_tokens != 1024 else ""
    schema = "" if step.schema_ is None else f" + W.schema_prompt({step.id!r})"
    if step.answer_by == "user":
        form, wrapped = _form_class(step)
        name = form.split("(", 1)[0].removeprefix("class ")
        return (
            lambda values: [
                f"reply = yield ctx.elicit({step.id!r}, message=question, schema={name})  # point: {step.id}"
            ],
            wrapped,
            form,
        )
    if step.answer_by == "sampling":  # an isolated request: this prompt alone, the history untouched
        return (
            lambda values: [
                f"reply = yield ctx.sample(messages=[{{'role': 'user', 'content': question{schema}}}]{system}{tokens})"
                f"  # point: {step.id}"
            ],
            False,
            "",
        )
    return (
        lambda values: [f"reply = yield ctx.sample(prompt=question{schema}{system}{tokens})  # point: {step.id}"],
        False,
        "",
    )


def _goto(step: Step, following: str | None, indent: str) -> list[str]:
    """The lines that pick the next step (or return the result)."""
    if step.complete is not False:
        result = f"W.render({step.id!r}, 'complete', saved)" if isinstance(step.complete, str) else "kept"
        done = [f"return {{'status': 'complete', 'step': {step.id!r}, 'result': {result}, 'saved': saved}}"]
    else:
        done = [f"step = {following!r}"]
    if isinstance(step.next, str):
        return [f"{indent}step = {step.next!r}"]
    if not step.next:
        return [indent + line for line in done]
    out: list[str] = []
    for number, branch in enumerate(step.next):
        if branch.if_ is None:
            if not out:
                return [f"{indent}step = {branch.goto!r}"]
            return [*out, f"{indent}else:", f"{indent}    step = {branch.goto!r}"]
        keyword = "if" if number == 0 else "elif"
        out += [f"{indent}{keyword} W.test({step.id!r}, {number}, saved):", f"{indent}    step = {branch.goto!r}"]
    out.append(f"{indent}else:")
    out += [f"{indent}    {line}" for line in done]
    return out


def _step_lines(path: Path, workflow: Workflow) -> dict[str, int]:
    """Each step's line in the file: its `id:`'s line."""
    text = path.read_text(encoding="utf-8").splitlines()
    lines: dict[str, int] = {}
    for step in workflow.steps:
        pattern = re.compile(rf"^\s*(-\s*)?id\s*:\s*['\"]?{re.escape(step.id)}['\"]?\s*(#.*)?$")
        lines[step.id] = next((number for number, line in enumerate(text, 1) if pattern.match(line)), 1)
    return lines


def generated_folder(path: str | Path) -> Path:
    """The folder (in the cache) holding the generated module of each workflow at `path`; written
    afresh when a workflow changed. WorkflowError lists every problem of the first workflow that fails."""
    path = Path(path)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    folder = cache_root() / "workflows" / f"{path.stem or 'root'}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, Path] = {}
    for file in find_workflows(path):
        workflow, _ = load_workflow(file)
        text = generate_module(
            workflow, str(file.resolve()), _step_lines(file, workflow), template_places(file, workflow)
        )
        target = folder / f"{module_name(file, path if path.is_dir() else None)}.py"
        if (other := wanted.get(target.name)) is not None:
            message = f"its tool module would be named {target.stem}, as {other}'s is"
            raise WorkflowError([Diagnostic(str(file), 1, 1, "error", message, "rename one of the two files")])
        wanted[target.name] = file
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    for stale in folder.glob("*.py"):
        if stale.name not in wanted:
            stale.unlink()
    return folder


def workflow_build(path: str | Path, **warn: Any) -> Path:
    """The build folder of the workflows at `path`: generated into the cache, compiled by the splitter."""
    return build_folder(generated_folder(path), **warn)


def load_workflow_tool(path: str | Path, **warn: Any) -> Any:
    """The tool of the workflow file `path`, compiled (as `branchc run` and `serve` run it)."""
    from ..runtime.compiled import CompiledLoadError, import_build

    loaded = import_build(workflow_build(path, **warn))
    if loaded.errors:
        raise CompiledLoadError(str(loaded.errors[0]))
    if not loaded.tools:
        raise CompiledLoadError(f"{path}: not a workflow file; a workflow file starts with `workflow:`")
    return next(iter(loaded.tools.values()))
