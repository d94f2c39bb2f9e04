"""Host env copies with a straggler: the async pipeline's env-steps/s with 1 copy in 8 ten times
slower, against the same run with every copy fast, for each `async.host_stepping`.

    python -m marljax.bench.stragglers [key=value ...]     # e.g. num_envs=8 num_steps=32

The env is `marljax.envs.host_straggler` (host_spread with a 2 ms step, `env_kwargs.step_cost_s`);
the rate is consumed samples per second of `AsyncRun.run` after a short warm-up run. Lockstep
steps the copies one after another, so its rate falls with the straggler's extra cost;
independent stepping fills the straggler's columns from the other copies. Prints a table, then
one JSON line.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from marljax.bench.measure import six_digits
from marljax.bench.table import Row, report
from marljax.config import Config, load_config, replace
from marljax.pipeline.actor_learner import AsyncRun
from marljax.train.wiring import make_adapter, make_trainer

ENV = "pettingzoo:marljax.envs.host_straggler:parallel_env"
DEFAULTS = ["mode=async", f"env={ENV}", "num_envs=8", "num_steps=32", "hidden_size=32", "progress=false"]
BATCHES = 20  # timed batches per run


def pipeline_rate(config: Config) -> tuple[float, dict]:
    """(consumed samples/s of the pipeline after a warm-up run, its last env-health counters)."""
    runner = AsyncRun(config, make_adapter(config), make_trainer, log=lambda s: None)
    runner.run(2, lambda *a: None, chunk=2)
    t = time.perf_counter()
    final = runner.run(BATCHES, lambda *a: None, chunk=BATCHES)
    return final.consumed * runner.samples_per_batch / (time.perf_counter() - t), runner.health.snapshot()


def run_straggler_bench(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    kwargs = dict(config.env_kwargs)
    slow_every, factor = kwargs.pop("slow_every", 8), kwargs.get("slow_factor", 10.0)
    log(f"marljax bench (stragglers): {config.num_envs} copies x {config.num_steps} steps, 1 copy in {slow_every} "
        f"{factor:g}x slower")  # fmt: skip
    result: dict[str, Any] = {"env": ENV, "env_kwargs": kwargs, "num_envs": config.num_envs, "num_steps": config.num_steps,
                              "slow_every": slow_every}  # fmt: skip
    rows: list[Row] = []
    for stepping in ("independent", "lockstep"):
        rates = {}
        for label, every in (("all fast", 0), ("straggler", slow_every)):
            cfg = replace(config, env=ENV, env_kwargs={**kwargs, "slow_every": every}, **{"async": {"host_stepping": stepping}})
            rates[label], health = pipeline_rate(cfg)
            result[f"{stepping}_{label.replace(' ', '_')}_samples_per_s"] = rates[label]
            result[f"{stepping}_{label.replace(' ', '_')}_env_steps_discarded"] = health["env_steps_discarded"]
            rows.append((f"{stepping}, {label}", f"{rates[label]:,.0f}", "env-steps/s (consumed)"))
        result[f"{stepping}_straggler_over_fast"] = rates["straggler"] / rates["all fast"]
        rows.append((f"{stepping}: straggler / all fast", f"{result[f'{stepping}_straggler_over_fast']:.2f}x", ""))
    return report(rows, six_digits(result), log)


def main(argv: list[str]) -> int:
    run_straggler_bench(load_config(None, DEFAULTS + argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
