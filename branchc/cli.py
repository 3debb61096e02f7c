"""The `branchc` command line.

Each command imports what it needs when it runs: `branchc compile` on a build where nothing changed
loads neither the runtime nor the compiler, and `serve`'s options are made only when it is asked for
(`_Commands`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shlex
import sys
import typing
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape

from . import __version__

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .runtime.errors import ToolPhaseError
    from .runtime.testing import MockClient
    from .viz.trace import TraceRecorder


class _Commands(typer.core.TyperGroup):
    """The command group, with `serve` given its options when it is asked for: they are the fields of
    the serve settings, and reading those loads pydantic-settings, which no other command needs."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name == "serve" and not _SERVE_OPTIONS:
            self.commands["serve"] = _serve_command()
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    cls=_Commands,
    help="Compile, run and serve interactive MCP tools written as Python generators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, soft_wrap=True)


class CliError(Exception):
    """A user mistake: printed as one clear message, no traceback."""


def _version(value: bool) -> None:
    if value:
        print(f"branchc {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """branchc: interactive MCP tools as portable, resumable generators."""


def _load_responses(path: Path) -> MockClient:
    """The scripted answers, read within the input limits (runtime/inputs.py): no anchors or aliases."""
    from pydantic import BaseModel, ConfigDict, ValidationError

    from .runtime.client import ElicitAnswer
    from .runtime.errors import format_validation_errors
    from .runtime.inputs import InputError, parse_yaml, read_text
    from .runtime.messages import SampleResult
    from .runtime.testing import MockClient
    from .runtime.toolcalls import ToolResult

    class _Responses(BaseModel):
        """The scripted answers file of `branchc run --responses`."""

        model_config = ConfigDict(extra="forbid")

        sample: list[str | SampleResult] = []
        elicit: list[ElicitAnswer] = []
        tools: list[str | ToolResult] = []  # results of tool calls the run makes elsewhere (upstream), in order

    try:
        data = parse_yaml(read_text(path), str(path)) or {}
    except InputError as error:
        raise CliError(str(error)) from None
    try:
        script = _Responses.model_validate(data)
    except ValidationError as error:
        lines = "\n".join(f"  {line}" for line in format_validation_errors(error))
        raise CliError(
            f"{path}: the scripted answers do not fit; expected `sample:` (a list of texts) and "
            f"`elicit:` (a list of {{action, content}}) and perhaps `tools:` (a list of tool results):\n{lines}"
        ) from None
    return MockClient(script.sample, script.elicit, tool_responses=script.tools)


def _parse_params(text: str) -> Any:
    """The tool's arguments, read within the input limits (runtime/inputs.py)."""
    from .runtime.inputs import InputError, parse_json

    try:
        return parse_json(text, "--params")
    except InputError as error:
        raise CliError(str(error)) from None


def _phase_location(error: ToolPhaseError) -> str:
    """file:line of the innermost frame outside branchc, where the user's code failed."""
    package = Path(__file__).resolve().parent
    place = ""
    traceback = error.error.__traceback__
    while traceback is not None:
        filename = Path(traceback.tb_frame.f_code.co_filename).resolve()
        if package not in filename.parents:
            place = f"{traceback.tb_frame.f_code.co_filename}:{traceback.tb_lineno}"
        traceback = traceback.tb_next
    return place


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="A Python file that defines the tool.")],
    tool_name: Annotated[
        str | None, typer.Argument(metavar="TOOL", help="The tool's name (optional if only one).")
    ] = None,
    params: Annotated[str, typer.Option("--params", "-p", help="The tool's arguments as JSON.")] = "{}",
    responses: Annotated[
        Path | None, typer.Option("--responses", "-r", help="YAML file of scripted sample and elicit answers.")
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Answer each sample and elicit yourself.")
    ] = False,
    call_id: Annotated[str, typer.Option(help="The tool call id (elicit exchanges use it).")] = "1",
    max_depth: Annotated[int | None, typer.Option(help="Runtime policy: deepest branch nesting.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Runtime policy: token budget.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Runtime policy: seconds for the client phase.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the result.")] = False,
    trace: Annotated[
        Path | None,
        typer.Option("--trace", metavar="FILE", help="Record every step as JSON, for `branchc graph --trace`."),
    ] = None,
    in_memory: Annotated[
        bool,
        typer.Option(
            "--in-memory", help="Run the source as written, in memory: no compiling, no saving at each suspension."
        ),
    ] = False,
    executor: Annotated[
        str,
        typer.Option(
            help="Where branch steps run, as `serve --executor` takes it: inline, process, process:N or "
            "dask://HOST:PORT."
        ),
    ] = "inline",
) -> None:
    """Run a tool: before -> client -> after, with scripted or typed answers.

    The tool runs compiled, as `serve` runs it, and at every suspension the run is saved as JSON and
    continued from it, so what cannot travel between rounds fails here too (--in-memory: not so).
    The timeline goes to stderr, the result (JSON) to stdout.
    """
    import anyio

    from .continuation.errors import NotSerializableError
    from .executors import ExecutorSpecError, open_executor, parse_executor
    from .runtime import Limits, run_tool
    from .runtime.compiled import load_compiled_tool, load_compiled_tools
    from .runtime.console import ConsoleClient
    from .runtime.errors import BranchcError, ToolPhaseError
    from .runtime.loader import load_tool, load_tools
    from .runtime.runstate import RunStateError
    from .viz import TimelinePrinter
    from .viz.trace import TraceRecorder

    recorder: TraceRecorder | None = None
    pool = None
    try:
        if trace is not None and not trace.resolve().parent.is_dir():
            raise CliError(f"--trace {trace}: no folder {trace.resolve().parent} to write it in")
        if interactive == (responses is not None):
            raise CliError("give exactly one of --responses FILE (scripted answers) or --interactive")
        try:
            spec = parse_executor(executor)
        except ExecutorSpecError as error:
            raise CliError(f"--executor {error}") from None
        if spec.kind != "inline" and in_memory:
            raise CliError(
                "--executor runs branch steps as snapshots elsewhere: it needs the tool compiled, so drop --in-memory"
            )
        tools = None  # the tools ctx.call_tool(name) reaches: the file's
        if file.suffix in (".yaml", ".yml"):  # a workflow: always compiled (its tool module is generated)
            from .workflows import load_workflow_tool

            tool = load_workflow_tool(file, warn=lambda diagnostic: _print_diagnostics([diagnostic]))
        elif in_memory:
            tool = load_tool(file, tool_name)
            tools = load_tools(file)
        else:
            tool = load_compiled_tool(file, tool_name, warn=lambda diagnostic: _print_diagnostics([diagnostic]))
            tools = load_compiled_tools(file)
        arguments = _parse_params(params)
        client = ConsoleClient(err) if interactive else _load_responses(responses)
        limits = Limits(max_depth=max_depth, max_tokens=max_tokens, timeout=timeout)
        observers = [] if quiet else [TimelinePrinter(err)]
        if trace is not None:
            recorder = TraceRecorder(file.resolve(), getattr(tool.client_fn, "__qualname__", None))
            observers.append(recorder)

        def on_event(event: dict) -> None:
            for observer in observers:
                observer(event)

        try:
            pool = open_executor(spec)
        except ExecutorSpecError as error:
            raise CliError(f"--executor {spec}: {error}") from None
        result = anyio.run(
            lambda: run_tool(
                tool,
                arguments,
                client,
                limits=limits,
                call_id=call_id,
                on_event=on_event if observers else None,
                portable=not in_memory,
                executor=pool,
                tools=tools,
            )
        )
    except ToolPhaseError as error:
        place = _phase_location(error)
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        if place:
            err.print(f"  [dim]at {escape(place)}[/]")
        _write_trace(recorder, trace, error=str(error))
        raise typer.Exit(1) from None
    except (NotSerializableError, RunStateError) as error:
        text = f"{type(error).__name__}: {error}"  # as the 2026-07-28 era reports it
        err.print(f"[red bold]error:[/] {escape(text)}")
        err.print(
            "  [dim]hint: branchc run saves the run at every suspension, as serve does between rounds; "
            "--in-memory runs it without saving[/]"
        )
        _write_trace(recorder, trace, error=text)
        raise typer.Exit(1) from None
    except (CliError, BranchcError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        _write_trace(recorder, trace, error=str(error))
        raise typer.Exit(1) from None
    finally:
        if pool is not None:
            pool.shutdown()
    _write_trace(recorder, trace, result=result)
    print(json.dumps(result, indent=2, ensure_ascii=False))


def _write_trace(recorder: TraceRecorder | None, path: Path | None, **outcome: Any) -> None:
    if recorder is None or path is None:
        return
    recorder.write(path, **outcome)
    err.print(f"[dim]trace of {len(recorder.events)} events written to {escape(str(path))}[/]")


def _print_diagnostics(diagnostics) -> None:
    for diagnostic in diagnostics:
        color = "red" if diagnostic.severity == "error" else "yellow"
        head = f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}"
        err.print(f"[bold]{escape(head)}:[/] [{color}]{diagnostic.severity}:[/] {escape(diagnostic.message)}")
        if diagnostic.hint:
            err.print(f"  [dim]hint:[/] {escape(diagnostic.hint)}")


