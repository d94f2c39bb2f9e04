"""Measure the reference returns a run's summary quotes: a uniformly random policy and one that
always takes action 0 (MPE's no-op: standing still), each playing the same fresh episodes of the
default env (greedy evaluation's keys, seed 0), and print them as `marljax/train/references.py`
holds them.

    python experiments/references.py [--episodes 1024] [key=value ...]

key=value settings choose the env as `marljax train` does (env=..., env_kwargs....); the default
is the default run's env. Paste the printed entry into REFERENCES (keyed by env id) to quote it.
"""

from __future__ import annotations

import argparse
import json

import jax.numpy as jnp
import numpy as np

from marljax.config import load_config
from marljax.train.evaluate import baseline_act, eval_keys, make_evaluator
from marljax.train.wiring import make_adapter, make_trainer


def measure(overrides: list[str], episodes: int) -> dict:
    config = load_config(None, overrides)
    trainer = make_trainer(config, make_adapter(config))
    keys = eval_keys(config.seed, jnp.arange(1), 0)  # [1, 2]: the same episodes for both policies
    out = {}
    for kind in ("random", "noop"):
        result = make_evaluator(trainer, episodes, act=baseline_act(trainer.env, kind))(jnp.zeros((1,)), keys)
        out[kind] = round(float(np.mean(result.returns)), 2)
        if trainer.env.has_win:
            out[f"{kind}_win_rate"] = round(float(np.mean(result.won)), 3)
    return {"env": config.env, "env_kwargs": dict(config.env_kwargs), "episodes": episodes, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1024)
    args, overrides = parser.parse_known_args()
    print(json.dumps(measure(overrides, args.episodes)))


if __name__ == "__main__":
    main()
