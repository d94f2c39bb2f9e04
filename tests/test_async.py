"""mode=async: the actor-learner pipeline learns, counts exactly, reproduces in deterministic mode, stops cleanly."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

from marljax.config import ConfigError, load_config
from marljax.train.actor_learner import ActorFailed, AsyncRun
from marljax.train.loop import train
from tests._learning import FRESH, print_per_seed
from tests._subprocess import run_with_devices, train_runs
from tests._trees import AGENTS, NOT_NUMBERS, SEEDS, assert_same_run

SMALL = ["mode=async", "num_envs=8", "num_steps=16", "total_timesteps=2048", "num_chunks=4",
         "progress=false", "plot=false"]  # fmt: skip


def _rows(res):
    return [{k: v for k, v in r.items() if k not in NOT_NUMBERS} for r in res.rows]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["async.staleness_policy=drop", "async.num_actor_threads=2", "async.max_staleness=0"],
        ["async.correction=vtrace", "recurrent=true"],
        ["async.correction=none", "algo=mappo"],
    ],
    ids=["block", "drop-2-actors", "vtrace-gru", "none-mappo"],
)
def test_counters_are_exact_and_staleness_bounded(tmp_path, extra):
    logs: list[str] = []
    res = train(load_config(None, SMALL + extra + [f"out_dir={tmp_path}"]), log=logs.append)
    k = load_config(None, SMALL + extra).async_.max_staleness
    for r in res.rows:  # at every row: produced = consumed + dropped + held
        assert r["produced"] == r["consumed"] + r["dropped"] + r["buffer_occupancy"]
        assert sum(r["dropped_by_reason"].values()) == r["dropped"]
    last = res.rows[-1]
    assert last["policy_version"] == last["consumed"] == 16
    # after shutdown nothing is held: what was left is dropped with the reason "end of run"
    final = next(line for line in logs if line.startswith("async counters:"))
    produced, consumed, dropped = (int(final.split(f"{name} ")[1].split(",")[0]) for name in
                                   ("produced", "consumed", "dropped"))  # fmt: skip
    assert produced == consumed + dropped and consumed == 16
    assert all(r["staleness_max"] <= k for r in res.rows)
    assert all(np.isfinite(r["loss_total"]) for r in res.rows)


def test_deterministic_mode_reproduces_bitwise(tmp_path):
    cfg = SMALL + ["async.deterministic=true", "async.max_staleness=2"]
    a = train(load_config(None, cfg + [f"out_dir={tmp_path / 'a'}"]), log=lambda s: None)
    b = train(load_config(None, cfg + [f"out_dir={tmp_path / 'b'}"]), log=lambda s: None)
    assert _rows(a) == _rows(b)
    for x, y in zip(jax.tree.leaves(jax.device_get(a.state.learner)), jax.tree.leaves(jax.device_get(b.state.learner))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # a fixed lag: after the first K batches every batch is exactly K versions old
    assert a.rows[-1]["staleness_max"] == 2 and a.rows[-1]["staleness_mean"] == 2.0


def test_an_actor_that_raises_stops_the_run_cleanly(tmp_path, monkeypatch):
    real = AsyncRun.__init__
    calls = {"n": 0}

    def patched(self, *args, **kwargs):
        real(self, *args, **kwargs)
        collect = self.collect

        def failing(*a):
            calls["n"] += 1
            if calls["n"] == 4:
                raise RuntimeError("simulator crashed")
            return collect(*a)

        self.collect = failing

    monkeypatch.setattr(AsyncRun, "__init__", patched)
    before = threading.active_count()
    with pytest.raises(ActorFailed, match="actor thread 0 failed: RuntimeError: simulator crashed"):
        train(load_config(None, SMALL + [f"out_dir={tmp_path}"]), log=lambda s: None)
    assert threading.active_count() <= before, "an actor thread outlived the run"


def test_async_config_errors_before_anything_runs():
    with pytest.raises(ConfigError, match=r"async\.deterministic"):
        load_config(None, SMALL + ["async.deterministic=true", "async.num_actor_threads=2"])
    with pytest.raises(ConfigError, match=r"async\.staleness_policy"):
        load_config(None, SMALL + ["async.staleness_policy=sometimes"])
    with pytest.raises(ConfigError, match=r"async\.correction"):
        load_config(None, SMALL + ["async.correction=retrace"])
    with pytest.raises(ConfigError, match=r"async\.actor_devices"):
        train(load_config(None, SMALL + ["async.actor_devices=2"]), log=lambda s: None)
    with pytest.raises(ConfigError, match="disjoint"):
        load_config(None, SMALL + ["async.actor_devices=[0,1]", "async.learner_devices=[1]"])
    with pytest.raises(ConfigError, match="distinct device indices"):
        load_config(None, SMALL + ["async.actor_devices=[0,0]"])
    with pytest.raises(ConfigError, match="don't exist"):
        train(load_config(None, SMALL + ["async.actor_devices=[0]", "async.learner_devices=[5]"]), log=lambda s: None)


LEARN_CODE = """
import json
from tests._learning import learned_vs_baselines
s = learned_vs_baselines({overrides!r}, "{out}/async")
print(json.dumps({{"learned": s.learned, "noop": s.noop, "random": s.random, "per_seed": [s.learned_per_seed,
                  s.noop_per_seed, s.random_per_seed]}}))
