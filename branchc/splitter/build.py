"""`branchc compile` / `branchc check`: compile trees of source files, write modules and a manifest.

For each source file, OUT gets a module of the same name (folders keep their
package structure): the compiled text, readable, which on import gives its
functions the source's file name and line numbers (see continuation/relocate.py), so
tracebacks point at what you wrote. `OUT/branchc.json` describes every compiled
function and every tool, and names the sources it was built from and each module's file.
An unchanged file (same text and place, same compiler: `_digest`) is not compiled again, and a
build where nothing changed writes nothing. A module's tools are read by importing it in another
process, and only a module with a client phase is imported.

A build folder is the compiler's own: it writes only into a new or empty folder or one holding a
manifest (a build), and after each build the folder holds exactly the modules the manifest lists
(a module whose source is gone is removed, with its bytecode and the package folders it leaves
empty). The manifest is written before the first module goes into a new folder and replaced
atomically, so an interrupted build leaves a folder the next build still knows as its own.
Without `-o`, `branchc compile` writes to `default_build_folder(sources)`.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from .. import __version__
from .diagnostics import Diagnostic
from .version import COMPILER_VERSION

if TYPE_CHECKING:  # the compiler (and LibCST) and process pools are loaded only when a file needs compiling
    from concurrent.futures import Executor

    from .compiler import Compiled, CompiledModule

__all__ = [
    "BuildError",
    "BuildResult",
    "SourceFile",
    "build",
    "build_folder",
    "build_workers",
    "check",
    "default_build_folder",
    "find_sources",
    "sources_build",
]

MANIFEST = "branchc.json"
_TEMPORARY = re.compile(rf"\.{re.escape(MANIFEST)}\.[\d.]+\.tmp")  # the manifest being written


@dataclass(frozen=True)
class SourceFile:
    path: Path  # as given (for messages)
    relative: Path  # where it goes under OUT

    @property
    def module(self) -> str:
        parts = list(self.relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)


@dataclass
class BuildResult:
    compiled: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def find_sources(sources: Iterable[str | Path], *, skip: Iterable[str | Path] = ()) -> list[SourceFile]:
    """Python files under each source (a file, or a folder searched recursively). The search passes
    over hidden folders and __pycache__, over builds (a folder holding branchc.json: compiled output is
    never a source, so `compile . -o build` does not read its own output the next time), over the
    folders in `skip` (compile's -o, even before it holds a manifest) and over the compile cache."""
    skipped = {os.path.realpath(folder) for folder in (*skip, cache_root())}
    found: list[SourceFile] = []
    for source in map(Path, sources):
        if source.is_dir():
            paths = []
            for folder, folders, names in os.walk(source):
                folders[:] = [name for name in folders if not _passed_over(os.path.join(folder, name), name, skipped)]
                paths += [Path(folder, name) for name in names if name.endswith(".py") and not name.startswith(".")]
            for path in sorted(paths):
                found.append(SourceFile(path, path.relative_to(source)))
        elif source.is_file():
            found.append(SourceFile(source, Path(source.name)))
        else:
            raise FileNotFoundError(f"{source}: no such file or folder")
    return found


def _passed_over(folder: str, name: str, skipped: set[str]) -> bool:
    if name.startswith(".") or name == "__pycache__":
        return True
    return os.path.isfile(os.path.join(folder, MANIFEST)) or os.path.realpath(folder) in skipped


_FINGERPRINT: str | None = None


def _fingerprint() -> str:
    """What a module's compiled form and manifest entry depend on besides its text and place: the
    compiler's own files (an edited compiler rebuilds without a version bump), LibCST and Python,
    and branchc and pydantic, which describe the tools. Read once per process."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from importlib.metadata import PackageNotFoundError, version

        import pydantic

        digest = hashlib.sha256(f"{COMPILER_VERSION}\0{__version__}\0{sys.version}\0{pydantic.VERSION}".encode())
        try:
            digest.update(version("libcst").encode())
        except PackageNotFoundError:  # not installed as a distribution: its files' dates stand in
            digest.update(str(os.stat(os.path.dirname(importlib.util.find_spec("libcst").origin)).st_mtime).encode())
        for path in sorted(Path(__file__).parent.glob("*.py")):
            digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
        _FINGERPRINT = digest.hexdigest()
    return _FINGERPRINT


def _digest(source: SourceFile, text: str) -> str:
    """The manifest's `hash` of a module: its text, where it is (the compiled text names the source's
    path) and the compiler (`_fingerprint`)."""
    return hashlib.sha256(f"{_fingerprint()}\0{source.path.resolve()}\0{text}".encode()).hexdigest()


def check(sources: Iterable[str | Path]) -> list[Diagnostic]:
    """Diagnostics for every file; nothing is written."""
    jobs, diagnostics = _read_all(find_sources(sources))
    with _workers(len(jobs)) as pool:
        _compile_all(jobs, pool, lambda source, compiled, found: diagnostics.extend(found))
    return diagnostics


def _read_all(files: list[SourceFile]) -> tuple[list[tuple[SourceFile, str]], list[Diagnostic]]:
    jobs, diagnostics = [], []
    for source in files:
        try:
            jobs.append((source, source.path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            diagnostics.append(Diagnostic(str(source.path), 1, 1, "error", f"cannot read it: {error}"))
    return jobs, diagnostics


def _compile_chunk(paths: list[str], texts: list[str]) -> list[Compiled]:
    from .compiler import compile_each

    return compile_each(list(zip(texts, paths, strict=True)))


def _compile_all(
    jobs: list[tuple[SourceFile, str]],
    pool: Executor | None,
    each: Callable[[SourceFile, CompiledModule | None, list[Diagnostic]], object],
) -> None:
    """`each(source, compiled module or None, diagnostics)` for every job, in order, as they are done:
    compiled in `pool`'s processes a chunk at a time, or else here."""
    if not jobs:
        return
    if pool is None:
        from .compiler import compile_each

        compile_each([(text, str(source.path)) for source, text in jobs], lambda i, *done: each(jobs[i][0], *done))
        return
    size = max(1, len(jobs) // (build_workers(len(jobs)) * 8))  # the pool's size, as _workers made it
    chunks = [jobs[start : start + size] for start in range(0, len(jobs), size)]
    results = pool.map(
        _compile_chunk,
        [[str(source.path) for source, _ in chunk] for chunk in chunks],
        [[text for _, text in chunk] for chunk in chunks],
    )
    for chunk, compiled_chunk in zip(chunks, results, strict=True):
        for (source, _), (compiled, diagnostics) in zip(chunk, compiled_chunk, strict=True):
            each(source, compiled, diagnostics)


# Below this many files per process, another process costs more than it saves.
_FILES_PER_WORKER = 8


def build_workers(files: int) -> int:
    """How many processes compile a tree of `files` changed files (1: this one)."""
    if not _can_fork():
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), files // _FILES_PER_WORKER))


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


