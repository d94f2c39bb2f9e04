"""Every measured table and every figure of README.md, and of the docs pages the README's measurements
moved to, names the command that printed it: a table a section of experiments/readme_figures.py (which
exists and has a formatter), a figure (an image) a command beside it. Every section still has a page."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))
import readme_figures  # noqa: E402

# the README and the docs pages carved out of it (the other docs pages keep their own commands in prose)
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md", ROOT / "docs" / "benchmarks.md",
         *sorted((ROOT / "docs" / "guide").glob("*.md")), *sorted((ROOT / "docs" / "engineering").glob("*.md"))]  # fmt: skip
# tables of what exists (no measured figures in them), exempt from needing a command (the support
# table, "| `algo=` |", is generated from the code and checked by tests/test_support_table.py)
EXEMPT = ("| section | algorithms | keys |", "| environment (JaxMARL id) | runs | learns (test) | notes |", "| feature | status |",
          "| tracker | where it writes (by default) | its settings |", "| Python | jax, jaxlib | how | where |",
          "| `algo=` | what it is |", "| family (JaxMARL ids) | runs | learns (test) |",
          "| algo | family | defaults there (its own) |")  # fmt: skip
WITHIN = 6  # lines after a table's last row in which its command must appear
FIGURE_WITHIN = 12  # lines before or after an image in which a command that made it must appear
COMMAND = re.compile(r"`(marljax [a-z-]+|python [\w/.-]+\.py|python -m [\w.]+)[^`]*`")


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


def tables_without_command(text: str, where: str) -> list[str]:
    lines = text.splitlines()
    missing = []
    for first, last in tables(lines):
        if lines[first].startswith(EXEMPT):
            continue
        after = "\n".join(lines[last + 1 : last + 1 + WITHIN])
        names = re.findall(r"readme_figures\.py ([\w-]+)", after)
        if not names or not all(n in readme_figures.BY_NAME for n in names):
            missing.append(f"{where}:{first + 1}: {lines[first][:60]}")
    return missing


def figures_without_command(text: str, where: str) -> list[str]:
    """Images (`![...](...png)`) with no `marljax ...` / `python ....py` command within FIGURE_WITHIN lines."""
    lines = text.splitlines()
    missing = []
    for i, line in enumerate(lines):
        if re.search(r"!\[[^\]]*\]\([^)]+\)", line):
            near = "\n".join(lines[max(0, i - FIGURE_WITHIN) : i + 1 + FIGURE_WITHIN])
            if not COMMAND.search(near):
                missing.append(f"{where}:{i + 1}: {line[:60]}")
    return missing


def test_every_section_has_a_formatter():
    names = [s.name for s in readme_figures.SECTIONS]
    assert len(names) == len(set(names)) and "all" not in names
    assert all(callable(s.run) and s.cost and s.table for s in readme_figures.SECTIONS)


def test_list_names_every_section():
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "readme_figures.py"), "--list"],
                         capture_output=True, text=True, check=True, timeout=60).stdout  # fmt: skip
    assert [line.split()[0] for line in out.splitlines()] == [s.name for s in readme_figures.SECTIONS]


def test_every_table_is_followed_by_its_command():
    assert all(p.exists() for p in PAGES[:3]) and len(PAGES) > 5
    missing = [m for p in PAGES for m in tables_without_command(p.read_text(), str(p.relative_to(ROOT)))]
    assert not missing, "tables without a `python experiments/readme_figures.py SECTION` line:\n" + "\n".join(missing)


def test_every_figure_names_its_command():
    missing = [m for p in PAGES for m in figures_without_command(p.read_text(), str(p.relative_to(ROOT)))]
    assert not missing, "images without the command that made them nearby:\n" + "\n".join(missing)


def test_every_section_is_still_on_a_page():
    """Nothing lost: each section of readme_figures.py is named on the README or a page carved out of it."""
    text = "\n".join(p.read_text() for p in PAGES)
    named = set(re.findall(r"readme_figures\.py ([\w-]+)", text))
    assert not [s.name for s in readme_figures.SECTIONS if s.name not in named]


def test_the_table_finder_sees_every_table():
    text = "x\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|\n"
    assert tables(text.splitlines()) == [(1, 3), (5, 6)]


def test_the_checks_can_fail():
    """Negative controls: a measured table or an image without its command is reported, with one it is not."""
    table = "| rate | x |\n|---|---|\n| 1 | 2 |\n"
    assert tables_without_command(table + "\nprose\n", "t.md") == ["t.md:1: | rate | x |"]
    assert tables_without_command(table + "\nPrinted by `python experiments/readme_figures.py bench`.\n", "t.md") == []
    assert tables_without_command(table + "\nPrinted by `python experiments/readme_figures.py no-such`.\n", "t.md")
    image = "![curves](docs/x.png)\n"
    assert figures_without_command("text\n" + image + "more\n", "f.md") == ["f.md:2: ![curves](docs/x.png)"]
    assert figures_without_command(image + "Made by `marljax sweep experiments/x.yaml`.\n", "f.md") == []


def default_run_quotes() -> dict[str, str]:
    """What README.md and docs/getting-started.md must quote of the default run, formatted from
    docs/benchmarks/default_run.json (made by `python experiments/readme_figures.py default-run`)."""
    record = json.loads(readme_figures.DEFAULT_RUN.read_text())
    cold, warm = record["runs"]
    seconds = [float(re.match(r"compiled in ([\d.]+)s", r["compiled"]).group(1)) for r in (cold, warm)]
    return {
        "returns": cold["summary"]["returns"],
        "times": f"compiled in {seconds[0]:.1f} s, then {seconds[1]:.1f} s; {cold['summary']['timing']['total_s']:.1f} s, "
        f"then {warm['summary']['timing']['total_s']:.1f} s for the whole process",
    }


def quoted_return_lines(text: str) -> list[str]:
    """The `return per agent ...` lines of a page's fenced code blocks."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    return [
        line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("return per agent")
    ]


