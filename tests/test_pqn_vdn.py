"""PQN-VDN: its targets use the team reward, its configuration errors name the field, and
mesh.data does not change its numbers. That it learns: tests/test_defaults_learn.py."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from marljax.config import ConfigError, load_config
from marljax.train.wiring import make_adapter, make_trainer
from tests._subprocess import train_runs
from tests._trees import AGENTS, SEEDS, assert_same_run

SETTINGS = ["algo=pqn_vdn", "activation=relu", "lr=2e-3", "num_envs=64", "num_steps=32", "pqn.update_epochs=2",
            "pqn.num_minibatches=2", "q.eps_decay_steps=5e5", "progress=false", "plot=false"]  # fmt: skip
# Equal to float reduction order for 8 updates. Measured (agent axis, feed-forward and GRU): the
# learner's state max |diff| 1.2e-7, the metrics 1.9e-5 on losses of size ~50 (relative 4.5e-7).
# Tolerance |diff| <= PQN_ATOL + PQN_RTOL * |x|, about 8x those. The controls differ by 0.96.
PQN_ATOL, PQN_RTOL = 1e-6, 4e-6


@pytest.mark.parametrize(
    "change, field",
    [
        (["mesh.agent=2"], "mesh.agent"),  # per-agent parameter sets to split: param_sharing=independent
        (["q.eps_start=0.1", "q.eps_finish=0.5"], "q.eps_finish"),
        (["q.td_lambda=1.5"], "q.td_lambda"),
        (["q.eps_decay_steps=0"], "q.eps_decay_steps"),
        (["pqn.memory_window=4", "pqn.minibatch_split=envs"], "pqn.memory_window"),  # feed-forward: nothing to lead
        (["pqn.memory_window=4", "recurrent=true"], "pqn.memory_window"),  # sequences sliced by time
    ],
)
def test_bad_q_learning_settings_name_the_field(change, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*SETTINGS, *change])
    assert info.value.field == field


def test_box_actions_are_refused_before_compiling():
    config = load_config(None, [*SETTINGS, "env=MPE_simple_world_comm_v3"])
    with pytest.raises(ConfigError, match="algo=pqn_vdn takes discrete actions; MPE_simple_world_comm_v3 has Box"):
        make_trainer(config, make_adapter(config))


def test_one_update_runs_and_reports_q_metrics():
    config = load_config(None, [*SETTINGS, "num_envs=8", "num_steps=8", "total_timesteps=64"])
    trainer = make_trainer(config, make_adapter(config))
    state, metrics = jax.jit(trainer.update)(trainer.init(jax.random.PRNGKey(0)))
    assert set(metrics.values) >= {"loss_total", "q_mean", "grad_norm", "lr", "epsilon"}
    assert float(metrics["epsilon"]) == pytest.approx(1.0) and int(state.learner.update) == 1


@pytest.mark.slow
def test_a_memory_window_leads_the_sequences_once_it_holds_a_rollout():
    """JaxMARL's MEMORY_WINDOW. The first update's window holds no rollout yet (weight 0, and the GRU
    restarts at the rollout's first step): it learns what no window learns, equal to float reduction
    order (measured: bitwise equal here). The second learns the window's steps too, so it differs (the control; measured max |diff| 3.7e-3)."""
    base = ["algo=pqn_vdn", "recurrent=true", "pqn.minibatch_split=envs", "num_envs=8", "num_steps=6",
            "total_timesteps=96", "hidden_size=16", "gru_hidden_size=16"]  # fmt: skip
    runs = {}
    for w in (0, 3):
        config = load_config(None, [*base, f"pqn.memory_window={w}"])
        trainer = make_trainer(config, make_adapter(config))
        update = jax.jit(trainer.update)
        first, _ = update(trainer.init(jax.random.PRNGKey(0)))
        runs[w] = (first, update(first)[0])
    (one0, two0), (one3, two3) = runs[0], runs[3]
    close = lambda a, b: jax.tree.all(jax.tree.map(lambda x, y: bool(np.allclose(x, y, rtol=1e-5, atol=1e-6)), a, b))  # noqa: E731
    assert close(one0.learner.params, one3.learner.params)
    assert not close(two0.learner.params, two3.learner.params)
    assert one0.extra is None and int(one3.learner.update) == 1  # the window counts from the second update on
    window = one3.extra["steps"][0]  # the first rollout's last 3 steps, in the learning layout [3, E, A, ...]
    assert window["obs"]["agents"].shape[:3] == (3, 8, 3) and np.any(window["obs"]["agents"] != 0)


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); IPPO's one-vs-eight-devices runs the data axis in CI
@pytest.mark.optimized  # its tolerance is a drift measured on optimised compiles (tests/conftest.py)
def test_pqn_vdn_same_numbers_on_one_and_two_data_devices(tmp_path):
    """Shared parameters: splitting the environments over mesh.data changes nothing (the GRU
    variant on mesh.data x mesh.agent is in the next test). 8 updates, 2 seeds: Q-network, Adam
    moments and every metric of every update."""
    base = [*SETTINGS, "num_seeds=2", "num_envs=8", "num_steps=16", "total_timesteps=1024", "num_chunks=8"]
    _, one = train_runs(tmp_path, base, [("one", ["mesh.data=1"])], 1)["one"]
    _, two = train_runs(tmp_path, base, [("two", ["mesh.data=2"])], 2)["two"]
    assert len(one["['rows']['update']"]) == 8
    # measured: learner max |diff| 1.2e-7, metrics 3.8e-6 (relative 1e-7); PQN_ATOL, PQN_RTOL 8x and 40x
    assert_same_run(one, two, atol=PQN_ATOL, rtol=PQN_RTOL, controls=(SEEDS,))


