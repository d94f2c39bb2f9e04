"""mode=async on several processes: two local processes over loopback (gloo), each with 1 actor and
1 learner fake CPU device, against one process with 2 actor + 2 learner devices, deterministic; and
the settings refused with distributed.* (pipeline/processes.py says why)."""

from __future__ import annotations

import pytest

from marljax.config import ConfigError, load_config
from tests._multihost import one_process, two_processes, whole_run
from tests._trees import SEEDS, assert_same_run

# 4 updates of 8 envs x 16 steps, 2 seeds, one row per update, a checkpoint at the end
RUN = ["mode=async", "num_envs=8", "num_steps=16", "total_timesteps=512", "num_seeds=2", "num_chunks=4",
       "async.deterministic=true", "async.max_staleness=1", "progress=false", "plot=false"]  # fmt: skip
TWO = ["async.actor_devices=1", "async.learner_devices=1"]  # per process, 2 devices each
ONE = ["async.actor_devices=2", "async.learner_devices=2"]  # 4 devices; deterministic: 1 actor thread on the first
# the negative control: each process steps the other's environment slice (exchanged env keys)
EXCHANGED = ("import jax, marljax.pipeline.processes as pr\n"
             "pr.env_share = lambda: (1 - jax.process_index(), jax.process_count())")  # fmt: skip


def _two(out, prelude: str = "") -> list[tuple[int, str]]:
    results = two_processes(["train", *RUN, *TWO, f"out_dir={out}"], prelude=prelude)
    for rc, text in results:
        assert rc == 0, text[-3000:]
    return results


@pytest.mark.nightly  # about 4 min here (3 runs, 5 processes, each compiling its own programs)
def test_two_processes_match_one_process_with_the_same_devices(tmp_path):
    (_, primary), (_, other) = _two(tmp_path / "two")
    assert "actors: 1 thread(s) on 1 device(s); learner on 2" in primary  # the learner mesh spans both
    assert "return per agent" in primary and "return per agent" not in other  # process 0 alone logs
    one_process(["train", *RUN, *ONE, f"out_dir={tmp_path / 'one'}"])
    one, two = whole_run(tmp_path / "one", 4), whole_run(tmp_path / "two", 4)
    # the same batches (process p's actor steps the environments the one-process actor gives data
    # shard p), the same learner program, but the gradient all-reduce crosses processes over gloo,
    # which adds in another order than one process: not bitwise. Measured after 4 updates (every
    # seed, the whole learner state and every metrics row): max |diff| 1.2e-7 in the parameters,
    # 2.5e-6 on return_mean ~-25 (episode sums over half the envs added across processes), relative
    # at most 1.8e-7 on losses and grad_norm; keys, update counts and versions equal. Tolerance
    # 1e-6 + 2e-6 |x| (as tests/test_multihost.py). The exchanged control below differs by 0.057 in
    # the parameters and 0.13 on loss_value.
    assert_same_run(one, two, atol=1e-6, rtol=2e-6, controls=(SEEDS,))
    # exchanged environment slices (process 0 steps process 1's environments and the other way
    # round): the same data in another order over the data shards, which must not pass
    _two(tmp_path / "exchanged", prelude=EXCHANGED)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_run(one, whole_run(tmp_path / "exchanged", 4), atol=1e-6, rtol=2e-6, controls=())


@pytest.mark.parametrize("setting, field", [
    ("async.staleness_policy=drop", r"async\.staleness_policy"), ("async.balance=rate", r"async\.balance"),
    ("async.record_trajectories=/tmp/x", r"async\.record_trajectories"), ("mesh.agent=2 param_sharing=independent", r"mesh\.agent"),
])  # fmt: skip
def test_settings_that_need_their_own_pace_are_refused_with_distributed(setting, field):
    dist = ["distributed.coordinator=127.0.0.1:1", "distributed.num_processes=2"]
    load_config(None, ["mode=async", *dist])  # allowed now: the default async settings
    with pytest.raises(ConfigError, match=field + ".*lockstep, one local batch per update"):
        load_config(None, ["mode=async", *setting.split(), *dist])
