"""Sable: retention's three forms agree, acting one agent at a time gives the log-probs learning
computes for all agents at once, the decoder is causal over the agents, its settings are checked,
and it learns (against no-op and random on the same episodes)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos import sable
from marljax.config import ConfigError, load_config
from marljax.nn import retention
from marljax.nn.networks import Categorical
from marljax.nn.sable import GroupShape, SableNetwork, distribution
from marljax.train.wiring import make_adapter
from tests._learning import FRESH, assert_learns, split_by_seed


def reference(q, k, v, gamma):
    """o_i = sum_{j <= i} gamma^(i-j) (q_i . k_j) v_j, written as loops (float64)."""
    q, k, v, gamma = (np.asarray(x, np.float64) for x in (q, k, v, gamma))
    B, N, H, _ = q.shape
    out = np.zeros((B, N, H, v.shape[-1]))
    for i in range(N):
        for j in range(i + 1):
            w = gamma[None, :] ** (i - j) * np.einsum("bhd,bhd->bh", q[:, i], k[:, j])  # [B, H]
            out[:, i] += w[..., None] * v[:, j]
    return out


def qkv(n=11, heads=3, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    q, k = (jax.random.normal(kk, (2, n, heads, 4)) for kk in keys[:2])
    return q, k, jax.random.normal(keys[2], (2, n, heads, 5)), jnp.asarray(retention.decays(heads))


@pytest.mark.parametrize("chunk", [1, 3, 4, 11, 64])
def test_chunked_causal_retention_is_the_sum_it_defines(chunk):
    q, k, v, gamma = qkv()
    want = reference(q, k, v, gamma)
    got = np.asarray(retention.causal(q, k, v, gamma, chunk))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # negative control: other decays give another sum
    assert np.max(np.abs(np.asarray(retention.causal(q, k, v, gamma**4, chunk)) - want)) > 1e-2


def test_one_token_at_a_time_is_the_chunked_form_and_full_sees_every_token():
    q, k, v, gamma = qkv()

    def step(state, x):
        return retention.causal_step(state, *x, gamma)

    state = jnp.zeros((2, 3, 4, 5))
    _, out = jax.lax.scan(step, state, tuple(jnp.swapaxes(x, 0, 1) for x in (q, k, v)))
    np.testing.assert_allclose(np.swapaxes(np.asarray(out), 0, 1), np.asarray(retention.causal(q, k, v, gamma, 4)),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    whole = np.asarray(retention.full(q, k, v))
    want = np.einsum("bihd,bjhd,bjhv->bihv", *(np.asarray(x, np.float64) for x in (q, k, v)))
    np.testing.assert_allclose(whole, want, rtol=1e-4, atol=1e-4)
    changed = retention.full(q, k.at[:, -1].add(1.0), v)  # the last token reaches the first one's output
    assert np.max(np.abs(np.asarray(changed[:, 0]) - whole[:, 0])) > 1e-3


GROUPS = (GroupShape("speaker", 1, 3, 3), GroupShape("listener", 4, 11, 5))  # heterogeneous groups, N = 5
# a Discrete group before a Box group (2-d actions): the decoder's tokens mix one-hot and real-valued actions
BOX_GROUPS = (GroupShape("speaker", 1, 3, 3), GroupShape("mover", 4, 11, 2, discrete=False))


def sample_actions(key, g: GroupShape, batch: int = 6) -> jax.Array:
    if g.discrete:
        return jax.random.randint(key, (batch, g.size), 0, g.num_actions)  # [B, A_g]
    return jax.random.normal(key, (batch, g.size, g.num_actions))  # [B, A_g, d]


def network(chunk=2, blocks=2, heads=2, groups=GROUPS):
    net = SableNetwork(groups, embed_dim=8, num_blocks=blocks, num_heads=heads, chunk=chunk)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    obs = tuple(jax.random.normal(k, (6, g.size, g.obs_dim)) for k, g in zip(keys, groups, strict=False))
    actions = tuple(sample_actions(k, g) for k, g in zip(keys[2:], groups, strict=True))
    params = net.init(keys[3], obs, actions)
    return net, params, obs, actions


def stepwise_logits(net, params, obs, actions):
    """The decoder run one agent at a time with the retention states as carry (acting's path)."""
    _, rep = net.apply(params, obs, method=SableNetwork.encode)
    state = net.apply(params, rep.shape[0], method=SableNetwork.zero_state)
    x = net.apply(params, rep.shape[0], method=SableNetwork.start_token)
    out, i = [], 0
    for gi, g in enumerate(net.groups):
        per_agent = []
        for a in range(g.size):
            state, logits = net.apply(params, state, x, rep[:, i], gi, method=SableNetwork.decode_step)
            per_agent.append(logits)
            x = net.apply(params, gi, actions[gi][:, a], method=SableNetwork.embed_action)
            i += 1
        out.append(jnp.stack(per_agent, axis=1))
    return tuple(out)


@pytest.mark.parametrize("chunk", [1, 2, 5, 16])
def test_acting_agent_by_agent_gives_the_log_probs_learning_computes(chunk):
    net, params, obs, actions = network(chunk)
    _, rep = net.apply(params, obs, method=SableNetwork.encode)
    parallel = net.apply(params, rep, actions, method=SableNetwork.decode)
    stepwise = stepwise_logits(net, params, obs, actions)
    for g, p, s, a in zip(GROUPS, parallel, stepwise, actions, strict=True):
        assert p.shape == s.shape == (6, g.size, g.num_actions)
        lp, ls = Categorical.masked(p, None).log_prob(a), Categorical.masked(s, None).log_prob(a)
        np.testing.assert_allclose(np.asarray(lp), np.asarray(ls), rtol=1e-5, atol=1e-5)
    # negative control: other actions before an agent change its log-probs
    other = (actions[0], (actions[1] + 1) % GROUPS[1].num_actions)
    moved = net.apply(params, rep, other, method=SableNetwork.decode)
    assert np.max(np.abs(np.asarray(moved[1][:, 1:]) - np.asarray(parallel[1][:, 1:]))) > 1e-4


@pytest.mark.parametrize("chunk", [1, 3])
def test_box_actions_act_agent_by_agent_as_learning_computes_them(chunk):
    """A Box group's Gaussian (mean from the decoder, a learned log-std): the log-probs of the same
    real-valued actions agree between acting's one-agent path and learning's parallel one; an
    earlier mover's action reaches the later movers' means, and the log-std parameter their
    log-probs."""
    net, params, obs, actions = network(chunk, groups=BOX_GROUPS)
    _, rep = net.apply(params, obs, method=SableNetwork.encode)
    parallel = net.apply(params, rep, actions, method=SableNetwork.decode)
    stepwise = stepwise_logits(net, params, obs, actions)
    mover = BOX_GROUPS[1]
    assert parallel[1].shape == (6, mover.size, 2 * mover.num_actions)  # mean and log-std side by side
    for g, p, s, a in zip(BOX_GROUPS, parallel, stepwise, actions, strict=True):
        lp, ls = distribution(g, p).log_prob(a), distribution(g, s).log_prob(a)
        assert lp.shape == (6, g.size)
        np.testing.assert_allclose(np.asarray(lp), np.asarray(ls), rtol=1e-5, atol=1e-5)
    # negative controls: the first mover's action moves the later movers' means (not its own)...
    moved = net.apply(params, rep, (actions[0], actions[1].at[:, 0].add(1.0)), method=SableNetwork.decode)
    means = lambda out: np.asarray(distribution(mover, out).mean)  # noqa: E731
    assert np.array_equal(means(moved[1])[:, 0], means(parallel[1])[:, 0])
    assert np.max(np.abs(means(moved[1])[:, 1:] - means(parallel[1])[:, 1:])) > 1e-4
    # ...and the log-std is a parameter of the policy: shifted, the same actions get other log-probs
    wider = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 0.5 if "log_std_mover" in jax.tree_util.keystr(path) else x, params
    )
    out = net.apply(wider, rep, actions, method=SableNetwork.decode)
    np.testing.assert_allclose(np.asarray(distribution(mover, out[1]).log_std), 0.5)
    assert np.max(np.abs(np.asarray(distribution(mover, out[1]).log_prob(actions[1]) -
                                    distribution(mover, parallel[1]).log_prob(actions[1])))) > 1e-2  # fmt: skip


