"""Write the Colab notebooks from the cell sources below, without outputs.

    python colab/build.py          # rewrite colab/*.ipynb
    python colab/build.py --check  # exit 1 if a committed notebook differs from its source here

Keeping the sources here means the committed notebooks never carry stale outputs and a
reviewer reads plain Python. `tests/test_notebooks.py` runs every notebook top to bottom
with MARLJAX_SMALL=1 (a CPU-sized budget).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = '''\
# Set-up: install marljax when it is missing (on Colab). MARLJAX_SOURCE is a pip requirement:
# your fork's git URL, or the path of a wheel you uploaded.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("marljax") is None:
    source = os.environ.get("MARLJAX_SOURCE", "git+https://github.com/marljax/marljax")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
SMALL = os.environ.get("MARLJAX_SMALL") == "1"  # a few CPU minutes instead of the full budget
print("small budget" if SMALL else "full budget")'''

QUICKSTART = [
    ("md", """# marljax quick start: IPPO on MPE simple_spread

Three agents learn to cover three landmarks without colliding. This notebook installs marljax,
trains IPPO, plots the returns and renders an episode of the trained team. On a CPU runtime it
takes a few minutes; set `MARLJAX_SMALL=1` for a one-minute version."""),
    ("code", SETUP),
    ("code", """import jax
from marljax.config import load_config
from marljax.train.loop import train

print(jax.devices())
config = load_config(None, [
    "env=MPE_simple_spread_v3",
    f"total_timesteps={3e5 if SMALL else 5e6}",
    "num_seeds=2", "progress=false", "out_dir=runs/colab_quickstart", "overwrite=true",
])
result = train(config)"""),
    ("md", "Every chunk of updates wrote one row of `metrics.jsonl`; the returns per seed:"),
    ("code", """import matplotlib.pyplot as plt

rows = [r for r in result.rows if r["return_mean"] is not None]
steps = [r["env_steps"] for r in rows]
for s in range(config.num_seeds):
    plt.plot(steps, [r["return_per_seed"][s] for r in rows], label=f"seed {s}")
plt.xlabel("environment steps"); plt.ylabel("episode return per agent"); plt.legend(); plt.show()
first, last = rows[0]["return_mean"], rows[-1]["return_mean"]
print(f"return per agent {first:.2f} -> {last:.2f}")"""),
    ("md", """## Render an episode

Export seed 0's actors, load them as a pure `act` function, and play one episode in the
environment itself. The plot shows each agent's path (circles: start, squares: end) and the
landmarks (crosses)."""),
    ("code", """import jax.numpy as jnp
from marljax import load_policy
from marljax.train.policy import export_policy

export_policy("runs/colab_quickstart", "runs/colab_quickstart_policy", seed_index=0)
policy = load_policy("runs/colab_quickstart_policy")
env = policy.env.env  # the JaxMARL environment
act = jax.jit(lambda obs, key: policy.act(obs, key, greedy=True)[0])
step = jax.jit(env.step)

obs, state = env.reset(jax.random.PRNGKey(7))
positions, total = [state.p_pos], 0.0
for t in range(env.max_steps):
    key = jax.random.PRNGKey(t)
    obs, state, reward, done, _ = step(key, state, act(obs, key))
    positions.append(state.p_pos)
    total += float(sum(reward[a] for a in env.agents)) / env.num_agents
    if done["__all__"]:
        break
path = jnp.stack(positions)  # [T, entities, 2]: agents first, then landmarks
n = env.num_agents
for i in range(n):
    plt.plot(path[:-1, i, 0], path[:-1, i, 1], "-", lw=1.5)
    plt.plot(*path[0, i], "o", color=plt.gca().lines[-1].get_color())
    plt.plot(*path[-2, i], "s", color=plt.gca().lines[-1].get_color())
plt.plot(path[0, n:, 0], path[0, n:, 1], "kx", ms=10)
plt.gca().set_aspect("equal"); plt.title(f"one greedy episode, return per agent {total:.1f}"); plt.show()
print(f"one greedy episode of {len(positions) - 1} steps, return per agent {total:.1f}")"""),
]

SCALE = [
    ("md", """# Agent-parallel and async modes on the devices you have

