"""Which hyperparameters reach a return soonest in wall-clock time: `marljax bench target` over a set
of candidates, one fresh process each, one after the other, then a table sorted by time.

    python experiments/target_search.py [--base "key=value ..."] [--target R] [CANDIDATE ...]

A CANDIDATE is a quoted set of overrides ("lr=4e-3", "num_envs=128 ppo.num_minibatches=8"); ""
is the base config itself. Without candidates it runs the default search of docs/performance.md
section 3: IPPO's own defaults (the base has `family_defaults=none`, so no env family's defaults
are in it), then one setting changed at a time (learning rate, num_envs, num_steps, update epochs,
minibatches). Each process compiles from scratch (`compile_cache=false`: a candidate run after
another of the same shapes would otherwise find its programs in the persistent cache), so every
time includes its own compilation, as a first run's does.
Run it on a quiet machine: the candidates are timed one after another, not side by side.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

# one change at a time from IPPO's defaults (lr 2e-3, 64 envs x 128 steps, 4 epochs x 4 minibatches)
DEFAULT_CANDIDATES = [
    "",
    "lr=1e-3", "lr=4e-3",
    "num_envs=32", "num_envs=128",
    "num_steps=64",
    "ppo.update_epochs=2", "ppo.update_epochs=8",
    "ppo.num_minibatches=2", "ppo.num_minibatches=8",
]  # fmt: skip


STOP_GRACE_S = 120.0  # how long a timed-out run may take to finish its chunk and clean up after SIGTERM
# one row of `marljax bench target`'s curve: "      32,768 env steps     117.9 s  return 0.571"
CURVE_ROW = re.compile(r"^\s*([\d,]+) env steps\s+([\d.]+) s\s+return (-?[\d.]+)\s*$")


def best_so_far(stdout: str) -> str:
    """The best return on a stopped run's printed curve, with when it came: 'best R at N env steps (T s)'."""
    rows = [m.groups() for m in map(CURVE_ROW.match, stdout.splitlines()) if m]
    if not rows:
        return "no chunk finished"
    steps, wall, value = max(rows, key=lambda row: float(row[2]))
    return f"best {float(value):.3f} at {steps} env steps ({wall} s)"


def bench_target(overrides: list[str], timeout_s: float) -> dict:
    """One `marljax bench target` process: its JSON line, or {"reached": False, "error": ...}."""
    cmd = [sys.executable, "-m", "marljax.cli", "bench", "target", *overrides]  # this interpreter's marljax
    unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}  # so a run stopped by the timeout leaves its curve
    done = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=unbuffered)
    try:
        stdout, stderr = done.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        done.terminate()  # SIGTERM: marljax stops after its chunk and removes its temporary run directory
        try:
            stdout, _ = done.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # then SIGKILL; a retried communicate() loses no output
            done.kill()
            stdout, _ = done.communicate()
        return {"reached": False, "error": f"timed out after {timeout_s:.0f} s; {best_so_far(stdout)}"}
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        return {"reached": False, "error": tail[0]}
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", help='quoted overrides per candidate; "" is the base config')
    parser.add_argument(
        "--base",
        default="num_seeds=2 num_chunks=100 family_defaults=none",
        help="overrides every candidate starts from (default: 2 seeds, a check every 50k env steps, the "
        "algorithm's own defaults)",
    )
    parser.add_argument("--target", type=float, default=None, help="the return to reach (default: the env's)")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds per candidate before it counts as not reached"
    )
    args = parser.parse_args(argv)
    base = shlex.split(args.base) + ([f"target={args.target}"] if args.target is not None else [])
    if not any(arg.startswith("compile_cache=") for arg in base):
        base.append("compile_cache=false")  # every candidate compiles cold
    rows = []
    for candidate in args.candidates or DEFAULT_CANDIDATES:
        result = bench_target(base + shlex.split(candidate), args.timeout)
        rows.append({"candidate": candidate or "(base)", **result})
        shown = (
            f"{result['wall_s']:.1f} s, {result['env_steps']:,} env steps"
            if result.get("reached")
            else result.get("error", "not reached")
        )
        print(f"  {candidate or '(base)':<28} {shown}", flush=True)
    print(f"marljax bench target over {len(rows)} candidates, base: {args.base}")
    print(f"{'candidate':<28} {'wall s':>8} {'compile s':>10} {'env steps':>11} {'return':>8}")
    for r in sorted(rows, key=lambda r: r["wall_s"] if r.get("reached") else float("inf")):
        if r.get("reached"):
            # mode=async reports no compile time (its programs compile on the actor and learner threads)
            compile_s = "n/a" if r["compile_s"] is None else f"{r['compile_s']:.1f}"
            print(f"{r['candidate']:<28} {r['wall_s']:>8.1f} {compile_s:>10} {r['env_steps']:>11,} {r['return']:>8.2f}")
        else:
            print(f"{r['candidate']:<28} {'not reached':>8}  {r.get('error', '')}")
    print(json.dumps({"bench": "target_search", "base": args.base,
                      "rows": [{k: v for k, v in r.items() if k != "curve"} for r in rows]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
