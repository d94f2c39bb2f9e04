"""HAPPO (heterogeneous-agent PPO; Zhong et al. 2023, "Heterogeneous-Agent Reinforcement
Learning", JMLR): MAPPO's centralised critic, with the actors updated one after another.

Each update, after GAE on the central critic's values (as MAPPO's):

1. draw a random permutation of the *parameter sets* (`happo.fixed_order`: their fixed order);
2. for each set i_m in that order, run `ppo.update_epochs` x `ppo.num_minibatches` gradient steps
   on its agents' clipped surrogate, with the advantage A multiplied by
   M = prod over the sets updated before it of pi_new(a|o) / pi_old(a|o) (each of their agents'
   ratios on the same sample, computed after that set's update, with no gradient); the first
   set's M is 1;
3. update the critic as MAPPO does (clipped value loss, the same epochs of minibatches).

The unit of the sequential update is a parameter set, as `param_sharing` forms them:
`independent` gives one set per agent (the paper's HAPPO); `per_role` one set per role, whose
agents are updated together, each with the same M (the product over the earlier roles' agents)
and its own clipped ratio, as MAPPO treats them. `shared` is refused in config validation: a
homogeneous team then has one set, and HAPPO with one set is MAPPO.

Every set (and the critic) has its own Adam state and its own gradient-norm clip, as each
agent's actor has its own optimiser in the paper; `learner.opt_state` is therefore
{group: Adam state vmapped over the group's sets, CRITIC_KEY: the critic's}.

Rollout, acting, evaluation and the central critic are MAPPO's pieces (`ippo.build` with
`mappo.central_critic`); this module replaces `learn` (and its cost pieces). Minibatches take
L = T/M time steps of every environment (`learning.Minibatches`), so a run's numbers do not depend
on `mesh.data`; the order is drawn from the learner's key, the same on every data shard.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

from marljax.algos import ippo, mappo
from marljax.algos.acting import GroupNetworks, flat
from marljax.algos.api import Algorithm, AlgorithmSpec, CostPiece, hparams_from_config
from marljax.algos.ippo import PPOConfig, PPOHParams
from marljax.algos.learning import Minibatches, adam, learning_rate
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn import ops
from marljax.nn.backend import choices
from marljax.parallel.layouts import Layout
from marljax.schema import setting
from marljax.types import GroupBatch, LearnerState, TrainState, Trajectory, UpdateMetrics

Array = jax.Array
CRITIC_KEY = ippo.CRITIC_KEY


@dataclasses.dataclass(frozen=True)
class HAPPOConfig:
    """`happo.*`: the order of the sequential actor updates (PPO's own settings are `ppo.*`)."""

    fixed_order: bool = setting(
        False,
        "update the parameter sets in their fixed order (groups as the env lists "
        "them, then agents) every update instead of a fresh random permutation",
    )


def block_ids(groups: tuple[AgentGroup, ...], independent: bool) -> tuple[dict[str, np.ndarray], int]:
    """The sequential update's units: group -> block id of each parameter set [S_g], and their number K.

    independent: one block per agent, numbered over the groups in order; else one per group."""
    out, k = {}, 0
    for gi, g in enumerate(groups):
        if independent:
            out[g.name] = np.arange(k, k + g.size)
            k += g.size
        else:
            out[g.name] = np.array([gi])
    return out, (k if independent else len(groups))


def init_opt_state(params: dict, tx: optax.GradientTransformation) -> dict:
    """One `tx` (Adam) state per parameter set: a group's vmapped over its sets (count [S_g]), the critic's whole."""
    return {name: tx.init(p) if name == CRITIC_KEY else jax.vmap(tx.init)(p) for name, p in params.items()}


def masked_mean(x: Array, w: Array) -> Array:
    """Mean of x over the entries where w is 1 (0 where there are none); x, w [B]."""
    return jnp.sum(w * x) / jnp.maximum(jnp.sum(w), 1.0)


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """HAPPO's pure pieces: MAPPO's acting and critic, and the sequential `learn`."""
    if correction != "none":
        raise ValueError("happo learns on-policy only (no mode=async); correction must be 'none'")
    if layout.agent_parallel:
        raise ValueError("happo has no agent-parallel learner (mesh.agent=1)")
    critic = mappo.central_critic(config, env)
    base = ippo.build(config, env, layout=layout, critic=critic)
    groups = env.groups
    nets = GroupNetworks.of(config, {g.name: ippo.make_network(config, g, critic=False) for g in groups})
    rnn = config.recurrent
    batches = Minibatches.of(config, config.section(PPOConfig), layout)
    T, L, M = config.num_steps, batches.steps, batches.num_minibatches
    blocks, K = block_ids(groups, nets.independent)
    all_ids = jnp.eye(env.num_agents, dtype=jnp.float32)
    axes = layout.env_axes  # the environments' mesh axes (data), for normalisation and means
    tx = adam(config)

    # ------------------------------------------------------------------ evaluation on a stretch
    def log_probs(actor_params: dict, g: AgentGroup, b: GroupBatch[Array]) -> tuple[Array, Array]:
        """Group g's log-prob of the taken actions and entropy on a stretch b (leaves [L, E, A_g, ...]),
        both [L*E*A_g]; a recurrent policy restarts from b.hidden[0]."""
        if rnn:

            def rnn_step(h, x):
                obs, reset, mask = x
                (dist, _), h = nets.apply(actor_params[g.name], g, obs, h, reset, mask)
                return h, dist

            assert b.hidden is not None  # recurrent batches carry the GRU state
            _, dist = jax.lax.scan(rnn_step, b.hidden[0], (b.obs, b.reset, b.mask))  # leaves [L, E, A_g, ...]
            dist = jax.tree.map(lambda v: flat(v, 3), dist)
        else:
            mask = None if b.mask is None else flat(b.mask, 2)  # [L*E, A_g, n]
            (dist, _), _ = nets.apply(actor_params[g.name], g, flat(b.obs, 2), None, None, mask)  # on [L*E, A_g, ...]
            dist = jax.tree.map(lambda v: flat(v, 2), dist)
        return dist.log_prob(flat(b.action, 3)), dist.entropy()

    def values(critic_params, g: AgentGroup, world: Array) -> Array:
        """The central critic's values of group g's agents on world [L, E, W] -> [L*E*A_g]."""
        ids = all_ids[jnp.array(g.indices)]  # [A_g, N]
        return critic.value(critic_params, flat(world, 2), ids).reshape(-1)

    def active_weights(g: AgentGroup, block: Array, shape: tuple[int, ...]) -> Array:
        """1.0 on the samples [L, E, A_g] of group g's agents in `block`, else 0; flattened [L*E*A_g]."""
        sets = jnp.asarray(blocks[g.name]) == block  # [S_g]
        per_agent = jnp.broadcast_to(sets, (g.size,)).astype(jnp.float32)  # [A_g] (one set: all agents)
        return jnp.broadcast_to(per_agent, shape).reshape(-1)

    # ------------------------------------------------------------------ the losses
    def actor_loss(actor_params: dict, mb: dict, block: Array, hp: PPOHParams):
        """Block `block`'s clipped surrogate with advantages times M (stop-gradient), minus its entropy bonus.

        mb: group -> (GroupBatch, adv, target) with leaves [L, E, A_g, ...], "factor" -> M [L, E]."""
        factor = jax.lax.stop_gradient(mb["factor"])  # [L, E]
        total: Array | float = 0.0
        parts = []
        for g in groups:
            b, adv, _ = mb[g.name]
            logp, entropy = log_probs(actor_params, g, b)  # [L*E*A_g]
            w = active_weights(g, block, adv.shape)  # [L*E*A_g]
            m = jnp.broadcast_to(factor[..., None], adv.shape).reshape(-1)  # M of each agent's sample
            log_ratio = logp - flat(b.logp, 3)
            ratio = jnp.exp(log_ratio)
            a = ops.normalize(flat(adv, 3), axes) * m
            eps = hp.clip_eps
            surrogate = jnp.minimum(ratio * a, jnp.clip(ratio, 1 - eps, 1 + eps) * a)
            actor, ent = -masked_mean(surrogate, w), masked_mean(entropy, w)
            total = total + actor - hp.ent_coef * ent
            kl = masked_mean((ratio - 1) - log_ratio, w)
            clipped = masked_mean((jnp.abs(ratio - 1) > eps).astype(jnp.float32), w)
            parts.append(jnp.stack([actor, ent, kl, clipped]) * (jnp.sum(w) > 0))
        return total, sum(parts)  # exactly one group holds the block: the sum is its figures

    def critic_loss(critic_params, mb: dict, hp: PPOHParams):
        """MAPPO's clipped value loss of every group, times vf_coef.

        mb: group -> (behaviour value, target) [L, E, A_g], "world" -> [L, E, W]."""
        total: Array | float = 0.0
        for g in groups:
            old, target = mb[g.name]  # [L, E, A_g] each
            value, old = values(critic_params, g, mb["world"]), flat(old, 3)
            clipped = old + jnp.clip(value - old, -hp.clip_eps, hp.clip_eps)
            target = flat(target, 3)
            total = total + 0.5 * jnp.mean(jnp.maximum(jnp.square(value - target), jnp.square(clipped - target)))
        return hp.vf_coef * total

    actor_grad = jax.value_and_grad(actor_loss, has_aux=True)
    critic_grad = jax.value_and_grad(critic_loss)

    # ------------------------------------------------------------------ descent, per parameter set
    def descend_sets(params, opt_state, grads, active: Array, lr: Array, hp: PPOHParams):
        """Adam on each set (leaves [S, ...]) with its own norm clip; only the sets where active [S] move."""

        def one(p, o, gr):
            norm = ops.global_norm(gr)
            p, o = ops.descend(p, o, gr, norm, tx, lr, hp.max_grad_norm)
            return p, o, norm

        new_p, new_o, norms = jax.vmap(one)(params, opt_state, grads)
        keep = lambda new, old: jnp.where(active.reshape(active.shape + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        return jax.tree.map(keep, new_p, params), jax.tree.map(keep, new_o, opt_state), norms

    def actor_step(block: Array, hp: PPOHParams, lr: Array):
        """One gradient step of block `block` on a minibatch; carry (params, opt_state)."""

        def step(carry, mb):
            params, opt_state = carry
            actors = {g.name: params[g.name] for g in groups}
            with jax.named_scope("forward_backward"):
                (_, parts), grads = actor_grad(actors, mb, block, hp)
            grads = ops.pmean_tree(grads, layout.data_axis)
            params, opt_state = dict(params), dict(opt_state)
            norm = jnp.float32(0.0)
            for g in groups:
                active = jnp.asarray(blocks[g.name]) == block  # [S_g]
                params[g.name], opt_state[g.name], norms = descend_sets(
                    params[g.name], opt_state[g.name], grads[g.name], active, lr, hp
                )
                norm = norm + jnp.sum(jnp.where(active, norms, 0.0)) / jnp.maximum(jnp.sum(active), 1)
            return (params, opt_state), (parts, norm)

        return step

    def critic_step(hp: PPOHParams, lr: Array):
        def step(carry, mb):
            params, opt_state = carry
            with jax.named_scope("forward_backward"):
                loss, grads = critic_grad(params[CRITIC_KEY], mb, hp)
            grads = ops.pmean_tree(grads, layout.data_axis)
            norm = ops.global_norm(grads)
            p, o = ops.descend(params[CRITIC_KEY], opt_state[CRITIC_KEY], grads, norm, tx, lr, hp.max_grad_norm)
            return ({**params, CRITIC_KEY: p}, {**opt_state, CRITIC_KEY: o}), (loss / hp.vf_coef, norm)

        return step

    # ------------------------------------------------------------------ the factor M
    def block_log_ratio(actor_params: dict, data: dict, block: Array) -> Array:
        """sum over block `block`'s agents of log pi_now - log pi_old on every sample -> [T, E].

        Evaluated in the minibatches' runs of L steps (a GRU restarts from each run's stored state;
        minibatch_split=envs: one run of T)."""

        def run(d):  # leaves [L, E, ...]
            out = 0.0
            for g in groups:
                b, adv, _ = d[g.name]
                logp, _ = log_probs(actor_params, g, b)
                w = active_weights(g, block, adv.shape)
                out = out + (w * (logp - flat(b.logp, 3))).reshape(adv.shape).sum(-1)  # [L, E]
            return out

        runs = jax.tree.map(lambda x: x.reshape((T // L, L) + x.shape[1:]), {g.name: data[g.name] for g in groups})
        return jax.lax.map(run, runs).reshape((T,) + data["factor"].shape[1:])

    # ------------------------------------------------------------------ learn
    def learn(
        learner: LearnerState, extra: None, traj: Trajectory, key: Array
    ) -> tuple[LearnerState, None, UpdateMetrics]:
        """GAE on the central critic's values; each set's epochs of minibatches in a random order,
        its advantages times M; then the critic's."""
        hp = cast(PPOHParams, learner.hparams)
        k_order, k_actor, k_critic = jax.random.split(key, 3)
        world = traj.batch[groups[0].name].world  # [T, E, W]
        data: dict[str, Any] = {}  # group -> (GroupBatch, adv, target), leaves [T, E, A_g, ...]
        for g in groups:
            b = traj.batch[g.name]._replace(world=None)
            with jax.named_scope("gae"):
                adv, target = ops.gae(
                    b.reward, b.value, b.done, traj.last_value[g.name], hp.gamma, hp.gae_lambda, choices().gae
                )
            data[g.name] = (b, adv, target)
        critic_data = {**{g.name: (data[g.name][0].value, data[g.name][2]) for g in groups}, "world": world}
        data["factor"] = jnp.ones(world.shape[:2], jnp.float32)  # M [T, E]: 1 before the first set
        order = jnp.arange(K) if config.section(HAPPOConfig).fixed_order else jax.random.permutation(k_order, K)  # [K]
        lr = learning_rate(config, learner)
        shuffle = lambda d, k: batches.shuffle(d, k, runs=rnn)  # noqa: E731

        def update_block(carry, xs):
            """Block `block`'s epochs of minibatches, then M times its agents' new ratios."""
            params, opt_state, factor = carry
            position, block = xs
            d = {**data, "factor": factor}
            k = jax.random.fold_in(k_actor, position)
            (params, opt_state), (parts, norm) = batches.run(
                actor_step(block, hp, lr), (params, opt_state), k, shuffle, d
            )
            with jax.named_scope("factor"):
                log_ratio = block_log_ratio({g.name: params[g.name] for g in groups}, d, block)
            factor = factor * jax.lax.stop_gradient(jnp.exp(log_ratio))
            return (params, opt_state, factor), (parts, norm)

        (params, opt_state, factor), (parts, actor_norm) = jax.lax.scan(
            update_block, (learner.params, learner.opt_state, data["factor"]), (jnp.arange(K), order)
        )
        (params, opt_state), (value_loss, critic_norm) = batches.run(
            critic_step(hp, lr), (params, opt_state), k_critic, shuffle, critic_data
        )
        mean = lambda x: jnp.mean(x) / layout.num_env_shards  # noqa: E731  (summed over the shards below)
        actor, ent, kl, clipped = (mean(parts[..., i]) for i in range(4))
        figures = dict(
            loss_actor=actor,
            entropy=ent,
            approx_kl=kl,
            clip_frac=clipped,
            loss_value=mean(value_loss),
            factor_dev=mean(jnp.abs(factor - 1.0)),
        )
        figures, stats = ops.psum_tree((figures, traj.stats), axes)
        metrics = UpdateMetrics(
            {
                "loss_total": figures["loss_actor"]
                + hp.vf_coef * figures["loss_value"]
                - hp.ent_coef * figures["entropy"],
                **figures,
                "grad_norm": jnp.mean(actor_norm),
                "critic_grad_norm": jnp.mean(critic_norm),
                "lr": lr,
            },
            stats,
        )
        return learner.replace(params=params, opt_state=opt_state, update=learner.update + 1), extra, metrics

    def init_learner(key: Array) -> LearnerState:
        """MAPPO's parameters (the same for the same key), one Adam state per set and the critic's."""
        learner = base.init_learner(key)
        return learner.replace(opt_state=init_opt_state(learner.params, tx))

    # ------------------------------------------------------------------ FLOPs
    def cost_pieces(state: TrainState) -> list[CostPiece]:
        """(a) the rollout step (MAPPO's) x num_steps; (b) one actor gradient step x K sets x
        epochs x minibatches; (c) one critic gradient step x epochs x minibatches. A minibatch is
        shaped as one time step of L * E environments (as IPPO's). Not counted: GAE, the shuffles
        and the factor's forward passes. Run it on an unsharded trainer."""
        params, opt_state, actors = state.learner.params, state.learner.opt_state, state.actors
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)
        _, traj = jax.eval_shape(base.collect, params, actors, key)  # leaves [T, E, ...]
        rows = lambda x: jax.ShapeDtypeStruct((1, batches.rows(x.shape[1])) + x.shape[2:], x.dtype)  # noqa: E731
        b0 = traj.batch[groups[0].name]
        batch = {g.name: traj.batch[g.name] for g in groups}
        mb = {
            **{name: jax.tree.map(rows, (b._replace(world=None), b.value, b.value)) for name, b in batch.items()},
            "factor": jax.ShapeDtypeStruct((1, batches.rows(b0.value.shape[1])), jnp.float32),
        }
        critic_mb = {**{name: (rows(b.value), rows(b.value)) for name, b in batch.items()}, "world": rows(b0.world)}
        hp = hparams_from_config(config, PPOHParams)
        lr = jax.ShapeDtypeStruct((), jnp.float32)
        trips = batches.epochs * M

        def actor_gradient_step(params, opt_state, mb, lr):
            return actor_step(jnp.int32(0), hp, lr)((params, opt_state), mb)

        def critic_gradient_step(params, opt_state, mb, lr):
            return critic_step(hp, lr)((params, opt_state), mb)

        return [
            base.cost_pieces(state)[0],
            CostPiece(
                "actor gradient step",
                "learn",
                actor_gradient_step,
                (params, opt_state, mb, lr),
                K * trips,
                transitions=batches.rows(batches.num_envs),
            ),
            CostPiece(
                "critic gradient step",
                "learn",
                critic_gradient_step,
                (params, opt_state, critic_mb, lr),
                trips,
                transitions=batches.rows(batches.num_envs),
            ),
        ]

    return dataclasses.replace(base, init_learner=init_learner, learn=learn, cost_pieces=cost_pieces, policy_step=None)


# the metrics the NaN guard watches (IPPO's; `factor_dev`, mean |M - 1| after the last set, and
# `critic_grad_norm` are reported only)
LOSSES = ippo.LOSSES

SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "happo",
        "HAPPO: MAPPO's central critic, actors updated one after another on advantages times earlier ratios",
        {"ppo": ippo.PPOConfig, "critic": mappo.CriticConfig, "happo": HAPPOConfig},
        defaults={"param_sharing": "independent"},
        supports=Supports(actions=("discrete", "continuous"), param_sharing=("per_role", "independent")),
        family_defaults={"mpe": mappo.MPE_CRITIC},  # as MAPPO's (marljax/algos/mappo.py)
    ),
    build,
    LOSSES,
)
