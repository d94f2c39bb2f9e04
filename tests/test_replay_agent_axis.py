"""IQL, VDN and QMIX on the `agent` mesh axis (param_sharing=independent): each device learns its
agents' Q-networks from its own agents' replay fields, and the whole run (learner, target
network, replay buffer, every metric) equals one device's."""

from __future__ import annotations

import pytest

from marljax.config import ConfigError, load_config
from marljax.train.wiring import prepare
from tests._subprocess import train_runs
from tests._trees import AGENTS, assert_same_run
from tests.test_agent_axis import SPREAD4

# 10 updates of 8 envs x 8 steps; learning from update 2 (learning_starts=128), 2 gradient steps of
# 8 sequences each, the target copied every 3 updates: 8 updates learn, 3 target copies
SETTINGS = [*SPREAD4, "activation=relu", "lr=2e-3", "gamma=0.9", "hidden_size=32", "num_envs=8", "num_steps=8",
            "total_timesteps=640", "num_chunks=10", "replay.buffer_size=32", "replay.batch_size=8",
            "replay.gradient_steps=2", "replay.learning_starts=128", "replay.target_update_interval=3",
            "q.eps_decay_steps=2000"]  # fmt: skip
ATOL, RTOL = 1e-6, 4e-6


def _compare(runs: list[tuple[str, list[str]]], mesh: list[str], n_devices: int, tmp_path) -> None:
    one = train_runs(tmp_path / "one", SETTINGS, runs, 1)
    many = train_runs(tmp_path / "many", SETTINGS, [(n, o + mesh) for n, o in runs], n_devices)
    for name, _ in runs:
        (_, a), (info, b) = one[name], many[name]
        assert info["mesh"]["agent"] > 1 and len(a["['rows']['update']"]) == 10
        assert_same_run(a, b, atol=ATOL, rtol=RTOL, controls=(AGENTS,))


@pytest.mark.slow
def test_replay_algorithms_on_agent_axis_2_match_one_device(tmp_path):
    runs = [("iql", ["algo=iql"]), ("vdn", ["algo=vdn"]), ("qmix", ["algo=qmix"]),
            ("qmix_gru", ["algo=qmix", "recurrent=true"])]  # fmt: skip
    _compare(runs, ["mesh.agent=2"], 2, tmp_path)
