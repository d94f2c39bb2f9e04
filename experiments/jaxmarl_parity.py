"""JaxMARL's own MPE baseline scripts and `marljax train FILE` on the same config file, side by side:
final return per agent over seeds, and wall time, one combination after another on this machine.

    python experiments/jaxmarl_parity.py --jaxmarl PATH [--combos NAME ...] [--seeds 5] [--timesteps T]
                                         [--seed 7919] [--work DIR]

PATH is a checkout of https://github.com/FLAIROx/JaxMARL (nothing of it is copied here). The combinations
are the MPE part of JaxMARL's minimal baseline set (`baselines/config/run_minimal_baseline_set.yaml`):
simple_spread with IPPO-FF, MAPPO-RNN, VDN-RNN and QMIX-RNN; simple_reference and simple_tag with IPPO-FF.
Each reads JaxMARL's shipped config file (for VDN and QMIX `ql_rnn_mpe.yaml` merged over
`QLearning/config/config.yaml`, as its `single_run` merges them), with ENV_NAME, SEED, NUM_SEEDS and,
with `--timesteps`, TOTAL_TIMESTEPS set: that one file is written to the work directory and both sides
read it, so schedules that are fractions of the run (EPS_DECAY, TEST_INTERVAL, the lr anneal) shrink
with the budget on both sides alike.

Each side runs in its own process, timed whole by this one (start-up, imports, compile, training):
- JaxMARL: its script imported as it is, its `make_train` run the way its `main` runs it (`jit(vmap)` over
  `split(PRNGKey(SEED), NUM_SEEDS)`), W&B disabled (its `wandb.log` calls recorded where the script
  returns no metrics: MAPPO). Needs `hydra-core`, `omegaconf`, `distrax` installed.
- marljax: `marljax train FILE num_chunks=20 progress=false plot=false compile_cache=EMPTY_DIR`
  (everything else as a user gets it, checkpoints included; an empty compile cache, so that it compiles
  from nothing as JaxMARL's script does).

Final return, per agent and per seed, as each script reports it:
- PPO (IPPO, MAPPO): the training episodes' return over the last 5% of updates: JaxMARL's
  `returned_episode_returns` (its MPELogWrapper scales every logged reward by the number of agents;
  divided back here), marljax's last metrics row of 20 (`return_per_seed`).
- Q-learning (VDN, QMIX): the last greedy test: JaxMARL's `test_returned_episode_returns` (512 test
  envs, same scaling), marljax's last `eval_return_per_seed`.
Over the seeds: the IQM (the mean of the middle half: of 5 seeds, the middle 3) and the range. Fewer
than 8 seeds give a range, not an interval; the table says so.

Prints a table, then one JSON line; each side's own record lands in the work directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

FINAL_WINDOW = 20  # the last 1/20 of the updates is the final return of a PPO run (marljax: num_chunks=20)


@dataclasses.dataclass(frozen=True)
class Combo:
    script: str  # under baselines/
    config: str  # under baselines/
    env: str
    algo: str | None = None  # marljax's algo= for a file several scripts share (ql_*)
    q_learning: bool = False  # final return: the last greedy test, not the training episodes
    patch_batchify: bool = False  # the agents' observations differ in size: see _padded_batchify

    def label(self) -> str:
        return f"{Path(self.script).stem} on {self.env}"


COMBOS = {
    "ippo_ff_spread": Combo("IPPO/ippo_ff_mpe.py", "IPPO/config/ippo_ff_mpe.yaml", "MPE_simple_spread_v3"),
    "mappo_rnn_spread": Combo(
        "MAPPO/mappo_rnn_mpe.py", "MAPPO/config/mappo_homogenous_rnn_mpe.yaml", "MPE_simple_spread_v3"
    ),
    "vdn_rnn_spread": Combo(
        "QLearning/vdn_rnn.py", "QLearning/config/alg/ql_rnn_mpe.yaml", "MPE_simple_spread_v3", "vdn", True
    ),
    "qmix_rnn_spread": Combo(
        "QLearning/qmix_rnn.py", "QLearning/config/alg/ql_rnn_mpe.yaml", "MPE_simple_spread_v3", "qmix", True
    ),
    "ippo_ff_reference": Combo("IPPO/ippo_ff_mpe.py", "IPPO/config/ippo_ff_mpe.yaml", "MPE_simple_reference_v3"),
    "ippo_ff_tag": Combo(
        "IPPO/ippo_ff_mpe.py", "IPPO/config/ippo_ff_mpe.yaml", "MPE_simple_tag_v3", patch_batchify=True
    ),
}


def iqm(values: list[float]) -> float:
    """Mean of the middle half: floor(n/4) trimmed from each end (of 5 seeds, the middle 3)."""
    ordered = sorted(values)
    cut = len(ordered) // 4
    return float(np.mean(ordered[cut : len(ordered) - cut]))


def config_file(checkout: Path, combo: Combo, seeds: int, seed: int, timesteps: float | None, work: Path) -> Path:
    """JaxMARL's file for `combo` with the run's env, seeds and budget set, written where both sides read it."""
    baselines = checkout / "baselines"
    config = _read(baselines / combo.config)
    if combo.q_learning:  # its single_run: the alg group merged over the top-level config
        config = {**_read(baselines / "QLearning/config/config.yaml"), **config}
        config.pop("defaults", None)
    config.update(ENV_NAME=combo.env, SEED=seed, NUM_SEEDS=seeds, WANDB_MODE="disabled")
    if timesteps is not None:
        config["TOTAL_TIMESTEPS"] = timesteps
    path = work / f"{Path(combo.config).stem}_{combo.env}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _read(path: Path) -> dict:
    """A config file as hydra hands it to JaxMARL's scripts: OmegaConf reads `2e-3` as a number (YAML 1.1,
    which yaml.safe_load follows, reads it as a string)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


