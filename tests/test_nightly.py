"""The nightly rotation (tests/_nightly.py): slices balanced by the committed durations table, the
fewest that fit the budget, chosen by the commit, listed in docs/nightly.md, and selected by
`--nightly-slice K/N` exactly as listed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import _nightly


def test_partition_puts_the_longest_first_into_the_emptiest_slice():
    seconds = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 1.0}
    # a -> 1, b -> 2, c -> 2 (4 < 5), d -> 1 (5 < 7), e -> 2 (7 < 8, then 8 against 8: the lower slice)
    assert _nightly.partition(seconds, 2) == {"a": 1, "b": 2, "c": 2, "d": 1, "e": 2}
    assert _nightly.partition(dict(reversed(seconds.items())), 2) == _nightly.partition(seconds, 2)  # order-free
    parts = _nightly.partition(seconds, 7)  # more slices than tests: one each, the rest empty
    assert sorted(parts.values()) == [1, 2, 3, 4, 5]


def test_each_workers_first_test_is_followed_by_a_quick_one():
    tests = ["t9", "t8", "t7", "t6", "t5", "t4", "t3"]  # longest first
    # xdist hands worker 1 the 1st and 3rd, worker 2 the 2nd and 4th: the two shortest sit behind the two longest
    assert _nightly.xdist_order(tests, 2) == ["t9", "t8", "t3", "t4", "t7", "t6", "t5"]
    assert sorted(_nightly.xdist_order(tests, 2)) == sorted(tests)  # a reordering, nothing lost or added
    assert _nightly.xdist_order(tests[:4], 2) == tests[:4]  # no more than one each behind the first: as they were


def test_the_wall_estimate_keeps_a_shared_fixture_modules_tests_on_one_worker():
    seconds = {"tests/m.py::a": 3.0, "tests/m.py::b": 3.0, "tests/x.py::c": 2.0, "tests/x.py::d": 2.0}
    assert _nightly.wall_estimate(seconds, set()) == 5.0  # 3 + 2 on each worker
    assert _nightly.wall_estimate(seconds, {"tests/m.py"}) == 6.0  # m's 6 s on one worker, c and d on the other


def test_slices_are_the_fewest_that_fit_and_a_test_longer_than_the_budget_is_refused():
    table = _nightly.Table(10.0, {f"t{i}": _nightly.Entry(s, "x") for i, s in enumerate([9.0, 8.0, 6.0, 5.0, 4.0])})
    n, parts = _nightly.slices(table, set())
    walls = [_nightly.wall_estimate({t: table.tests[t].seconds for t in parts if parts[t] == k}, set())
             for k in range(1, n + 1)]  # fmt: skip
    assert n == 2 and max(walls) <= 10.0  # 32 worker-seconds: one slice of two workers holds at most 20
    one_less = _nightly.partition({t: e.seconds for t, e in table.tests.items()}, n - 1)
    assert _nightly.wall_estimate({t: table.tests[t].seconds for t in one_less}, set()) > 10.0
    long = _nightly.Table(10.0, {**table.tests, "too-long": _nightly.Entry(11.0, "x")})
    with pytest.raises(ValueError, match="too-long"):
        _nightly.slices(long, set())


def test_consecutive_commits_take_every_slice_once():
    assert sorted(_nightly.rotation(count, 7) for count in range(430, 437)) == list(range(1, 8))
    assert _nightly.parse_slice("3/12") == (3, 12)
    for bad in ("0/3", "4/3", "3", "a/b"):
        with pytest.raises(ValueError, match="K"):
            _nightly.parse_slice(bad)


def test_the_committed_table_fits_and_its_figures_say_where_they_come_from():
    table = _nightly.load_table()
    n, parts = _nightly.slices(table, _nightly.shared_fixture_modules())
    assert n >= 1 and set(parts.values()) == set(range(1, n + 1))
    assert all(e.seconds > 0 and e.source.startswith(("measured", "estimated")) for e in table.tests.values())


def test_docs_list_the_slices_as_generated():
    page = _nightly.DOCS.read_text()
    generated = _nightly.markdown(_nightly.load_table(), _nightly.shared_fixture_modules())
    assert _nightly.with_generated(page, generated) == page, (
        "docs/nightly.md is stale: python -m tests._nightly --write"
    )


def test_the_table_lists_every_nightly_test_and_nothing_else(request):
    if not request.config.stash.get(_nightly.WHOLE_SUITE, False):
        pytest.skip("needs the whole suite collected: python -m pytest tests -k test_the_table_lists")
    table = _nightly.load_table()
    collected, listed = set(request.config.stash[_nightly.NIGHTLY_IDS]), {*table.tests, *table.by_hand}
    assert not collected - listed, (
        f"{_nightly.TABLE.name} lacks (measure each with --durations=0): {collected - listed}"
    )
    # a module skipped whole where an optional package is absent (flashbax on the card's node) yields
    # no items: its entries are checked where it is installed (CI), a deleted file's everywhere
    files = {item.nodeid.split("::")[0] for item in request.session.items}
    skipped = {
        t for t in listed - collected if t.split("::")[0] not in files and (_nightly.ROOT / t.split("::")[0]).exists()
    }
    stale = listed - collected - skipped
    assert not stale, f"{_nightly.TABLE.name} lists tests that are no longer nightly: {stale}"


def test_the_option_selects_exactly_the_listed_slice():
    """`--nightly-slice K/N` collects the table's slice K (here within two files), whatever -m says; a
    slice out of range is refused in one line."""
    table = _nightly.load_table()
    n, parts = _nightly.slices(table, _nightly.shared_fixture_modules())
    files = ("tests/test_balance.py", "tests/test_bench_agents.py")  # light to collect, two nightly tests each
    k = parts[next(t for t in sorted(parts) if t.startswith(files))]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", "not nightly", "--nightly-slice", f"{k}/{n}", *files],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    selected = {line for line in done.stdout.splitlines() if "::" in line}
    assert selected == {t for t in parts if parts[t] == k and t.startswith(files)}, done.stdout + done.stderr
    refused = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--nightly-slice", f"{n + 1}/{n}",
                              files[0]], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert refused.returncode == 4 and "K must be between 1 and N" in refused.stderr, refused.stderr


def test_a_runs_durations_lines_become_the_tables_measured_figures():
    """`record` reads pytest's --durations=0 lines (as .ci/run's slice prints them): a test's phases summed and rounded
    up to 5 s (at least 5), its figure saying it was measured; a test the table does not list is reported, not added,
    and the table's other figures stay as they were."""
    log = """============================== slowest durations ===============================
666.56s call     tests/a.py::test_x[one-1e6]
0.51s setup    tests/a.py::test_x[one-1e6]
12.57s call     tests/b.py::test_y
3.00s call     tests/c.py::test_unlisted
0.00s call     tests/d.py::t
(16 durations < 0.005s hidden.  Use -vv to show these durations.)
"""
    seconds = _nightly.measured(log)
    assert seconds == pytest.approx({"tests/a.py::test_x[one-1e6]": 667.07, "tests/b.py::test_y": 12.57,
                                     "tests/c.py::test_unlisted": 3.0, "tests/d.py::t": 0.0})  # fmt: skip
    raw = {"slice_budget_s": 540.0, "tests": {"tests/a.py::test_x[one-1e6]": [570, "estimated: x"],
                                              "tests/b.py::test_y": [100, "estimated: y"], "tests/d.py::t": [9, "measured: z"], "tests/e.py::t": [9, "measured: w"]}}  # fmt: skip
    new, unlisted = _nightly.recorded(raw, seconds, "by slice 1/22 under -n 2", "2026-11-30")
    assert new["tests"] == {
        "tests/a.py::test_x[one-1e6]": [670, "measured 2026-11-30: 667 s, by slice 1/22 under -n 2"],
        "tests/b.py::test_y": [15, "measured 2026-11-30: 13 s, by slice 1/22 under -n 2"],
        "tests/d.py::t": [5, "measured 2026-11-30: 0 s, by slice 1/22 under -n 2"],  # at least 5: every figure > 0
        "tests/e.py::t": [9, "measured: w"],
    }
    assert (
        unlisted == ["tests/c.py::test_unlisted"]
        and new["slice_budget_s"] == 540.0
        and raw["tests"]["tests/b.py::test_y"][0] == 100
    )
