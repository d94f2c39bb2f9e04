"""The Q-learning family's acting: Q-networks per group, epsilon-greedy choice, the rollout.

`make_q_acting(config, env, layout)` returns the pieces (a `collect` among them) that PQN-VDN (algos/pqn_vdn.py) and
the replay-based IQL / VDN / QMIX (algos/qlearning.py) build on, from `marljax.algos.acting`.
Discrete actions only; action masks are honoured both when acting and in every max over actions.

* Parameters per group carry a leading parameter-set axis, as in IPPO (`acting.GroupNetworks`):
  1 (shared by the group's agents, told apart by a one-hot id; `param_sharing=per_role` makes
  one group per role) or A_g (`param_sharing=independent`: one network per agent).
* `recurrent=true`: a GRU Q-network whose hidden state rides in `ActorState.hidden` and
  resets where an observation starts a new episode; `unroll` replays a stored sequence from
  the hidden state recorded at its start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from marljax.algos.acting import GroupNetworks, VecEnv, act_by_group, flat, uses_cnn
from marljax.config import Config
from marljax.envs.adapter import AgentGroup, EnvAdapter, cut_by_time_limit
from marljax.nn.networks import BN_MOMENTUM, STATS, QNetwork, RecurrentQNetwork
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting
from marljax.types import ActorState, EpisodeStats

Array = jax.Array
Q_NORMS = ("layer_norm", "batch_norm", "none")


@dataclasses.dataclass(frozen=True)
class QConfig:
    """`q.*`: epsilon-greedy acting and Q(lambda) targets, for every algorithm of the Q family."""

    eps_start: float = setting(
        1.0, "exploration rate at the start", minimum=0.0, maximum=1.0, jaxmarl=("EPSILON_START", "EPS_START")
    )
    eps_finish: float = setting(
        0.05,
        "exploration rate after eps_decay_steps (and when evaluating with eval_greedy=false)",
        minimum=0.0,
        maximum=1.0,
        jaxmarl=("EPSILON_FINISH", "EPS_FINISH"),
    )
    # (JaxMARL's EPS_DECAY is a fraction of the run: jaxmarl_config.py converts it)
    eps_decay_steps: int = setting(
        1_000_000, "env steps of one seed over which epsilon falls linearly", minimum=1, jaxmarl="EPSILON_ANNEAL_TIME"
    )
    td_lambda: float = setting(
        0.65,
        "lambda of Peng's Q(lambda) targets (0: one-step targets)",
        minimum=0.0,
        maximum=1.0,
        jaxmarl=("TD_LAMBDA", "LAMBDA"),
    )
    norm: str = setting(
        "layer_norm",
        "normalisation of the Q-network's hidden layers: layer_norm | batch_norm (running "
        "statistics for acting and targets, the batch's while learning) | none",
        choices=Q_NORMS,
        jaxmarl="NORM_TYPE",
    )
    norm_input: bool = setting(
        False, "batch norm of the Q-network's observations (as q.norm=batch_norm's)", jaxmarl="NORM_INPUT"
    )
    dueling: bool = setting(False, "dueling head: Q = V(s) + A(s, a) - mean_a A(s, a)", jaxmarl="DUELING")
    reward_scale: float = setting(
        1.0, "multiply the rewards learned from (the returns reported stay the env's)", above=0.0, jaxmarl="REW_SCALE"
    )
    init_scale: float = setting(
        0.0,
        "the agents' Q-networks' initialiser: 0: their own (orthogonal sqrt(2) hidden "
        "layers, 1 heads); > 0: orthogonal of this scale on every dense layer outside a CNN "
        "torso and the GRU (transf_qmix: the entity embedding and the head)",
        minimum=0.0,
        jaxmarl="AGENT_INIT_SCALE",
    )

    def check(self, config: Config) -> None:
        if self.eps_finish > self.eps_start:
            raise ConfigError("q.eps_finish", f"must be <= q.eps_start={self.eps_start}, got {self.eps_finish}")


class QRollout(NamedTuple):
    """What the Q family's `collect` hands to `learn`: one rollout in the acting layout."""

    traj: dict  # leaves [T, E_act, ...], see `QActing.rollout`
    final: dict  # what follows the last step: obs, mask, reset (, world)
    stats: EpisodeStats  # of the episodes that ended during the rollout
    bootstrap: Array | None = None  # PQN: the team's max value of each step's next observation [T, E_act]


