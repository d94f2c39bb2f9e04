"""Sable, feed-forward (Mahjoub et al. 2024): one sequence model acts for the whole team.

Each step the encoder reads every agent's observation (full retention over the agents) and gives
each agent a value; the decoder then chooses the agents' actions one after another, each
conditioned on the actions already chosen (causal retention over them) and on the encoded
observations (`marljax.nn.sable`). Retention's state makes acting linear in the number of agents
N, and training is chunked over them (`sable.chunk_size` agents at a time), so memory grows
linearly in N: the reason this is Sable and not MAT, whose attention is quadratic in N.

Learning is PPO on that joint policy, per agent as MAT and Sable do it: agent i's ratio is of
pi(a_i | o, a_<i), its advantage is GAE on its own value and reward, and the losses (clipped
surrogate, clipped value loss, entropy bonus) are IPPO's (`ops.ppo_loss`), in epochs of
minibatches of L = T/M steps of every environment (`learning.Minibatches`).

Recurrent (`recurrent=true`, Sable's memory across time steps): every retention also reads a
memory of the earlier steps of its episode, decayed once per step and reset where an episode
starts (`marljax.nn.retention`); the actors carry it (`hidden["sable"]`), the rollout records it
before every step, and learning replays each minibatch's runs of consecutive steps from the
memory recorded at a run's first step, through the run (as the GRU networks replay theirs), every
layer on all of a run's steps at once (`SableNetwork.over_steps`).

Box actions (`env_kwargs.action_type=Continuous` on MPE, JaxNav, facmac): a Gaussian per agent
whose mean the decoder gives and whose log-std is learned per group (as the PPO family's Gaussian
head); the next agent's token embeds the sampled vector, and the env clips it to its bounds.

What this version leaves out: the agent mesh axis (one network serves every agent: nothing to
split per agent), mode=async and host envs. The agents' order is fixed
(groups as the env lists them, then agents).
"""

from __future__ import annotations

import dataclasses
from typing import cast

import jax
import jax.numpy as jnp

from marljax.algos import ippo
from marljax.algos.acting import VecEnv, flat, group_keys
from marljax.algos.api import Algorithm, AlgorithmSpec, CostPiece
from marljax.algos.ippo import PPOConfig, PPOHParams, ppo_metrics
from marljax.algos.learning import Minibatches, adam, descend, epoch_cost_pieces, init_keys, init_learner, learning_rate
from marljax.config import AlgorithmSchema, Config, Supports
from marljax.envs.adapter import AgentGroup, EnvAdapter
from marljax.nn import ops
from marljax.nn.backend import choices
from marljax.nn.sable import (
    GroupShape,
    SableNetwork,
    decoder_memory_after,
    distribution,
    zero_memory,
    zero_step_state,
)
from marljax.parallel.layouts import Layout
from marljax.schema import ConfigError, setting
from marljax.types import ActorState, EpisodeStats, GroupBatch, LearnerState, TrainState, Trajectory, UpdateMetrics

Array = jax.Array
NETWORK = "sable"  # params[NETWORK]: the one network of the team; hidden[NETWORK]: the recurrent one's memory


@dataclasses.dataclass(frozen=True)
class SableConfig:
    """`sable.*`: the sequence model's size (PPO's own settings are `ppo.*`)."""

    # Mava's is 64; on MPE spread 32 learns as fast per env step at a quarter of the FLOPs
    embed_dim: int = setting(32, "width of every token (agent) in the encoder and decoder", minimum=1)
    num_blocks: int = setting(1, "retention blocks in the encoder and in the decoder", minimum=1)
    num_heads: int = setting(1, "retention heads (each with its own decay); must divide embed_dim", minimum=1)
    chunk_size: int = setting(
        16,
        "agents per chunk when the decoder learns on all agents at once: memory grows with N x chunk_size, not N^2",
        minimum=1,
    )

    def check(self, config: Config) -> None:
        if self.embed_dim % self.num_heads:
            allowed = [h for h in range(1, self.embed_dim + 1) if self.embed_dim % h == 0]
            raise ConfigError("sable.num_heads", f"must divide sable.embed_dim={self.embed_dim}; allowed: {allowed}")


def network(config: Config, env: EnvAdapter) -> SableNetwork:
    s = config.section(SableConfig)
    shapes = tuple(GroupShape(g.name, g.size, _obs_dim(g), g.action_dim, g.discrete) for g in env.groups)
    return SableNetwork(shapes, s.embed_dim, s.num_blocks, s.num_heads, s.chunk_size, config.dtype)


def _obs_dim(g: AgentGroup) -> int:
    out = 1
    for d in g.obs_shape:
        out *= d
    return out