def test_the_decoder_is_causal_over_the_agents():
    net, params, obs, actions = network()
    _, rep = net.apply(params, obs, method=SableNetwork.encode)
    base = net.apply(params, rep, actions, method=SableNetwork.decode)
    changed = (actions[0], actions[1].at[:, 2].set((actions[1][:, 2] + 1) % GROUPS[1].num_actions))  # agent 3 of 0..4
    moved = net.apply(params, rep, changed, method=SableNetwork.decode)
    diff = [float(np.max(np.abs(np.asarray(m) - np.asarray(b)), axis=(0, 2)).max(initial=0.0)) for m, b in
            zip((moved[0], moved[1][:, :3]), (base[0], base[1][:, :3]), strict=True)]  # fmt: skip
    assert diff == [0.0, 0.0]  # agents 0..3 do not see agent 3's action (exactly: no path)
    assert np.max(np.abs(np.asarray(moved[1][:, 3:]) - np.asarray(base[1][:, 3:]))) > 1e-4  # agent 4, the last, does


def test_every_agent_s_value_sees_every_observation_of_its_own_environment():
    net, params, obs, _ = network()

    def speaker_value(listener_obs):  # the speaker's value in each environment [6]
        values, _ = net.apply(params, (obs[0], listener_obs), method=SableNetwork.encode)
        return values[0][:, 0]

    jac = np.asarray(jax.jacobian(speaker_value)(obs[1]))[..., -1, :]  # [6 envs, 6 envs, obs]: d v_b / d o_b'(last)
    own = np.abs(jac[np.arange(6), np.arange(6)]).sum(-1)
    assert np.all(own > 0), own  # the last listener's observation reaches the speaker's value
    off = jac[~np.eye(6, dtype=bool)]
    assert np.all(off == 0.0)  # and never another environment's (exactly: no path)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["param_sharing=independent"], "param_sharing"),
        (["sable.embed_dim=10", "sable.num_heads=4"], "sable.num_heads"),
        (["sable.chunk_size=0"], "sable.chunk_size"),
    ],
)
def test_settings_sable_cannot_take_are_refused_in_one_line(overrides, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, ["algo=sable", *overrides])
    assert info.value.field == field and "\n" not in str(info.value), str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("env", [["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"], ["env_kwargs.action_type=Continuous"]],
                         ids=["smax-masked", "spread-box"])  # fmt: skip
