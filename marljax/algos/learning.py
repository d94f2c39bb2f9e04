"""Learning, as every algorithm does it: the learner's first state, one gradient step's descent
and epochs of per-environment minibatches.

The algorithm supplies its loss and its data; the update loop itself is derived (`api.derive`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from marljax.algos.acting import local_keys, with_stats
from marljax.algos.api import CostPiece, EpochSchedule, hparams_from_config
from marljax.config import Config
from marljax.nn import ops
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, divisors
from marljax.types import HParams, LearnerState

Array = jax.Array


def adam(config: Config) -> optax.GradientTransformation:
    """Every learner's optimiser: Adam's moments (epsilon `adam_eps`), then AdamW's decoupled
    weight decay where `weight_decay` > 0 (optax.adamw's order: decay added after Adam's scaling,
    both times the learning rate). At 0 no op is added, so runs without it compute what they did.
    The learning rate and clipping come in `ops.descend`."""
    scaled = optax.scale_by_adam(eps=config.adam_eps)
    return scaled if config.weight_decay == 0 else optax.chain(scaled, optax.add_decayed_weights(config.weight_decay))


class InitKeys(NamedTuple):
    """The three keys `init(key)` splits a seed's key into."""

    net: Array  # [2] the parameters
    env: Array  # [2] the environments (and what is shaped like them)
    run: Array  # [2] the learner's key, split again by every update


def init_keys(key: Array) -> InitKeys:
    return InitKeys(*jax.random.split(key, 3))


def init_learner(
    config: Config, key: Array, init_params: Callable[[Array], dict], hparams: type[HParams] = HParams
) -> LearnerState:
    """Parameters from `init_params(InitKeys.net)`, `adam`'s zero moments, the traced
    hyperparameters (of the algorithm's `hparams` class), the run key and no update done. No
    environment is touched."""
    keys = init_keys(key)
    params = init_params(keys.net)
    return LearnerState(params, adam(config).init(params), hparams_from_config(config, hparams), keys.run, jnp.int32(0))


def learning_rate(config: Config, learner: LearnerState) -> Array:
    """This update's learning rate []: `schedule(config)` of the traced base rate."""
    return schedule(config)(learner.hparams.lr, learner.update)


def schedule(config: Config) -> Callable[[Array, Array], Array]:
    """(base rate [], update []) -> that update's rate []: a linear warm-up over `lr_warmup` of the run,
    then, when `anneal_lr`, linear or cosine decay over the rest, clamped at 0 so that updates past the
    budget (a benchmark, a resumed run) never flip its sign, or exponential by `lr_exp_decay_rate` per
    update. Stepped once per update (JaxMARL's schedules step once per gradient step)."""
    horizon, at = ops.schedule_position(config.lr_schedule_resumes, config.num_updates)  # a resumed run's budgets
    updates = max(horizon, 1)
    warmup = int(config.lr_warmup * updates)  # JaxMARL's int(LR_WARMUP * NUM_UPDATES)
    return lambda lr, update: ops.lr_schedule(
        lr, at(update), updates, config.anneal_lr, warmup, config.lr_decay, config.lr_exp_decay_rate
    )


def descend(
    tx: optax.GradientTransformation,
    layout: Layout,
    split: frozenset[str],
    params,
    opt_state,
    grads,
    lr: Array,
    hp: HParams,
):
    """One descent step: gradients reduced over the mesh (`split`: the groups whose sets are split
    over `agent`), clipped to `max_grad_norm`, `tx` (`adam(config)`). -> (params, opt_state, grad_norm [])."""
    with jax.named_scope("optimizer"):  # a label for profiles (experiments/profile_chunk.py)
        grads, grad_norm = layout.reduce_grads(grads, split)
        params, opt_state = ops.descend(params, opt_state, grads, grad_norm, tx, lr, hp.max_grad_norm)
    return params, opt_state, grad_norm


