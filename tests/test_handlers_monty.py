"""The Monty result-handler engine: what a handler script cannot do (each test tries it for real, and would
fail if the script got through), what it can, and that the engine keeps serving after every failure."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from _handler_support import SEED_HANDLER as SEED

from branchc.bridge.handlers.engine import (
    HandlerError,
    HandlerLimitError,
    HandlerResultError,
    HandlerRuntimeError,
    HandlerSyntaxError,
    HandlerUnsupportedError,
    Limits,
)
from branchc.bridge.handlers.monty import MontyEngine

pytestmark = pytest.mark.anyio

LIMITS = Limits(seconds=2.0, memory_mb=64, output_bytes=64 * 1024, tool_calls=5, recursion=100)
SECRET = "branchc-test-secret-5f1e"


def make_diff(files: int) -> str:
    parts = []
    for i in range(files):
        parts.append(
            f"diff --git a/src/f{i}.py b/src/f{i}.py\nindex 1a2b3c..4d5e6f 100644\n"
            f"--- a/src/f{i}.py\n+++ b/src/f{i}.py\n"
            f"@@ -1,4 +1,5 @@\n context\n-old {i}\n+new {i}\n+added {i}\n context\n"
        )
    return "".join(parts)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """One event loop for the module, so one warm engine serves every test."""
    return "asyncio"


@pytest.fixture(scope="module")
async def engine() -> Any:
    engine = MontyEngine(min_processes=2, max_processes=4)
    await engine.start()
    yield engine
    await engine.aclose()


@pytest.fixture(autouse=True)
async def still_serves(engine: MontyEngine) -> Any:
    """After every test, whatever the script did, the engine runs the next handler."""
    yield
    assert await run(engine, "[tool_output, arguments['n'] + 1]", "ok", {"n": 1}) == ["ok", 2]


async def run(engine: MontyEngine, script: str, tool_output: Any = "", arguments: dict | None = None, **kw: Any) -> Any:
    return await engine.run(script, tool_output, arguments or {}, limits=kw.pop("limits", LIMITS), **kw)


async def refused(engine: MontyEngine, script: str, kind: type[HandlerError] = HandlerError, **kw: Any) -> str:
    """The handler fails with `kind`; its message."""
    with pytest.raises(kind) as caught:
        await run(engine, script, **kw)
    return str(caught.value)


# -- security: what a handler cannot reach ----------------------------------------------------------------


@pytest.mark.parametrize("module", ["subprocess", "socket", "ctypes", "multiprocessing", "_posixsubprocess", "pty"])
async def test_dangerous_modules_are_not_importable(engine: MontyEngine, tmp_path: Path, module: str) -> None:
    marker = tmp_path / "ran"
    script = f"import {module}\nimport subprocess\nsubprocess.run(['touch', {str(marker)!r}])\n1"
    message = await refused(engine, script, HandlerRuntimeError)
    assert "ModuleNotFoundError" in message and "line 1" in message
    assert not marker.exists()


@pytest.mark.parametrize(
    "call",
    [
        "os.system('touch {marker}')",
        "os.popen('touch {marker}')",
        "os.execv('/bin/touch', ['touch', '{marker}'])",
        "os.spawnv(0, '/bin/touch', ['touch', '{marker}'])",
        "os.fork()",
        "os.kill(os.getppid(), 9)",
        "os.listdir('/')",
        "os.remove('{marker}')",
    ],
)
async def test_os_is_a_shell_with_nothing_behind_it(engine: MontyEngine, tmp_path: Path, call: str) -> None:
    """`import os` works (Monty's own module), but no call reaches the operating system."""
    marker = tmp_path / "ran"
    await refused(engine, f"import os\n{call.format(marker=marker)}\n1", HandlerRuntimeError)
    assert not marker.exists()
    assert os.getppid() > 1  # this process was not killed either


@pytest.mark.parametrize(
    "script",
    [
        "import os\nos.environ['BRANCHC_TEST_SECRET']",
        "import os\nos.environ.get('BRANCHC_TEST_SECRET')",
        "import os\nos.getenv('BRANCHC_TEST_SECRET')",
        "import os\ndict(os.environ)",
        "open('/proc/self/environ').read()",
        "from pathlib import Path\nPath('/proc/self/environ').read_text()",
        "import sys\nsys.argv",
    ],
)
async def test_environment_is_unreadable(engine: MontyEngine, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    monkeypatch.setenv("BRANCHC_TEST_SECRET", SECRET)
    try:
        result = await run(engine, script)
    except HandlerError as error:
        result = str(error)
    assert SECRET not in repr(result)


@pytest.mark.parametrize(
    "script",
    [
        "open({path!r}).read()",
        "open({path!r}, 'rb').read()",
        "from pathlib import Path\nPath({path!r}).read_text()",
        "import os\nos.stat({path!r}).st_size",
        "import os\nos.path.exists({path!r})",
    ],
)
@pytest.mark.parametrize("path", ["/etc/passwd", __file__, "/proc/self/cmdline"])
async def test_files_are_unreadable(engine: MontyEngine, script: str, path: str) -> None:
    message = await refused(engine, script.format(path=path), HandlerRuntimeError)
    assert "PermissionError" in message
    assert "root:" not in message and "test_files_are_unreadable" not in message and "subprocess" not in message


@pytest.mark.parametrize(
    "script",
    [
        "open({path!r}, 'w').write('pwned')",
        "open({path!r}, 'a').write('pwned')",
        "from pathlib import Path\nPath({path!r}).write_text('pwned')",
        "import os\nos.mkdir({path!r})",
        "import os\nos.rename({existing!r}, {path!r})",
    ],
)
async def test_files_are_unwritable(engine: MontyEngine, tmp_path: Path, script: str) -> None:
    existing = tmp_path / "existing"
    existing.write_text("mine")
    target = tmp_path / "written"
    message = await refused(engine, script.format(path=str(target), existing=str(existing)) + "\n1")
    assert "PermissionError" in message or "not supported" in message
    assert not target.exists() and existing.read_text() == "mine"


@pytest.mark.parametrize(
    "script",
    [
        "import socket\ns = socket.create_connection(('127.0.0.1', {port}))",
        "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/')",
        "import http.client\nhttp.client.HTTPConnection('127.0.0.1', {port}).request('GET', '/')",
        "import asyncio\nawait asyncio.open_connection('127.0.0.1', {port})",
        "open('/dev/tcp/127.0.0.1/{port}', 'w').write('x')",
    ],
)
async def test_no_network(engine: MontyEngine, script: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        await refused(engine, script.format(port=port) + "\n1")
        readable, _, _ = select.select([listener], [], [], 0.05)
        assert not readable, "the handler opened a TCP connection"


async def test_fork_bomb(engine: MontyEngine) -> None:
    message = await refused(engine, "import os\nwhile True:\n    os.fork()\n1", HandlerRuntimeError)
    assert "fork" in message and "line 3" in message
    workers = _children()
    assert workers and not [pid for pid, ppid, _ in _processes() if ppid in workers]  # the workers have no children


async def test_infinite_loop_hits_the_time_limit(engine: MontyEngine) -> None:
    started = time.perf_counter()
    message = await refused(engine, "while True:\n    pass\n1", HandlerLimitError)
    assert "time limit" in message
    assert time.perf_counter() - started < LIMITS.seconds + 1.5


async def test_sleeping_does_not_dodge_the_time_limit(engine: MontyEngine) -> None:
    started = time.perf_counter()
    message = await refused(engine, "import time\nwhile True:\n    time.sleep(10)\n1", HandlerLimitError)
    assert "time limit" in message
    assert time.perf_counter() - started < LIMITS.seconds + 1.5


@pytest.mark.parametrize(
    "script", ["x = 'a' * 10**10\n1", "x = [0] * 10**10\n1", "x = []\nwhile True:\n    x.append(x)\n1"]
)
async def test_ten_gigabytes_hits_the_memory_limit(engine: MontyEngine, script: str) -> None:
    started = time.perf_counter()
    message = await refused(engine, script, HandlerLimitError)
    assert "memory limit" in message
    assert time.perf_counter() - started < LIMITS.seconds + 1.5


async def test_deep_recursion_hits_the_recursion_limit(engine: MontyEngine) -> None:
    message = await refused(engine, "def f(n):\n    return f(n + 1)\nf(0)", HandlerLimitError)
    assert "recursion limit" in message


@pytest.mark.parametrize(
    "script",
    [
        "for i in range(10**6):\n    print('a' * 1000)\n1",
        "s = 'a' * 10**6\nfor i in range(1000):\n    print(s, s, sep='')\n1",
        "try:\n    for i in range(10**6):\n        print('a' * 1000)\nexcept MemoryError:\n    pass\n1",
    ],
)
async def test_printing_a_gigabyte(engine: MontyEngine, capfd: pytest.CaptureFixture[str], script: str) -> None:
    """Prints never reach the server's stdout (the MCP stdio transport); a flood stops at the output limit."""
    started = time.perf_counter()
    try:
        await run(engine, script)
    except HandlerLimitError as error:
        assert "output limit" in str(error)
    assert time.perf_counter() - started < 1.5
    out, err = capfd.readouterr()
    assert "aaaa" not in out and "aaaa" not in err


async def test_prints_are_discarded(engine: MontyEngine, capfd: pytest.CaptureFixture[str]) -> None:
    assert await run(engine, "print('to nowhere')\nprint('x', file=None)\n3") == 3
    out, _ = capfd.readouterr()
    assert "to nowhere" not in out


@pytest.mark.parametrize(
    ("script", "where"),
    [
        ("{1, 2}", "result: set"),
        ("def f():\n    pass\nf", "result: function"),
        ("{'a': [1, lambda: 2]}", "result['a'][1]: function"),
        ("float('nan')", "result: nan"),
        ("{'x': float('inf')}", "result['x']: inf"),
        ("[iter([1])]", "result[0]: list_iterator"),
        ("{'r': range(3)}", "result['r']: range"),
        ("(1, 2)", "result: tuple"),
        ("{1: 'a'}", "key 1"),
        ("b'bytes'", "result: bytes"),
        ("len", "result: builtin_function_or_method"),
        ("import json\njson", "result: module"),
        ("class A:\n    pass\n[A()]", "result[0]: A"),
        ("x = []\nx.append(x)\nx", "Circular"),
    ],
)
async def test_results_that_are_not_json_data(engine: MontyEngine, script: str, where: str) -> None:
    message = await refused(engine, script, HandlerResultError)
    assert where in message


async def test_a_result_over_the_output_limit(engine: MontyEngine) -> None:
    message = await refused(engine, "['x' * 1000 for i in range(100)]", HandlerLimitError)
    assert "output limit" in message


# The output cap holds on the host: a script may redefine the in-sandbox check (`__branchc_probe`), or the names
# it reads, and hand back anything; before the fix, the first returned 50 MB past the 1 MB cap, and a list shared at
# every level (kilobytes in the sandbox, 2**40 leaves as JSON) had the host walk it for hours.
REPLACED_PROBE = "def __branchc_probe(value):\n    return (value, None, 0)\n"


@pytest.mark.parametrize(
    "script",
    [
        REPLACED_PROBE + "'x' * (4 << 20)",
        REPLACED_PROBE + "[['a' * 1000] * 1000] * 50",
        "__branchc_output = 10 ** 12\n'x' * (4 << 20)",
        "len = lambda value: 0\n'x' * (4 << 20)",
    ],
    ids=["a str", "a shared list", "the cap replaced", "len replaced"],
)
async def test_the_output_cap_holds_whatever_the_script_redefines(engine: MontyEngine, script: str) -> None:
    limits = Limits(seconds=5.0, memory_mb=64, output_bytes=1 << 20)
    message = await refused(engine, script, HandlerLimitError, limits=limits)
    assert "bytes of JSON" in message and "1048576" in message and "(output limit)" in message


async def test_a_result_shared_at_every_level_is_refused_in_linear_time() -> None:
    """Kilobytes in the sandbox, 2**40 leaves as JSON: the host stops counting past the cap. In a fresh
    interpreter with a deadline of 30 s (the work takes milliseconds; the old walk of 2**40 leaves, hours)."""
    code = f"""
import anyio
from branchc.bridge.handlers.engine import HandlerLimitError, Limits
from branchc.bridge.handlers.monty import MontyEngine

async def main():
    async with MontyEngine() as engine:
        script = {REPLACED_PROBE!r} + "x = ['a' * 100]\\nfor i in range(40):\\n    x = [x, x]\\nx"
        try:
            await engine.run(script, None, {{}}, limits=Limits(seconds=5.0, memory_mb=64))
        except HandlerLimitError as error:
            print(error)

anyio.run(main)
"""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("not refused within 30 s: the host walked the shared list")
    assert "more than 1048576 bytes of JSON (output limit)" in done.stdout, done.stderr


async def test_a_tool_calls_arguments_are_measured_on_the_host(engine: MontyEngine) -> None:
    """Arguments shared at every level (a terabyte as JSON) never reach the tool or its schema check."""
    call = Recorder()
    script = "x = ['a' * 100]\nfor i in range(40):\n    x = [x, x]\ntools.git_log(path=x)"
    with anyio.fail_after(30):
        message = await refused(engine, script, HandlerRuntimeError, tools=SCHEMAS, call=call)
    assert f"the arguments are more than {LIMITS.output_bytes} bytes of JSON" in message
    assert call.calls == []


async def test_a_huge_exception_message_is_cut_short(engine: MontyEngine) -> None:
    script = "raise NotImplementedError('does not yet support ' * 50_000 + '\\nx')\nNone"
    message = await refused(engine, script, HandlerRuntimeError, limits=Limits(seconds=5.0))
    assert "characters in all)" in message and len(message) < 3000


async def test_a_script_must_end_with_an_expression(engine: MontyEngine) -> None:
    message = await refused(engine, "x = 1\nfor i in range(3):\n    x += i", HandlerResultError)
    assert "line 2" in message and "must end with an expression" in message


@pytest.mark.parametrize(
    ("script", "line"), [("x = (", 1), ("a = 1\nb = 2 +\nc = 3\nc", 2), ("if True\n    1", 1), ("1 +* 2", 1)]
)
async def test_invalid_python_names_its_line(engine: MontyEngine, script: str, line: int) -> None:
    with pytest.raises(HandlerSyntaxError) as caught:
        await run(engine, script)
    assert caught.value.line == line and f"line {line}" in str(caught.value)
    assert not isinstance(caught.value, HandlerUnsupportedError)


@pytest.mark.parametrize(
    ("script", "line", "what"),
    [
        ("x = 1\ndel x\n1", 2, "'del' statement"),
        ("def gen():\n    yield 1\nlist(gen())", 2, "yield"),
        ("x = 1\ntry:\n    pass\nexcept* ValueError:\n    pass\n1", 2, "exception groups"),
        ("type Number = int\n1", 1, "type aliases"),
        ("x = 1\nx @= 2\nx", 2, "(@=)"),
    ],
)
async def test_what_monty_lacks_is_named_with_its_line(engine: MontyEngine, script: str, line: int, what: str) -> None:
    with pytest.raises(HandlerUnsupportedError) as caught:
        await run(engine, script)
    message = str(caught.value)
    assert caught.value.line == line and f"line {line}" in message
    assert what in message and "Monty" in message and ("does not support" in message or "cannot parse" in message)


async def test_a_crashed_worker_is_reported_and_replaced(engine: MontyEngine) -> None:
    async def kill_workers() -> None:
        await anyio.sleep(0.3)
        for pid in _children():
            os.kill(pid, signal.SIGKILL)

    async with anyio.create_task_group() as group:
        group.start_soon(kill_workers)
        with pytest.raises(HandlerError) as caught:
            await run(engine, "while True:\n    pass\n1", limits=Limits(seconds=10))
    assert "died" in str(caught.value) and not isinstance(caught.value, HandlerLimitError)


async def test_no_tools_no_name(engine: MontyEngine) -> None:
    message = await refused(engine, "tools.git_diff()", HandlerRuntimeError)
    assert "NameError" in message


async def test_runs_share_nothing(engine: MontyEngine) -> None:
    await run(engine, "leaked = 'from the first run'\nprint = None\n1")
    await refused(engine, "leaked", HandlerRuntimeError)
    assert await run(engine, "print('works again')\n2") == 2


# -- what a handler can do ----------------------------------------------------------------------------------


async def test_the_seed_diff_handler(engine: MontyEngine) -> None:
    diff = make_diff(15)
    expected: dict[str, Any] = {}
    exec("\n".join(SEED[:-1]), {"tool_output": diff}, expected)  # the same script under CPython
    assert expected["summary"] == {"files_changed": 15, "insertions": 30, "deletions": 15}
    assert await run(engine, "\n".join(SEED), diff, {"commit_a": "HEAD~10"}) == expected["summary"]


async def test_arguments_and_structured_output_are_visible(engine: MontyEngine) -> None:
    script = "[arguments['commit_a'], len(tool_output['rows']), tool_output['rows'][1]['name']]"
    output = {"rows": [{"name": "a"}, {"name": "b"}]}
    assert await run(engine, script, output, {"commit_a": "HEAD~3"}) == ["HEAD~3", 2, "b"]


async def test_classes_match_and_the_standard_modules_run(engine: MontyEngine) -> None:
    script = """\
import json, re, collections
from dataclasses import dataclass

@dataclass
class Hit:
    word: str
    count: int

def kind(value):
    match value:
        case {'word': str()}:
            return 'hit'
        case _:
            return 'other'

counts = collections.Counter(re.findall(r'\\w+', tool_output))
hits = [Hit(word, n) for word, n in sorted(counts.items()) if n > 1]
{'hits': [json.loads(json.dumps({'word': h.word, 'count': h.count})) for h in hits], 'kind': kind({'word': 'x'})}
"""
    result = await run(engine, script, "b a b c a b")
    assert result == {"hits": [{"word": "a", "count": 2}, {"word": "b", "count": 3}], "kind": "hit"}


async def test_runtime_errors_name_type_message_and_line(engine: MontyEngine) -> None:
    script = "def ratio(a, b):\n    return a / b\n\nratio(1, 0)"
    message = await refused(engine, script, HandlerRuntimeError)
    assert message.startswith("ZeroDivisionError: division by zero") and "line 2: return a / b" in message


class Recorder:
    """A ToolCaller that records its calls and answers from a table."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers or {}

    async def __call__(self, name: str, arguments: dict[str, Any]) -> Any:
        self.calls.append((name, arguments))
        await anyio.sleep(0)
        answer = self.answers.get(name, {"tool": name, "arguments": arguments})
        if isinstance(answer, HandlerError):
            raise answer
        return answer


SCHEMAS = {
    "git.log": {"type": "object", "properties": {"max-count": {"type": "integer"}, "path": {"type": "string"}}},
    "git.diff": {"type": "object", "properties": {}},
}


async def test_tool_chaining_calls_the_caller_and_returns_its_result(engine: MontyEngine) -> None:
    call = Recorder({"git.log": [{"sha": "abc", "subject": "fix"}, {"sha": "def", "subject": "feat"}]})
    script = "log = tools.git_log(max_count=2, path='src')\n[entry['sha'] for entry in log]"
    assert await run(engine, script, tools=SCHEMAS, call=call) == ["abc", "def"]
    assert call.calls == [("git.log", {"max-count": 2, "path": "src"})]


async def test_a_tool_is_a_value_too(engine: MontyEngine) -> None:
    call = Recorder({"git.diff": "diff text"})
    script = "get = tools.git_diff\nresults = [get() for _ in range(2)]\nresults"
    assert await run(engine, script, tools=SCHEMAS, call=call) == ["diff text", "diff text"]
    assert call.calls == [("git.diff", {}), ("git.diff", {})]
    message = await refused(engine, "tools.nothing_here", HandlerRuntimeError, tools=SCHEMAS, call=call)
    assert "AttributeError" in message


async def test_tool_chaining_mistakes_are_catchable_errors(engine: MontyEngine) -> None:
    call = Recorder()
    message = await refused(engine, "tools.git_blame()", HandlerRuntimeError, tools=SCHEMAS, call=call)
    assert "no tool 'git_blame'" in message and "tools.git_log" in message
    message = await refused(engine, "tools.git_log(5)", HandlerRuntimeError, tools=SCHEMAS, call=call)
    assert "keyword arguments only" in message
    assert call.calls == []


async def test_the_tool_call_bound(engine: MontyEngine) -> None:
    call = Recorder()
    script = (
        "n = 0\nwhile True:\n    try:\n        tools.git_diff()\n    except Exception:\n        pass\n    n += 1\nn"
    )
    message = await refused(engine, script, HandlerLimitError, tools=SCHEMAS, call=call)
    assert "tool call limit" in message
    assert len(call.calls) == LIMITS.tool_calls


async def test_a_failing_tool_call_is_reported(engine: MontyEngine) -> None:
    call = Recorder({"git.diff": HandlerError("tools.git_diff failed: not a git repository")})
    message = await refused(engine, "x = 1\ntools.git_diff()", HandlerRuntimeError, tools=SCHEMAS, call=call)
    assert "not a git repository" in message and "line 2" in message
    script = "try:\n    tools.git_diff()\nexcept RuntimeError as error:\n    out = 'caught: ' + str(error)\nout"
    assert await run(engine, script, tools=SCHEMAS, call=call) == "caught: tools.git_diff failed: not a git repository"


async def test_a_hanging_tool_call_hits_the_time_limit(engine: MontyEngine) -> None:
    async def hangs(name: str, arguments: dict[str, Any]) -> Any:
        await anyio.sleep(60)

    started = time.perf_counter()
    message = await refused(engine, "tools.git_diff()", HandlerLimitError, tools=SCHEMAS, call=hangs)
    assert "time limit" in message
    assert time.perf_counter() - started < LIMITS.seconds + 1.5


async def test_concurrent_runs(engine: MontyEngine) -> None:
    diff = make_diff(40)
    results: list[Any] = []

    async def one(i: int) -> None:
        results.append(await run(engine, "\n".join(SEED) + f"\nsummary['files_changed'] + {i}", diff))

    async with anyio.create_task_group() as group:
        for i in range(12):
            group.start_soon(one, i)
    assert sorted(results) == [40 + i for i in range(12)]


def _processes() -> list[tuple[int, int, bytes]]:
    """(pid, parent pid, command line) of every process."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            found.append((int(entry.name), int(stat.rsplit(")", 1)[1].split()[1]), cmdline))
    return found


def _children() -> set[int]:
    """The pids of this process's `monty` workers."""
    return {pid for pid, ppid, cmdline in _processes() if ppid == os.getpid() and b"monty" in cmdline}


if not sys.platform.startswith("linux"):  # the crash test and the worker count read /proc
    pytestmark = [pytest.mark.anyio, pytest.mark.skip(reason="reads /proc")]