class QActing(NamedTuple):
    nets: Mapping[str, nn.Module]  # group -> QNetwork | RecurrentQNetwork
    # (params, group, obs [B, A_g, ...], hidden [B, A_g, H] | None, reset [B, A_g] | None)
    #   -> (q [B, A_g, n_actions], hidden' | None): one time step
    q_values: Callable
    # (params, group, obs [T, B, A_g, ...], reset [T, B, A_g], hidden0 [B, A_g, H] | None, full=False, states=False)
    #   -> q [T, B, A_g, n_actions]: whole sequences, time-major (the GRU starts from hidden0;
    #   full: its scan unrolled, so that XLA's cost analysis counts every step; states: recurrent
    #   only, (q, the hidden states after each step [T, B, A_g, H]); learning: (that, the group's
    #   moved batch-norm statistics, {} without batch norm))
    unroll: Callable
    epsilon: Callable  # update [] -> epsilon []
    act: Callable  # evaluation: (params, obs, reset, hidden, mask, key, greedy) -> (actions, hidden)
    init_params: Callable  # key -> group -> params with leaves [1 or A_g, ...]
    init_actors: Callable  # key -> ActorState of num_envs environments
    rollout: Callable  # (params, eps, actors, key) -> (actors, EpisodeStats, traj [T, E_local, ...], final)
    rollout_step: Callable  # (params, eps, actors, key) -> ((actors, stats), one step of traj): a cost piece
    collect: Callable  # api.Collect: (params, actors, key, update) -> (actors, QRollout), epsilon from update


def keeps_cut(time_limit: int | None, q_cfg: QConfig) -> bool:
    """Whether the trajectory records `cut` (the time limit ended the episode at this step) beside `done`:
    a lambda-return bootstrapping past the time limit must stop there, not run on into the next episode."""
    return bool(time_limit) and q_cfg.td_lambda > 0


