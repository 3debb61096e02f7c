"""A lean install (issue 20): `pip install branchc` authors, compiles, runs and serves; Redis, PostgreSQL, Monty
and dask are extras, and a feature used without its extra is one error naming it.

A missing package is simulated in a real subprocess: `sys.modules[name] = None` before anything else is
imported makes every `import name` there fail as if the package were not installed (no sitecustomize, no
change to this environment). The CLI runs as `branchc` would, from `branchc.cli.main()`.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest
from _bridge_support import EXAMPLES, Scripted, native_run, within
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning

from branchc import BranchcError, MissingExtraError
from branchc.extras import EXTRAS, missing_extra

warnings.simplefilter("ignore", MCPDeprecationWarning)

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "examples" / "tools" / "pick_card.py"
RESPONSES = ROOT / "examples" / "responses" / "pick_card.yaml"

#: every module an extra brings: none may be needed to author, compile, run or serve
BLOCKED = (
    "redis", "psycopg", "psycopg_pool", "pydantic_monty", "distributed", "dask", "opentelemetry.sdk",
    "opentelemetry.exporter.prometheus",
)  # fmt: skip

MESSAGES = {
    "redis": "the Redis store needs the redis package: pip install 'branchc[redis]'",
    "postgres": "the PostgreSQL store needs the psycopg package: pip install 'branchc[postgres]'",
    "postgres-pool": "the PostgreSQL store needs the psycopg-pool package: pip install 'branchc[postgres]'",
    "handlers": "the Monty result-handler engine needs the pydantic-monty package: pip install 'branchc[handlers]'",
    "dask": "the dask executor needs the distributed package: pip install 'branchc[dask]'",
    "otel": "exporting traces needs the opentelemetry-sdk package: pip install 'branchc[otel]'",
    "metrics": "exporting metrics needs the opentelemetry-exporter-prometheus package: pip install 'branchc[otel]'",
}


def without(modules: tuple[str, ...], code: str) -> str:
    """`code` preceded by what makes `modules` unimportable, as if they were not installed."""
    return f"import sys\nfor _name in {modules!r}:\n    sys.modules[_name] = None\n{code}"


def cli(modules: tuple[str, ...]) -> str:
    return without(modules, "from branchc.cli import main\nmain()\n")


def run(code: str, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,  # a server that did start would end at once
        env={**os.environ, **env},
        cwd=ROOT,
    )


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_STATE_DIR": str(tmp_path / "state")}


# -- a feature without its extra: one error naming the extra -------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "blocked", "args"),
    [
        ("redis", ("redis",), ["serve", str(TOOL), "--store", "redis://127.0.0.1:6379/0"]),
        ("redis", ("redis",), ["serve", str(TOOL), "--http", "127.0.0.1:0", "--store", "rediss://127.0.0.1:6380/1"]),
        ("redis", ("redis",), ["runs", "list", "--store", "redis://127.0.0.1:6379/0"]),
        ("postgres", ("psycopg",), ["serve", str(TOOL), "--store", "postgresql://branchc@127.0.0.1:5432/branchc"]),
        ("postgres", ("psycopg", "psycopg_pool"), ["runs", "list", "--store", "postgres://127.0.0.1/db?schema=x"]),
        ("postgres-pool", ("psycopg_pool",), ["runs", "list", "--store", "postgresql://127.0.0.1/db"]),
        ("handlers", ("pydantic_monty",), ["serve", str(TOOL), "--result-handlers"]),
        ("dask", ("distributed", "dask"), ["serve", str(TOOL), "--executor", "dask://127.0.0.1:8786"]),
        ("otel", ("opentelemetry.sdk",), ["serve", str(TOOL), "--otel"]),
        ("metrics", ("opentelemetry.exporter.prometheus",), ["serve", str(TOOL), "--http", "127.0.0.1:0", "--metrics"]),
    ],
    ids=[
        "serve-store",
        "serve-http-rediss",
        "runs-store",
        "serve-postgres",
        "runs-postgres",
        "runs-postgres-pool",
        "result-handlers",
        "executor",
        "otel",
        "metrics",
    ],
)
def test_the_cli_names_the_missing_extra(extra, blocked, args, env):
    done = run(cli(blocked), *args, env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("error:") == 1, done.stderr
    assert f"error: {MESSAGES[extra]}\n" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_result_handlers_on_cpython_need_no_extra(env):
    """Without every extra, the cpython handler engine still serves: only the Monty engine needs one."""
    args = ["serve", str(TOOL), "--result-handlers", "--handler-engine", "cpython", "--unsafe-handlers"]
    done = run(cli(BLOCKED), *args, env=env)
    assert done.returncode == 0, done.stderr
    assert "error:" not in done.stderr and "Traceback" not in done.stderr


API = """
import json
from branchc import BranchcError, MissingExtraError
from branchc.executors import open_executor
from branchc.store import StoreURLError, open_store

