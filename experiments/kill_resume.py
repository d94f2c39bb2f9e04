"""Fault test: SIGKILL a training run at a random moment, resume it, and compare with an uninterrupted run.

    python experiments/kill_resume.py [--trials 10] [--seed 0] [key=value ...]

Runs `marljax train` once to the end (the reference), then, per trial, starts the same
run with `resume=true`, kills it with SIGKILL at a random time while it trains (uniform
between the moment the reference finished compiling and its end), and runs
`resume=true` again to the end. A trial counts as
identical when its metrics rows (without wall-clock fields) and every array of its
final checkpoint (parameters, Adam, keys, env states, counters) equal the reference's
bit for bit. Prints one line per trial, `N/N identical`, and last a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from marljax.train.metrics import read_jsonl
from marljax.train.policy import restore_run

# ~1000 updates in chunks of 20, a checkpoint every 100: a kill lands before, between and after them
DEFAULTS = ["num_envs=16", "num_steps=32", "total_timesteps=500000", "num_chunks=50", "checkpoint_every=100",
            "progress=false", "plot=false"]  # fmt: skip
TIMING = ("wall_s", "env_steps_per_s")


def _train(overrides: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "marljax.cli", "train", *overrides]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines arrive as printed: "compiled in" is timed
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
    )


def _finish(overrides: list[str]) -> tuple[str, float]:
    """Run to the end; return its output and the seconds until it reported compiling done."""
    t0 = time.perf_counter()
    proc = _train(overrides)
    lines, compiled_at = [], 0.0
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("compiled in") and not compiled_at:
            compiled_at = time.perf_counter() - t0
    proc.wait()
    out = "".join(lines)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{out[-3000:]}")
    return out, compiled_at


def _final_state(out_dir: Path):
    state, meta, _ = restore_run(out_dir)
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(state))], meta["update"]


def _rows(out_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_jsonl(out_dir / "metrics.jsonl")]


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
    _, compiled_at = _finish(overrides + [f"out_dir={ref_dir}"])
    ref_wall = time.perf_counter() - t
    ref_rows = _rows(ref_dir)
    ref_state, ref_update = _final_state(ref_dir)
    print(f"reference: {len(ref_rows)} rows, final update {ref_update}, {ref_wall:.1f}s wall "
          f"(training from {compiled_at:.1f}s)", flush=True)

    identical = 0
    for trial in range(args.trials):
        out = root / f"trial{trial}"
        run = overrides + [f"out_dir={out}", "resume=true"]
        kill_at = rng.uniform(compiled_at, ref_wall)
        proc = _train(run)
        try:
            proc.wait(timeout=kill_at)
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            killed = True
        ckpts = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit()) if (
            out / "checkpoints").exists() else []
        log, _ = _finish(run)
        resumed = next((line for line in log.splitlines() if line.startswith("resumed from")), "started from scratch")
        state, update = _final_state(out)
        same = _rows(out) == ref_rows and update == ref_update and all(
            a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(state, ref_state)
        )
        identical += same
        print(
            f"trial {trial}: {'killed' if killed else 'finished'} at {kill_at:.1f}s with checkpoints {ckpts}; "
            f"{resumed}; {'identical' if same else 'DIFFERENT'}",
            flush=True,
        )
    print(f"{identical}/{args.trials} identical")
    print(json.dumps({"trials": args.trials, "identical": identical, "reference_wall_s": round(ref_wall, 2)}))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if identical == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
