"""TransfQMix: the entity views checked against the envs' own states, the transformer mixer's
monotonicity (and, as a control, that it is no plain sum), the agents' invariance to the order of
the entities they see and their hidden-state token, the envs it refuses in one line, JaxMARL's
keys, and a short run (CI smoke). That it learns: tests/test_learns.py (nightly)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos import transf_qmix
from marljax.algos.q_acting import QConfig
from marljax.algos.qlearning import ReplayConfig
from marljax.algos.transf_qmix import TransfConfig
from marljax.config import ConfigError, load_config
from marljax.envs.entities import entity_view
from marljax.train.evaluate import eval_keys, make_evaluator
from marljax.train.wiring import make_adapter, make_trainer

SMAX_3M = ["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"]


def _adapter(*overrides: str):
    return make_adapter(load_config(None, ["algo=transf_qmix", *overrides]))


def test_spread_entities_are_the_envs_relative_and_absolute_positions():
    env = _adapter()
    view = entity_view(env)
    assert view is not None
    obs, state = env.reset(jax.random.PRNGKey(4))
    state = env.step(jax.random.PRNGKey(5), state, {"agents": jnp.array([1, 2, 3])}).state  # moving: velocities
    obs = env.group_obs(env.env.get_obs(state))
    pos, vel = np.asarray(state.p_pos), np.asarray(state.p_vel)  # [N + L, 2]: agents, then landmarks
    ents = np.asarray(view.obs(obs["agents"]))  # [N, N + L, 6]
    N, L = env.num_agents, 3
    for i in range(N):
        others = [j for j in range(N) if j != i]
        np.testing.assert_allclose(ents[i, 0], [0, 0, *vel[i], 1, 1], atol=1e-6)  # itself: velocity, is_self, is_agent
        np.testing.assert_allclose(ents[i, 1:N, :2], pos[others] - pos[i], atol=1e-5)  # the other agents
        np.testing.assert_allclose(ents[i, 1:N, 2:], np.tile([0, 0, 0, 1], (N - 1, 1)))
        np.testing.assert_allclose(ents[i, N:, :2], pos[N:] - pos[i], atol=1e-5)  # the landmarks
        np.testing.assert_allclose(ents[i, N:, 2:], 0.0)
    world = np.asarray(view.world(env.world_state(state, obs)))  # [N + L, 5]
    np.testing.assert_allclose(world[:, :2], pos, atol=1e-5)
    np.testing.assert_allclose(world[:N, 2:4], vel[:N], atol=1e-6)
    np.testing.assert_allclose(world[:, 4], [1] * N + [0] * L)


def test_smax_entities_are_the_unit_rows_and_the_world_has_one_row_per_unit():
    env = _adapter(*SMAX_3M)
    view = entity_view(env)
    assert view is not None and "3 allies, 3 enemies" in view.what
    obs, state = env.reset(jax.random.PRNGKey(0))
    smax = env.env._env  # the SMAX the heuristic enemy wraps
    u, own = len(smax.unit_features), len(smax.own_features)
    flat = np.asarray(obs["agents"][0])
    ents = np.asarray(view.obs(obs["agents"]))[0]  # [5 others + itself, u + 2]
    assert ents.shape == (6, u + 2)
    np.testing.assert_array_equal(ents[:5, :u], flat[: 5 * u].reshape(5, u))
    np.testing.assert_array_equal(ents[5, :own], flat[5 * u :])  # its own features, padded
    np.testing.assert_array_equal(ents[:, u], [1, 1, 0, 0, 0, 1])  # is_agent: 2 allies, 3 enemies, itself
    np.testing.assert_array_equal(ents[:, u + 1], [0, 0, 0, 0, 0, 1])  # is_self
    world = np.asarray(view.world(env.world_state(state, obs)))  # [6 units, own + 2]
    np.testing.assert_allclose(world[:, 1:3], np.asarray(state.state.unit_positions), atol=1e-5)
    np.testing.assert_array_equal(world[:, own], np.asarray(state.state.unit_teams))


def test_envs_without_an_entity_view_are_refused_in_one_line():
    config = load_config(None, ["algo=transf_qmix", "env=MPE_simple_tag_v3"])
    with pytest.raises(ConfigError) as err:
        make_trainer(config, make_adapter(config))
    assert err.value.field == "env" and "MPE simple_spread and SMAX" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("overrides, field", [(["recurrent=false"], "recurrent"),
                                              (["hidden_size=30"], "transf.agent_heads"),
                                              (["hidden_size=16"], "gru_hidden_size")])  # fmt: skip
def test_settings_it_cannot_run_are_refused(overrides, field):
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algo=transf_qmix", *overrides])
    assert err.value.field == field


def _mixer(view, H: int = 16):
    return transf_qmix.TransformerMixer(H, 2, 4, 32, True, view.world)


@pytest.mark.slow
def test_the_mixer_is_monotonic_in_every_agents_value_and_no_plain_sum():
    env = _adapter()
    view = entity_view(env)
    N, H, B = env.num_agents, 16, 64
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q = 3 * jax.random.normal(keys[0], (B, N))
    hs = jax.random.normal(keys[1], (B, N, H))
    world = jax.random.normal(keys[2], (B, 54))
    mixer = _mixer(view, H)
    for seed in range(3):  # several parameter draws
        params = mixer.init(jax.random.PRNGKey(seed), q[:1], hs[:1], world[:1])
        grad = jax.vmap(jax.grad(lambda qq, h, w, p=params: mixer.apply(p, qq[None], h[None], w[None])[0]))(
            q, hs, world
        )
        assert float(jnp.min(grad)) >= 0.0 and float(jnp.max(grad)) > 0.0  # dQ_tot/dq_i >= 0 everywhere
    out = mixer.apply(params, q, hs, world)
    # controls: the weights depend on the agents' hidden states and on the world state
    assert float(jnp.max(jnp.abs(mixer.apply(params, q, hs + 1.0, world) - out))) > 1e-3
    assert float(jnp.max(jnp.abs(mixer.apply(params, q, hs, world + 1.0) - out))) > 1e-3
    assert float(jnp.max(jnp.abs(out - q.sum(-1)))) > 1e-3


def test_agents_ignore_the_order_of_what_they_see_and_carry_their_hidden_token():
    env = _adapter()
    view = entity_view(env)
    g = env.groups[0]
    net = transf_qmix.TransformerQNetwork(g.action_dim, 16, 2, 4, 32, True, view.obs)
    obs, _ = env.reset(jax.random.PRNGKey(1))
    o = obs["agents"]  # [N, 18]: vel 2, pos 2, landmarks 3 x 2, others 2 x 2, comm
    h = jax.random.normal(jax.random.PRNGKey(2), (o.shape[0], 16))
    reset = jnp.zeros(o.shape[0], bool)
    params = net.init(jax.random.PRNGKey(3), h, o, reset)
    h1, q1 = net.apply(params, h, o, reset)
    swapped = o.at[:, 4:6].set(o[:, 8:10]).at[:, 8:10].set(o[:, 4:6])  # landmarks 0 and 2 trade places
    h2, q2 = net.apply(params, h, swapped, reset)
    np.testing.assert_allclose(q1, q2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h1, h2, rtol=1e-4, atol=1e-5)
    moved = o.at[:, 4:6].add(0.5)  # control: moving a landmark changes the values
    assert float(jnp.max(jnp.abs(net.apply(params, h, moved, reset)[1] - q1))) > 1e-4
    # the hidden token: a reset starts from zeros, otherwise the state carries over
    _, q_reset = net.apply(params, h, o, jnp.ones_like(reset))
    _, q_zero = net.apply(params, jnp.zeros_like(h), o, reset)
    np.testing.assert_allclose(q_reset, q_zero, rtol=1e-6)
    assert float(jnp.max(jnp.abs(q_zero - q1))) > 1e-4


def _attention_by_sums(q, k, v, valid):
    """relu linear attention written as its defining sums, one query, head and key at a time (float64)."""
    phi = lambda x: np.maximum(x, 0.0) + transf_qmix.RELU_FEATURE_FLOOR  # noqa: E731
    B, L, H, _ = q.shape
    out = np.zeros((B, L, H, v.shape[-1]))
    for b, i, h in np.ndindex(B, L, H):
        w = [phi(q[b, i, h]) @ phi(k[b, j, h]) if valid[b, j] else 0.0 for j in range(k.shape[1])]
        out[b, i, h] = sum(wj * v[b, j, h] for j, wj in enumerate(w)) / sum(w)
    return out


def test_fast_attention_is_relu_linear_attention_over_the_keys_the_mask_lets_through():
    r = np.random.default_rng(0)
    q, k, v = (r.normal(size=(3, 5, 2, 4)) for _ in range(3))  # [B, L, heads, d]
    valid = r.random((3, 5)) < 0.6
    valid[:, 0] = True  # the hidden-state token is always there
    args = [jnp.asarray(a, jnp.float32) for a in (q, k, v)]
    got = np.asarray(transf_qmix.relu_linear_attention(*args, jnp.asarray(valid)[:, None, None]))  # mask [B, 1, 1, S]
    unmasked = np.asarray(transf_qmix.relu_linear_attention(*args))
    # float32 against the float64 sums
    np.testing.assert_allclose(got, _attention_by_sums(q, k, v, valid), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(unmasked, _attention_by_sums(q, k, v, np.ones_like(valid)), rtol=1e-5, atol=1e-6)
    assert np.abs(got - unmasked).max() > 1e-2  # control: the mask removes keys
    soft = np.asarray(jax.nn.dot_product_attention(*args))
    assert np.abs(soft - unmasked).max() > 1e-2  # control: not softmax attention


def test_a_fast_attention_layer_ignores_masked_tokens_and_is_not_the_softmax_layer():
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 6, 16))  # [B, L, H]
    valid = jax.random.uniform(jax.random.PRNGKey(1), (4, 6)) < 0.6
    valid = valid.at[:, 0].set(True)
    layer = transf_qmix.Encoder(heads=4, ff=32, fast_attention=True)
    params = layer.init(jax.random.PRNGKey(2), x, valid)
    out = layer.apply(params, x, valid)
    junk = jnp.where(valid[..., None], x, 5.0 * jax.random.normal(jax.random.PRNGKey(3), x.shape))
    # the tokens the mask lets through see only each other (to float32 rounding)
    seen = np.asarray(valid)
    np.testing.assert_allclose(np.asarray(layer.apply(params, junk, valid))[seen], np.asarray(out)[seen], atol=1e-5)
    assert float(jnp.max(jnp.abs(layer.apply(params, junk) - layer.apply(params, x)))) > 1e-2  # control: no mask
    softmax = layer.clone(fast_attention=False)  # the same parameters, softmax attention
    assert float(jnp.max(jnp.abs(softmax.apply(params, x, valid) - out))) > 1e-2


@pytest.mark.slow
def test_a_short_run_trains_on_spread():
    config = load_config(None, ["algo=transf_qmix", "num_envs=4", "num_steps=8", "total_timesteps=320",
                                "replay.buffer_size=8", "replay.batch_size=4", "replay.learning_starts=0",
                                "hidden_size=16", "gru_hidden_size=16", "transf.agent_heads=4",
                                "transf.mixer_heads=4"])  # fmt: skip
    trainer = make_trainer(config, make_adapter(config))
    start = trainer.init(jax.random.PRNGKey(0))
    state, metrics = jax.jit(lambda s: trainer.run_updates(s, 2))(start)
    loss = np.asarray(metrics["loss_total"])
    assert np.isfinite(loss).all() and (loss > 0).all()
    assert "__mixer__" in state.learner.params and "__mixer__" in state.extra.target
    assert state.extra.buffer.data["hidden"]["agents"].shape[-1] == 16  # the transformer's width
    moved = [float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(state.learner.params),
                                                            jax.tree.leaves(start.learner.params))]  # fmt: skip
    assert max(moved) > 0
    # the greedy evaluation (and export) steps the agents with a hidden state of gru_hidden_size
    params = jax.tree.map(lambda x: x[None], state.learner.params)  # [1 seed, ...]
    result = make_evaluator(trainer, 2)(params, eval_keys(0, jnp.arange(1), 2))
    assert np.isfinite(np.asarray(result.returns)).all()


def _with_zero_heads(state):
    """The agents' Q heads (their last dense layer) zeroed: their values no longer depend on the transformer."""
    params = state.learner.params
    head = jax.tree.map(jnp.zeros_like, params["agents"]["params"]["Dense_1"])
    agents = {**params["agents"], "params": {**params["agents"]["params"], "Dense_1": head}}
    return state.replace(learner=state.learner.replace(params={**params, "agents": agents}))


