"""IQL, VDN and QMIX with replay: the target network follows its schedule, replay waits for
learning_starts, a checkpoint (replay buffer included) resumes bitwise, and the replay sizes
split over the data axis. That each learns: tests/test_defaults_learn.py."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from marljax.algos import registry
from marljax.algos.q_acting import QConfig
from marljax.config import ConfigError, load_config
from marljax.train.loop import train
from marljax.train.wiring import make_adapter, make_trainer
from tests._subprocess import run_with_devices

# stated here rather than taken from the algorithms' defaults (which differ per algorithm), so
# that the tests below run the same program for iql, vdn and qmix
SETTINGS = ["activation=relu", "lr=1e-3", "gamma=0.99", "hidden_size=64", "num_envs=16", "num_steps=26",
            "replay.gradient_steps=4", "replay.batch_size=32", "q.eps_decay_steps=3e5", "replay.learning_starts=1e4",
            "progress=false", "plot=false"]  # fmt: skip


def _tiny(algo: str, *extra: str):
    config = load_config(None, [*SETTINGS, f"algo={algo}", "num_envs=4", "num_steps=8", "total_timesteps=320",
                                "replay.buffer_size=8", "replay.batch_size=4", *extra])  # fmt: skip
    return make_trainer(config, make_adapter(config))


def _leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_replay_waits_for_learning_starts_and_the_target_follows_its_schedule():
    # learns from update 2 (64 / 32)
    trainer = _tiny("vdn", "replay.learning_starts=64", "replay.target_update_interval=2")
    update = jax.jit(trainer.update)
    state = trainer.init(jax.random.PRNGKey(0))
    p0 = state.learner.params
    for _ in range(2):
        state, m = update(state)
        assert _leaves_equal(state.learner.params, p0) and float(m["loss_total"]) == 0.0  # still collecting
    assert int(jax.device_get(m["replay_size"])) == 8  # 2 rollouts x 4 envs
    state, m = update(state)  # update 3: the first that learns; target copied at updates 2, 4, ...
    assert not _leaves_equal(state.learner.params, p0) and float(m["loss_total"]) > 0
    assert _leaves_equal(state.extra.target, p0)
    state, _ = update(state)
    assert _leaves_equal(state.extra.target, state.learner.params)


@pytest.mark.parametrize("reset", [True, False])
def test_reset_each_update_starts_every_rollout_afresh_and_counts_the_cut_episodes(reset):
    # MPE's episodes last 26 steps: 8-step rollouts never end one, so only the reset (JaxMARL's SHAQ and
    # TransfQMix scripts') starts them; without it (the control) the second rollout continues the first's
    trainer = _tiny("vdn", f"replay.reset_each_update={str(reset).lower()}", "recurrent=true", "replay.buffer_size=12")
    update = jax.jit(trainer.update)
    state = trainer.init(jax.random.PRNGKey(0))
    episodes = []
    for _ in range(3):
        state, m = update(state)
        episodes.append(jax.device_get(m.episodes))
    data = jax.device_get(state.extra.buffer.data)  # 3 rollouts x 4 envs: every slot written once
    starts = data["reset"]["agents"][:, 0]  # [12, A]: the first observation of each stored sequence starts an episode
    assert not data["done"].any()  # no episode ends inside a rollout either way
    actors = jax.device_get(state.actors)
    if reset:
        assert starts.all()
        for i, ep in enumerate(episodes):  # each cut episode counted: 4 envs x 8 steps, its rewards so far
            assert float(ep.count) == 4 and float(ep.length_sum) == 32 and float(ep.won_sum) == 0
            np.testing.assert_allclose(ep.return_sum, data["reward"][4 * i : 4 * i + 4].sum(axis=(0, 1)), rtol=1e-5)
        assert not actors.ep_length.any() and actors.reset["agents"].all() and not actors.hidden["agents"].any()
    else:
        assert starts[:4].all() and not starts[4:].any()
        assert all(float(ep.count) == 0 for ep in episodes)
        assert (actors.ep_length == 24).all() and np.abs(actors.hidden["agents"]).max() > 0


@pytest.mark.parametrize("on", [True, False])
def test_bootstrap_time_limit_keeps_the_cut_episodes_out_of_the_stored_done(on):
    """MPE spread's episodes end only by its time limit (max_steps 25: the done comes with the 26th step), so a
    26-step rollout ends one in every env at its last step: replay.bootstrap_time_limit stores no done there (its
    target bootstraps); off (the control) it does."""
    trainer = _tiny(
        "vdn", f"replay.bootstrap_time_limit={str(on).lower()}", "q.td_lambda=0", "num_steps=26", "replay.buffer_size=4"
    )
    state, m = jax.jit(trainer.update)(trainer.init(jax.random.PRNGKey(0)))
    done = jax.device_get(state.extra.buffer.data["done"])  # [4 envs, 26 steps]
    assert float(m.episodes.count) == 4 and float(m.episodes.length_sum) == 4 * 26  # they ended either way
    if on:
        assert not done.any()
    else:
        np.testing.assert_array_equal(done, np.arange(26)[None, :].repeat(4, axis=0) == 25)
    assert "cut" not in state.extra.buffer.data  # one-step targets need no record of the cuts


@pytest.mark.parametrize("algo", ["iql", "qmix"])
def test_a_lambda_with_the_bootstrap_keeps_the_cuts_and_stops_its_return_there(algo):
    """The same 26-step rollout with q.td_lambda=0.5: the buffer keeps `cut` at the last step of every env, done
    stays false there, and the learning step runs (its lambda-return stops at the cut: test_qlearning_parts)."""
    trainer = _tiny(algo, "replay.bootstrap_time_limit=true", "q.td_lambda=0.5", "num_steps=26",
                    "replay.buffer_size=4", "replay.learning_starts=0")  # fmt: skip
    state, m = jax.jit(trainer.update)(trainer.init(jax.random.PRNGKey(0)))
    data = jax.device_get(state.extra.buffer.data)
    np.testing.assert_array_equal(data["cut"], np.arange(26)[None, :].repeat(4, axis=0) == 25)
    assert not data["done"].any() and float(m.episodes.count) == 4
    assert np.isfinite(float(m["loss_total"])) and float(m["loss_total"]) > 0


@pytest.mark.parametrize("algo", ["iql", "vdn"])
def test_skip_last_step_leaves_each_sequence_s_last_step_out_of_the_loss(algo):
    """One learning step on a rollout whose last step's rewards are changed: with replay.skip_last_step (JaxMARL's
    iql/vdn/qmix_rnn.py) the new parameters are bitwise the same (one-step targets: only the last step's target
    reads its reward); without it (the control) they differ."""
    changed = {}
    for skip in (True, False):
        config = load_config(None, [*SETTINGS, f"algo={algo}", "num_envs=4", "num_steps=8", "replay.buffer_size=4",
                                    "replay.batch_size=4", "replay.gradient_steps=1", "replay.learning_starts=0",
                                    "q.td_lambda=0", f"replay.skip_last_step={str(skip).lower()}"])  # fmt: skip
        env = make_adapter(config)
        state = make_trainer(config, env).init(jax.random.PRNGKey(0))
        pieces = registry.get(algo).build(config, env)
        _, batch = jax.jit(pieces.collect)(state.learner.params, state.actors, jax.random.PRNGKey(1))
        other = batch._replace(traj={**batch.traj, "reward": batch.traj["reward"].at[-1].add(1.0)})
        learn = jax.jit(pieces.learn)
        runs = [learn(state.learner, state.extra, b, jax.random.PRNGKey(2))[0].params for b in (batch, other)]
        changed[skip] = not _leaves_equal(*runs)
    assert changed == {True: False, False: True}


@pytest.mark.parametrize(
    "extra, match",
    [
        (["algo=vdn", "q.td_lambda=0", "env=hanabi"], r"^replay.bootstrap_time_limit: hanabi declares no time limit \(max_steps\).*allowed: false$"),
    ],
)  # fmt: skip
def test_bootstrap_time_limit_is_refused_in_one_line_where_it_cannot_hold(extra, match):
    with pytest.raises(ConfigError, match=match):
        config = load_config(None, [*extra, "replay.bootstrap_time_limit=true"])
        make_trainer(config, make_adapter(config))


def test_a_lambda_set_on_mpe_keeps_the_family_bootstrap():
    # on MPE the replay learners' family defaults turn the bootstrap on; a lambda set by hand keeps it (its
    # return stops at each cut), and turning the bootstrap off by hand is kept too
    config = load_config(None, ["algo=qmix", "q.td_lambda=0.5"])
    assert (config.section(QConfig).td_lambda, config.value("replay.bootstrap_time_limit")) == (0.5, True)
    off = load_config(None, ["algo=qmix", "q.td_lambda=0.5", "replay.bootstrap_time_limit=false"])
    assert off.value("replay.bootstrap_time_limit") is False


def test_polyak_target_moves_by_tau():
    trainer = _tiny("qmix", "replay.learning_starts=0", "replay.target_update_interval=0", "replay.tau=0.25")
    state = trainer.init(jax.random.PRNGKey(0))
    before = state.extra.target
    state, _ = jax.jit(trainer.update)(state)
    expected = jax.tree.map(lambda p, t: 0.25 * p + 0.75 * t, state.learner.params, before)
    for x, y in zip(jax.tree.leaves(state.extra.target), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    assert "__mixer__" in state.learner.params  # QMIX's mixer trains with the agents' networks


@pytest.mark.slow
def test_checkpoint_with_replay_resumes_bitwise(tmp_path):
    """Recurrent QMIX (its state is the feed-forward one plus GRU states): the replay with the GRU
    states stored at each sequence's start, the target network, the mixer and the acting GRU
    state all come back, so the resumed rows and buffer are the same. With a lambda over MPE's time-limit
    bootstrap, so that the buffer's record of the cuts comes back too (the default path resumes in test_support_table)."""
    base = [*SETTINGS, "algo=qmix", "recurrent=true", "q.td_lambda=0.5", "num_envs=4", "num_steps=8", "total_timesteps=512",
            "replay.buffer_size=16", "replay.batch_size=4", "replay.learning_starts=32", "num_chunks=8",
            "checkpoint_every=4"]  # fmt: skip
    ref = train(load_config(None, [*base, f"out_dir={tmp_path / 'ref'}"]), log=lambda s: None)
    out = tmp_path / "killed"
    train(load_config(None, [*base, f"out_dir={out}"]), log=lambda s: None, max_chunks=5)
    resumed = train(load_config(None, [*base, f"out_dir={out}", "resume=true"]), log=lambda s: None)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_s", "env_steps_per_s")} for r in rows]  # noqa: E731
    assert strip(resumed.rows) == strip(ref.rows)
    assert (
        _leaves_equal(resumed.state.extra.buffer, ref.state.extra.buffer) and ref.state.extra.buffer.data["cut"].any()
    )