def make_q_acting(
    config: Config,
    env: EnvAdapter,
    layout: Layout,
    world: bool = False,
    nets: GroupNetworks | None = None,
    time_limit: int | None = None,
) -> QActing:
    """`world`: also record the env's world state (QMIX's mixer conditions on it). `nets`: other
    Q-networks than config's (TransfQMix's transformers), with the network signature of
    `marljax.algos.acting` and `q` as their output. `time_limit`: the recorded `done` leaves out the
    episodes that reached it (replay.bootstrap_time_limit), so that their last targets bootstrap; with a
    lambda the trajectory also records them as `cut` (`keeps_cut`)."""
    q_cfg = config.section(QConfig)
    groups = env.groups  # Discrete only: make_adapter refuses Box groups from Supports.actions (train/wiring.py)
    rnn, H = config.recurrent, config.gru_hidden_size
    size = config.group_network  # group -> (hidden_size, num_layers), network.<group>.* over the global sizes
    head: dict[str, Any] = dict(
        norm=q_cfg.norm, dueling=q_cfg.dueling, init_scale=q_cfg.init_scale, norm_input=q_cfg.norm_input
    )
    nets = nets or GroupNetworks.of(
        config,
        {
            g.name: RecurrentQNetwork(
                g.action_dim, size(g.name)[0], H, config.activation, uses_cnn(config, g), config.dtype, **head
            )
            if rnn
            else QNetwork(g.action_dim, *size(g.name), config.activation, uses_cnn(config, g), config.dtype, **head)
            for g in groups
        },
    )
    if layout.agent_parallel and not nets.independent:
        raise ConfigError("mesh.agent", "splits per-agent Q-networks: it needs param_sharing=independent")
    T = config.num_steps
    vec = VecEnv.of(config, env, layout)
    decay_updates = max(q_cfg.eps_decay_steps / (T * config.num_envs), 1e-9)  # epsilon falls over this many updates

    def q_values(params, g: AgentGroup, obs: Array, hidden: Array | None = None, reset: Array | None = None):
        return nets.apply(params[g.name], g, obs, hidden, reset)

    def unroll(
        params,
        g: AgentGroup,
        obs: Array,
        reset: Array | None,
        hidden0: Array | None,
        full: bool = False,
        states: bool = False,
        learning: bool = False,
    ):
        """Time-major sequences: obs [T, B, A_g, ...], reset [T, B, A_g] -> q [T, B, A_g, n]
        (`states`: and the hidden states after each step [T, B, A_g, H]). `learning`: -> (that,
        the group's batch-norm statistics moved towards this batch's, {} without batch norm): a
        recurrent network normalises each step by its own batch and moves the statistics once,
        towards the mean of the steps' (JaxMARL's, whose norms precede the GRU, take the whole
        sequence as one batch); one whose norms all precede its state (`norms_before_state`) is
        normalised by the whole sequence's moments, as JaxMARL's (`unroll_by_sequence_moments`)."""
        by_sequence = learning and STATS in params[g.name] and getattr(nets.nets[g.name], "norms_before_state", False)
        if by_sequence and reset is not None and hidden0 is not None:
            return unroll_by_sequence_moments(params, g, obs, reset, hidden0, full, states)
        apply = nets.apply_learning if learning else lambda *a: (*nets.apply(*a), {})
        if not rnn:  # every step on its own: one flat batch
            q, _, stats = apply(params[g.name], g, flat(obs, 2))
            q = q.reshape(obs.shape[:3] + q.shape[2:])
            return (q, stats) if learning else q

        def step(h, x):
            q, h, stats = apply(params[g.name], g, x[0], h, x[1])
            return h, ((q, h) if states else q, stats)

        out, stats = jax.lax.scan(step, hidden0, (obs, reset), unroll=True if full else 1)[1]
        # each step moved the same statistics: their mean over the steps is one move towards the steps' mean
        return (out, jax.tree.map(lambda x: jnp.mean(x, axis=0), stats)) if learning else out

    def unroll_by_sequence_moments(
        params, g: AgentGroup, obs: Array, reset: Array, hidden0: Array, full: bool, states: bool
    ):
        """`unroll`'s learning pass of a recurrent network whose batch norms all precede its state
        (`norms_before_state`: TransfQMix's agents): every step normalised by the moments of the whole
        sequence [T x B] as one batch, as JaxMARL's (whose embedder sees the sequence at once) does, and
        the running statistics moved once towards them. Per-step moments would centre each step on its own
        batch: with sequences that start together (replay.reset_each_update) that removes what changes
        along an episode, which acting (on the running averages) still sees.

        Pass 1 applies the network to all T x B steps at once from zero running statistics: what it moves
        them to is (1 - momentum) x the sequence's moments (the state's input does not reach the norms).
        Pass 2 unrolls the steps with those moments in the place of the running ones (differentiable:
        the gradient flows through them as through a learning step's batch moments)."""
        p = params[g.name]
        T_, B = obs.shape[:2]
        zeroed = {**p, STATS: jax.tree.map(jnp.zeros_like, p[STATS])}
        zeros = jnp.zeros((T_ * B,) + hidden0.shape[1:], hidden0.dtype)
        moved = nets.apply_learning(zeroed, g, flat(obs, 2), zeros, flat(reset, 2))[2]
        moments = jax.tree.map(lambda m: m / (1.0 - BN_MOMENTUM), moved)
        by_moments = {**params, g.name: {**p, STATS: moments}}
        q = unroll(by_moments, g, obs, reset, hidden0, full, states)
        running = jax.tree.map(lambda r, m: BN_MOMENTUM * r + m, p[STATS], jax.lax.stop_gradient(moved))
        return q, running

    def epsilon(update: Array) -> Array:
        frac = jnp.minimum(update.astype(jnp.float32) / decay_updates, 1.0)
        return q_cfg.eps_start + frac * (q_cfg.eps_finish - q_cfg.eps_start)

    def choose(q: Array, mask: Array, key: Array, eps) -> Array:
        """epsilon-greedy among available actions, one key per environment: q [B, A, n], key [B]."""

        def one_env(q_e, m_e, k):
            k_explore, k_random = jax.random.split(k)
            greedy = jnp.argmax(jnp.where(m_e, q_e, -jnp.inf), axis=-1)  # [A]
            random = jax.random.categorical(k_random, jnp.where(m_e, 0.0, -jnp.inf))  # [A]
            return jnp.where(jax.random.uniform(k_explore, greedy.shape) < eps, random, greedy)

        return jax.vmap(one_env)(q, mask, key)

    def act_groups(params, obs: dict, reset: dict, hidden: dict, mask: dict, keys: Array, eps):
        """epsilon-greedy actions of every group on B envs with keys [B, 2] -> (actions, hidden')."""

        def choose_group(g: AgentGroup, keys_g: Array):
            q, h = q_values(params, g, obs[g.name], hidden.get(g.name), reset.get(g.name) if rnn else None)
            m = mask[g.name] if g.name in mask else jnp.ones(q.shape, bool)
            return choose(q, m, keys_g, eps), h

        return act_by_group(groups, keys, choose_group)

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        keys = jax.random.split(key, obs[groups[0].name].shape[0])
        return act_groups(params, obs, reset, hidden, mask, keys, 0.0 if greedy else q_cfg.eps_finish)

    def init_params(key: Array) -> dict:
        params = {}
        for gi, g in enumerate(groups):
            k = jax.random.fold_in(key, gi)
            keys = jax.random.split(k, g.size) if nets.independent else k[None]  # one set: the group's key itself
            params[g.name] = nets.init(keys, g)  # leaves [1 or A_g, ...]
        return params

    def init_actors(key: Array) -> ActorState:
        return vec.init_actors(key, nets.gru_size)

    def step_policy(params, eps):
        def policy(actors: ActorState, masks: dict, keys: Array):
            actions, hidden = act_groups(params, actors.obs, actors.reset, actors.hidden, masks, keys, eps)
            return actions, hidden, (actors, masks, actions)

        return policy

    def record(before, res) -> dict:
        """One step of the trajectory (see `rollout`)."""
        actors, masks, actions = before
        reward_all = jnp.concatenate([res.reward[g.name] for g in groups], axis=1)  # [E, N]
        if q_cfg.reward_scale != 1.0:  # learning's reward only; the episode stats come from the env
            reward_all = reward_all * q_cfg.reward_scale
        done = res.episode_done  # [E]
        if time_limit:  # actors.ep_length: the steps before this one
            cut = cut_by_time_limit(done, actors.ep_length + 1, time_limit)  # [E]
            done = done & ~cut
        entry = dict(obs=actors.obs, action=actions, mask=masks, reward=reward_all, done=done, reset=actors.reset)
        if keeps_cut(time_limit, q_cfg):
            entry["cut"] = cut  # where the lambda-return stops (the one-step target still bootstraps)
        if world:
            entry["world"] = jax.vmap(env.world_state)(actors.env_state, actors.obs)  # [E, W]
        if rnn:
            entry["hidden"] = actors.hidden  # the GRU's state before this step's observation
        return entry

    def rollout_step(params, eps, actors: ActorState, key: Array):
        return vec.step(step_policy(params, eps), record, (actors, EpisodeStats.zero(env.num_agents)), key)

    def rollout(params, eps, actors: ActorState, key: Array, update: Array | None = None):
        """num_steps of epsilon-greedy acting. traj leaves [T, E_local, ...] (reward [T, E, N] per
        agent, done [T, E], reset: the observation starts an episode, hidden: the GRU's state
        before the step, when recurrent); `final` holds what follows
        the last step (obs, mask, reset, world). `update` sets the reward-shaping factor."""
        actors, stats, traj = vec.rollout(step_policy(params, eps), record, actors, key, T, update)
        final: dict[str, Any] = dict(
            obs=actors.obs, mask=jax.vmap(env.action_mask)(actors.env_state), reset=actors.reset
        )
        if world:
            final["world"] = jax.vmap(env.world_state)(actors.env_state, actors.obs)
        return actors, stats, traj, final

    def collect(params, actors: ActorState, key: Array, update: Array | None = None) -> tuple[ActorState, QRollout]:
        """One rollout with epsilon at the learner's update counter `update` (None: 0)."""
        eps = epsilon(jnp.int32(0) if update is None else update)
        actors, stats, traj, final = rollout(params, eps, actors, key, update)
        return actors, QRollout(traj, final, stats)

    return QActing(nets.nets, q_values, unroll, epsilon, act, init_params, init_actors, rollout, rollout_step, collect)


def through_final(traj: dict, final: dict) -> dict:
    """Every field that `final` continues, over all T + 1 steps: traj[k] [T, ...] then final[k]."""
    return {k: jax.tree.map(lambda s, x: jnp.concatenate([s, x[None]]), traj[k], final[k]) for k in final}
