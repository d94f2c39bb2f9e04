"""`marljax bench mesh.agent=K`: each agent device's share of parameters, FLOPs and bytes under the
naive placement (every group split over `agent`, padded where its count does not divide K) and the
balanced one (`mesh.placement=balanced`: such a group replicated instead), and the update time of
each placement that runs (the learner does not pad, so naive runs only when every count divides K).

Costs per agent come from `groups.py` (parameters; forward FLOPs per agent step) and the learner's
shapes (bytes: parameters, and Adam's two moments of the same size); the per-device loads from
`marljax.parallel.agent_placement`. FLOPs are per environment step of one data shard, the learning
phase's work; acting is environment-major for every group, even under both placements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from marljax.algos.api import Trainer
from marljax.bench.table import Row
from marljax.config import Config, replace
from marljax.parallel.agent_placement import GroupCost, balanced, naive
from marljax.schema import ConfigError

ADAM_MOMENTS = 2  # the optimizer state per parameter: Adam's mu and nu, as the parameters' dtype


def group_cost_list(trainer: Trainer, state: Any, costs: dict[str, Any]) -> list[GroupCost]:
    """One GroupCost per group from `groups.group_costs`'s figures and the state's shapes (one seed)."""
    out = []
    for g in trainer.env.groups:
        nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.learner.params[g.name]))
        n = g.size  # one parameter set per agent (mesh.agent > 1 needs param_sharing=independent)
        out.append(
            GroupCost(
                g.name,
                n,
                costs[f"group_{g.name}_params"] // n,
                costs[f"group_{g.name}_forward_flops_per_agent_step"],
                nbytes // n,
                ADAM_MOMENTS * nbytes // n,
            )
        )
    return out


def placement_figures(groups: list[GroupCost], k: int) -> dict[str, Any]:
    """Flat figures of the naive and the balanced placement on k agent devices."""
    out: dict[str, Any] = {}
    for name, p in (("naive", naive(groups, k)), ("balanced", balanced(groups, k))):
        out[f"placement_{name}_replicated"] = sorted(p.replicated)
        out[f"placement_{name}_imbalance"] = p.imbalance
        out[f"placement_{name}_mean_flops"] = p.mean_flops
        for field in ("agents", "params", "flops", "bytes"):
            out[f"placement_{name}_{field}"] = [getattr(d, field) for d in p.devices]
    return out


def timed_placements(config: Config, bench: Callable[[Config], float]) -> dict[str, Any]:
    """Update seconds of `mesh.placement=split` and `=balanced`, `mesh.replicate` empty (None where
    the config is refused: `placement_<name>_refused` says why). `bench(config) -> s per update`."""
    out: dict[str, Any] = {}
    for name, placement in (("naive", "split"), ("balanced", "balanced")):
        try:
            out[f"placement_{name}_update_s"] = bench(replace(config, mesh={"placement": placement, "replicate": ""}))
        except ConfigError as e:
            out[f"placement_{name}_update_s"], out[f"placement_{name}_refused"] = None, str(e)
    return out


def placement_rows(r: dict[str, Any]) -> list[Row]:
    """Per-device rows of both placements, their imbalance and update time."""
    rows: list[Row] = []
    for name in ("naive", "balanced"):
        reps = r[f"placement_{name}_replicated"]
        secs = r.get(f"placement_{name}_update_s")
        time = "not run: " + r[f"placement_{name}_refused"] if secs is None else f"update {1000 * secs:.1f} ms"
        rows.append(
            (
                f"placement {name}",
                f"{r[f'placement_{name}_imbalance']:.3f}x",
                f"most-loaded device / mean FLOPs; replicated: {', '.join(reps) or 'none'}; {time}",
            )
        )
        for a, (n, p, f, b) in enumerate(
            zip(*(r[f"placement_{name}_{x}"] for x in ("agents", "params", "flops", "bytes")))
        ):
            rows.append((f"  device {a}", f"{f:,.0f}", f"FLOPs/env step; {p:,} params, {b:,} bytes; {n:g} agent(s)"))
    return rows
