"""async.micro_batches=M: actors hand their rollouts to the buffer in M env slices, the learner joins M.

M = 1 stays today's pipeline bitwise (checked against a thread-free replay of deterministic
lockstep made of the same jitted pieces); M = 2 in deterministic mode computes the same updates as
M = 1 up to float reduction order, every slice with its own version stamp and staleness.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from marljax.config import ConfigError, load_config, replace
from marljax.pipeline.buffer import Stamped, TrajectoryBuffer
from marljax.pipeline.recorder import load_trajectories
from marljax.train.actor_learner import AsyncRun
from marljax.train.loop import train
from marljax.train.wiring import make_adapter, make_trainer

SMALL = ["mode=async", "num_envs=8", "num_steps=16", "total_timesteps=2048", "num_chunks=4",
         "progress=false", "plot=false"]  # fmt: skip
LOCKSTEP = ["mode=async", "num_envs=8", "num_steps=16", "async.deterministic=true", "async.max_staleness=1"]
UPDATES, K = 8, 1


def test_config_errors_name_the_field_and_what_is_allowed():
    with pytest.raises(ConfigError, match=r"async\.micro_batches.*must divide num_envs=8.*allowed: 1, 2, 4, 8; got 3"):
        load_config(None, SMALL + ["async.micro_batches=3"])
    with pytest.raises(ConfigError, match=r"async\.micro_batches"):
        load_config(None, SMALL + ["async.micro_batches=0"])
    assert load_config(None, SMALL + ["async.micro_batches=2", "async.balance=rate"]).async_.balanced()  # counts slices
    assert load_config(None, SMALL).async_.micro_batches == 1


def test_buffer_tickets_and_staleness_are_per_slice():
    M, cap = 2, 2
    buf = TrajectoryBuffer(cap, max_staleness=1, policy="block", micro_batches=M)
    starts = [buf.start(timeout=0) for _ in range(cap * M)]  # capacity counts batches of M slices
    assert starts == [(0, 0), (1, 0), (2, 0), (3, 0)]  # ticket t: version >= t // M - K
    with pytest.raises(TimeoutError):
        buf.start(timeout=0)
    for t in (1, 0, 3, 2):  # out of order: the learner still takes tickets in order
        buf.put(Stamped(f"slice{t}", 0, 0, t, t))
    assert [buf.get(timeout=0).data for _ in range(M)] == ["slice0", "slice1"]
    assert buf.finish_update() == 1
    assert buf.start(timeout=0) == (4, 1)  # update 2's first slice: version >= 1
    assert [buf.get(timeout=0).data for _ in range(M)] == ["slice2", "slice3"]
    stats = buf.stats()
    assert stats.consumed == 4 and stats.staleness_hist == {0: 2, 1: 2}


def test_a_claim_reserves_a_whole_update_within_capacity():
    """Host env threads claim an update's M slices at once (buffer.start(count=M))."""
    M, cap = 2, 2
    buf = TrajectoryBuffer(cap, max_staleness=1, policy="block", micro_batches=M)
    assert [buf.start(timeout=0, count=M) for _ in range(cap)] == [(0, 0), (2, 0)]  # aligned to updates
    with pytest.raises(TimeoutError):  # capacity: two batches of M slices started, none consumed
        buf.start(timeout=0, count=M)
    for t in range(M):
        buf.put(Stamped(f"slice{t}", 0, 0, t, t))
    assert [buf.get(timeout=0).data for _ in range(M)] == ["slice0", "slice1"]
    assert buf.finish_update() == 1
    assert buf.start(timeout=0, count=M) == (4, 1)  # update 2's slices: version >= 2 - K


def _runner(extra: list[str]) -> AsyncRun:
    config = load_config(None, LOCKSTEP + extra)
    return AsyncRun(config, make_adapter(config), make_trainer, log=lambda s: None)


