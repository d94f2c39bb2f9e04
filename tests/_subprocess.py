"""Run a snippet of Python in a fresh process that sees `n` fake CPU devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from marljax.parallel.placement import fake_cpu_devices_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_with_devices(code: str, n_devices: int, timeout: int = 600) -> dict:
    """Execute `code` (which must print one JSON line last) with n fake devices; return it parsed."""
    env = fake_cpu_devices_env(n_devices)
    # the snippet may import test helpers (tests._trees): put this checkout first on its path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Training runs in one subprocess: each (name, overrides) of `runs` trains base + overrides and is
# saved whole (tests/_trees.py: save_run) to {out}/<name>.npz; prints each run's devices and mesh.
TRAIN = """
import json, jax
from marljax.config import load_config
from marljax.train.loop import train
from tests._trees import save_run
info = {{}}
for name, overrides in {runs!r}:
    cfg = load_config(None, {base!r} + overrides + ["out_dir={out}/" + name, "progress=false", "plot=false"])
    res = train(cfg, log=lambda s: None)
    save_run(res, "{out}/" + name + ".npz")
    leaf = jax.tree.leaves(res.state.learner.params)[0]
    mesh, spec = dict(leaf.sharding.mesh.shape), str(leaf.sharding.spec)
    info[name] = {{"devices": len(jax.devices()), "mesh": mesh, "spec": spec}}
print(json.dumps(info))
"""


def train_runs(out, base: list[str], runs: list[tuple[str, list[str]]], n_devices: int) -> dict[str, tuple[dict, dict]]:
    """Train each run on n fake devices in one subprocess: name -> (its devices and mesh, its whole
    run tree as tests/_trees.py's load_run gives it)."""
    from tests._trees import load_run

    info = run_with_devices(TRAIN.format(base=base, runs=runs, out=out), n_devices)
    return {name: (info[name], load_run(f"{out}/{name}.npz")) for name, _ in runs}
