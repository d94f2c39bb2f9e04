"""`marljax bench agents`: learner memory, the layout swap and update time as the agent count grows,
with each agent's parameters and Adam moments split over `mesh.agent` = K devices.

    marljax bench agents [--agents 4,16,64] [--mesh-agent 1,2,4,8]
                         [--device-memory-mib M] [key=value ...]

For every agent count N and every K dividing N, IPPO (or `algo=mappo|pqn_vdn`) with
`param_sharing=independent` on MPE_simple_spread_v3 with N agents and N landmarks (each agent
observes every landmark and every other agent, so its observation, and its first layer, grow
with N) is benched as `marljax bench` does it (`train.py`'s timed chunks, `swap.py`'s swap), one
row per (N, K): learner bytes per device and in all, their ratio beside the ideal 1/K, the bytes
a device receives per update when parameters go to the acting layout and trajectories to the
learning layout, the swap's share of an update, the update's time and env-steps/s.

Then the largest N whose learner state (parameters + Adam) fits a per-device budget, on one
device and on K: N agents times bytes per agent fitted as a line in N through the measured rows
(an extrapolation, said so where it is printed; a central critic, replicated over `agent`, is
taken as measured at the largest N), each answer checked against the learner state's shapes at N
and N+K (`jax.eval_shape`, nothing run). Activations, trajectories and environments are not counted.

Runs on `max(8, K)` devices: with fewer visible CPU devices it re-runs itself in a child process
that sees 8 fake ones. Sizes are small (8 envs x 16 steps) so that the default takes minutes on
a 2-core CPU: the times are for comparing rows, not absolute. Prints a markdown table, the
largest-N lines, then one JSON line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from marljax.arguments import Parsed
from marljax.bench.measure import six_digits
from marljax.bench.swap import bench_swap
from marljax.bench.table import markdown, report_text
from marljax.bench.train import bench_train
from marljax.config import Config, load_config, replace
from marljax.parallel.layouts import AGENT
from marljax.parallel.mesh import device_count, learner_specs
from marljax.parallel.placement import fake_cpu_devices_env, platform
from marljax.schema import ConfigError
from marljax.train.wiring import make_adapter, make_trainer, prepare

AGENTS = (4, 16, 64)
MESH_AGENT = (1, 2, 4, 8)
FAKE_DEVICES = 8  # CPU devices the child process sees when this one sees too few
UPDATES_PER_CHUNK = 2  # train.py times a warm-up chunk and up to three more
MAX_AGENTS = 1 << 20  # the largest N the fit is searched to
CHECK_MAX_AGENTS = 1024  # answers above this are not checked against shapes (building the env grows with N)
DEFAULTS = [
    "param_sharing=independent",
    "num_envs=8",
    "num_steps=16",
    "num_seeds=1",
    "mesh.seed=1",
    "mesh.data=-1",
    "progress=false",
    "plot=false",
]
CHILD = "MARLJAX_BENCH_AGENTS_CHILD"  # set in the re-run child, so that it never re-runs itself


# ----------------------------------------------------------------------------- configs and rows


def row_config(base: Config, n: int, k: int) -> Config:
    """`base` with n agents (and n landmarks), mesh.agent = k, and a budget of one timed chunk size."""
    kwargs = {**base.env_kwargs, "num_agents": n, "num_landmarks": n}
    steps = base.run_steps_per_update * UPDATES_PER_CHUNK
    return replace(base, env_kwargs=kwargs, mesh={"agent": k}, total_timesteps=steps, num_chunks=1)


def bench_row(config: Config) -> dict[str, Any]:
    """One (N, K) row: the timed chunks of `marljax bench` and the swap beside them."""
    _, mesh, trainer = prepare(config)
    timing = bench_train(config, mesh, trainer)
    update_s = timing["train_chunk_s_min"] / timing["updates_per_chunk"]
    swap = bench_swap(config, mesh, trainer, update_s)
    n, k = config.env_kwargs["num_agents"], config.mesh.agent
    return {
        "num_agents": n,
        "mesh_agent": k,
        "mesh": "x".join(f"{a}{s}" for a, s in mesh.shape.items()),
        "learner_bytes_per_device": swap["learner_bytes_per_device"],
        "learner_bytes_total": swap["learner_bytes_total"],
        "per_device_over_total": swap["learner_bytes_per_device"] / swap["learner_bytes_total"],
        "ideal": 1 / k,
        "swap_param_bytes": swap.get("swap_param_bytes", 0),
        "swap_traj_bytes": swap.get("swap_traj_bytes", 0),
        "swap_share_of_update": swap.get("swap_share_of_update", 0.0),
        "update_s": update_s,
        "train_env_steps_per_s": timing["train_env_steps_per_s"],
        "compile_s": timing["compile_s"],
    }


# ----------------------------------------------------------------------------- what fits


def split_and_replicated(rows: list[dict[str, Any]], n: int) -> tuple[float, float]:
    """(learner bytes split over `agent`, bytes every device keeps whole) at N = n, solved from its rows:
    per device = split / K + replicated, and the total is split + replicated."""
    at_n = [r for r in rows if r["num_agents"] == n]
    total = at_n[0]["learner_bytes_total"]
    split_rows = [r for r in at_n if r["mesh_agent"] > 1]
    if not split_rows:
        return float(total), 0.0
    r, k = split_rows[0], split_rows[0]["mesh_agent"]
    replicated = (k * r["learner_bytes_per_device"] - total) / (k - 1)
    return total - replicated, replicated


def fit_bytes(rows: list[dict[str, Any]]) -> tuple[Callable[[int, int], float], str]:
    """(bytes per device as a function of (N, K), how it was fitted). The split bytes are N agents'
    sets, each a size linear in N (its observation, hence its first layer, grows linearly with N on
    spread): bytes per agent is fitted as a line through the measured N's (least squares past two).
    The replicated bytes (Adam's step count) are as measured at the largest N."""
    ns = sorted({r["num_agents"] for r in rows})  # what_fits asks for two N's or more
    per_agent = [split_and_replicated(rows, n)[0] / n for n in ns]
    line = np.polynomial.Polynomial.fit(ns, per_agent, 1)
    replicated = split_and_replicated(rows, ns[-1])[1]
    how = f"N x (bytes per agent, a line in N through the measured N = {', '.join(map(str, ns))})"
    return (lambda n, k: n * float(line(n)) / k + replicated), how


def largest_fit(per_device: Callable[[int, int], float], k: int, budget: float) -> int | None:
    """The largest multiple of k (up to MAX_AGENTS) whose learner bytes per device fit `budget`
    (bytes grow with N: doubling, then bisection); None when not even N = k fits."""
    fits = lambda m: per_device(m * k, k) <= budget  # noqa: E731 -- m: agents per device
    if not fits(1):
        return None
    lo, hi = 1, 2
    while fits(hi) and hi * k < MAX_AGENTS:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # fits(lo), not fits(hi) (or past the cap)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return min(lo * k, MAX_AGENTS)


def shape_bytes(base: Config, n: int, k: int) -> int:
    """Learner bytes per device at N = n on k devices from the learner state's shapes (nothing runs):
    leaves split over `agent` (learner_specs) count 1/k."""
    config = row_config(base, n, 1)
    env = make_adapter(config)
    learner = jax.eval_shape(make_trainer(config, env).init, jax.random.PRNGKey(0)).learner
    specs = learner_specs(learner, frozenset(g.name for g in env.groups), None)
    is_spec = lambda x: isinstance(x, P)  # noqa: E731
    sizes = [
        (x.size * x.dtype.itemsize, AGENT in s)
        for x, s in zip(jax.tree.leaves(learner), jax.tree.leaves(specs, is_leaf=is_spec))
    ]
    return config.num_seeds * sum(b // k if split else b for b, split in sizes)


def what_fits(base: Config, rows: list[dict[str, Any]], ks: Sequence[int], budget_mib: float | None) -> dict[str, Any]:
    """The largest N that fits the per-device budget on each K, checked against the shapes there."""
    largest_n = max(r["num_agents"] for r in rows)
    if budget_mib is None:  # default: one device holds half the learner state of the largest N
        budget_mib = max(r["learner_bytes_total"] for r in rows if r["num_agents"] == largest_n) / 2 / 2**20
    out: dict[str, Any] = {"device_memory_mib": budget_mib, "fit": "", "largest_fit": {}, "checked": {}}
    if len({r["num_agents"] for r in rows}) < 2:
        return out | {"fit": "none: it needs two agent counts or more"}
    per_device, out["fit"] = fit_bytes(rows)
    budget = budget_mib * 2**20
    for k in ks:
        n = largest_fit(per_device, k, budget)
        out["largest_fit"][str(k)] = n
        if n is not None and n + k <= CHECK_MAX_AGENTS:  # the shapes at the answer and one step past it
            out["checked"][str(k)] = [shape_bytes(base, n, k) <= budget, shape_bytes(base, n + k, k) > budget]
    return out


# ----------------------------------------------------------------------------- the bench


def run_agents_bench(
    base: Config, agents: Sequence[int], ks: Sequence[int], budget_mib: float | None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Bench every (N, K) with K dividing N; print the table, what fits, then one JSON line."""
    log(
        f"marljax bench agents: {base.algo} on {base.env}, param_sharing={base.param_sharing}, {device_count()} x "
        f"{platform()}; {base.num_envs} envs x {base.num_steps} steps, N = {list(agents)}, K = {list(ks)}"
    )
    rows = []
    for n in agents:
        for k in ks:
            if n % k:
                log(f"N={n}, K={k}: skipped (K must divide N)")
                continue
            rows.append(six_digits(bench_row(row_config(base, n, k))))
            log(" | ".join(_cells(rows[-1])) + f" | compile {rows[-1]['compile_s']:.0f} s")  # a row as it comes
    fits = what_fits(base, rows, sorted({1, *ks}), budget_mib)
    result = {
        "bench": "agents",
        "algo": base.algo,
        "env": base.env,
        "devices": device_count(),
        "platform": platform(),
        "num_envs": base.num_envs,
        "num_steps": base.num_steps,
        "rows": rows,
        **fits,
    }
    return report_text(markdown(HEADER, [_cells(r) for r in rows]) + "\n\n" + _fit_lines(fits), result, log)


HEADER = (
    "N",
    "K",
    "mesh",
    "learner B/device",
    "learner B total",
    "per device / K=1",
    "ideal 1/K",
    "swap params B/update",
    "swap traj B/update",
    "swap / update",
    "update ms",
    "env-steps/s",
)


def _cells(r: dict[str, Any]) -> list[str]:
    return [
        str(r["num_agents"]),
        str(r["mesh_agent"]),
        r["mesh"],
        f"{r['learner_bytes_per_device']:,}",
        f"{r['learner_bytes_total']:,}",
        f"{r['per_device_over_total']:.3f}",
        f"{r['ideal']:.3f}",
        f"{r['swap_param_bytes']:,}",
        f"{r['swap_traj_bytes']:,}",
        f"{100 * r['swap_share_of_update']:.1f}%",
        f"{1000 * r['update_s']:.1f}",
        f"{r['train_env_steps_per_s']:,.0f}",
    ]


def _fit_lines(fits: dict[str, Any]) -> str:
    """The largest N per K, with how it was derived and checked."""

    def n(k):
        v = fits["largest_fit"][k]
        return "none" if v is None else f"{v}" + (f" (the cap, {MAX_AGENTS})" if v == MAX_AGENTS else "")

    def check(k):
        c = fits["checked"].get(k)
        if fits["largest_fit"][k] is None:
            return ""
        if c is None:
            return f" (not checked: above N={CHECK_MAX_AGENTS})"
        return "; shapes agree" if all(c) else "; the learner state's shapes DISAGREE"

    if not fits["largest_fit"]:
        return f"Largest N that fits {fits['device_memory_mib']:,.2f} MiB per device: {fits['fit']}"
    lines = [
        f"Largest N whose learner state (params + Adam) fits {fits['device_memory_mib']:,.2f} MiB per device "
        f"(extrapolated: per-device bytes {fits['fit']}; each answer checked against the learner state's shapes "
        "at N and N+K; activations, trajectories and envs not counted):"
    ]
    lines += [f"  K={k}: N = {n(k)}{check(k)}" for k in fits["largest_fit"]]
    one = fits["largest_fit"].get("1")
    best = max(fits["largest_fit"], key=lambda k: fits["largest_fit"][k] or 0)
    if one is not None and fits["largest_fit"][best]:
        lines.append(f"  {best} devices fit {fits['largest_fit'][best] / one:.2f}x the agents one device fits")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line


def rerun_with_devices(argv: Sequence[str], n: int) -> int:
    """Run this bench again (`marljax bench agents ARGV`) in a child process whose JAX sees n CPU devices;
    its exit code."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds this marljax/
    env = fake_cpu_devices_env(n)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env[CHILD] = "1"
    command = [sys.executable, "-m", "marljax.cli", "bench", "agents", *argv]
    return subprocess.run(command, env=env).returncode


def main(args: Parsed) -> int:
    """`marljax bench agents`, its arguments parsed: on this process's devices, or re-run on enough."""
    agents, ks = args.options["agents"] or AGENTS, args.options["mesh_agent"] or MESH_AGENT
    base = load_config(None, DEFAULTS + args.overrides)
    need = max(ks)
    if device_count() < need:
        if platform() != "cpu" or os.environ.get(CHILD):
            raise ConfigError("mesh-agent", f"K up to {need} needs {need} devices; {device_count()} are visible")
        return rerun_with_devices(args.args, max(FAKE_DEVICES, need))
    run_agents_bench(base, agents, ks, args.options["device_memory_mib"])
    return 0