def build(config: Config, env: EnvAdapter, *, layout: Layout = Layout(), correction: str = "none") -> Algorithm:
    """Sable's pure pieces: the joint network's rollout, acting and PPO learning."""
    if correction != "none":
        raise ValueError("sable learns on-policy only (no mode=async); correction must be 'none'")
    if layout.agent_parallel:
        raise ValueError("sable has no agent-parallel learner (mesh.agent=1)")
    groups = env.groups
    net = network(config, env)
    recurrent = config.recurrent
    vec = VecEnv.of(config, env, layout)
    T, E = config.num_steps, vec.local
    # no agent axis: the learner's environments are the acting ones
    batches = dataclasses.replace(
        Minibatches.of(config, config.section(PPOConfig), layout), local_envs=E, data_axis=layout.env_axes
    )

    def observations(obs: dict, lead: int = 2) -> tuple[Array, ...]:
        """group -> [B, A_g, *obs] -> per group [B, A_g, O_g] (flattened; `lead` axes kept)."""
        return tuple(obs[g.name].reshape(obs[g.name].shape[:lead] + (-1,)) for g in groups)

    def episode_starts(reset: dict) -> Array:
        """group -> [..., A_g] bool -> [...]: where every agent's reset flag is set (an episode starts)."""
        return jnp.all(jnp.concatenate([reset[g.name] for g in groups], axis=-1), axis=-1)

    def forget(memory: dict, reset: dict) -> dict:
        """The memory zeroed where an episode starts: reset group -> [..., A_g] bool (every agent's)."""
        starts = episode_starts(reset)  # [...]
        return jax.tree.map(
            lambda m: jnp.where(starts.reshape(starts.shape + (1,) * (m.ndim - starts.ndim)), 0.0, m), memory
        )

    # ------------------------------------------------------------------ acting, one agent at a time
    def act_joint(params, obs: dict, masks: dict, keys: Array, greedy: bool = False, memory: dict | None = None):
        """The team's actions on B environments, agent after agent: keys [B, 2] one per environment;
        `memory` the recurrent one's (leaves [B, ...]). -> (group -> (actions [B, A_g], logp [B, A_g],
        value [B, A_g]), memory after this step | None)."""
        p = params[NETWORK]
        B = keys.shape[0]
        if memory is None:
            values, rep = cast(tuple, net.apply(p, observations(obs), method=SableNetwork.encode))  # rep [B, N, D]
            state = net.apply(p, B, method=SableNetwork.zero_state)
            decode_step = lambda s, x, r, gi: net.apply(p, s, x, r, gi, method=SableNetwork.decode_step)  # noqa: E731
        else:
            values, rep, encoded = cast(
                tuple, net.apply(p, memory["encoder"], observations(obs), method=SableNetwork.encode_with_memory)
            )
            state = zero_step_state(net, B)
            decode_step = lambda s, x, r, gi: net.apply(  # noqa: E731
                p, s, memory["decoder"], x, r, gi, method=SableNetwork.decode_step_with_memory
            )
        x = net.apply(p, B, method=SableNetwork.start_token)  # [B, D]
        out, first = {}, 0
        for gi, g in enumerate(groups):
            mask = masks.get(g.name) if g.has_mask else None  # [B, A_g, n]
            env_keys = group_keys(keys, gi)  # [B, 2]
            agent_keys = jax.vmap(lambda a, k=env_keys: group_keys(k, a))(jnp.arange(g.size))  # [A_g, B, 2]

            def one_agent(carry, xs, gi=gi):
                state, x = carry
                rep_i, mask_i, key_i = xs  # [B, D], [B, n] | None, [B, 2]
                state, out_i = decode_step(state, x, rep_i, gi)
                dist = distribution(net.groups[gi], out_i, mask_i)
                action = dist.mode() if greedy else jax.vmap(lambda d, k: d.sample(k))(dist, key_i)
                x = net.apply(p, gi, action, method=SableNetwork.embed_action)
                return (state, x), (action, dist.log_prob(action))

            rep_g = jnp.swapaxes(rep[:, first : first + g.size], 0, 1)  # [A_g, B, D]
            mask_g = None if mask is None else jnp.swapaxes(mask, 0, 1)
            (state, x), (action, logp) = jax.lax.scan(one_agent, (state, x), (rep_g, mask_g, agent_keys))
            out[g.name] = (jnp.swapaxes(action, 0, 1), logp.T, values[gi])  # [B, A_g(, d)], [B, A_g] x 2
            first += g.size
        if memory is None:
            return out, None
        return out, {"encoder": encoded, "decoder": decoder_memory_after(net, memory["decoder"], state)}

    def act(params, obs, reset, hidden, mask, key, greedy: bool = False):
        """Every group's actions on a batch of environments (obs: group -> [B, A_g, ...]); the
        recurrent one's memory in hidden[NETWORK] (`initial_hidden`), forgotten where reset."""
        keys = jax.random.split(key, obs[groups[0].name].shape[0])
        memory = forget(hidden[NETWORK], reset) if recurrent else None
        out, memory = act_joint(params, obs, mask, keys, greedy, memory)
        return {name: a for name, (a, _, _) in out.items()}, ({NETWORK: memory} if recurrent else {})

    def initial_hidden(batch: int) -> dict:
        return {NETWORK: zero_memory(net, batch)} if recurrent else {}

    # ------------------------------------------------------------------ init and rollout
    def init_params(key: Array) -> dict:
        obs = tuple(jnp.zeros((1, g.size, _obs_dim(g)), jnp.float32) for g in groups)
        actions = tuple(
            jnp.zeros((1, g.size), jnp.int32) if g.discrete else jnp.zeros((1, g.size, g.action_dim)) for g in groups
        )
        return {NETWORK: net.init(key, obs, actions)}

    def learner_init(key: Array) -> LearnerState:
        return init_learner(config, key, init_params, PPOHParams)

    def init_actors(key: Array) -> ActorState:
        actors = vec.init_actors(init_keys(key).env, None)
        return actors.replace(hidden=initial_hidden(E))

    def step_policy(params):
        def choose(actors: ActorState, masks: dict, keys: Array):
            memory = forget(actors.hidden[NETWORK], actors.reset) if recurrent else None
            out, after = act_joint(params, actors.obs, masks, keys, memory=memory)
            # recurrent: every group's reset flags and, in the first group's record, the memory before the step
            batch = {
                g.name: dict(
                    obs=actors.obs[g.name],
                    action=out[g.name][0],
                    logp=out[g.name][1],
                    value=out[g.name][2],
                    mask=masks.get(g.name) if g.has_mask else None,
                    reset=actors.reset[g.name] if recurrent else None,
                    hidden=memory if recurrent and gi == 0 else None,
                    world=None,
                )
                for gi, g in enumerate(groups)
            }
            return {name: a for name, (a, _, _) in out.items()}, ({NETWORK: after} if recurrent else {}), batch

        return choose

    def record(batch: dict, res) -> dict:
        return {g.name: GroupBatch(**batch[g.name], reward=res.reward[g.name], done=res.done[g.name]) for g in groups}

    def rollout_step(params, actors: ActorState, key: Array):
        return vec.step(step_policy(params), record, (actors, EpisodeStats.zero(env.num_agents)), key)

    def collect(params, actors: ActorState, key: Array, update: Array | None = None) -> tuple[ActorState, Trajectory]:
        actors, stats, batch = vec.rollout(step_policy(params), record, actors, key, T, update)
        with jax.named_scope("policy"):
            if recurrent:
                memory = forget(actors.hidden[NETWORK], actors.reset)["encoder"]
                encoded = net.apply(
                    params[NETWORK], memory, observations(actors.obs), method=SableNetwork.encode_with_memory
                )
            else:
                encoded = net.apply(params[NETWORK], observations(actors.obs), method=SableNetwork.encode)
            values = cast(tuple, encoded)[0]
        return actors, Trajectory(batch, {g.name: v for g, v in zip(groups, values, strict=True)}, stats)

    # ------------------------------------------------------------------ learning
    def replay(p, minibatch: dict) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
        """The recurrent network through a minibatch's runs (leaves [L, E, A_g, ...], consecutive
        steps), from the memory recorded at their first step -> (values per group [L, E, A_g],
        policy outputs per group [L, E, A_g, n_g | 2d])."""
        batches = [minibatch[g.name][0] for g in groups]
        first = jax.tree.map(lambda m: m[0], batches[0].hidden)  # leaves [E, ...]
        starts = episode_starts({g.name: b.reset for g, b in zip(groups, batches, strict=True)})  # [L, E]
        obs = observations({g.name: b.obs for g, b in zip(groups, batches, strict=True)}, 3)
        actions = tuple(b.action for b in batches)
        return cast(tuple, net.apply(p, first, starts, obs, actions, method=SableNetwork.over_steps))

    def loss_fn(params, minibatch: dict, hp: PPOHParams):
        """PPO per agent on a minibatch (group -> (GroupBatch, adv, target), leaves [L, E, A_g, ...]),
        every agent's log-prob from the decoder given the taken actions of the agents before it."""
        merged = {g.name: jax.tree.map(lambda x: flat(x, 2), minibatch[g.name]) for g in groups}  # [L*E, A_g, ...]
        if recurrent:
            values, logits = jax.tree.map(lambda x: flat(x, 2), replay(params[NETWORK], minibatch))
        else:
            obs = observations({name: b.obs for name, (b, _, _) in merged.items()})
            values, rep = net.apply(params[NETWORK], obs, method=SableNetwork.encode)
            logits = net.apply(
                params[NETWORK], rep, tuple(merged[g.name][0].action for g in groups), method=SableNetwork.decode
            )
        cat = lambda xs: jnp.concatenate([x.reshape(-1) for x in xs])  # noqa: E731  every agent's samples [L*E*N]
        logp, entropy = [], []
        for shape, lg in zip(net.groups, logits, strict=True):
            b = merged[shape.name][0]
            dist = distribution(shape, lg, b.mask)
            logp.append(dist.log_prob(b.action))
            entropy.append(dist.entropy())
        bs = [merged[g.name] for g in groups]
        loss = ops.ppo_loss(
            cat(logp),
            cat([b.logp for b, _, _ in bs]),
            cat(entropy),
            cat(values),
            cat([b.value for b, _, _ in bs]),
            ops.normalize(cat([adv for _, adv, _ in bs]), layout.env_axes),
            cat([t for _, _, t in bs]),
            hp.clip_eps,
            hp.vf_coef,
            hp.ent_coef,
        )
        return loss.total, loss

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_step(params, opt_state, minibatch, hp: PPOHParams, lr: Array):
        with jax.named_scope("forward_backward"):
            (_, parts), grads = grad_fn(params, minibatch, hp)
        params, opt_state, grad_norm = descend(adam(config), layout, frozenset(), params, opt_state, grads, lr, hp)
        return (params, opt_state), (parts, grad_norm)

    def learn(
        learner: LearnerState, extra: None, traj: Trajectory, key: Array
    ) -> tuple[LearnerState, None, UpdateMetrics]:
        """GAE per agent, then epochs of minibatches of the per-agent PPO loss."""
        hp = cast(PPOHParams, learner.hparams)
        data = {}
        for g in groups:
            b = traj.batch[g.name]
            with jax.named_scope("gae"):
                adv, target = ops.gae(
                    b.reward, b.value, b.done, traj.last_value[g.name], hp.gamma, hp.gae_lambda, choices().gae
                )
            data[g.name] = (b, adv, target)
        lr = learning_rate(config, learner)
        step = lambda c, mb: minibatch_step(c[0], c[1], mb, hp, lr)  # noqa: E731  (c: params, opt_state)
        (params, opt_state), (parts, grad_norm) = batches.run(
            step, (learner.params, learner.opt_state), key, lambda d, k: batches.shuffle(d, k, runs=recurrent), data
        )
        metrics = ppo_metrics(layout, parts, grad_norm, lr, traj.stats)
        return learner.replace(params=params, opt_state=opt_state, update=learner.update + 1), extra, metrics

    # ------------------------------------------------------------------ FLOPs
    def cost_pieces(state: TrainState) -> list[CostPiece]:
        """(a) one rollout step (the encoder, N decoder steps, env.step) x num_steps; (b) one
        gradient step x epochs x minibatches (`learning.epoch_cost_pieces`). Not counted: GAE, the
        shuffle, the bootstrap values. Run it unsharded."""
        return epoch_cost_pieces(config, batches, rollout_step, minibatch_step, state)

    return Algorithm(
        networks={NETWORK: net},
        init_learner=learner_init,
        init_actors=init_actors,
        collect=collect,
        learn=learn,
        act=act,
        cost_pieces=cost_pieces,
        initial_hidden=initial_hidden,
    )


SPEC = AlgorithmSpec(
    AlgorithmSchema(
        "sable",
        "Sable: one retention sequence model over the agents, actions chosen one agent after another (recurrent=true: "
        "and over the time steps of an episode)",
        {"ppo": ippo.PPOConfig, "sable": SableConfig},
        supports=Supports(actions=("discrete", "continuous"), recurrent=True, param_sharing=("shared",)),
        cpu_note="sable attends over the agents and time steps (a transformer)",
        # searched on MPE spread at 1M steps, 2 seeds (docs/guide/algorithms.md): the best of seven settings,
        # +3.58 per agent over no-op where Sable's own defaults gain about +1.6; more epochs or a wider model did worse
        family_defaults={"mpe": ippo.SHORT_ROLLOUTS},
    ),
    build,
    ippo.LOSSES,
)
