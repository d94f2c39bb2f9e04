"""PQN-VDN: replay-free, vectorised Q-learning with a VDN team value, as pure functions.

Each update: `num_steps` of epsilon-greedy acting in `num_envs` environments; Peng's
Q(lambda) targets for the team value Q_tot = sum_i Q_i(o_i, a_i) from the current network
(no target network: LayerNorm in the Q-network keeps the bootstrapped targets stable);
then `update_epochs` x `num_minibatches` gradient steps on 0.5 (Q_tot - G)^2. The team
reward is the sum of the agents' rewards, so that it matches the sum of their values.

`build` returns its pieces (`api.Algorithm`; the framework derives the `Trainer`): `collect` is
`marljax.algos.q_acting`'s rollout plus the bootstrap values of every next observation, taken
with the acting parameters; `learn` the targets and the minibatches (`marljax.algos.learning`).
It keeps nothing beside the learner. Minibatches take `num_steps/num_minibatches` time steps of every
environment (feed-forward: a per-environment shuffle keyed by global env index; recurrent:
consecutive runs replayed from the GRU state recorded at their start, as IPPO's recurrent
minibatches), so the numbers do not depend on `mesh.data`.

With `param_sharing=independent` and `mesh.agent` = K, each device learns the Q-networks of
A_g/K agents, as IPPO does (`parallel/layouts.py`): acting gathers every network, the targets
are computed in the acting layout (every agent of an environment at hand), and one all-to-all
moves the trajectories to the learning layout. There a device's agents give their part of
Q_tot; the other devices' parts come in by one `psum` over `agent`, without gradient, so each
device's gradient is exactly the team loss's gradient for its own agents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp

from marljax.algos.api import (
    Algorithm,
    AlgorithmSpec,
    CostPiece,
    EpochSchedule,
    ExtraPart,
    hparams_from_config,
    split_groups,
)
from marljax.algos.learning import Minibatches, adam, descend, init_keys, init_learner, keep_stats, learning_rate
from marljax.algos.q_acting import QConfig, QRollout, make_q_acting, through_final
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import EnvAdapter
from marljax.nn import ops
from marljax.parallel.layouts import Layout
from marljax.parallel.mesh import AGENTS, ENVS, Placed
from marljax.schema import ConfigError, setting
from marljax.types import ActorState, HParams, LearnerState, TrainState, UpdateMetrics

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class PQNConfig(EpochSchedule):
    """`pqn.*`: each rollout is learned in update_epochs x num_minibatches gradient steps."""

    memory_window: int = setting(
        0,
        "recurrent: steps of the previous rollout that lead every learning sequence (their "
        "targets, taken an update ago, learned again; the GRU replays them first); needs "
        "pqn.minibatch_split=envs",
        minimum=0,
        jaxmarl="MEMORY_WINDOW",
    )

    def check(self, config: Config) -> None:
        super().check(config)
        if self.memory_window and not config.recurrent:
            raise ConfigError(
                "pqn.memory_window",
                f"leads a recurrent network's sequences: it needs recurrent=true (or 0); got {self.memory_window}",
            )
        if self.memory_window and self.minibatch_split != "envs":
            raise ConfigError(
                "pqn.memory_window",
                "makes each learning sequence memory_window + num_steps long: it "
                "needs pqn.minibatch_split=envs (whole sequences per minibatch)",
            )


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    pqn_cfg = config.section(PQNConfig)
    del correction  # on-policy rollouts on device only
    groups = env.groups
    q = make_q_acting(config, env, layout)
    T, rnn = config.num_steps, config.recurrent
    W = pqn_cfg.memory_window  # steps of the previous rollout leading each learning sequence
    # with a memory window a learning sequence is W + T steps (minibatch_split=envs: whole sequences)
    batches = dataclasses.replace(Minibatches.of(config, pqn_cfg, layout), num_steps=T + W)
    M, L = batches.num_minibatches, batches.steps
    K = layout.num_agent
    split = split_groups(groups, layout)

    def learner_init(key: Array) -> LearnerState:
        return init_learner(config, key, q.init_params)

    def init_actors(key: Array) -> ActorState:
        return q.init_actors(init_keys(key).env)

    def group_q(params, g, batch, learning: bool = False):
        """Group g's values on time-major data [L, B, A_g, ...] -> [L, B, A_g, n] (`learning`: and
        its moved batch-norm statistics, q_acting's `unroll`)."""
        return q.unroll(
            params, g, batch["obs"][g.name], batch["reset"].get(g.name), batch["hidden"].get(g.name), learning=learning
        )

    def team_q(params, batch) -> tuple[Array, dict]:
        """Q_tot of the taken actions [L, B], as a learning step sees it; group -> moved statistics."""
        taken, stats = [], {}
        for g in groups:
            values, stats[g.name] = group_q(params, g, batch, learning=True)
            taken.append(jnp.sum(jnp.take_along_axis(values, batch["action"][g.name][..., None], -1)[..., 0], -1))
        return cast(Array, sum(taken)), stats  # groups is never empty

    def team_max(params, batch) -> Array:
        """sum_i max_a Q_i over available actions [L, B]."""
        return cast(
            Array,
            sum(jnp.sum(ops.masked_max(group_q(params, g, batch), batch["mask"][g.name]), axis=-1) for g in groups),
        )

    def loss_fn(params, batch, target, weight=None):
        """`weight` [L, E_learn]: of each step (a memory window's before it holds any: 0), else all 1."""
        q_tot, stats = team_q(params, batch)  # [L, E_learn]
        if split:  # this device's agents' part of Q_tot, plus (no gradient) the other devices' parts
            q_tot = q_tot + jax.lax.stop_gradient(jax.lax.psum(q_tot, layout.agent_axis) - q_tot)
        if weight is None:
            loss = 0.5 * jnp.mean((q_tot - target) ** 2)
        else:
            loss = 0.5 * jnp.sum(weight * (q_tot - target) ** 2) / jnp.sum(weight)
        # reduce_grads divides split sets' gradients by K (it expects per-agent means); the team
        # loss is whole on every agent device, so its gradient is scaled up by K first
        return loss * K if split else loss, (loss, jnp.mean(q_tot), stats)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_step(carry, minibatch, lr: Array, hp: HParams):
        params, opt_state = carry
        (_, (loss, q_mean, stats)), grads = grad_fn(params, *minibatch)  # (batch, target(, weight))
        params, opt_state, grad_norm = descend(adam(config), layout, split, params, opt_state, grads, lr, hp)
        return (keep_stats(layout, split, params, stats), opt_state), (loss, q_mean, grad_norm)

    def shuffle(data, key):
        """[T, E_learn, ...] -> [M, L, E_learn, ...]: L time steps of every environment per minibatch.

        Feed-forward: each environment's steps in a random order (keyed by global env index).
        Recurrent: M runs of L consecutive steps, in a random order, each replayed from the
        GRU state recorded before its first step."""
        if rnn and batches.by_envs:  # whole rollouts of E/M envs, each replayed from its first step's GRU state
            batch, *rest = batches.shuffle(data, key)
            return {**batch, "hidden": jax.tree.map(lambda h: h[:, 0], batch["hidden"])}, *rest
        if rnn:
            chunks = jax.tree.map(lambda x: x.reshape((M, L) + x.shape[1:]), data)
            batch, target = chunks
            batch = {**batch, "hidden": jax.tree.map(lambda h: h[:, 0], batch["hidden"])}  # [M, E_learn, A, H]
            order = jax.random.permutation(key, M)
            return jax.tree.map(lambda x: x[order], (batch, target))
        return batches.shuffle(data, key)

    def collect(params, actors: ActorState, key: Array, update: Array | None = None) -> tuple[ActorState, QRollout]:
        """q_acting's rollout with `params` (acting layout: every agent's network, beside every env),
        and the bootstrap of the targets: the team's max value of each step's next observation."""
        actors, batch = q.collect(params, actors, key, update)
        traj, final = batch.traj, batch.final
        # targets from the network as it is now: Q(s_{t+1}) for every step, the last from the final
        # obs; recurrent: one pass over all T + 1 steps from the rollout's first GRU state
        whole = through_final(traj, final)  # obs, mask, reset: [T + 1, E_act, ...]
        hidden0 = jax.tree.map(lambda h: h[0], traj["hidden"]) if rnn else {}
        everything = {
            "obs": whole["obs"],
            "mask": whole["mask"],
            "hidden": hidden0,
            "reset": whole["reset"] if rnn else {},
        }
        # (in the acting layout, where every agent of an environment is at hand)
        return actors, batch._replace(bootstrap=team_max(params, everything)[1:])  # [T, E_act]

    def init_extra(key: Array, learner: LearnerState) -> dict:
        """The memory window: W steps of the learning data (zeros until the first update writes them)."""
        _, rollout = jax.eval_shape(collect, learner.params, init_actors(key), key)
        fields = {k: rollout.traj[k] for k in ("obs", "action", "reset", "hidden")}  # leaves [T, E, A_g, ...]
        zeros = lambda x: jnp.zeros((W,) + x.shape[1:], x.dtype)  # noqa: E731
        target = jnp.zeros((W, config.num_envs), jnp.float32)
        return {"steps": (jax.tree.map(zeros, fields), target)}

    def memory_layout() -> dict:
        """The window's per-agent fields [W, E, A_g, ...] over data and agent, its targets [W, E] over data."""
        per_agent = {g.name: Placed((None, ENVS, AGENTS), g.name) for g in groups}
        steps = {"obs": per_agent, "action": per_agent, "reset": per_agent, "hidden": per_agent}
        return {"steps": (steps, Placed((None, ENVS)))}

    def learn(
        learner: LearnerState, extra: dict | None, batch: QRollout, k_epochs: Array
    ) -> tuple[LearnerState, Any, UpdateMetrics]:
        """Q(lambda) targets from the bootstrap values, then epochs of minibatches on 0.5 (Q_tot - G)^2
        (a memory window: on its W steps, then the rollout's T)."""
        traj, next_q, stats = batch.traj, batch.bootstrap, batch.stats
        assert next_q is not None  # collect above always sets it
        eps = q.epsilon(learner.update)
        team_reward = jnp.sum(traj["reward"], axis=-1)  # [T, E_act]: the sum matches Q_tot = sum_i Q_i
        target = ops.q_lambda_returns(
            team_reward, traj["done"], next_q, learner.hparams.gamma, config.section(QConfig).td_lambda
        )
        # environment-major -> agent-major (identity unless mesh.agent > 1): [T, E_learn, A_g/K, ...]
        fields = ("obs", "action", "reset", "hidden") if rnn else ("obs", "action")
        per_agent, target = layout.to_learning({k: traj[k] for k in fields}, jax.lax.stop_gradient(target))

        lr = learning_rate(config, learner)
        data: tuple = ({"reset": {}, "hidden": {}, **per_agent}, target)
        if W:  # the window leads; its steps count once it holds a rollout's
            assert extra is not None  # init_extra's
            data = jax.tree.map(lambda m, x: jnp.concatenate([m, x]), extra["steps"], data)  # [W + T, E_learn, ...]
            filled = (learner.update > 0).astype(jnp.float32)  # every update but the first found it written
            weight = jnp.concatenate([jnp.full((W,), filled), jnp.ones((T,))])  # [W + T]
            data = (*data, jnp.broadcast_to(weight[:, None], (W + T, target.shape[1])))  # weight [W + T, E_learn]
            extra = {"steps": jax.tree.map(lambda x: x[-W:], data[:2])}
        step = lambda c, mb: minibatch_step(c, mb, lr, learner.hparams)  # noqa: E731
        (params, opt_state), (loss, q_mean, grad_norm) = batches.run(
            step, (learner.params, learner.opt_state), k_epochs, shuffle, data
        )
        n = layout.num_env_shards
        (loss, q_mean), stats = ops.psum_tree(((jnp.mean(loss) / n, jnp.mean(q_mean) / n), stats), layout.env_axes)
        metrics = UpdateMetrics(
            {
                "loss_total": loss,
                "q_mean": q_mean,
                "grad_norm": jnp.mean(grad_norm),
                "lr": lr,
                "epsilon": eps,
            },
            stats,
        )
        return learner.replace(params=params, opt_state=opt_state, update=learner.update + 1), extra, metrics

    def cost_pieces(state: TrainState) -> list[CostPiece]:
        """(a) one rollout step (masks, every group's Q-values, epsilon-greedy choice, env.step,
        episode stats) x num_steps; (b) the targets' pass: the team's max over the T + 1 steps'
        values, x 1; (c) one gradient step on one minibatch x update_epochs * num_minibatches.
        (b) and (c) are shaped as one time step of (T + 1) * E and L * E environments, each
        with its own GRU state: the same rows and FLOPs, and a recurrent network's scan has one
        trip, so its body counts for every row. Not counted: the Q(lambda) returns and the
        shuffle. Run it on an unsharded trainer."""
        params, opt_state, actors = state.learner.params, state.learner.opt_state, state.actors
        key, scalar = jax.ShapeDtypeStruct((2,), jnp.uint32), jax.ShapeDtypeStruct((), jnp.float32)
        _, step = jax.eval_shape(q.rollout_step, params, scalar, actors, key)  # leaves [E, ...]

        def rows(n: Callable[[int], int], tree):  # [E, ...] -> [1, n(E), ...]
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct((1, n(x.shape[0])) + x.shape[1:], x.dtype), tree)

        def states(n: Callable[[int], int], tree):  # [E, A, H] -> [n(E), A, H]: a GRU state per row
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct((n(x.shape[0]),) + x.shape[1:], x.dtype), tree)

        def batch(n: Callable[[int], int], fields: tuple[str, ...]) -> dict:
            b = {k: rows(n, step[k]) for k in fields}
            b["reset"] = rows(n, step["reset"]) if rnn else {}
            b["hidden"] = states(n, step["hidden"]) if rnn else {}
            return b

        everything = batch(lambda e: (T + 1) * e, ("obs", "mask"))
        minibatch = (
            batch(batches.rows, ("obs", "action")),
            jax.ShapeDtypeStruct((1, batches.rows(step["done"].shape[0])), jnp.float32),
        )
        hp = hparams_from_config(config)

        def gradient_step(params, opt_state, minibatch, lr):
            return minibatch_step((params, opt_state), minibatch, lr, hp)

        return [
            CostPiece("rollout step", "rollout", q.rollout_step, (params, scalar, actors, key), T),
            CostPiece("target pass", "learn", team_max, (params, everything), 1),
            CostPiece(
                "gradient step",
                "learn",
                gradient_step,
                (params, opt_state, minibatch, scalar),
                batches.epochs * M,
                transitions=batches.rows(batches.num_envs),
            ),
        ]

    window = (ExtraPart("memory window", ("pqn.memory_window",), lambda extra: extra),)
    return Algorithm(
        networks=q.nets,
        init_learner=learner_init,
        init_actors=init_actors,
        collect=collect,
        learn=learn,
        act=q.act,
        cost_pieces=cost_pieces,
        init_extra=init_extra if W else None,
        extra_layout=memory_layout() if W else None,
        extra_parts=window if W else (),
    )


SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "pqn_vdn",
        "PQN-VDN: replay-free vectorised Q(lambda) learning of a VDN team value",
        {"q": QConfig, "pqn": PQNConfig},
        supports=Supports(agent_axis=True),
        # chosen to learn on MPE_simple_spread_v3 in 1M steps (2 seeds: -19.7, -21.3 per agent greedy; no-op -25.3)
        defaults={
            "total_timesteps": 1_000_000,
            "activation": "relu",
            "lr": 1e-3,
            "num_envs": 32,
            "num_steps": 32,
            "pqn": {"update_epochs": 4, "num_minibatches": 2},
            "q": {"eps_decay_steps": 250_000},
        },
    ),
    build,
    ("loss_total", "grad_norm", "lr", "q_mean"),  # the NaN guard's: the loss, the step, the values
)