def test_rollout_log_probs_are_the_learner_s_at_the_first_step(env):
    """The behaviour log-probs recorded while acting are those the loss recomputes (ratio 1 before
    any gradient step): on SMAX 3m, whose action masks both paths apply, and on continuous spread,
    whose Gaussian actions are recorded as sampled (the env clips them to its bounds)."""
    cfg = load_config(
        None, ["algo=sable", *env, "num_envs=4", "num_steps=8", "total_timesteps=32", "sable.embed_dim=16"]
    )
    env = make_adapter(cfg)
    trainer = sable.SPEC.make_train(cfg, env)
    state = trainer.init(jax.random.PRNGKey(0))
    _, traj = jax.jit(trainer.collect)(state.learner.params, state.actors, jax.random.PRNGKey(1))
    g = env.groups[0]
    b = traj.batch[g.name]
    net = sable.network(cfg, env)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    obs = (flat(b.obs),)  # [T*E, A, O]
    _, rep = net.apply(state.learner.params[sable.NETWORK], obs, method=SableNetwork.encode)
    (out,) = net.apply(state.learner.params[sable.NETWORK], rep, (flat(b.action),), method=SableNetwork.decode)
    mask = None if b.mask is None else flat(b.mask)
    logp = distribution(net.groups[0], out, mask).log_prob(flat(b.action))
    np.testing.assert_allclose(np.asarray(logp), np.asarray(flat(b.logp)), rtol=1e-5, atol=1e-5)
    if g.discrete:
        assert mask is not None and not bool(jnp.all(mask))  # some actions were unavailable
        assert bool(jnp.all(jnp.take_along_axis(mask, flat(b.action)[..., None], -1)))  # masks honoured
    else:
        assert b.action.shape == (8, 4, g.size, g.action_dim) and b.action.dtype == jnp.float32
        assert bool(jnp.any((b.action < 0.0) | (b.action > 1.0)))  # sampled past spread's [0, 1], as recorded


