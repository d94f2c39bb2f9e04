"""The nightly rotation: every CI run takes one slice of the tests marked `nightly`, chosen by the commit,
so that every nightly test runs once in any N consecutive commits of main's first-parent history.

The slices are balanced by the committed table of per-test durations (tests/nightly_durations.json,
worker-seconds on the 2-core machine under `-n 2`): longest test first, each into the slice with the
least time so far (LPT). N is the fewest slices whose estimated wall time under `-n 2` fits the
table's budget, so adding a test adds a slice only when it must. The assignment depends on the table
alone, never on which tests a session collected, so a slice is the same set of tests everywhere.

    python -m tests._nightly               # the slices, as docs/nightly.md lists them
    python -m tests._nightly rotation      # "K/N": the slice this checkout's commit takes
    python -m tests._nightly slice K/N     # the tests of slice K of N, with their durations
    python -m tests._nightly --write       # rewrite docs/nightly.md's generated table
    python -m tests._nightly record LOG "HOW"   # the table's figures from a run's `--durations=0` lines
"""

from __future__ import annotations

import datetime
import heapq
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tests" / "nightly_durations.json"
DOCS = ROOT / "docs" / "nightly.md"
BEGIN, END = "<!-- nightly slices: begin (python -m tests._nightly --write) -->", "<!-- nightly slices: end -->"
WORKERS = 2  # CI's -n 2
T = TypeVar("T")
NIGHTLY_IDS = pytest.StashKey[list[str]]()  # tests/conftest.py: every nightly test the session collected
WHOLE_SUITE = pytest.StashKey[bool]()  # tests/conftest.py: whether the session collected the whole suite


@dataclass(frozen=True)
class Entry:
    seconds: float  # worker-seconds under -n 2 on the 2-core machine (setup, call and teardown)
    source: str  # where the figure comes from: "measured ..." or "estimated: ..."


@dataclass(frozen=True)
class Table:
    budget_s: float  # the most estimated wall time one slice may take under -n 2
    tests: dict[str, Entry]  # node id -> its duration: the rotation's tests
    # in no slice (longer than any, or needing what CI has not): node id -> (its duration, why)
    by_hand: dict[str, tuple[Entry, str]] = field(default_factory=dict)


def load_table(path: Path = TABLE) -> Table:
    raw = json.loads(path.read_text())
    by_hand = {k: (Entry(*v[:2]), v[2]) for k, v in raw.get("by_hand", {}).items()}
    return Table(raw["slice_budget_s"], {k: Entry(*v) for k, v in raw["tests"].items()}, by_hand)


def shared_fixture_modules(tests_dir: Path = ROOT / "tests") -> set[str]:
    """Test modules with a module-scoped fixture (`tests/test_x.py` form): under -n 2 all of such a
    module's tests run on one worker (tests/conftest.py's scheduler), so the fixture runs once."""
    return {f"{tests_dir.name}/{p.name}" for p in tests_dir.glob("test_*.py") if 'scope="module"' in p.read_text()}


def scope_of(nodeid: str, shared: set[str]) -> str:
    """What xdist hands to one worker as a unit: the module for a shared-fixture module, else the test."""
    module = nodeid.split("::", 1)[0]
    return module if module in shared else nodeid


def wall_estimate(seconds: dict[str, float], shared: set[str], workers: int = WORKERS) -> float:
    """Wall time of running these tests on `workers` workers, longest unit first, each to the worker
    that frees first (the order tests/conftest.py gives a slice)."""
    units: dict[str, float] = {}
    for nodeid, s in seconds.items():
        units[scope_of(nodeid, shared)] = units.get(scope_of(nodeid, shared), 0.0) + s
    free = [0.0] * workers
    for s in sorted(units.values(), reverse=True):
        heapq.heapreplace(free, free[0] + s)
    return max(free)


