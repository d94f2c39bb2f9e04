"""The settings added for JaxMARL's baseline configs: learning-rate warm-up and cosine decay, Adam's
epsilon and weight decay,
the Q-networks' normalisation and dueling head, QMIX's mixer sizes and init scale, the Q family's
reward scale. Each changes what it says when set, and leaves today's runs as they were when not."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from marljax.algos.mixers import QMixer
from marljax.config import load_config
from marljax.nn import ops
from marljax.nn.networks import QNetwork, RecurrentQNetwork

KEY = jax.random.PRNGKey(0)


def _lrs(*overrides: str, n: int = 10) -> np.ndarray:
    from marljax.algos.learning import learning_rate
    from marljax.types import HParams, LearnerState

    config = load_config(None, ["num_envs=4", "num_steps=8", f"total_timesteps={4 * 8 * n}", "lr=1.0", *overrides])
    return np.array([float(learning_rate(config, LearnerState(None, None, HParams(*[jnp.float32(1.0)] * 3), None,
                                                                jnp.int32(u)))) for u in range(n)])  # fmt: skip


def test_warmup_rises_from_near_zero_then_decays():
    plain, warm = _lrs(), _lrs("lr_warmup=0.2")
    np.testing.assert_allclose(plain, 1.0 - np.arange(10) / 10, rtol=1e-6)  # today's linear decay
    np.testing.assert_allclose(warm[:2], [0.5, 1.0])  # 2 warm-up updates of 10
    np.testing.assert_allclose(warm[2:], 1.0 - np.arange(8) / 8, rtol=1e-6)  # then linear over the other 8
    cos = _lrs("lr_warmup=0.2", "lr_decay=cosine")
    np.testing.assert_allclose(cos[2:], 0.5 * (1 + np.cos(np.pi * np.arange(8) / 8)), atol=1e-6)
    np.testing.assert_allclose(_lrs("lr_warmup=0.2", "anneal_lr=false")[:4], [0.5, 1.0, 1.0, 1.0])


def test_exponential_decay_falls_by_its_rate_per_update_after_the_warmup():
    exp = ("lr_decay=exponential", "lr_exp_decay_rate=0.1")
    np.testing.assert_allclose(_lrs(*exp), 0.9 ** np.arange(10), rtol=1e-6)  # past the budget too: it never ends
    np.testing.assert_allclose(_lrs(*exp, "lr_warmup=0.2"), [0.5, 1.0, *0.9 ** np.arange(8)], rtol=1e-6)
    np.testing.assert_allclose(_lrs(*exp, "anneal_lr=false"), np.ones(10))
    np.testing.assert_allclose(_lrs("lr_decay=exponential"), np.ones(10))  # rate 0: constant


def test_no_warmup_and_linear_is_todays_schedule_bitwise():
    update = jnp.arange(7, dtype=jnp.int32)
    for anneal in (True, False):
        a = ops.lr_schedule(jnp.float32(3e-4), update, 5, anneal)
        b = ops.linear_schedule(jnp.float32(3e-4), update, 5, anneal)
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def _tree(module, *args) -> dict:
    return jax.tree.map(jnp.shape, module.init(KEY, *args)["params"])


def test_default_q_networks_keep_their_parameter_tree():
    """The negative control: the names and shapes every checkpoint of today's Q-networks holds."""
    obs = jnp.zeros((2, 6))
    assert _tree(QNetwork(5, 8, 2), obs) == {
        "Dense_0": {"kernel": (6, 8), "bias": (8,)}, "LayerNorm_0": {"scale": (8,), "bias": (8,)},
        "Dense_1": {"kernel": (8, 8), "bias": (8,)}, "LayerNorm_1": {"scale": (8,), "bias": (8,)},
        "Dense_2": {"kernel": (8, 5), "bias": (5,)},
    }  # fmt: skip
    tree = _tree(RecurrentQNetwork(5, 8, 4), jnp.zeros((2, 4)), obs, jnp.zeros((2,), bool))
    assert sorted(tree) == ["Dense_0", "Dense_1", "Dense_2", "LayerNorm_0", "LayerNorm_1", "gru"]
    assert tree["Dense_1"]["kernel"] == (8, 5) and tree["Dense_2"]["kernel"] == (4, 8)  # head named before the layer


