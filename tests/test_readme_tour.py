"""The README's tour of the authoring API runs as written: its Python blocks, in order, as one module,
natively and compiled by the splitter (their own asserts check the scripted runs)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from branchc import Tool
from branchc.splitter import load_source

ROOT = Path(__file__).resolve().parent.parent


def tour_code() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## A tour of the authoring API\n")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"^```python\n(.*?)^```$", text[start:end], flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 4, "the tour shows the short form, a run, the long form and mount"
    return "\n\n".join(blocks)


@pytest.fixture
def at_root(tmp_path, monkeypatch):
    (tmp_path / "tools").symlink_to(ROOT / "examples" / "tools")  # the mount example's tools, beside its file
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))


def test_the_tour_runs_natively(at_root, tmp_path):
    module = types.ModuleType("readme_tour_native")
    module.__file__ = str(tmp_path / "readme_tour_native.py")
    sys.modules[module.__name__] = module
    try:
        exec(compile(tour_code(), str(tmp_path / "readme_tour_native.py"), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    assert isinstance(module.pick_card, Tool) and isinstance(module.book, Tool)


def test_the_tour_runs_compiled(at_root, tmp_path):
    try:
        module = load_source(tour_code(), "readme_tour_compiled", str(tmp_path / "readme_tour_compiled.py"))
    finally:
        sys.modules.pop("readme_tour_compiled", None)
    assert module.pick_card.fn.__branchc_compiled__ and module.analyze.__branchc_compiled__
    assert module.book.client_fn.__branchc_compiled__
    assert module.pick_card.input_schema["properties"]["count"]["description"] == "How many cards to draw."
