"""mode=async on several processes: two local processes over loopback (gloo), each with 1 actor and
1 learner fake CPU device, against one process with 2 actor + 2 learner devices, deterministic;
the same with the agents split over mesh.agent=2 (2 learner devices per process); free-running
with drop, balance=rate and recording on each process's own buffer; and an agent axis that would
cross processes, refused (pipeline/processes.py says why)."""

from __future__ import annotations

import json

import pytest

from marljax.config import ConfigError, load_config
from tests._multihost import one_process, two_processes, whole_run
from tests._trees import AGENTS, SEEDS, assert_same_run

# the equality tests compile optimised (their tolerance is a drift measured so, tests/conftest.py);
# the others check counts, refusals and bitwise copies, which hold either way

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
@pytest.mark.optimized
def test_two_processes_match_one_process_with_the_same_devices(tmp_path):
    (_, primary), (_, other) = _two(tmp_path / "two")
    assert "actors: 1 thread(s) on 1 cpu device(s); learner on 2 cpu" in primary  # the learner mesh spans both
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
SLOW_LEARNER = ("import time, marljax.train.actor_learner as al\n"
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
        assert list(data["learner_version"]) == list(range(8)) and data["batch.agents.obs"].shape[3] == 4, sorted(
            (k, v.shape) for k, v in data.items()
        )


# 4 agents, one parameter set each, split over mesh.agent=2: per process 1 actor + 2 learner devices
AGENT_SPLIT = ["param_sharing=independent", "env_kwargs.num_agents=4", "env_kwargs.num_landmarks=4", "mesh.agent=2"]


@pytest.mark.nightly  # about 4 min here (2 runs, 3 processes)
@pytest.mark.optimized
def test_two_processes_split_agents_over_mesh_agent_like_one_process(tmp_path):
    """mesh.agent=2 on two processes: each process's two learner devices hold one data shard's
    two agent shards, so its actors' replica is put together from its own devices and only the
    gradient average crosses processes; equal to one process with 2 actor + 4 learner devices."""
    run = ["train", *RUN, *AGENT_SPLIT, "async.actor_devices=1", "async.learner_devices=2"]
    results = two_processes([*run, f"out_dir={tmp_path / 'two'}"], devices=3)
    for rc, text in results:
        assert rc == 0, text[-3000:]
    assert "learner on 4" in results[0][1], results[0][1][-2000:]
    one_process(["train", *RUN, *AGENT_SPLIT, "async.actor_devices=2", "async.learner_devices=4",
                 f"out_dir={tmp_path / 'one'}"], devices=6)  # fmt: skip
    one, two = whole_run(tmp_path / "one", 4), whole_run(tmp_path / "two", 4)
    # the same batches and learner program; the gradient all-reduce over `data` crosses processes
    # (gloo), adding in another order: equal to float reduction order for 4 updates. Measured (every
    # seed and agent, the whole learner state and every metrics row): max |diff| 1.5e-7 in the
    # parameters, 3.8e-6 on loss_value ~30; at most 0.10 of the tolerance, 1e-6 + 2e-6 |x| (as the
    # mesh.agent=1 case above). The seed and agent controls (seeds, or agents 0 and 1, exchanged in
    # the parameters and Adam moments) differ by 1.0 and 0.97
    assert_same_run(one, two, atol=1e-6, rtol=2e-6, controls=(SEEDS, AGENTS))


def test_an_agent_axis_that_would_cross_processes_is_refused(monkeypatch):
    """With several processes the mesh's agent axis must lie within each process (every process
    holds every agent's parameters for its actors): 1 learner device per process and mesh.agent=2
    is refused naming the field, before anything is compiled; so are micro-batches that do not
    divide a process's share of the environments."""
    import jax

    import marljax.pipeline.async_mesh as am

    class FakeDevice:
        def __init__(self, process: int, i: int):
            self.process_index, self.id = process, i

    devices = [FakeDevice(p, i) for p in range(2) for i in range(3)]  # 2 processes x 3 devices

    def _placement(config):
        return am.async_placement(config.async_, config.mesh.agent, config.num_envs)

    made = []
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "devices", lambda: devices)
    monkeypatch.setattr(jax, "make_mesh", lambda shape, names, axis_types, devices: made.append((shape, devices)))
    run = ["mode=async", "num_envs=8", "param_sharing=independent", "env_kwargs.num_agents=4", "mesh.agent=2",
           "distributed.coordinator=127.0.0.1:1", "distributed.num_processes=2"]  # fmt: skip
    # 1 learner device per process: refused, naming the field (the config's own checks allow it)
    config = load_config(None, run + ["async.actor_devices=1", "async.learner_devices=1"])
    with pytest.raises(ConfigError, match=r"mesh\.agent.*2 must divide each process's 1 learner devices"):
        _placement(config)
    assert not made
    # 2 per process: a (2 data, 2 agent) mesh whose rows are each one process's learner devices
    _placement(load_config(None, run + ["async.actor_devices=1", "async.learner_devices=2"]))
    ((shape, learners),) = made
    assert shape == (2, 2) and [(d.process_index, d.id) for d in learners] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    # micro-batches slice each process's num_envs/2 = 4 environments: 8 divides 8 but not 4
    with pytest.raises(ConfigError, match=r"async\.micro_batches.*2 processes.*num_envs/2=4.*allowed: 1, 2, 4; got 8"):
        _placement(load_config(None, run + ["async.actor_devices=1", "async.learner_devices=2",
                                                    "async.micro_batches=8"]))  # fmt: skip


