"""CPython's own generator test suites, run against branchc-compiled generators.

For a suite of the installed Python's `test` package (test_yield_from, test_generators,
test_generator_stop), every generator function (a `def` whose own body yields) gets
`@resumable`, directly above its `def`; the module is compiled whole with
`compile_module`, executed as a fresh module, and its tests run with unittest (through
the module's own `load_tests`, so test_generators' doctests are included). Doctest
examples that define generator functions are compiled the same way, each example as a
small module executed in the doctest's globals.

The same runs natively (the untouched source) for the baseline, each run in a
subprocess of its own, which prints its results as JSON. `run_suite` compares them:
the tests that pass natively, those of them that pass compiled, and the regressions.

Diagnostic mode (`diagnostic=True`, or BRANCHC_CPYTHON_DIAGNOSTIC=1): a function the
compiler refuses is left uncompiled (its decorator removed, compiling again), and the
run reports which functions were left out and why, so that what else breaks shows.

    python tests/cpython_suites.py [--diagnostic] [--verbose] [suite ...]
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUITES = ("test_yield_from", "test_generators", "test_generator_stop")
TESTS_DIR = Path(__file__).resolve().parent
DIAGNOSTIC_ENV = "BRANCHC_CPYTHON_DIAGNOSTIC"
IMPORT = "from branchc import resumable"
MARKER = "@@branchc-cpython-results@@ "
PASSING = ("pass",)  # outcomes that count as passing (skips and expected failures do not)

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPOUND = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
)


# -- finding generator functions and marking them @resumable ------------------------------------


@dataclass(frozen=True)
class GeneratorDef:
    """A generator function of the source: its qualified name and where it is (original lines)."""

    qualname: str
    line: int  # the `def` line
    end: int
    column: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.qualname, self.line)


def _enclosing_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of a nested scope that are evaluated in the enclosing one."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        return [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
    return []


def own_yields(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the function's own body yields (not a nested def, lambda or class's)."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, _SCOPES):
            stack += _enclosing_parts(node)
        else:
            stack += ast.iter_child_nodes(node)
    return False


def generator_defs(tree: ast.AST) -> list[GeneratorDef]:
    """Every generator function (`def`, not `async def`) in the tree, methods and nested ones included,
    in source order."""
    found: list[GeneratorDef] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + child.name
                if isinstance(child, ast.FunctionDef) and own_yields(child):
                    found.append(
                        GeneratorDef(qualname, child.lineno, child.end_lineno or child.lineno, child.col_offset)
                    )
                visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.Lambda):
                visit(child, prefix + "<lambda>.<locals>.")
            else:
                visit(child, prefix)

    visit(tree, "")
    found.sort(key=lambda d: (d.line, d.column))
    return found


@dataclass
class Marked:
    """The source with `@resumable` added: its text, and for each of its lines the original line."""

    text: str
    origin: list[int]  # origin[i] = original line of text line i + 1
    defs: list[GeneratorDef]  # the functions marked

    def original_line(self, line: int) -> int:
        return self.origin[line - 1] if 1 <= line <= len(self.origin) else 0


def _is_blank(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _byte_column(line: str, offset: int) -> int:
    """ast's column offsets count UTF-8 bytes: the character column."""
    return len(line.encode("utf-8")[:offset].decode("utf-8", "replace"))


def mark_resumable(source: str, tree: ast.Module | None = None, skip: frozenset = frozenset()) -> Marked:
    """`@resumable` directly above each generator `def` (keys in `skip` excepted), and the import.

    Line numbers are kept where possible: the decorator replaces a blank or comment line just
    above the `def`, and the import joins the module's first simple statement with `;`.
    Otherwise a line is inserted; `origin` maps every line back.
    """
    tree = tree or ast.parse(source)
    defs = [d for d in generator_defs(tree) if d.key not in skip]
    lines = source.splitlines()
    if not defs:
        return Marked(source, list(range(1, len(lines) + 1)), [])
    out: dict[int, list[str]] = {n: [line] for n, line in enumerate(lines, start=1)}  # line -> its text lines
    for d in defs:
        indent = lines[d.line - 1][: _byte_column(lines[d.line - 1], d.column)]
        decorator = f"{indent}@resumable"
        above = d.line - 1
        if above >= 1 and len(out[above]) == 1 and _is_blank(out[above][0]) and above not in _string_lines(tree):
            out[above] = [decorator]
        else:
            out[d.line] = [decorator, *out[d.line]]
    _add_import(tree, lines, out)
    text_lines: list[str] = []
    origin: list[int] = []
    for number in range(1, len(lines) + 1):
        text_lines += out[number]
        origin += [number] * len(out[number])
    return Marked("\n".join(text_lines) + "\n", origin, defs)


