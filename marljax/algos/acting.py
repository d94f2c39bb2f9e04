"""Acting, as every algorithm does it: a group's network applied to its agents, the actors'
first state, the rollout scan and its episode statistics (Brax's `acting.py`, for groups).

* **Parameter sets** (`GroupNetworks`, from `param_sharing`): a group's parameters carry a
  leading parameter-set axis: 1 (one network for the group's agents, told apart by a one-hot
  id when `agent_id`; `per_role` makes one group per role) or A_g (`independent`: one network
  per agent, vmapped over the agent axis, no id).
* **The network signature** (`marljax.nn.networks`): feed-forward `net(obs, ids, *extra) -> out`;
  recurrent `net(hidden, obs, reset, ids, *extra) -> (hidden', *out)`.
* **Keys per environment** (`VecEnv`): every random draw that concerns one environment comes
  from a key split per *global* environment index, so a run gives the same numbers however a
  mesh splits the environments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.config import Config
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn.networks import STATS
from marljax.nn.ops import linear_schedule
from marljax.parallel.layouts import Layout
from marljax.types import ActorState, EpisodeStats

Array = jax.Array

# (actors, masks: group -> [E, A_g, n], keys [E, 2] one per local env) -> (actions: group -> [E, A_g(, d)],
#   hidden': group -> [E, A_g, H] ({} feed-forward), what to record of the step before it is taken)
StepPolicy = Callable[[ActorState, dict, Array], tuple[dict, dict, Any]]
# (what the policy recorded, the env step's result) -> the rollout's entry for this step
StepRecord = Callable[[Any, Any], Any]


def flat(x: Array, k: int) -> Array:
    """Merge the first k axes into one."""
    return x.reshape((-1,) + x.shape[k:])


def agent_ids(group: AgentGroup, lead: tuple[int, ...], enabled: bool) -> Array | None:
    """One-hot agent ids [prod(lead) * A_g, A_g] in the order of a flattened [*lead, A_g] batch."""
    if not enabled or group.size == 1:
        return None
    eye = jnp.eye(group.size, dtype=jnp.float32)
    return jnp.broadcast_to(eye, lead + eye.shape).reshape(-1, group.size)


def local_keys(key: Array, n_global: int, n_local: int, axes: str | tuple[str, ...] | None) -> Array:
    """This shard's slice of `split(key, n_global)`: one key per global environment index."""
    keys = jax.random.split(key, n_global)
    if axes is None or n_local == n_global:
        return keys
    start = jax.lax.axis_index(axes) * n_local
    return jax.lax.dynamic_slice_in_dim(keys, start, n_local)


def group_keys(keys: Array, group_index: int) -> Array:
    """Group `group_index`'s keys [E, 2] from the per-environment keys [E, 2]."""
    return jax.vmap(jax.random.fold_in, (0, None))(keys, group_index)


def uses_cnn(config: Config, group: AgentGroup) -> bool:
    """`torso=cnn`, or `auto` with image observations [H, W, C]."""
    return config.torso == "cnn" or (config.torso == "auto" and len(group.obs_shape) == 3)