`param_sharing=independent` gives every agent its own network; `mesh.agent=K` splits those
networks and their optimizer state over K devices. `mode=async` puts actor threads and a
learner on different devices, joined by a bounded host-side buffer. On a CPU runtime this
notebook asks XLA for 4 virtual CPU devices (before JAX starts), so both modes run anywhere."""),
    ("code", SETUP + '''
if "jax" not in sys.modules:  # must happen before JAX starts; GPUs and TPUs are not affected
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")'''),
    ("code", """import jax
from marljax.config import load_config
from marljax.train.loop import train

devices = jax.devices()
print(len(devices), "devices:", devices)
agents = 4  # simple_spread with 4 agents and 4 landmarks
k = max(d for d in (1, 2, 4) if len(devices) % d == 0 and agents % d == 0)
budget = 1e5 if SMALL else 2e6"""),
    ("md", "## Agent-parallel: each device holds and updates `agents / K` agents' parameters"),
    ("code", """config = load_config(None, [
    "param_sharing=independent", f"env_kwargs.num_agents={agents}", f"env_kwargs.num_landmarks={agents}",
    f"mesh.agent={k}", f"total_timesteps={budget}", "num_envs=32", "progress=false",
    "out_dir=runs/colab_agent_parallel", "overwrite=true",
])
result = train(config)
leaf = jax.tree.leaves(result.state.learner.params)[0]
print("a parameter leaf of shape", leaf.shape, "is split as", leaf.sharding.spec)"""),
    ("md", "## Async actor–learner: generation and learning overlap, staleness bounded by `async.max_staleness`"),
    ("code", """two = len(devices) >= 2
config = load_config(None, [
    "mode=async", f"async.actor_devices={1}", f"async.learner_devices={1}", "async.max_staleness=1",
    f"total_timesteps={budget}", "num_envs=32", "progress=false",
    "out_dir=runs/colab_async", "overwrite=true",
])
print("actors and learner on", "separate devices" if two else "one shared device")
result = train(config)
last = result.rows[-1]
print({k: last[k] for k in ("policy_version", "staleness_mean", "staleness_max", "produced", "consumed", "dropped")})"""),
]

ABLATION = [
    ("md", """# A seeded ablation: parameter sharing, with confidence intervals

A sweep runs every cell of a grid with every seed. Traced hyperparameters (here `lr`) are
`vmap`ped with the seeds inside one compiled program; structural choices (here
`param_sharing`) compile separately. The report gives the IQM, mean and median with 95%
bootstrap intervals over seeds, and the absolute metric (best parameters re-evaluated)."""),
    ("code", SETUP),
    ("code", """from marljax.sweeps.runner import run_sweep
from marljax.sweeps.spec import expand

spec = {
    "name": "colab_ablation",
    "base": {"env": "MPE_simple_spread_v3", "num_envs": 16 if SMALL else 32,
             "total_timesteps": 6e4 if SMALL else 1e6, "eval_episodes": 8 if SMALL else 32},
    "axes": {"param_sharing": ["shared", "independent"], "lr": [1e-3, 3e-3]},
    "seeds": 3 if SMALL else 8,
    "out_dir": "runs/sweeps/colab_ablation",
}
sweep = expand(spec)
print(sweep.describe())
result = run_sweep(sweep, overwrite=True, progress=False)"""),
    ("code", """from IPython.display import Image, Markdown, display

display(Markdown((result.out_dir / "report" / "report.md").read_text()))
display(Image(str(result.out_dir / "report" / "curves.png")))
display(Image(str(result.out_dir / "report" / "final.png")))"""),
    ("md", """The raw numbers are in a tensorstore results store, with their labels:"""),
    ("code", """from marljax.sweeps.results import load

res = load(result.out_dir)
print(res.evals.shape, "= (cells, seeds, evaluations, metrics)", res.metrics)
print([c["name"] for c in res.cells])"""),
]

NOTEBOOKS = {"01_quickstart.ipynb": QUICKSTART, "02_agent_parallel_and_async.ipynb": SCALE, "03_seeded_ablation.ipynb": ABLATION}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src) for kind, src in cells]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}, "accelerator": "GPU", "colab": {"provenance": []}}  # fmt: skip
    return nb


def main(argv: list[str]) -> int:
    stale = []
    for name, cells in NOTEBOOKS.items():
        text = nbformat.writes(build(cells)) + "\n"
        path = HERE / name
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale notebooks (run python colab/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
