"""IQL, VDN and QMIX: off-policy Q-learning with a replay buffer and a target network.

Each update: `num_steps` of epsilon-greedy acting in `num_envs` environments, whose sequences
(one per environment) go into the replay buffer on the device (`marljax.algos.replay`; with
`mesh.data` = D, each data shard keeps buffer_size/D slots of its own environments' sequences
and samples batch_size/D of them, and the gradient is averaged over shards); then, once
`learning_starts` env steps have been taken, `update_epochs` gradient steps, each on
`batch_size` sequences sampled from the buffer. Targets are Peng's Q(lambda) returns along a
sequence (td_lambda=0: one-step), bootstrapped with double-Q values: the online network picks
the next action among the available ones, the target network values it. The target network is
copied every `target_update_interval` updates, or Polyak-averaged with `tau` when that is 0.
With `replay.reset_each_update` every environment is reset after each rollout (JaxMARL's SHAQ and
TransfQMix scripts): a rollout shorter than the env's time limit then never ends an episode, and its
last step bootstraps from the observation that follows it.

* `iql`: every agent learns its own values from its own reward.
* `vdn`: Q_tot = sum_i Q_i against the summed team reward.
* `qmix`: Q_tot = QMixer(Q_1..Q_N | world state) (monotonic, see `marljax.algos.mixers`).

Other value-decomposition methods build on these pieces by handing `build` their own `TeamValue`
(how the team's value is made of the agents' values, and its parameters): SHAQ (`algos/shaq.py`).

With `recurrent=true` each stored sequence also holds the GRU's hidden state at its first
step (as acting computed it) and the per-step reset flags; learning replays the sequence
from that stored state, for the online and the target network alike (R2D2's "stored state",
without burn-in). A stored state is as old as its sequence, which is what the replay holds.

The replay buffer and the target network are what these algorithms keep beside the learner
(`QExtra`, `TrainState.extra`), so checkpoints hold them: a resumed run continues with the same
replay contents. `build` declares how each part lies on the mesh (`extra_layout`): the framework
shards them from that declaration alone.

With `param_sharing=independent` and `mesh.agent` = K, each device learns the Q-networks (and
keeps the target networks) of A_g/K agents of every group, as PQN-VDN does
(`parallel/layouts.py`): acting gathers every network, and one all-to-all moves the rollout to
the learning layout, where a device's replay holds its own agents' fields (obs, mask, reset,
action, hidden) and, replicated over its agent column, the per-environment ones (reward, done,
world). Every device of a column samples the same slots (same key), so sampling needs no
communication. The loss then gathers every agent's chosen and next values with one all-gather
(the gradient flows through a device's own agents only) and is the single device's loss, whole
on every device: QMIX's mixer is replicated, its gradient the same everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import jax
import jax.numpy as jnp
from flax import struct

from marljax.algos import replay
from marljax.algos.acting import GroupNetworks, VecEnv
from marljax.algos.api import (
    AGENTS,
    ENVS,
    REPLICATED,
    Algorithm,
    AlgorithmSpec,
    CostPiece,
    ExtraPart,
    Placed,
    hparams_from_config,
    split_groups,
)
from marljax.algos.learning import adam, descend, init_keys, init_learner, keep_stats, learning_rate
from marljax.algos.mixers import MixerConfig, qmixer
from marljax.algos.q_acting import QConfig, QRollout, keeps_cut, make_q_acting, through_final
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import EnvAdapter
from marljax.nn import ops
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting
from marljax.types import ActorState, HParams, LearnerState, TrainState, UpdateMetrics

Array = jax.Array
MIXER = "__mixer__"  # params[MIXER]: the team value's own parameters (QMIX's mixer, SHAQ's alpha network)


class TeamValue(NamedTuple):
    """How a value-decomposition method makes the team's value Q_tot [B, T] of the agents' values
    [B, T, N] (N: every agent, group after group in the env's order). Its parameters, if any, are
    params[MIXER] (learned with the agents' networks, copied into the target network with them)."""

    world: bool  # it conditions on the world state: the replay keeps it, [T + 1, W] per sequence
    # (params, taken [B, T, N], world [B, T, W] | None, greedy [B, T, N] bool, key) -> Q_tot of the taken
    # actions [B, T]; greedy: the taken action is the agent's greedy one among the available ones
    value: Callable[..., Array]
    # (target params, next values [B, T, N] (double-Q), world [B, T, W] | None) -> the bootstrap Q_tot [B, T]
    target: Callable[..., Array]
    # (key, q [1, N], world [1, W] | None) -> its parameters; None: it has none
    init: Callable[..., Any] | None = None
    lr: float | None = None  # its parameters' base learning rate (on lr's schedule); None: lr itself
    # value and target also take the (recurrent) agents' hidden states after each step [B, T, N, H], last:
    # value's of the online network at t, target's of the target network at t + 1; init takes hs [1, N, H]
    states: bool = False
    # value returns (Q_tot, its parameters' batch-norm statistics moved towards this batch's, {} if none):
    # it learns them (TransfQMix's mixer); target normalises by the running ones
    stats: bool = False


def summed_team() -> TeamValue:
    """VDN's team value: the sum of the agents' Q-values."""
    total = lambda params, values, world, *_: jnp.sum(values, axis=-1)  # noqa: E731
    return TeamValue(False, total, total)


def mixed_team(config: Config) -> TeamValue:
    """QMIX's team value: its monotonic mixer of the agents' Q-values on the world state."""
    mixer = qmixer(config.section(MixerConfig), config.dtype)

    def mixed(params, values: Array, world: Array, *_) -> Array:
        """QMIX's mixer on [B, T, N] and the world state [B, T, W] -> [B, T]."""
        B, T, N = values.shape
        out = cast(Array, mixer.apply(params, values.reshape(B * T, N), world.reshape((B * T,) + world.shape[2:])))
        return out.reshape(B, T)

    return TeamValue(True, mixed, mixed, lambda key, q, world: mixer.init(key, q, world))


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """`replay.*`: the replay buffer of sequences and the target network (iql, vdn, qmix)."""

    buffer_size: int = setting(
        5000,
        "sequences kept (one per environment and update; the oldest are overwritten)",
        minimum=1,
        jaxmarl="BUFFER_SIZE",
    )
    batch_size: int = setting(32, "sequences per gradient step", minimum=1, jaxmarl="BUFFER_BATCH_SIZE")
    gradient_steps: int = setting(
        4, "gradient steps per update, each on a fresh sample", minimum=1, jaxmarl=("NUM_EPOCHS", "N_MINI_UPDATES")
    )
    learning_starts: int = setting(
        10_000, "env steps of one seed before the first gradient step", minimum=0, jaxmarl="LEARNING_STARTS"
    )
    target_update_interval: int = setting(
        10,
        "updates between target-network copies; 0: Polyak averaging with tau",
        minimum=0,
        jaxmarl="TARGET_UPDATE_INTERVAL",
    )
    tau: float = setting(
        0.005, "Polyak rate of the target network (target_update_interval=0)", minimum=0.0, maximum=1.0
    )
    reset_each_update: bool = setting(
        False,
        "reset every environment after each rollout (JaxMARL's SHAQ and TransfQMix scripts): a rollout shorter "
        "than an episode then never ends one, so its last step bootstraps; the training return counts the episodes "
        "the reset cut, up to the cut",
    )
    bootstrap_time_limit: bool = setting(
        False,
        "an episode cut by the env's time limit (max_steps) is not terminal: its last step's target bootstraps "
        "from the next observation (an auto-reset env's next first one), as JaxMARL's iql/vdn/qmix_rnn.py do "
        "(they bootstrap at every episode's end); with q.td_lambda > 0 the lambda-return stops there and takes "
        "the one-step target, so that it does not run on into the next episode",
    )
    skip_last_step: bool = setting(
        False,
        "learn from every stored step but each sequence's last, as JaxMARL's iql/vdn/qmix_rnn.py do (their last "
        "step only bootstraps the one before it); with replay.reset_each_update and one episode per rollout that "
        "step is the one the time limit ends, bootstrapped from the next episode's first observation "
        "(docs/benchmarks.md, VDN and QMIX at 1e7; docs/jaxmarl_configs.md: at marljax's own defaults it changed "
        "nothing measured)",
    )

    def check(self, config: Config) -> None:
        if self.buffer_size < config.num_envs:
            raise ConfigError(
                "replay.buffer_size",
                f"must hold at least one rollout: >= num_envs={config.num_envs} sequences, got {self.buffer_size}",
            )


@struct.dataclass
class QExtra:
    target: dict  # the target network's parameters (same tree as the learner's, split the same way)
    # sequences [capacity, T(+1), ...]: per group obs/mask/reset/action [capacity, T(+1), A_g, ...] and
    # hidden [capacity, A_g, H] (split over `agent` on A_g), reward [capacity, T, N], done [capacity, T],
    # world [capacity, T + 1, W] (whole on every agent device); `extra_layout` places them
    buffer: replay.ReplayState

    if TYPE_CHECKING:  # added by flax.struct.dataclass; declared for the type checker

        def replace(self, **changes: Any) -> QExtra: ...


def extra_layout(groups, world: bool, recurrent: bool, mixer: bool | None = None, cut: bool = False) -> QExtra:
    """How QExtra lies on the mesh (`api.Placed`, after the seed axis):

    * the target network like the learner: a group's sets [A_g, ...] over `agent` where they are split;
      QMIX's mixer whole;
    * the buffer's slots [capacity, ...] over `data` (each data shard keeps the sequences of its own
      environments), its per-agent fields also over `agent` on A_g ([capacity, T(+1), A_g, ...];
      the stored GRU states [capacity, A_g, H]); the per-environment fields (reward, done, world)
      whole on every agent device, so an agent column samples the same slots without communicating;
      the ring position whole (every shard writes as many sequences per update, so they agree).
    `mixer`: the parameters hold params[MIXER] (None: as `world` says, QMIX's case); `cut`: the buffer
    keeps where the time limit cut an episode (`keeps_cut`), per environment like done."""
    per_agent = {g.name: Placed((ENVS, None, AGENTS), g.name) for g in groups}
    data = {
        "obs": per_agent,
        "mask": per_agent,
        "reset": per_agent,
        "action": per_agent,
        "reward": Placed((ENVS,)),
        "done": Placed((ENVS,)),
    }
    if world:
        data["world"] = Placed((ENVS,))
    if cut:
        data["cut"] = Placed((ENVS,))
    if recurrent:
        data["hidden"] = {g.name: Placed((ENVS, AGENTS), g.name) for g in groups}
    mixer = world if mixer is None else mixer
    target = {g.name: Placed((AGENTS,), g.name) for g in groups} | ({MIXER: REPLICATED} if mixer else {})
    # the same tree as the state's, with Placed leaves
    return QExtra(target, replay.ReplayState(data, Placed((ENVS,)), REPLICATED))  # type: ignore[arg-type]


def time_limit(replay_cfg: ReplayConfig, env: EnvAdapter) -> int | None:
    """The env's time limit where `replay.bootstrap_time_limit` asks for it (None: every episode end is
    terminal); an env that declares none is refused, before anything compiles."""
    if not replay_cfg.bootstrap_time_limit:
        return None
    return env.required_time_limit("replay.bootstrap_time_limit", "to tell a cut episode from an ended one")


def build(
    config: Config,
    env: EnvAdapter,
    *,
    layout: Layout = Layout(),
    correction: str = "none",
    team: TeamValue | None = None,
    agents: GroupNetworks | None = None,
) -> Algorithm:
    """Q-learning with replay and a target network: IQL (no `team`: every agent its own value), or a
    team value's method (`summed_team` VDN, `mixed_team` QMIX, SHAQ's); `agents`: other Q-networks
    than config's (TransfQMix's transformers)."""
    replay_cfg = config.section(ReplayConfig)
    del correction
    world = team is not None and team.world  # the replay keeps the world state
    D = layout.num_data  # data shards: each keeps buffer_size/D slots of its own environments' sequences
    for name in ("buffer_size", "batch_size"):
        if getattr(replay_cfg, name) % D:
            raise ConfigError(
                f"replay.{name}",
                f"must divide over mesh.data={D} (each data shard keeps and samples its "
                f"share); got {getattr(replay_cfg, name)}",
            )
    groups = env.groups
    limit = time_limit(replay_cfg, env)
    q_cfg = config.section(QConfig)
    td_lambda = q_cfg.td_lambda
    cuts = keeps_cut(limit, q_cfg)  # the replay keeps `cut` [T] per sequence
    q = make_q_acting(config, env, layout, world=world, nets=agents, time_limit=limit)
    vec = VecEnv.of(config, env, layout)  # (restarts the environments with replay.reset_each_update)
    H = agents.gru_size if agents is not None and agents.gru_size else config.gru_hidden_size  # recurrent state width
    T, E, N = config.num_steps, config.num_envs, env.num_agents
    K = layout.num_agent  # agent devices: each learns A_g/K agents of every group
    split = split_groups(groups, layout)
    start_update = replay_cfg.learning_starts // (T * E)  # the first update that learns
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731 - batch-major [B, T, ...] <-> time-major [T, B, ...]

    def example_sequence(key: Array) -> dict:
        """One environment's stored sequence, zeros: obs/mask/reset [T + 1, ...] (the last follows
        step T); hidden [A_g, H]: the GRU's state before the first step (recurrent only)."""
        obs, state = env.reset(key)
        seq = {
            "obs": {g.name: jnp.zeros((T + 1,) + obs[g.name].shape) for g in groups},
            "mask": {g.name: jnp.zeros((T + 1, g.size, g.action_dim), bool) for g in groups},
            "reset": {g.name: jnp.zeros((T + 1, g.size), bool) for g in groups},
            "action": {g.name: jnp.zeros((T, g.size), jnp.int32) for g in groups},
            "reward": jnp.zeros((T, N)),
            "done": jnp.zeros((T,), bool),
        }
        if cuts:
            seq["cut"] = jnp.zeros((T,), bool)
        if world:
            seq["world"] = jnp.zeros((T + 1,) + env.world_state(state, obs).shape)
        if config.recurrent:
            seq["hidden"] = {g.name: jnp.zeros((g.size, H)) for g in groups}
        return seq

    def init_params(key: Array) -> dict:
        params = q.init_params(key)
        if team is not None and team.init is not None:
            state = example_sequence(key).get("world")
            hs = (jnp.zeros((1, N, H)),) if team.states else ()
            params[MIXER] = team.init(
                jax.random.fold_in(key, len(groups)), jnp.zeros((1, N)), None if state is None else state[:1], *hs
            )
        return params

    def learner_init(key: Array) -> LearnerState:
        return init_learner(config, key, init_params)

    def init_actors(key: Array) -> ActorState:
        return q.init_actors(init_keys(key).env)

    def init_extra(key: Array, learner: LearnerState) -> QExtra:
        """The target network (the learner's first parameters) and an empty buffer."""
        buffer = replay.init(replay_cfg.buffer_size, example_sequence(init_keys(key).env))
        return QExtra(learner.params, buffer)

    def chosen_and_next(params, target, seq, full: bool = False) -> tuple[Array, Array, Array, tuple, dict]:
        """Per agent, over a batch of sequences: Q(o_t, a_t) [B, T, N], the double-Q value of
        o_{t+1} [B, T, N] (online argmax among available actions, target network's value),
        whether a_t is the greedy action among the available ones [B, T, N] (float 0/1), for a
        team value on `states`, the online hidden states at t and the target's at t + 1 ([B, T, N, H]
        each; else ()), and group -> the online networks' moved batch-norm statistics ({} without).
        `full`: the GRU's scans unrolled (for XLA's cost analysis)."""
        taken, nxt, greedy, hs_now, hs_next, stats = [], [], [], [], [], {}
        states = team is not None and team.states
        for g in groups:
            obs, mask, reset = seq["obs"][g.name], seq["mask"][g.name], seq["reset"][g.name]  # [B, T+1, A, ...]
            hidden0 = seq["hidden"][g.name] if config.recurrent else None  # [B, A, H]
            online, stats[g.name] = q.unroll(params, g, swap(obs), swap(reset), hidden0, full, states, learning=True)
            tgt = q.unroll(target, g, swap(obs), swap(reset), hidden0, full, states)
            if states:  # (q, hidden states [T+1, B, A, H])
                (online, h_online), (tgt, h_tgt) = online, tgt
                hs_now.append(swap(h_online)[:, :-1])
                hs_next.append(swap(h_tgt)[:, 1:])
            online, tgt = swap(online), swap(tgt)  # [B, T+1, A, n]
            action = seq["action"][g.name]  # [B, T, A]
            taken.append(jnp.take_along_axis(online[:, :-1], action[..., None], axis=-1)[..., 0])
            nxt.append(ops.double_q_value(online[:, 1:], tgt[:, 1:], mask[:, 1:]))
            best = jnp.argmax(jnp.where(mask[:, :-1], online[:, :-1], -jnp.inf), axis=-1)  # [B, T, A]
            greedy.append((best == action).astype(jnp.float32))
        nxt_all = jax.lax.stop_gradient(jnp.concatenate(nxt, axis=-1))
        # the team value reads the agents' states, it does not train them (JaxMARL's TransfQMix stops this
        # gradient too): the agents learn from their values, not from the mixing weights their states induce
        hs = (
            jax.lax.stop_gradient((jnp.concatenate(hs_now, axis=-2), jnp.concatenate(hs_next, axis=-2)))
            if states
            else ()
        )
        return jnp.concatenate(taken, axis=-1), nxt_all, jnp.concatenate(greedy, axis=-1), hs, stats

    def every_agent(local: Array) -> Array:
        """[..., N/K] this device's agents' values, group after group -> [..., N] every agent's, in
        the env's order (mesh.agent > 1). One all-gather; the gradient flows through this
        device's own agents' values only."""
        axis = layout.agent_axis
        gathered = jax.lax.all_gather(jax.lax.stop_gradient(local), axis)  # [K, ..., N/K]
        gathered = jax.lax.dynamic_update_index_in_dim(gathered, local, jax.lax.axis_index(axis), 0)
        parts, start = [], 0
        for g in groups:
            n = g.size // K
            part = jnp.moveaxis(gathered[..., start : start + n], 0, -2)  # [..., K, A_g/K]: device k's agents
            parts.append(part.reshape(part.shape[:-2] + (g.size,)))
            start += n
        return jnp.concatenate(parts, axis=-1)

    def loss_fn(params, target, seq, hp: HParams, key: Array, full: bool = False):
        taken, nxt, greedy, hs, stats = chosen_and_next(params, target, seq, full)  # [B, T, N/K]: this device's agents
        if split:  # every agent's values, in one collective
            taken, nxt, greedy = every_agent(jnp.stack([taken, nxt, greedy]))  # [B, T, N] each
        done = seq["done"]  # [B, T]
        if team is None:  # iql: every agent its own values and reward
            reward, q_now, q_next, done = seq["reward"], taken, nxt, jnp.broadcast_to(done[..., None], taken.shape)
        else:
            world = seq.get("world")
            now, later = ((hs[0],), (hs[1],)) if hs else ((), ())  # (team values on the agents' hidden states)
            q_now = team.value(
                params.get(MIXER), taken, None if world is None else world[:, :-1], greedy > 0, key, *now
            )
            if team.stats:
                q_now, stats[MIXER] = q_now
            q_next = jax.lax.stop_gradient(
                team.target(target.get(MIXER), nxt, None if world is None else world[:, 1:], *later)
            )
            reward = jnp.sum(seq["reward"], axis=-1)  # the team's reward, summed like the values
        lam: Array | float = td_lambda
        if cuts:  # [T, B(, 1)]: no lambda at a cut, so its target is the one-step one, bootstrapped
            lam = swap(td_lambda * (1.0 - seq["cut"].astype(jnp.float32)))
            lam = lam if team is not None else lam[..., None]
        returns = swap(ops.q_lambda_returns(swap(reward), swap(done), swap(q_next), hp.gamma, lam))
        error = (q_now - jax.lax.stop_gradient(returns)) ** 2  # [B, T(, N)]
        if replay_cfg.skip_last_step:
            error = error[:, :-1]
        return 0.5 * jnp.mean(error), (jnp.mean(q_now), stats)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def gradient_step(
        params, opt_state, target, buffer: replay.ReplayState, key: Array, hp: HParams, lr: Array, full: bool = False
    ):
        """One gradient step on batch_size/D sequences sampled from `buffer`
        -> (params, opt_state, (loss, q_mean, grad_norm))."""
        seq, _ = replay.sample(buffer, key, replay_cfg.batch_size // D)
        (loss, (q_mean, stats)), grads = grad_fn(params, target, seq, hp, jax.random.fold_in(key, 1), full=full)
        # the loss is whole on every agent device, its gradient exact for the device's own agents;
        # reduce_grads divides split sets by K (it expects per-agent means), so scale them up first
        # (not the mixer's: replicated, averaged over `agent` as it is)
        grads = {k: jax.tree.map(lambda x: x * K, v) if k in split else v for k, v in grads.items()}
        new, opt_state, grad_norm = descend(adam(config), layout, split, params, opt_state, grads, lr, hp)
        if team is not None and team.lr is not None:  # its own base rate: its step scaled by lr_team / lr
            scale = team.lr / hp.lr
            new[MIXER] = jax.tree.map(lambda p, n: p + scale * (n - p), params[MIXER], new[MIXER])
        return keep_stats(layout, split, new, stats), opt_state, (loss, q_mean, grad_norm)

    def gradient_steps(learner: LearnerState, extra: QExtra, key: Array, lr: Array):
        if D > 1:  # each shard samples its own slots; the gradient is averaged over shards
            key = jax.random.fold_in(key, jax.lax.axis_index(layout.data_axis))

        def one(carry, k):
            params, opt_state, out = gradient_step(*carry, extra.target, extra.buffer, k, learner.hparams, lr)
            return (params, opt_state), out

        (params, opt_state), (loss, q_mean, grad_norm) = jax.lax.scan(
            one, (learner.params, learner.opt_state), jax.random.split(key, replay_cfg.gradient_steps)
        )
        return params, opt_state, (jnp.mean(loss), jnp.mean(q_mean), jnp.mean(grad_norm))

    def to_sequences(traj: dict, final: dict) -> dict:
        """A rollout in the acting layout (leaves [T, E_act, ...], see q_acting.rollout) -> one
        sequence per environment of the learning layout, [E/D, T(+1), ...], per-agent fields on
        this device's agents only (A_g/K): one all-to-all (identity unless mesh.agent > 1)."""
        whole = through_final(traj, final)  # obs, mask, reset (, world): [T + 1, E_act, ...]
        per_agent = {k: whole[k] for k in ("obs", "mask", "reset")} | {"action": traj["action"]}
        if config.recurrent:  # the GRU's state before the first step, [1, E_act, A_g, H]
            per_agent["hidden"] = jax.tree.map(lambda h: h[:1], traj["hidden"])
        per_env = {"reward": traj["reward"], "done": traj["done"]}  # [T, E_act, N], [T, E_act]
        if cuts:
            per_env["cut"] = traj["cut"]  # [T, E_act]
        if "world" in whole:  # QMIX's world state [T + 1, E_act, W]
            per_env["world"] = whole["world"]
        per_agent, per_env = layout.to_learning(per_agent, per_env)
        sequences = jax.tree.map(swap, {**per_agent, **per_env})  # [E/D, T(+1), ...]
        if config.recurrent:
            sequences["hidden"] = jax.tree.map(lambda h: h[:, 0], sequences["hidden"])  # [E/D, A_g/K, H]
        return sequences

    def collect(params, actors: ActorState, key: Array, update: Array | None = None) -> tuple[ActorState, QRollout]:
        """q_acting's rollout; with `replay.reset_each_update`, every environment reset after it (after
        the rollout's last observation was kept, so that the sequence bootstraps from it)."""
        if not replay_cfg.reset_each_update:
            return q.collect(params, actors, key, update)
        key, k_reset = jax.random.split(key)
        actors, batch = q.collect(params, actors, key, update)
        actors, stats = vec.restart(k_reset, actors, batch.stats)
        return actors, batch._replace(stats=stats)

    def learn(
        learner: LearnerState, extra: QExtra, batch: QRollout, k_learn: Array
    ) -> tuple[LearnerState, QExtra, UpdateMetrics]:
        """The rollout into the buffer; once `learning_starts` has passed, `gradient_steps` on
        samples of it; the target network copied or averaged."""
        stats, eps = batch.stats, q.epsilon(learner.update)
        extra = extra.replace(buffer=replay.add(extra.buffer, to_sequences(batch.traj, batch.final)))

        lr = learning_rate(config, learner)

        def learning(_):
            return gradient_steps(learner, extra, k_learn, lr)

        def wait(_):
            return learner.params, learner.opt_state, (jnp.float32(0), jnp.float32(0), jnp.float32(0))

        params, opt_state, (loss, q_mean, grad_norm) = jax.lax.cond(
            learner.update >= start_update, learning, wait, None
        )
        n_done = learner.update + 1
        if replay_cfg.target_update_interval:
            copy = n_done % replay_cfg.target_update_interval == 0
            target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, extra.target)
        else:
            target = jax.tree.map(
                lambda p, t: replay_cfg.tau * p + (1.0 - replay_cfg.tau) * t,
                params,
                extra.target,
            )
        (loss, q_mean), (replay_size, stats) = ops.psum_tree(
            ((loss / D, q_mean / D), (replay.size(extra.buffer).astype(jnp.float32), stats)), layout.data_axis
        )  # over data shards: means of the losses, sums of the slots and episodes
        if split:  # the loss and the replay are the same on every agent device; episodes were split over them
            stats = ops.psum_tree(stats, layout.agent_axis)
        metrics = UpdateMetrics(
            {
                "loss_total": loss,
                "q_mean": q_mean,
                "grad_norm": grad_norm,
                "lr": lr,
                "epsilon": eps,
                "replay_size": replay_size,
            },
            stats,
        )
        learner = learner.replace(params=params, opt_state=opt_state, update=n_done)
        return learner, extra.replace(target=target), metrics

    def cost_pieces(state: TrainState) -> list[CostPiece]:
        """(a) one rollout step (masks, every group's Q-values, epsilon-greedy choice, env.step,
        episode stats) x num_steps; (b) one gradient step (a sample of batch_size sequences,
        value-and-grad of the loss on them with the target network's values, clipping, Adam)
        x gradient_steps, with the GRU's scans over the sequences unrolled so that every step
        counts. Not counted: the Q(lambda) returns, writing to the buffer and the target
        network's update. Run it on an unsharded trainer."""
        learner, extra = state.learner, state.extra
        key, scalar = jax.ShapeDtypeStruct((2,), jnp.uint32), jax.ShapeDtypeStruct((), jnp.float32)
        hp = hparams_from_config(config)

        def one_gradient_step(params, opt_state, target, buffer, key, lr):
            return gradient_step(params, opt_state, target, buffer, key, hp, lr, full=True)

        return [
            CostPiece("rollout step", "rollout", q.rollout_step, (learner.params, scalar, state.actors, key), T),
            CostPiece(
                "gradient step",
                "learn",
                one_gradient_step,
                (learner.params, learner.opt_state, extra.target, extra.buffer, key, scalar),
                replay_cfg.gradient_steps,
                transitions=replay_cfg.batch_size * T,
            ),
        ]

    return Algorithm(
        networks=q.nets,
        init_learner=learner_init,
        init_actors=init_actors,
        collect=collect,
        learn=learn,
        act=q.act,
        cost_pieces=cost_pieces,
        init_extra=init_extra,
        extra_layout=extra_layout(groups, world, config.recurrent, team is not None and team.init is not None, cuts),
        extra_parts=(ExtraPart("replay buffer", ("replay.buffer_size",), lambda extra: extra.buffer),),
    )


# shared by the replay family (and the methods built on it: shaq, transf_qmix); each then tuned to learn
# on MPE_simple_spread_v3 in 1M steps
REPLAY_DEFAULTS = {"total_timesteps": 1_000_000, "activation": "relu", "lr": 1e-3, "num_envs": 16, "num_steps": 32}
# iql, vdn, qmix and shaq on MPE, where the time limit ends every episode and no observation counts the steps: one-step
# targets that bootstrap past the limit. On spread's fresh seeds (7919 x 3, 1M steps) the gain over no-op per agent
# rose from +3.7 to +4.8 (lambda 0.65, a cut terminal) to +8.0 to +9.6; on reference +5.3 to +6.8 (VDN), on
# speaker-listener level (docs/guide/algorithms.md, "The time limit in the replay learners' targets")
MPE_TARGETS = {"q": {"td_lambda": 0.0}, "replay": {"bootstrap_time_limit": True}}


def build_vdn(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    return build(config, env, layout=layout, correction=correction, team=summed_team())


def build_qmix(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    return build(config, env, layout=layout, correction=correction, team=mixed_team(config))


def _spec(name: str, summary: str, sections: dict | None = None, builder=build, **defaults) -> AlgorithmSpec:
    return AlgorithmSpec(
        AlgorithmSchema(
            name,
            summary,
            {"q": QConfig, "replay": ReplayConfig, **(sections or {})},
            defaults={**REPLAY_DEFAULTS, **defaults},
            supports=Supports(agent_axis=True),
            family_defaults={"mpe": MPE_TARGETS},
            jaxmarl_files=("ql",),
        ),
        builder,
        ("loss_total", "grad_norm", "lr", "q_mean"),
    )


# greedy returns per agent after 1M steps, 2 seeds (no-op: about -25.3): iql -20.8, -22.0; vdn -19.4, -21.4;
# qmix -20.1 (one seed; with gamma 0.99 and epsilon over 300k its one-seed run ended at -22.8, only 1.2 over no-op)
IQL = _spec(
    "iql", "independent Q-learning with replay and a target network", gamma=0.9, lr=2e-3, q={"eps_decay_steps": 200_000}
)
VDN = _spec(
    "vdn",
    "VDN: the team's value is the sum of the agents' Q-values (replay, target network)",
    builder=build_vdn,
    gamma=0.9,
    q={"eps_decay_steps": 200_000},
)
QMIX = _spec(
    "qmix",
    "QMIX: a monotonic mixer of the agents' Q-values on the world state (replay, target network)",
    {"mixer": MixerConfig},
    builder=build_qmix,
    gamma=0.9,
    q={"eps_decay_steps": 200_000},
)
