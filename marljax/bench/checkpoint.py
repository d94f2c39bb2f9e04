"""`marljax bench checkpoint`: training time with periodic checkpoints vs only the final one.

Runs `marljax.train.loop.train` 2 x `rounds` times, alternating without / with, each into a fresh
temporary out_dir, and times the run after compilation (training, metrics, saves and the final
wait for them). overhead = median over rounds of with / without - 1.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any

from marljax.bench.table import report
from marljax.config import Config, replace
from marljax.schema import ConfigError
from marljax.train.loop import train


def run_checkpoint_bench(config: Config, rounds: int = 2, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Time `rounds` pairs of runs (see the module docstring); print a table, then one JSON line."""
    if config.checkpoint_every == 0:
        raise ConfigError("checkpoint_every", "must be > 0 to measure periodic checkpoints against none")
    times: dict[str, list[float]] = {"without": [], "with": []}
    saves = 0
    with tempfile.TemporaryDirectory(prefix="marljax_ckpt_bench_") as root:
        for r in range(rounds):
            for mode, every in (("without", 0), ("with", config.checkpoint_every)):
                run = replace(config, out_dir=f"{root}/{mode}{r}", checkpoint_every=every, progress=False, plot=False)
                t = time.perf_counter()
                res = train(run, log=lambda s: None)
                times[mode].append(time.perf_counter() - t - res.compile_s)
                if mode == "with":
                    saves = len(res.checkpoints) - 1  # the final save happens in both modes
                log(f"round {r} {mode:>7} checkpoints: {times[mode][-1]:.2f} s")
    ratios = sorted(w / wo for w, wo in zip(times["with"], times["without"]))
    result: dict[str, Any] = {
        "env": config.env,
        "total_timesteps": config.total_timesteps,
        "checkpoint_every": config.checkpoint_every,
        "periodic_saves": saves,
        "seconds_without": [round(x, 3) for x in times["without"]],
        "seconds_with": [round(x, 3) for x in times["with"]],
        "overhead": round(ratios[len(ratios) // 2] - 1.0, 4),
    }
    rows = [
        ("without periodic saves", " ".join(f"{x:.2f}" for x in result["seconds_without"]), "s per run"),
        (
            "with periodic saves",
            " ".join(f"{x:.2f}" for x in result["seconds_with"]),
            f"s per run ({saves} saves, every {config.checkpoint_every} updates)",
        ),
        ("checkpoint overhead", f"{100 * result['overhead']:+.2f}%", f"median of {rounds} paired runs"),
    ]
    return report(rows, result, log)