@contextmanager
def _workers(files: int) -> Iterator[Executor | None]:
    """A pool of processes to compile on, when the tree is large enough to gain from one; else None."""
    workers = build_workers(files)
    if workers < 2:
        yield None
        return
    # Workers are forked, so they start with the compiler imported and need nothing from
    # __main__ (spawn would run it again). Only the compiler runs in them; the CLI's progress
    # bar refreshes without a thread of its own, so no other thread's lock is copied held.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from . import compiler  # noqa: F401  (loaded before the fork, once for every worker)

    _load_branchc()  # and what the modules they read the tools of import
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield pool


def default_build_folder(sources: Iterable[str | Path]) -> Path:
    """Where `branchc compile SOURCES` writes without `-o`: `build` inside the folder that holds the
    first source, so beside it. For a folder `tools` that is `./build`, for `examples/tools`
    `examples/build`, for a file `tools/a.py` `tools/build`. When the first source is the current
    folder or contains it (`branchc compile .`, `branchc compile ..`), it is `./build`: never a
    folder above the current one. The path is relative when the source is."""
    first = next(iter(sources), None)
    if first is None:
        raise BuildError("no sources given")
    source = Path(os.path.normpath(first))
    here, real = os.path.realpath(os.getcwd()), os.path.realpath(source)
    if real == here or here.startswith(real.rstrip(os.sep) + os.sep):
        return Path("build")
    return source.parent / "build"


