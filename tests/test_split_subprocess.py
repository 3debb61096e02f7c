"""A sample of the differential programs, resumed in a fresh process at every suspension point.

For each program the compiled generator runs here up to step i, its snapshot goes
through JSON to a new Python process, which imports the compiled module (built by
`branchc.splitter.build`), resumes, runs the remaining steps, and reports what
came out. That must equal what CPython's own generator did for those steps
(differential.check_in_fresh_processes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from differential import check_in_fresh_processes
from test_split_smoke import PROGRAMS

SAMPLE = [0, 1, 2, 4, 6, 9, 11]  # plain flow, loops, handlers, finally, chained handlers, match, delegation


@pytest.mark.parametrize("index", SAMPLE)
def test_resume_in_a_fresh_process_at_every_suspension(index: int, tmp_path: Path) -> None:
    source, script = PROGRAMS[index]
    assert check_in_fresh_processes(source, script, tmp_path) >= 2