@app.command()
def check(
    sources: Annotated[list[Path], typer.Argument(help="Files or folders (searched recursively).")],
) -> None:
    """Report what the compiler, or `serve` when it loads the tools, would refuse, compiler style; exit 1
    when there are errors. Once the sources compile, their tool modules are imported, as `serve` does."""
    from .splitter.build import check as check_sources
    from .workflows import check_workflow, find_workflows

    try:
        workflows = [file for source in sources for file in find_workflows(source)]
        diagnostics = [found for file in workflows for found in check_workflow(file)]
        diagnostics += check_sources([source for source in sources if source.suffix not in (".yaml", ".yml")])
    except FileNotFoundError as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from None
    if not any(d.severity == "error" for d in diagnostics):
        diagnostics += _load_diagnostics(sources)
    _print_diagnostics(diagnostics)
    errors = sum(d.severity == "error" for d in diagnostics)
    if errors:
        err.print(f"[red]{errors} error(s)[/]")
        raise typer.Exit(1)
    warnings = len(diagnostics) - errors
    err.print(f"no errors{f', {warnings} warning(s)' if warnings else ''}")


def _load_diagnostics(sources: list[Path]) -> list[Any]:
    """What `branchc serve SOURCE` would refuse when it loads each source's tools (an import that fails,
    two tools of one name, an elicitation form MCP cannot express; a tool named like guided mode's
    resume tool as a warning). Each source is loaded on its own, as a server of it would: importing runs
    the tool modules' top-level code. Afterwards the source's own modules are forgotten (the next source's
    may have the same names); what they imported from elsewhere (the standard library, third-party
    packages, C extensions) stays imported, as it would in a server."""
    from .bridge.loading import served_tools
    from .runtime.errors import BranchcError
    from .splitter.diagnostics import Diagnostic

    found: list[Any] = []
    for source in sources:
        modules, path = set(sys.modules), list(sys.path)
        try:
            _, problems = served_tools(source, checking=True, warn=None)
        except BranchcError as error:  # nothing to load: reported as the path's own error
            found.append(Diagnostic(str(source), 1, 1, "error", str(error)))
            continue
        finally:  # the next source's modules may have the same names
            for name in _own_modules(source, set(sys.modules) - modules):
                del sys.modules[name]
            sys.path[:] = path
        found += [Diagnostic(p.path, p.line, p.column, p.severity, p.message, p.hint) for p in problems]
    return found