def _string_lines(tree: ast.Module) -> set[int]:
    """Lines inside multi-line string literals (blank lines there are not free to use)."""
    cache = getattr(tree, "_bc_string_lines", None)
    if cache is None:
        cache = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and node.end_lineno and node.end_lineno > node.lineno:
                cache.update(range(node.lineno, node.end_lineno + 1))
        tree._bc_string_lines = cache  # type: ignore[attr-defined]
    return cache


def _add_import(tree: ast.Module, lines: list[str], out: dict[int, list[str]]) -> None:
    """The import goes after the docstring and `from __future__` imports, joined to a simple
    statement's last line when there is one, on a line of its own otherwise."""
    body = tree.body
    header = 0
    for index, statement in enumerate(body):
        docstring = index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
        if not (docstring or (isinstance(statement, ast.ImportFrom) and statement.module == "__future__")):
            break
        header = index + 1
    anchor = body[header - 1] if header else (body[0] if body else None)
    if anchor is not None and not isinstance(anchor, _COMPOUND) and anchor.end_lineno is not None:
        end = anchor.end_lineno
        text = out[end][-1]
        column = _byte_column(text, anchor.end_col_offset or 0)
        if len(out[end]) == 1:  # not a line we already changed
            out[end] = [f"{text[:column]}; {IMPORT}{text[column:]}"]
            return
    if header < len(body):
        first = body[header]
        line = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
    else:
        line = len(lines) + 1
        out[line] = []
    out[line] = [IMPORT, *out[line]]


# -- compiling, whole or leaving out what the compiler refuses ------------------------------------


@dataclass
class LeftOut:
    """A function left uncompiled in diagnostic mode, and the compiler's reason."""

    where: str  # the module, or the doctest example
    function: str
    line: int
    reason: str
    key: tuple[str, int] = field(default=("", 0), repr=False)


@dataclass
class Compiled:
    code: types.CodeType
    marked: Marked
    left_out: list[LeftOut] = field(default_factory=list)
    functions: int = 0  # how many functions compile_module compiled


def _code_object(compiled: Any, marked: Marked, filename: str) -> types.CodeType:
    """The compiled module's code, with the line numbers of the source before marking."""
    line_map = {g: (marked.original_line(s), shift) for g, (s, shift) in compiled.line_map.items()}
    return dataclasses.replace(compiled, line_map=line_map).code_object(filename)


def compile_marked(source: str, filename: str, *, diagnostic: bool, where: str = "") -> Compiled:
    """Mark the source's generators @resumable and compile it. Strict: CompileError propagates.
    Diagnostic: a function the compiler refuses loses its mark, and compiling starts again."""
    from branchc.splitter import CompileError, compile_module

    tree = ast.parse(source)
    skip: dict[tuple[str, int], LeftOut] = {}  # the functions left uncompiled
    while True:
        marked = mark_resumable(source, tree, frozenset(skip))
        if not marked.defs:
            return Compiled(compile(source, filename, "exec", dont_inherit=True), marked, list(skip.values()))
        try:
            result = compile_module(marked.text, filename)
            code = _code_object(result, marked, filename)
            return Compiled(code, marked, list(skip.values()), len(result.functions))
        except CompileError as error:
            if not diagnostic:  # the same error, at the lines of the source before marking
                moved = [dataclasses.replace(d, line=marked.original_line(d.line)) for d in error.diagnostics]
                raise CompileError(moved) from None
            blamed = _blame(marked, error.diagnostics, where) or _bisect(source, tree, marked.defs, filename, where)
        except Exception:  # the compiler failed: find the function by trying each alone
            if not diagnostic:
                raise
            blamed = _bisect(source, tree, marked.defs, filename, where)
        if not blamed:
            raise AssertionError(f"{where or filename}: cannot tell which function the compiler refused")
        for item in blamed:
            skip[item.key] = item


