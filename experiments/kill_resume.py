"""Fault test: SIGKILL a training run at a random moment, resume it, and compare with an uninterrupted run.

    python experiments/kill_resume.py [--trials 10] [--seed 0] [key=value ...]

Runs `marljax train` once to the end (the reference), then, per trial, starts the same
run in a fresh out_dir, kills it with SIGKILL at a random time while it trains (uniform
between the moment the reference finished compiling and its end), and runs
`resume=true` to the end. Each trial reports three things apart: whether the kill took
the process (return code -9, not a run that had already finished), whether the resume
restored a checkpoint (and which) rather than starting from scratch, and whether its
metrics rows (without wall-clock fields) and every array of its final checkpoint
(parameters, Adam, keys, env states, counters) equal the reference's bit for bit. A trial
counts as identical only when it was killed, resumed from a checkpoint and bitwise equal.
Prints one line per trial, the three counts, and last a JSON line. The helpers are
`marljax.testing.faults`, shared with tests/test_sigkill.py.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from marljax.testing.faults import (
    FinishedRun,
    Outcome,
    finished_steps,
    first_difference,
    resumed_from,
    run_to_end,
    sigkill,
    start_train,
)

# ~1000 updates in chunks of 20, a checkpoint every 100: a kill lands before, between and after them
DEFAULTS = ["num_envs=16", "num_steps=32", "total_timesteps=500000", "num_chunks=50", "checkpoint_every=100",
            "progress=false", "plot=false"]  # fmt: skip


def trial(run: list[str], out: Path, kill_at: float, reference: FinishedRun) -> tuple[Outcome, list[int]]:
    """Start the run, SIGKILL it after `kill_at` seconds, resume it to the end, compare."""
    proc = start_train(run)
    try:
        proc.wait(timeout=kill_at)  # it finished first: not killed (its return code is 0)
    except subprocess.TimeoutExpired:
        pass
    killed = sigkill(proc) == -9
    ckpts = finished_steps(out)
    log, _ = run_to_end(run + ["resume=true"])
    outcome = Outcome(killed, resumed_from(log), first_difference(FinishedRun.read(out), reference))
    return outcome, ckpts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill times")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args, overrides = parser.parse_known_args()
    overrides = DEFAULTS + overrides
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="marljax_kill_"))

    t = time.perf_counter()
    ref_dir = root / "reference"
    _, compiled_at = run_to_end(overrides + [f"out_dir={ref_dir}"])
    ref_wall = time.perf_counter() - t
    reference = FinishedRun.read(ref_dir)
    print(
        f"reference: {len(reference.rows)} rows, final update {reference.update}, {ref_wall:.1f}s wall "
        f"(training from {compiled_at:.1f}s)",
        flush=True,
    )

    outcomes = []
    for i in range(args.trials):
        out = root / f"trial{i}"
        kill_at = rng.uniform(compiled_at, ref_wall)
        outcome, ckpts = trial(overrides + [f"out_dir={out}"], out, kill_at, reference)
        outcomes.append(outcome)
        start = (
            "started from scratch" if outcome.resumed_from is None else f"resumed from update {outcome.resumed_from}"
        )
        same = "bitwise equal" if outcome.difference is None else f"DIFFERENT: {outcome.difference}"
        uncounted = " (not counted as identical)" if outcome.difference is None and not outcome.identical else ""
        print(f"trial {i}: {'killed' if outcome.killed else 'NOT killed (it had finished)'} at {kill_at:.1f}s "
              f"with checkpoints {ckpts}; {start}; {same}{uncounted}", flush=True)  # fmt: skip
    n = args.trials
    counts = {
        "killed": sum(o.killed for o in outcomes),
        "resumed_from_checkpoint": sum(o.resumed_from is not None for o in outcomes),
        "bitwise_equal": sum(o.difference is None for o in outcomes),
        "identical": sum(o.identical for o in outcomes),  # killed, resumed from a checkpoint, and bitwise equal
    }
    print(f"{counts['killed']}/{n} killed, {counts['resumed_from_checkpoint']}/{n} resumed from a checkpoint, "
          f"{counts['bitwise_equal']}/{n} bitwise equal; {counts['identical']}/{n} identical "
          "(killed, resumed from a checkpoint and bitwise equal)")  # fmt: skip
    trials = [{"killed": o.killed, "resumed_from": o.resumed_from, "identical": o.identical,
               "difference": o.difference} for o in outcomes]  # fmt: skip
    print(json.dumps({"trials": n, **counts, "reference_wall_s": round(ref_wall, 2), "per_trial": trials}))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if counts["identical"] == n else 1


if __name__ == "__main__":
    sys.exit(main())
