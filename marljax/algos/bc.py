"""Behaviour cloning (`bc`): each group's policy learns the dataset's actions by maximum likelihood.

Offline (marljax/algos/offline.py): one update is one gradient step on `num_envs` sequences of
`num_steps` transitions sampled from `offline.dataset`; the loss is the negative log-likelihood of
the recorded actions under the policy, among the actions the dataset marks available (Discrete;
the taken action always counts as available), or of the Gaussian policy (Box). Evaluated online in
the dataset's env by the run's evaluation (`eval_every`), greedily by default.

The policy network is IPPO's actor-critic (`ippo.make_network`, critic head included and left
untrained), so a BC run's parameters are an IPPO run's: `marljax finetune` continues them online.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marljax.algos import offline
from marljax.algos.acting import GroupNetworks, act_by_group, flat
from marljax.algos.api import Algorithm, AlgorithmSpec
from marljax.algos.ippo import make_network
from marljax.algos.learning import adam, descend
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.parallel.layouts import Layout
from marljax.types import HParams

Array = jax.Array


def policy_networks(config: Config, env: EnvAdapter) -> GroupNetworks:
    """Every group's IPPO actor-critic (the parameter tree an IPPO run has)."""
    return GroupNetworks.of(config, {g.name: make_network(config, g) for g in env.groups})


def init_policies(nets: GroupNetworks, groups: tuple[AgentGroup, ...], key: Array) -> dict:
    """group -> parameter sets [1 or A_g, ...], keyed as IPPO keys them."""
    params = {}
    for gi, g in enumerate(groups):
        mask = jnp.ones((g.action_dim,), bool) if g.discrete else None
        params[g.name] = nets.init(jax.random.split(jax.random.fold_in(key, gi), nets.num_sets(g)), g, mask)
    return params


def make_act(nets: GroupNetworks, groups: tuple[AgentGroup, ...]):
    """`api.Act` of the policies: the most likely action (greedy) or a sample, one key per environment."""

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        def choose(g: AgentGroup, keys: Array):
            (dist, _), _ = nets.apply(params[g.name], g, obs[g.name], None, None, mask.get(g.name))
            if greedy:
                return dist.mode(), None
            return jax.vmap(lambda d, k: d.sample(k))(dist, keys), None  # dist leaves [B, A_g, ...]

        return act_by_group(groups, jax.random.split(key, obs[groups[0].name].shape[0]), choose)

    return act


def group_policy(nets: GroupNetworks, params: dict, g: AgentGroup, batch: offline.Transitions):
    """Group g's policy on a batch of windows [E, L, ...] -> (its distribution over [E*L*A_g], the
    recorded actions [E*L*A_g(, D)]). Discrete: among the available actions, the recorded one always
    counted available (a dataset may mark it otherwise)."""
    obs = flat(offline.group_slice(batch.obs, g), 2)  # [E*L, A_g, *obs]
    action = flat(offline.group_slice(batch.action, g), 2)  # [E*L, A_g(, D)]
    mask = None
    if g.discrete:
        assert batch.legal is not None  # a Discrete dataset has them (all available where it recorded none)
        mask = flat(offline.group_slice(batch.legal, g), 2) | jax.nn.one_hot(action, g.action_dim, dtype=bool)
    (dist, _), _ = nets.apply(params[g.name], g, obs, None, None, mask)
    return jax.tree.map(lambda v: flat(v, 2), dist), flat(action, 2)


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """BC's pieces for `env` on the dataset `offline.dataset` (read and checked here)."""
    del correction
    groups = env.groups
    source = offline.OfflineSource.of(config, env, layout, next_obs=False)
    nets = policy_networks(config, env)

    def loss_fn(params, batch: offline.Transitions):
        nll, entropy, match = [], [], []
        for g in groups:
            dist, action = group_policy(nets, params, g, batch)
            nll.append(-jnp.mean(dist.log_prob(action)))
            entropy.append(jnp.mean(dist.entropy()))
            mode = dist.mode()
            agree = (mode == action) if g.discrete else -jnp.abs(mode - action).mean(axis=-1)
            match.append(jnp.mean(agree.astype(jnp.float32)))
        return sum(nll), (jnp.mean(jnp.stack(entropy)), jnp.mean(jnp.stack(match)))

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def gradient_step(params, opt_state, batch: offline.Transitions, hp: HParams, lr: Array):
        (loss, (entropy, match)), grads = grad_fn(params, batch)
        params, opt_state, grad_norm = descend(adam(config), layout, frozenset(), params, opt_state, grads, lr, hp)
        return params, opt_state, (loss, entropy, match, grad_norm)

    return offline.pieces(
        config,
        layout,
        source,
        networks=nets.nets,
        init_params=lambda key: init_policies(nets, groups, key),
        act=make_act(nets, groups),
        gradient_step=gradient_step,
        metrics=("loss_total", "entropy", "action_match", "grad_norm"),
    )


LOSSES = ("loss_total", "grad_norm")

SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "bc",
        "behaviour cloning from an offline dataset (offline.dataset=PATH): each policy learns the recorded actions",
        {"offline": offline.OfflineConfig},
        defaults=offline.DEFAULTS,
        supports=Supports(actions=("discrete", "continuous"), recurrent=False),
    ),
    build,
    LOSSES,
)