def test_init_scale_scales_every_dense_kernel_and_zero_keeps_todays():
    """AGENT_INIT_SCALE: orthogonal(s) = s x orthogonal(1) from the same key, so each kernel is today's
    times s / (today's scale: sqrt(2) hidden, 1 heads); the GRU keeps its own."""
    obs, h, reset = jnp.zeros((2, 6)), jnp.zeros((2, 4)), jnp.zeros((2,), bool)
    for net, args in ((QNetwork(5, 8, 2, dueling=True), (obs,)), (RecurrentQNetwork(5, 8, 4), (h, obs, reset))):
        today, scaled = net.init(KEY, *args)["params"], net.clone(init_scale=2.0).init(KEY, *args)["params"]
        for path, kernel in jax.tree_util.tree_flatten_with_path(today)[0]:
            name = jax.tree_util.keystr(path)
            other = scaled
            for k in path:
                other = other[k.key]
            if "gru" in name or "LayerNorm" in name or "bias" in name:
                np.testing.assert_array_equal(other, kernel)
            else:  # hidden layers' kernels are as wide as hidden_size; heads' as the action count or 1
                ratio = 2.0 / (np.sqrt(2) if kernel.shape[-1] == 8 else 1.0)
                np.testing.assert_allclose(other, ratio * kernel, rtol=1e-5, atol=1e-7)


def test_dueling_adds_a_value_head_and_centres_the_advantages():
    obs = jax.random.normal(KEY, (3, 6))
    net = QNetwork(5, 8, 2, dueling=True)
    tree = _tree(net, obs)
    assert tree["Dense_2"]["kernel"] == (8, 5) and tree["Dense_3"]["kernel"] == (8, 1)  # A and V
    params = net.init(KEY, obs)
    q = net.apply(params, obs)
    adv = QNetwork(5, 8, 2).apply({"params": {k: v for k, v in params["params"].items() if k != "Dense_3"}}, obs)
    value = q - adv + jnp.mean(adv, axis=-1, keepdims=True)  # V(s), the same for every action
    np.testing.assert_allclose(np.asarray(value), np.asarray(value[:, :1]).repeat(5, 1), rtol=1e-5, atol=1e-6)
    rnn = RecurrentQNetwork(5, 8, 4, dueling=True)
    assert "Dense_3" in _tree(rnn, jnp.zeros((2, 4)), jnp.zeros((2, 6)), jnp.zeros((2,), bool))


def test_norm_none_drops_the_layer_norms():
    tree = _tree(QNetwork(5, 8, 2, norm="none"), jnp.zeros((2, 6)))
    assert sorted(tree) == ["Dense_0", "Dense_1", "Dense_2"]


def test_mixer_sizes_and_init_scale():
    q, world = jnp.ones((2, 3)), jax.random.normal(KEY, (2, 7))
    default, zero = QMixer().init(KEY, q, world), QMixer(init_scale=0.0).init(KEY, q, world)
    assert jax.tree.map(jnp.shape, default) == jax.tree.map(jnp.shape, zero)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(default), jax.tree.leaves(zero)))
    sized = jax.tree.map(jnp.shape, QMixer(embed_dim=16, hyper_hidden=24).init(KEY, q, world))["params"]
    assert sized["Dense_0"]["kernel"] == (24, 3 * 16) and sized["Dense_1"]["kernel"] == (7, 24)
    small = QMixer(init_scale=1e-3).init(KEY, q, world)["params"]
    kernels = [v["kernel"] for v in small.values() if "kernel" in v]
    biases = [v["bias"] for v in small.values() if "bias" in v]
    assert max(float(jnp.max(jnp.abs(k))) for k in kernels) < 2e-3  # orthogonal x 0.001
    assert all(float(jnp.max(jnp.abs(b))) == 0.0 for b in biases)
    assert max(float(jnp.max(jnp.abs(v["kernel"]))) for v in default["params"].values() if "kernel" in v) > 0.1