def _own_modules(source: Path, names: set[str]) -> list[str]:
    """Of the modules `names`, imported while `source` was loaded, those of the source itself: the modules
    of its build (by name, per its branchc.json) and any whose file lies under the source (not in a
    site-packages folder there), its build or the cache folder."""
    from .splitter.build import MANIFEST, cache_root, sources_build

    build = source if source.is_dir() and (source / MANIFEST).is_file() else sources_build(source)
    try:
        built = set(json.loads((build / MANIFEST).read_text())["modules"])
    except (OSError, ValueError, KeyError, TypeError):
        built = set()
    sources, folders = source.resolve(), [build.resolve(), cache_root().resolve()]

    def under(file: Any) -> bool:
        if not isinstance(file, str) or not file:
            return False
        where = Path(file).resolve()
        if any(where == folder or folder in where.parents for folder in folders):
            return True
        if where != sources and sources not in where.parents:
            return False
        return not {"site-packages", "dist-packages"} & set(where.relative_to(sources).parts)

    def own(name: str) -> bool:
        module = sys.modules.get(name)
        if name in built:
            return True
        if module is None:
            return False
        spec = getattr(module, "__spec__", None)
        files = [getattr(module, "__file__", None), getattr(spec, "origin", None)]
        paths = getattr(module, "__path__", None)
        try:
            files += list(paths) if paths is not None else []
        except TypeError:
            pass
        return any(under(file) for file in files)

    return [name for name in names if own(name)]


