"""SHAQ's maths by hand: the sampled coalitions, the Shapley-Q weighted team value and its
bootstrap on a two-agent toy, the alpha network's range and its own learning rate; negative
controls: a fixed alpha of 1 is VDN, a learned one is not. That it learns: tests/test_learns.py
(MPE spread in CI; SMAX 3m nightly)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos import shaq
from marljax.algos.mixers import MixerConfig
from marljax.algos.q_acting import QConfig
from marljax.algos.qlearning import MIXER, ReplayConfig
from marljax.algos.shaq import ShaqConfig
from marljax.config import ConfigError, load_config
from marljax.nn import ops
from marljax.train.wiring import make_adapter, make_trainer

TINY = ["num_envs=4", "num_steps=8", "total_timesteps=320", "replay.buffer_size=8", "replay.batch_size=4",
        "replay.learning_starts=0", "progress=false", "plot=false"]  # fmt: skip


def _trainer(*overrides: str):
    config = load_config(None, [*TINY, *overrides])
    return make_trainer(config, make_adapter(config))


def _run(trainer, updates: int):
    return jax.jit(lambda k: trainer.run_updates(trainer.init(k), updates))(jax.random.PRNGKey(0))


def test_two_agent_coalitions_are_the_empty_set_or_the_other_agent_half_the_time_each():
    q = jnp.array([[3.0, 5.0]])  # [B=1, N=2]
    x = np.asarray(shaq.coalition_inputs(q, jax.random.PRNGKey(1), 4000))  # [1, S, 2, 2]
    mean, own = x[0, ..., 0], x[0, ..., 1]  # [S, N]
    np.testing.assert_array_equal(own, np.broadcast_to([3.0, 5.0], own.shape))
    # agent 0's coalition is {} (0) or {agent 1} (5); agent 1's is {} or {agent 0} (3); one of them goes first
    first0 = mean[:, 0] == 0.0
    assert set(np.unique(mean[:, 0])) == {0.0, 5.0} and set(np.unique(mean[:, 1])) == {0.0, 3.0}
    np.testing.assert_array_equal(first0, mean[:, 1] == 3.0)
    assert abs(first0.mean() - 0.5) < 0.03  # uniform orders: 4000 draws, sd 0.008


def test_three_agent_coalition_means_follow_one_order_per_sample():
    q = jnp.array([[1.0, 10.0, 100.0]])
    x = np.asarray(shaq.coalition_inputs(q, jax.random.PRNGKey(2), 600))[0, ..., 0]  # [S, 3]
    seen = set()
    for row in x:  # the first agent sees 0, the second the first's value, the third the mean of the two others
        (first,) = np.flatnonzero(row == 0.0)
        (second,) = [i for i in range(3) if i != first and row[i] == float(q[0, first])]
        third = 3 - first - second
        assert row[third] == pytest.approx(float(q[0, first] + q[0, second]) / 2)
        seen.add((int(first), int(second), int(third)))
    assert len(seen) == 6  # all 3! orders are drawn


def test_team_value_and_bootstrap_on_a_two_agent_toy():
    """Q = (1, 2), agent 0 took its greedy action, agent 1 did not, alpha fixed at 3:
    Q_tot = 1*1 + 3*2 = 7; the bootstrap is the plain sum of the next double-Q values, and the
    one-step target r + gamma * sum."""
    config = load_config(None, ["algo=shaq", "shaq.manual_alpha=3"])
    team = shaq.shapley_team(config)
    assert not team.world and team.init is None  # a fixed alpha needs neither the state nor a network
    taken, greedy = jnp.array([[[1.0, 2.0]]]), jnp.array([[[True, False]]])  # [B=1, T=1, N=2]
    assert float(team.value(None, taken, None, greedy, jax.random.PRNGKey(0))[0, 0]) == 7.0
    assert float(team.value(None, taken, None, jnp.ones_like(greedy), jax.random.PRNGKey(0))[0, 0]) == 3.0
    nxt = jnp.array([[[0.5, 1.5]]])
    boot = team.target(None, nxt, None)  # [1, 1]
    assert float(boot[0, 0]) == 2.0
    target = ops.q_lambda_returns(jnp.array([[1.0]]), jnp.array([[False]]), boot.T, 0.9, 0.0)  # time-major
    assert float(target[0, 0]) == pytest.approx(1.0 + 0.9 * 2.0)


def test_learned_alpha_is_at_least_one_and_greedy_agents_do_not_use_it():
    config = load_config(None, ["algo=shaq", "shaq.sample_size=3"])
    team = shaq.shapley_team(config)
    assert team.world and team.lr == config.section(ShaqConfig).lr_alpha
    key = jax.random.PRNGKey(3)
    B, T, N, W = 4, 5, 3, 7
    taken = jax.random.normal(key, (B, T, N))
    world = jax.random.normal(jax.random.fold_in(key, 1), (B, T, W))
    params = team.init(key, jnp.zeros((1, N)), world[0, :1])
    # by hand: alpha from the network itself, on the same coalitions (the same key)
    x = shaq.coalition_inputs(taken.reshape(B * T, N), key, 3)
    alpha = 1.0 + shaq.AlphaNetwork(
        config.section(MixerConfig).embed_dim, config.section(MixerConfig).hyper_hidden
    ).apply(params, x, world.reshape(B * T, W)).reshape(B, T, N)
    assert float(jnp.min(alpha)) >= 1.0 and float(jnp.max(alpha)) > 1.0
    greedy = jax.random.bernoulli(jax.random.fold_in(key, 2), 0.5, (B, T, N))
    expected = jnp.sum(jnp.where(greedy, 1.0, alpha) * taken, axis=-1)
    np.testing.assert_allclose(team.value(params, taken, world, greedy, key), expected, rtol=1e-5, atol=1e-6)
    # every agent greedy: Q_tot is the sum, and the alpha network gets no gradient
    all_greedy = jnp.ones_like(greedy)
    np.testing.assert_allclose(team.value(params, taken, world, all_greedy, key), taken.sum(-1), rtol=1e-6)
    grads = jax.grad(lambda p: jnp.sum(team.value(p, taken, world, all_greedy, key)))(params)
    assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(grads))
    grads = jax.grad(lambda p: jnp.sum(team.value(p, taken, world, greedy, key)))(params)  # control: some are not
    assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads)) > 0.0


@pytest.mark.slow
def test_a_fixed_alpha_of_one_is_vdn_and_a_learned_alpha_is_not():
    vdn_state, vdn_m = _run(_trainer("algo=vdn"), 3)
    one_state, one_m = _run(_trainer("algo=shaq", "shaq.manual_alpha=1"), 3)
    assert set(one_state.learner.params) == set(vdn_state.learner.params)  # no alpha network
    for a, b in zip(jax.tree.leaves(one_state.learner.params), jax.tree.leaves(vdn_state.learner.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one_m["loss_total"], vdn_m["loss_total"], rtol=1e-5)
    learned, _ = _run(_trainer("algo=shaq"), 3)  # negative control: the alpha network changes what is learned
    assert MIXER in learned.learner.params
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
        jax.tree.leaves({k: v for k, v in learned.learner.params.items() if k != MIXER}),
        jax.tree.leaves(vdn_state.learner.params)))  # fmt: skip
    assert diff > 1e-4


@pytest.mark.slow
def test_the_alpha_network_learns_at_its_own_rate():
    """One learning update from the same start: the alpha network's step scales with
    shaq.lr_alpha (Adam's first step is lr x a fixed direction); the agents' does not."""
    start = _trainer("algo=shaq", "anneal_lr=false").init(jax.random.PRNGKey(0)).learner.params
    moved = {}
    for lr_alpha in ("1e-3", "2e-3"):
        trainer = _trainer("algo=shaq", "anneal_lr=false", "replay.gradient_steps=1", f"shaq.lr_alpha={lr_alpha}")
        state, _ = _run(trainer, 1)
        moved[lr_alpha] = jax.tree.map(lambda a, b: a - b, state.learner.params, start)
    # a move is new - start in float32: near |param| = 1 it comes in whole spacings of 2^-23, so a
    # step of a spacing or two (a tiny gradient) doubles only to within two of them (met on a GPU)
    atol = 2 * 2.0**-23
    for a, b in zip(jax.tree.leaves(moved["2e-3"][MIXER]), jax.tree.leaves(moved["1e-3"][MIXER])):
        np.testing.assert_allclose(a, 2 * b, rtol=1e-4, atol=atol)
    agents = [k for k in start if k != MIXER]
    for a, b in zip(jax.tree.leaves({k: moved["2e-3"][k] for k in agents}),
                    jax.tree.leaves({k: moved["1e-3"][k] for k in agents})):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)


def test_recurrent_shaq_runs_and_keeps_its_alpha_network_in_the_target():
    state, metrics = _run(_trainer("algo=shaq", "recurrent=true", "gru_hidden_size=16"), 2)
    assert MIXER in state.extra.target and "hidden" in state.extra.buffer.data
    assert np.isfinite(np.asarray(metrics["loss_total"])).all() and float(metrics["loss_total"][-1]) > 0


def test_a_manual_alpha_below_one_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algo=shaq", "shaq.manual_alpha=0.5"])
    assert err.value.field == "shaq.manual_alpha" and "\n" not in str(err.value)


SHAQ_MPE = """"NUM_ENVS": 8
"NUM_STEPS": 26
"BUFFER_SIZE": 5000
"BUFFER_BATCH_SIZE": 32
"TOTAL_TIMESTEPS": 2050000
"AGENT_HIDDEN_DIM": 64
"AGENT_INIT_SCALE": 2.
"PARAMETERS_SHARING": True
"EPSILON_START": 1.0
"EPSILON_FINISH": 0.05
"EPSILON_ANNEAL_TIME": 100000
"MIXER_EMBEDDING_DIM": 32
"MIXER_HYPERNET_HIDDEN_DIM": 64
"MIXER_INIT_SCALE": 0.00001
"MAX_GRAD_NORM": 25
"TARGET_UPDATE_INTERVAL": 200
"LR": 0.005
"LR_LINEAR_DECAY": True
"EPS_ADAM": 0.001
"WEIGHT_DECAY_ADAM": 0.00001
"TD_LAMBDA_LOSS": True
"TD_LAMBDA": 0.6
"GAMMA": 0.9
"SAMPLE_SIZE": 5
"MANUAL_ALPHA_ESTIMATES": null
"LR_ALPHA": 0.001
"ALG_NAME": shaq
"""  # the shape of JaxMARL's shaq_mpe.yaml (written here; its NUM_STEPS changed from none)


def test_jaxmarl_shaq_keys_map_to_its_settings(tmp_path):
    path = tmp_path / "shaq_mpe.yaml"
    path.write_text(SHAQ_MPE)
    c = load_config(path)  # the file's name says the algorithm
    assert c.algo == "shaq"
    assert (c.section(ShaqConfig).sample_size, c.section(ShaqConfig).lr_alpha, c.section(ShaqConfig).manual_alpha) == (
        5,
        0.001,
        0.0,
    )  # null: learned
    assert (
        c.section(MixerConfig).embed_dim,
        c.section(MixerConfig).hyper_hidden,
        c.section(MixerConfig).init_scale,
    ) == (32, 64, 1e-5)
    assert (c.lr, c.gamma, c.section(QConfig).td_lambda, c.section(ReplayConfig).target_update_interval) == (
        0.005,
        0.9,
        0.6,
        200,
    )
    assert (c.adam_eps, c.weight_decay, c.section(QConfig).init_scale) == (0.001, 1e-5, 2.0)
    path.write_text(SHAQ_MPE.replace('"MANUAL_ALPHA_ESTIMATES": null', '"MANUAL_ALPHA_ESTIMATES": 2.5'))
    assert load_config(path).section(ShaqConfig).manual_alpha == 2.5