def _q_acting(*overrides: str):
    from marljax.algos.q_acting import make_q_acting
    from marljax.parallel.layouts import Layout
    from marljax.train.wiring import make_adapter

    config = load_config(None, ["algo=vdn", "num_envs=2", "num_steps=4", *overrides])
    env = make_adapter(config)
    return make_q_acting(config, env, Layout())


def test_reward_scale_multiplies_the_learned_reward_not_the_reported_return():
    def rollout(*overrides):
        q = _q_acting(*overrides)
        params = q.init_params(KEY)
        _, stats, traj, _ = q.rollout(params, 0.5, q.init_actors(jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
        return stats, traj["reward"]

    stats1, r1 = rollout()
    stats10, r10 = rollout("q.reward_scale=10")
    np.testing.assert_allclose(np.asarray(r10), 10 * np.asarray(r1), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(stats1), jax.tree.leaves(stats10)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_q_config_carries_norm_and_dueling_to_the_networks():
    q = _q_acting("q.norm=none", "q.dueling=true")
    tree = jax.tree.map(jnp.shape, q.init_params(KEY))
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    names = {str(p) for p, _ in leaves}
    assert not any("LayerNorm" in n for n in names) and any("Dense_3" in n for n in names)


PARAMS = {"w": jax.random.normal(KEY, (3, 4)), "b": jnp.linspace(-1.0, 1.0, 4)}
GRADS = jax.tree.map(lambda x: jnp.sin(3.0 * x) + 0.1, PARAMS)
CLIPPED = ops.clip_by_norm(GRADS, ops.global_norm(GRADS), 0.5)


def _adam_step(tx: optax.GradientTransformation) -> dict:
    """One `ops.descend` step at lr 3e-3 from fresh moments on GRADS (clipped to norm 0.5)."""
    return ops.descend(PARAMS, tx.init(PARAMS), GRADS, ops.global_norm(GRADS), tx, jnp.float32(3e-3), 0.5)[0]


def _bitwise(a: dict, b: dict) -> bool:
    return all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


def test_adam_at_the_defaults_is_todays_optimiser_bitwise_and_weight_decay_adds_lr_wd_params():
    from marljax.algos.learning import adam

    today = _adam_step(optax.scale_by_adam(eps=1e-5))  # what every learner ran before these settings
    assert _bitwise(_adam_step(adam(load_config(None, []))), today)
    eps = _adam_step(adam(load_config(None, ["adam_eps=1e-3"])))
    assert _bitwise(eps, _adam_step(optax.scale_by_adam(eps=1e-3))) and not _bitwise(eps, today)
    decayed = _adam_step(adam(load_config(None, ["weight_decay=0.1"])))
    moments = optax.scale_by_adam(eps=1e-5)
    step = moments.update(CLIPPED, moments.init(PARAMS))[0]  # today's Adam direction
    lr, wd = jnp.float32(3e-3), 0.1
    for k, p in PARAMS.items():  # AdamW: p - lr (adam + wd p): today's step less lr x wd x p (up to p's rounding)
        assert np.array_equal(decayed[k], p - lr * (step[k] + wd * p))
        np.testing.assert_allclose(decayed[k] - today[k], -3e-3 * wd * p, rtol=0, atol=3e-7)
        assert not np.allclose(decayed[k], today[k], rtol=0, atol=1e-5)  # a negative control: the decay shows
    adamw = optax.adamw(3e-3, eps=1e-5, weight_decay=wd)  # optax's own AdamW agrees
    ref = optax.apply_updates(PARAMS, adamw.update(CLIPPED, adamw.init(PARAMS), PARAMS)[0])
    for k in PARAMS:
        np.testing.assert_allclose(decayed[k], ref[k], rtol=1e-6, atol=1e-9)