@app.command(name="compile")
def compile_(
    sources: Annotated[list[Path], typer.Argument(help="Files or folders (searched recursively).")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Folder for the compiled modules and branchc.json: a new or empty folder, or a build. "
            "Default: build/ beside the sources (in the folder holding the first source; ./build for . itself).",
        ),
    ] = None,
) -> None:
    """Compile tools into importable modules in OUT, plus the manifest OUT/branchc.json.

    OUT is the compiler's own: it is refused when it holds files but no branchc.json, and after each
    build it holds exactly the modules of the manifest (a module whose source is gone is removed).
    `serve`, `run` and `graph` given the same sources use the default folder's build."""
    from .splitter.build import BuildError, build, default_build_folder

    interactive = err.is_terminal
    defaulted = out is None
    try:
        if out is None:
            out = default_build_folder(sources)
        if interactive:
            with _compile_progress() as progress:
                result = build(sources, out, progress=progress)
        else:
            result = build(sources, out)
    except (FileNotFoundError, BuildError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        if defaulted and out is not None and out.is_dir() and not (out / "branchc.json").is_file():
            err.print(f"  [dim]hint: {escape(str(out))} is the default build folder; choose another with -o FOLDER[/]")
        raise typer.Exit(1) from None
    _print_diagnostics(result.diagnostics)
    if result.errors:
        err.print(f"[red]{len(result.errors)} error(s)[/]")
        raise typer.Exit(1)
    shown = _shown_path(out)
    err.print(
        f"compiled {len(result.compiled)} module(s), {len(result.cached)} unchanged, into {escape(shown)} "
        f"(serve it: branchc serve {escape(shlex.quote(shown))})"
    )


@contextlib.contextmanager
def _compile_progress() -> Iterator[typing.Callable[[int, int, str], None]]:
    """`build`'s progress callback for a terminal: a bar, shown from the first module compiled (a build
    with nothing to compile shows none, nor imports rich.progress)."""
    shown: list[Any] = []  # the bar and its task, once shown

    def progress(done: int, total: int, path: str) -> None:
        if not shown:
            from rich.progress import Progress

            bar = Progress(console=err, transient=True, auto_refresh=False)  # no thread: build may fork
            bar.start()
            shown[:] = [bar, bar.add_task("compiling", total=None)]
        bar, task = shown
        bar.update(task, completed=done, total=total, description=f"compiling {path}", refresh=True)

    try:
        yield progress
    finally:
        if shown:
            shown[0].stop()


def _shown_path(path: Path) -> str:
    """`path` as a user would type it here: relative to the current folder when inside it, else absolute."""
    where, here = Path(os.path.abspath(path)), Path(os.path.abspath(os.getcwd()))
    try:
        return str(where.relative_to(here)) if where != here else "."
    except ValueError:
        return str(where)


class GraphFormat(StrEnum):
    dot = "dot"
    mermaid = "mermaid"
    svg = "svg"
    png = "png"
    html = "html"


@app.command()
def graph(
    path: Annotated[Path, typer.Argument(help="Tool sources (a file or a folder) or a build folder.")],
    tool_name: Annotated[str | None, typer.Option("--tool", "-t", metavar="NAME", help="The tool to draw.")] = None,
    function: Annotated[
        str | None, typer.Option("--function", "-f", metavar="QUALNAME", help="Draw one compiled function instead.")
    ] = None,
    fmt: Annotated[GraphFormat | None, typer.Option("--format", help="Default: from -o's suffix, else dot.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", metavar="FILE", help="Overlay a run recorded by `branchc run --trace`.")
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option("--run", metavar="ID", help="Overlay a stored run's path (its history) and where it waits."),
    ] = None,
    store_url: StoreOption = None,
    state_key: StateKeyOption = None,
) -> None:
    """Draw the split graph of a tool or resumable function: phases, states, suspensions, what each carries."""
    from .viz.graph import GraphError, load_manifest, overlay_history, overlay_trace, split_graph
    from .viz.render import RenderError, render
    from .viz.trace import TraceError, read_trace

    suffix = output.suffix.lower().lstrip(".") if output else ""
    if fmt is None:
        fmt = _SUFFIX_FORMATS.get(suffix, GraphFormat.dot)
    try:
        if tool_name is not None and function is not None:
            raise CliError("give --tool NAME or --function QUALNAME, not both")
        if run_id is not None and trace is not None:
            raise CliError("give --trace FILE or --run ID, not both")
        stored = _stored_path(run_id, store_url, state_key) if run_id is not None else None
        if stored is not None and tool_name is None and function is None:
            tool_name = stored[0]
        if path.suffix in (".yaml", ".yml") and function is None and trace is None and tool_name is None:
            from .viz.workflow import workflow_graph

            drawn = workflow_graph(path)
        else:
            if path.suffix in (".yaml", ".yml"):  # its generated tool's split graph (and a trace on it)
                from .workflows import workflow_build

                path = workflow_build(path)
            drawn = split_graph(load_manifest(path), tool=tool_name, function=function)
        if trace is not None:
            overlay_trace(drawn, read_trace(trace))
        if stored is not None:
            overlay_history(drawn, *stored)
        data = render(drawn, fmt.value)
    except (CliError, GraphError, RenderError, TraceError, ValueError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from None
    if output is None:
        if fmt is GraphFormat.png:
            err.print("[red bold]error:[/] PNG is binary: give -o FILE.png")
            raise typer.Exit(1)
        sys.stdout.write(data.decode())
        return
    if suffix == "md" and fmt is GraphFormat.mermaid:  # Markdown renders a fenced block as the diagram
        data = b"```mermaid\n" + data + b"```\n"
    try:
        output.write_bytes(data)
    except OSError as error:
        err.print(f"[red bold]error:[/] -o {escape(str(output))}: cannot write it: {escape(error.strerror or '')}")
        raise typer.Exit(1) from None
    err.print(f"wrote {escape(str(output))} ({fmt.value}, {drawn.number_of_nodes()} nodes)")


def _stored_path(run_id: str, store_url: str | None, state_key: str | None) -> tuple[str, str, list[dict]]:
    """(tool, status, history) of the stored run `run_id`, for `graph --run`."""
    from .bridge.runs import describe_history, find_run

    with _runs_store(store_url, state_key) as store:
        record = find_run(store, run_id)
        return record.tool, record.status, describe_history(store, record.run_id)


_SUFFIX_FORMATS = {
    **{f.value: f for f in GraphFormat},
    "gv": GraphFormat.dot,
    "mmd": GraphFormat.mermaid,
    "md": GraphFormat.mermaid,
    "htm": GraphFormat.html,
}


_REPEATED = frozenset({"upstream"})  # settings whose flag is given once per value, not as one comma list


def _settings_options(model: type[BaseModel], panels: dict[str, str]) -> list[inspect.Parameter]:
    """One option per field of `model` (`--state-ttl` for `state_ttl`), its docstring as help, None unless
    given: what a user did not give comes from the environment (`BRANCHC_STATE_TTL`) or the default, as the
    settings read it."""
    from pydantic import SecretStr

    options = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if type(None) in typing.get_args(kind):  # X | None
            kind = next(t for t in typing.get_args(kind) if t is not type(None))
        if typing.get_origin(kind) is Literal:
            kind = StrEnum(name.title().replace("_", ""), {value: value for value in typing.get_args(kind)})
        elif name in _REPEATED:
            kind = list[str]  # the flag given once per value
        elif kind is SecretStr or typing.get_origin(kind) is list or typing.get_origin(kind) is Annotated:
            kind = str
        default = field.default
        shown = str(default.value if isinstance(default, StrEnum) else default)
        flag = f"--{name.replace('_', '-')}"
        option = typer.Option(
            flag,
            help=escape(f"{field.description} [env: BRANCHC_{name.upper()}]"),
            show_default=shown if default not in (None, False, []) else False,
            rich_help_panel=panels.get(name),
        )
        annotation = Annotated[kind | None, option]  # type: ignore[valid-type]
        options.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return options


def _serve(path: Path, **given: Any) -> None:
    """Serve the tools in PATH to MCP clients, in both protocol eras; workflows (.yaml) also as guided tools.
    Every option is also an environment variable (`BRANCHC_STATE_KEY` for --state-key)."""
    from .bridge.serving import serve
    from .bridge.settings import ServeSettings
    from .runtime.errors import BranchcError

    try:
        serve(path, ServeSettings.load(**{name: value for name, value in given.items() if value not in (None, [])}))
    except (BranchcError, ValueError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from None


_SERVE_PATH = inspect.Parameter(
    "path",
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    annotation=Annotated[Path, typer.Argument(help="Tool sources and workflows (a file or a folder), or a build.")],
)
_SERVE_OPTIONS: list[inspect.Parameter] = []  # one per serve setting, made by the first `_serve_command`


def _serve_takes(parameters: list[inspect.Parameter]) -> None:
    _serve.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    _serve.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}


def _serve_command() -> Any:
    """The `serve` command with all its options, for `_Commands`."""
    from .bridge.settings import PANELS, ServeSettings

    _SERVE_OPTIONS[:] = _settings_options(ServeSettings, PANELS)
    _serve_takes([_SERVE_PATH, *_SERVE_OPTIONS])
    return typer.main.get_command_from_info(
        _SERVE, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
    )


_serve_takes([_SERVE_PATH])  # in its place among the commands; the options come when it is asked for
app.command(name="serve")(_serve)
_SERVE = app.registered_commands[-1]


# -- branchc runs: the runs a store holds (bridge/runs.py) ---------------------------------------------------

runs_app = typer.Typer(
    help="Look at, continue and end the runs a store holds (`branchc serve --store`): list, show, resume, cancel, gc, "
    "rekey.",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="BRANCHC_STORE",
        metavar="URL",
        help="sqlite:///runs.db, redis://HOST:PORT/0 or postgresql://USER@HOST:PORT/DB. Default: the store "
        "`branchc serve --http` uses, runs.db in "
        "$BRANCHC_STATE_DIR (~/.local/state/branchc).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts) instead of tables.")]
StateKeyOption = Annotated[
    str | None,
    typer.Option(
        "--state-key",
        envvar="BRANCHC_STATE_KEY",
        metavar="KEY[,KEY...]",
        help="The key(s) the store's runs are sealed with, as `branchc serve` was given them (comma-separated, the "
        "sealing one first). Default: the key kept in $BRANCHC_STATE_DIR/state.key.",
        show_default=False,
    ),
]
ToolsOption = Annotated[
    Path,
    typer.Option(
        "--tools",
        metavar="PATH",
        help="The tools the run was served with: sources or a build folder, as `branchc serve PATH` takes them. "
        "Only this code is loaded (never a path a record names); a run saved by other code is refused.",
    ),
]


@contextlib.contextmanager
def _runs_store(url: str | None, state_key: str | None = None) -> Iterator[Any]:
    """The store, its runs opened with the state key(s), closed afterwards; every failure is one line on stderr
    and exit 1."""
    from .bridge.durable import state_dir
    from .bridge.runs import open_runs_store
    from .runtime.errors import BranchcError
    from .store.keys import state_keys

    store = None
    try:
        store = open_runs_store(url, state_keys(state_key, state_dir()))
        yield store
    except (BranchcError, CliError, OSError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from None
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()


def _span(seconds: float) -> str:
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{sign}{seconds / size:.0f}{unit}" if seconds >= 10 * size else f"{sign}{seconds / size:.1f}{unit}"
    return f"{sign}{seconds:.0f}s"


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


@runs_app.command("list")
def runs_list(
    store_url: StoreOption = None,
    status: Annotated[str | None, typer.Option("--status", help="Only runs of this status (waiting, done...).")] = None,
    tool_name: Annotated[str | None, typer.Option("--tool", help="Only runs of this tool.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most runs shown, latest first.")] = 50,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """The runs in the store, latest first: tool, the build that saved it (its code hash), owner, era, status, age,
    where each branch waits (function, line and point), what it asks."""
    import time

    from rich.table import Table

    from .bridge.runs import describe
    from .store import STATUSES

    with _runs_store(store_url, state_key) as store:
        if status is not None and status not in STATUSES:
            raise CliError(f"--status {status}: a run's status is one of {', '.join(STATUSES)}")
        records = store.list(status=status, tool=tool_name, limit=limit)
    now = time.time()
    if as_json:
        _print_json([describe(record, now) for record in records])
        return
    if not records:
        err.print(f"no runs in {escape(store.url)}{' of that kind' if status or tool_name else ''}")
        return
    table = Table(title=f"runs in {escape(store.url)}", title_justify="left")
    for column in ("run", "tool", "build", "owner", "era", "status", "age", "expires in", "waits at", "pending"):
        table.add_column(column, overflow="fold")
    for record in records:
        waits = "\n".join(
            f"{w.function}:{w.line}"
            + (f" {escape(w.point)}" if w.point else "")
            + (f" [dim]({w.branch})[/]" if w.branch != "0" else "")
            for w in record.meta.waits
        )
        pending = "\n".join(f"{p.get('kind', '?')}: {escape(str(p.get('summary', '')))}" for p in record.meta.pending)
        table.add_row(
            record.run_id[:12],
            escape(record.tool),
            record.meta.code_hash[:8] or "[dim]-[/]",
            escape(record.owner) if record.owner is not None else "[dim]-[/]",
            escape(record.meta.era),
            record.status,
            _span(now - record.created),
            _span(record.expires - now),
            waits,
            pending,
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id, or a unique start of one.")],
    store_url: StoreOption = None,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """Everything about one run: its metadata, where each branch waits (with the source line), its requests."""
    from .bridge.runs import describe, find_run

    with _runs_store(store_url, state_key) as store:
        data = describe(find_run(store, run_id), sources=True)
    if as_json:
        _print_json(data)
        return
    out = Console(soft_wrap=True)
    out.print(f"[bold]run {escape(data['run_id'])}[/]")
    for label, key in (("tool", "tool"), ("owner", "owner"), ("status", "status"), ("era", "era"), ("build", "build")):
        out.print(f"  {label + ':':10} {escape(str(data[key]) if data[key] is not None else '-')}")
    out.print(
        f"  {'age:':10} {_span(data['age'])} (updated {_span(data['age'] - (data['updated'] - data['created']))} ago)"
    )
    out.print(f"  {'expires:':10} in {_span(data['expires_in'])}")
    out.print(
        f"  {'saved:':10} {data['saved_bytes']} bytes, run format {data['run_format']}, version {data['version']}"
    )
    out.print(f"  {'code hash:':10} {escape(data['code_hash'])}")
    extra = {k: v for k, v in data["extra"].items() if k not in ("build", "tool")}
    if extra:
        out.print(f"  {'extra:':10} {escape(json.dumps(extra, ensure_ascii=False))}")
    out.print("[bold]waits[/]" if data["waits"] else "[bold]waits[/] none")
    for wait in data["waits"]:
        out.print(
            f"  branch {escape(wait['branch'])}: {escape(wait['function'])} at {escape(wait['file'])}:{wait['line']}"
        )
        if wait["source"] is not None:
            out.print(f"    [dim]{wait['line']:>5} |[/] {escape(wait['source'])}")
    out.print("[bold]pending[/]" if data["pending"] else "[bold]pending[/] none")
    for request in data["pending"]:
        out.print(
            f"  {escape(str(request.get('key')))} ({escape(str(request.get('kind')))}, branch "
            f"{escape(str(request.get('branch')))}): {escape(str(request.get('summary', '')))}"
        )


@runs_app.command("history")
def runs_history(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id, or a unique start of one.")],
    store_url: StoreOption = None,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """A run's past checkpoints, oldest first: K (what `runs fork --at` takes), when, where it waited (point),
    what it asked, and the answers that moved it on, who gave them and when."""
    import time

    from rich.table import Table

    from .bridge.runs import describe_history, find_run

    with _runs_store(store_url, state_key) as store:
        ident = find_run(store, run_id).run_id
        entries = describe_history(store, ident)
    if as_json:
        _print_json(entries)
        return
    if not entries:
        err.print(f"run {escape(ident)} keeps no checkpoints (the store keeps none: history=0, or it never waited)")
        return
    now = time.time()
    table = Table(title=f"history of run {escape(ident)}", title_justify="left")
    for column in ("K", "when", "waited at", "asked", "answered", "by"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        waits = "\n".join(escape(w.get("point") or f"{w['function']}:{w['line']}") for w in entry["waits"])
        asked = "\n".join(f"{p.get('kind', '?')}: {escape(str(p.get('summary', '')))}" for p in entry["asked"])
        answers = entry["answers"]
        answered = (
            "[dim]waits here[/]" if answers is None else escape(_clipped(json.dumps(answers, ensure_ascii=False)))
        )
        if entry["forked_from"]:
            waits += f"\n[dim](fork of {escape(entry['forked_from']['run'][:12])} at {entry['forked_from']['k']})[/]"
        table.add_row(
            str(entry["k"]),
            f"{_span(now - entry['at'])} ago",
            waits,
            asked,
            answered,
            escape(entry["answered_by"] or "-"),
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _clipped(text: str, most: int = 120) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


@runs_app.command("fork")
def runs_fork(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id, or a unique start of one.")],
    at: Annotated[int, typer.Option("--at", min=0, metavar="K", help="The checkpoint, as `runs history` lists it.")],
    store_url: StoreOption = None,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """A new run (new id, same owner) waiting where the run waited at checkpoint K, made from that checkpoint
    (nothing is replayed; the run itself is untouched). It continues like any waiting run: `branchc runs resume
    NEW --tools PATH --responses FILE` or `--interactive`. Prints the new id."""
    from .bridge.runs import fork_run

    with _runs_store(store_url, state_key) as store:
        record = fork_run(store, run_id, at)
    if as_json:
        _print_json({"run_id": record.run_id, "forked_from": record.meta.extra.get("forked_from")})
        return
    print(record.run_id)


ForceOption = Annotated[
    bool,
    typer.Option(
        "--force", help="Also take a run held by a process on another host (which cannot be checked from here)."
    ),
]


@runs_app.command("resume")
def runs_resume(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id, or a unique start of one.")],
    tools_path: ToolsOption,
    responses: Annotated[
        Path | None,
        typer.Option("--responses", "-r", help="YAML file of scripted answers to what the run asks from here on."),
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Answer each sample and elicit yourself.")
    ] = False,
    store_url: StoreOption = None,
    force: ForceOption = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the result.")] = False,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """Continue a waiting run here, to its end: what it waits for is asked on the terminal (--interactive) or
    answered from a responses file; then after() runs and the result (JSON) goes to stdout. The run is written
    down at each suspension, so a resume that is killed can be resumed again. Needs the tools it was served
    with (--tools: the same sources or build)."""
    import anyio

    from .bridge.results import describe_failure
    from .bridge.runs import load_tools, resume_run
    from .runtime.console import ConsoleClient
    from .viz import TimelinePrinter

    with _runs_store(store_url, state_key) as store:
        if interactive == (responses is not None):
            raise CliError("give exactly one of --responses FILE (scripted answers) or --interactive")
        client = ConsoleClient(err) if interactive else _load_responses(responses)
        observer = None if quiet else TimelinePrinter(err)
        tools = load_tools(tools_path)
        done = anyio.run(lambda: resume_run(store, run_id, client, tools, force=force, on_event=observer))
    ident = done.record.run_id if done.record is not None else run_id.strip()
    if done.error is not None:
        text = describe_failure(done.error)
        if as_json:
            _print_json({"run_id": ident, "status": done.record and done.record.status, "error": text})
        err.print(f"[red bold]error:[/] {escape(text)}")
        raise typer.Exit(1)
    if as_json:
        _print_json({"run_id": ident, "status": "done", "result": done.result})
        return
    err.print(f"[dim]run {escape(ident)} done[/]")
    print(json.dumps(done.result, indent=2, ensure_ascii=False))


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="A run id, or a unique start of one.")],
    tools_path: ToolsOption,
    store_url: StoreOption = None,
    force: ForceOption = False,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """End a waiting run as a server ends a cancelled call: its finally blocks run once, here; then no
    server continues it. Needs the tools it was served with (--tools: the same sources or build)."""
    from .bridge.runs import cancel_run, load_tools

    with _runs_store(store_url, state_key) as store:
        done = cancel_run(store, run_id, load_tools(tools_path), force=force)
    logs = [list(entry) for entry in done.logs]
    failure = None if done.cleanup_error is None else f"{type(done.cleanup_error).__name__}: {done.cleanup_error}"
    if as_json:
        ident = done.record.run_id if done.record is not None else run_id.strip()
        _print_json(
            {
                "run_id": ident,
                "status": "cancelled",
                "logs": logs,
                "cleanup_error": failure,
                "damaged": done.damaged or None,
            }
        )
    elif done.damaged:
        err.print(f"[yellow]warning:[/] {escape(done.damaged)}")
        err.print(f"deleted the damaged run {escape(run_id.strip())}; its finally blocks could not run")
    else:
        for entry in done.logs:
            if entry[0] == "log":
                err.print(f"[dim]log ({escape(str(entry[1]))}):[/] {escape(str(entry[2]))}")
            else:
                err.print(f"[dim]progress:[/] {escape(str(entry[1]))}")
        err.print(f"cancelled run {escape(done.record.run_id)} ({escape(done.record.tool)})")
    if failure is not None:
        err.print(f"[red bold]error:[/] the run is cancelled, but its cleanup failed: {escape(failure)}")
        raise typer.Exit(1)


@runs_app.command("gc")
def runs_gc(
    tools_path: Annotated[
        Path | None,
        typer.Option(
            "--tools",
            metavar="PATH",
            help="First end the expired waiting runs of these tools (sources or a build folder, as `branchc serve "
            "PATH` takes them): each one's finally blocks run once, here. Runs of other tools, or of another build "
            "whose points these tools cannot take, are left.",
        ),
    ] = None,
    store_url: StoreOption = None,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """Delete the expired runs that have ended; print how many. An expired run that still waits has not run its
    finally blocks: with --tools it is ended here first (once, even while servers sweep too); without, it is left
    (and said so) for a gc with --tools or a server serving its tools. Then drop the kept builds (those a run no
    served build can take finishes on) that no stored run names and no server kept within the hour."""
    from .bridge.expiry import BATCH, Left, Swept, end_expired_runs
    from .bridge.holder import describe_holder, holder
    from .bridge.runs import load_tools
    from .runtime.builds import drop_unused_builds

    with _runs_store(store_url, state_key) as store:
        swept = Swept()
        if tools_path is not None:
            by = f"branchc runs gc ({describe_holder(holder())})"
            swept = end_expired_runs(store, load_tools(tools_path), by=by)
        removed = store.gc()
        if tools_path is None:
            reason = (
                "it expired waiting and its finally blocks have not run: end it with `branchc runs gc --tools PATH` "
                "(the tools it was served with), or serve those tools (a server ends its expired runs)"
            )
            for ident in store.expired(limit=BATCH):
                record = store.load(ident, expired=True)
                swept.left.append(Left(ident, record.tool if record is not None else "", reason))
        dropped = drop_unused_builds(_builds_named(store), store=store.url)
    failures = [done for done in swept.ended if done.cleanup_error is not None]
    if as_json:
        ended = [
            {
                "run_id": done.record.run_id,
                "tool": done.record.tool,
                "logs": [list(entry) for entry in done.logs],
                "cleanup_error": None if done.cleanup_error is None else str(done.cleanup_error),
            }
            for done in swept.ended
        ]
        left = [{"run_id": item.run_id, "tool": item.tool, "reason": item.reason} for item in swept.left]
        _print_json({"removed": removed, "ended": ended, "left": left, "builds_dropped": dropped})
    else:
        for done in swept.ended:
            for entry in done.logs:
                if entry[0] == "log":
                    err.print(f"[dim]log ({escape(str(entry[1]))}):[/] {escape(str(entry[2]))}")
            ran = "its finally blocks ran once" if done.cleanup_error is None else "its cleanup failed"
            err.print(f"ended expired run {escape(done.record.run_id)} ({escape(done.record.tool)}): {ran}")
        for item in swept.left:
            err.print(f"left expired run {escape(item.run_id)} ({escape(item.tool)}): {escape(item.reason)}")
        print(f"removed {removed} expired run(s) from {store.url}")
        if swept.ended:
            print(f"ended {len(swept.ended)} expired waiting run(s)")
        if swept.left:
            print(f"left {len(swept.left)} expired waiting run(s) whose finally blocks have not run (see above)")
        if dropped:
            print(f"dropped {len(dropped)} kept build(s) no stored run names: {', '.join(dropped)}")
    for done in failures:
        failure = f"{type(done.cleanup_error).__name__}: {done.cleanup_error}"
        ident = escape(done.record.run_id)
        err.print(f"[red bold]error:[/] run {ident} ended, but its cleanup failed: {escape(failure)}")
    if failures:
        raise typer.Exit(1)


def _builds_named(store: Any) -> set[str]:
    """The builds the stored runs were saved by, expired ones' included (ending one needs its build)."""
    records = store.list(limit=10**9) + [store.load(ident, expired=True) for ident in store.expired(limit=10**9)]
    return {str(record.meta.extra.get("build")) for record in records if record is not None}


@runs_app.command("migrate")
def runs_migrate(
    to: Annotated[
        Path,
        typer.Option(
            "--to",
            metavar="PATH|BUILD",
            help="The tools to move the waiting runs to: sources or a build, as `branchc serve PATH` takes them, or "
            "the id of a build kept in the cache (as `branchc runs list` shows it).",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would move, and what could not; write nothing.")
    ] = False,
    store_url: StoreOption = None,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """Move the waiting runs another build saved to the build of --to, ahead of their next round, where their points
    allow (or an author's migration does; `branchc compat` tells which). Safe while servers run: each run is a
    compare-and-swap. Exit 1 when a run of these tools cannot move: it is left as it was, and named."""
    import dataclasses

    from rich.table import Table

    from .bridge.runs import load_tools, migrate_runs
    from .runtime.builds import kept_build

    kept = None if to.exists() else kept_build(str(to))
    with _runs_store(store_url, state_key) as store:
        if kept is None:
            done = migrate_runs(store, load_tools(to), dry_run=dry_run)
        else:
            with kept.reading():  # moved to an older build, kept in the cache (runtime/builds.py)
                done = migrate_runs(store, kept.tools, dry_run=dry_run)
    refused = [entry for entry in done if entry.outcome == "refused"]
    if as_json:
        _print_json([dataclasses.asdict(entry) for entry in done])
    elif not done:
        err.print(f"no waiting runs of the tools in {escape(str(to))}")
    else:
        table = Table(title=f"waiting runs -> {escape(str(to))}", title_justify="left")
        for column in ("run", "tool", "outcome", "detail"):
            table.add_column(column, overflow="fold")
        for entry in done:
            table.add_row(entry.run_id[:12], escape(entry.tool), entry.outcome, escape(entry.detail))
        Console(width=None if sys.stdout.isatty() else 200).print(table)
    if refused:
        err.print(f"{len(refused)} run(s) cannot move to this build: write a migration, or keep serving their build")
        raise typer.Exit(1)


@runs_app.command("rekey")
def runs_rekey(store_url: StoreOption = None, as_json: JsonOption = False, state_key: StateKeyOption = None) -> None:
    """Seal every run anew with the first state key (--state-key NEW,OLD), so the old key can then be dropped.
    Safe while servers run: each run is a compare-and-swap that keeps its version. Exit 1 when a run could not
    be opened (sealed with a key not given, or damaged): each is named."""
    with _runs_store(store_url, state_key) as store:
        done = store.rekey()
    refused = [{"run_id": error.run_id, "error": str(error)} for error in done.refused]
    if as_json:
        _print_json({"resealed": done.resealed, "current": done.current, "refused": refused})
    else:
        for error in done.refused:
            err.print(f"[red bold]error:[/] {escape(str(error))}")
        print(
            f"sealed {done.resealed} run(s) anew with the first key in {store.url}; {done.current} already were"
            + (f"; {len(refused)} could not be opened" if refused else "")
        )
    if refused:
        raise typer.Exit(1)


@app.command()
def compat(
    old: Annotated[Path, typer.Argument(help="The build (or the sources) runs were saved by.")],
    new: Annotated[Path | None, typer.Argument(help="The build or sources to deploy. With --against: omitted.")] = None,
    against: Annotated[
        str | None,
        typer.Option("--against", metavar="GIT_REV", help="Compare OLD's sources at this git revision with OLD now."),
    ] = None,
    store_url: Annotated[
        str | None,
        typer.Option("--store", metavar="URL", help="Count the runs waiting at each point in this store."),
    ] = None,
    as_json: JsonOption = False,
    state_key: StateKeyOption = None,
) -> None:
    """Which waiting runs a new build can take: each suspension point of the old build is unchanged, compatible,
    needs a migration, or removed. Exit 1 when a point would strand runs (with --store: a point where runs wait)."""
    from rich.table import Table

    from .splitter.build import BuildError
    from .splitter.compat import STRANDING, compare, with_waiting
    from .splitter.manifests import manifest_at, manifest_of

    try:
        if (new is None) == (against is None):
            raise CliError("give OLD and NEW, or one source path and --against GIT_REV")
        if against is not None:
            before, after = manifest_at(old, against), manifest_of(old)
        else:
            before, after = manifest_of(old), manifest_of(new)
    except (BuildError, CliError, OSError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from None
    lines = compare(before, after)
    if store_url is not None:
        from .runtime.builds import kept_builds

        with _runs_store(store_url, state_key) as store:
            records = store.list(status="waiting", limit=10**9)
        here = kept_builds()  # a run whose own build is kept here finishes on it (runtime/builds.py)
        waits = [
            (r.tool, w.function, w.point, str(r.meta.extra.get("build")) in here) for r in records for w in r.meta.waits
        ]
        lines = with_waiting(lines, [w[:3] for w in waits], [w[:3] for w in waits if w[3]])
    stranded = [
        line
        for line in lines
        if line.verdict in STRANDING
        and line.migration is None
        and (store_url is None or (line.waiting or 0) > (line.kept or 0))
    ]
    if as_json:
        _print_json({"points": [line.as_json() for line in lines], "stranded": len(stranded)})
    else:
        table = Table(title="suspension points, old build -> new", title_justify="left")
        counts = ["waiting", "on a kept build"] if store_url else []
        for column in ("tool", "function", "point", "verdict", *counts, "detail"):
            table.add_column(column, overflow="fold")
        colours = {"unchanged": "dim", "compatible": "green", "needs a migration": "yellow", "removed": "red"}
        for line in lines:
            verdict = f"[{colours.get(line.verdict, 'cyan')}]{line.verdict}[/]"
            waiting = [str(line.waiting or 0), str(line.kept or 0)] if store_url else []
            table.add_row(
                escape(line.tool or "-"), escape(f"{line.module}:{line.function}"), escape(line.point), verdict,
                *waiting, escape(line.detail),
            )  # fmt: skip
        Console(width=None if sys.stdout.isatty() else 200).print(table)
    if stranded:
        err.print(
            f"{len(stranded)} point(s) would strand runs: write a migration, or keep the old build (a server keeps "
            f"each build it serves, and finishes its runs on it, until `branchc runs gc` drops it)"
        )
        raise typer.Exit(1)


@app.command("console")
def console_(
    store_url: StoreOption = None,
    http: Annotated[str, typer.Option("--http", metavar="HOST:PORT", help="Where to serve it.")] = "127.0.0.1:8766",
    tools_path: Annotated[
        Path | None,
        typer.Option(
            "--tools",
            metavar="PATH",
            help="The tools the runs were served with (sources or a build folder): cancelling a run runs their "
            "finally blocks. Without it, cancel is shown disabled.",
        ),
    ] = None,
    auth_tokens: Annotated[
        Path | None, typer.Option("--auth-tokens", metavar="FILE", help="Sign in with a token of this file (as serve).")
    ] = None,
    auth_jwks: Annotated[
        str | None, typer.Option("--auth-jwks", metavar="URL", help="Sign in with JWTs (as serve).")
    ] = None,
    auth_issuer: Annotated[str | None, typer.Option("--auth-issuer", metavar="ISS", help="With --auth-jwks.")] = None,
    auth_audience: Annotated[
        str | None, typer.Option("--auth-audience", metavar="AUD", help="With --auth-jwks.")
    ] = None,
    operators: Annotated[
        str | None,
        typer.Option(
            "--operators", envvar="BRANCHC_OPERATORS", metavar="P1,P2", help="Principals who see and act on every run."
        ),
    ] = None,
    allowed_hosts: Annotated[
        str | None, typer.Option("--allowed-hosts", metavar="HOSTS", help="Host values requests may name (as serve).")
    ] = None,
    state_key: StateKeyOption = None,
) -> None:
    """The runs console in a browser: the runs in the store (filter by tool, status, owner, age, build), each with
    its split graph and where it waits, its live variables, history and trace id, and cancel and fork; each tool's
    graph with its waiting runs. Each principal sees its own runs, operators all; without auth, loopback only."""
    from .bridge.settings import ServeSettings
    from .console import serve_console
    from .runtime.errors import BranchcError

    given = dict(
        store=store_url, http=http, auth_tokens=auth_tokens, auth_jwks=auth_jwks, auth_issuer=auth_issuer,
        auth_audience=auth_audience, operators=operators, allowed_hosts=allowed_hosts, state_key=state_key,
    )  # fmt: skip
    try:
        serve_console(ServeSettings.load(**{k: v for k, v in given.items() if v is not None}), tools_path)
    except (BranchcError, OSError, ValueError) as error:
        err.print(f"[red bold]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from None


def main() -> None:
    app(prog_name="branchc")
