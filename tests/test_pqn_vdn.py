"""PQN-VDN: its targets use the team reward, its configuration errors name the field, and
mesh.data does not change its numbers. That it learns: tests/test_defaults_learn.py."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from marljax.config import ConfigError, load_config
from marljax.train.wiring import make_adapter, make_trainer
from tests._subprocess import run_with_devices

SETTINGS = ["algo=pqn_vdn", "activation=relu", "lr=2e-3", "num_envs=64", "num_steps=32", "pqn.update_epochs=2",
            "pqn.num_minibatches=2", "q.eps_decay_steps=5e5", "progress=false", "plot=false"]  # fmt: skip


@pytest.mark.parametrize(
    "change, field",
    [
        (["mesh.agent=2"], "mesh.agent"),  # per-agent parameter sets to split: param_sharing=independent
        (["q.eps_start=0.1", "q.eps_finish=0.5"], "q.eps_finish"),
        (["q.td_lambda=1.5"], "q.td_lambda"),
        (["q.eps_decay_steps=0"], "q.eps_decay_steps"),
    ],
)
def test_bad_q_learning_settings_name_the_field(change, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*SETTINGS, *change])
    assert info.value.field == field


def test_box_actions_are_refused_before_compiling():
    config = load_config(None, [*SETTINGS, "env=MPE_simple_world_comm_v3"])
    with pytest.raises(ConfigError, match="needs discrete actions"):
        make_trainer(config, make_adapter(config))


def test_one_update_runs_and_reports_q_metrics():
    config = load_config(None, [*SETTINGS, "num_envs=8", "num_steps=8", "total_timesteps=64"])
    trainer = make_trainer(config, make_adapter(config))
    state, metrics = jax.jit(trainer.update)(trainer.init(jax.random.PRNGKey(0)))
    assert set(metrics) >= {"loss_total", "q_mean", "grad_norm", "lr", "epsilon", "episodes"}
    assert float(metrics["epsilon"]) == pytest.approx(1.0) and int(state.learner.update) == 1


@pytest.mark.slow
def test_pqn_vdn_same_numbers_on_one_and_two_data_devices(tmp_path):
    """Shared parameters: splitting the environments over mesh.data changes nothing (the GRU
    variant on mesh.data x mesh.agent is in the next test)."""
    code = """
    import json
    from marljax.config import load_config
    from marljax.train.loop import train
    cfg = load_config(None, {settings} + ["num_envs=8", "num_steps=16", "total_timesteps=1024", "num_chunks=2",
                                          "mesh.data={data}", "out_dir={out}"])
    print(json.dumps([r["loss_total"] for r in train(cfg, log=lambda s: None).rows]))
    """
    one = run_with_devices(code.format(settings=SETTINGS, data=1, out=tmp_path / "one"), 1)
    two = run_with_devices(code.format(settings=SETTINGS, data=2, out=tmp_path / "two"), 2)
    assert len(one) == 2
    np.testing.assert_allclose(one, two, rtol=1e-4)


_AGENT_AXIS_RUNS = """
import json
from marljax.config import load_config
from marljax.train.loop import train
out = []
for rnn in ("false", "true"):
    cfg = load_config(None, {base} + ["recurrent=" + rnn, "out_dir={out}/" + rnn] + {mesh})
    res = train(cfg, log=lambda s: None)
    params = jax.device_get(res.state.learner.params)
    out.append({{"mesh": dict(res.state.learner.key.sharding.mesh.shape), "returns": [r["return_mean"] for r in res.rows],
                 "losses": [r["loss_total"] for r in res.rows],
                 "params": [np.asarray(x).ravel()[:64].tolist() for x in jax.tree.leaves(params)]}})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_pqn_vdn_independent_agents_on_the_agent_axis_match_one_device(tmp_path):
    """4 agents' Q-networks split over mesh.agent=2 (x mesh.data=2; 4 fake devices), feed-forward
    and recurrent: the targets come from the acting layout, each device trains its agents'
    networks on Q_tot whose other part comes from the other device, and returns, losses and
    parameters equal one device's."""
    from tests.test_agent_axis import SPREAD4, _same_run

    base = [*SETTINGS, *SPREAD4, "lr=2.5e-4", "num_envs=16", "total_timesteps=4096", "num_chunks=4",
            "progress=false", "plot=false"]  # fmt: skip
    code = "import jax, numpy as np\n" + _AGENT_AXIS_RUNS
    one = run_with_devices(code.format(base=base, mesh=[], out=tmp_path / "one"), 1)
    four = run_with_devices(code.format(base=base, mesh=["mesh.data=2", "mesh.agent=2"], out=tmp_path / "four"), 4)
    for a, b in zip(one, four):  # feed-forward, then recurrent
        assert b["mesh"]["agent"] == 2 and len(a["returns"]) == 4
        _same_run(a, b)