# speaker and listener are two groups with their own observation and action sizes: one sequence of two
# tokens with their own input and output layers. Spread (3 agents, 2M steps) is in test_defaults_learn.py.
SPEAKER_LISTENER = ["algo=sable", "env=MPE_simple_speaker_listener_v4", "total_timesteps=3e5"]
# On the 3 fresh seeds (FRESH), margins by tests/test_learns.py's MARGIN_RULE. measured 2026-11-30 (64 episodes a
# seed, one core of this 2-core CPU):
# discrete: learned -8.32 / -11.49 / -9.97 against no-op -31.80 / -42.38 / -38.67 (random lower), mean gain +27.69
#   (+23.48 +30.89 +28.70), 2 SE 4.40: margin 23.0 (125 s; seed 0 had -16.96 against -31.18, margin 8.0)
# box (no-op: the zero vector; random: uniform within the bounds): learned -10.14 / -9.33 / -9.57 against the same
#   no-op, mean gain +27.94 (+21.65 +33.05 +29.11), 2 SE 6.68: margin 21.0 (138 s; seed 0 had -8.12 against -30.81,
#   margin 11.0)
# SMAX 3m against the heuristic enemy, Sable's defaults, 1M steps, in tenths (returns lie in [0, 2]; rates): learned
#   0.98 / 0.79 / 1.75 against random 0.17 / 0.19 / 0.21 (no-op 0), mean gain +0.98 (+0.82 +0.59 +1.53), 2 SE 0.57:
#   margin 0.4; wins 0.47 / 0.09 / 0.86 (random none), whose rule floor is 0.0 (mean 0.47 less 2 SE 0.44), so the
#   case asserts only that the seeds win more often than random play; 510 s by pytest. Seed 0 had learned 0.99 (wins 0.23),
#   later 1.885 (wins 0.92; the change between was not traced), margin 0.4 and wins >= 0.1; 4 seeds of an earlier run
#   ended at 1.54, 1.54, 1.34, 1.82 (docs/benchmarks.md, against MAPPO and HAPPO). Its seeds differ widely
# Split by seed (2026-11-30): its 3 seeds vmapped took 813 s on one core, past a nightly slice, so each fresh seed is a
# test of its own (fresh_seed_alone: seed=7919+i num_seeds=1), asserting a floor per seed by tests/test_defaults_learn.py's
# rule for split cases in tenths (the smallest gain less 0.05, rounded down to 0.05). Alone, seeds 7919 / 7920 / 7921
# learned 1.84 / 1.83 / 1.83 against random 0.17 / 0.17 / 0.18 (+1.67 +1.65 +1.65), 856 s for the three by pytest,
# pinned to one core; with the vmapped run's +0.59 the floor is 0.5, and the win-rate floor by the same rule from its
# 0.09 is 0.0 (wins above random's)
SMAX_3M_PER_SEED = 0.5
# (overrides, margin over the better of no-op and random, win-rate floor or None)
LEARNS = [
    pytest.param([*SPEAKER_LISTENER, *FRESH], 23.0, None, id="speaker-listener"),
    pytest.param([*SPEAKER_LISTENER, "env_kwargs.action_type=Continuous", *FRESH], 21.0, None,
                 id="speaker-listener-box"),
    *split_by_seed("smax-3m", lambda seed: (["algo=sable", "env=HeuristicEnemySMAX", "env_kwargs.scenario=3m",
                                             "total_timesteps=1e6", *seed], SMAX_3M_PER_SEED, 0.0)),
]  # fmt: skip