def _run(runner: AsyncRun, initial) -> tuple[list, dict, object]:
    """`runner.run(UPDATES)` from `initial` (a host copy of the learner; `learn` donates it):
    (the chunks' metrics, stacked over updates; the async rows; the final learner on the host)."""
    runner.learner = jax.device_put(initial, jax.tree.map(lambda x: x.sharding, runner.learner))
    chunks: list = []
    runner.run(UPDATES, lambda m, wall, row, learner: chunks.append((jax.device_get(m), row)), chunk=UPDATES // 2)
    metrics = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *[m for m, _ in chunks])  # [S, UPDATES]
    return metrics, [row for _, row in chunks], jax.device_get(runner.learner)


def _lockstep_replay(runner: AsyncRun, initial) -> tuple[dict, object]:
    """Deterministic lockstep as documented, with no thread and no buffer: batch u is collected by
    actor thread 0 with exactly version max(0, u - K) and the keys of ticket u, then learned."""
    learner = jax.device_put(initial, jax.tree.map(lambda x: x.sharding, runner.learner))
    keys = runner.thread_keys(0)
    actors = runner.actor_init(keys)
    versions, metrics = [initial.params], []
    for u in range(UPDATES):
        actors, traj = runner.collect(versions[max(0, u - K)], actors, runner.step_keys(keys, u))
        learner, m = runner.learn(learner, runner.to_learner_mesh(traj))
        versions.append(jax.device_get(learner.params))
        metrics.append(jax.device_get(m))
    return jax.tree.map(lambda *xs: np.stack(xs, axis=1), *metrics), jax.device_get(learner)  # [S, UPDATES]


@pytest.fixture(scope="module")
def lockstep_runs(tmp_path_factory) -> dict:
    one = _runner([])
    initial = jax.device_get(one.learner)
    out = {"replay": _lockstep_replay(one, initial), "m1": _run(one, initial)}
    out["recorded"] = tmp_path_factory.mktemp("m2") / "slices"
    two = _runner(["async.micro_batches=2", f"async.record_trajectories={out['recorded']}"])
    two.learn = one.learn  # the learner does not depend on M: compile it once (its rollouts are M=2's own)
    out["m2"] = _run(two, initial)
    return out


@pytest.mark.slow
def test_one_micro_batch_is_todays_lockstep_bitwise(lockstep_runs):
    (m_replay, l_replay), (m_run, rows, l_run) = lockstep_runs["replay"], lockstep_runs["m1"]
    jax.tree.map(np.testing.assert_array_equal, m_replay, m_run)
    jax.tree.map(np.testing.assert_array_equal, l_replay, l_run)
    assert all("slice_versions" not in row for row in rows)  # M = 1 rows carry today's fields only
    assert rows[-1]["consumed"] == rows[-1]["policy_version"] == UPDATES


def test_two_micro_batches_stamp_every_slice_and_match_one(lockstep_runs):
    (m1, _, l1), (m2, rows, l2) = lockstep_runs["m1"], lockstep_runs["m2"]
    versions = [v for row in rows for v in row["slice_versions"]]  # per update, its 2 slices
    staleness = [s for row in rows for s in row["slice_staleness"]]
    assert versions == [[max(0, u - K)] * 2 for u in range(UPDATES)]  # lockstep: exactly version u - K
    assert staleness == [[min(u, K)] * 2 for u in range(UPDATES)]
    assert all(row["staleness_max"] == max(max(s) for s in row["slice_staleness"]) for row in rows)
    assert rows[0]["staleness_mean"] == np.mean(rows[0]["slice_staleness"])  # over the chunk's slices
    assert rows[-1]["consumed"] == 2 * UPDATES and rows[-1]["policy_version"] == UPDATES
    # the same batches, cut and joined: equal up to float reduction order (measured: relative 1e-7)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), m1, m2)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), l1.params, l2.params)


def test_recorded_slices_keep_their_own_stamps(lockstep_runs):
    data = load_trajectories(lockstep_runs["recorded"])
    assert data["ticket"].tolist() == list(range(2 * UPDATES))  # one item per slice, in ticket order
    assert data["learner_version"].tolist() == [u for u in range(UPDATES) for _ in range(2)]
    assert np.all(data["version"] == np.maximum(0, data["learner_version"] - K))
    assert data["batch.agents.obs"].shape[1:4] == (1, 16, 4)  # [slices, S, T, E/M, ...]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["async.correction=vtrace", "recurrent=true", "async.balance=rate"]],
                         ids=["vtrace-gru-2-actors-balanced"])  # fmt: skip
