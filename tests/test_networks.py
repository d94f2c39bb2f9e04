"""Action distributions and actor-critic modules in marljax.nn.networks."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.nn.networks import ActorCritic, Categorical, CNNEncoder, DiagGaussian, RecurrentActorCritic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from conv_gradient import FlaxConv  # noqa: E402  (CNNEncoder's layers with nn.Conv)


def _random_mask(key, rows: int, k: int) -> jax.Array:
    mask = jax.random.bernoulli(key, 0.4, (rows, k))
    # at least one valid action per row
    forced = jax.random.randint(jax.random.fold_in(key, 1), (rows,), 0, k)
    return mask.at[jnp.arange(rows), forced].set(True)


def test_masked_sampling_never_picks_a_masked_action():
    rows, k, n = 16, 7, 10_000
    key = jax.random.PRNGKey(0)
    mask = _random_mask(key, rows, k)
    assert bool(jnp.all(jnp.any(mask, axis=-1)))
    assert not bool(jnp.all(mask))  # something is actually masked
    # adversarial logits: masked actions would be the most likely ones without the mask
    logits = jax.random.normal(jax.random.PRNGKey(1), (rows, k)) + jnp.where(mask, 0.0, 50.0)
    dist = Categorical.masked(logits, mask)
    keys = jax.random.split(jax.random.PRNGKey(2), n)
    samples = jax.jit(jax.vmap(dist.sample))(keys)  # [n, rows]
    assert samples.shape == (n, rows)
    picked_ok = np.asarray(mask)[np.arange(rows)[None, :], np.asarray(samples)]
    assert picked_ok.all()
    # every valid action of a row with several valid actions does get sampled
    counts = np.zeros((rows, k), int)
    np.add.at(counts, (np.broadcast_to(np.arange(rows), samples.shape), np.asarray(samples)), 1)
    assert (counts[np.asarray(mask)] > 0).all()
    assert (counts[~np.asarray(mask)] == 0).all()


def test_masked_log_prob_and_entropy():
    mask = jnp.array([[True, False, True, False], [False, False, False, True], [True, True, True, True]])
    dist = Categorical.masked(jnp.zeros((3, 4)), mask)
    # masked actions: log-prob very negative
    assert float(dist.log_prob(jnp.array([1, 0, 0]))[0]) < -1e6
    assert float(dist.log_prob(jnp.array([3, 0, 0]))[0]) < -1e6
    assert float(dist.log_prob(jnp.array([0, 0, 0]))[1]) < -1e6
    # valid actions: uniform over the k valid ones
    lp = dist.log_prob(jnp.array([2, 3, 1]))
    np.testing.assert_allclose(np.asarray(lp), [-math.log(2), 0.0, -math.log(4)], rtol=1e-5, atol=1e-6)
    # entropy finite and equal to log(k) for zero logits
    ent = np.asarray(dist.entropy())
    assert np.isfinite(ent).all()
    np.testing.assert_allclose(ent, [math.log(2), 0.0, math.log(4)], rtol=1e-5, atol=1e-6)
    # probabilities of valid actions sum to one
    np.testing.assert_allclose(np.asarray(jnp.sum(jnp.exp(dist.logits), -1)), 1.0, rtol=1e-6)
    # mode picks a valid action
    assert bool(jnp.all(mask[jnp.arange(3), dist.mode()]))


def test_masked_entropy_and_log_prob_gradients_are_finite():
    mask = jnp.array([[True, False, True], [False, True, False]])

    def f(logits):
        d = Categorical.masked(logits, mask)
        return jnp.sum(d.entropy()) + jnp.sum(d.log_prob(jnp.array([0, 1])))

    g = jax.grad(f)(jax.random.normal(jax.random.PRNGKey(0), (2, 3)))
    assert np.isfinite(np.asarray(g)).all()
    # masked logits get no gradient
    np.testing.assert_allclose(np.asarray(g)[~np.asarray(mask)], 0.0, atol=1e-6)


def test_unmasked_categorical_matches_softmax():
    logits = jnp.array([[1.0, 2.0, 3.0]])
    dist = Categorical.masked(logits, None)
    p = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    np.testing.assert_allclose(np.exp(np.asarray(dist.logits)), [p], rtol=1e-5)
    np.testing.assert_allclose(float(dist.entropy()[0]), -(p * np.log(p)).sum(), rtol=1e-5)


def test_diag_gaussian_log_prob_and_entropy_hand_formula():
    mean = jnp.array([[0.5, -1.0]])
    log_std = jnp.array([[math.log(2.0), 0.0]])
    action = jnp.array([[1.5, 0.0]])
    dist = DiagGaussian(mean, log_std)
    # dim 0: z = (1.5 - 0.5)/2 = 0.5 ; dim 1: z = (0 + 1)/1 = 1
    expected = (-0.5 * 0.5**2 - math.log(2.0) - 0.5 * math.log(2 * math.pi)) + (
        -0.5 * 1.0**2 - 0.0 - 0.5 * math.log(2 * math.pi)
    )
    assert float(dist.log_prob(action)[0]) == pytest.approx(expected, rel=1e-5)
    ent = (math.log(2.0) + 0.5 * (1 + math.log(2 * math.pi))) + (0.0 + 0.5 * (1 + math.log(2 * math.pi)))
    assert float(dist.entropy()[0]) == pytest.approx(ent, rel=1e-5)
    s = dist.sample(jax.random.PRNGKey(0))
    assert s.shape == (1, 2)
    np.testing.assert_allclose(np.asarray(dist.mode()), np.asarray(mean))


@pytest.mark.parametrize(
    "obs_shape, cnn",
    [((18,), False), ((4, 5, 26), True)],
    ids=["mlp", "cnn"],
)
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "box"])
def test_actor_critic_shapes(obs_shape, cnn, discrete):
    B, A, n = 6, 3, 5
    net = ActorCritic(discrete, n, hidden_size=16, num_layers=2, activation="tanh", cnn=cnn)
    obs = jax.random.normal(jax.random.PRNGKey(0), (B, *obs_shape))
    ids = jnp.tile(jnp.eye(A), (B // A, 1))
    mask = jnp.ones((B, n), bool).at[:, 0].set(False) if discrete else None
    params = net.init(jax.random.PRNGKey(1), obs, ids, mask)
    dist, value = net.apply(params, obs, ids, mask)
    assert value.shape == (B,)
    if discrete:
        assert isinstance(dist, Categorical)
        assert dist.logits.shape == (B, n)
        assert dist.sample(jax.random.PRNGKey(2)).shape == (B,)
        assert float(jnp.max(dist.logits[:, 0])) < -1e6  # the mask reached the head
    else:
        assert isinstance(dist, DiagGaussian)
        assert dist.mean.shape == (B, n) and dist.log_std.shape == (B, n)
        assert dist.sample(jax.random.PRNGKey(2)).shape == (B, n)
    assert np.isfinite(np.asarray(value)).all()
    # the agent id is optional
    params2 = net.init(jax.random.PRNGKey(1), obs)
    assert net.apply(params2, obs)[1].shape == (B,)


@pytest.mark.parametrize("obs_shape, cnn", [((18,), False), ((4, 5, 26), True)], ids=["mlp", "cnn"])
def test_recurrent_actor_critic_shapes(obs_shape, cnn):
    B, H, n = 4, 8, 6
    net = RecurrentActorCritic(True, n, hidden_size=16, gru_hidden_size=H, activation="relu", cnn=cnn)
    obs = jax.random.normal(jax.random.PRNGKey(0), (B, *obs_shape))
    h = jnp.zeros((B, H))
    reset = jnp.zeros((B,), bool)
    mask = jnp.ones((B, n), bool)
    params = net.init(jax.random.PRNGKey(1), h, obs, reset, None, mask)
    h2, dist, value = net.apply(params, h, obs, reset, None, mask)
    assert h2.shape == (B, H)
    assert dist.logits.shape == (B, n)
    assert value.shape == (B,)
    assert np.isfinite(np.asarray(h2)).all()


def test_gru_hidden_reset_equals_zero_hidden():
    B, H, n = 4, 8, 3
    net = RecurrentActorCritic(True, n, hidden_size=16, gru_hidden_size=H)
    obs = jax.random.normal(jax.random.PRNGKey(0), (B, 5))
    h_rand = jax.random.normal(jax.random.PRNGKey(3), (B, H))
    zeros_h = jnp.zeros((B, H))
    params = net.init(jax.random.PRNGKey(1), zeros_h, obs, jnp.zeros(B, bool))

    h_reset, d_reset, v_reset = net.apply(params, h_rand, obs, jnp.ones(B, bool))
    h_zero, d_zero, v_zero = net.apply(params, zeros_h, obs, jnp.zeros(B, bool))
    np.testing.assert_allclose(np.asarray(h_reset), np.asarray(h_zero), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d_reset.logits), np.asarray(d_zero.logits), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(v_reset), np.asarray(v_zero), rtol=1e-6, atol=1e-6)

    # without a reset the hidden state matters
    h_keep, _, _ = net.apply(params, h_rand, obs, jnp.zeros(B, bool))
    assert not np.allclose(np.asarray(h_keep), np.asarray(h_zero))

    # per-row resets: only the reset rows match the zero-state output
    reset = jnp.array([True, False, True, False])
    h_mix, _, _ = net.apply(params, h_rand, obs, reset)
    np.testing.assert_allclose(np.asarray(h_mix)[[0, 2]], np.asarray(h_zero)[[0, 2]], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(h_mix)[[1, 3]], np.asarray(h_keep)[[1, 3]], rtol=1e-6, atol=1e-6)


def _mirrored_conv(params: dict, x: jax.Array) -> jax.Array:
    """The reference with each kernel mirrored in space (correlation and convolution mixed up)."""
    for i in range(2):
        layer = params["params"][f"Conv_{i}"]
        dims = ("NHWC", "HWIO", "NHWC")
        x = jax.lax.conv_general_dilated(x, layer["kernel"][::-1, ::-1], (1, 1), "SAME", dimension_numbers=dims)
        x = jax.nn.relu(x + layer["bias"])
    return x.reshape(x.shape[0], -1)


@pytest.mark.parametrize("obs_shape", [(4, 5, 30), (5, 5, 14), (1, 7, 3)], ids=["overcooked_v2", "storm", "one-row"])
def test_cnn_encoder_equals_flax_conv_per_agent(obs_shape):
    """CNNEncoder convolves by patches and one matmul (vmapped per-agent kernels make XLA's CPU
    convolution gradient slow): its output and its gradient, vmapped over 3 agents' own parameters,
    equal flax's nn.Conv with the same parameters to float32 summation order; a mirrored kernel
    (correlation vs convolution mixed up) does not."""
    A, B = 3, 8
    x = jax.random.normal(jax.random.PRNGKey(0), (A, B, *obs_shape))
    enc, ref = CNNEncoder(), FlaxConv()  # the reference: flax's own nn.Conv layers
    keys = jax.random.split(jax.random.PRNGKey(1), A)
    params = jax.vmap(lambda k: enc.init(k, x[0]))(keys)
    # the same parameter tree as nn.Conv's, and random biases so that they are exercised
    assert jax.tree.structure(params) == jax.tree.structure(jax.vmap(lambda k: ref.init(k, x[0]))(keys))
    params = jax.tree.map(lambda p: p + 0.1 * jax.random.normal(jax.random.PRNGKey(2), p.shape), params)

    def loss(module):
        return lambda p, x: (jax.vmap(module.apply)(p, x) ** 2).mean()

    out, want = jax.vmap(enc.apply)(params, x), jax.vmap(ref.apply)(params, x)
    assert out.shape == (A, B, obs_shape[0] * obs_shape[1] * 32)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-5)
    grads, want_grads = jax.grad(loss(enc))(params, x), jax.grad(loss(ref))(params, x)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6),
                 grads, want_grads)  # fmt: skip
    mirrored = jax.vmap(_mirrored_conv)(params, x)
    assert float(jnp.abs(mirrored - want).max()) > 1e-2  # the check above can tell the two apart