def sources_build(path: str | Path) -> Path:
    """The folder `build_folder` compiles the sources `path` into: their default build folder
    (`default_build_folder`) when `branchc compile` made it from exactly these sources (its manifest's
    `sources`), else their folder in the cache."""
    path = Path(path)
    default = default_build_folder([path])
    if _manifest_of(default).get("sources") == [str(path.resolve())]:
        return default
    return cache_folder(path)


def build(
    sources: Iterable[str | Path],
    out: str | Path,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> BuildResult:
    """Compile `sources` into `out`; files whose content did not change since the last build are kept.

    `out` is the compiler's own: a folder that holds files but no manifest is refused (BuildError,
    nothing written). Afterwards it holds exactly the modules the manifest lists: the modules of a
    previous build whose source is gone (or no longer compiles) are removed. When nothing changed
    (every module's `hash`, the module files, the manifest), nothing is written and the compiler is
    not loaded."""
    out = Path(out)
    sources = [Path(source) for source in sources]
    files = find_sources(sources, skip=[out])
    for source in files:
        if _same_file(out / source.relative, source.path):
            raise BuildError(f"{source.path}: compiling into {out} would write over this source; give another folder")
    _claim(out)
    previous_manifest = _manifest_of(out)
    previous = previous_manifest.get("modules")
    if not isinstance(previous, dict):
        previous = {}
    header = {
        "branchc": __version__,
        "compiler": COMPILER_VERSION,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "sources": [str(source.resolve()) for source in sources],
    }
    result = BuildResult()
    modules: dict[str, Any] = {}
    jobs, result.diagnostics = _read_all(files)
    todo: list[tuple[SourceFile, str]] = []
    digests: dict[SourceFile, str] = {}
    for source, text in jobs:
        digest = digests[source] = _digest(source, text)
        old = previous.get(source.module)
        if (
            isinstance(old, dict)
            and old.get("hash") == digest
            and "warnings" in old
            and old.get("file", source.relative.as_posix()) == source.relative.as_posix()
            and (out / source.relative).is_file()
        ):
            modules[source.module] = {**old, "file": source.relative.as_posix()}
            result.cached.append(source.module)
            result.diagnostics += _replayed(str(source.path), old.get("warnings"))  # as if compiled again
        else:
            todo.append((source, text))
    known = _known_files(previous_manifest)
    if not todo and not known - {entry["file"] for entry in modules.values()}:
        if {**header, "modules": modules} != previous_manifest:  # the same modules, from other sources or a
            _write_manifest(out, {**header, "modules": modules})  # manifest of an older branchc, say
        return result
    if todo:
        # before the first module is written: the folder is claimed, and the manifest names every
        # module file the folder may hold, so an interrupted build leaves nothing the next cannot remove
        rewritten = {source.module for source, _ in todo}
        kept = {name: entry for name, entry in previous.items() if name not in rewritten}
        pending = known | {source.relative.as_posix() for source, _ in todo}
        _write_manifest(out, {**header, "modules": kept, "pending": sorted(pending)})
    done = len(files) - len(todo)

    def finish(source: SourceFile, compiled: CompiledModule | None, diagnostics: list[Diagnostic]) -> None:
        nonlocal done
        if progress is not None:
            progress(done, len(files), str(source.path))
        done += 1
        result.diagnostics += diagnostics
        if compiled is None:
            return
        _write(out / source.relative, compiled)
        modules[source.module] = {
            "source": str(source.path),
            "file": source.relative.as_posix(),
            "hash": digests[source],
            "functions": [f.manifest() for f in compiled.functions],
            "classes": compiled.classes,
            "tools": [],
            "warnings": [[d.line, d.column, d.message, d.hint] for d in diagnostics if d.severity == "warning"],
        }
        result.compiled.append(source.module)

    with _workers(len(todo)) as pool:
        _compile_all(todo, pool, finish)
        if progress is not None:
            progress(len(files), len(files), "")
        # what the manifest will not list goes before the modules are imported: none can import it
        _remove_stale(out, known - {entry["file"] for entry in modules.values()}, files)
        # the modules to import for their tools: those compiled now, and those unchanged that may import
        # one that changed or is gone (a class their tool takes may have changed with it)
        changed = set(result.compiled) | (set(previous) - set(modules))
        cached = set(result.cached)
        texts = {source.module: text for source, text in jobs if source.module in cached}
        names = [name for name in result.compiled if _has_client(modules[name])]
        names += sorted(name for name in _naming(changed, texts) if _has_client(modules[name]))
        if not result.errors:  # every module is written: now they can import each other
            described = _describe_all(str(out.resolve()), names, pool, build_workers(len(todo)))
            for name, (tools, problem) in zip(names, described, strict=True):
                if problem is not None:
                    result.diagnostics.append(Diagnostic(modules[name]["source"], 1, 1, "error", problem))
                    modules[name]["hash"] = None  # not up to date: the next build imports it again
                modules[name]["tools"] = tools
        else:
            for name in names:  # their tools are not known: the next build compiles them again
                modules[name]["hash"] = None
    _write_manifest(out, {**header, "modules": modules})
    _forget(changed | set(names))
    return result


def _forget(names: set[str]) -> None:
    """Drop from this process the modules `names` (what the build wrote anew or removed, or what
    imports that) when imported from a build, this one or another by the same names: an import after
    the build then finds what is there now."""
    for name in names:
        origin = getattr(getattr(sys.modules.get(name), "__spec__", None), "origin", None)
        if isinstance(origin, str) and any((folder / MANIFEST).is_file() for folder in Path(origin).parents):
            del sys.modules[name]


def _has_client(entry: dict[str, Any]) -> bool:
    """Whether a module's manifest entry lists a tool's client phase: only then can the module hold a
    tool of its own (the manifest lists a tool under the module of its client), and only then is it
    imported to read it."""
    functions = entry.get("functions")
    return isinstance(functions, list) and any(isinstance(f, dict) and f.get("kind") == "client" for f in functions)


_WORD = re.compile(r"\w+")


def _naming(changed: set[str], texts: dict[str, str]) -> set[str]:
    """The modules of `texts` (name -> source) that name a module of `changed` (by its last part, as
    `import pkg.mod` and `from . import mod` do), or name one that does, and so on."""
    if not changed or not texts:
        return set()
    words = {name: set(_WORD.findall(text)) for name, text in texts.items()}
    found: set[str] = set()
    frontier = set(changed)
    while frontier:
        parts = {name.rpartition(".")[2] for name in frontier}
        frontier = {name for name, named in words.items() if name not in found and not named.isdisjoint(parts)}
        found |= frontier
    return found - changed


def _same_file(path: Path, other: Path) -> bool:
    """Whether writing `path` would write `other` (a link to it, or the file itself): by its identity,
    a stat each, where comparing their real paths looks at every folder on the way."""
    try:
        return os.path.samefile(path, other)
    except OSError:  # `path` is not there yet
        return False


def _claim(out: Path) -> None:
    """Refuse `out` unless the compiler may write there: a new or empty folder, or a build (it holds
    a manifest). Nothing is written when it is refused."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out}: is a file, not a folder; give a new or empty folder for the build")
    if not out.is_dir() or (out / MANIFEST).is_file():
        return
    try:  # a manifest's temporary file, left by a build killed while writing it, is the compiler's own
        foreign = any(not _TEMPORARY.fullmatch(entry.name) for entry in out.iterdir())
    except OSError as error:
        raise BuildError(f"{out}: cannot read this folder ({error.strerror}); give another folder") from None
    if foreign:
        raise BuildError(
            f"{out}: this folder is not empty and is not a branchc build (it has no {MANIFEST}); the compiler "
            f"writes only into a folder of its own: give a new or empty folder, or remove {out}"
        )


def _manifest_of(folder: Path) -> dict[str, Any]:
    """The manifest in `folder`, or {} when it has none (or none this branchc can read)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """Write OUT/branchc.json whole or not at all: a temporary file beside it, then os.replace."""
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / f".{MANIFEST}.{os.getpid()}.{threading.get_ident()}.tmp"  # matches _TEMPORARY
    try:
        temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, out / MANIFEST)
    finally:
        temporary.unlink(missing_ok=True)