@pytest.mark.slow
@pytest.mark.parametrize("runs", [
    # nightly: the GRU on the agent axis (78 s here against 47 s); CI keeps the feed-forward one, and
    # test_replay_agent_axis.py a replayed GRU (QMIX) on mesh.agent=2
    # (the GRU compiles optimised: its tolerance is a drift measured so; the feed-forward one compiles
    # unoptimised, tests/conftest.py, measured so: learner 1.2e-7, metrics 1.1e-5 on 60.2, 0.08 of it)
    pytest.param([("rnn", ["recurrent=true"])], id="rnn", marks=[pytest.mark.nightly, pytest.mark.optimized]),
    pytest.param([("ff", ["recurrent=false"])], id="ff", marks=pytest.mark.nightly),  # since 2026-11-28: CI's time (issue 63)
])  # fmt: skip
def test_pqn_vdn_independent_agents_on_the_agent_axis_match_one_device(runs, tmp_path):
    """4 agents' Q-networks split over mesh.agent=2 (x mesh.data=2; 4 fake devices), feed-forward
    and recurrent: the targets come from the acting layout, each device trains its agents'
    networks on Q_tot whose other part comes from the other device, and the learner's whole
    state and every metric equal one device's for 8 updates."""
    from tests.test_agent_axis import SPREAD4

    base = [*SETTINGS, *SPREAD4, "lr=2.5e-4", "num_envs=16", "total_timesteps=4096", "num_chunks=8"]
    one = train_runs(tmp_path / "one", base, runs, 1)
    four = train_runs(tmp_path / "four", base, [(n, o + ["mesh.data=2", "mesh.agent=2"]) for n, o in runs], 4)
    for name, _ in runs:
        (_, a), (info, b) = one[name], four[name]
        assert info["mesh"]["agent"] == 2 and len(a["['rows']['update']"]) == 8
        # one seed: the control is two agents' parameter sets exchanged
        assert_same_run(a, b, atol=PQN_ATOL, rtol=PQN_RTOL, controls=(AGENTS,))
