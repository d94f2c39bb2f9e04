"""MAPPO: IPPO's actors with one centralised critic on the global state.

Each group keeps its own actor (shared, per-role or independent, as `param_sharing`
says). The value of agent i is `V(world_state, onehot(i))` from ONE critic for all agents;
`world_state` is the env's `get_world_state` where JaxMARL provides one (SMAX, facmac,
jaxnav), else every agent's observation concatenated (`EnvAdapter.world_state`). The critic
is feed-forward also when the actors are recurrent: it sees the full state, so it needs no
memory, except of the time. Where observations carry no clock (MPE) it cannot tell how much of
a time-limited episode is left; `critic.time=true` gives it the elapsed fraction of the env's
time limit (JaxMARL's recurrent MAPPO critic counts the steps instead; docs/benchmarks.md).

Everything else (rollout, GAE, the clipped losses, minibatching, the mesh) is IPPO's: this
module only supplies the critic piece.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import jax
import jax.numpy as jnp

from marljax.algos import ippo
from marljax.algos.api import Algorithm, AlgorithmSpec
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import EnvAdapter
from marljax.nn.networks import Critic
from marljax.schema import setting
from marljax.types import ActorState

Array = jax.Array


def world_state_size(env: EnvAdapter) -> int:
    """Length W of `env.world_state(...)`, from a shape-only trace of reset."""

    def world(key):
        obs, state = env.reset(key)
        return env.world_state(state, obs)

    return int(jax.eval_shape(world, jax.random.PRNGKey(0)).shape[0])


@dataclasses.dataclass(frozen=True)
class CriticConfig:
    """`critic.*`: what the central critic (MAPPO's, HAPPO's) sees beside the world state."""

    time: bool = setting(
        False,
        "also show it the running episode's elapsed fraction, its steps / the env's time limit "
        "(max_steps): without it a feed-forward critic cannot tell how much of a time-limited "
        "episode is left where observations carry no clock (MPE)",
    )


MPE_CRITIC = {"critic": {"time": True}}  # MAPPO's and HAPPO's MPE family default (critic.time)


def time_limit(config: Config, env: EnvAdapter) -> int | None:
    """The env's time limit when the critic sees the time (`critic.time`), else None; refused where the
    env declares none."""
    if not config.section(CriticConfig).time:
        return None
    return env.required_time_limit("critic.time", "to measure episodes by")


def central_critic(config: Config, env: EnvAdapter) -> ippo.CentralCritic:
    net = Critic(config.hidden_size, config.num_layers, config.activation, config.dtype)
    limit = time_limit(config, env)
    n_agents, width = env.num_agents, world_state_size(env) + (1 if limit else 0)

    def value(params, world: Array, ids: Array) -> Array:
        """world [B, W], ids [A, N] (one-hot rows of the agents wanted) -> values [B, A]."""
        b, a = world.shape[0], ids.shape[0]
        x = jnp.concatenate(
            [jnp.broadcast_to(world[:, None, :], (b, a, width)), jnp.broadcast_to(ids, (b,) + ids.shape)], axis=-1
        )  # [B, A, W + N]
        out = cast(Array, net.apply(params, x.reshape(b * a, -1)))  # apply without mutable= returns the output alone
        return out.reshape(b, a)

    def init(key: Array):
        return net.init(key, jnp.zeros((1, width + n_agents), jnp.float32))

    if not limit:
        return ippo.CentralCritic(init, value)  # it sees the world state alone
    steps = float(limit)

    def timed_world(actors: ActorState) -> Array:
        """[E, W + 1]: each env's world state, then its episode's elapsed fraction (critic.time)."""
        state = jax.vmap(env.world_state)(actors.env_state, actors.obs)
        return jnp.concatenate([state, (actors.ep_length.astype(jnp.float32) / steps)[:, None]], axis=-1)

    return ippo.CentralCritic(init, value, timed_world)


def build(config: Config, env: EnvAdapter, **kwargs) -> Algorithm:
    """MAPPO's pure pieces: IPPO's with the central critic plugged in."""
    return ippo.build(config, env, critic=central_critic(config, env), **kwargs)


SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "mappo",
        "MAPPO: IPPO's actors with one centralised critic on the global state",
        {"ppo": ippo.PPOConfig, "critic": CriticConfig},
        supports=Supports(actions=("discrete", "continuous"), agent_axis=True, agent_replicate=True, async_mode=True),
        # IPPO's spread winner, searched for MAPPO too (docs/performance.md section 3): on MPE spread it
        # reaches -20.3 per agent on 1.8x fewer env steps; on Hanabi 2.5 per agent 1.61x sooner; on Switch
        # Riddle (recurrent) 0.45 1.35x sooner; on a small JaxNav map 0.5 at least 1.10x sooner (the defaults
        # timed out); on Overcooked 20 and 100 per agent 1.09x and 1.11x sooner on 0.66x and 0.68x the env
        # steps. Not SMAX 3m (worse there), STORM or Coin Game: MAPPO's own defaults got there first
        # On MPE the critic also sees the time (critic.time): spread's episodes all end by the time limit and its
        # observations carry no clock; on its fresh seeds (7919 x 3, 1M steps) MAPPO's gain over no-op rose from
        # +5.98 to +12.31 per agent, HAPPO's from +6.49 to +13.37 (docs/guide/algorithms.md, "The central critic's clock")
        family_defaults={
            **{f: ippo.SHORT_ROLLOUTS for f in ("hanabi", "switch_riddle", "jaxnav", "overcooked")},
            "mpe": {**ippo.SHORT_ROLLOUTS, **MPE_CRITIC},
        },
    ),
    build,
    ippo.LOSSES,
)