def test_the_mixer_reads_the_agents_hidden_states_without_training_them():
    config = load_config(None, ["algo=transf_qmix", "num_envs=4", "num_steps=8", "total_timesteps=320",
                                "replay.buffer_size=8", "replay.batch_size=4", "replay.learning_starts=0",
                                "replay.gradient_steps=1", "hidden_size=16", "gru_hidden_size=16",
                                "transf.agent_heads=4", "transf.mixer_heads=4"])  # fmt: skip
    trainer = make_trainer(config, make_adapter(config))
    one_update = jax.jit(lambda s: trainer.run_updates(s, 1)[0])
    start = trainer.init(jax.random.PRNGKey(0))

    def moved(state, before) -> dict:
        now, then = state.learner.params["agents"]["params"], before.learner.params["agents"]["params"]
        return {k: max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(now[k]), jax.tree.leaves(then[k])))
                for k in now}  # fmt: skip

    # with zero heads the agents' values do not depend on the transformer, which the mixer still reads:
    # no gradient reaches it (Adam moves a zero-gradient parameter by exactly 0)
    zeroed = _with_zero_heads(start)
    after = moved(one_update(zeroed), zeroed)
    assert after["Dense_1"] > 0  # the head learns
    assert {k: v for k, v in after.items() if k != "Dense_1"} == {k: 0.0 for k in after if k != "Dense_1"}
    # control: through their values, the agents' transformers learn
    assert min(moved(one_update(start), start).values()) > 0


