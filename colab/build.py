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

REPOSITORY = (
    "https://github.com/marljax/marljax"  # the one place that names the repository: badges and the default source
)

SETUP = f"""\
# Set-up. MARLJAX_SOURCE says where marljax comes from: a git URL (your fork's, or this default),
# the path of a wheel you uploaded ("/content/marljax-0.1.0-py3-none-any.whl"), or "marljax"
# once it is on the package index. Colab's own jax is kept, pinned so that pip cannot swap it,
# when it is in marljax's tested range (0.10 to 0.12); otherwise the jax build that matches this
# runtime is installed (GPU: cuda13 on a CUDA 13 driver, else cuda12; TPU: tpu), never a
# CPU-only jax over an accelerator.
MARLJAX_SOURCE = "git+{REPOSITORY}"

import glob, importlib.metadata, importlib.util, os, shutil, subprocess, sys, tempfile
MARLJAX_SOURCE = os.environ.get("MARLJAX_SOURCE", MARLJAX_SOURCE)  # CI points this at the wheel it built
ACCELERATOR = ("tpu" if os.environ.get("COLAB_TPU_ADDR") or glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
               else "gpu" if shutil.which("nvidia-smi") else None)
TESTED_JAX = ((0, 10), (0, 12))  # the oldest and newest jax minor marljax is tested on

def installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None

def cuda_build():  # CUDA 13 needs driver 580 or newer
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.split(".")[0].strip()
    return "cuda13" if driver.isdigit() and int(driver) >= 580 else "cuda12"

if importlib.util.find_spec("marljax") is None:
    jax_version = installed("jax")
    minor = tuple(int(x) for x in jax_version.split(".")[:2]) if jax_version else None
    keep_jax = minor is not None and TESTED_JAX[0] <= minor <= TESTED_JAX[1]
    extra = "" if keep_jax or ACCELERATOR is None else f"[{{cuda_build() if ACCELERATOR == 'gpu' else 'tpu'}}]"
    bare = MARLJAX_SOURCE == "marljax"
    url = "file://" + os.path.abspath(MARLJAX_SOURCE) if os.path.exists(MARLJAX_SOURCE) else MARLJAX_SOURCE
    requirement = f"marljax{{extra}}" if bare else f"marljax{{extra}} @ {{url}}"
    print(f"installing {{requirement}} (jax here: {{jax_version or 'none'}}, {{'kept' if keep_jax else 'replaced'}})")
    pins = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    if keep_jax:  # the runtime's jax and jaxlib stay exactly as they are (its accelerator plugin matches them)
        pins.write("".join(f"{{name}}=={{installed(name)}}\\n" for name in ("jax", "jaxlib") if installed(name)))
    pins.close()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", pins.name, requirement], check=True)
    importlib.invalidate_caches()

# marljax doctor runs in its own process, so this kernel has not imported jax yet (the notebook
# may still set XLA_FLAGS); it fails with the reason when an accelerator runtime ended up on the CPU.
import json
doctor = subprocess.run([sys.executable, "-m", "marljax.cli", "doctor", *(["--expect", ACCELERATOR] if ACCELERATOR else [])],
                        capture_output=True, text=True)
report = json.loads(doctor.stdout.strip().splitlines()[-1])
print("\\n".join(doctor.stdout.strip().splitlines()[:-1]))
print(f"backend {{report['backend']}}, {{report['device_count']}} device(s)")
if doctor.returncode != 0:
    print(f"\\033[91mWARNING: {{doctor.stderr.strip()}}\\033[0m")
SMALL = os.environ.get("MARLJAX_SMALL") == "1"  # a few CPU minutes instead of the full budget
print("small budget" if SMALL else "full budget")"""

