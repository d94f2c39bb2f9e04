"""experiments/target_search.py: a candidate stopped by the timeout still reports the best return its
printed curve reached, read from the output `marljax bench target` printed before it was stopped."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import target_search  # noqa: E402

# what a run stopped mid-way leaves on its stdout
PARTIAL = """marljax bench target: ippo on storm_np, 2 seed(s), target 1e+09
Importing submoduled environments...
       32,768 env steps     117.9 s  return 0.571
       65,536 env steps     166.3 s  return 3.259
       98,304 env steps     219.1 s  return -1.079
"""


def test_a_stopped_run_reports_its_best_return_and_when():
    assert target_search.best_so_far(PARTIAL) == "best 3.259 at 65,536 env steps (166.3 s)"


def test_a_run_stopped_before_its_first_chunk_says_so():
    header_only = "marljax bench target: ippo on storm_np\nImporting submoduled environments...\n"
    assert target_search.best_so_far(header_only) == "no chunk finished"
    assert target_search.best_so_far("") == "no chunk finished"
