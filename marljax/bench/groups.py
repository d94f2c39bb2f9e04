"""What each agent group costs: its parameters and the FLOPs of its forward pass per agent step.

These are the loads an agent-centric placement would balance over devices (issue 21, item 2):
groups differ in observation size and, with `network.<group>.*`, in network size.

* **parameters**: every leaf of the group's entry in the learner's params (all its parameter sets:
  1 when shared, A_g when independent), counted from shapes, nothing compiled;
* **forward FLOPs per agent step**: XLA's cost analysis of the group's network on one environment
  step of its A_g agents (as acting applies it), divided by A_g. Not counted: sampling, the env,
  and the backward pass of learning.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.numpy as jnp

from marljax.algos.acting import GroupNetworks
from marljax.algos.api import Trainer
from marljax.bench.measure import flops
from marljax.bench.table import Row
from marljax.config import Config
from marljax.envs.adapter import AgentGroup


def _forward_flops(nets: GroupNetworks, params: Any, g: AgentGroup) -> float:
    """FLOPs of group g's network on one env step of its agents (obs [1, A_g, ...])."""
    net = nets.nets[g.name]
    obs = jax.ShapeDtypeStruct((1, g.size) + g.obs_shape, jnp.float32)
    rnn = nets.gru_size is not None
    hidden = jax.ShapeDtypeStruct((1, g.size, nets.gru_size), jnp.float32) if rnn else None
    reset = jax.ShapeDtypeStruct((1, g.size), jnp.bool_) if rnn else None
    # actor-critics take an action mask after the ids; the Q-networks do not
    takes_mask = "mask" in inspect.signature(type(net).__call__).parameters
    mask = jax.ShapeDtypeStruct((1, g.size, g.action_dim), jnp.bool_) if takes_mask and g.discrete else None
    extra = (mask,) if takes_mask else ()

    def forward(p, o, h, r, *x):
        return nets.apply(p, g, o, h, r, *x)

    return flops(forward, params, obs, hidden, reset, *extra)


def group_costs(config: Config, trainer: Trainer, state: Any) -> dict[str, Any]:
    """Flat figures per group g: `group_<g>_agents`, `group_<g>_params` (all its sets),
    `group_<g>_forward_flops_per_agent_step`. `state`: the unsharded state's shapes (one seed).
    None for an algorithm whose one network serves the team (Sable: no group has its own)."""
    nets = GroupNetworks.of(config, trainer.networks)
    out: dict[str, Any] = {}
    for g in trainer.env.groups:
        if g.name not in trainer.networks:
            continue
        params = state.learner.params[g.name]
        out[f"group_{g.name}_agents"] = g.size
        out[f"group_{g.name}_params"] = sum(int(x.size) for x in jax.tree.leaves(params))
        out[f"group_{g.name}_forward_flops_per_agent_step"] = _forward_flops(nets, params, g) / g.size
    return out


def group_rows(r: dict[str, Any], groups: list[str]) -> list[Row]:
    """One table row per group: parameters and forward FLOPs per agent step."""
    return [
        (
            f"group {g}",
            f"{r[f'group_{g}_params']:,}",
            f"params ({r[f'group_{g}_agents']} agent(s)); forward {r[f'group_{g}_forward_flops_per_agent_step']:,.0f} "
            "FLOPs per agent step",
        )
        for g in groups
    ]