QUICKSTART = [
    (
        "md",
        """# marljax quick start: IPPO on MPE simple_spread

Three agents learn to cover three landmarks without colliding. This notebook installs marljax,
trains IPPO, plots the returns and renders an episode of the trained team. On a CPU runtime it
takes a few minutes; set `MARLJAX_SMALL=1` for a one-minute version.""",
    ),
    ("code", SETUP),
    (
        "code",
        """import jax
from marljax.config import load_config
from marljax.train.loop import train

print(jax.devices())
config = load_config(None, [
    "env=MPE_simple_spread_v3",
    f"total_timesteps={3e5 if SMALL else 5e6}",
    "num_seeds=2", "progress=false", "out_dir=runs/colab_quickstart", "overwrite=true",
])
result = train(config)""",
    ),
    ("md", "Every chunk of updates wrote one row of `metrics.jsonl`; the returns per seed:"),
    (
        "code",
        """import matplotlib.pyplot as plt

rows = [r for r in result.rows if r["return_mean"] is not None]
steps = [r["env_steps"] for r in rows]
for s in range(config.num_seeds):
    plt.plot(steps, [r["return_per_seed"][s] for r in rows], label=f"seed {s}")
plt.xlabel("environment steps"); plt.ylabel("episode return per agent"); plt.legend(); plt.show()
first, last = rows[0]["return_mean"], rows[-1]["return_mean"]
print(f"return per agent {first:.2f} -> {last:.2f}")""",
    ),
    (
        "md",
        """## Render an episode

Export seed 0's actors, load them as a pure `act` function, and play one episode in the
environment itself. The plot shows each agent's path (circles: start, squares: end) and the
landmarks (crosses).""",
    ),
    (
        "code",
        """import jax.numpy as jnp
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
print(f"one greedy episode of {len(positions) - 1} steps, return per agent {total:.1f}")""",
    ),
]

SCALE = [
    (
        "md",
        """# Agent-parallel and async modes on the devices you have

`param_sharing=independent` gives every agent its own network; `mesh.agent=K` splits those
networks and their optimizer state over K devices. `mode=async` puts actor threads and a
learner on different devices, joined by a bounded host-side buffer. On a CPU runtime this
notebook asks XLA for 4 virtual CPU devices (before JAX starts), so both modes run anywhere.""",
    ),
    (
        "code",
        SETUP
        + """
if "jax" not in sys.modules:  # must happen before JAX starts; GPUs and TPUs are not affected
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")""",
    ),
    (
        "code",
        """import jax
from marljax.config import load_config
from marljax.train.loop import train

devices = jax.devices()
print(len(devices), "devices:", devices)
agents = 4  # simple_spread with 4 agents and 4 landmarks
k = max(d for d in (1, 2, 4) if len(devices) % d == 0 and agents % d == 0)
budget = 1e5 if SMALL else 2e6""",
    ),
    ("md", "## Agent-parallel: each device holds and updates `agents / K` agents' parameters"),
    (
        "code",
        """config = load_config(None, [
    "param_sharing=independent", f"env_kwargs.num_agents={agents}", f"env_kwargs.num_landmarks={agents}",
    f"mesh.agent={k}", f"total_timesteps={budget}", "num_envs=32", "progress=false",
    "out_dir=runs/colab_agent_parallel", "overwrite=true",
])
result = train(config)
leaf = jax.tree.leaves(result.state.learner.params)[0]
print("a parameter leaf of shape", leaf.shape, "is split as", leaf.sharding.spec)""",
    ),
    ("md", "## Async actor–learner: generation and learning overlap, staleness bounded by `async.max_staleness`"),
    (
        "code",
        """two = len(devices) >= 2
config = load_config(None, [
    "mode=async", f"async.actor_devices={1}", f"async.learner_devices={1}", "async.max_staleness=1",
    f"total_timesteps={budget}", "num_envs=32", "progress=false",
    "out_dir=runs/colab_async", "overwrite=true",
])
print("actors and learner on", "separate devices" if two else "one shared device")
result = train(config)
last = result.rows[-1]
print({k: last[k] for k in ("policy_version", "staleness_mean", "staleness_max", "produced", "consumed", "dropped")})""",
    ),
]

