"""CPython's own generator test suites pass with every generator function compiled by branchc.

Each suite (test_yield_from, test_generators with its doctests, test_generator_stop) runs
natively and with its generators made @resumable and the module compiled whole, each in a
process of its own (see cpython_suites.py). Of the tests that pass natively, at least 95%
must pass compiled; every one that does not must be listed in KNOWN with the reason it
cannot pass, and no listed one may pass (so that the list stays true).

KNOWN names tests by id, or single doctest examples as `doctest id[example index]`: a
doctest that fails compiled is explained only when each of its examples that fails
compiled (and passes natively) is listed. For the whole picture, including what else
fails once the functions the compiler refuses are left uncompiled:

    python tests/cpython_suites.py --diagnostic --verbose
"""

from __future__ import annotations

import pytest
from cpython_suites import SUITES, SuiteReport, run_suites, suite_path

THRESHOLD = 0.95

KNOWN: dict[str, dict[str, str]] = {
    "test_yield_from": {},
    "test_generators": {},
    "test_generator_stop": {},
}


@pytest.fixture(scope="module")
def reports() -> dict[str, SuiteReport]:
    present = [suite for suite in SUITES if suite_path(suite) is not None]
    return {report.suite: report for report in run_suites(present, diagnostic=False, timeout=50)}


@pytest.mark.parametrize("suite", SUITES)
def test_cpython_suite_passes_compiled(suite: str, reports: dict[str, SuiteReport]) -> None:
    if suite not in reports:
        pytest.skip(f"test.{suite} is not installed with this Python (no `test` package)")
    report = reports[suite]
    native = report.native
    assert not native.get("crash") and not native.get("load_error"), report.describe()
    assert report.native_passing, f"no test of {suite} passes natively:\n{report.describe()}"

    known = KNOWN[suite]
    problems = []
    compiled = report.compiled
    if not report.problem:  # every generator function and doctest example ran compiled, none natively
        functions, examples = compiled.get("compiled_functions"), compiled.get("compiled_examples")
        if functions != compiled.get("generator_functions") or examples != compiled.get("generator_examples"):
            problems.append(
                f"compiled {functions} of {compiled.get('generator_functions')} generator functions and "
                f"{examples} of {compiled.get('generator_examples')} doctest examples defining generators"
            )
    if report.ratio < THRESHOLD:
        problems.append(
            f"{len(report.compiled_passing)} of {len(report.native_passing)} natively passing tests pass compiled "
            f"({report.ratio:.1%} < {THRESHOLD:.0%})"
        )
    unexplained = report.unexplained(known)
    if report.problem:
        problems.append(f"the compiled run gave no results for {len(unexplained)} tests that pass natively")
    elif unexplained:
        problems.append(f"{len(unexplained)} failing compiled, not in KNOWN: {', '.join(sorted(unexplained))}")
    stale = report.stale(known)
    if stale:
        problems.append("KNOWN entries to remove: " + ", ".join(f"{k} ({why})" for k, why in sorted(stale.items())))
    assert not problems, "\n".join(problems) + "\n\n" + report.describe(verbose=True)