def xdist_order(longest_first: list[T], workers: int = WORKERS) -> list[T]:
    """The order a slice's tests go to xdist: the `workers` longest, then the `workers` shortest, then the rest longest
    first. An xdist worker holds the test after the one it runs (it must know the next to run one), so each worker's
    first test is followed by a quick one: longest first alone put the third longest behind the longest (slice 3/20:
    311 s then 115 s on one worker, 452 s for a slice estimated at 355 s)."""
    if len(longest_first) <= 2 * workers:
        return list(longest_first)
    head, tail = longest_first[:workers], longest_first[workers:]
    return [*head, *tail[::-1][:workers], *tail[: len(tail) - workers]]


def partition(seconds: dict[str, float], n: int) -> dict[str, int]:
    """Node id -> slice (1..n): longest first into the slice with the least worker-seconds so far,
    ties to the lower slice; deterministic in the table alone."""
    load = [(0.0, k) for k in range(1, n + 1)]  # (worker-seconds, slice), a heap
    slices = {}
    for nodeid in sorted(seconds, key=lambda t: (-seconds[t], t)):
        total, k = heapq.heappop(load)
        slices[nodeid] = k
        heapq.heappush(load, (total + seconds[nodeid], k))
    return slices


def too_long(table: Table) -> list[str]:
    """Tests longer than a whole slice's budget: no N can hold them."""
    return sorted(t for t, e in table.tests.items() if e.seconds > table.budget_s)


def slices(table: Table, shared: set[str]) -> tuple[int, dict[str, int]]:
    """(N, node id -> slice): the fewest slices whose every estimated wall time fits the budget (there
    is one: with a slice per test, each slice's wall time is its test's)."""
    if long := too_long(table):
        raise ValueError(f"longer than a slice's budget of {table.budget_s:.0f} s (shorten or split them): {long}")
    seconds = {t: e.seconds for t, e in table.tests.items()}
    n = max(1, int(sum(seconds.values()) / (WORKERS * table.budget_s)))  # fewer cannot fit
    while True:
        parts = partition(seconds, n)
        walls = [wall_estimate({t: s for t, s in seconds.items() if parts[t] == k}, shared) for k in range(1, n + 1)]
        if max(walls) <= table.budget_s:
            return n, parts
        n += 1


def slice_walls(table: Table, shared: set[str]) -> dict[int, tuple[float, float]]:
    """Slice -> (worker-seconds, estimated wall seconds under -n 2)."""
    n, parts = slices(table, shared)
    out = {}
    for k in range(1, n + 1):
        seconds = {t: e.seconds for t, e in table.tests.items() if parts[t] == k}
        out[k] = (sum(seconds.values()), wall_estimate(seconds, shared))
    return out


def parse_slice(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N; a ValueError naming what is allowed otherwise."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--nightly-slice {text!r}: expected K/N, two integers with 1 <= K <= N (e.g. 3/12)") from None
    if not 1 <= k <= n:
        raise ValueError(f"--nightly-slice {text!r}: K must be between 1 and N")
    return k, n


def commit_count(cwd: Path = ROOT) -> int:
    """How many commits main's first-parent history holds up to HEAD: each landing adds one."""
    out = subprocess.run(["git", "rev-list", "--count", "--first-parent", "HEAD"], cwd=cwd, capture_output=True,
                         text=True, check=True, timeout=60)  # fmt: skip
    return int(out.stdout)


def rotation(count: int, n: int) -> int:
    """The slice (1..n) of the commit that is `count` commits into the first-parent history."""
    return count % n + 1


DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")  # pytest's --durations=0 lines


def measured(log: str) -> dict[str, float]:
    """Node id -> seconds (setup, call and teardown together) from pytest's `--durations=0` lines in `log`, as
    .ci/run's slice prints them; the phases pytest hides (under 0.005 s) count as nothing."""
    seconds: dict[str, float] = {}
    for line in log.splitlines():
        if found := DURATION.match(line):
            seconds[found.group(3)] = seconds.get(found.group(3), 0.0) + float(found.group(1))
    return seconds