def test_local_replica_puts_agent_split_leaves_together():
    """An actor's replica of the learner's parameters (placement.local_replica): a leaf split over
    `agent` is put together from the blocks, a replicated one taken whole; the old one-shard copy
    (addressable_data(0)) would give agents 0-1 of 4 only. One process with 4 fake devices: there
    every block is this process's, as each process's are with the agent axis within it."""
    import numpy as np

    from tests._subprocess import run_with_devices

    out = run_with_devices(
        """
        import json, jax, numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        from marljax.parallel.placement import local_replica
        mesh = jax.make_mesh((2, 2), ("data", "agent"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
        x = np.arange(24, dtype=np.float32).reshape(2, 4, 3)  # [S, A, F]
        tree = {"split": jax.device_put(x, NamedSharding(mesh, P(None, "agent"))),
                "replicated": jax.device_put(x, NamedSharding(mesh, P()))}
        got = local_replica(tree)
        print(json.dumps({k: np.asarray(v).tolist() for k, v in got.items()}
                         | {"blocks": [list(s.data.shape) for s in tree["split"].addressable_shards]}))
    """,
        4,
    )
    whole = np.arange(24, dtype=np.float32).reshape(2, 4, 3).tolist()
    assert out["blocks"] == [[2, 2, 3]] * 4  # each device holds 2 of the 4 agents
    assert out["split"] == whole and out["replicated"] == whole


def test_a_resumed_run_adds_each_processs_counters_to_those_before():
    from marljax.train.loop import _add_counters

    zero = dict(
        env_failures=0, env_restarts=0, env_retired=0, env_steps_discarded=0, env_steps_inline=0, env_copies_parked=0
    )
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
@pytest.mark.nightly  # 29 s for both here; CI runs the JAX-env pipeline on two processes above
@pytest.mark.parametrize("micro_batches", [1, 2])
def test_host_envs_on_two_processes_step_their_own_seeded_slices(tmp_path, micro_batches):
    """PettingZoo envs stepped on the host, two processes: each process's actor makes its slice of
    the copies (4 of 8 per seed) with seeds of its own, so the two processes' recorded batches
    hold 4 environments each and different episodes; the learners stay in lockstep. With
    micro-batches, each process hands over its 4 in 2 slices of 2."""
    import numpy as np

    from marljax.pipeline.recorder import load_trajectories

    run = ["mode=async", "env=pettingzoo:marljax.testing.host_spread:parallel_env", "num_envs=8", "num_steps=16",
           "total_timesteps=512", "num_chunks=2", "async.max_staleness=1", "progress=false", "plot=false",
           f"async.micro_batches={micro_batches}", f"async.record_trajectories={tmp_path / 'data'}",
           f"out_dir={tmp_path / 'run'}"]  # fmt: skip
    for rc, text in two_processes(["train", *run, *TWO]):
        assert rc == 0, text[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    M = micro_batches
    assert rows[-1]["update"] == 4 and rows[-1]["by_process"]["consumed"] == [4 * M, 4 * M]
    for row in rows:
        assert row["produced"] == row["consumed"] + row["dropped"] + row["buffer_occupancy"], row
    data = [load_trajectories(tmp_path / "data" / f"process_{p}") for p in range(2)]
    obs = [d["batch.agents.obs"] for d in data]
    # [N, S, T, E, ...]: each process's 4 envs per update, in M slices
    assert obs[0].shape == obs[1].shape and obs[0].shape[:4] == (4 * M, 1, 16, 4 // M)
    for d in data:  # every slice ticket consumed once, in order (one thread per process: no claim to check)
        assert d["ticket"].tolist() == list(range(4 * M))
    assert not np.allclose(obs[0][0, 0, 0], obs[1][0, 0, 0]), "both processes reset their copies with the same seeds"
