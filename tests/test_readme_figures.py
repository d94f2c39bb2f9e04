"""Every measured table of README.md names the command that prints it: a section of
experiments/readme_figures.py, which exists and has a formatter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))
import readme_figures  # noqa: E402

# tables that hold no measured figures (settings, support and feature lists)
# tables of what exists (no measured figures in them), exempt from needing a command
EXEMPT = ("| section | algorithms | keys |", "| environment (JaxMARL id) | runs | learns (test) | notes |", "| feature | status |",
          "| tracker | where it writes (by default) | its settings |", "| Python | jax, jaxlib | how | where |")  # fmt: skip
WITHIN = 6  # lines after a table's last row in which its command must appear


def tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line index of every markdown table: '| ' lines with a '|---' separator second."""
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            j = i + 1
            while j + 1 < len(lines) and lines[j + 1].startswith("|"):
                j += 1
            found.append((i, j))
            i = j
        i += 1
    return found


def test_every_section_has_a_formatter():
    names = [s.name for s in readme_figures.SECTIONS]
    assert len(names) == len(set(names)) and "all" not in names
    assert all(callable(s.run) and s.cost and s.table for s in readme_figures.SECTIONS)


def test_list_names_every_section():
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "readme_figures.py"), "--list"],
                         capture_output=True, text=True, check=True, timeout=60).stdout  # fmt: skip
    assert [line.split()[0] for line in out.splitlines()] == [s.name for s in readme_figures.SECTIONS]


def test_every_readme_table_is_followed_by_its_command():
    lines = (ROOT / "README.md").read_text().splitlines()
    missing = []
    for first, last in tables(lines):
        if lines[first].startswith(EXEMPT):
            continue
        after = "\n".join(lines[last + 1 : last + 1 + WITHIN])
        names = re.findall(r"readme_figures\.py ([\w-]+)", after)
        if not names or not all(n in readme_figures.BY_NAME for n in names):
            missing.append(f"README.md:{first + 1}: {lines[first][:60]}")
    assert not missing, "tables without a `python experiments/readme_figures.py SECTION` line:\n" + "\n".join(missing)


def test_the_table_finder_sees_every_table():
    text = "x\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|\n"
    assert tables(text.splitlines()) == [(1, 3), (5, 6)]