ABLATION = [
    (
        "md",
        """# A seeded ablation: parameter sharing, with confidence intervals

A sweep runs every cell of a grid with every seed. Traced hyperparameters (here `lr`) are
`vmap`ped with the seeds inside one compiled program; structural choices (here
`param_sharing`) compile separately. The report gives the IQM, mean and median with 95%
bootstrap intervals over seeds, and the absolute metric (best parameters re-evaluated).""",
    ),
    ("code", SETUP),
    (
        "code",
        """from marljax.sweeps.runner import run_sweep
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
result = run_sweep(sweep, overwrite=True, progress=False)""",
    ),
    (
        "code",
        """from IPython.display import Image, Markdown, display

display(Markdown((result.out_dir / "report" / "report.md").read_text()))
display(Image(str(result.out_dir / "report" / "curves.png")))
display(Image(str(result.out_dir / "report" / "final.png")))""",
    ),
    ("md", """The raw numbers are in a tensorstore results store, with their labels:"""),
    (
        "code",
        """from marljax.sweeps.results import load

res = load(result.out_dir)
print(res.evals.shape, "= (cells, seeds, evaluations, metrics)", res.metrics)
print([c["name"] for c in res.cells])""",
    ),
]

NOTEBOOKS = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_agent_parallel_and_async.ipynb": SCALE,
    "03_seeded_ablation.ipynb": ABLATION,
}


README = """# colab/

| notebook | what | CPU runtime, `MARLJAX_SMALL=1` |
|---|---|---|
{rows}

Each opens in Colab from its badge (the repository is `{repository}`, named once in
`colab/build.py` as `REPOSITORY`; a fork changes it there and reruns `python colab/build.py`).
The notebooks ask Colab for a GPU runtime; a CPU or TPU runtime works too. Without
`MARLJAX_SMALL=1` they run the full budgets (a few minutes each on a CPU runtime, less on a GPU
or TPU one).

**The set-up cell.** It installs marljax when it is missing, from `MARLJAX_SOURCE`: a git URL
(the default: the repository above), an uploaded wheel's path, or `marljax` once it is on the
package index. Colab's preinstalled jax is kept when it is in marljax's tested range (0.10 to
0.12), pinned with a constraint so that pip cannot swap it or its jaxlib for another build;
otherwise, on a GPU or TPU runtime, the set-up installs `marljax[cuda13]` (driver 580 or newer),
`marljax[cuda12]` or `marljax[tpu]`, so that pip never puts a CPU-only jax over the runtime's
accelerator build. Then it prints
`marljax doctor`'s report (versions, backend, devices) and a red warning when a GPU or TPU
runtime ended up with JAX on the CPU.

The notebooks are written by `python colab/build.py` from the cell sources in that file, so they
are committed without outputs; `python colab/build.py --check` fails when one (or this README) is
stale. CI builds a wheel of the checkout, starts a fresh virtual environment that already holds
a jax of the tested range (as Colab does), points `MARLJAX_SOURCE` at the wheel and runs every
notebook from its set-up cell (`tests/test_notebooks.py`).
"""

ABOUT = {
    "01_quickstart.ipynb": ("install, train IPPO on MPE simple_spread, plot the returns, export the team and render a "
                            "greedy episode", "about 1 minute"),
    "02_agent_parallel_and_async.ipynb": ("`param_sharing=independent` with `mesh.agent=K` over the runtime's devices "
                                          "(4 virtual devices on a CPU runtime), then `mode=async` with its staleness "
                                          "counters", "about 1 minute"),
    "03_seeded_ablation.ipynb": ("a sweep (sharing x lr, seeds vmapped), its report with IQM and bootstrap CIs, the "
                                 "plots, the results store", "about 1 minute"),
}  # fmt: skip


def readme() -> str:
    path = REPOSITORY.removeprefix("https://github.com/")
    badge = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    rows = [f"| {badge}(https://colab.research.google.com/github/{path}/blob/main/colab/{name}) `{name}` | {what} | {cpu} |"
            for name, (what, cpu) in ABOUT.items()]  # fmt: skip
    return README.format(rows="\n".join(rows), repository=REPOSITORY)


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src) for kind, src in cells
    ]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}, "accelerator": "GPU", "colab": {"provenance": []}}  # fmt: skip
    return nb


def main(argv: list[str]) -> int:
    stale = []
    files = {name: nbformat.writes(build(cells)) + "\n" for name, cells in NOTEBOOKS.items()}
    files["README.md"] = readme()
    for name, text in files.items():
        path = HERE / name
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale files in colab/ (run python colab/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
