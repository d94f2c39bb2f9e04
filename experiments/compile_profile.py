"""Where compile time goes in one process: every program XLA compiles, by phase, with its count.

    PYTHONPATH=. python experiments/compile_profile.py [--cache] [--out DIR] [key=value ...]

runs, one after another in this process: (a) the default `marljax train` shortened to
total_timesteps=2e5, with an evaluation every 5 updates and a checkpoint every 10; (b) a resume
of it to 2.5e5 (resume=true); (c) a small sweep (2 learning rates x 2 seeds, traced: one program).
`key=value` overrides go to (a) and (b). The compile cache is off unless --cache (then warm runs
read programs back: `cached` counts those).

It prints one line per program name and phase: how many times it was compiled, how many of those
had the same name and argument shapes as an earlier compile in the same part ("same": a hint, not
proof of a repeat, since a static argument such as a chunk's update count, a closed-over episode
count or an eager op's parameters are not in the shapes), total seconds; then a total per phase;
then, LAST, one JSON line.
Phases come from the marljax functions on the stack when the program compiled: chunk (the chunk
programs), eval, ckpt_save, ckpt_restore, init (env, trainer and state construction), guard (the
NaN guard's check), other. Seconds are XLA's backend compile only (tracing and lowering apart).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from marljax.config import load_config
from marljax.train.compile_cache import Compiled, CompileLog

# (phase, marljax `module.function` on the stack): the innermost frame that matches decides
PHASES = (
    ("chunk", "mesh.compile_chunks"),
    ("eval", "evaluate.__call__"),
    ("eval", "evaluate.make_evaluator"),
    ("eval", "evaluate.keep_best"),
    ("eval", "evaluate.eval_keys"),
    ("ckpt_save", "checkpoint.save"),
    ("ckpt_restore", "checkpoint.restore_latest"),
    ("ckpt_restore", "checkpoint.newest_meta"),
    ("guard", "driver.nan_guard"),
    ("init", "mesh.seed_keys"),
    ("init", "driver.resume"),
    ("init", "runner.fresh"),
    ("init", "wiring.prepare"),
    ("init", "runner._prepare"),
    ("init", "envs"),
)
EVAL_NAMES = ("jit(one_row)", "jit(keep_best)")  # the sweep calls its evaluator from driver.step


def phase(p: Compiled) -> str:
    if p.name in EVAL_NAMES:
        return "eval"
    for frame in p.where:
        for name, where in PHASES:
            if frame == where or frame.startswith(where + "."):
                return name
    return "other"


def table(part: str, programs: list[Compiled]) -> list[dict]:
    """One dict per (phase, name): compiles, same (name and shapes as an earlier compile), cached, seconds."""
    out: dict[tuple[str, str], dict] = {}
    seen: set[tuple[str, str]] = set()
    for p in programs:
        key = (phase(p), p.name)
        row = out.setdefault(key, {"part": part, "phase": key[0], "name": p.name, "compiles": 0, "same": 0,
                                   "cached": 0, "seconds": 0.0})  # fmt: skip
        row["compiles"] += 1
        row["same"] += (p.name, p.shapes) in seen and bool(p.shapes)
        row["cached"] += p.cached
        row["seconds"] += p.seconds
        seen.add((p.name, p.shapes))
    return sorted(out.values(), key=lambda r: (r["phase"], -r["seconds"]))


def run_part(part: str, fn) -> tuple[list[dict], float]:
    t = time.perf_counter()
    with CompileLog() as log:
        fn()
    return table(part, log.programs), time.perf_counter() - t


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", action="store_true", help="leave the persistent compile cache on (default: off)")
    ap.add_argument("--out", default=None, help="directory for the runs (default: a temporary one)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="compile_profile_"))
    cache = [] if args.cache else ["compile_cache=false"]
    common = ["progress=false", "plot=false", *cache]
    run = [*common, "eval_every=5", "checkpoint_every=10", f"out_dir={out / 'train'}", *args.overrides]

    from marljax.sweeps.runner import run_sweep
    from marljax.sweeps.spec import expand
    from marljax.train.loop import train

    quiet = lambda _line: None  # noqa: E731
    parts = {
        "train": lambda: train(load_config(None, [*run, "total_timesteps=2e5", "overwrite=true"]), log=quiet),
        "resume": lambda: train(load_config(None, [*run, "total_timesteps=2.5e5", "resume=true"]), log=quiet),
        "sweep": lambda: run_sweep(
            expand(
                {
                    "name": "compile_profile",
                    "out_dir": str(out / "sweep"),
                    "seeds": 2,
                    "axes": {"lr": [1e-3, 4e-3]},
                    "base": {
                        "env": "MPE_simple_spread_v3",
                        "num_envs": 16,
                        "total_timesteps": 4e4,
                        "eval_every": 5,
                        "eval_episodes": 8,
                        "plot": False,
                        **({} if args.cache else {"compile_cache": False}),
                    },
                }
            ),
            log=quiet,
            overwrite=True,
            progress=False,
        ),
    }
    rows, walls = [], {}
    for part, fn in parts.items():
        got, walls[part] = run_part(part, fn)
        rows += got
    print(f"{'part':7s} {'phase':12s} {'program':34s} {'compiles':>8s} {'same':>5s} {'cached':>6s} {'seconds':>8s}")
    for r in rows:
        print(f"{r['part']:7s} {r['phase']:12s} {r['name'][:34]:34s} {r['compiles']:8d} {r['same']:5d} "
              f"{r['cached']:6d} {r['seconds']:8.2f}")  # fmt: skip
    totals: dict[str, dict] = {}
    for r in rows:
        t = totals.setdefault(f"{r['part']}/{r['phase']}", {"compiles": 0, "same": 0, "seconds": 0.0})
        for k in ("compiles", "same"):
            t[k] += r[k]
        t["seconds"] += r["seconds"]
    print()
    for key, t in totals.items():
        print(f"{key:24s} {t['compiles']:4d} compiles {t['same']:3d} same {t['seconds']:7.2f}s")
    for part, wall in walls.items():
        print(f"{part}: wall {wall:.1f}s, compile {sum(r['seconds'] for r in rows if r['part'] == part):.1f}s")
    print(json.dumps({"cache": args.cache, "wall_s": walls, "totals": totals,
                      "programs": [{**r, "seconds": round(r["seconds"], 3)} for r in rows]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