def keep_stats(layout: Layout, split: frozenset[str], params: dict, stats: dict) -> dict:
    """`params` (after a descent step) with the batch-norm statistics the step's loss moved (group
    -> statistics, `GroupNetworks.apply_learning`), averaged over the devices that share each group's
    sets, as their gradients are (`Layout.reduce_grads`). No statistics: `params` unchanged."""
    if not any(stats.values()):
        return params
    stats = ops.pmean_tree(stats, layout.data_axis)
    if layout.agent_parallel:
        shared = {k: v for k, v in stats.items() if k not in split}
        stats = {**stats, **ops.pmean_tree(shared, layout.agent_axis)}
    return with_stats(params, stats)


@dataclasses.dataclass(frozen=True)
class Minibatches:
    """Epochs of minibatches. By time (the default): each takes L = T/M time steps of *every*
    environment, shuffled per environment with keys per global environment index. By envs: each
    takes all T steps of E/M environments, every block of M consecutive global environments dealt
    one to each minibatch in an order keyed by the block's global index. Either way a minibatch
    never crosses a device boundary, and the numbers do not depend on `mesh.data`."""

    num_steps: int  # T
    num_minibatches: int  # M
    epochs: int  # passes over each rollout
    num_envs: int  # E, global
    local_envs: int  # E_learn: this device's environments while learning
    data_axis: str | tuple[str, ...] | None  # the axes that split them (data; data x agent for a replicated group)
    by_envs: bool = False  # minibatch_split=envs

    def __post_init__(self) -> None:
        if self.by_envs and self.local_envs % self.num_minibatches:  # (EpochSchedule.check saw the global count)
            raise ConfigError(
                "num_minibatches",
                f"minibatch_split=envs deals each device's {self.local_envs} "
                f"environments into {self.num_minibatches} minibatches: it must divide them; allowed: "
                f"{divisors(self.local_envs)}",
            )

    @classmethod
    def of(cls, config: Config, schedule: EpochSchedule, layout: Layout) -> Minibatches:
        E = config.num_envs
        return cls(
            config.num_steps,
            schedule.num_minibatches,
            schedule.update_epochs,
            E,
            E // layout.num_data,
            layout.data_axis,
            schedule.minibatch_split == "envs",
        )

    @property
    def steps(self) -> int:
        """L: time steps of each environment in one minibatch (T by envs)."""
        return self.num_steps if self.by_envs else self.num_steps // self.num_minibatches

    def rows(self, envs: int) -> int:
        """Samples (env steps) in one minibatch of a rollout over `envs` environments."""
        return self.steps * envs // (self.num_minibatches if self.by_envs else 1)

    def shuffle(self, data: Any, key: Array, runs: bool = False) -> Any:
        """Leaves [T, E_learn, ...] -> [M, L, E_learn, ...]: minibatch m holds L steps of every env
        (by envs: [M, T, E_learn/M, ...], every step of its environments, in their time order).

        Each environment's time steps in its own random order; `runs`: each environment's M runs
        of L consecutive steps in its own random order (recurrent networks replay a run)."""
        M, L, T = self.num_minibatches, self.steps, self.num_steps
        if self.by_envs:
            blocks = self.local_envs // M
            keys = local_keys(key, self.num_envs // M, blocks, self.data_axis)
            deal = jax.vmap(lambda k: jax.random.permutation(k, M))(keys)  # [blocks, M]: block b's env for minibatch m
            block_idx = jnp.arange(blocks)[:, None]

            def dealt(x):
                y = x.reshape((T, blocks, M) + x.shape[2:])[:, block_idx, deal]  # [T, blocks, M, ...]
                return jnp.moveaxis(y, 2, 0)  # [M, T, blocks, ...]

            return jax.tree.map(dealt, data)
        keys = local_keys(key, self.num_envs, self.local_envs, self.data_axis)
        env_idx = jnp.arange(self.local_envs)
        if runs:
            perm = jax.vmap(lambda k: jax.random.permutation(k, M))(keys)  # [E_learn, M]
            idx = (perm.T[:, None, :], jnp.arange(L)[None, :, None], env_idx[None, None, :])
            return jax.tree.map(lambda x: x.reshape((M, L) + x.shape[1:])[idx], data)
        perm = jax.vmap(lambda k: jax.random.permutation(k, T))(keys)  # [E_learn, T]
        return jax.tree.map(lambda x: x[perm.T, env_idx[None, :]].reshape((M, L) + x.shape[1:]), data)

    def run(self, step: Callable, carry: Any, key: Array, shuffle: Callable[[Any, Array], Any], data: Any):
        """`epochs` passes over `data` (leaves [T, E, ...]) as ONE scan of `step(carry, minibatch)
        -> (carry, aux)` over the epochs x M minibatches, where epoch e's M minibatches are
        `shuffle(data, key_e)` (leaves [M, ...]). -> (carry, aux leaves [epochs, M, ...]).

        The shuffle only moves the leading [T, E] positions around, so it runs up front on their
        indices (int32 [T, E] per leaf, every epoch at once), and each trip gathers its minibatch from
        `data`: the same values as shuffling `data` itself, without an epoch loop around the
        minibatch loop (on a GPU each loop level costs host round trips)."""
        keys = jax.random.split(key, self.epochs)
        positions = jax.tree.map(lambda x: jnp.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2]), data)
        with jax.named_scope("shuffle"):
            plan = jax.vmap(lambda k: shuffle(positions, k))(keys)  # leaves [epochs, M, ...] of positions
        flat_plan = jax.tree.map(lambda p: p.reshape((-1,) + p.shape[2:]), plan)  # [epochs * M, ...]
        rows = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), data)  # leaves [T * E, ...]

        def trip(carry, where):
            minibatch = jax.tree.map(lambda r, w: r[w], rows, where)
            return step(carry, minibatch)

        carry, aux = jax.lax.scan(trip, carry, flat_plan)
        return carry, jax.tree.map(lambda a: a.reshape((self.epochs, -1) + a.shape[1:]), aux)