@dataclasses.dataclass(frozen=True)
class GroupNetworks:
    """Every group's network, and how its parameter sets meet the group's agents."""

    nets: Mapping[str, nn.Module]  # group -> flax module
    independent: bool  # param_sharing=independent: one set per agent
    agent_id: bool  # shared sets see a one-hot agent id
    gru_size: int | None  # the recurrent networks' hidden width; None: feed-forward

    @classmethod
    def of(cls, config: Config, nets: Mapping[str, nn.Module]) -> GroupNetworks:
        gru = config.gru_hidden_size if config.recurrent else None
        return cls(nets, config.param_sharing == "independent", config.agent_id, gru)

    def num_sets(self, g: AgentGroup) -> int:
        return g.size if self.independent else 1

    def _inputs(self, obs: Array, ids, hidden, reset, extra: tuple) -> tuple:
        """A network's positional inputs for a flat batch obs [B, ...] (see the module docstring)."""
        return (obs, ids, *extra) if self.gru_size is None else (hidden, obs, reset, ids, *extra)

    def _outputs(self, result) -> tuple[Any, Array | None]:
        """(out, hidden' [B, H] | None), where `out` is what a feed-forward network returns (a
        recurrent one: all that follows its hidden state)."""
        if self.gru_size is None:
            return result, None
        h, *out = result
        return (out[0] if len(out) == 1 else tuple(out)), h

    def init(self, keys: Array, g: AgentGroup, *extra: Array | None):
        """Group g's parameter sets from keys [num_sets, 2]: leaves [num_sets, ...]. `extra`: one
        agent's further network inputs (no batch axis; None stays None)."""
        n = 1 if self.independent else g.size  # the batch one set of parameters sees at init
        extra = tuple(None if x is None else jnp.broadcast_to(x, (n,) + x.shape) for x in extra)
        obs = jnp.zeros((n,) + g.obs_shape, jnp.float32)
        ids = None if self.independent else agent_ids(g, (1,), self.agent_id)
        rnn = self.gru_size is not None
        hidden, reset = (jnp.zeros((n, self.gru_size)), jnp.zeros(n, bool)) if rnn else (None, None)

        def one(k):
            return self.nets[g.name].init(k, *self._inputs(obs, ids, hidden, reset, extra))

        return jax.vmap(one)(keys)

    def apply(
        self,
        params,
        g: AgentGroup,
        obs: Array,
        hidden: Array | None = None,
        reset: Array | None = None,
        *extra: Array | None,
    ):
        """Group g's parameter sets (leaves [1 or A_g, ...]) on obs [B, A_g, ...] (hidden [B, A_g, H],
        reset [B, A_g], extra inputs [B, A_g, ...]) -> (out, leaves [B, A_g, ...]; hidden' [B, A_g, H] | None)."""
        out, h, _ = self._apply(params, g, obs, hidden, reset, extra, learning=False)
        return out, h

    def apply_learning(
        self,
        params,
        g: AgentGroup,
        obs: Array,
        hidden: Array | None = None,
        reset: Array | None = None,
        *extra: Array | None,
    ):
        """`apply` as a learning step sees it: batch norm (`networks.BatchNorm`) on this batch's
        statistics. -> (out, hidden' | None, the group's running statistics moved towards them,
        leaves [1 or A_g, ...]; {} for a network without batch norm, which is applied as `apply` does)."""
        return self._apply(params, g, obs, hidden, reset, extra, learning=STATS in params)

    def _apply(self, params, g: AgentGroup, obs: Array, hidden, reset, extra: tuple, learning: bool):
        net = self.nets[g.name]

        def call(p, *inputs):  # -> (out, hidden', statistics)
            if not learning:
                return (*self._outputs(net.apply(p, *inputs)), {})
            result, mutated = net.apply(p, *inputs, mutable=[STATS])
            return (*self._outputs(result), mutated[STATS])

        if not self.independent:
            p = jax.tree.map(lambda x: x[0], params)
            ids = agent_ids(g, obs.shape[:1], self.agent_id)
            merge = lambda x: None if x is None else flat(x, 2)  # noqa: E731
            inputs = self._inputs(flat(obs, 2), ids, merge(hidden), merge(reset), tuple(map(merge, extra)))
            out, h, stats = call(p, *inputs)
            per_agent = lambda x: x.reshape(obs.shape[:2] + x.shape[1:])  # noqa: E731
            set_axis = lambda x: x[None]  # noqa: E731 - the shared set's statistics regain its parameter-set axis
            return jax.tree.map(per_agent, out), None if h is None else per_agent(h), jax.tree.map(set_axis, stats)

        def one_agent(p, o, h, r, *x):  # o [B, *obs]: one agent's slice
            return call(p, *self._inputs(o, None, h, r, x))

        axis = lambda x: None if x is None else 1  # noqa: E731 - the agent axis of [B, A_g, ...]
        in_axes = (0, 1, axis(hidden), axis(reset), *map(axis, extra))
        return jax.vmap(one_agent, in_axes=in_axes, out_axes=(1, 1, 0))(params, obs, hidden, reset, *extra)


