"""The splitter's driver: find the functions to compile in a module and rewrite each one.

A compiled function keeps its name, signature and decorators; its body is normalised,
then split at every yield, behind a prologue that re-enters it when a resume asks. Calling
it returns a plain generator. Only a function with cells (variables a nested function
captures, or names of an enclosing function) gets its body as a nested generator function
`_bc_body`, so that a resume can give it those very cells. The rest of the module is kept
as written.
"""

from __future__ import annotations

import ast
import hashlib
import re
import symtable
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from ..continuation.relocate import RECURSION_LIMIT, deeply, gc_paused, relocated_code
from .bindings import callable_bindings, cst_kinds, value_kinds
from .cst import PREFIX, block, contains_yield, generate, index_function, reset_counts, simple, walk
from .diagnostics import CompileError, Diagnostic, Reporter
from .liveness import live_variables
from .lower import Lowerer
from .normalize import Normalizer
from .points import form_asked, point_names
from .positions import KINDS_NEEDED, Positions
from .states import StateGraph, effect_of, state_graph
from .unyielded import may_have_unyielded, unyielded_effects
from .version import COMPILER_VERSION

__all__ = ["COMPILER_VERSION", "CompiledFunction", "CompiledModule", "compile_each", "compile_module"]

_BRANCHC_MODULES = {"branchc", "branchc.runtime", "branchc.runtime.tool"}
_INTERNAL = {"_bc_T", "_bc_R", "_bc_L", "_bc_C", "_bc_label", "_bc_x"}


@dataclass
class CompiledFunction:
    qualname: str
    kind: str  # "resumable" or "client"
    line: int
    hash: str
    end_line: int
    sites: list[dict] = field(default_factory=list)
    restorable: list[str] = field(default_factory=list)
    live: dict[int, list[str]] = field(default_factory=dict)
    binds: dict[str, list[list]] = field(default_factory=dict)  # see bindings.py
    holds: dict[str, list[str]] = field(default_factory=dict)  # variable -> the kinds it can hold (bindings.py)
    # label -> {exception variable around that yield: the exception classes it can hold, by name} (lower.py)
    catches: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # compiler-made variable -> what it holds, in words
    type_params: list[str] = field(default_factory=list)  # free names that are type parameters (PEP 695)
    # parameter -> its default, where that is a literal (a run moving to this build gets it: continuation/points.py)
    defaults: dict[str, Any] = field(default_factory=dict)
    graph: StateGraph | None = None

    def manifest(self) -> dict:
        """This function's entry in branchc.json: its states, where it suspends, what each
        suspension waits on and carries, and the transitions between states."""
        lines = self.graph.lines if self.graph else {}
        holds = self.holds
        return {
            "qualname": self.qualname,
            "kind": self.kind,
            "line": self.line,
            "end_line": self.end_line,
            "hash": self.hash,
            "defaults": self.defaults,
            "states": [
                {"label": label, "lines": lines.get(label, [])} for label in [0, *(s["label"] for s in self.sites)]
            ],
            "suspensions": [
                {
                    "label": site["label"],
                    "point": site.get("point", f"label {site['label']}"),
                    **({"asks": site["asks"]} if "asks" in site else {}),
                    "span": site["span"],
                    "delegates": site["delegates"],
                    "effect": site.get("effect", {"kind": "value", "targets": []}),
                    "live": self.live.get(site["label"], []),
                    "kinds": {name: self.holds[name] for name in self.live.get(site["label"], ()) if name in holds},
                    "exceptions": self.catches.get(site["label"], {}),
                }
                for site in self.sites
            ],
            "transitions": [
                {"source": source, "target": target, "kind": kind}
                for source, target, kind in (self.graph.transitions if self.graph else [])
            ],
        }


@dataclass
class CompiledModule:
    path: str
    code: str
    functions: list[CompiledFunction]
    diagnostics: list[Diagnostic]
    line_map: dict[int, tuple[int, int | None]]  # generated line -> (source line, column shift or unknown)
    classes: list[str] = field(default_factory=list)  # qualnames of the classes a snapshot may name

    def code_object(self, filename: str | None = None) -> types.CodeType:
        """The module compiled with the source's file name, lines and columns, for tracebacks."""
        return relocated_code(self.code, self.line_map, filename or self.path)

    def module_text(self, source_path: str) -> str:
        """The text to write to OUT: the code, and a last line that relocates it when imported."""
        lines = sorted((line, source, delta) for line, (source, delta) in self.line_map.items())
        # on the header's line, so that every line keeps its number
        code = self.code.replace(_RUNTIME_IMPORT, f"{_RUNTIME_IMPORT}; __file__ = {source_path!r}", 1)
        return f"{code.rstrip()}\n\n_bc_rt.relocate(globals(), {lines!r}, {source_path!r})\n"


def compile_module(source: str, path: str = "<string>") -> CompiledModule:
    """Compile one module's source; raises CompileError listing every error.

    The module is kept as written, text and all, except for the compiled functions,
    whose text is replaced, and two header lines (the runtime import and the metadata).
    """
    return deeply(_guarded, source, path)


Compiled = tuple[CompiledModule | None, list[Diagnostic]]


def compile_each(
    jobs: Sequence[tuple[str, str]],
    each: Callable[[int, CompiledModule | None, list[Diagnostic]], object] | None = None,
) -> list[Compiled]:
    """`compile_module` over (source, path) pairs: (the module, or None when it does not compile, and
    its diagnostics) for each, in order; `each(index, module, diagnostics)` runs as each one is done.
    All run in one thread with a big stack: a thread per module costs about a tenth more."""

    def every() -> list[Compiled]:
        out: list[Compiled] = []
        for index, (source, path) in enumerate(jobs):
            try:
                compiled = _guarded(source, path)
            except CompileError as error:
                out.append((None, error.diagnostics))
            else:
                out.append((compiled, compiled.diagnostics))
            if each is not None:
                each(index, *out[-1])
        return out

    return deeply(every)