# nightly (1-9 CPU-minutes each; CI's learning tests: IPPO's, test_defaults_learn.py and others):
# python -m pytest -m nightly -s tests/test_sable.py -k learns
@pytest.mark.nightly
@pytest.mark.optimized
@pytest.mark.parametrize("overrides, margin, win_floor", LEARNS)
def test_learns(overrides, margin, win_floor, tmp_path):
    assert_learns(overrides, tmp_path / "run", margin, win_floor)


def test_chunks_bound_retention_s_memory():
    """XLA's temporaries for the decoder's causal retention on N = 1024 agents: chunks of 16 hold
    [16 x 16] scores per head, the parallel form [1024 x 1024]; a count, not a timing."""
    q, k, v, gamma = qkv(n=1024, heads=2)

    def temp_bytes(chunk: int) -> int:
        compiled = jax.jit(lambda q, k, v: retention.causal(q, k, v, gamma, chunk)).lower(q, k, v).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    chunked, parallel = temp_bytes(16), temp_bytes(1024)
    scores = 2 * 2 * 1024 * 1024 * 4  # B x H x N x N float32
    assert parallel >= scores, parallel  # the parallel form holds the N x N scores
    assert chunked * 8 < parallel, (chunked, parallel)


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); IPPO's exported-policy test runs in CI
def test_exported_policy_acts_as_the_trained_one(tmp_path):
    """train -> export -> load_policy: the loaded policy's greedy actions on SMAX 3m equal the
    trainer's, and every one is available; a policy of other parameters (seed 0) differs somewhere."""
    import marljax
    from marljax.train.loop import train
    from marljax.train.policy import export_policy

    out = tmp_path / "run"
    cfg = load_config(None, ["algo=sable", "env=HeuristicEnemySMAX", "env_kwargs.scenario=3m", "num_envs=4",
                             "num_steps=8", "total_timesteps=512", "num_chunks=2", "num_seeds=2", "sable.embed_dim=16",
                             "progress=false", "plot=false", "checkpoint_every=1", f"out_dir={out}"])  # fmt: skip
    res = train(cfg, log=lambda s: None)
    export_policy(out, tmp_path / "policy", seed_index=1, log=lambda s: None)
    policy = marljax.load_policy(tmp_path / "policy")
    env = policy.env
    trainer = sable.SPEC.make_train(cfg, make_adapter(cfg))
    params = [jax.tree.map(lambda x, i=i: x[i], jax.device_get(res.state.learner.params)) for i in (0, 1)]
    act, trainer_act = jax.jit(policy.act, static_argnames="greedy"), jax.jit(trainer.act, static_argnames="greedy")
    obs, state = env.env.reset(jax.random.PRNGKey(3))
    same_as_other_seed = []
    for t in range(6):
        avail = env.env.get_avail_actions(state)
        key = jax.random.PRNGKey(100 + t)
        actions, _ = act(obs, key, None, avail, greedy=True)
        grouped = {k: v[None] for k, v in env.group_obs(obs).items()}
        masks = {k: v[None] for k, v in env.group_masks(avail).items()}
        expected = [env.agent_actions({k: v[0] for k, v in trainer_act(p, grouped, {}, {}, masks, key, greedy=True)[0].items()})
                    for p in params]  # fmt: skip
        got = {a: int(x) for a, x in actions.items()}
        assert got == {a: int(x) for a, x in expected[1].items()}
        assert all(bool(avail[a][x]) for a, x in got.items())
        same_as_other_seed.append(got == {a: int(x) for a, x in expected[0].items()})
        obs, state, *_ = env.env.step(jax.random.PRNGKey(t), state, actions)
    assert not all(same_as_other_seed)


