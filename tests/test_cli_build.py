"""`compile`, `check` and `serve` search sources without reading builds: their own -o folder, any folder
holding a branchc.json, and the compile cache. (tests/test_build_folder.py: the default build folder,
and a build folder as the compiler's own.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import ROOT, branchc

from branchc.splitter.build import find_sources

PICK_CARD = ROOT / "examples" / "tools" / "pick_card.py"
# What a compiled module looks like to the compiler when it is taken for a source: reserved names.
NOT_A_SOURCE = "_bc_rt = None\n"


@pytest.fixture
def sources(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(PICK_CARD, folder / "pick_card.py")
    cache = folder / "cache"  # the serve cache, inside the sources, with a stray file no build claims
    cache.mkdir()
    (cache / "stray.py").write_text(NOT_A_SOURCE)
    monkeypatch.setenv("BRANCHC_CACHE", str(cache))
    return folder


def test_compile_twice_into_a_subfolder_then_check_and_serve(sources: Path) -> None:
    (sources / "build").mkdir()
    (sources / "build" / "leftover.py").write_text(NOT_A_SOURCE)  # -o holds files, but no manifest
    done = branchc("compile", ".", "-o", "build", cwd=sources)
    assert done.returncode == 1
    assert "build: this folder is not empty and is not a branchc build" in done.stderr  # not read, not written
    (sources / "build" / "leftover.py").unlink()
    for _ in range(2):
        done = branchc("compile", ".", "-o", "build", cwd=sources)
        assert done.returncode == 0, done.stderr
    assert "compiled 0 module(s), 1 unchanged, into build" in done.stderr
    assert (sources / "build" / "branchc.json").is_file()

    done = branchc("compile", ".", "-o", "nested/out", cwd=sources)  # another build beside the first
    assert done.returncode == 0, done.stderr
    assert "compiled 1 module(s), 0 unchanged" in done.stderr

    done = branchc("check", ".", cwd=sources)
    assert done.returncode == 0, done.stderr
    assert "no errors" in done.stderr

    # serve: from ./build, the default build folder of ., which compile made from these sources (the
    # search passes over it and over the cache inside the sources); twice, in a process of its own, so
    # the module it imports is not left to other tests
    served = "from branchc.bridge.loading import load_served_tools as load; print(sorted(load('.')))"
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", served], capture_output=True, text=True, cwd=sources, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "['pick_card']"


def test_the_search_skips_builds_the_out_folder_and_the_cache(sources: Path) -> None:
    (sources / "tools").mkdir()
    (sources / "tools" / "more.py").write_text("x = 1\n")
    (sources / "old_build").mkdir()
    (sources / "old_build" / "branchc.json").write_text("{}")
    (sources / "old_build" / "compiled.py").write_text(NOT_A_SOURCE)
    (sources / "out").mkdir()
    (sources / "out" / "half_written.py").write_text(NOT_A_SOURCE)
    found = [str(source.relative) for source in find_sources([sources], skip=[sources / "out"])]
    assert found == ["pick_card.py", "tools/more.py"]


def test_compiling_over_the_sources_themselves_is_refused(sources: Path) -> None:
    before = (sources / "pick_card.py").read_text()
    done = branchc("compile", ".", "-o", ".", cwd=sources)
    assert done.returncode == 1
    assert "pick_card.py: compiling into . would write over this source; give another folder" in done.stderr
    assert "Traceback" not in done.stderr
    assert (sources / "pick_card.py").read_text() == before


def test_compiling_into_a_folder_that_holds_a_hard_link_to_a_source_is_refused(sources: Path) -> None:
    """The check is by the file's identity, not its path: a hard link in the out folder is the source too."""
    before = (sources / "pick_card.py").read_text()
    (sources / "out").mkdir()
    os.link(sources / "pick_card.py", sources / "out" / "pick_card.py")
    done = branchc("compile", "pick_card.py", "-o", "out", cwd=sources)
    assert done.returncode == 1
    assert "pick_card.py: compiling into out would write over this source; give another folder" in done.stderr
    assert (sources / "pick_card.py").read_text() == before