def epoch_cost_pieces(
    config: Config,
    batches: Minibatches,
    rollout_step: Callable,
    minibatch_step: Callable,
    state: Any,
    extra: tuple = (),
) -> list[CostPiece]:
    """The cost pieces of an algorithm that learns in epochs of minibatches (`api.CostPiece`): (a)
    `rollout_step(params, actors, key) -> (carry, group -> GroupBatch [E, A_g, ...])` x num_steps;
    (b) `minibatch_step(params, opt_state, minibatch, hp, lr)` x epochs * minibatches, on a minibatch
    group -> (GroupBatch, advantages, targets, *extra) shaped as one time step of L * E environments
    (the same rows and FLOPs; a recurrent network's scan has one trip, so its body counts for every
    row). `state`: one seed's TrainState, arrays or shapes."""
    params, opt_state, actors = state.learner.params, state.learner.opt_state, state.actors
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    _, step_batch = jax.eval_shape(rollout_step, params, actors, key)  # group -> GroupBatch [E, A_g, ...]
    rows = lambda x: jax.ShapeDtypeStruct((1, batches.rows(x.shape[0])) + x.shape[1:], x.dtype)  # noqa: E731
    minibatch = {g: (jax.tree.map(rows, b), rows(b.value), rows(b.value), *extra) for g, b in step_batch.items()}
    hp = hparams_from_config(config, type(state.learner.hparams))

    def gradient_step(params, opt_state, minibatch, lr):
        return minibatch_step(params, opt_state, minibatch, hp, lr)

    lr = jax.ShapeDtypeStruct((), jnp.float32)
    return [
        CostPiece("rollout step", "rollout", rollout_step, (params, actors, key), config.num_steps),
        CostPiece(
            "gradient step",
            "learn",
            gradient_step,
            (params, opt_state, minibatch, lr),
            batches.epochs * batches.num_minibatches,
            transitions=batches.rows(batches.num_envs),
        ),
    ]