def test_micro_batches_with_correction_learn_every_env_step(tmp_path, extra):
    """Free-running (not lockstep): 2 actor threads, slices of whichever thread is ready, the
    balance controller steering them (its window in slices)."""
    cfg = load_config(None, SMALL + extra + ["async.micro_batches=2", "async.num_actor_threads=2",
                                             f"out_dir={tmp_path}"])  # fmt: skip
    res = train(cfg, log=lambda s: None)
    one = replace(cfg, **{"async": {"micro_batches": 1}})
    per_update = one.num_steps * one.num_envs
    assert [r["env_steps"] for r in res.rows] == [r["update"] * per_update for r in res.rows]
    assert res.rows[-1]["update"] == one.num_updates == 16
    for r in res.rows:
        assert np.isfinite(r["loss_total"]) and np.isfinite(r["loss_value"])
        assert r["produced"] == r["consumed"] + r["dropped"] + r["buffer_occupancy"]
        assert all(len(u) == 2 and max(u) <= cfg.async_.max_staleness for u in r["slice_staleness"])
        assert 1 <= r["active_actors"] <= 2 and (r["batch_window"] is None or r["batch_window"] >= 1)
        assert r["balance_target"] == 0
    assert res.rows[-1]["consumed"] == 2 * 16


HOST = ["mode=async", "env=pettingzoo:tests.flaky_env:parallel_env", "num_envs=4", "num_steps=8", "hidden_size=16",
        "total_timesteps=640", "num_chunks=5", "progress=false", "plot=false", "async.micro_batches=2"]  # fmt: skip


@pytest.mark.parametrize("extra", [
    ["async.deterministic=true", "async.max_staleness=1"],  # lockstep: M collectors of 2 copies, in turn
    ["async.num_actor_threads=2", "env_kwargs.fail_p=0.3", "async.max_env_failures=50"],  # independent, failing copies
], ids=["lockstep-deterministic", "independent-2-actors-failing"])  # fmt: skip
def test_host_env_copies_hand_over_slices(tmp_path, extra):
    pytest.importorskip("pettingzoo")
    record = tmp_path / "consumed"
    cfg = load_config(None, HOST + extra + [f"out_dir={tmp_path}", f"async.record_trajectories={record}"])
    res = train(cfg, log=lambda s: None)
    updates, per_update = cfg.num_updates, cfg.num_steps * cfg.num_envs
    assert res.rows[-1]["update"] == updates == 20
    assert [r["env_steps"] for r in res.rows] == [r["update"] * per_update for r in res.rows]
    for r in res.rows:  # every row: nothing lost, every update made of 2 slices within the bound
        assert r["produced"] == r["consumed"] + r["dropped"] + r["buffer_occupancy"], r
        assert r["env_failures"] == r["env_restarts"] + r["env_retired"], r
        assert all(len(u) == 2 and max(u) <= cfg.async_.max_staleness for u in r["slice_staleness"])
        assert np.isfinite(r["loss_total"])
    assert res.rows[-1]["consumed"] == 2 * updates
    versions = [v for r in res.rows for v in r["slice_versions"]]
    stamps = load_trajectories(record)
    assert stamps["ticket"].tolist() == list(range(2 * updates))
    if cfg.async_.deterministic:  # lockstep: every slice of update u has exactly version u - K
        assert versions == [[max(0, u - 1)] * 2 for u in range(updates)]
    else:
        assert res.rows[-1]["env_failures"] >= 3  # copies failed and were restarted while slices flowed
        # 2 threads: each claims both slices of an update (host_copies.py), so they are its
        # consecutive items (with one lockstep thread this would hold trivially)
        assert np.all(stamps["actor"][0::2] == stamps["actor"][1::2])
        assert np.all(stamps["seq"][1::2] == stamps["seq"][0::2] + 1)