def _guarded(source: str, path: str) -> CompiledModule:
    # Syntax trees hold no cycles, so the cyclic collector only costs time here (about 15%).
    with gc_paused():
        try:
            return _compile_module(source, path)
        except RecursionError:  # what no function's own error caught: the module as a whole
            message = "the module nests too deeply for the compiler here (past the recursion limit)"
            hint = "split the deepest expression or block into smaller statements or functions"
            raise CompileError([Diagnostic(path, 1, 1, "error", message, hint)]) from None


def _compile_module(source: str, path: str) -> CompiledModule:
    try:  # CPython's own parser first: it names syntax errors best
        tree = compile(source, path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        module = cst.parse_module(source)
    except SyntaxError as error:
        message = f"syntax error: {error.msg}"
        hint = "branchc compiles valid Python 3.11 source; fix the syntax first"
        raise CompileError([Diagnostic(path, error.lineno or 1, error.offset or 1, "error", message, hint)]) from None
    except cst.ParserSyntaxError as error:
        message = f"syntax error: {error.message}"
        raise CompileError([Diagnostic(path, error.editor_line, error.editor_column, "error", message)]) from None
    reset_counts()
    classes = _module_classes(tree)
    finder = _Targets()
    walk(module, finder)
    if not finder.resumable and not finder.tool and not finder.modules:
        return CompiledModule(path, source, [], [], {}, classes)
    if not finder.outermost:
        return CompiledModule(path, source, [], [], {}, classes)
    positions = Positions(tree, source, finder.functions, [node for node, _ in finder.outermost])
    for node, _ in finder.outermost:  # one walk per function: yield counts, and nodes for positions
        positions.indexed[node] = index_function(node, KINDS_NEEDED)
    reporter = Reporter(path, positions)
    if PREFIX in source:
        _reserved_names(tree, reporter)
    local_names = _original_locals(source, path)
    rebound = _rebound_globals(tree, source)
    functions: list[CompiledFunction] = []
    deepest = 0  # a bound on the static blocks any compiled function nests
    replacements: list[tuple[int, int, list[str], list[int]]] = []  # first line, last line, new text, old lines
    lines = source.splitlines()
    for node, scopes in finder.outermost:
        splitter = _Splitter(finder, reporter, module, local_names, scopes, lines)
        splitter.rebound = rebound
        kinds = [k for k in map(finder.kind, node.decorators) if k]
        try:
            if kinds and node not in finder.has_nested:  # the common case: no transform pass over the function
                compiled = splitter.compile_function(node, node, kinds[0])
            else:
                compiled = node.visit(splitter)
        except RecursionError:
            reporter.error(
                node,
                f"{node.name.value} nests expressions or blocks too deeply for the compiler "
                f"(more than {RECURSION_LIMIT} levels of recursion)",
                "split the deepest expression or block into smaller statements or functions",
            )
            continue
        functions += splitter.functions
        if not splitter.functions or reporter.errors:
            continue
        where, definition = positions.get(node), positions.definition(node)
        if where is None or definition is None:
            raise AssertionError(f"no position for {node.name.value}")  # the two parsers always agree on defs
        first = min([d.lineno for d in definition.decorator_list] + [definition.lineno])
        last = definition.end_lineno or definition.lineno
        indent = lines[definition.lineno - 1][: where.start.column]
        deepest = max(deepest, _block_depth(compiled.body.body))
        text = generate(module, compiled.with_changes(leading_lines=())).rstrip("\n").split("\n")
        text = _expand_prologues(text, splitter.prologues)
        replacements.append(
            (first, last, [indent + line if line else line for line in text], list(range(first, last + 1)))
        )
    if reporter.errors:
        raise CompileError(reporter.diagnostics)
    if not functions:
        return CompiledModule(path, source, [], reporter.diagnostics, {}, classes)
    code, line_map = _splice(lines, replacements, _header_line(tree), _header(functions, classes))
    if deepest >= _STATIC_BLOCKS:  # only then can CPython's compiler refuse what the splitter wrote
        _check_generated(code, line_map, path)
    return CompiledModule(path, code, functions, reporter.diagnostics, line_map, classes)


#: CPython's CO_MAXBLOCKS: how many blocks (loops, try, with, handlers) a function may nest.
_STATIC_BLOCKS = 20


def _block_depth(statements) -> int:
    """An upper bound on how many static blocks CPython's compiler nests for these statements:
    a loop or `with` body one, a `try` body or a handler body at most two, a finally body one."""
    deepest = 0
    for statement in statements:
        if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            continue
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            deepest = max(deepest, _block_depth(_body(statement)))  # its own frame: counted apart
            continue
        if isinstance(statement, cst.If):
            inner = _block_depth(_body(statement))
            orelse = statement.orelse
            inner = max(inner, _block_depth([orelse] if isinstance(orelse, cst.If) else _body(orelse)))
            deepest = max(deepest, inner)
        elif isinstance(statement, (cst.For, cst.While, cst.With)):
            orelse = _body(getattr(statement, "orelse", None))
            deepest = max(deepest, 1 + _block_depth(_body(statement)), _block_depth(orelse))
        elif isinstance(statement, (cst.Try, cst.TryStar)):
            handlers = max((_block_depth(_body(handler)) for handler in statement.handlers), default=0)
            inner = max(_block_depth(_body(statement)), handlers, _block_depth(_body(statement.orelse)))
            deepest = max(deepest, 3 + inner, 1 + _block_depth(_body(statement.finalbody)))
        elif isinstance(statement, cst.Match):
            deepest = max(deepest, *(_block_depth(_body(case)) for case in statement.cases))
    return deepest


def _body(node) -> list:
    body = getattr(node, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else []


def _check_generated(code: str, line_map: dict[int, tuple[int, int | None]], path: str) -> None:
    """Compile the generated module as the import will, so that `check` reports what `compile`
    would meet: CPython's own limits on the compiled form, placed on the source line."""
    try:
        compile(code, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        generated = error.lineno or 1
        following = [line for line in sorted(line_map) if line >= generated]
        line = line_map[following[0]][0] if following else 1
        message = f"the compiled form does not compile: {error.msg}"
        hint = "this is a bug in branchc's compiler; please report it with this function"
        if "statically nested blocks" in error.msg:
            message = "too many statically nested blocks in the compiled form: CPython allows 20 in a function"
            hint = (
                "a yield uses one block of its own, and a try whose finally yields or a with that spans a yield "
                "uses two: move the innermost part into a @resumable function and `yield from` it"
            )
        raise CompileError([Diagnostic(path, line, 1, "error", message, hint)]) from None
    except (RecursionError, MemoryError):
        message = "the compiled form nests too deeply for CPython's compiler"
        hint = "split the deepest expression into smaller statements"
        raise CompileError([Diagnostic(path, 1, 1, "error", message, hint)]) from None


def _reserved_names(tree: ast.Module, reporter: Reporter) -> None:
    """Names that start with `_bc_` are the compiler's (its variables, `_bc_rt`, `_bc_META`): a module
    that compiles may not use them, so that they cannot collide."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.alias):
            names = [(node.asname or node.name).split(".")[0]]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = node.names
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names = [node.name]
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names = [node.rest]
        for found in names:
            if found.startswith(PREFIX):
                reporter.diagnostics.append(
                    Diagnostic(
                        reporter.path,
                        node.lineno,
                        node.col_offset + 1,
                        "error",
                        f"{found!r}: names that start with {PREFIX!r} are reserved for branchc's compiled code",
                        "rename it",
                    )
                )


def _module_classes(tree: ast.Module) -> list[str]:
    """Classes defined at module level, and in their bodies: what a snapshot can name a class by."""
    found: list[str] = []
    stack = [(statement, "") for statement in reversed(tree.body)]
    while stack:
        statement, prefix = stack.pop()
        if isinstance(statement, ast.ClassDef):
            qualname = prefix + statement.name
            found.append(qualname)
            stack += [(inner, qualname + ".") for inner in reversed(statement.body)]
    return found


def _rebound_globals(tree: ast.Module, source: str) -> frozenset[str]:
    """Globals a name of which may not stand for one thing: bound more than once at module level (a
    class defined twice, `try: from x import C` / `except ImportError: class C`), or declared `global`
    in a function (that may rebind it as it runs). A call of one is not known to make that class."""
    counts: dict[str, int] = {}
    declared: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    declares = "global" in source  # else no def holds a `global` statement: no need to walk them
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[node.name] = counts.get(node.name, 0) + 1
            if declares:
                declared.update(n for inner in ast.walk(node) if isinstance(inner, ast.Global) for n in inner.names)
            continue
        for child in ast.walk(node):
            names: list[str] = []
            if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
                names = [child.id]
            elif isinstance(child, ast.alias):
                names = [(child.asname or child.name).split(".")[0]]
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [child.name]  # a def inside a module-level if or try
            for name in names:
                counts[name] = counts.get(name, 0) + 1
    return frozenset(name for name, count in counts.items() if count > 1) | frozenset(declared)


def _header_line(tree: ast.Module) -> int:
    """The header goes after the module docstring and `from __future__` imports."""
    after = 0
    for index, statement in enumerate(tree.body):
        docstring = (
            index == 0
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        )
        future = isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        if not (docstring or future):
            break
        after = statement.end_lineno or statement.lineno
    return after


_RUNTIME_IMPORT = "import branchc.continuation.generator as _bc_rt"


def _header(functions: list[CompiledFunction], classes: list[str]) -> list[str]:
    return [_RUNTIME_IMPORT, f"_bc_META = {_meta_table(functions, classes)!r}"]


def _splice(
    lines: list[str], replacements, header_after: int, header: list[str]
) -> tuple[str, dict[int, tuple[int, int]]]:
    """The new text, and generated line -> (source line, column shift) where a line carries source code."""
    out: list[str] = []
    mapping: dict[int, tuple[int, int]] = {}
    spans = {first: (last, text, old) for first, last, text, old in replacements}
    number = 1
    while number <= len(lines):
        if number - 1 == header_after:
            out += header
        if number in spans:
            last, text, old = spans[number]
            _match_lines(lines, old, text, len(out), mapping)
            out += text
            number = last + 1
            continue
        out.append(lines[number - 1])
        mapping[len(out)] = (number, 0)
        number += 1
    if header_after >= len(lines):
        out += header
    return "\n".join(out) + "\n", mapping


_LINE_MARK = re.compile(r"  # line (\d+)$")


def _match_lines(lines: list[str], old: list[int], text: list[str], offset: int, mapping) -> None:
    """Map generated lines of a compiled function to the source lines they came from, by their text."""
    where: dict[str, list[int]] = {}
    for number in old:
        stripped = lines[number - 1].strip()
        if stripped and not stripped.startswith("#"):
            where.setdefault(stripped, []).append(number)
    previous = old[0] if old else 0
    for index, line in enumerate(text, start=1):
        marked = _LINE_MARK.search(line)
        if marked:  # a statement the compiler rewrote, marked with the source line it stands for
            mapping[offset + index] = (int(marked.group(1)), None)  # its columns are not the source's
            continue
        candidates = where.get(line.strip())
        if not candidates:
            continue
        source = next((c for c in candidates if c >= previous), candidates[0])
        previous = source
        source_text = lines[source - 1]
        delta = (len(source_text) - len(source_text.lstrip())) - (len(line) - len(line.lstrip()))
        mapping[offset + index] = (source, delta)


_TYPE_PARAMETERS = ("type parameter", "type parameters")  # symtable's name for it in 3.12, and since 3.13


def _original_locals(source: str, path: str) -> dict[str, tuple[set[str], set[str], set[str], set[str]]]:
    """qualname -> (local names, locals captured by nested scopes, free names, the free names that are
    type parameters of the def or of an enclosing generic class) of every function, from CPython's own
    symbol table."""
    out: dict[str, tuple[set[str], set[str], set[str], set[str]]] = {}

    def frees(scope: symtable.SymbolTable) -> set[str]:
        """Names that a nested def or lambda closes over. A comprehension's own reads (and its walrus
        targets) do not count: a comprehension is over before the next yield, so the body keeps those
        variables in cells of its own, and reading one unbound is CPython's UnboundLocalError."""
        comprehension = ".0" in scope.get_identifiers()
        found = set(scope.get_frees()) if scope.get_type() == "function" and not comprehension else set()
        for child in scope.get_children():
            found |= frees(child)
        return found

    def walk(scope: symtable.SymbolTable, prefix: str, type_names: frozenset[str]) -> None:
        for child in scope.get_children():
            kind = child.get_type()
            if kind == "function":
                qualname = f"{prefix}{child.get_name()}"
                names = set(child.get_locals())
                captured = names & set().union(*(frees(c) for c in child.get_children()))
                known, known_captured, known_free, known_typed = out.setdefault(qualname, (set(), set(), set(), set()))
                known |= names
                known_captured |= captured
                known_free |= set(child.get_frees())
                known_typed |= set(child.get_frees()) & type_names
                walk(child, f"{qualname}.<locals>.", type_names - names)
            elif kind == "class":
                walk(child, f"{prefix}{child.get_name()}.", type_names)
            elif kind in _TYPE_PARAMETERS:  # `def f[T]`, `class C[T]`: inside a scope of T's own
                bound = {name for name in child.get_identifiers() if child.lookup(name).is_local()}
                walk(child, prefix, type_names | bound)

    walk(symtable.symtable(source, path, "exec"), "", frozenset())
    return out


def _meta_table(functions: list[CompiledFunction], classes: list[str]) -> dict:
    """What the compiled module embeds for the runtime (branchc.continuation.registry.compiled)."""
    return {
        "functions": {
            f.qualname: {
                "kind": f.kind,
                "hash": f.hash,
                "sites": {s["label"]: (s["line"], s["column"], s["delegates"]) for s in f.sites},
                "points": {s["label"]: s["point"] for s in f.sites if "point" in s},
                **(
                    {"asks": {s["label"]: s["asks"] for s in f.sites if "asks" in s}}
                    if any("asks" in s for s in f.sites)
                    else {}
                ),
                **({"defaults": f.defaults} if f.defaults else {}),
                "locals": f.restorable,
                "live": f.live,
                "binds": f.binds,
                **({"holds": f.holds} if f.holds else {}),
                **({"catches": f.catches} if f.catches else {}),
                "notes": f.notes,
                **({"type_params": f.type_params} if f.type_params else {}),
            }
            for f in functions
        },
        "classes": classes,
    }


class _Targets(cst.CSTVisitor):
    """Names that refer to branchc's `resumable` and `tool`, and variables holding tools."""

    def __init__(self) -> None:
        self.resumable: set[str] = set()
        self.tool: set[str] = set()
        self.modules: set[str] = set()  # names bound to the branchc package
        self.tools: set[str] = set()
        self.native_generators: set[str] = set()  # module-level generator functions left uncompiled
        self.context_managers: set[str] = set()  # module-level @contextmanager functions
        self.module_defs: dict[str, cst.FunctionDef] = {}
        self.has_nested: set[cst.FunctionDef] = set()  # defs with defs inside
        self.functions: list[cst.FunctionDef] = []  # every def, in document order
        self.outermost: list[tuple[cst.FunctionDef, list[tuple[str, str]]]] = []  # to splice, with their scopes
        self._scopes: list[tuple[str, str]] = []
        self._frames: list[list] = []  # per open def: [node, scopes, holds a compiled function]

    def visit_Module(self, node: cst.Module) -> None:
        self.module_defs = {s.name.value: s for s in node.body if isinstance(s, cst.FunctionDef)}
        for name, definition in self.module_defs.items():
            for decorator in definition.decorators:
                found = decorator.decorator
                last = found.attr.value if isinstance(found, cst.Attribute) else getattr(found, "value", None)
                if last == "contextmanager":
                    self.context_managers.add(name)

    def is_native_generator(self, name: str) -> bool:
        """A module-level generator function that is not compiled (asked only when it matters)."""
        if name not in self.native_generators:
            definition = self.module_defs.get(name)
            if definition is None or any(self.kind(d) for d in definition.decorators):
                return False
            if not contains_yield(list(definition.body.body)):
                return False
            self.native_generators.add(name)
        return True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._scopes.append((node.name.value, "class"))

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)
        if self._frames:
            self.has_nested.add(self._frames[-1][0])
        self._frames.append([node, list(self._scopes), False])
        self._scopes.append((node.name.value, "function"))

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.pop()
        _, scopes, holds = self._frames.pop()
        if holds or any(self.kind(d) for d in node.decorators):
            if self._frames:
                self._frames[-1][2] = True  # the enclosing def is spliced whole instead
            else:
                self.outermost.append((node, scopes))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        for small in node.body:  # only these three matter here: no need to walk the expressions
            if isinstance(small, cst.Assign):
                self.visit_Assign(small)
            elif isinstance(small, cst.ImportFrom):
                self.visit_ImportFrom(small)
            elif isinstance(small, cst.Import):
                self.visit_Import(small)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = cst.helpers.get_full_name_for_node(node.module)
        if module not in _BRANCHC_MODULES:
            return
        for alias in node.names:
            imported = alias.name.value
            bound = alias.asname.name.value if alias.asname else imported
            if imported == "resumable":
                self.resumable.add(bound)
            elif imported == "tool":
                self.tool.add(bound)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if cst.helpers.get_full_name_for_node(alias.name) == "branchc":
                self.modules.add(alias.asname.name.value if alias.asname else "branchc")

    def is_tool_factory(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Name):
            return node.value in self.tool
        return (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value in self.modules
            and node.attr.value == "tool"
        )

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self.is_tool_factory(node.value.func):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self.tools.add(target.target.value)

    def kind(self, decorator: cst.Decorator) -> str | None:
        dec = decorator.decorator
        if isinstance(dec, cst.Name) and dec.value in self.resumable:
            return "resumable"
        # the short form: @tool, @tool(...), @branchc.tool(...), or @t on a variable holding a tool
        if self.is_tool_factory(dec.func if isinstance(dec, cst.Call) else dec):
            return "client"
        if isinstance(dec, cst.Name) and dec.value in self.tools:
            return "client"
        if isinstance(dec, cst.Attribute) and isinstance(dec.value, cst.Name):
            if dec.value.value in self.modules and dec.attr.value == "resumable":
                return "resumable"
            if dec.value.value in self.tools and dec.attr.value == "client":
                return "client"
        return None


def _literal_defaults(params: Sequence[cst.Param], module: cst.Module) -> dict[str, Any]:
    """{parameter: default} for the parameters whose default is a literal str, number, bool or None."""
    out: dict[str, Any] = {}
    for param in params:
        if param.default is None:
            continue
        try:
            value = ast.literal_eval(module.code_for_node(param.default))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if type(value) in (str, int, float, bool, type(None)) and value == value:  # not NaN: JSON has none
            out[param.name.value] = value
    return out


def _flat_params(params: cst.Parameters) -> list[str]:
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    if isinstance(params.star_arg, cst.Param):
        names.append(params.star_arg.name.value)
    names += [p.name.value for p in params.kwonly_params]
    if params.star_kwarg is not None:
        names.append(params.star_kwarg.name.value)
    return names


class _Splitter(cst.CSTTransformer):
    def __init__(
        self,
        targets: _Targets,
        reporter: Reporter,
        module: cst.Module,
        original_locals: dict[str, tuple[set[str], set[str]]],
        scopes: list[tuple[str, str]],
        lines: list[str] | None = None,
    ) -> None:
        self.targets = targets
        self.reporter = reporter
        self.module = module
        self.scopes: list[tuple[str, str]] = list(scopes)  # (name, "function" | "class")
        self.functions: list[CompiledFunction] = []
        self.prologues: dict[str, list[str]] = {}  # placeholder name -> the prologue's lines
        self.origin: dict[cst.CSTNode, cst.CSTNode] = {}  # rebuilt node -> node in the source
        self.locals = original_locals
        self.lines = module.code.splitlines() if lines is None else lines
        self.rebound: frozenset[str] = frozenset()  # globals that may not stand for one thing (_rebound_globals)

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        result = super().on_leave(original, updated)
        if isinstance(result, cst.CSTNode):
            self.origin.setdefault(result, original)
        return result

    def qualname(self, name: str) -> str:
        parts: list[str] = []
        for scope_name, kind in self.scopes:
            parts.append(scope_name)
            if kind == "function":
                parts.append("<locals>")
        return ".".join([*parts, name])

    def expand_suites(self, node: cst.FunctionDef) -> cst.FunctionDef:
        """`if x: a = yield 1` and `def f(): yield 1`: give every one-line body a block of its own."""
        if "SimpleStatementSuite" not in {type(n).__name__ for n in _suites(node)}:
            return node
        origin = self.origin

        class Expand(cst.CSTTransformer):
            def on_leave(self, original, updated):
                result = super().on_leave(original, updated)
                if isinstance(result, cst.CSTNode):
                    origin.setdefault(result, origin.get(original, original))
                return result

            def leave_SimpleStatementSuite(self, original, updated):
                return cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[small]) for small in updated.body])

        return node.visit(Expand())

    def source_text(self, node: cst.FunctionDef) -> str | None:
        where = self.reporter.positions.get(node)
        if where is None:
            return None
        return "\n".join(self.lines[where.start.line - 1 : where.end.line])

    def split_graph(self, original: cst.FunctionDef, compiled: CompiledFunction) -> None:
        """Pass 5: the states and transitions the manifest records (see states.py)."""
        positions = self.reporter.positions
        definition = positions.definition(original)
        if definition is None:
            return
        labels = {(site["line"], site["column"]): site for site in compiled.sites}

        def label_of(node: ast.AST) -> int | None:
            line, column = positions.start(node)
            site = labels.get((line, column + 1))
            if site is None:
                return None
            site["effect"] = effect_of(node)
            return site["label"]

        compiled.graph = state_graph(definition, label_of, {line for line, _ in labels})
        self.name_points(definition, compiled, labels)

    def name_points(self, definition: ast.AST, compiled: CompiledFunction, labels: dict) -> None:
        """Pass 6: each suspension's point, the name a waiting run is known by across builds (see points.py)."""
        positions, reporter = self.reporter.positions, self.reporter

        def label_of(node: ast.AST) -> int | None:
            line, column = positions.start(node)
            site = labels.get((line, column + 1))
            if site is None:
                return None
            form = form_asked(node, positions.tree)
            if form is not None:
                site["asks"] = form
            return site["label"]

        names, problems = point_names(definition, self.lines, label_of)
        for site in compiled.sites:
            site["point"] = names.get(site["label"], f"label {site['label']}")
        for node, message, hint in problems:
            line, column = positions.start(node)
            reporter.diagnostics.append(Diagnostic(reporter.path, line, column + 1, "error", message, hint))

    def warn_unyielded(self, original: cst.FunctionDef, kind: str) -> None:
        """Report each effect the function makes and never yields (see unyielded.py)."""
        reporter = self.reporter
        if not may_have_unyielded(self.source_text(original)):
            return
        definition = reporter.positions.definition(original)
        if definition is None:
            return
        method = bool(self.scopes) and self.scopes[-1][1] == "class"
        for call, message, hint in unyielded_effects(definition, kind, method):
            line, column = reporter.positions.start(call)
            reporter.diagnostics.append(Diagnostic(reporter.path, line, column + 1, "warning", message, hint))

    def warn_untravelable(self, lowered: list[cst.BaseStatement], compiled: CompiledFunction) -> None:
        """Report, at compile time, values that are live across a yield and can never travel."""
        finder = _Handles(self.targets.is_native_generator, self.targets.context_managers)
        for statement in lowered:
            walk(statement, finder)
        for node, what, hint in finder.withs:
            first = self.reporter.where(self.origin.get(node.body, node.body))
            inside = next((site for site in compiled.sites if _within(self.reporter.span(node), site["span"])), None)
            line = inside["line"] if inside else first[0]
            self.reporter.warning(
                self.origin.get(node, node),
                f"the context manager of this `with` is {what}, and the yield at line {line} is inside it; "
                f"a snapshot there cannot carry it",
                hint,
            )
        for node, target, what, hint in finder.found:
            labels = [site for site in compiled.sites if target in compiled.live.get(site["label"], ())]
            if labels:
                self.reporter.warning(
                    self.origin.get(node, node),
                    f"{target!r} holds {what} and is live across the yield at line {labels[0]['line']}; "
                    f"a snapshot there cannot carry it",
                    hint,
                )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append((node.name.value, "class"))

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.scopes.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append((node.name.value, "function"))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.scopes.pop()
        kinds = [k for k in map(self.targets.kind, original.decorators) if k]
        if not kinds:
            return updated
        return self.compile_function(original, updated, kinds[0])

    def compile_function(self, original: cst.FunctionDef, node: cst.FunctionDef, kind: str) -> cst.FunctionDef:
        reporter = self.reporter
        qualname = self.qualname(node.name.value)
        if original.asynchronous is not None:
            reporter.error(
                original,
                f"{qualname} is async; branchc compiles generator functions",
                "write it as a plain `def` that yields effects",
            )
            return node
        node = self.expand_suites(node)
        statements = list(node.body.body)
        docstring: list[cst.BaseStatement] = []
        if statements and _is_docstring(statements[0]):
            docstring, statements = statements[:1], statements[1:]
        if not contains_yield(statements):
            reporter.error(
                original,
                f"{qualname} has no yield, so it is not a generator",
                "make it yield effects (`yield ctx.sample(...)`), or drop the decorator",
            )
            return node
        text = self.source_text(original)
        declarations: list[cst.BaseStatement] = []
        if text is None or "global" in text or "nonlocal" in text:
            declarations, statements = _hoist_declarations(statements)

        normalizer = Normalizer()
        normalizer.origin.update(
            {new: old for new, old in self.origin.items() if isinstance(new, (cst.Yield, cst.For))}
        )
        normalized = normalizer.body(statements)
        for bad, message, hint in normalizer.unsupported:
            where = self.origin.get(bad, bad)
            reporter.error(where if where in reporter.positions else original, message, hint)
        if normalizer.unsupported:
            return node
        lowerer = Lowerer(normalizer.origin, lambda written: reporter.where(written)[0])
        lowered = lowerer.block(normalized)

        line, _ = reporter.where(original)
        code = text if text is not None else self.module.code_for_node(original)
        digest = hashlib.sha256((COMPILER_VERSION + "\0" + qualname + "\0" + code).encode()).hexdigest()[:16]
        compiled = CompiledFunction(qualname, kind, line, digest, reporter.span(original)[2])
        for site in lowerer.sites:
            span = reporter.span(site.node)
            compiled.sites.append(
                {"label": site.label, "line": span[0], "column": span[1], "span": span, "delegates": site.delegates}
            )
        self.split_graph(original, compiled)
        self.warn_unyielded(original, kind)

        params = _flat_params(node.params)
        every = (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)
        compiled.defaults = _literal_defaults(every, self.module)
        hidden = {f"_bc_t{n}" for n in range(1, normalizer.temps + 1)} | lowerer.names
        hidden |= {f"_bc_{kind}{n}" for n in range(1, len(normalizer.withs) + 1) for kind in ("wm", "wx", "wf")}
        local_names, captured_names, free_names, type_names = self.locals.get(qualname, (set(), set(), set(), set()))
        # Variables a nested function captures live in cells of the public function: the body
        # declares them nonlocal, so a snapshot carries the cells themselves and a resume hands
        # them back as the body's closure, shared with every function that captured them.
        captured_names = set(captured_names)
        body_args = [p for p in params if p not in captured_names]
        restorable = sorted((local_names | set(params) | hidden) - _INTERNAL - captured_names)
        compiled.restorable = restorable
        compiled.type_params = sorted(type_names)  # cells of the definition, not of a run: they never travel
        unseen = local_names | free_names | set(params)

        def is_global(name: str) -> bool:  # a global (or builtin) of the module, bound once, as the code finds it
            return name not in unseen and name not in self.rebound

        definition = self.reporter.positions.definition(original)
        kinds = value_kinds(definition, is_global) if definition is not None else {}
        holds = {name: found for name, found in kinds.items() if name in local_names or name in params}
        exits = {}
        for n, manager in enumerate(normalizer.managers, start=1):
            made = cst_kinds(manager, holds, is_global)
            exits[f"_bc_wx{n}"] = made
            if made is not None:
                holds[f"_bc_wm{n}"] = sorted(made)
        compiled.holds = holds
        compiled.binds = callable_bindings(
            lowered, set(restorable), exits, walrus=text is None or ":=" in text, holds=holds, is_global=is_global
        )
        compiled.catches = _catches(lowerer.catches, unseen)
        for n, with_node in enumerate(normalizer.withs, start=1):
            with_line = reporter.where(self.origin.get(with_node, with_node))[0]
            what = f"the context manager of the `with` at line {with_line}"
            compiled.notes |= {f"_bc_wm{n}": what, f"_bc_wx{n}": f"the __exit__ of {what}"}
        live, captured = live_variables(lowered, lowerer.yield_nodes)
        keep = set(restorable)
        if params and (text is None or "super" in text):
            captured = captured | {params[0]}  # zero-argument super() reads the first argument implicitly
        for site in lowerer.sites:
            names = set(live.get(site.label, ())) | (captured & keep)
            names |= set(lowerer.pending_vars.get(site.label, ()))
            names |= set(lowerer.handler_vars.get(site.label, ()))
            if site.delegates:
                names.add(f"_bc_yf{site.label}")
            for n in range(1, len(normalizer.withs) + 1):
                if f"_bc_wx{n}" in names:  # a resume checks the kept __exit__ against the kept manager
                    names.add(f"_bc_wm{n}")
            compiled.live[site.label] = sorted(names & keep)
        self.functions.append(compiled)
        called = set(_CALLED.findall(text)) if text is not None else None
        if (
            called is None
            or called & _HANDLES.keys()
            or called & self.targets.context_managers
            or any(map(self.targets.is_native_generator, called & self.targets.module_defs.keys()))
        ):
            self.warn_untravelable(statements, compiled)

        placeholder = f"_bc_prologue_{len(self.prologues)}"
        prologue = simple(cst.Expr(cst.Name(placeholder)))
        key = cst.SimpleString(repr(qualname))
        mark = cst.Call(_runtime("compiled"), [cst.Arg(cst.Name("_bc_META")), cst.Arg(key)])
        decorators = [*node.decorators, cst.Decorator(decorator=mark)]
        if not captured_names and not free_names:
            # The common shape: the function itself is the generator function, re-entered by its prologue.
            self.prologues[placeholder] = _prologue(restorable, params)
            return node.with_changes(body=block([*docstring, *declarations, prologue, *lowered]), decorators=decorators)
        # With cells (variables a nested function captures, or free names of an enclosing scope) the
        # body is a generator nested in the function: a resume can then hand it the very cells.
        self.prologues[placeholder] = _prologue(restorable, body_args)
        body_params = cst.Parameters(params=[cst.Param(cst.Name(p)) for p in [*body_args, "_bc_C"]])
        if captured_names:
            declarations = [cst.parse_statement(f"nonlocal {', '.join(sorted(captured_names))}\n"), *declarations]
        body_def = cst.FunctionDef(
            name=cst.Name(f"{PREFIX}body"), params=body_params, body=block([*declarations, prologue, *lowered])
        )
        unbound = sorted(captured_names - set(params))
        if unbound:  # bound nowhere in the public function yet: make them its (empty) cells
            nones = ", ".join(["None"] * len(unbound))
            docstring = [*docstring, cst.parse_statement(f"if False: {', '.join(unbound)} = {nones}\n")]
        # return _bc_body(<args>, _bc_body.__closure__): the body's generator, which keeps its cells
        body_name = cst.Name(f"{PREFIX}body")
        cells = cst.Attribute(body_name, cst.Name("__closure__"))
        call = cst.Call(body_name, [*(cst.Arg(cst.Name(a)) for a in body_args), cst.Arg(cells)])
        return node.with_changes(body=block([*docstring, body_def, simple(cst.Return(call))]), decorators=decorators)