def recorded(raw: dict, seconds: dict[str, float], note: str, day: str) -> tuple[dict, list[str]]:
    """The table's raw JSON with each listed test of `seconds` measured anew (rounded up to 5 s, at least 5; `note` says how it
    ran, e.g. "by .ci/run's slice 1/22 under -n 2"): (the new JSON, the node ids in `seconds` the table does not list)."""
    tests = dict(raw["tests"])
    for nodeid, s in seconds.items():
        if nodeid in tests:
            tests[nodeid] = [max(5, int(5 * -(-s // 5))), f"measured {day}: {s:.0f} s, {note}"]
    return {**raw, "tests": tests}, sorted(set(seconds) - set(tests))


def markdown(table: Table, shared: set[str]) -> str:
    """The generated part of docs/nightly.md: the slices' totals, then every test with its slice."""
    n, parts = slices(table, shared)
    walls = slice_walls(table, shared)
    lines = [f"N = {n} slices, each at most {table.budget_s:.0f} s of estimated wall time under `-n 2`.", "",
             "| slice | tests | worker-seconds | estimated wall (-n 2) |", "|---:|---:|---:|---:|"]  # fmt: skip
    for k in range(1, n + 1):
        count = sum(1 for t in parts if parts[t] == k)
        lines.append(f"| {k} | {count} | {walls[k][0]:.0f} | {walls[k][1]:.0f} |")
    lines += ["", "| slice | test | seconds | figure |", "|---:|---|---:|---|"]
    for nodeid in sorted(parts, key=lambda t: (parts[t], -table.tests[t].seconds, t)):
        entry = table.tests[nodeid]
        lines.append(f"| {parts[nodeid]} | `{nodeid}` | {entry.seconds:.0f} | {entry.source} |")
    if table.by_hand:
        lines += ["", "In no slice, being longer than any or needing what CI has not: run by hand (`python -m pytest -m nightly NODEID`).", "",
                  "| test | seconds | figure | why it is in no slice |", "|---|---:|---|---|"]  # fmt: skip
        for nodeid, (entry, why) in sorted(table.by_hand.items()):
            lines.append(f"| `{nodeid}` | {entry.seconds:.0f} | {entry.source} | {why} |")
    return "\n".join(lines) + "\n"


def with_generated(page: str, generated: str) -> str:
    """`page` with the text between its BEGIN and END markers replaced by `generated`."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{generated}{END}{tail}"


def main(argv: list[str]) -> int:
    table, shared = load_table(), shared_fixture_modules()
    if argv == ["rotation"]:
        n, _ = slices(table, shared)
        print(f"{rotation(commit_count(), n)}/{n}")
    elif len(argv) == 2 and argv[0] == "slice":
        k, n = parse_slice(argv[1])
        parts = partition({t: e.seconds for t, e in table.tests.items()}, n)
        chosen = {
            t: table.tests[t].seconds for t in sorted(parts, key=lambda t: -table.tests[t].seconds) if parts[t] == k
        }
        for nodeid, seconds in chosen.items():
            print(f"  {seconds:6.0f} s  {nodeid}")
        print(f"  {sum(chosen.values()):6.0f} worker-seconds, about {wall_estimate(chosen, shared):.0f} s under -n 2")
    elif len(argv) == 3 and argv[0] == "record":
        raw = json.loads(TABLE.read_text())
        day = datetime.date.today().isoformat()
        new, unlisted = recorded(raw, measured(Path(argv[1]).read_text()), argv[2], day)
        TABLE.write_text(json.dumps(new, indent=1) + "\n")
        print(f"{sum(new['tests'][t] != raw['tests'][t] for t in raw['tests'])} figures measured anew; "
              f"not in the table (not nightly, or by hand): {len(unlisted)}")  # fmt: skip
    elif argv == ["--write"]:
        DOCS.write_text(with_generated(DOCS.read_text(), markdown(table, shared)))
    elif not argv:
        print(markdown(table, shared), end="")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
