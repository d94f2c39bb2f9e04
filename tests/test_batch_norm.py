"""Batch norm in the Q-networks (`q.norm=batch_norm`, `q.norm_input`, TransfQMix's
`transf.embed_norm` / `transf.scale_inputs`): its running statistics live in the parameter tree,
move only in learning steps, and are what acting and the target network normalise by."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos.acting import GroupNetworks, with_stats
from marljax.config import load_config
from marljax.envs.adapter import AgentGroup
from marljax.nn.networks import STATS, QNetwork
from marljax.train.wiring import make_adapter, make_trainer

GROUP = AgentGroup("agents", ("a", "b", "c"), (0, 1, 2), (4,), True, 5)
B = 16  # environments in the batch


def _nets(norm: str, independent: bool) -> GroupNetworks:
    return GroupNetworks({"agents": QNetwork(5, 8, 1, norm=norm, norm_input=norm == "batch_norm")}, independent,
                         agent_id=False, gru_size=None)  # fmt: skip


def _obs() -> jax.Array:
    return 3.0 + 2.0 * jax.random.normal(jax.random.PRNGKey(1), (B, GROUP.size, 4))  # [B, A, 4], far from N(0, 1)


@pytest.mark.parametrize("independent", [False, True], ids=["shared", "independent"])
def test_a_learning_step_moves_the_statistics_towards_its_batch_and_acting_reads_them(independent):
    nets = _nets("batch_norm", independent)
    params = nets.init(jax.random.split(jax.random.PRNGKey(0), nets.num_sets(GROUP)), GROUP)
    obs = _obs()
    q_act, _ = nets.apply(params, GROUP, obs)
    q_learn, _, stats = nets.apply_learning(params, GROUP, obs)
    assert set(stats) == set(params[STATS]) and q_act.shape == q_learn.shape == (B, GROUP.size, 5)
    # the input's batch norm (the first), by hand: momentum 0.99 from mean 0 / var 1 towards the
    # batch's biased moments, over every environment (and, shared, every agent) of the batch
    moved = stats["BatchNorm_0"]["BatchNorm_0"]  # leaves [1 or A, 4]
    axes = (0,) if independent else (0, 1)
    mean, var = jnp.mean(obs, axis=axes), jnp.var(obs, axis=axes)
    want_mean = 0.01 * (mean if independent else mean[None])
    want_var = 0.99 + 0.01 * (var if independent else var[None])
    np.testing.assert_allclose(moved["mean"], want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(moved["var"], want_var, rtol=1e-5)
    # acting normalises by the running statistics (unmoved here), learning by the batch's: they differ,
    # and acting with the moved statistics gives other values again
    assert not np.allclose(q_act, q_learn, atol=1e-3)
    q_after, _ = nets.apply(with_stats({"agents": params}, {"agents": stats})["agents"], GROUP, obs)
    assert not np.allclose(q_after, q_act, atol=1e-3)
    # the parameters proper are untouched by with_stats
    assert jax.tree.all(jax.tree.map(jnp.array_equal, params["params"], with_stats({"agents": params}, {"agents": stats})["agents"]["params"]))  # fmt: skip


def test_a_network_without_batch_norm_learns_as_it_acts():
    """The negative control: LayerNorm has no statistics; apply_learning is apply, bitwise."""
    nets = _nets("layer_norm", False)
    params = nets.init(jax.random.split(jax.random.PRNGKey(0), 1), GROUP)
    assert STATS not in params
    q_act, _ = nets.apply(params, GROUP, _obs())
    q_learn, _, stats = nets.apply_learning(params, GROUP, _obs())
    assert stats == {} and np.array_equal(q_act, q_learn)
    assert with_stats({"agents": params}, {"agents": stats}) == {"agents": params}


def _one_update(*overrides: str):
    config = load_config(None, ["num_envs=8", "num_steps=8", "total_timesteps=64", *overrides])
    trainer = make_trainer(config, make_adapter(config))
    before = trainer.init(jax.random.PRNGKey(0))
    after, metrics = jax.jit(trainer.update)(before)
    assert np.isfinite(float(metrics["loss_total"]))
    return before, after


def _moved(before: dict, after: dict) -> dict:
    """part -> whether each of its statistics' arrays changed (spread's communication features are
    always 0: their means stay 0)."""
    return {k: bool(jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before[k][STATS], after[k][STATS])))
            for k in before if STATS in before[k]}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("recurrent", [False, True], ids=["ff", "rnn"])
def test_pqn_learns_the_statistics_of_its_q_network(recurrent):
    before, after = _one_update("algo=pqn_vdn", "q.norm=batch_norm", "q.norm_input=true", f"recurrent={recurrent}")
    assert _moved(before.learner.params, after.learner.params) == {"agents": True}
    # without batch norm there are none (the negative control)
    before, _ = _one_update("algo=pqn_vdn", f"recurrent={recurrent}")
    assert all(STATS not in p for p in before.learner.params.values())


@pytest.mark.slow
def test_transf_qmix_learns_the_statistics_of_its_agents_and_mixer_and_its_target_keeps_the_old_ones():
    before, after = _one_update("algo=transf_qmix", "replay.learning_starts=0", "replay.target_update_interval=5",
                                "transf.embed_norm=batch_norm", "transf.scale_inputs=true")  # fmt: skip
    assert _moved(before.learner.params, after.learner.params) == {"agents": True, "__mixer__": True}
    same = jax.tree.map(jnp.array_equal, before.extra.target, after.extra.target)  # copied every 5 updates only
    assert jax.tree.all(same)
