"""A sample of the differential programs, resumed in a fresh process at every suspension point.

For each program the compiled generator runs here up to step i, its snapshot goes
through JSON to a new Python process, which imports the compiled module (built by
`branchc.splitter.build`), resumes, runs the remaining steps, and reports what
came out. That must equal what CPython's own generator did for those steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from differential import _exc, load
from test_split_smoke import PROGRAMS

from branchc import snapshot
from branchc.splitter.build import build

SAMPLE = [0, 1, 2, 4, 6, 9, 11]  # plain flow, loops, handlers, finally, chained handlers, match, delegation

RUNNER = textwrap.dedent(
    """
    import builtins, json, sys
    import program
    from branchc import resume
    log = []
    program.emit = log.append
    jobs = json.loads(sys.stdin.read())
    out = []
    for data, ops in jobs:
        del log[:]
        generator = resume(data, allowed_modules={"program"})
        steps = []
        for op in ops:
            before = len(log)
            try:
                if op[0] == "next":
                    result = ["yield", repr(next(generator))]
                elif op[0] == "send":
                    result = ["yield", repr(generator.send(op[1]))]
                elif op[0] == "throw":
                    result = ["yield", repr(generator.throw(getattr(builtins, op[1])(*op[2:])))]
                else:
                    result = ["closed", repr(generator.close())]
            except StopIteration as stop:
                result = ["return", repr(stop.value)]
            except BaseException as error:
                result = ["raise", repr(EXC(error))]
            steps.append([result, [repr(item) for item in log[before:]]])
        out.append(steps)
    print(json.dumps(out))
    """
)


def run(generator, op):
    import builtins

    try:
        if op[0] == "next":
            return ["yield", repr(next(generator))]
        if op[0] == "send":
            return ["yield", repr(generator.send(op[1]))]
        if op[0] == "throw":
            return ["yield", repr(generator.throw(getattr(builtins, op[1])(*op[2:])))]
        return ["closed", repr(generator.close())]
    except StopIteration as stop:
        return ["return", repr(stop.value)]
    except BaseException as error:
        return ["raise", repr(_exc(error))]


@pytest.mark.parametrize("index", SAMPLE)
def test_resume_in_a_fresh_process_at_every_suspension(index: int, tmp_path: Path) -> None:
    source, script = PROGRAMS[index]
    program = "from branchc import resumable\n" + source
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "program.py").write_text(program)
    result = build([tmp_path / "src"], tmp_path / "out")
    assert not result.errors, result.errors

    # CPython's trace, step by step, with the log each step adds
    native_module = load(source, compiled=False)
    native_log: list = []
    native_module.emit = native_log.append
    native = native_module.gen()
    expected = []
    for op in script:
        before = len(native_log)
        expected.append((run(native, op), native_log[before:]))

    jobs = []
    compiled_module = load(source, compiled=True)
    compiled_module.emit = lambda value: None
    generator = compiled_module.gen()
    kept = []
    for step, op in enumerate(script):
        if generator.gi_frame is None:
            break
        data = snapshot(generator)
        data = json.loads(json.dumps(data).replace(compiled_module.__name__, "program"))
        jobs.append((step, data, script[step:]))
        kept.append(generator)
        run(generator, op)

    runner = tmp_path / "runner.py"
    runner.write_text("from differential import _exc as EXC\n" + RUNNER)
    done = subprocess.run(
        [sys.executable, str(runner)],
        input=json.dumps([[data, ops] for _, data, ops in jobs]),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{tmp_path / 'out'}:{Path(__file__).parent}", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    traces = json.loads(done.stdout)
    assert len(traces) == len(jobs) >= 2
    for (step, _, _), trace in zip(jobs, traces, strict=True):
        for offset, (result, added) in enumerate(trace):
            want_result, want_added = expected[step + offset]
            where = f"resumed before step {step}, at step {step + offset}"
            assert result == want_result, f"{where}: {result} != {want_result}"
            assert added == [repr(item) for item in want_added], where
