"""mode=async on several processes: two local processes over loopback (gloo), each with 1 actor and
1 learner fake CPU device, against one process with 2 actor + 2 learner devices, deterministic;
free-running with drop, balance=rate and recording on each process's own buffer; and the setting
refused with distributed.* (pipeline/processes.py says why)."""

from __future__ import annotations

import json

import pytest

from marljax.config import ConfigError, load_config
from tests._multihost import one_process, two_processes, whole_run
from tests._trees import SEEDS, assert_same_run

# the tolerances below are drifts measured on optimised compiles (tests/conftest.py)
pytestmark = pytest.mark.optimized

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


# the learner made slow (0.3 s more per update) in both processes, so each process's two actor
# threads produce faster than the learner consumes and max_staleness=0 makes them drop
SLOW_LEARNER = ("import time, marljax.pipeline.actor_learner as al\n"
                "_shard = al.shard_learn\n"
                "def _slow(*a, **k):\n"
                "    learn = _shard(*a, **k)\n"
                "    return lambda *x: (time.sleep(0.3), learn(*x))[1]\n"
                "al.shard_learn = _slow")  # fmt: skip


@pytest.mark.slow
def test_drop_balance_and_recording_run_on_each_processs_own_buffer(tmp_path):
    """Two processes, free-running (not deterministic), staleness_policy=drop, balance=rate and
    recording: each process drops its own stale batches and paces its own actors, the learners
    stay in lockstep (one fresh local batch each per update), every row lists every process's
    counters and each process records its own slice."""
    from marljax.pipeline.recorder import load_trajectories

    # 8 updates of 8 envs x 16 steps in 4 chunks
    run = [r for r in RUN if not r.startswith(("async.deterministic", "total_timesteps"))] + [
        "total_timesteps=1024", "async.staleness_policy=drop", "async.max_staleness=0", "async.num_actor_threads=2",
        "async.balance=rate", f"async.record_trajectories={tmp_path / 'data'}"]  # fmt: skip
    results = two_processes(["train", *run, *TWO, f"out_dir={tmp_path / 'run'}"], prelude=SLOW_LEARNER)
    for rc, text in results:
        assert rc == 0, text[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [2, 4, 6, 8]
    for r in rows:
        by = r["by_process"]
        assert by["consumed"] == [r["update"]] * 2  # lockstep: one local batch per process per update
        for p in range(2):  # each process's own accounting
            assert by["produced"][p] == by["consumed"][p] + by["dropped"][p] + by["held"][p], (p, by)
            assert 1 <= by["active_actors"][p] <= 2
        assert (r["produced"], r["dropped"], r["active_actors"]) == (by["produced"][0], by["dropped"][0],
                                                                     by["active_actors"][0])  # fmt: skip
        assert r["staleness_max"] == 0  # nothing staler than K reached a learner
    last = rows[-1]["by_process"]
    print(f"\nafter 8 updates, by process: produced {last['produced']}, dropped {last['dropped']}")
    assert min(last["dropped"]) > 0, "the slow learner should have left stale batches in both processes"
    # (that the lists hold each process's own values, in process order: tests/test_multihost.py,
    # test_every_process_gathers_each_processs_values_in_process_order)
    for p in range(2):  # process p's dataset: its 8 consumed batches, its 4 of the 8 environments
        data = load_trajectories(tmp_path / "data" / f"process_{p}")
        assert list(data["learner_version"]) == list(range(8)) and data["batch.agents.obs"].shape[3] == 4, \
            sorted((k, v.shape) for k, v in data.items())


def test_mesh_agent_is_refused_with_distributed():
    dist = ["distributed.coordinator=127.0.0.1:1", "distributed.num_processes=2"]
    load_config(None, ["mode=async", "async.staleness_policy=drop", "async.balance=rate", *dist])  # allowed
    with pytest.raises(ConfigError, match=r"mesh\.agent.*copies a whole replica.*allowed: 1"):
        load_config(None, ["mode=async", "mesh.agent=2", "param_sharing=independent", *dist])


def test_a_resumed_run_adds_each_processs_counters_to_those_before():
    from marljax.train.loop import _add_counters

    zero = dict(env_failures=0, env_restarts=0, env_retired=0, env_steps_discarded=0)
    before = {"produced": 10, "consumed": 8, "dropped": 2, "dropped_by_reason": {"stale": 2}, **zero,
              "by_process": {"produced": [10, 12], "consumed": [8, 8], "dropped": [2, 3], "held": [0, 1],
                             "active_actors": [2, 1]}}  # fmt: skip
    now = {"produced": 5, "consumed": 4, "dropped": 1, "dropped_by_reason": {"stale": 1}, **zero,
           "by_process": {"produced": [5, 6], "consumed": [4, 4], "dropped": [1, 0], "held": [0, 2],
                          "active_actors": [1, 2]}}  # fmt: skip
    out = _add_counters(before, now)
    assert (out["produced"], out["consumed"], out["dropped"], out["dropped_by_reason"]) == (15, 12, 3, {"stale": 3})
    assert out["by_process"] == {"produced": [15, 18], "consumed": [12, 12], "dropped": [3, 3], "held": [0, 2],
                                 "active_actors": [1, 2]}  # states, not counts: this session's  # fmt: skip
    assert "by_process" not in _add_counters({}, {k: v for k, v in now.items() if k != "by_process"})


@pytest.mark.slow
@pytest.mark.nightly  # about 1.5 min here; CI runs the JAX-env pipeline on two processes above
def test_host_envs_on_two_processes_step_their_own_seeded_slices(tmp_path):
    """PettingZoo envs stepped on the host, two processes: each process's actor makes its slice of
    the copies (4 of 8 per seed) with seeds of its own, so the two processes' recorded batches
    hold 4 environments each and different episodes; the learners stay in lockstep."""
    import numpy as np

    from marljax.pipeline.recorder import load_trajectories

    run = ["mode=async", "env=pettingzoo:marljax.envs.host_spread:parallel_env", "num_envs=8", "num_steps=16",
           "total_timesteps=512", "num_chunks=2", "async.max_staleness=1", "progress=false", "plot=false",
           f"async.record_trajectories={tmp_path / 'data'}", f"out_dir={tmp_path / 'run'}"]  # fmt: skip
    for rc, text in two_processes(["train", *run, *TWO]):
        assert rc == 0, text[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["update"] == 4 and rows[-1]["by_process"]["consumed"] == [4, 4]
    obs = [load_trajectories(tmp_path / "data" / f"process_{p}")["batch.agents.obs"] for p in range(2)]
    assert obs[0].shape == obs[1].shape and obs[0].shape[:4] == (4, 1, 16, 4)  # [N, S, T, E, ...]: 4 envs each
    assert not np.allclose(obs[0][0, 0, 0], obs[1][0, 0, 0]), "both processes reset their copies with the same seeds"
