"""Hand-computed checks of the pure RL math in marljax.nn.ops."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from marljax.nn import ops


def test_gae_hand_computed_with_done_in_the_middle():
    gamma, lam = 0.9, 0.8
    reward = jnp.array([1.0, 2.0, 3.0])
    value = jnp.array([0.5, 1.0, 1.5])
    done = jnp.array([False, True, False])  # the episode ends after step 1
    last_value = jnp.array(2.0)  # V(s_3)

    adv, target = ops.gae(reward, value, done, last_value, gamma, lam)

    # t = 2: not done, bootstrap from last_value
    delta2 = 3.0 + 0.9 * 2.0 - 1.5  # 3.3
    adv2 = delta2
    # t = 1: done -> no bootstrap and no advantage carried back from t = 2
    delta1 = 2.0 - 1.0  # 1.0
    adv1 = delta1
    # t = 0: not done, bootstraps from V(s_1) = 1.0 and carries adv1
    delta0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    adv0 = delta0 + 0.9 * 0.8 * adv1  # 2.12
    expected_adv = np.array([adv0, adv1, adv2])
    assert expected_adv == pytest.approx([2.12, 1.0, 3.3])

    np.testing.assert_allclose(np.asarray(adv), expected_adv, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(target), expected_adv + np.array([0.5, 1.0, 1.5]), rtol=1e-6)
    assert adv.shape == (3,) and target.shape == (3,)


def test_gae_batched_axes_and_monte_carlo_limit():
    # Two columns: column 0 as in the hand case above, column 1 with no dones, lam = 1,
    # where GAE equals the discounted return (bootstrapped) minus the value.
    gamma, lam = 0.5, 1.0
    reward = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 4.0]])
    value = jnp.array([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])
    done = jnp.array([[False, False], [True, False], [False, False]])
    last_value = jnp.array([10.0, 8.0])

    adv, target = ops.gae(reward, value, done, last_value, gamma, lam)
    assert adv.shape == (3, 2)

    # column 0 (values 0): t2 = 3 + 0.5*10 = 8; t1 = 2 (done); t0 = 1 + 0.5*0 + 0.5*1*2 = 2
    np.testing.assert_allclose(np.asarray(adv[:, 0]), [2.0, 2.0, 8.0], rtol=1e-6)
    # column 1: returns G2 = 4 + 0.5*8 = 8, G1 = 2 + 0.5*8 = 6, G0 = 1 + 0.5*6 = 4
    np.testing.assert_allclose(np.asarray(target[:, 1]), [4.0, 6.0, 8.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv[:, 1]), [4.0 - 1.0, 6.0 - 2.0, 8.0 - 3.0], rtol=1e-6)


def test_ppo_loss_hand_computed_clipping_active_and_inactive():
    eps, vf_coef, ent_coef = 0.2, 0.5, 0.01
    ratio = np.array([1.5, 0.9, 0.5])
    old_logp = jnp.array([-1.0, -2.0, -0.5])
    logp = old_logp + jnp.log(jnp.asarray(ratio))
    advantage = jnp.array([1.0, 2.0, -1.0])
    entropy = jnp.array([1.0, 2.0, 3.0])
    value = jnp.array([1.0, 0.0, 2.0])
    old_value = jnp.array([0.5, 0.0, 2.0])
    target = jnp.array([2.0, 1.0, 2.0])

    out = ops.ppo_loss(logp, old_logp, entropy, value, old_value, advantage, target, eps, vf_coef, ent_coef)

    # surrogate per sample: min(r*A, clip(r, 0.8, 1.2)*A)
    s0 = min(1.5 * 1.0, 1.2 * 1.0)  # clipping active (ratio too high, A > 0): 1.2
    s1 = min(0.9 * 2.0, 0.9 * 2.0)  # inside the clip range: 1.8
    s2 = min(0.5 * -1.0, 0.8 * -1.0)  # clipping active (ratio too low, A < 0): -0.8
    actor = -(s0 + s1 + s2) / 3
    assert actor == pytest.approx(-2.2 / 3)
    # value: max of unclipped and clipped squared errors
    v0 = max((1.0 - 2.0) ** 2, (0.5 + 0.2 - 2.0) ** 2)  # clipped prediction 0.7: 1.69
    v1 = max((0.0 - 1.0) ** 2, (0.0 - 1.0) ** 2)  # 1.0
    v2 = 0.0
    value_loss = 0.5 * (v0 + v1 + v2) / 3
    ent = (1.0 + 2.0 + 3.0) / 3
    total = actor + vf_coef * value_loss - ent_coef * ent
    approx_kl = ((0.5 - math.log(1.5)) + (-0.1 - math.log(0.9)) + (-0.5 - math.log(0.5))) / 3
    clip_frac = 2 / 3  # |r - 1| > 0.2 for samples 0 and 2

    assert float(out.actor) == pytest.approx(actor, rel=1e-5)
    assert float(out.value) == pytest.approx(value_loss, rel=1e-5)
    assert float(out.entropy) == pytest.approx(ent, rel=1e-6)
    assert float(out.total) == pytest.approx(total, rel=1e-5)
    assert float(out.approx_kl) == pytest.approx(approx_kl, rel=1e-4)
    assert float(out.clip_frac) == pytest.approx(clip_frac, rel=1e-6)


def test_ppo_loss_no_clipping_when_ratio_is_one():
    logp = jnp.array([-1.0, -2.0])
    adv = jnp.array([0.5, -1.5])
    out = ops.ppo_loss(logp, logp, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), adv, jnp.zeros(2), 0.2, 0.5, 0.0)
    assert float(out.actor) == pytest.approx(-(0.5 - 1.5) / 2)
    assert float(out.clip_frac) == 0.0
    assert float(out.approx_kl) == pytest.approx(0.0, abs=1e-7)
    assert float(out.value) == 0.0


def test_normalize_without_axis():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])
    y = ops.normalize(x, None)
    mean, std = 2.5, math.sqrt(1.25)  # population std over all elements
    np.testing.assert_allclose(np.asarray(y), (np.array([1.0, 2.0, 3.0, 4.0]) - mean) / std, rtol=1e-5)

    # over ALL elements of a multi-dimensional array, not per row
    x2 = jnp.array([[0.0, 0.0], [10.0, 10.0]])
    y2 = np.asarray(ops.normalize(x2, None))
    np.testing.assert_allclose(y2, [[-1.0, -1.0], [1.0, 1.0]], rtol=1e-5)
    assert abs(y2.mean()) < 1e-6 and abs(y2.std() - 1.0) < 1e-5


def test_clip_by_global_norm():
    grads = {"a": jnp.array([3.0, 0.0]), "b": {"c": jnp.array([[4.0]])}}  # global norm 5
    norm = ops.global_norm(grads)
    clipped = ops.clip_by_norm(grads, norm, 1.0)
    assert float(norm) == pytest.approx(5.0)
    scale = 1.0 / (5.0 + 1e-6)
    np.testing.assert_allclose(np.asarray(clipped["a"]), [3.0 * scale, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"]["c"]), [[4.0 * scale]], rtol=1e-6)
    new_norm = math.sqrt(float(jnp.sum(clipped["a"] ** 2) + jnp.sum(clipped["b"]["c"] ** 2)))
    assert new_norm == pytest.approx(1.0, rel=1e-5)

    # below the limit: unchanged
    same = ops.clip_by_norm(grads, norm, 10.0)
    np.testing.assert_allclose(np.asarray(same["a"]), [3.0, 0.0])
    np.testing.assert_allclose(np.asarray(same["b"]["c"]), [[4.0]])


def test_vtrace_matches_a_hand_computed_case():
    # T=3, one env; gamma=0.9; an episode ends after step 1 (done[1]=1)
    r = jnp.array([1.0, 2.0, 3.0])
    v = jnp.array([0.5, 1.0, 1.5])
    d = jnp.array([0.0, 1.0, 0.0])
    last = jnp.array(2.0)
    rho = jnp.array([1.0, 0.5, 0.25])  # truncated pi/mu; c = rho
    g = 0.9
    # deltas: rho_t (r_t + g V_{t+1} (1-d_t) - V_t)
    d0 = 1.0 * (1.0 + g * 1.0 - 0.5)  # 1.4
    d1 = 0.5 * (2.0 + 0.0 - 1.0)  # 0.5  (episode ends: no bootstrap)
    d2 = 0.25 * (3.0 + g * 2.0 - 1.5)  # 0.825
    # v_s - V_s = delta_s + g c_s (1-d_s) (v_{s+1} - V_{s+1})
    a2 = d2
    a1 = d1 + 0.0  # cut by the episode end
    a0 = d0 + g * 1.0 * a1
    vs = [0.5 + a0, 1.0 + a1, 1.5 + a2]
    # advantages: rho_s (r_s + g v_{s+1} (1-d_s) - V_s), v_T = last value
    adv = [1.0 * (1.0 + g * vs[1] - 0.5), 0.5 * (2.0 - 1.0), 0.25 * (3.0 + g * 2.0 - 1.5)]
    got_vs, got_adv = ops.vtrace(r, v, d, last, rho, g)
    np.testing.assert_allclose(np.asarray(got_vs), vs, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got_adv), adv, rtol=1e-6)


def test_vtrace_on_policy_without_ends_is_the_lambda_one_return():
    # rho = c = 1 and no episode end: v_s is the discounted return bootstrapped with the last value
    r = jnp.array([1.0, 0.0, 2.0])
    v = jnp.array([0.3, -0.2, 0.7])
    g = 0.5
    got_vs, _ = ops.vtrace(r, v, jnp.zeros(3), jnp.array(4.0), jnp.ones(3), g)
    expected = [1.0 + g * 0.0 + g**2 * 2.0 + g**3 * 4.0, 0.0 + g * 2.0 + g**2 * 4.0, 2.0 + g * 4.0]
    np.testing.assert_allclose(np.asarray(got_vs), expected, rtol=1e-6)