def _bn_unroll():
    """A learning unroll of the agents (JaxMARL's batch norms) on a sequence whose steps differ in
    distribution (step t's observations shifted by t) -> (params, obs, reset, q [T, B, A, n], the hidden
    states after each step, the moved running statistics, the group, the acting pieces)."""
    from marljax.algos.q_acting import make_q_acting
    from marljax.parallel.layouts import Layout

    config = load_config(None, ["algo=transf_qmix", "transf.embed_norm=batch_norm", "transf.scale_inputs=true",
                                "hidden_size=16", "gru_hidden_size=16", "transf.agent_heads=4"])  # fmt: skip
    env = make_adapter(config)
    nets = transf_qmix.agent_networks(config, env, entity_view(env))
    q = make_q_acting(config, env, Layout(), nets=nets)
    g = env.groups[0]
    params = q.init_params(jax.random.PRNGKey(0))
    T, B, A, D = 6, 3, g.size, g.obs_shape[0]
    obs = jax.random.normal(jax.random.PRNGKey(1), (T, B, A, D)) + jnp.arange(T, dtype=jnp.float32)[:, None, None, None]
    reset = jnp.zeros((T, B, A), bool).at[0].set(True)
    (values, hs), stats = q.unroll(params, g, obs, reset, jnp.zeros((B, A, 16)), states=True, learning=True)
    return params, obs, reset, values, hs, stats, g, nets