def _catches(found: dict[int, dict[str, list[str] | None]], unseen: set[str]) -> dict[int, dict[str, list[str]]]:
    """The lowerer's `catches`, with the names a resume can look up as the code does: a clause that
    names a local or free variable (`except errors:`, a tuple built here) is known only as it runs, so its
    variable keeps Exceptions only (as where nothing is recorded); a finally's other names stay."""
    out: dict[int, dict[str, list[str]]] = {}
    for label, held in sorted(found.items()):
        for variable, names in held.items():
            if names is None:
                continue
            known = [name for name in names if name == "*" or name.split(".", 1)[0] not in unseen]
            if variable.startswith("_bc_exc") and len(known) != len(names):
                continue
            if known:
                out.setdefault(label, {})[variable] = known
    return out


def _runtime(attribute: str) -> cst.Attribute:
    return cst.Attribute(cst.Name("_bc_rt"), cst.Name(attribute))


_CALLED = re.compile(r"(\w+)\s*\(")
_HANDLES = {
    "open": ("an open file", "close it before the yield, or keep its path and reopen it after"),
    "Lock": ("a lock", "release it and drop it before the yield; locks cannot move to another process"),
    "RLock": ("a lock", "release it and drop it before the yield; locks cannot move to another process"),
    "Semaphore": ("a semaphore", "drop it before the yield; it cannot move to another process"),
    "Condition": ("a condition", "drop it before the yield; it cannot move to another process"),
    "socket": ("a socket", "close it before the yield, and reconnect after"),
    "connect": ("a connection", "close it before the yield (do I/O in before() or after())"),
}


