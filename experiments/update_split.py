"""Where one update's time goes, by timing its parts as separate programs in one process: the
whole update, the rollout alone (acting with the policy, no learning), the learning alone (every
epoch on a fixed trajectory), and the env alone (no policy; `jaxmarl_side_by_side.py`'s
`env_alone`). Rounds alternate the four, so the machine's load falls on each alike; medians.

    PYTHONPATH=. python experiments/update_split.py [CONFIG.yaml] [key=value ...] [--updates N] [--rounds R]

Default CONFIG: experiments/jaxmarl_ippo_ff_mpe.yaml (JaxMARL's IPPO-FF settings, 16 envs x 128
steps, 4 epochs x 4 minibatches). One seed, one device, an algorithm whose trainer splits into
`collect` and `learn` (IPPO, MAPPO). Each part runs N updates in one jitted scan, as `marljax
train` runs a chunk. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax

from marljax.algos.ippo import PPOConfig

HERE = Path(__file__).resolve().parent


def _seconds(fn, *args) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def parts(config, n: int) -> dict:
    """Jitted programs of n updates each, from one seed's trainer: name -> (compiled fn, its argument)."""
    from marljax.train.wiring import make_adapter, make_trainer

    trainer = make_trainer(config, make_adapter(config))  # unsharded: one device, no mesh axes
    if not hasattr(trainer, "collect"):
        raise SystemExit(f"update_split: algo={config.algo} does not split into collect and learn; use ippo or mappo")
    state = trainer.init(jax.random.PRNGKey(config.seed))

    def whole(s):
        return trainer.run_updates(s, n)

    def rollout(s):  # acting alone: the actors carried on, the trajectories dropped (their last reward kept live)
        def one(carry, key):
            actors, traj = trainer.collect(s.learner.params, carry, key)
            return actors, jax.tree.leaves(traj)[0].sum()

        return jax.lax.scan(one, s.actors, jax.random.split(s.learner.key, n))

    _, traj = jax.jit(trainer.collect)(state.learner.params, state.actors, state.learner.key)

    def learn(s, traj):  # learning alone: n updates on the same trajectory
        def one(learner, key):
            learner, metrics = trainer.learn(learner, traj, key)
            return learner, metrics["loss_total"]

        return jax.lax.scan(one, s.learner, jax.random.split(s.learner.key, n))

    return {"update": (jax.jit(whole).lower(state).compile(), (state,)),
            "rollout": (jax.jit(rollout).lower(state).compile(), (state,)),
            "learn": (jax.jit(learn).lower(state, traj).compile(), (state, traj))}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("args", nargs="*", help="[CONFIG.yaml] key=value ...")
    parser.add_argument("--updates", type=int, default=10, help="updates per timed call (default 10)")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls of each part (default 7)")
    args = parser.parse_args(argv)
    from marljax.config import load_config

    path = (
        args.args[0]
        if args.args and args.args[0].endswith((".yaml", ".yml"))
        else str(HERE / "jaxmarl_ippo_ff_mpe.yaml")
    )
    overrides = [a for a in args.args if "=" in a] + ["num_seeds=1", "progress=false", "plot=false"]
    config = load_config(path, overrides)
    sys.path.insert(0, str(HERE))
    from jaxmarl_side_by_side import env_alone  # noqa: E402  (the same env-only program as the side by side)

    programs = parts(config, args.updates)
    steps = config.num_envs * config.num_steps  # env steps per update of one seed
    # env alone: one update's worth of env steps, n updates per call (its own compile inside env_alone)
    times: dict[str, list[float]] = {name: [] for name in [*programs, "env alone"]}
    for fn, fn_args in programs.values():
        _seconds(fn, *fn_args)  # warm up
    for _ in range(args.rounds):
        for name, (fn, fn_args) in programs.items():
            times[name].append(_seconds(fn, *fn_args))
        alone = env_alone(config.num_envs, steps * args.updates, 1, config.num_steps)
        times["env alone"].append(alone["run_s"])
    ms = {name: 1e3 * statistics.median(t) / args.updates for name, t in times.items()}  # per update
    spread = {name: 1e3 * (max(t) - min(t)) / args.updates for name, t in times.items()}
    print(f"{config.algo} on {config.env}, {config.num_envs} envs x {config.num_steps} steps, "
          f"{config.section(PPOConfig).update_epochs} epochs x {config.section(PPOConfig).num_minibatches} minibatches, 1 seed; "
          f"median of {args.rounds} calls of {args.updates} updates each")  # fmt: skip
    print(f"{'part':<10} {'ms/update':>10} {'max-min':>8} {'env-steps/s':>12} {'of update':>10}")
    for name in times:
        print(f"{name:<10} {ms[name]:>10.2f} {spread[name]:>8.2f} {steps / ms[name] * 1e3:>12,.0f} "
              f"{ms[name] / ms['update']:>10.2f}")  # fmt: skip
    rest = ms["rollout"] - ms["env alone"]
    print(f"rollout beyond the env (policy, sampling, keys, records): {rest:.2f} ms/update, "
          f"{1e3 * rest / config.num_steps:.1f} us per step")  # fmt: skip
    print(json.dumps({"bench": "update_split", "algo": config.algo, "env": config.env, "num_envs": config.num_envs,
                      "num_steps": config.num_steps, "updates": args.updates, "rounds": args.rounds,
                      "ms_per_update": ms, "max_minus_min_ms": spread}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
