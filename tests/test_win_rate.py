"""SMAX win rate: `EnvAdapter.won` agrees with the battle's terminal state, training rows carry
`win_rate` and evaluations `eval_win_rate` on SMAX, and envs without a win condition carry
neither."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxmarl.environments.smax import HeuristicEnemySMAX
from jaxmarl.environments.smax.smax_env import Scenario

from marljax.config import load_config
from marljax.envs.adapter import EnvAdapter
from marljax.train.loop import train
from marljax.train.metrics import chunk_row
from marljax.train.wiring import make_adapter
from marljax.types import EpisodeStats, UpdateMetrics


def test_won_matches_the_terminal_state_of_the_battle():
    """Random allies, six marines against one: some battles are won and some lost or drawn.
    `won` (read from the last step's reward) must equal "every enemy dead and an ally alive",
    read from the state before the env's automatic reset."""
    scenario = Scenario(unit_types=jnp.zeros(7, jnp.uint8), num_allies=6, num_enemies=1,
                        smacv2_position_generation=False, smacv2_unit_type_generation=False)  # fmt: skip
    raw = HeuristicEnemySMAX(scenario=scenario)
    env = EnvAdapter(raw)
    assert env.has_win

    def episode(key):
        k_reset, key = jax.random.split(key)
        _, state = env.reset(k_reset)

        def step(c):
            state, key, _, _, _ = c
            key, k_act, k_step = jax.random.split(key, 3)
            masks = env.action_mask(state)
            actions = {g: jax.random.categorical(jax.random.fold_in(k_act, i), jnp.where(m, 0.0, -jnp.inf))
                       for i, (g, m) in enumerate(masks.items())}  # fmt: skip
            # the same transition without the reset (MultiAgentEnv.step uses the first half of its key)
            _, after, _, dones, _ = raw.step_env(jax.random.split(k_step)[0], state, env.env_actions(actions))
            alive = after.state.unit_alive  # [allies + enemies]
            truth = dones["__all__"] & ~jnp.any(alive[6:]) & jnp.any(alive[:6])
            res = env.step(k_step, state, actions)
            return res.state, key, res.episode_done, env.won(res.reward, res.episode_done), truth

        out = jax.lax.while_loop(lambda c: ~c[2], step, (state, key, False, False, False))
        return out[3], out[4]

    won, truth = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.PRNGKey(0), 64))
    won, truth = np.asarray(won), np.asarray(truth)
    assert 0.1 < truth.mean() < 0.9, truth.mean()  # both outcomes occur
    np.testing.assert_array_equal(won, truth)


@pytest.mark.nightly  # since 2026-11-30: CI's time (issue 63); 33 s in CI's quick run
def test_smax_rows_carry_win_rates_and_mpe_rows_do_not(tmp_path):
    settings = ["activation=relu", "num_envs=8", "num_steps=16", "num_chunks=2", "eval_every=2", "eval_episodes=4",
                "progress=false", "plot=false"]  # fmt: skip
    qmix = ["algo=qmix", "replay.gradient_steps=1", "replay.batch_size=8", "replay.learning_starts=0"]
    smax = train(load_config(None, [*settings, *qmix, "env=HeuristicEnemySMAX",
                                    "env_kwargs.scenario=3m", "total_timesteps=1024", f"out_dir={tmp_path / 'smax'}"]),
                 log=lambda s: None).rows  # fmt: skip
    last = smax[-1]
    assert 0.0 <= last["eval_win_rate"] <= 1.0 and len(last["eval_win_rate_per_seed"]) == 1
    assert any(
        r["win_rate"] is not None for r in smax
    )  # some 3m battles end within the run's 128 steps per environment
    assert all(r["win_rate"] is None or 0.0 <= r["win_rate"] <= 1.0 for r in smax)
    assert all(r["win_rate_per_seed"] == [r["win_rate"]] for r in smax)  # one seed: its own is the pooled one

    ippo = ["algo=ippo", "ppo.num_minibatches=1", "ppo.update_epochs=1"]
    config = load_config(None, [*settings, *ippo, "total_timesteps=512", f"out_dir={tmp_path / 'mpe'}"])
    assert not make_adapter(config).has_win
    mpe = train(config, log=lambda s: None).rows
    assert "eval_return" in mpe[-1] and not any("win_rate" in r or "eval_win_rate" in r for r in mpe)


def test_chunk_row_win_rate_per_seed():
    """Seed 0 wins 2 of its 3 episodes, seed 1 finishes none: pooled 2/3, per seed [2/3, None]."""
    episodes = EpisodeStats(
        return_sum=np.ones((2, 3, 4)), length_sum=np.full((2, 3), 10.0),  # [S, n, N], [S, n]
        count=np.array([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), won_sum=np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
    )  # fmt: skip
    row = chunk_row(
        UpdateMetrics({}, episodes), update=3, env_steps=96, wall_s=1.0, chunk_env_steps=96, num_agents=4, wins=True
    )
    assert row["win_rate"] == pytest.approx(2 / 3) and row["win_rate_per_seed"] == [pytest.approx(2 / 3), None]
    assert "win_rate_per_seed" not in chunk_row(UpdateMetrics({}, episodes), update=3, env_steps=96, wall_s=1.0,
                                                chunk_env_steps=96, num_agents=4)  # fmt: skip