def with_stats(params: dict, stats: dict) -> dict:
    """group -> parameter sets, with the running statistics of the groups in `stats` (group ->
    `apply_learning`'s statistics) in place of theirs: the learner's parameters after a step."""
    return {k: {**v, STATS: stats[k]} if stats.get(k) else v for k, v in params.items()}


def act_by_group(groups: tuple[AgentGroup, ...], keys: Array, choose: Callable) -> tuple[dict, dict]:
    """Every group's actions on a batch of B environments, from keys [B, 2] (one per environment),
    folded with each group's index.

    choose(group, keys [B, 2]) -> (actions [B, A_g(, d)], hidden' [B, A_g, H] | None).
    Returns (group -> actions, group -> hidden' of the recurrent groups).
    """
    actions, hidden = {}, {}
    for gi, g in enumerate(groups):
        actions[g.name], h = choose(g, group_keys(keys, gi))
        if h is not None:
            hidden[g.name] = h
    return actions, hidden


def track_episodes(
    env: EnvAdapter, actors: ActorState, stats: EpisodeStats, res, hidden: dict
) -> tuple[ActorState, EpisodeStats]:
    """After one vmapped env step `res` of E environments: count the episodes that ended (their
    return, length and whether they were won) and move the actors on to the next step."""
    reward_all = jnp.concatenate([res.reward[g.name] for g in env.groups], axis=1)  # [E, N]
    ep_return, ep_length = actors.ep_return + reward_all, actors.ep_length + 1
    stats = stats.add(ep_return, ep_length, res.episode_done, jax.vmap(env.won)(res.reward, res.episode_done))
    actors = actors.replace(
        env_state=res.state,
        obs=res.obs,
        reset=res.done,
        hidden=hidden,
        ep_return=jnp.where(res.episode_done[:, None], 0.0, ep_return),
        ep_length=jnp.where(res.episode_done, 0, ep_length),
    )
    return actors, stats


def shaping_schedule(config: Config) -> Callable[[Array], Array] | None:
    """The reward-shaping factor as a function of the learner's update counter (`reward_shaping.*`):
    1 falling linearly to 0 over `horizon` env steps of one seed (constant 1 without a horizon);
    None when the run has no shaping."""
    rs = config.reward_shaping
    if not rs.info_key:
        return None
    updates = rs.horizon / config.run_steps_per_update  # the horizon in updates (a float: no int32 overflow)
    return lambda update: linear_schedule(jnp.float32(1.0), jnp.asarray(update), updates, rs.horizon > 0)


def shaped(res, factor: Array | None):
    """The env step's result with the training reward: reward + factor * bonus (each group's
    `StepResult.bonus`); `res` itself without a factor or a bonus."""
    if factor is None or res.bonus is None:
        return res
    return res._replace(reward={g: r + factor * res.bonus[g] for g, r in res.reward.items()})