def _known_files(manifest: dict[str, Any]) -> set[str]:
    """Every module file (relative, POSIX) a manifest says its folder may hold: each module's `file`,
    or for a manifest from before modules named their file, the files the compiler would have
    written for its name; and the files an interrupted build was writing (`pending`)."""
    files: set[str] = set()
    modules = manifest.get("modules")
    for name, entry in modules.items() if isinstance(modules, dict) else ():
        recorded = entry.get("file") if isinstance(entry, dict) else None
        if isinstance(recorded, str):
            files.add(recorded)
        elif isinstance(name, str) and name:
            stem = name.replace(".", "/")
            files |= {f"{stem}.py", f"{stem}/__init__.py"}
    pending = manifest.get("pending")
    files |= {file for file in pending if isinstance(file, str)} if isinstance(pending, list) else set()
    return {file for file in files if _safe_module_file(file)}


def _safe_module_file(file: str) -> bool:
    """A path a build may remove: relative, inside the folder, a .py file."""
    path = PurePosixPath(file)
    return file.endswith(".py") and not path.is_absolute() and ".." not in path.parts and "\\" not in file


def _remove_stale(out: Path, stale: set[str], sources: list[SourceFile]) -> None:
    """Remove the module files `stale` (relative to `out`) with their bytecode, then the package
    folders they leave empty. Never a source file, never a file outside `out`."""
    root = os.path.realpath(out)
    keep = {os.path.realpath(source.path) for source in sources}
    for file in sorted(stale):
        target = out / file
        real = os.path.realpath(target)
        if real in keep or not real.startswith(root + os.sep) or not target.is_file():
            continue
        target.unlink()
        for compiled in (target.parent / "__pycache__").glob(f"{glob.escape(target.stem)}.*.pyc"):
            compiled.unlink(missing_ok=True)
        folder = target.parent
        while folder != out and os.path.realpath(folder).startswith(root + os.sep):
            with suppress(OSError):
                (folder / "__pycache__").rmdir()  # only when empty
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
            folder = folder.parent


