"""Building blocks of the Q-learning family (issue: IQL, VDN, QMIX, PQN-VDN): TD targets against
hand-computed cases, the mixers' monotonicity, the replay buffer's semantics, the recurrent
Q-network's replay of acting, and per-agent (independent) Q-networks."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos import replay
from marljax.algos.mixers import QMixer, vdn
from marljax.nn import ops

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


def test_q_lambda_per_step_stops_the_return_at_a_cut_without_ending_it():
    # the time limit cut an episode after step 1 (replay.bootstrap_time_limit with a lambda): its target
    # bootstraps one step (lambda 0 there), and step 0's return stops at it rather than at step 2's
    cut = jnp.array([0.0, 1.0, 0.0, 0.0])
    out = ops.q_lambda_returns(R, jnp.zeros(4, bool), NEXT_Q, G, L * (1.0 - cut))
    g3 = 4 + G * 40
    g2 = 3 + G * ((1 - L) * 30 + L * g3)
    g1 = 2 + G * 20  # one step, bootstrapped: not 2.0 (a done), nor run on into g2
    g0 = 1 + G * ((1 - L) * 10 + L * g1)
    np.testing.assert_allclose(out, [g0, g1, g2, g3], rtol=1e-6)
    # the control: the same per-step lambda without the cut is the scalar one, to the last bit
    np.testing.assert_array_equal(ops.q_lambda_returns(R, jnp.zeros(4, bool), NEXT_Q, G, jnp.full(4, L)),
                                  ops.q_lambda_returns(R, jnp.zeros(4, bool), NEXT_Q, G, L))  # fmt: skip
    assert not np.allclose(out, ops.q_lambda_returns(R, jnp.zeros(4, bool), NEXT_Q, G, L))


def test_q_lambda_one_is_the_discounted_return_to_the_end():
    out = ops.q_lambda_returns(R, jnp.zeros(4, bool), NEXT_Q, G, 1.0)
    np.testing.assert_allclose(out[0], 1 + G * 2 + G**2 * 3 + G**3 * 4 + G**4 * 40, rtol=1e-6)


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


def test_replay_draws_uniformly_over_the_written_slots():
    # 3000 of 5000 slots written; 9600 draws: each third of them expects 3200 (sd 46), none beyond slot 2999
    buf = replay.init(5000, {"x": jnp.zeros(())})
    buf = replay.add(buf, {"x": jnp.ones((3000,))})
    draw = jax.jit(replay.draw, static_argnums=2)
    idx = np.concatenate([np.asarray(draw(buf, jax.random.PRNGKey(i), 32)) for i in range(300)])
    assert idx.min() == 0 and idx.max() <= 2999
    assert all(abs(n - 3200) < 300 for n in np.bincount(idx // 1000)), np.bincount(idx // 1000)
    assert not np.asarray(draw(replay.init(8, {"x": jnp.zeros(())}), jax.random.PRNGKey(0), 16)).any()  # empty: slot 0


def test_replay_is_a_pytree_that_jits_and_checkpoints_as_state():
    buf = replay.init(4, {"x": jnp.zeros((3,))})
    step = jax.jit(lambda b, x: replay.add(b, {"x": x}))
    buf = step(buf, jnp.ones((2, 3)))
    leaves = jax.tree.leaves(buf)
    assert len(leaves) == 3 and all(isinstance(x, jax.Array) for x in leaves)


def _q_acting(*overrides: str):
    from marljax.algos.q_acting import make_q_acting
    from marljax.config import load_config
    from marljax.parallel.layouts import Layout
    from marljax.train.wiring import make_adapter

    config = load_config(None, ["activation=relu", "num_envs=4", "num_steps=30", *overrides])
    env = make_adapter(config)
    return make_q_acting(config, env, Layout()), env


def test_recurrent_unroll_replays_what_acting_saw():
    """Greedy acting (epsilon 0) through an episode boundary (MPE episodes last 25 steps): the
    sequence replayed from the first step's stored GRU state gives Q-values whose argmax is
    every action taken, and the same values as acting's recorded per-step states."""
    q, env = _q_acting("algo=vdn", "recurrent=true")
    (g,) = env.groups
    params = q.init_params(jax.random.PRNGKey(1))
    _, _, traj, _ = q.rollout(params, 0.0, q.init_actors(jax.random.PRNGKey(2)), jax.random.PRNGKey(3))
    reset, hidden = traj["reset"][g.name], traj["hidden"][g.name]  # [T, E, A], [T, E, A, H]
    assert bool(jnp.any(reset[1:])) and not bool(jnp.all(reset[1:]))  # an episode starts inside
    replayed = q.unroll(params, g, traj["obs"][g.name], reset, hidden[0])  # [T, E, A, n]
    np.testing.assert_array_equal(np.asarray(jnp.argmax(replayed, axis=-1)), np.asarray(traj["action"][g.name]))
    per_step = jax.vmap(lambda o, h, r: q.q_values(params, g, o, h, r)[0])(traj["obs"][g.name], hidden, reset)
    np.testing.assert_allclose(np.asarray(replayed), np.asarray(per_step), rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(hidden[5]))) > 0  # the state carries information between steps


@pytest.mark.parametrize("recurrent", ["false", "true"])
def test_independent_q_networks_are_one_per_agent(recurrent):
    """param_sharing=independent: a parameter set per agent (leading axis A), each applied to its
    own agent's observations without an id, and the sets differ."""
    q, env = _q_acting("algo=iql", "param_sharing=independent", f"recurrent={recurrent}")
    (g,) = env.groups
    params = q.init_params(jax.random.PRNGKey(0))
    assert all(leaf.shape[0] == g.size for leaf in jax.tree.leaves(params[g.name]))
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, g.size) + g.obs_shape)  # [B, A, ...]
    rnn = recurrent == "true"
    hidden = jax.random.normal(jax.random.PRNGKey(2), (5, g.size, 128)) if rnn else None
    reset = jnp.zeros((5, g.size), bool) if rnn else None
    values, _ = q.q_values(params, g, obs, hidden, reset)  # [B, A, n]
    for i in range(g.size):
        p_i = jax.tree.map(operator.itemgetter(i), params[g.name])
        if rnn:
            expected = q.nets[g.name].apply(p_i, hidden[:, i], obs[:, i], reset[:, i])[1]
        else:
            expected = q.nets[g.name].apply(p_i, obs[:, i])
        np.testing.assert_allclose(np.asarray(values[:, i]), np.asarray(expected), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(values[:, 0]), np.asarray(values[:, 1]))