class _Handles(cst.CSTVisitor):
    """`x = open(...)`-like assignments, and `with open(...):` blocks that yield: values that can
    never travel in a snapshot."""

    def __init__(self, is_native_generator, context_managers: set[str]) -> None:
        self.found: list[tuple[cst.Assign, str, str, str]] = []
        self.withs: list[tuple[cst.With, str, str]] = []
        self.is_native_generator = is_native_generator
        self.context_managers = context_managers

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_With(self, node: cst.With) -> None:
        if not contains_yield(list(node.body.body)):
            return
        for item in node.items:
            value = item.item
            if not isinstance(value, cst.Call):
                continue
            func = value.func
            callee = (
                func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
            )
            if callee in _HANDLES:
                self.withs.append((node, *_HANDLES[callee]))
            elif callee in self.context_managers:
                hint = (
                    f"{callee} is a @contextmanager generator, which cannot travel; write it as a class with "
                    f"__enter__ and __exit__ in a module of the build, or end the with block before the yield"
                )
                self.withs.append((node, f"made by {callee}(), a @contextmanager", hint))

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        if not isinstance(node.value, cst.Call):
            return
        func = node.value.func
        callee = (
            func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        )
        target = node.targets[0].target.value
        if callee in _HANDLES:
            what, hint = _HANDLES[callee]
            self.found.append((node, target, what, hint))
        elif isinstance(func, cst.Name) and self.is_native_generator(callee):
            hint = f"mark {callee} @resumable so it compiles, or finish it before the yield"
            self.found.append((node, target, f"a native generator ({callee}(...))", hint))