def test_the_default_runs_figures_come_from_one_place():
    quotes = default_run_quotes()
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        lines = quoted_return_lines(page.read_text())
        assert lines == [quotes["returns"]], f"{page.name} quotes {lines}, default_run.json says {quotes['returns']}"
    assert quotes["times"] in " ".join((ROOT / "docs" / "getting-started.md").read_text().split())
    # the control: a page quoting another run's line is caught
    assert quoted_return_lines("```\nreturn per agent -1.00 -> 0.00 (+1.00); 1k env-steps/s\n```") != [
        quotes["returns"]
    ]


def test_every_family_learning_case_trains_the_fresh_seeds(monkeypatch):
    """Issue 63: no learning case asserts on the seed its settings were tuned on. Every case the fresh-seeds-families
    table runs (FAMILY_LEARNING) holds FRESH; `--only` keeps the nodes holding its text, and a case without FRESH
    (the negative control) drops out of the table's cases."""
    from tests._learning import FRESH, holds_fresh_seeds

    cases = readme_figures.family_cases()
    modules = {test.split("::")[0] for test, *_ in cases}
    assert {f"tests/{m}.py" for m, *_ in readme_figures.FAMILY_LEARNING} == modules  # every list has a case
    assert [test for test, _, overrides, *_ in cases if not holds_fresh_seeds(overrides)] == []
    assert len(readme_figures.fresh_family_cases()) == len(cases)
    only = readme_figures.fresh_family_cases(("test_jumanji", "[spread]"))
    assert {t for t, *_ in only} == {t for t, *_ in cases if "test_jumanji" in t or "[spread]" in t} and only
    seed_zero = [(test, param, [o for o in overrides if o not in FRESH], margin, floor)
                 for test, param, overrides, margin, floor in cases[:1]]  # fmt: skip
    monkeypatch.setattr(readme_figures, "family_cases", lambda: seed_zero)
    assert readme_figures.fresh_family_cases() == []


def test_a_case_split_by_seed_is_one_row_of_its_tests(monkeypatch):
    """A family case split by seed (one test a seed, its id ending -seedN) is one row of the fresh-seeds-families table,
    its seeds in order, its margin asserted per seed; a case not split keeps its own row."""
    import pytest

    from tests._learning import FRESH, fresh_seed_alone

    split = [(f"tests/test_sac.py::t[jn-seed{7919 + i}]", pytest.param(id=f"jn-seed{7919 + i}"), [*fresh_seed_alone(i)],
              0.5, None) for i in range(3)]  # fmt: skip
    whole = [("tests/test_learns.py::t[spread]", pytest.param(id="spread"), FRESH, 2.0, 0.1)]
    monkeypatch.setattr(readme_figures, "family_cases", lambda: [*split, *whole])
    runs = {test: [[float(i), -1.0, -4.0]] for i, (test, *_) in enumerate(split)}
    runs[whole[0][0]] = [[3.0, -1.0, -4.0], [4.0, -1.0, -4.0], [5.0, -1.0, -4.0]]
    monkeypatch.setattr(readme_figures, "per_seed_run", lambda test: (runs[test], "passed", 10.0))
    rows = [
        line
        for line in readme_figures.fresh_seeds_families(readme_figures.Options(False, Path("."), None)).splitlines()
        if "`" in line
    ]
    assert len(rows) == 2
    assert rows[0].startswith("| `jn` (test_sac.py) | 0.00 / 1.00 / 2.00 | 1.00 | no-op -1.00 / -1.00 / -1.00 |")
    assert "| 0.5 per seed |" in rows[0] and "| 30 s, passed, passed, passed |" in rows[0]
    assert rows[1].startswith("| `spread` | 3.00 / 4.00 / 5.00 |") and "| 2.0; wins >= 0.1 |" in rows[1]