def _replayed(path: str, warnings: Any) -> list[Diagnostic]:
    """The warnings a manifest recorded for an unchanged module."""
    try:
        return [
            Diagnostic(path, int(line), int(column), "warning", str(message), str(hint))
            for line, column, message, hint in warnings or ()
        ]
    except (TypeError, ValueError):  # a manifest from elsewhere: nothing to repeat
        return []


def _write(target: Path, compiled: CompiledModule) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    text = compiled.module_text(str(Path(compiled.path).resolve())) if compiled.functions else compiled.code
    target.write_text(text, encoding="utf-8")


Described = tuple[list[dict], str | None]  # a module's tools, and what went wrong importing it


def _describe_all(root: str, names: list[str], pool: Executor | None, workers: int) -> list[Described]:
    """The tools of each module `names` of the build `root`, read by importing it in another process,
    never this one (an import runs the module's code): `pool`'s (its `workers`), else one forked for
    it, else (no fork, or other threads here, which a fork would copy mid-flight) a fresh interpreter."""
    if not names:
        return []
    if pool is None and (not _can_fork() or threading.active_count() > 1):
        return _describe_elsewhere(root, names)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        if pool is None:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as own:
                return own.submit(_describe_many, root, names).result()
        size = max(1, len(names) // (workers * 8))  # a few chunks a worker: a round trip costs a millisecond
        chunks = [names[start : start + size] for start in range(0, len(names), size)]
        return [found for chunk in pool.map(_describe_many, [root] * len(chunks), chunks) for found in chunk]
    except BrokenProcessPool:
        problem = "importing the compiled modules to read their tools ended the process (os._exit or a crash)"
        return [([], problem)] * len(names)


def _describe_many(root: str, names: list[str]) -> list[Described]:
    _load_branchc()
    return [_describe(root, name) for name in names]


def _load_branchc() -> None:
    """Load what a tool module imports from branchc (the package loads its names on first use): loaded
    while one module was read, it would be forgotten with that module's own imports (`_describe`)."""
    from .. import tool  # noqa: F401


# the interpreter that reads the tools: sys.path as here, then the request
_CHILD = (
    "import json, sys; request = json.load(sys.stdin); sys.path[:] = request['path']; "
    "from branchc.splitter.build import _describe_main; _describe_main(request)"
)


def _describe_elsewhere(root: str, names: list[str]) -> list[Described]:
    request = json.dumps({"path": sys.path, "root": root, "names": names})
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD], input=request, stdout=subprocess.PIPE, encoding="utf-8", check=False
        )
        found = json.loads(done.stdout) if done.returncode == 0 else done.returncode
    except (OSError, ValueError) as error:  # no interpreter to start, or no answer from it
        found = error
    if not isinstance(found, list) or len(found) != len(names):
        problem = f"importing the compiled modules to read their tools failed in their own process ({found!r})"
        return [([], problem)] * len(names)
    return [(tools, problem) for tools, problem in found]


