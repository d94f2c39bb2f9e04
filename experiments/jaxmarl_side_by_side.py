"""JaxMARL's own IPPO-FF MPE baseline and `marljax train` at the same settings, one right after
the other in this process, on whatever device JAX has (the GPU protocol runs it on a GPU).

    python experiments/jaxmarl_side_by_side.py --jaxmarl PATH [--num-envs N] [--timesteps T] [--seeds S] [--target R]

PATH is a checkout of https://github.com/FLAIROx/JaxMARL; its `baselines/IPPO/ippo_ff_mpe.py`
is imported as it is (its `make_train`, with its config file `config/ippo_ff_mpe.yaml` and the
overrides given here) and needs `hydra-core`, `omegaconf`, `distrax` and `six` installed; `wandb`
too where it is installed (disabled: no account), else a stand-in whose `init` and `log` do
nothing (an offline node has no wandb). Nothing of it is copied here; the offline kit
(`experiments/offline_kit.sh`) carries the two files this reads.

Both sides are timed the same way: compile apart (`jit(...).lower(...).compile()`), then one
timed call that runs every update of every seed. env-steps/s = num_envs x num_steps x updates
x seeds / run seconds. The final return is per agent, the mean over seeds of the last update's: for
JaxMARL its logged `returned_episode_returns` divided by the number of agents (its
MPELogWrapper multiplies every reward by that number, "as per on-policy codebase", and the
log holds the return of each env's latest finished episode, averaged over the update's steps);
for marljax the mean return of the episodes finished in the last update. Close in meaning, not
to the last digit.
With `--target R` each side also reports its time to R: the first block of updates whose return per agent
(the mean over seeds, as above, averaged over blocks of `--block-steps` env steps per seed, as
`marljax bench target` checks once per chunk) is >= R, and compile time plus the run's time
prorated to that block's last update (each update runs the same program, so the run's time is linear in
updates). Compare it with `marljax bench target` on marljax's own defaults, run right after.
Then the env alone at the same batch (no policy, no-op actions), the most any trainer stepping
it could reach (`docs/performance.md` section 2). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import jax
import numpy as np
import yaml


def _timed(fn, *args):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t, out


def _wandb() -> types.ModuleType:
    """wandb, or where it is not installed a stand-in whose `init` and `log` do nothing, as disabled
    wandb's do: JaxMARL's script imports it and logs every update through it."""
    try:
        import wandb
    except ModuleNotFoundError:
        wandb = types.ModuleType("wandb")
        wandb.init = wandb.log = lambda *args, **kwargs: None
        sys.modules["wandb"] = wandb
    return wandb


def jaxmarl_side(checkout: Path, num_envs: int, timesteps: float, seeds: int) -> dict:
    baseline = checkout / "baselines" / "IPPO"
    config = yaml.safe_load((baseline / "config" / "ippo_ff_mpe.yaml").read_text())
    config.update(NUM_ENVS=num_envs, TOTAL_TIMESTEPS=timesteps, NUM_SEEDS=seeds, WANDB_MODE="disabled")
    _wandb().init(mode="disabled")  # its update step logs through wandb.log; disabled, that is a no-op
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
    curve = returns.mean(axis=0) / agents  # [updates]: per agent, the mean over seeds
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": int(steps), "env_steps_per_s": steps / run_s,
            "final_return": float(curve[-1]), "curve": curve,
            "steps_per_update": config["NUM_ENVS"] * config["NUM_STEPS"]}  # fmt: skip


def marljax_side(num_envs: int | None, timesteps: float, seeds: int) -> dict:
    """marljax at JaxMARL's settings (experiments/jaxmarl_ippo_ff_mpe.yaml, `num_envs` envs), or with
    num_envs=None at marljax's own defaults (`marljax train`'s run, `timesteps` steps per seed)."""
    from marljax.config import load_config
    from marljax.parallel.mesh import seed_keys, shard_trainer
    from marljax.train.wiring import prepare

    here = Path(__file__).resolve().parent
    path = None if num_envs is None else str(here / "jaxmarl_ippo_ff_mpe.yaml")
    config = load_config(path, [*([] if num_envs is None else [f"num_envs={num_envs}"]), f"total_timesteps={timesteps}",
                                f"num_seeds={seeds}", "num_chunks=1", "progress=false", "plot=false",
                                "checkpoint_every=0", "eval_every=0"])  # fmt: skip
    _, mesh, trainer = prepare(config)
    fns = shard_trainer(trainer, mesh)  # the program `marljax train` runs: one chunk of every update here
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    compile_s, compiled = _timed(lambda: fns.chunk.lower(state, config.num_updates).compile())
    run_s, (_, metrics) = _timed(compiled, state)
    steps = config.num_updates * config.env_steps_per_update
    episodes = metrics.episodes  # every update's finished episodes, per seed
    count = np.asarray(episodes.count)  # [S, U]
    per_agent = np.asarray(episodes.return_sum).mean(axis=-1)  # [S, U]: summed over the episodes, mean over agents
    curve = np.nanmean(per_agent / np.where(count > 0, count, np.nan), axis=0)  # [U]
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": int(steps), "env_steps_per_s": steps / run_s,
            "final_return": float(curve[-1]), "curve": curve, "steps_per_update": config.run_steps_per_update}  # fmt: skip


def env_alone(num_envs: int, timesteps: float, seeds: int, num_steps: int = 128) -> dict:
    """The env by itself at the same batch: `seeds` x `num_envs` copies of MPE_simple_spread_v3 stepped
    `num_steps` times per update by a scan, as both training scripts step it (JaxMARL's `env.step`
    with its auto-reset, a fresh key per env and step), with every action the no-op: no policy, no
    sampling, no learning. No trainer that steps this env can run faster than this, so its rate
    over JaxMARL's bounds the speed-up any change to marljax's own code can reach."""
    import jaxmarl

    env = jaxmarl.make("MPE_simple_spread_v3")
    updates = int(timesteps // (num_envs * num_steps))
    batch = (seeds, num_envs)
    noop = {a: jax.numpy.zeros(batch, jax.numpy.int32) for a in env.agents}  # action 0: stay put
    step = jax.vmap(jax.vmap(env.step))  # [seeds, envs]

    def run(key):
        key, first = jax.random.split(key)
        _, state = jax.vmap(jax.vmap(env.reset))(jax.random.split(first, batch))

        def tick(carry, _):
            key, state = carry
            key, sub = jax.random.split(key)
            _, state, reward, _, _ = step(jax.random.split(sub, batch), state, noop)
            return (key, state), reward[env.agents[0]].mean()

        def update(carry, _):
            carry, rewards = jax.lax.scan(tick, carry, None, num_steps)
            return carry, rewards.mean()

        return jax.lax.scan(update, (key, state), None, updates)[1]  # [updates]: keeps every step live

    key = jax.random.PRNGKey(0)
    compile_s, compiled = _timed(lambda: jax.jit(run).lower(key).compile())
    run_s, _ = _timed(compiled, key)
    steps = updates * num_envs * num_steps * seeds
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": int(steps), "env_steps_per_s": steps / run_s}


def time_to_target(side: dict, curve: np.ndarray, target: float, block_steps: float) -> dict:
    """The first block of updates of `curve` ([U], the side's return per update) (about
    `block_steps` env steps per seed, as `marljax bench target` checks once per chunk) whose mean
    return reaches `target`: the env steps per seed to its end and the seconds to it (compile + the
    run's time prorated to that update); None if none reaches it."""
    per_block = max(1, round(block_steps / side["steps_per_update"]))
    blocks = curve[: curve.size // per_block * per_block].reshape(-1, per_block).mean(axis=1)  # [U // per_block]
    reached = np.flatnonzero(blocks >= target)
    if reached.size == 0:
        return {"target": target, "reached": False, "target_env_steps": None, "target_s": None,
                "best_return": float(np.nanmax(blocks))}  # fmt: skip
    updates = (int(reached[0]) + 1) * per_block
    return {
        "target": target,
        "reached": True,
        "target_env_steps": updates * side["steps_per_update"],
        "target_s": side["compile_s"] + side["run_s"] * updates / curve.size,
        "best_return": float(np.nanmax(blocks)),
    }


LABELS = {"jaxmarl": "JaxMARL's ippo_ff_mpe.py ({n} envs)", "marljax": "marljax at JaxMARL's settings ({n} envs)",
          "marljax_defaults": "marljax train (its defaults)"}  # fmt: skip


def _curve(name: str, side: dict, num_envs: int) -> dict:
    """One side's return per update ([U], per agent, mean over seeds) against the seconds to the end of
    that update: compile plus the run prorated (every update runs the same program)."""
    curve = np.asarray(side["curve"], dtype=float)  # [U]
    updates = np.arange(1, curve.size + 1)
    time_s = side["compile_s"] + side["run_s"] * updates / curve.size
    return {"label": LABELS[name].format(n=num_envs), "time_s": time_s.tolist(),
            "env_steps": (updates * side["steps_per_update"]).tolist(),
            "return": [None if np.isnan(x) else float(x) for x in curve]}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl", type=Path, required=True, help="a checkout of FLAIROx/JaxMARL")
    parser.add_argument("--num-envs", type=int, default=16, help="JaxMARL's config: 16")
    parser.add_argument("--timesteps", type=float, default=1e7, help="JaxMARL's config: 1e7")
    parser.add_argument("--seeds", type=int, default=10, help="JaxMARL's config: 10")
    parser.add_argument("--target", type=float, default=None, help="also report each side's time to this return")
    parser.add_argument(
        "--block-steps",
        type=float,
        default=1e5,
        help="env steps per seed averaged per check (bench target's chunk at its defaults: 1e5)",
    )
    parser.add_argument(
        "--with-defaults",
        action="store_true",
        help="also run marljax at its own defaults (`marljax train`'s settings) for --defaults-timesteps",
    )
    parser.add_argument("--defaults-timesteps", type=float, default=5e6, help="the default run's budget: 5e6")
    parser.add_argument(
        "--curves",
        type=Path,
        default=None,
        help="write each side's return per update against its wall-clock seconds to this JSON file",
    )
    args = parser.parse_args(argv)
    if not (args.jaxmarl / "baselines" / "IPPO" / "ippo_ff_mpe.py").is_file():
        parser.error(f"--jaxmarl {args.jaxmarl}: no baselines/IPPO/ippo_ff_mpe.py there")
    sides = {"jaxmarl": jaxmarl_side(args.jaxmarl, args.num_envs, args.timesteps, args.seeds),
             "marljax": marljax_side(args.num_envs, args.timesteps, args.seeds)}  # fmt: skip
    if args.with_defaults:
        sides["marljax_defaults"] = marljax_side(None, min(args.defaults_timesteps, args.timesteps), args.seeds)
    if args.curves:
        args.curves.write_text(json.dumps({name: _curve(name, r, args.num_envs) for name, r in sides.items()}))
    alone = env_alone(args.num_envs, args.timesteps, args.seeds)
    for r in sides.values():
        curve = r.pop("curve")  # [U]: not in the JSON line
        if args.target is not None:
            r.update(time_to_target(r, curve, args.target, args.block_steps))
    device = jax.devices()[0]
    print(f"IPPO-FF MPE_simple_spread_v3, {args.num_envs} envs x {args.seeds} seeds, {args.timesteps:.3g} steps each, "
          f"on {device.platform} ({device.device_kind})")  # fmt: skip
    print(f"{'':<8} {'env-steps/s':>14} {'compile s':>10} {'run s':>9} {'final return':>13}")
    for name, r in sides.items():
        print(
            f"{name:<8} {r['env_steps_per_s']:>14,.0f} {r['compile_s']:>10.1f} {r['run_s']:>9.1f} {r['final_return']:>13.2f}"
        )
    print(f"{'env alone':<8} {alone['env_steps_per_s']:>14,.0f} {alone['compile_s']:>10.1f} {alone['run_s']:>9.1f} "
          f"{'(no-op actions, no policy)':>13}")  # fmt: skip
    if args.target is not None:
        print(f"time to a return of {args.target:g} per agent (mean over seeds; compile + run to that update):")
        for name, r in sides.items():
            shown = (
                f"{r['target_s']:.1f} s, {r['target_env_steps']:,} env steps per seed"
                if r["reached"]
                else f"not reached (best {r['best_return']:.2f})"
            )
            print(f"  {name:<8} {shown}")
    speedup = sides["marljax"]["env_steps_per_s"] / sides["jaxmarl"]["env_steps_per_s"]
    bound = alone["env_steps_per_s"] / sides["jaxmarl"]["env_steps_per_s"]
    print(f"marljax / jaxmarl env-steps/s: {speedup:.2f}x (the env alone / jaxmarl: {bound:.2f}x, the most any trainer "
          f"stepping this env could reach)")  # fmt: skip
    print(json.dumps({"bench": "jaxmarl_side_by_side", "platform": device.platform, "device_kind": device.device_kind,
                      "num_envs": args.num_envs, "seeds": args.seeds, "timesteps": args.timesteps, **sides,
                      "env_alone": alone, "speedup": speedup, "env_alone_over_jaxmarl": bound}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