def test_learning_normalises_a_sequence_by_the_moments_of_all_its_steps():
    # JaxMARL's embedder normalises a learning sequence [T x B] as one batch; marljax's agents, whose batch
    # norms all precede the hidden state, do the same: every step's values are those of one flat learning
    # pass over all the steps (each step given the hidden state before it)
    params, obs, reset, values, hs, stats, g, nets = _bn_unroll()
    T, B, A = obs.shape[:3]
    before = jnp.concatenate([jnp.zeros((1, B, A, 16)), hs[:-1]])  # [T, B, A, H]: the state each step starts from
    flat = lambda x: x.reshape((T * B,) + x.shape[2:])  # noqa: E731
    whole, _, whole_stats = nets.apply_learning(params[g.name], g, flat(obs), flat(before), flat(reset))
    np.testing.assert_allclose(np.asarray(values).reshape(whole.shape), np.asarray(whole), rtol=1e-4, atol=1e-5)
    for a, b in zip(jax.tree.leaves(stats), jax.tree.leaves(whole_stats)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # by the defining sums: the raw features' norm moved 1% of the way to the mean and variance of every
    # entity row of every step (from mean 0, variance 1)
    view = entity_view(make_adapter(load_config(None, ["algo=transf_qmix"])))
    rows = np.asarray(view.obs(obs), np.float64)  # [T, B, A, n_e, F]
    rows = rows.reshape(-1, rows.shape[-1])
    first = stats["BatchNorm_0"]["BatchNorm_0"]
    np.testing.assert_allclose(np.asarray(first["mean"])[0], 0.01 * rows.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(first["var"])[0], 0.99 + 0.01 * rows.var(0), rtol=1e-4, atol=1e-6)


def test_per_step_moments_would_differ_the_control(monkeypatch):
    # control: normalising each step by its own batch (what a network that declares no norms_before_state
    # gets) gives other values and a smaller variance (the spread between the steps' means is lost)
    _, _, _, by_sequence, _, seq_stats, _, _ = _bn_unroll()
    monkeypatch.setattr(transf_qmix.TransformerQNetwork, "norms_before_state", False)
    _, _, _, per_step, _, step_stats, _, _ = _bn_unroll()
    assert float(jnp.max(jnp.abs(by_sequence - per_step))) > 1e-2
    seq_var, step_var = (np.asarray(s["BatchNorm_0"]["BatchNorm_0"]["var"]) for s in (seq_stats, step_stats))
    assert (seq_var > step_var).any()


TRANSF_QMIX_MPE = """"NUM_ENVS": 8
"N_MINI_UPDATES": 2
"NUM_STEPS": 25
"BUFFER_SIZE": 5000
"BUFFER_BATCH_SIZE": 32
"TOTAL_TIMESTEPS": 1e7
"AGENT_INIT_SCALE": 2.
"AGENT_HIDDEN_DIM": 32
"AGENT_TRANSF_NUM_LAYERS": 2
"AGENT_TRANSF_NUM_HEADS": 8
"AGENT_TRANSF_DIM_FF": 128
"MIXER_INIT_SCALE": 0.01
"MIXER_TRANSF_NUM_LAYERS": 3
"MIXER_TRANSF_NUM_HEADS": 4
"MIXER_TRANSF_DIM_FF": 64
"USE_FAST_ATTENTION": True
"SCALE_INPUTS": True
"EMBEDDER_USE_RELU": False
"EPSILON_START": 1.0
"EPSILON_FINISH": 0.05
"EPSILON_ANNEAL_TIME": 100000
"MAX_GRAD_NORM": 10.
"TARGET_UPDATE_INTERVAL": 200
"LR": 0.001
"LR_DECAY_TYPE": 'exp'
"LR_EXP_DECAY_RATE": 0.00002
"EPS_ADAM": 0.000001
"TD_LAMBDA_LOSS": True
"TD_LAMBDA": 0.6
"GAMMA": 0.9
"ENV_NAME": "MPE_simple_spread_v3"
"ENV_KWARGS": {}
"""  # the shape of JaxMARL's transf_qmix_mpe.yaml (some values changed)


def test_jaxmarl_transf_qmix_keys_map_to_its_settings(tmp_path):
    path = tmp_path / "transf_qmix_mpe.yaml"
    path.write_text(TRANSF_QMIX_MPE)
    c = load_config(path)
    assert (c.algo, c.recurrent, c.hidden_size, c.section(ReplayConfig).gradient_steps) == ("transf_qmix", True, 32, 2)
    t = c.section(TransfConfig)
    assert (t.agent_layers, t.agent_heads, t.agent_ff) == (2, 8, 128)
    assert (t.mixer_layers, t.mixer_heads, t.mixer_ff, t.mixer_init_scale, t.relu_embed) == (3, 4, 64, 0.01, False)
    assert (t.scale_inputs, t.embed_norm) == (True, "batch_norm")  # JaxMARL's embedders: batch norm, always
    assert t.fast_attention is True
    assert (
        c.section(QConfig).eps_decay_steps == 100_000 * 8
    )  # its script's epsilon counts steps of the 8 vectorised envs
    assert (c.section(QConfig).init_scale, c.adam_eps, c.lr_decay) == (2.0, 1e-6, "exponential")
    assert c.lr_exp_decay_rate == pytest.approx(1 - (1 - 2e-5) ** 2)  # 2 gradient steps per update


def test_agent_init_scale_scales_the_embedding_and_the_head():
    env = _adapter()
    view, g = entity_view(env), env.groups[0]
    obs, _ = env.reset(jax.random.PRNGKey(1))
    args = (jnp.zeros((obs["agents"].shape[0], 16)), obs["agents"], jnp.zeros(obs["agents"].shape[0], bool))
    net = transf_qmix.TransformerQNetwork(g.action_dim, 16, 1, 4, 32, True, view.obs)
    today = net.init(jax.random.PRNGKey(3), *args)["params"]
    scaled = net.clone(init_scale=2.0).init(jax.random.PRNGKey(3), *args)["params"]
    last = sorted(k for k in today if k.startswith("Dense"))[-1]  # the head, built last
    for name in ("Dense_0", last):  # the entity embedding (today orthogonal(1)), the head (orthogonal(1))
        np.testing.assert_allclose(scaled[name]["kernel"], 2.0 * today[name]["kernel"], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(scaled["Encoder_0"]["Dense_0"]["kernel"], today["Encoder_0"]["Dense_0"]["kernel"])