found = {}


def attempt(name, action):
    try:
        action()
    except MissingExtraError as error:
        found[name] = [error.extra, str(error), isinstance(error, ImportError), isinstance(error, BranchcError)]
    except StoreURLError as error:
        found[name] = ["url", str(error)]
    else:
        found[name] = None


def monty():
    from branchc.bridge.handlers.monty import MontyEngine


def redis_module():
    from branchc.store.redis import RedisStore


def postgres_module():
    from branchc.store.postgres import PostgresStore


attempt("open_store", lambda: open_store("redis://127.0.0.1:6379/0"))
attempt("open_store_tls", lambda: open_store("rediss://:secret@127.0.0.1:6380/2?prefix=app:&timeout=1"))
attempt("open_store_bad_url", lambda: open_store("redis://:6379/0"))
attempt("open_store_postgres", lambda: open_store("postgresql://app:secret@127.0.0.1:5432/runs?schema=app"))
attempt("open_store_postgres_bad_url", lambda: open_store("postgresql://127.0.0.1/runs?schema=App"))
attempt("postgres_store_module", postgres_module)
attempt("open_executor", lambda: open_executor("dask://127.0.0.1:8786"))
attempt("monty_engine", monty)
attempt("monty_engine_again", monty)
attempt("redis_store_module", redis_module)
print(json.dumps(found))
"""


def test_the_python_api_raises_a_typed_error_naming_the_extra(env):
    done = run(without(BLOCKED, API), env=env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for name, extra in [
        ("open_store", "redis"),
        ("open_store_tls", "redis"),
        ("open_executor", "dask"),
        ("monty_engine", "handlers"),
        ("monty_engine_again", "handlers"),  # a second import says the same, not a half-imported module
        ("redis_store_module", "redis"),
        ("open_store_postgres", "postgres"),
        ("postgres_store_module", "postgres"),
    ]:
        assert found[name] == [extra, MESSAGES[extra], True, True], name
    # the URL is checked first: a wrong one says what is wrong with it, with the package or without
    assert found["open_store_bad_url"][0] == "url" and "it names no host" in found["open_store_bad_url"][1]
    bad = found["open_store_postgres_bad_url"]
    assert bad[0] == "url" and "schema='App' is not a lower-case SQL name" in bad[1]


# -- a lean install: importing, compiling, running and serving ------------------------------------------------

IMPORT_ALL = """
import importlib, json, pkgutil
import branchc

refused = {}
for info in pkgutil.walk_packages(branchc.__path__, "branchc."):
    if info.name == "branchc.__main__":  # runs the CLI
        continue
    try:
        importlib.import_module(info.name)
    except MissingExtraError as error:
        refused[info.name] = [error.extra, str(error)]
    except BaseException as error:
        refused[info.name] = [type(error).__name__, str(error)]
