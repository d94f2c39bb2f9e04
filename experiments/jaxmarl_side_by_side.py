"""JaxMARL's own IPPO-FF MPE baseline and `marljax train` at the same settings, one right after
the other in this process, on whatever device JAX has (the GPU protocol runs it on a GPU).

    python experiments/jaxmarl_side_by_side.py --jaxmarl PATH [--num-envs N] [--timesteps T] [--seeds S]

PATH is a checkout of https://github.com/FLAIROx/JaxMARL; its `baselines/IPPO/ippo_ff_mpe.py`
is imported as it is (its `make_train`, with its config file `config/ippo_ff_mpe.yaml` and the
overrides given here) and needs `hydra-core`, `omegaconf`, `distrax`, `wandb` (disabled: no
account) and `six` installed. Nothing of it is copied here.

Both sides are timed the same way: compile apart (`jit(...).lower(...).compile()`), then one
timed call that runs every update of every seed. env-steps/s = num_envs x num_steps x updates
x seeds / run seconds. The final return is per agent, the mean over seeds of the last update's: for
JaxMARL its logged `returned_episode_returns` divided by the number of agents (its
MPELogWrapper multiplies every reward by that number, "as per on-policy codebase", and the
log holds the return of each env's latest finished episode, averaged over the update's steps);
for marljax the mean return of the episodes finished in the last update. Close in meaning, not
to the last digit.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
import yaml


def _timed(fn, *args):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t, out


def jaxmarl_side(checkout: Path, num_envs: int, timesteps: float, seeds: int) -> dict:
    baseline = checkout / "baselines" / "IPPO"
    config = yaml.safe_load((baseline / "config" / "ippo_ff_mpe.yaml").read_text())
    config.update(NUM_ENVS=num_envs, TOTAL_TIMESTEPS=timesteps, NUM_SEEDS=seeds, WANDB_MODE="disabled")
    import wandb

    wandb.init(mode="disabled")  # its update step logs through wandb.log; disabled, that is a no-op
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff_mpe", baseline / "ippo_ff_mpe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keys = jax.random.split(jax.random.PRNGKey(config["SEED"]), seeds)
    run = jax.jit(jax.vmap(module.make_train(config)))  # as its main() runs it: vmap over the seeds' keys
    compile_s, compiled = _timed(lambda: run.lower(keys).compile())
    run_s, out = _timed(compiled, keys)
    steps = config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"] * seeds
    returns = np.asarray(out["metrics"]["returned_episode_returns"])  # [seeds, updates]: means over each update
    import jaxmarl

    agents = jaxmarl.make(config["ENV_NAME"], **config["ENV_KWARGS"]).num_agents  # its log scales rewards by this
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": int(steps), "env_steps_per_s": steps / run_s,
            "final_return": float(returns[:, -1].mean()) / agents}  # fmt: skip


def marljax_side(num_envs: int, timesteps: float, seeds: int) -> dict:
    from marljax.config import load_config
    from marljax.parallel.mesh import seed_keys, shard_trainer
    from marljax.train.wiring import prepare

    here = Path(__file__).resolve().parent
    config = load_config(str(here / "jaxmarl_ippo_ff_mpe.yaml"),
                         [f"num_envs={num_envs}", f"total_timesteps={timesteps}", f"num_seeds={seeds}", "num_chunks=1",
                          "progress=false", "plot=false", "checkpoint_every=0", "eval_every=0"])  # fmt: skip
    _, mesh, trainer = prepare(config)
    fns = shard_trainer(trainer, mesh)  # the program `marljax train` runs: one chunk of every update here
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    compile_s, compiled = _timed(lambda: fns.chunk.lower(state, config.num_updates).compile())
    run_s, (_, metrics) = _timed(compiled, state)
    steps = config.num_updates * config.env_steps_per_update
    episodes = metrics["episodes"]  # the last update's finished episodes, per seed
    count = np.asarray(episodes.count)[:, -1]  # [S]
    per_agent = np.asarray(episodes.return_sum)[:, -1]  # [S, A]: summed over the episodes
    last = per_agent.mean(axis=-1) / np.where(count > 0, count, np.nan)
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": int(steps), "env_steps_per_s": steps / run_s,
            "final_return": float(np.nanmean(last))}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl", type=Path, required=True, help="a checkout of FLAIROx/JaxMARL")
    parser.add_argument("--num-envs", type=int, default=16, help="JaxMARL's config: 16")
    parser.add_argument("--timesteps", type=float, default=1e7, help="JaxMARL's config: 1e7")
    parser.add_argument("--seeds", type=int, default=10, help="JaxMARL's config: 10")
    args = parser.parse_args(argv)
    if not (args.jaxmarl / "baselines" / "IPPO" / "ippo_ff_mpe.py").is_file():
        parser.error(f"--jaxmarl {args.jaxmarl}: no baselines/IPPO/ippo_ff_mpe.py there")
    sides = {"jaxmarl": jaxmarl_side(args.jaxmarl, args.num_envs, args.timesteps, args.seeds),
             "marljax": marljax_side(args.num_envs, args.timesteps, args.seeds)}  # fmt: skip
    device = jax.devices()[0]
    print(f"IPPO-FF MPE_simple_spread_v3, {args.num_envs} envs x {args.seeds} seeds, {args.timesteps:.3g} steps each, "
          f"on {device.platform} ({device.device_kind})")  # fmt: skip
    print(f"{'':<8} {'env-steps/s':>14} {'compile s':>10} {'run s':>9} {'final return':>13}")
    for name, r in sides.items():
        print(f"{name:<8} {r['env_steps_per_s']:>14,.0f} {r['compile_s']:>10.1f} {r['run_s']:>9.1f} {r['final_return']:>13.2f}")
    speedup = sides["marljax"]["env_steps_per_s"] / sides["jaxmarl"]["env_steps_per_s"]
    print(f"marljax / jaxmarl env-steps/s: {speedup:.2f}x")
    print(json.dumps({"bench": "jaxmarl_side_by_side", "platform": device.platform, "device_kind": device.device_kind,
                      "num_envs": args.num_envs, "seeds": args.seeds, "timesteps": args.timesteps, **sides,
                      "speedup": speedup}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
