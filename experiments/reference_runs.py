"""The reference runs a restructuring must leave bitwise unchanged.

Tiny runs of every algorithm (FF and GRU, the sharing modes, async deterministic; the offline
ones on a dataset of random play recorded first) and one two-cell sweep, each writing metrics rows. A refactor runs them before and after and compares:

    python experiments/reference_runs.py run /tmp/ref_before      # at the old commit
    python experiments/reference_runs.py run /tmp/ref_after       # at the new one
    python experiments/reference_runs.py compare /tmp/ref_before /tmp/ref_after

`compare` prints one line per run (bitwise equal, or the first differing row and key) and exits 1
on any difference. Wall-clock and scheduling fields (the keys named in TIMING_KEYS, and any ending
in `_s` or `_per_s`) are left out of the comparison; every other key of every row counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TINY = "num_envs=8 num_steps=16 total_timesteps=2048 num_chunks=4 eval_every=8 eval_episodes=4 num_seeds=2"
Q_TINY = (
    "replay.learning_starts=256 replay.buffer_size=64 replay.batch_size=8 q.eps_decay_steps=1000 "
    "lr=2e-3 activation=tanh gamma=0.99 hidden_size=64"
)

SAC_TINY = "env_kwargs.action_type=Continuous sac.buffer_size=256 sac.learning_starts=64 sac.batch_size=16"

RUNS: dict[str, str] = {
    "ippo": "algo=ippo",
    "ippo_rnn_independent": "algo=ippo recurrent=true param_sharing=independent",
    "mappo_per_role_listener": "algo=mappo param_sharing=per_role env=MPE_simple_speaker_listener_v4",
    "pqn_vdn": "algo=pqn_vdn",
    "pqn_vdn_rnn": "algo=pqn_vdn recurrent=true",
    "iql": f"algo=iql {Q_TINY}",
    "vdn": f"algo=vdn {Q_TINY}",
    "qmix": f"algo=qmix {Q_TINY}",
    "qmix_rnn": f"algo=qmix recurrent=true {Q_TINY}",
    "ippo_async_deterministic": "algo=ippo mode=async async.deterministic=true",
    "happo": "algo=happo",
    "sable": "algo=sable",
    "shaq": f"algo=shaq {Q_TINY}",
    "transf_qmix": f"algo=transf_qmix {Q_TINY} gru_hidden_size=64",
    "isac": f"algo=isac {SAC_TINY}",
    "masac": f"algo=masac {SAC_TINY}",
}

# the offline algorithms learn from a dataset recorded here first (random play on the default env)
DATASET = "transitions=2048 num_envs=8 seed=3"
OFFLINE_RUNS: dict[str, str] = {name: f"algo={name}" for name in ("bc", "iql_cql", "maicq")}
OFFLINE_TINY = "num_envs=16 num_steps=1 total_timesteps=256 num_chunks=4 eval_every=8 eval_episodes=4 num_seeds=2"

SWEEP = """name: reference_sweep
base:
  num_envs: 8
  num_steps: 16
  total_timesteps: 2048
  num_chunks: 4
  eval_every: 8
  eval_episodes: 4
axes:
  lr: [1.0e-3, 4.0e-3]
seeds: 2
"""

# rates per wall-clock second (the async pipeline's production and consumption), and how far the
# actors had run ahead when a row was written: the same code gave produced 9 and 10 (buffer 1 and 2)
# at one row of the deterministic async run, its learning figures bitwise equal
TIMING_KEYS = {
    "wall_s",
    "env_steps_per_s",
    "compile_s",
    "elapsed_s",
    "production_rate",
    "consumption_rate",
    "produced",
    "buffer_occupancy",
}


def _is_timing(key: str) -> bool:
    return key in TIMING_KEYS or key.endswith("_s") or key.endswith("_per_s")


def _rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not _is_timing(k)} for row in rows]


def run(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    common = "progress=false plot=false compile_cache=false overwrite=true"
    for name, flags in RUNS.items():
        cmd = ["marljax", "train", *f"{flags} {TINY} {common} out_dir={out / name}".split()]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    data = out / "dataset.vlt"
    cmd = ["marljax", "record", "random", str(data), *DATASET.split(), "quality=Poor"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    for name, flags in OFFLINE_RUNS.items():
        dataset = f"offline.dataset={data / 'Poor'}"
        cmd = ["marljax", "train", *f"{flags} {dataset} {OFFLINE_TINY} {common} out_dir={out / name}".split()]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    spec = out / "sweep.yaml"
    spec.write_text(SWEEP)
    cmd = ["marljax", "sweep", str(spec), f"out_dir={out / 'sweep'}", "progress=false", "overwrite=true"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _metrics_files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("metrics.jsonl"))}


def compare(before: Path, after: Path) -> int:
    old, new = _metrics_files(before), _metrics_files(after)
    failures = 0
    for name in sorted(old.keys() | new.keys()):
        if name not in old or name not in new:
            print(f"{name}: only in {'after' if name in new else 'before'}")
            failures += 1
            continue
        a, b = _rows(old[name]), _rows(new[name])
        if a == b:
            print(f"{name}: bitwise equal ({len(a)} rows)")
            continue
        failures += 1
        if len(a) != len(b):
            print(f"{name}: {len(a)} rows before, {len(b)} after")
            continue
        i = next(i for i in range(len(a)) if a[i] != b[i])
        keys = sorted(k for k in a[i].keys() | b[i].keys() if a[i].get(k) != b[i].get(k))
        print(f"{name}: row {i} differs in {keys}: {[a[i].get(k) for k in keys]} vs {[b[i].get(k) for k in keys]}")
    print(f"{len(old.keys() | new.keys()) - failures} of {len(old.keys() | new.keys())} metrics files bitwise equal")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