# the JaxMARL side, in a process of its own


# what `_by_update` reads of the recorded `wandb.log` calls: Q-learning's test return and MAPPO's return, with the
# update each names. Keeping every logged value grew the JaxMARL side of VDN and QMIX at 1e7 steps (240k calls) past
# 13 GB a process
LOGGED_KEYS = ("update_steps", "test_returned_episode_returns", "env_step", "returns")


def _quiet_wandb() -> list[dict]:
    """wandb for JaxMARL's scripts, disabled, its `log` calls kept (LOGGED_KEYS of them): MAPPO returns no metrics
    and logs each update's return through it (an io_callback, called once per seed under vmap)."""
    import jaxmarl_side_by_side  # (here, not at the top: it imports JAX, which marljax's side's timed process need not)

    logged: list[dict] = []
    wandb = jaxmarl_side_by_side._wandb()  # an offline node without wandb gets its stand-in
    wandb.init(mode="disabled")
    wandb.log = lambda metrics, *args, **kwargs: logged.append(
        {k: float(np.asarray(v)) for k, v in metrics.items() if k in LOGGED_KEYS}
    )
    return logged


def jaxmarl_side(checkout: Path, combo: Combo, path: Path) -> dict:
    import jax
    import jaxmarl_side_by_side

    config = _read(path)
    if combo.q_learning:  # its scripts return no metrics: they log them, and only with W&B not disabled
        config["WANDB_MODE"] = "offline"  # wandb itself stays disabled (init above); its log is recorded
    logged = _quiet_wandb()
    spec = importlib.util.spec_from_file_location(Path(combo.script).stem, checkout / "baselines" / combo.script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if combo.patch_batchify:
        module.batchify = _padded_batchify
    if combo.q_learning:
        env, _ = module.env_from_config(dict(config, ENV_KWARGS=dict(config["ENV_KWARGS"])))
        train = module.make_train(config, env)
    else:
        train = module.make_train(config)
    keys = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    compile_s, compiled = jaxmarl_side_by_side._timed(lambda: jax.jit(jax.vmap(train)).lower(keys).compile())
    run_s, out = jaxmarl_side_by_side._timed(compiled, keys)
    agents = _num_agents(config)
    seeds = config["NUM_SEEDS"]
    if combo.q_learning:  # every update logs its last greedy test (held between tests)
        finals = _by_update(logged, "update_steps", "test_returned_episode_returns", seeds)[:, -1] / agents
    else:
        finals = _ppo_finals(out, logged, seeds) / agents
    steps = config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"] * seeds
    return {"finals": [float(x) for x in finals], "compile_s": compile_s, "run_s": run_s,
            "env_steps_per_s": steps / run_s}  # fmt: skip


def _padded_batchify(x: dict, agent_list: list, num_actors: int):
    """What ippo_ff_mpe.py's `batchify` means to do where agents' observations differ in size (simple_tag:
    16 for the adversaries, 14 for the prey): zero-pad each to the largest and stack them [agents x envs, obs].
    As shipped (c793d09) it calls its `pad` without the length and adds a list to a shape tuple, so the
    script fails on simple_tag before it compiles."""
    import jax.numpy as jnp

    width = max(x[a].shape[-1] for a in agent_list)
    padded = [jnp.pad(x[a], [(0, 0)] * (x[a].ndim - 1) + [(0, width - x[a].shape[-1])]) for a in agent_list]
    return jnp.stack(padded).reshape((num_actors, -1))


def _num_agents(config: dict) -> int:
    """The env's agent count, by which JaxMARL's MPELogWrapper scales the returns it logs."""
    import jaxmarl

    return jaxmarl.make(config["ENV_NAME"], **config["ENV_KWARGS"]).num_agents


def _ppo_finals(out: dict, logged: list[dict], seeds: int) -> np.ndarray:
    """[seeds]: the mean logged return over the last 1/FINAL_WINDOW of the updates."""
    if "metrics" in out:  # IPPO: [seeds, updates, ...] per update
        returns = np.asarray(out["metrics"]["returned_episode_returns"])
        curve = returns.reshape(returns.shape[0], returns.shape[1], -1).mean(axis=-1)  # [seeds, updates]
    else:  # MAPPO returns none: it logs each update's return, at the rollout's last step
        curve = _by_update(logged, "env_step", "returns", seeds)
    window = max(1, math.ceil(curve.shape[1] / FINAL_WINDOW))
    return curve[:, -window:].mean(axis=1)


def _by_update(logged: list[dict], step_key: str, key: str, seeds: int) -> np.ndarray:
    """[seeds, updates]: `key` from the recorded `wandb.log` calls, one per seed and update under vmap,
    grouped by the update each names (`step_key`); which seed is which does not matter to an IQM."""
    by_step: dict[int, list[float]] = {}
    for m in logged:  # one pass: a run logs updates x seeds times (24k for VDN at 1e6 steps)
        by_step.setdefault(int(m[step_key]), []).append(float(m[key]))
    values = [by_step[step] for step in sorted(by_step)]
    if any(len(v) != seeds for v in values):
        raise RuntimeError(f"expected {seeds} logged {key!r} per update, got {sorted({len(v) for v in values})}")
    return np.array(values).T


# the marljax side: `marljax train FILE` as a user runs it


def marljax_side(combo: Combo, path: Path, out_dir: Path) -> dict:
    cache = out_dir.with_name(out_dir.name + "_compile_cache")  # empty: it compiles from nothing, as JaxMARL's does
    shutil.rmtree(cache, ignore_errors=True)
    args = [sys.executable, "-m", "marljax.cli", "train", str(path), *([f"algo={combo.algo}"] if combo.algo else []),
            f"out_dir={out_dir}", f"num_chunks={FINAL_WINDOW}", "progress=false", "plot=false", "overwrite=true",
            f"compile_cache={cache}"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    key = "eval_return_per_seed" if combo.q_learning else "return_per_seed"
    finals = next(r[key] for r in reversed(rows) if r.get(key))
    summary = json.loads((out_dir / "summary.json").read_text())
    timing = summary["timing"]
    steps = summary["env_steps"] * len(finals)
    return {"finals": [float(x) for x in finals], "compile_s": timing["phases"].get("compile", float("nan")),
            "run_s": timing["phases"].get("training", float("nan")),
            "env_steps_per_s": steps / timing["phases"]["training"]}  # fmt: skip


def run_side(side: str, checkout: Path, name: str, path: Path, work: Path) -> dict:
    """One side in a process of its own, timed whole from here."""
    result = work / f"{name}_{side}.json"
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--jaxmarl", str(checkout), "--child", side, "--combos", name,
                    "--config-file", str(path), "--result", str(result), "--work", str(work)], check=True)  # fmt: skip
    record = json.loads(result.read_text())
    record["wall_s"] = time.perf_counter() - start
    result.write_text(json.dumps(record))
    return record


