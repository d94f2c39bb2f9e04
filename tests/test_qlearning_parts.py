"""Building blocks of the Q-learning family (issue: IQL, VDN, QMIX, PQN-VDN): TD targets against
hand-computed cases, the mixers' monotonicity, and the replay buffer's semantics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax import ops, replay
from marljax.mixers import QMixer, vdn

R = jnp.array([1.0, 2.0, 3.0, 4.0])
NEXT_Q = jnp.array([10.0, 20.0, 30.0, 40.0])  # max_a Q(s_{t+1}, a) for t = 0..3
G, L = 0.5, 0.5


def test_q_lambda_zero_is_one_step_q_learning():
    done = jnp.array([False, False, True, False])
    out = ops.q_lambda_returns(R, done, NEXT_Q, G, 0.0)
    np.testing.assert_allclose(out, [1 + 0.5 * 10, 2 + 0.5 * 20, 3.0, 4 + 0.5 * 40])


def test_q_lambda_by_hand():
    done = jnp.array([False, True, False, False])
    out = ops.q_lambda_returns(R, done, NEXT_Q, G, L)
    g3 = 4 + G * ((1 - L) * 40 + L * 40)  # bootstrapped with q_T = 40
    g2 = 3 + G * ((1 - L) * 30 + L * g3)
    g1 = 2.0  # the episode ended after step 1
    g0 = 1 + G * ((1 - L) * 10 + L * g1)
    np.testing.assert_allclose(out, [g0, g1, g2, g3], rtol=1e-6)


def test_q_lambda_one_is_the_discounted_return_to_the_end():
    out = ops.q_lambda_returns(R, jnp.zeros(4, bool), NEXT_Q, G, 1.0)
    np.testing.assert_allclose(out[0], 1 + G * 2 + G**2 * 3 + G**3 * 4 + G**4 * 40, rtol=1e-6)


def test_n_step_returns_by_hand():
    done = jnp.array([False, False, True, False])
    out = ops.n_step_returns(R, done, NEXT_Q, G, 2)
    expected = [
        1 + G * 2 + G**2 * 20,  # r0 + g r1 + g^2 q(s2)
        2 + G * 3,  # the episode ends after step 2: no bootstrap
        3.0,  # ends right here
        4 + G * 40,  # the window ends: one step, bootstrapped
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(ops.n_step_returns(R, done, NEXT_Q, G, 1), ops.q_lambda_returns(R, done, NEXT_Q, G, 0.0))


def test_double_q_takes_the_online_argmax_among_available_actions():
    online = jnp.array([[1.0, 5.0, 3.0], [2.0, 0.0, 9.0]])
    target = jnp.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    np.testing.assert_allclose(ops.double_q_value(online, target), [20.0, 60.0])
    mask = jnp.array([[True, False, True], [True, True, False]])  # the online favourites are unavailable
    np.testing.assert_allclose(ops.double_q_value(online, target, mask), [30.0, 40.0])
    np.testing.assert_allclose(ops.masked_max(online, mask), [3.0, 2.0])


def test_vdn_sums_and_qmix_is_monotonic_in_every_agent():
    np.testing.assert_allclose(vdn(jnp.array([[1.0, 2.0, 3.0]])), [6.0])
    mixer = QMixer()
    key = jax.random.PRNGKey(0)
    q, world = jax.random.normal(key, (64, 5)), jax.random.normal(jax.random.fold_in(key, 1), (64, 12))
    params = mixer.init(key, q, world)
    grads = jax.vmap(jax.grad(lambda qi, wi: mixer.apply(params, qi[None], wi[None])[0]))(q, world)  # [64, 5]
    assert grads.shape == (64, 5) and bool(jnp.all(grads >= 0))
    assert float(jnp.max(grads)) > 0  # and not trivially flat
    # raising one agent's value never lowers the team's
    up = mixer.apply(params, q.at[:, 2].add(1.0), world)
    assert bool(jnp.all(up >= mixer.apply(params, q, world)))


def test_replay_ring_buffer_capacity_and_overwrite():
    buf = replay.init(3, {"obs": jnp.zeros((4, 2)), "action": jnp.zeros((4,), jnp.int32)})
    assert int(replay.size(buf)) == 0
    batch = lambda v, b: {"obs": jnp.full((b, 4, 2), v), "action": jnp.full((b, 4), v, jnp.int32)}  # noqa: E731
    buf = replay.add(buf, batch(1.0, 2))
    assert int(replay.size(buf)) == 2 and int(buf.position) == 2
    buf = replay.add(buf, batch(2.0, 2))  # slot 2, then wraps onto slot 0 (the oldest)
    assert int(replay.size(buf)) == 3 and int(buf.position) == 1
    np.testing.assert_array_equal(buf.data["action"][:, 0], [2, 1, 2])
    with pytest.raises(ValueError, match="does not fit"):
        replay.add(buf, batch(3.0, 4))


def test_replay_samples_only_written_slots():
    buf = replay.init(8, {"x": jnp.zeros((2,))})
    buf = replay.add(buf, {"x": jnp.arange(3, dtype=jnp.float32)[:, None].repeat(2, 1) + 1})  # slots 0..2 hold 1, 2, 3
    seqs, idx = jax.jit(replay.sample, static_argnums=2)(buf, jax.random.PRNGKey(0), 500)
    assert set(np.asarray(idx).tolist()) == {0, 1, 2}  # all written slots, and only those
    assert set(np.asarray(seqs["x"][:, 0]).tolist()) == {1.0, 2.0, 3.0}


def test_replay_is_a_pytree_that_jits_and_checkpoints_as_state():
    buf = replay.init(4, {"x": jnp.zeros((3,))})
    step = jax.jit(lambda b, x: replay.add(b, {"x": x}))
    buf = step(buf, jnp.ones((2, 3)))
    leaves = jax.tree.leaves(buf)
    assert len(leaves) == 3 and all(isinstance(x, jax.Array) for x in leaves)