def _within(outer: list[int], inner: list[int]) -> bool:
    """Whether span `inner` lies inside span `outer` ([line, column, end line, end column])."""
    return tuple(outer[:2]) <= tuple(inner[:2]) and tuple(inner[2:]) <= tuple(outer[2:])


def _prologue(restorable: list[str], params: list[str]) -> list[str]:
    """Resuming: take the label to reach and restore each saved variable (unsaved ones stay unbound;
    a parameter that was not saved is unbound again, as it was when the snapshot was taken). A fresh
    run finds no resume record waiting for this code, and goes on at the first statement.
    Emitted as text: it is long and regular, and as nodes it cost more than the rest of the function."""
    lines = [
        "_bc_T = 0",
        "_bc_R = _bc_rt.resuming()",
        "if _bc_R is not None:",
        "    _bc_T, _bc_L = _bc_R.label, _bc_R.values",
    ]
    for n in restorable:
        if n in params:
            lines += [f"    if {n!r} in _bc_L:", f"        {n} = _bc_L[{n!r}]", "    else:", f"        del {n}"]
        else:
            lines.append(f"    if {n!r} in _bc_L: {n} = _bc_L[{n!r}]")
    lines.append("    _bc_L = _bc_R = None")
    return lines


def _expand_prologues(lines: list[str], prologues: dict[str, list[str]]) -> list[str]:
    """Put each prologue's text where its placeholder statement was generated."""
    out: list[str] = []
    for line in lines:
        text = prologues.get(line.strip())
        if text is None:
            out.append(line)
        else:
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + row for row in text]
    return out