@dataclasses.dataclass(frozen=True)
class VecEnv:
    """`num_envs` copies of `env` (global count); inside a sharded program each device steps its
    `local` share, as `layout` splits them."""

    env: EnvAdapter
    num_envs: int  # E, every device's environments together
    layout: Layout
    shaping: Callable[[Array], Array] | None = None  # update -> reward-shaping factor (`shaping_schedule`)

    @classmethod
    def of(cls, config: Config, env: EnvAdapter, layout: Layout) -> VecEnv:
        """`num_envs` copies of `env` under `layout`, with the run's reward shaping (`reward_shaping.*`):
        an algorithm's rollouts get it without reading those settings."""
        return cls(env, config.num_envs, layout, shaping_schedule(config))

    @property
    def local(self) -> int:
        """Environments this device steps (E_local; a micro-batch slice's share when the layout has one)."""
        return self.num_envs // (self.layout.num_env_shards * self.layout.num_env_slices)

    def keys(self, key: Array) -> Array:
        """One key per local environment [E_local, 2], split per global environment index."""
        if self.layout.num_env_slices > 1:  # a static slice of an unsharded actor's environments
            first = self.layout.env_slice * self.local
            return jax.random.split(key, self.num_envs)[first : first + self.local]
        return local_keys(key, self.num_envs, self.local, self.layout.env_axes)

    def init_actors(self, key: Array, gru_size: int | None) -> ActorState:
        """All num_envs environments reset; recurrent state zeros of width `gru_size` (None: feed-forward)."""
        E, groups = self.num_envs, self.env.groups
        obs, env_state = jax.vmap(self.env.reset)(jax.random.split(key, E))
        return ActorState(
            env_state=env_state,
            obs=obs,
            reset={g.name: jnp.ones((E, g.size), bool) for g in groups},
            hidden={} if gru_size is None else {g.name: jnp.zeros((E, g.size, gru_size)) for g in groups},
            ep_return=jnp.zeros((E, self.env.num_agents), jnp.float32),
            ep_length=jnp.zeros((E,), jnp.int32),
        )

    def restart(self, key: Array, actors: ActorState, stats: EpisodeStats) -> tuple[ActorState, EpisodeStats]:
        """Every local environment reset, its recurrent state zeroed (JaxMARL's SHAQ and TransfQMix
        scripts do this after each update); the episodes under way are counted in `stats` as ended
        (cut: their return and length so far, not won)."""
        keys = self.keys(key)  # [E_local, 2]
        obs, env_state = jax.vmap(self.env.reset)(keys)
        under_way = actors.ep_length > 0  # [E_local]
        stats = stats.add(actors.ep_return, actors.ep_length, under_way, jnp.zeros_like(under_way))
        actors = actors.replace(
            env_state=env_state,
            obs=obs,
            reset=jax.tree.map(jnp.ones_like, actors.reset),
            hidden=jax.tree.map(jnp.zeros_like, actors.hidden),
            ep_return=jnp.zeros_like(actors.ep_return),
            ep_length=jnp.zeros_like(actors.ep_length),
        )
        return actors, stats

    def step(
        self,
        policy: StepPolicy,
        record: StepRecord,
        carry: tuple[ActorState, EpisodeStats],
        key_t: Array,
        factor: Array | None = None,
    ):
        """One env step of every local environment (the body of the rollout scan):
        ((actors, stats), key [2]) -> ((actors, stats), record(policy's record, env step result)).
        `factor`: the reward-shaping factor; the record's reward is then shaped, the episode
        statistics keep the env's own."""
        actors, stats = carry
        k_act, k_env = jax.random.split(key_t)
        act_keys, env_keys = self.keys(k_act), self.keys(k_env)
        # named scopes only label the HLO (experiments/profile_chunk.py attributes time by them)
        with jax.named_scope("env_step"):
            masks = jax.vmap(self.env.action_mask)(actors.env_state)
        with jax.named_scope("policy"):
            actions, hidden, before = policy(actors, masks, act_keys)
        with jax.named_scope("env_step"):
            res = jax.vmap(self.env.step)(env_keys, actors.env_state, actions)
        with jax.named_scope("episodes"):
            entry = record(before, shaped(res, factor))
            actors, stats = track_episodes(self.env, actors, stats, res, hidden)
        return (actors, stats), entry

    def rollout(
        self,
        policy: StepPolicy,
        record: StepRecord,
        actors: ActorState,
        key: Array,
        num_steps: int,
        update: Array | None = None,
    ):
        """`num_steps` steps in one scan -> (actors, EpisodeStats of the episodes that ended,
        the records stacked time-major: leaves [T, E_local, ...]). `update`: the learner's update
        counter, which sets the reward-shaping factor (runs with `shaping`)."""
        zero = EpisodeStats.zero(self.env.num_agents)
        factor = None if self.shaping is None or update is None else self.shaping(update)
        step = partial(self.step, policy, record, factor=factor)
        (actors, stats), traj = jax.lax.scan(step, (actors, zero), jax.random.split(key, num_steps))
        return actors, stats, traj
