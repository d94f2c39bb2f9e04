"""The tutorial pages' code runs as written: each page's ```python blocks with a title are saved under
that file name, the others run in order as one script, in a fresh directory and process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
BLOCK = re.compile(r'^```python(?: title="([^"]+)")?\n(.*?)^```', re.M | re.S)


def blocks(text: str) -> list[tuple[str | None, str]]:
    """(file name or None, code) of every python block of a markdown page, in order."""
    return [(title or None, code) for title, code in BLOCK.findall(text)]


def run_page(text: str, where: Path) -> subprocess.CompletedProcess:
    where.mkdir(parents=True, exist_ok=True)
    script = []
    for title, code in blocks(text):
        if title:
            (where / title).write_text(code)
        else:
            script.append(code)
    (where / "page.py").write_text("\n\n".join(script))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(where)])}
    return subprocess.run([sys.executable, "page.py"], cwd=where, env=env, capture_output=True, text=True, timeout=600)


def test_there_are_tutorials_with_code():
    assert {p.name for p in TUTORIALS} >= {"own-algorithm.md", "own-environment.md"}
    for page in TUTORIALS:
        found = blocks(page.read_text())
        assert any(t for t, _ in found) and any(t is None for t, _ in found), page


# nightly since 2026-11-30: CI's time (issue 63); the offline page trains online, records a dataset and clones it,
# 41 s in CI's quick run
NIGHTLY = {"offline"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.nightly if p.stem in NIGHTLY else ()) for p in TUTORIALS],
    ids=lambda p: p.stem,
)
def test_tutorial_code_runs(page, tmp_path):
    done = run_page(page.read_text(), tmp_path)
    assert done.returncode == 0, f"{page.name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_a_failing_block_fails_the_page(tmp_path):
    """Negative control: a page whose code raises is reported, and a titled block is importable."""
    page = (
        '```python title="helper.py"\nVALUE = 2\n```\n\n```python\nfrom helper import VALUE\nassert VALUE == 3\n```\n'
    )
    done = run_page(page, tmp_path)
    assert done.returncode != 0 and "AssertionError" in done.stderr
    assert run_page(page.replace("== 3", "== 2"), tmp_path / "ok").returncode == 0