"""
# spread at 1.5M steps on the 3 fresh seeds (FRESH), the margin by tests/test_learns.py's MARGIN_RULE. An async run
# is not reproducible (which parameter version makes each batch depends on timing; async.deterministic=true would
# fix it), so two runs were measured, 2026-11-30 (64 episodes a seed, both fake devices on one core of this 2-core
# CPU, 90-96 s): learned -18.59 / -19.65 / -18.91, then -19.82 / -18.80 / -19.41, against no-op -24.87 / -24.89 /
# -26.13 (random lower): mean gains +6.25 (+6.28 +5.24 +7.22; 2 SE 1.14, rule 5.0) and +5.95 (+5.06 +6.09 +6.71;
# 2 SE 0.95, rule 4.5): margin 4.5, the lower (2 seeds from seed 0 had been asserted at 3.0)
LEARNS = [pytest.param(["mode=async", "total_timesteps=1.5e6", *FRESH], 4.5, id="spread")]


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.nightly  # CI covers the async pipeline's correctness in the tests above
@pytest.mark.parametrize("overrides, margin", LEARNS)
def test_async_learns_on_separate_actor_and_learner_devices(overrides, margin, tmp_path):
    # 2 fake devices: actors on one, the learner on the other. Each seed's greedy policy after training against the
    # no-op and random policies on that seed's same 64 episodes.
    res = run_with_devices(LEARN_CODE.format(overrides=overrides, out=tmp_path), 2, timeout=900)
    print_per_seed(*res["per_seed"])  # the subprocess's line, for experiments/readme_figures.py
    assert res["learned"] >= max(res["noop"], res["random"]) + margin, res


def test_recorded_trajectories_round_trip(tmp_path):
    from marljax.pipeline.recorder import TrajectoryRecorder, load_trajectories

    path = tmp_path / "dataset"
    train(load_config(None, SMALL + [f"out_dir={tmp_path / 'run'}", f"async.record_trajectories={path}"]),
          log=lambda s: None)  # fmt: skip
    data = load_trajectories(path)
    assert data["learner_version"].tolist() == list(range(16))  # block mode: one batch per update, in order
    assert np.all(data["learner_version"] - data["version"] <= 1)
    obs = data["batch.agents.obs"]  # [N, S, T, E, A, obs]
    assert obs.shape == (16, 1, 16, 8, 3, 18) and obs.dtype == np.float32
    assert data["batch.agents.action"].shape == (16, 1, 16, 8, 3)
    assert np.all(np.isfinite(data["batch.agents.reward"]))

    # a batch cut off mid-write (arrays grown, index not yet moved) is not read back
    rec = TrajectoryRecorder(tmp_path / "partial")
    one = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    stamps = dict(version=0, actor=0, seq=0, ticket=0, learner_version=0)
    rec.append(one, stamps)
    rec.append(one, stamps)
    rec._arrays["x"].resize(exclusive_max=[3, 2, 3], resize_metadata_only=True).result()
    back = load_trajectories(tmp_path / "partial")
    assert back["x"].shape == (2, 2, 3) and np.array_equal(back["x"][1], one["x"])
    with pytest.raises(FileExistsError):
        TrajectoryRecorder(tmp_path / "partial")


def test_host_pettingzoo_env_groups_and_vector_step():
    from marljax.envs.host import HostEnvAdapter, host_env_factory

    adapter = HostEnvAdapter(
        host_env_factory("pettingzoo:marljax.testing.host_spread:parallel_env", {"n": 3}), "spread"
    )
    (g,) = adapter.groups
    assert g.size == 3 and g.obs_shape == (2 + 6 + 4,) and g.discrete and g.action_dim == 5
    venv = adapter.vector(4, seed=0)
    obs = venv.reset()
    assert obs["agents"].shape == (4, 3, 12)
    for _ in range(25):
        obs, reward, done, ep_done = venv.step({"agents": np.zeros((4, 3), np.int64)})
    assert ep_done.all() and done["agents"].all() and reward["agents"].shape == (4, 3)  # 25-step episodes


def test_a_host_env_module_that_does_not_import_is_refused():
    from marljax.envs.host import host_env_factory

    with pytest.raises(ConfigError, match="cannot import module 'marljax.envs.host_nowhere'"):
        host_env_factory("pettingzoo:marljax.envs.host_nowhere:parallel_env", {})


# host_spread (numpy, stepped on the host) in the async mode on the 3 fresh seeds (FRESH): each seed's training return
# in the last chunk (sampled actions) against the no-op and random policies' over 256 of the env's episodes (random
# -25.07, no-op -25.39). measured 2026-11-30 in two runs (one core, 66-72 s; not reproducible, as the async case
# above): -18.60 / -18.83 / -18.75 and -18.39 / -18.61 / -18.73, mean gains +6.34 (+6.47 +6.24 +6.31) and +6.49
# (+6.67 +6.46 +6.33), 2 SE 0.13 and 0.20: margin 5.0 by tests/test_learns.py's MARGIN_RULE in both (seed 0's last
# chunk had -18.30, margin 4.0)
LEARNS_HOST = [
    pytest.param(
        ["mode=async", "env=pettingzoo:marljax.testing.host_spread:parallel_env", "total_timesteps=3e5", "num_chunks=6",
         *FRESH],
        5.0,
        id="host-spread",
    )
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.nightly  # CI runs host envs through the async pipeline in test_env_failures.py
@pytest.mark.parametrize("overrides, margin", LEARNS_HOST)
def test_async_learns_a_host_pettingzoo_env(overrides, margin, tmp_path):
    cfg = load_config(None, [*overrides, "progress=false", "plot=false", f"out_dir={tmp_path}"])
    res = train(cfg, log=lambda s: None)
    learned = res.rows[-1]["return_per_seed"]  # the last chunk's training episodes of each seed (sampled actions)
    noop, rand = _host_spread_baselines(episodes=256)
    print_per_seed(learned, [noop] * len(learned), [rand] * len(learned))  # for experiments/readme_figures.py
    assert np.mean(learned) >= max(noop, rand) + margin, (learned, noop, rand)
    assert res.rows[-1]["staleness_max"] <= 1


def _host_spread_baselines(episodes: int) -> tuple[float, float]:
    """Per-agent return of the no-op (stay) and the uniformly random policy on host_spread, mean
    over `episodes` episodes (seeds 0..episodes-1; the env is numpy, so this takes a moment)."""
    from marljax.testing.host_spread import HostSpread

    rng = np.random.default_rng(0)
    out = []
    for kind in ("noop", "random"):
        total = 0.0
        for seed in range(episodes):
            env = HostSpread()
            env.reset(seed=seed)
            done = False
            while not done:
                actions = {a: 0 if kind == "noop" else int(rng.integers(5)) for a in env.agents}
                _, rewards, terms, truncs, _ = env.step(actions)
                total += float(np.mean(list(rewards.values())))
                done = all(terms.values()) or all(truncs.values())
        out.append(total / episodes)
    return out[0], out[1]


def test_host_env_outside_async_mode_is_a_config_error():
    from marljax.train.wiring import make_adapter

    with pytest.raises(ConfigError, match="mode=async"):
        make_adapter(load_config(None, ["env=pettingzoo:marljax.testing.host_spread:parallel_env"]))


def test_async_checkpoints_the_learner_and_resumes(tmp_path):
    cfg = SMALL + ["checkpoint_every=4", f"out_dir={tmp_path}"]
    first = train(load_config(None, cfg), log=lambda s: None)
    assert first.checkpoints == [4, 8, 12, 16]
    logs: list[str] = []
    more = train(load_config(None, cfg + ["resume=true", "total_timesteps=3072"]), log=logs.append)
    assert any("resumed from" in line and "update 16 of 24" in line for line in logs)
    # the saved run's chunks of 4 updates go on (docs/guide/checkpoints.md: another budget)
    assert [r["update"] for r in more.rows] == [4, 8, 12, 16, 20, 24]
    assert more.rows[-1]["policy_version"] == 24 and int(more.state.learner.update[0]) == 24


def test_async_nan_guard_keeps_the_last_good_checkpoint(tmp_path):
    cfg = SMALL + ["env=tests.nan_env:make_env", "env_kwargs.p=1e-3", "checkpoint_every=1", "num_chunks=16",
                   f"out_dir={tmp_path}"]  # fmt: skip
    with pytest.raises(Exception, match=r"update \d+: loss_\w+ is nan .*last good checkpoint: update \d+") as info:
        train(load_config(None, cfg), log=lambda s: None)
    assert "TrainingDiverged" in type(info.value).__name__


@pytest.mark.slow
def test_async_learner_splits_agents_over_mesh_agent(tmp_path):
    base = SMALL + ["async.deterministic=true", "param_sharing=independent", "env_kwargs.num_agents=4",
                    "env_kwargs.num_landmarks=4", "lr=2.5e-4", "num_seeds=2", "total_timesteps=1024",
                    "num_chunks=8"]  # fmt: skip
    # k=1: counts (actor device 0, learner devices 1-2); k=2: index lists (actor 2, learners 0-1)
    runs = [("1", ["async.actor_devices=1", "async.learner_devices=2", "mesh.agent=1"]),
            ("2", ["async.actor_devices=[2]", "async.learner_devices=[0,1]", "mesh.agent=2"])]  # fmt: skip
    (info1, one), (info2, two) = train_runs(tmp_path, base, runs, 3).values()
    assert "agent" in info2["spec"] and "agent" not in info1["spec"]  # per-agent sets split on the learner mesh
    # same pipeline, same data (deterministic); equal to float reduction order for 8 updates.
    # Measured: learner max |diff| 6e-8, metrics 7.6e-6 on values ~30 (relative 1.5e-7); tolerance
    # 5e-7 + 2e-6 |x|, 8x and 13x that. The seed and agent controls differ by 1.0 and 0.93. That was
    # on optimised compiles; it compiles unoptimised (tests/conftest.py), measured so: learner 6e-8,
    # metrics 7.6e-6 on 49.8, 0.12 of the tolerance (MARLJAX_TEST_DRIFT=1 prints it).
    assert_same_run(one, two, atol=5e-7, rtol=2e-6, controls=(SEEDS, AGENTS))


@pytest.mark.slow
def test_ctrl_c_stops_an_async_run_promptly_with_a_checkpoint_and_resume_keeps_counting(tmp_path):
    """Ctrl-C (SIGINT; SIGTERM takes the same path: tests/test_hostile.py) finishes the update in
    progress, saves it although checkpoint_every=0, and stops within 30 s with no actor thread
    left running; resume continues the learner and the buffer's counters from the checkpoint's."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    long = ["mode=async", "total_timesteps=2e6", "num_envs=16", "num_steps=32", "num_chunks=200", "checkpoint_every=0",
            "progress=false", "plot=false", f"out_dir={out}"]  # 3906 updates  # fmt: skip
    # a child inherits an ignored SIGINT (pytest-xdist workers ignore it), and Python then never
    # installs its KeyboardInterrupt handler: restore the default disposition in the child
    proc = subprocess.Popen([sys.executable, "-m", "marljax.cli", "train", *long], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    metrics, deadline = out / "metrics.jsonl", time.time() + 240
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    interrupted_at = time.time()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)  # no hung actor thread keeps the process alive
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the run did not stop within 30 s of Ctrl-C") from None
    # the first Ctrl-C finishes the update in progress, saves it, and stops (a second would interrupt at once)
    assert proc.returncode == 130 and "marljax: stopped by SIGINT at update" in err and "Traceback" not in err, err[
        -2000:
    ]
    assert time.time() - interrupted_at < 30
    update = int(err.split("stopped by SIGINT at update ")[1].split(";")[0])
    assert 0 < update < 3906 and (out / "checkpoints" / str(update)).is_dir()
    stopped = json.loads(metrics.read_text().splitlines()[-1])
    assert stopped["update"] == update and stopped["consumed"] == update  # block mode: one batch per update
    # resume to a nearer end: the learner and the buffer's counters go on from the checkpoint's, not from 0
    logs: list[str] = []
    res = train(load_config(None, [*long, "resume=true", f"total_timesteps={(update + 8) * 16 * 32}"]), log=logs.append)
    assert any(line.startswith("resumed from") for line in logs), logs
    last = res.rows[-1]
    assert last["update"] == update + 8 and last["consumed"] == update + 8 and last["produced"] >= update + 8


def test_an_async_run_exports_its_policy(tmp_path):
    import marljax
    from marljax.train.policy import export_policy

    res = train(load_config(None, SMALL + [f"out_dir={tmp_path / 'run'}"]), log=lambda s: None)
    export_policy(tmp_path / "run", tmp_path / "policy", log=lambda s: None)
    policy = marljax.load_policy(tmp_path / "policy")
    saved = jax.tree.leaves(jax.device_get(res.state.learner.params["agents"]))
    loaded = jax.tree.leaves(jax.device_get(policy.params["agents"]))
    for a, b in zip(saved, loaded):
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b))
