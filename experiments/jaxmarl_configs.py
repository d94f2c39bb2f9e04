"""Every JaxMARL baseline config, as shipped, through `marljax train`: a table of runs / refused.

    PYTHONPATH=. python experiments/jaxmarl_configs.py PATH_TO_JAXMARL [--run] [--timeout S]

Walks PATH/baselines for YAML files, translates each as `marljax train FILE` would (a `ql_*` file
serves three algorithms: once per algo=iql|vdn|qmix), and prints one row per config: `translates`
(the file as shipped loads and validates) or, with --run, `runs` (then one update trained in a fresh
process, at most 8 envs and one seed, the file's own settings otherwise) or `refused` with the
one-line reason. A file that streams to W&B (`WANDB_MODE: online`) is refused on a machine with no
W&B login; it is then tried again with `log.offline=true`, which its row says. Hydra's records of
earlier runs (`outputs/.../.hydra/*.yaml`) are not configs and are left out. Nothing of JaxMARL is copied: the files are read
from the checkout given.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
from pathlib import Path

from marljax.config import ConfigError, first_line, load_config

# files under baselines/ that are not one run's config
NOT_CONFIGS = {
    "run_minimal_baseline_set.yaml": "a launcher's list of suites (lowercase keys), not a run's config",
    "config.yaml": "hydra's top-level defaults (seed, W&B) that QLearning's scripts merge into every alg/*.yaml",
}
QL_ALGOS = ("iql", "vdn", "qmix")  # JaxMARL's ql_* files serve these three scripts
OFFLINE = "log.offline=true"  # what a file that streams to W&B is retried with where no login is set up


def hydra_record(path: Path) -> bool:
    """A file hydra wrote about an earlier run of JaxMARL's scripts (outputs/DATE/TIME/.hydra/*.yaml)."""
    return ".hydra" in path.parts


def variants(path: Path) -> list[list[str]]:
    """The `algo=` overrides a file is tried with: one per algorithm for ql_*, else none."""
    return [[f"algo={a}"] for a in QL_ALGOS] if path.stem.startswith("ql_") else [[]]


SMOKE_ENVS = 8  # a run's check steps at most this many envs (1024 Hanabi envs would take minutes on a CPU)


def tiny(path: Path, overrides: list[str]) -> list[str]:
    """Overrides that make a run one update of at most SMOKE_ENVS envs, or one per minibatch (the file as shipped has
    validated already: load_config), one seed, no plot or progress bar, one chunk."""
    config = load_config(path, overrides)
    # minibatches of environments (minibatch_split=envs) need at least one environment each
    dealt = [s.num_minibatches for s in config.sections.values() if getattr(s, "minibatch_split", "") == "envs"]
    envs = min(config.num_envs, max([SMOKE_ENVS, *dealt]))
    return [f"num_envs={envs}", f"total_timesteps={envs * config.num_steps}", "num_seeds=1", "num_chunks=1",
            "progress=false", "plot=false", "checkpoint_every=0"]  # fmt: skip


def run(path: Path, overrides: list[str], timeout: float) -> tuple[str, str]:
    """('runs', '') or ('refused', the one line marljax printed) for one config."""
    try:
        extra = tiny(path, overrides)
    except ConfigError as exc:
        return "refused", first_line(exc)
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "marljax.cli", "train", str(path), *overrides, *extra, f"out_dir={out}/run"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", f"no result within {timeout:.0f} s"
    if done.returncode == 0:
        return "runs", ""
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("marljax:")]
    return "refused" if done.returncode == 2 else "failed", (lines or done.stderr.strip().splitlines() or ["?"])[-1]


def translate(path: Path, overrides: list[str]) -> tuple[str, str]:
    try:
        load_config(path, overrides)
    except ConfigError as exc:
        return "refused", first_line(exc)
    return "translates", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jaxmarl", type=Path, help="a JaxMARL checkout (its baselines/ folder is read)")
    parser.add_argument("--run", action="store_true", help="train each translated config for one update")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    args = parser.parse_args(argv)
    files = sorted((args.jaxmarl / "baselines").rglob("*.yaml"))
    if not files:
        print(f"no YAML files under {args.jaxmarl / 'baselines'}", file=sys.stderr)
        return 2
    rows, skipped = [], []
    for path in files:
        if hydra_record(path):
            continue  # not JaxMARL's: left in the checkout by an earlier run of its scripts
        if path.name in NOT_CONFIGS:
            skipped.append(f"{path.relative_to(args.jaxmarl)} ({NOT_CONFIGS[path.name]})")
            continue
        attempt = functools.partial(run, path, timeout=args.timeout) if args.run else functools.partial(translate, path)
        for overrides in variants(path):
            status, why = attempt(overrides)
            if status == "refused" and "log.offline: false streams" in why:  # WANDB_MODE online, no W&B login here
                status, again = attempt([*overrides, OFFLINE])
                why = f"with {OFFLINE}: no W&B login here{'; ' + again if again else ''}"
            name = str(path.relative_to(args.jaxmarl / "baselines")) + "".join(f" {o}" for o in overrides)
            why = why.replace(str(path), path.name)  # the row names the file already
            rows.append((name, status, why))
            print(f"{name}: {status} {why}", file=sys.stderr, flush=True)  # progress while the runs go
    print(f"skipped, not baseline configs: {'; '.join(skipped)}\n")
    print("| config | result | reason |\n|---|---|---|")
    for name, status, why in rows:
        print(f"| {name} | {status} | {why.replace('|', '/')} |")
    good = sum(status in ("runs", "translates") for _, status, _ in rows)
    print(f"\n{good} of {len(rows)} {'run' if args.run else 'translate'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