def _describe_main(request: dict[str, Any]) -> None:
    """In the interpreter `_describe_elsewhere` starts: the tools of each module, as JSON on stdout."""
    answer = sys.stdout
    sys.stdout = sys.stderr  # what the modules print is not the answer
    found = _describe_many(request["root"], request["names"])
    answer.write(json.dumps(found))
    answer.flush()


def _describe(root: str, name: str) -> Described:
    """Import one compiled module from OUT and record its tools: name, description, schema, requires,
    limits. Relocation is skipped: only the tools are read."""
    from ..continuation.relocate import relocation_paused

    sys.path.insert(0, root)
    sys.modules.pop(name, None)
    before = set(sys.modules)
    try:
        with relocation_paused():
            module = importlib.import_module(name)
    except Exception as error:  # user code: report, do not crash
        return [], f"importing the compiled module failed: {error!r}"
    finally:
        sys.path.remove(root)
        for added in set(sys.modules) - before:  # imported unrelocated: a real import must start afresh
            del sys.modules[added]
    # tools describe themselves (the runtime's Tool has __branchc_manifest__): the compiler knows no tool type
    tools = [
        value.__branchc_manifest__()
        for value in vars(module).values()
        if not isinstance(value, type)
        and hasattr(type(value), "__branchc_manifest__")
        and getattr(getattr(value, "client_fn", None), "__module__", name) == name  # not imported ones
    ]
    return tools, None


class BuildError(ValueError):
    """Sources that do not compile, or a path that holds neither sources nor a build; `out`, when set,
    is the build folder that was written all the same (a module compiled but failed to import)."""

    out: Path | None = None


def cache_folder(source: Path) -> Path:
    """Where the compiled form of `source` is kept ($BRANCHC_CACHE, else the user's cache folder)."""
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
    return cache_root() / f"{source.name or 'root'}-{digest}"


def cache_root() -> Path:
    """The folder of every cached build: $BRANCHC_CACHE, else the user's cache folder."""
    return Path(
        os.environ.get("BRANCHC_CACHE")
        or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "branchc")
    )


def _print_warning(diagnostic: Diagnostic) -> None:
    print(diagnostic, file=sys.stderr)


def build_folder(path: str | Path, warn: Callable[[Diagnostic], None] | None = _print_warning) -> Path:
    """A build of `path`: the folder itself when it is a build, else its sources compiled (rebuilt
    only where they changed) into their default build folder when `branchc compile` made it from
    them, or else into the cache (`sources_build`). `warn` is given each compiler warning of the sources,
    unchanged ones too (the manifest keeps them); by default they go to stderr, compiler style, so
    that `serve`, `run` and `graph` on sources show what `check` would."""
    path = Path(path)
    if not path.exists():
        raise BuildError(f"{path}: no such file or folder; give tool sources or a build folder")
    if path.is_dir() and (path / MANIFEST).is_file():
        return path
    out = sources_build(path)
    result = build([path], out)
    if result.errors:
        shown = "\n".join(str(d) for d in result.errors[:10])
        error = BuildError(f"{path}: the tools do not compile:\n{shown}")
        error.out = out
        raise error
    for diagnostic in result.diagnostics if warn is not None else ():
        warn(diagnostic)
    return out