@pytest.mark.parametrize(
    "change, field",
    [(["replay.buffer_size=2"], "replay.buffer_size"), (["replay.batch_size=0"], "replay.batch_size"),
     (["replay.tau=2"], "replay.tau"),
     (["mesh.agent=2"], "mesh.agent")],  # shared Q-networks do not split (independent ones do: test_replay_agent_axis.py)
)  # fmt: skip
def test_bad_replay_settings_name_the_field(change, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*SETTINGS, "algo=qmix", *change])
    assert info.value.field == field


def test_replay_sizes_must_divide_over_the_data_axis():
    from marljax.parallel.layouts import Layout

    config = load_config(None, [*SETTINGS, "algo=iql", "replay.batch_size=31"])
    with pytest.raises(ConfigError, match="mesh.data=2") as info:
        make_trainer(config, make_adapter(config), Layout("data", 2))
    assert info.value.field == "replay.batch_size"


_DATA_RUN = """
import json
import jax
import numpy as np
from marljax.config import load_config
from marljax.train.loop import train
out = {{}}
for name, starts in (("collect", 10**6), ("learn", 0))[:{runs}]:
    cfg = load_config(None, {settings} + ["algo=qmix", "recurrent=true", "num_envs=8", "num_steps=8",
        "total_timesteps=256", "num_chunks=2", "replay.buffer_size=32", "replay.batch_size=8",
        "replay.learning_starts=" + str(starts), "mesh.data={data}", "out_dir={out}/" + name])
    result = train(cfg, log=lambda s: None)
    rows = [{{k: v for k, v in r.items() if k not in ("wall_s", "env_steps_per_s")}} for r in result.rows]
    obs = np.asarray(result.state.extra.buffer.data["obs"]["agents"])  # [S, C, T+1, A, ...] gathered
    replicas = [np.asarray(s.data) for s in jax.tree.leaves(result.state.learner.params)[0].addressable_shards]
    out[name] = dict(rows=rows, obs=obs[0, :, 0, 0, :4].tolist(),
                     replicas_agree=all(np.array_equal(r, replicas[0]) for r in replicas))
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); IPPO's one-vs-eight-devices runs the data axis in CI
def test_replay_splits_over_the_data_axis(tmp_path):
    """Recurrent QMIX on mesh.data=2 against one device. Acting is the same (keys follow global env
    indices), so before learning the rows are equal and each shard's half of the buffer holds its
    own environments' sequences (one device: slot j = env j; two: shard d's slot i = env 4d + i).
    Learning averages the gradient over shards, so the parameter replicas stay identical."""
    one = run_with_devices(_DATA_RUN.format(settings=SETTINGS, data=1, out=tmp_path / "one", runs=1), 1)
    two = run_with_devices(_DATA_RUN.format(settings=SETTINGS, data=2, out=tmp_path / "two", runs=2), 2)
    assert one["collect"]["rows"] == two["collect"]["rows"]
    a, b = np.asarray(one["collect"]["obs"]), np.asarray(two["collect"]["obs"])  # [32 slots, 4]
    # 4 updates x 8 envs filled slots 0..31 on one device; on two, each shard wrote 4 x 4 slots
    for update in range(4):
        for d in range(2):
            np.testing.assert_array_equal(b[16 * d + 4 * update : 16 * d + 4 * update + 4],
                                          a[8 * update + 4 * d : 8 * update + 4 * d + 4])  # fmt: skip
    learn = two["learn"]
    assert learn["replicas_agree"] and len(learn["rows"]) == 2
    assert all(np.isfinite(r["loss_total"]) and r["loss_total"] > 0 for r in learn["rows"])
    # sequences held, summed over shards and averaged over the chunk's updates 3 and 4: (24 + 32) / 2
    assert learn["rows"][-1]["replay_size"] == one["collect"]["rows"][-1]["replay_size"] == 28
