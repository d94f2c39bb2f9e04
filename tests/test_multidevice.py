"""The same config and seeds give the same results on 1 device and on 8 fake CPU devices: the
learner's whole state (parameters and Adam moments of every seed and agent, keys, counts) and
every metric of every update, equal to float reduction order."""

import pytest

from tests._subprocess import train_runs
from tests._trees import assert_same_run

# the tolerances below are drifts measured on optimised compiles (tests/conftest.py)
pytestmark = pytest.mark.optimized

# 8 updates, one metrics row each. JaxMARL's lr: a small step keeps reduction-order noise from
# being amplified (by flipped sampled actions) past float tolerance within these 8 updates.
BASE = ["num_envs=16", "num_seeds=2", "num_steps=32", "total_timesteps=4096", "num_chunks=8", "lr=2.5e-4"]
# Equal to float reduction order for 8 updates. Measured on a 2-core CPU machine (all three cases):
# the learner's state max |diff| 6e-8 (parameters and Adam moments); the metrics max |diff| 7.6e-6
# on returns and losses of size ~30 (relative 2.3e-7), 9e-8 on loss_actor and approx_kl (~1e-5).
# Tolerance |diff| <= ATOL + RTOL * |x|, 5-10x those. The controls differ by 0.7-1.0.
ATOL, RTOL = 5e-7, 2e-6


def run(tmp_path, name: str, overrides: list[str], devices: int) -> tuple[dict, dict]:
    """One training run of BASE + overrides on `devices` fake devices: (its mesh info, its whole run tree)."""
    return train_runs(tmp_path, BASE, [(name, overrides)], devices)[name]


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra,mesh8",
    [
        # nightly: the independent4 case below runs the same mesh (and feed-forward) in CI
        pytest.param([], ["mesh.seed=2", "mesh.data=4"], marks=pytest.mark.nightly),
        pytest.param(["recurrent=true"], ["mesh.seed=1", "mesh.data=8"], marks=pytest.mark.nightly),  # CI: independent4
        (
            ["param_sharing=independent", "env_kwargs.num_agents=4", "env_kwargs.num_landmarks=4"],
            ["mesh.seed=2", "mesh.data=4"],
        ),
    ],
    ids=["ff-seed2xdata4", "rnn-data8", "independent4-seed2xdata4"],
)
def test_one_vs_eight_devices(tmp_path, extra, mesh8):
    (info1, one), (info8, eight) = run(tmp_path, "one", extra, 1), run(tmp_path, "eight", extra + mesh8, 8)
    assert info1["devices"] == 1 and info8["devices"] == 8
    assert info8["mesh"]["seed"] * info8["mesh"]["data"] == 8
    assert len(one["['rows']['update']"]) == 8
    assert_same_run(one, eight, atol=ATOL, rtol=RTOL)