def table(results: dict) -> str:
    lines = [
        "| combination | side | final return per agent, IQM | seeds' range | whole process s | compile s | env-steps/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, sides in results.items():
        for side, r in sides.items():
            finals = r["finals"]
            lines.append(
                f"| {COMBOS[name].label()} | {side} | {iqm(finals):.2f} | {min(finals):.2f} to {max(finals):.2f} "
                f"| {r['wall_s']:.0f} | {r['compile_s']:.1f} | {r['env_steps_per_s']:,.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jaxmarl", type=Path, required=True, help="a checkout of FLAIROx/JaxMARL")
    parser.add_argument("--combos", nargs="+", default=list(COMBOS), choices=list(COMBOS))
    parser.add_argument("--seeds", type=int, default=5, help="seeds per side, vmapped in one run (5)")
    parser.add_argument("--seed", type=int, default=7919, help="SEED on both sides; no default was searched on it")
    parser.add_argument("--timesteps", type=float, default=None, help="TOTAL_TIMESTEPS per seed (the files': 1e7)")
    parser.add_argument("--work", type=Path, default=Path("jaxmarl_parity"), help="config files, runs, records")
    parser.add_argument("--sides", nargs="+", default=["jaxmarl", "marljax"], choices=("jaxmarl", "marljax"),
                        help="run only these sides (a side's rerun after a change; the table shows what ran)")  # fmt: skip
    parser.add_argument("--child", choices=("jaxmarl", "marljax"), help=argparse.SUPPRESS)
    parser.add_argument("--config-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (args.jaxmarl / "baselines" / "IPPO" / "ippo_ff_mpe.py").is_file():
        parser.error(f"--jaxmarl {args.jaxmarl}: no baselines/IPPO/ippo_ff_mpe.py there")
    if args.child:  # one side of one combination, in this process
        combo = COMBOS[args.combos[0]]
        if args.child == "jaxmarl":
            record = jaxmarl_side(args.jaxmarl, combo, args.config_file)
        else:
            record = marljax_side(combo, args.config_file, args.work / f"{args.combos[0]}_marljax")
        args.result.write_text(json.dumps(record))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for name in args.combos:
        path = config_file(args.jaxmarl, COMBOS[name], args.seeds, args.seed, args.timesteps, args.work)
        results[name] = {side: run_side(side, args.jaxmarl, name, path, args.work) for side in args.sides}
        print(f"{name}: " + ", ".join(f"{s} IQM {iqm(r['finals']):.2f} in {r['wall_s']:.0f} s"
                                      for s, r in results[name].items()), flush=True)  # fmt: skip
    budget = "the files' TOTAL_TIMESTEPS" if args.timesteps is None else f"{args.timesteps:.3g} env steps per seed"
    print(f"\n{args.seeds} seeds per side (seed {args.seed}), {budget}; "
          f"{'a range over fewer than 8 seeds, not an interval' if args.seeds < 8 else ''}")  # fmt: skip
    print(table(results))
    print(json.dumps({"bench": "jaxmarl_parity", "seeds": args.seeds, "seed": args.seed, "timesteps": args.timesteps,
                      "results": results}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