# One update of one gradient step on spread, 2 seeds, on 1 device and on 8 (mesh.seed=2 x mesh.data=4): the
# rollout, GAE, the per-environment shuffle, the advantage normalisation and the gradient mean over the data
# shards, equal to float reduction order (measured max |diff| in the parameters: 3e-8). Later steps drift
# more than other algorithms' (measured: 4.4e-6 after two steps, the Adam moments of the start token 5%
# apart; 6.7e-4 after 8 updates of 16 steps): near 0 Adam's step is about lr * g / eps (25 x g at lr
# 2.5e-4), and the per-head norm of a retention output over one token divides by that output's small
# spread, so float noise in one step is a visible difference in the next.
MESH_BASE = ["algo=sable", "num_envs=16", "num_seeds=2", "num_steps=32", "total_timesteps=512", "num_chunks=1",
             "lr=2.5e-4", "ppo.update_epochs=1", "ppo.num_minibatches=1", "sable.embed_dim=16"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.nightly  # two subprocesses compiling; tolerance as test_multidevice.py's
def test_one_vs_eight_devices(tmp_path):
    from tests._subprocess import train_runs
    from tests._trees import assert_same_run

    one = train_runs(tmp_path, MESH_BASE, [("one", [])], 1)["one"]
    eight = train_runs(tmp_path, MESH_BASE, [("eight", ["mesh.seed=2", "mesh.data=4"])], 8)["eight"]
    assert one[0]["devices"] == 1 and eight[0]["devices"] == 8 and eight[0]["mesh"]["data"] == 4
    assert_same_run(one[1], eight[1], atol=5e-7, rtol=2e-6)  # test_multidevice.py's tolerance


RESUME = ["algo=sable", "num_envs=4", "num_steps=8", "total_timesteps=256", "num_seeds=2", "num_chunks=4",
          "checkpoint_every=2", "sable.embed_dim=8", "progress=false", "plot=false"]  # fmt: skip


# CI resumes the float32 and recurrent runs; bfloat16 and Box actions are nightly (about 70 s each here)
@pytest.mark.slow
@pytest.mark.parametrize(
    "setting",
    [
        "dtype=float32",
        pytest.param("dtype=bfloat16", marks=pytest.mark.nightly),
        pytest.param("recurrent=true", marks=pytest.mark.nightly),  # since 2026-11-28: CI's time (issue 63)
        pytest.param("env_kwargs.action_type=Continuous", marks=pytest.mark.nightly),
    ],
)
def test_a_killed_run_resumes_bitwise(tmp_path, setting):
    """8 updates straight against 6 ("killed" after chunk 3, checkpoint at update 4) plus a resume:
    the whole final state and every metrics row equal bitwise, in float32, with bfloat16 matmuls,
    and recurrent (the actors' memory restored with them)."""
    from marljax.train.loop import train

    def cfg(out, *extra):
        return load_config(None, [*RESUME, setting, f"out_dir={out}", *extra])

    straight = train(cfg(tmp_path / "a"), log=lambda s: None)
    train(cfg(tmp_path / "b"), log=lambda s: None, max_chunks=3)
    resumed = train(cfg(tmp_path / "b", "resume=true"), log=lambda s: None)
    for x, y in zip(jax.tree.leaves(jax.device_get(straight.state)), jax.tree.leaves(jax.device_get(resumed.state)),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    timing = ("wall_s", "env_steps_per_s")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert strip(straight.rows)[-2:] == strip(resumed.rows)[-2:]
    # negative control: another seed's run differs
    other = train(cfg(tmp_path / "c", "seed=1"), log=lambda s: None)
    assert not np.array_equal(np.asarray(jax.tree.leaves(other.state.learner.params)[0]),
                              np.asarray(jax.tree.leaves(straight.state.learner.params)[0]))  # fmt: skip