def _suites(node: cst.CSTNode):
    """The bodies of `node` and of the statements in it (not inside expressions)."""
    stack = [node]
    while stack:
        current = stack.pop()
        body = getattr(current, "body", None)
        if isinstance(body, cst.SimpleStatementSuite):
            yield body
        elif isinstance(body, cst.IndentedBlock):
            stack.extend(body.body)
        elif isinstance(body, (list, tuple)):
            stack.extend(body)
        for part in ("orelse", "handlers", "finalbody", "cases"):
            value = getattr(current, part, None)
            if isinstance(value, (list, tuple)):
                stack.extend(value)
            elif value is not None:
                stack.append(value)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _hoist_declarations(statements):
    """`global` / `nonlocal` apply to the whole body: move them to its top."""
    declarations: list[cst.BaseStatement] = []

    class Collect(cst.CSTTransformer):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def leave_SimpleStatementLine(self, original, updated):
            kept = []
            for small in updated.body:
                if isinstance(small, (cst.Global, cst.Nonlocal)):
                    declarations.append(simple(small))
                else:
                    kept.append(small)
            if len(kept) == len(updated.body):
                return updated
            return updated.with_changes(body=kept) if kept else cst.RemovalSentinel.REMOVE

    class Find(cst.CSTVisitor):
        found = False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_Global(self, node: cst.Global) -> None:
            self.found = True

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            self.found = True

    collector = Collect()
    remaining = []
    for statement in statements:
        finder = Find()
        walk(statement, finder)
        new = statement.visit(collector) if finder.found else statement
        if not isinstance(new, cst.RemovalSentinel):
            remaining.append(new)
    return declarations, remaining