def _blame(marked: Marked, diagnostics: list[Any], where: str) -> list[LeftOut]:
    """The innermost marked function around each error's line."""
    out = []
    for diagnostic in diagnostics:
        if diagnostic.severity != "error":
            continue
        original = marked.original_line(diagnostic.line)
        around = [d for d in marked.defs if d.line <= original <= d.end]
        if around:
            d = max(around, key=lambda d: d.line)
            out.append(LeftOut(where, d.qualname, d.line, diagnostic.message, d.key))
    return out


def _failure(error: BaseException) -> str:
    from branchc.splitter import CompileError

    if isinstance(error, CompileError):
        return "; ".join(d.message for d in error.diagnostics if d.severity == "error")
    return f"compiler crashed: {type(error).__name__}: {error}".splitlines()[0]


def _bisect(source: str, tree: ast.Module, defs: list[GeneratorDef], filename: str, where: str) -> list[LeftOut]:
    """The marked functions that make compile_module fail by themselves, found by halving."""
    from branchc.splitter import compile_module

    everything = {d.key for d in generator_defs(tree)}

    def failure(group: list[GeneratorDef]) -> BaseException | None:
        marked = mark_resumable(source, tree, frozenset(everything - {d.key for d in group}))
        try:
            compile_module(marked.text, filename)
        except Exception as error:
            return error
        return None

    culprits: list[LeftOut] = []
    pending = [list(defs)]
    while pending:
        group = pending.pop()
        error = failure(group)
        if error is None:
            continue
        if len(group) == 1:
            d = group[0]
            culprits.append(LeftOut(where, d.qualname, d.line, _failure(error), d.key))
        else:
            pending += [group[: len(group) // 2], group[len(group) // 2 :]]
    return culprits


# -- the child process: load the module, run its tests, print the outcomes -------------------------


def _summary(text: str, lines: int = 3) -> str:
    """The last lines of a traceback or doctest report: what went wrong, in short."""
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


class _Recorder:
    """Outcomes of tests and doctest examples, by id."""

    def __init__(self, module_name: str, suite: str) -> None:
        self.module_name = module_name
        self.suite = suite
        self.tests: dict[str, dict[str, str]] = {}
        self.examples: dict[str, list[dict[str, Any]]] = {}

    def id(self, raw: str) -> str:
        return raw.replace(self.module_name, self.suite, 1)

    def set(self, test: Any, outcome: str, detail: str = "") -> None:
        import unittest

        if isinstance(test, unittest.case._SubTest):
            case = self.id(test.test_case.id())
            if outcome in ("fail", "error"):
                entry = self.tests.setdefault(case, {"outcome": outcome, "detail": ""})
                entry["outcome"] = outcome
                entry["detail"] = (entry["detail"] + f"\n[{test._subDescription()}] " + detail).strip()
            return
        case = self.id(test.id())
        previous = self.tests.get(case)
        if previous and previous["outcome"] in ("fail", "error") and outcome == "pass":
            return
        if previous and previous["outcome"] in ("fail", "error"):
            detail = previous["detail"] + "\n" + detail
        self.tests[case] = {"outcome": outcome, "detail": detail.strip()[-4000:]}


def _result_class(recorder: _Recorder):
    import unittest

    class Result(unittest.TestResult):
        def addSuccess(self, test):
            super().addSuccess(test)
            recorder.set(test, "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            recorder.set(test, "fail", self.failures[-1][1])

        def addError(self, test, err):
            super().addError(test, err)
            recorder.set(test, "error", self.errors[-1][1])

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            recorder.set(test, "skip", reason)

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            recorder.set(test, "xfail")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            recorder.set(test, "xpass")

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                failure = issubclass(err[0], test.failureException)
                recorder.set(subtest, "fail" if failure else "error", self._exc_info_to_string(err, test))

    return Result


class _Doctests:
    """Doctest hooks for one run: compiles the examples that define generator functions, and
    records every example's outcome."""

    def __init__(self, recorder: _Recorder, compiled: bool, diagnostic: bool, left_out: list[LeftOut]) -> None:
        self.recorder = recorder
        self.compiled = compiled
        self.diagnostic = diagnostic
        self.left_out = left_out
        self.generator_examples = 0  # examples that define generator functions
        self.compiled_examples = 0

    def install(self) -> None:
        import doctest

        hooks = self
        native_compile = compile

        def compile_example(source, filename, mode, flags=0, dont_inherit=False, *args, **kwargs):
            code = hooks.example_code(source, filename, mode)
            if code is None:
                return native_compile(source, filename, mode, flags, dont_inherit, *args, **kwargs)
            return code

        class Runner(doctest.DocTestRunner):
            def report_success(self, out, test, example, got):
                hooks.record(test, example, "pass", "")
                return super().report_success(out, test, example, got)

            def report_failure(self, out, test, example, got):
                hooks.record(test, example, "fail", f"expected:\n{example.want}got:\n{got}")
                return super().report_failure(out, test, example, got)

            def report_unexpected_exception(self, out, test, example, exc_info):
                text = "".join(traceback.format_exception(*exc_info))
                hooks.record(test, example, "error", text)
                return super().report_unexpected_exception(out, test, example, exc_info)

        # DocTestRunner.run compiles each example with the name `compile`, read from doctest's
        # globals; DocTestCase.runTest makes its runner with the name `DocTestRunner`.
        doctest.compile = compile_example  # type: ignore[attr-defined]
        doctest.DocTestRunner = Runner  # type: ignore[misc]

    def record(self, test, example, outcome: str, detail: str) -> None:
        test_id = self.recorder.id(test.name)
        self.recorder.examples.setdefault(test_id, []).append(
            {
                "index": test.examples.index(example),
                "lineno": example.lineno,
                "source": example.source,
                "outcome": outcome,
                "detail": detail[-3000:],
            }
        )

    def example_code(self, source: str, filename: str, mode: str) -> types.CodeType | None:
        """Compiled code for an example whose source defines a generator function; None otherwise
        (and for source that CPython itself refuses, so that its error shows as it does natively)."""
        if mode != "single":
            return None
        try:
            tree = ast.parse(source)
            compile(source, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
        if not generator_defs(tree):
            return None
        self.generator_examples += 1
        if not self.compiled:
            return None
        where = self.recorder.id(filename.strip("<>").removeprefix("doctest "))
        result = compile_marked(_displayed(source, tree), filename, diagnostic=self.diagnostic, where=where)
        self.left_out += result.left_out
        self.compiled_examples += 1
        return result.code


def _displayed(source: str, tree: ast.Module) -> str:
    """Interactive mode shows the value of each top-level expression statement; a module does not:
    pass those values to sys.displayhook explicitly (columns shift, lines stay)."""
    lines = source.splitlines()
    for statement in reversed(tree.body):
        if not isinstance(statement, ast.Expr):
            continue
        end, last = statement.end_lineno or statement.lineno, lines[(statement.end_lineno or statement.lineno) - 1]
        column = _byte_column(last, statement.end_col_offset or 0)
        lines[end - 1] = last[:column] + "))" + last[column:]
        first = lines[statement.lineno - 1]
        column = _byte_column(first, statement.col_offset)
        lines[statement.lineno - 1] = first[:column] + "__import__('sys').displayhook((" + first[column:]
    return "\n".join(lines) + "\n"


def _left_out_json(item: LeftOut) -> dict[str, Any]:
    return {"where": item.where, "function": item.function, "line": item.line, "reason": item.reason}


def child(suite: str, mode: str) -> dict[str, Any]:
    """Load the suite natively or compiled, run its tests here, return the outcomes."""
    import unittest

    path = suite_path(suite)
    if path is None:
        raise SystemExit(f"no module test.{suite} in this Python")
    source = path.read_text(encoding="utf-8")
    name = f"bc_{suite}"
    compiled = mode != "native"
    diagnostic = mode == "diagnostic"
    recorder = _Recorder(name, suite)
    left_out: list[LeftOut] = []
    report: dict[str, Any] = {"suite": suite, "mode": mode, "load_error": None}
    try:
        if compiled:
            report["generator_functions"] = len(generator_defs(ast.parse(source)))
            result = compile_marked(source, str(path), diagnostic=diagnostic, where=suite)
            code, left_out = result.code, result.left_out
            report["compiled_functions"] = result.functions
        else:
            code = compile(source, str(path), "exec", dont_inherit=True)
        module = types.ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module
        exec(code, module.__dict__)
    except BaseException as error:
        report["load_error"] = "".join(traceback.format_exception(error))[-6000:]
        report.update(tests={}, examples={}, left_out=[_left_out_json(x) for x in left_out])
        return report
    doctests = _Doctests(recorder, compiled, diagnostic, left_out)
    doctests.install()
    tests = unittest.defaultTestLoader.loadTestsFromModule(module)
    tests.run(_result_class(recorder)())
    report["tests"] = recorder.tests
    report["examples"] = recorder.examples
    report["generator_examples"] = doctests.generator_examples
    report["compiled_examples"] = doctests.compiled_examples
    report["left_out"] = [_left_out_json(x) for x in left_out]
    return report


def _child_main(argv: list[str]) -> None:
    suite, mode = argv
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # what the tests print stays out of the results
    try:
        report = child(suite, mode)
    finally:
        sys.stdout = real_stdout
    real_stdout.write("\n" + MARKER + json.dumps(report) + "\n")
    real_stdout.flush()


# -- the parent: run both, compare ------------------------------------------------------------------


def suite_path(suite: str) -> Path | None:
    """The installed Python's test module, or None when the `test` package is not installed."""
    try:
        spec = importlib.util.find_spec(f"test.{suite}")
    except ImportError:
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


_LAUNCH = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import cpython_suites; cpython_suites._child_main(sys.argv[1:])"
)


def _start(suite: str, mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", _LAUNCH, str(TESTS_DIR), suite, mode],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONHASHSEED="0"),
        cwd=str(TESTS_DIR),
    )


def _finish(process: subprocess.Popen, mode: str, timeout: float) -> dict[str, Any]:
    try:
        out, err = process.communicate(timeout=timeout)
        crash = f"exit status {process.returncode} and no results"
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        crash = f"timed out after {timeout} s"
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    return {"mode": mode, "crash": f"{crash}\n{err[-3000:]}", "tests": {}, "examples": {}, "left_out": []}


def example_id(test: str, index: int) -> str:
    return f"{test}[{index}]"


@dataclass
class SuiteReport:
    suite: str
    mode: str  # "compiled" (the module whole) or "diagnostic"
    native: dict[str, Any]
    compiled: dict[str, Any]

    @property
    def native_passing(self) -> list[str]:
        return sorted(t for t, r in self.native.get("tests", {}).items() if r["outcome"] in PASSING)

    @property
    def compiled_passing(self) -> list[str]:
        """The natively passing tests that pass compiled too."""
        tests = self.compiled.get("tests", {})
        return [t for t in self.native_passing if tests.get(t, {}).get("outcome") in PASSING]

    @property
    def ratio(self) -> float:
        return len(self.compiled_passing) / len(self.native_passing) if self.native_passing else 0.0

    def outcome(self, test: str, run: str = "compiled") -> str | None:
        return getattr(self, run).get("tests", {}).get(test, {}).get("outcome")

    def examples(self, run: str = "compiled") -> dict[str, dict[str, Any]]:
        """Every doctest example of a run, by id (`doctest id[index]`)."""
        runs = getattr(self, run).get("examples", {})
        return {example_id(test, e["index"]): e for test, examples in runs.items() for e in examples}

    @property
    def example_regressions(self) -> dict[str, str]:
        """Doctest examples that pass natively and not compiled: id -> what went wrong."""
        native = self.examples("native")
        out = {}
        for key, e in self.examples("compiled").items():
            if e["outcome"] != "pass" and native.get(key, {}).get("outcome") == "pass":
                out[key] = f"{e['outcome']}: >>> {e['source'].strip()}\n{_summary(e['detail'], 4)}"
        return out

    @property
    def regressions(self) -> dict[str, str]:
        """Tests that pass natively and not compiled: id -> what went wrong, in short (for a doctest,
        its failing examples)."""
        tests = self.compiled.get("tests", {})
        examples = self.example_regressions
        out = {}
        for test in self.native_passing:
            result = tests.get(test)
            if result is None:
                out[test] = "did not run"
            elif result["outcome"] not in PASSING:
                failed = sorted((k for k in examples if k.startswith(test + "[")), key=_natural)
                if failed:
                    out[test] = f"{result['outcome']}: examples " + ", ".join(k[len(test) :] for k in failed)
                else:
                    detail = result["detail"]
                    out[test] = f"{result['outcome']}: {_summary(detail, 1)}\n{_summary(detail, 12)}"
        return out

    @property
    def problem(self) -> str | None:
        """Why a run gave no test results (the module did not compile or load, the process crashed)."""
        for run in (self.native, self.compiled):
            if run.get("crash"):
                return f"{run['mode']} run crashed: {run['crash']}"
            if run.get("load_error"):
                return f"{run['mode']} module failed to load:\n{_summary(run['load_error'], 12)}"
        if self.native.get("generator_examples") and not self.compiled.get("generator_examples"):
            return "no doctest example was compiled: doctest no longer compiles examples as this harness expects"
        return None

    def unexplained(self, known: dict[str, str]) -> dict[str, str]:
        """Regressions not in `known` (test ids, or `doctest id[index]` for single examples: a doctest
        is explained when each of its regressed examples is)."""
        examples = self.example_regressions
        out = {}
        for test, detail in self.regressions.items():
            if test in known:
                continue
            failed = [k for k in examples if k.startswith(test + "[")]
            if failed and all(k in known for k in failed):
                continue
            out[test] = detail
        return out

    def stale(self, known: dict[str, str]) -> dict[str, str]:
        """Known entries that pass compiled now, or that name no test or example of the suite."""
        compiled_examples, native_examples = self.examples("compiled"), self.examples("native")
        out = {}
        for key in known:
            if key in native_examples or key in compiled_examples:
                if compiled_examples.get(key, {}).get("outcome") == "pass":
                    out[key] = "passes compiled"
            elif self.outcome(key, "native") is not None or self.outcome(key) is not None:
                if self.outcome(key) in PASSING:
                    out[key] = "passes compiled"
            elif not self.problem:
                out[key] = "no such test or doctest example"
        return out

    def describe(self, verbose: bool = False) -> str:
        compiled = self.compiled
        lines = [
            f"{self.suite} [{self.mode}]: {len(self.compiled_passing)}/{len(self.native_passing)} natively passing "
            f"tests pass compiled ({self.ratio:.1%}); compiled {compiled.get('compiled_functions', 0)} of "
            f"{compiled.get('generator_functions', 0)} generator functions in the module, "
            f"{compiled.get('compiled_examples', 0)} doctest examples"
        ]
        if self.problem:
            lines += ["  " + line for line in self.problem.splitlines()]
        left_out = compiled.get("left_out", [])
        if left_out:
            lines.append(f"  left uncompiled ({len(left_out)}):")
            lines += [f"    {x['where']}: {x['function']} (line {x['line']}): {x['reason']}" for x in left_out]
        examples = self.example_regressions
        regressions = self.regressions
        if self.problem and all(detail == "did not run" for detail in regressions.values()):
            lines.append(f"  none of the {len(regressions)} natively passing tests ran")
            regressions = {}
        for test, detail in sorted(regressions.items()):
            lines.append(f"  REGRESSION {test}: {detail.splitlines()[0] if detail else ''}")
            if verbose:
                lines += ["      " + line for line in detail.splitlines()[1:]]
                for key in sorted((k for k in examples if k.startswith(test + "[")), key=_natural):
                    lines.append(f"    {key[len(test) :]} " + examples[key].replace("\n", "\n        "))
        return "\n".join(lines)


def _natural(key: str) -> tuple[str, int]:
    head, _, index = key.rpartition("[")
    return head, int(index.rstrip("]") or 0)


def run_suites(suites=SUITES, diagnostic: bool | None = None, timeout: float = 120) -> list[SuiteReport]:
    """Run the suites natively and compiled, every run in a process of its own (all at once), and
    compare. `diagnostic` None: from the BRANCHC_CPYTHON_DIAGNOSTIC environment variable."""
    if diagnostic is None:
        diagnostic = os.environ.get(DIAGNOSTIC_ENV, "") not in ("", "0")
    mode = "diagnostic" if diagnostic else "compiled"
    started = [(suite, _start(suite, "native"), _start(suite, mode)) for suite in suites]
    return [
        SuiteReport(suite, mode, _finish(native, "native", timeout), _finish(compiled, mode, timeout))
        for suite, native, compiled in started
    ]


def run_suite(suite: str, diagnostic: bool | None = None, timeout: float = 120) -> SuiteReport:
    return run_suites([suite], diagnostic, timeout)[0]


def main(argv: list[str]) -> int:
    diagnostic = True if "--diagnostic" in argv else None
    verbose = "--verbose" in argv
    suites = [a for a in argv if not a.startswith("--")] or list(SUITES)
    missing = [s for s in suites if suite_path(s) is None]
    if missing:
        print(f"not in this Python's test package: {', '.join(missing)}")
        return 2
    for report in run_suites(suites, diagnostic):
        print(report.describe(verbose), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