loaded = sorted(name for name, module in sys.modules.items() if module is not None and name.split(".")[0] in BLOCKED)
print(json.dumps({"refused": refused, "loaded": loaded}))
"""


def test_every_module_imports_without_the_extras_but_the_backends_that_need_them(env):
    code = without(BLOCKED, f"BLOCKED = {BLOCKED!r}\nfrom branchc import MissingExtraError\n{IMPORT_ALL}")
    done = run(code, env=env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["refused"] == {
        "branchc.bridge.handlers.monty": ["handlers", MESSAGES["handlers"]],
        "branchc.executors._dask": ["dask", MESSAGES["dask"]],
        "branchc.store.redis": ["redis", MESSAGES["redis"]],
        "branchc.store.postgres": ["postgres", MESSAGES["postgres"]],
    }
    assert found["loaded"] == []


def test_the_quick_start_runs_without_the_extras(env):
    params = {**EXAMPLES["pick_card"], "count": 5}
    done = run(
        cli(BLOCKED),
        *["run", str(TOOL), "pick_card", "--params", json.dumps(params), "--responses", str(RESPONSES), "-q"],
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["success"] is True and result["picked"], result
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_compiled_build_is_served_without_the_extras(mode, env, tmp_path):
    build = tmp_path / "build"
    done = run(cli(BLOCKED), "compile", str(TOOL), "--out", str(build), env=env)
    assert done.returncode == 0, done.stderr
    assert (build / "branchc.json").is_file()
    expected, prompts, elicits = await native_run("pick_card", env)
    client = Scripted(prompts, elicits)
    server = StdioServerParameters(
        command=sys.executable, args=["-c", cli(BLOCKED), "serve", str(build)], env={**os.environ, **env}, cwd=ROOT
    )
    async with Client(server, mode=mode, **client.callbacks()) as session:
        result = await within(60, session.call_tool("pick_card", EXAMPLES["pick_card"]))
    assert not result.is_error, result.content[0].text
    assert result.structured_content == expected
    assert len(client.sampled) == len(prompts) and len(client.elicited) == len(elicits)


# -- what pyproject.toml declares ----------------------------------------------------------------------------

#: each third-party module branchc imports, and the distribution of the core install that brings it
CORE = {
    "annotated_types": "annotated-types",
    "anyio": "anyio",
    "cryptography": "cryptography",
    "graphviz": "graphviz",
    "h11": "h11",
    "httpx2": "httpx2",
    "jinja2": "jinja2",
    "jsonschema": "jsonschema",
    "jwt": "pyjwt",
    "libcst": "libcst",
    "markupsafe": "markupsafe",
    "mcp": "mcp",
    "mcp_types": "mcp-types",
    "msgspec": "msgspec",
    "networkx": "networkx",
    "opentelemetry": "opentelemetry-api",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",  # pydantic's own core, pinned by it
    "pydantic_settings": "pydantic-settings",
    "rich": "rich",
    "starlette": "starlette",
    "typer": "typer",
    "uvicorn": "uvicorn",
    "yaml": "pyyaml",
}
#: each module an extra brings: (the extra, its distribution)
OPTIONAL = {
    "redis": ("redis", "redis"),
    "psycopg": ("postgres", "psycopg"),
    "psycopg_pool": ("postgres", "psycopg-pool"),
    "pydantic_monty": ("handlers", "pydantic-monty"),
    "distributed": ("dask", "distributed"),
    "dask": ("dask", "distributed"),
    "opentelemetry.sdk": ("otel", "opentelemetry-sdk"),
    "opentelemetry.exporter.prometheus": ("otel", "opentelemetry-exporter-prometheus"),
    "prometheus_client": ("otel", "prometheus-client"),
}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _extras_of(requirement: str) -> set[str]:
    found = re.fullmatch(r"branchc\[([^\]]*)\]", requirement.strip())
    return {extra.strip() for extra in found.group(1).split(",")} if found else set()


def _closure(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions `extra` brings, through the extras it names (`branchc[...]`)."""
    names: set[str] = set()
    for requirement in extras[extra]:
        inner = _extras_of(requirement)
        names |= set().union(*(_closure(extras, e) for e in inner)) if inner else {_name(requirement)}
    return names


def test_the_core_install_leaves_out_what_the_extras_bring():
    project = _project()
    core = {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert not core & {"redis", "psycopg", "psycopg-pool", "pydantic-monty", "distributed", "dask", "opentelemetry-sdk"}
    assert set(CORE.values()) <= core
    for extra, distribution in OPTIONAL.values():
        assert distribution in _closure(extras, extra)
    assert set(EXTRAS) == {extra for extra, _ in OPTIONAL.values()}
    assert _closure(extras, "all") == set().union(*(_closure(extras, e) for e in EXTRAS))
    # the README's test command, pip install -e '.[dev,dask]', brings every extra
    assert _closure(extras, "all") <= _closure(extras, "dev") | _closure(extras, "dask")


def test_every_third_party_import_is_declared():
    """Each module branchc imports comes with the core install or with an extra; a new one must be declared."""
    stdlib = sys.stdlib_module_names
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "branchc").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                if root not in stdlib and root != "branchc":
                    seen.setdefault(root, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    undeclared = {root: where for root, where in seen.items() if root not in CORE and root not in OPTIONAL}
    assert not undeclared, f"declare these in pyproject.toml (dependencies, or an extra): {undeclared}"


# -- the error itself -----------------------------------------------------------------------------------------


def test_a_missing_package_and_a_broken_one_say_different_things():
    missing = missing_extra("dask", ModuleNotFoundError("No module named 'distributed'", name="distributed"))
    assert str(missing) == MESSAGES["dask"]
    assert isinstance(missing, BranchcError) and isinstance(missing, ImportError) and missing.name == "distributed"
    # installed, but a package of its own is missing: the reason is kept, and the same fix offered
    broken = missing_extra("dask", ModuleNotFoundError("No module named 'msgpack'", name="msgpack"))
    assert str(broken) == (
        "the dask executor needs the distributed package, which does not import here "
        "(ModuleNotFoundError: No module named 'msgpack'); pip install 'branchc[dask]'"
    )
    failed = missing_extra("handlers", ImportError("libmonty.so: cannot open shared object file"))
    assert "does not import here (ImportError: libmonty.so" in str(failed)
    assert str(failed).endswith("pip install 'branchc[handlers]'")
    again = pickle.loads(pickle.dumps(broken))
    assert type(again) is MissingExtraError and str(again) == str(broken) and again.extra == "dask"
