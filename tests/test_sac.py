"""ISAC and MASAC: the squashed Gaussian's log-density, the soft target, the temperature's loss and
the Polyak step checked by hand; what an update does to the target critics, the temperature and
the parameters before learning starts; actions inside the env's bounds; discrete envs refused;
mesh.data=2 against one device; and a learning case (trained greedy policy against no-op and
random on the same episodes) beside its negative control (the untrained policy does not pass)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.algos import sac
from marljax.config import ConfigError, load_config
from marljax.train.evaluate import baseline_act, eval_keys, make_evaluator
from marljax.train.loop import train
from marljax.train.wiring import make_adapter, make_trainer
from tests._learning import FRESH, assert_learns, split_by_seed
from tests._subprocess import run_with_devices

CONTINUOUS = ["env=MPE_simple_spread_v3", "env_kwargs.action_type=Continuous"]
TINY = [*CONTINUOUS, "num_envs=4", "num_steps=8", "total_timesteps=640", "sac.buffer_size=320", "sac.batch_size=16",
        "sac.gradient_steps=2", "hidden_size=32"]  # fmt: skip


def _trainer(algo: str, *extra: str):
    config = load_config(None, [*TINY, f"algo={algo}", *extra])
    return make_trainer(config, make_adapter(config))


def _leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


# ------------------------------------------------------------------ the maths, by hand
def test_squashed_log_density_is_the_change_of_variables():
    """log pi(a) = log N(u; m, s) - log(1 - tanh(u)^2) per dimension, summed; the stable form
    agrees with the naive one where that is exact, and stays finite far in the tail."""
    mean = jnp.array([[0.3, -1.0], [0.0, 2.0]])
    log_std = jnp.array([[-0.5, 0.2], [0.0, -1.0]])
    noise = jnp.array([[1.0, -0.5], [0.25, 2.0]])
    action, logp = sac.squash(mean, log_std, noise)
    u = np.asarray(mean) + np.exp(np.asarray(log_std)) * np.asarray(noise)
    std = np.exp(np.asarray(log_std))
    gauss = -0.5 * ((u - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)
    by_hand = np.sum(gauss - np.log(1.0 - np.tanh(u) ** 2), axis=-1)
    np.testing.assert_allclose(np.asarray(action), np.tanh(u), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(logp), by_hand, rtol=1e-5)
    # u = 20: 1 - tanh(u)^2 underflows to 0 in float32 (naive log: +inf); the stable form gives about 2 (log 2 - 20)
    _, far = sac.squash(jnp.array([20.0]), jnp.array([0.0]), jnp.array([0.0]))
    np.testing.assert_allclose(float(far), -0.5 * math.log(2 * math.pi) - 2 * (math.log(2) - 20), rtol=1e-5)


def test_squashed_density_integrates_to_one():
    """Numerically, over the squashed interval (-1, 1) in one dimension: the density is a density."""
    mean, log_std = 0.4, math.log(0.7)
    a = np.linspace(-1 + 1e-6, 1 - 1e-6, 200_001)
    u = np.arctanh(a)
    noise = (u - mean) / 0.7
    _, logp = sac.squash(jnp.full((a.size, 1), mean), jnp.full((a.size, 1), log_std), jnp.asarray(noise[:, None]))
    assert abs(np.trapezoid(np.exp(np.asarray(logp, np.float64)), a) - 1.0) < 1e-3


def test_soft_target_by_hand():
    reward = jnp.array([1.0, -2.0])
    done = jnp.array([0.0, 1.0])
    q_next = jnp.array([[3.0, 2.5], [10.0, 11.0]])  # the twin values of the next state
    logp_next = jnp.array([-1.5, 4.0])
    y = sac.soft_target(reward, done, q_next, logp_next, jnp.float32(0.2), jnp.float32(0.9))
    # 1 + 0.9 * (min(3, 2.5) - 0.2 * -1.5) = 1 + 0.9 * 2.8 = 3.52; the episode ended: -2, nothing bootstrapped
    np.testing.assert_allclose(np.asarray(y), [3.52, -2.0], rtol=1e-6)


def test_temperature_moves_towards_the_target_entropy():
    """d/d log alpha of -log alpha (log pi + target) is -(mean log pi + target): with entropy 1 above
    a target of -2 (log pi = 1) the gradient is -(1 - 2) = +1 > 0, so descent lowers alpha."""
    logp = jnp.array([1.0, 1.0, 1.0])
    grad = jax.grad(sac.temperature_loss)(jnp.float32(0.0), logp, jnp.float32(-2.0))
    np.testing.assert_allclose(float(grad), 1.0)
    grad_low = jax.grad(sac.temperature_loss)(jnp.float32(0.0), jnp.array([3.0]), jnp.float32(-2.0))  # entropy -3
    assert float(grad_low) < 0  # entropy below the target: alpha rises


def test_polyak_by_hand():
    online, target = {"w": jnp.array([1.0, 2.0])}, {"w": jnp.array([3.0, -2.0])}
    out = sac.polyak(online, target, jnp.float32(0.25))
    np.testing.assert_allclose(np.asarray(out["w"]), [0.25 * 1 + 0.75 * 3, 0.25 * 2 - 0.75 * 2])


# ------------------------------------------------------------------ what an update does
@pytest.mark.parametrize("algo", ["isac", "masac"])
def test_collects_until_learning_starts_then_moves_the_target_by_tau(algo):
    """learning_starts=64 (2 rollouts of 4 x 8): updates 1-2 leave every parameter alone; update 3
    takes one gradient step and then target = tau * critic + (1 - tau) * target."""
    trainer = _trainer(algo, "sac.learning_starts=64", "sac.gradient_steps=1", "sac.tau=0.25")
    update = jax.jit(trainer.update)
    state = trainer.init(jax.random.PRNGKey(0))
    p0 = state.learner.params
    for _ in range(2):
        state, m = update(state)
        assert _leaves_equal(state.learner.params, p0) and float(m["loss_critic"]) == 0.0
    assert float(m["replay_size"]) == 64  # transitions kept: 2 rollouts x 4 envs x 8 steps
    before = state.extra.target
    state, m = update(state)
    assert not _leaves_equal(state.learner.params[sac.CRITIC], p0[sac.CRITIC]) and float(m["loss_critic"]) > 0
    expected = sac.polyak(state.learner.params[sac.CRITIC], before, 0.25)
    for x, y in zip(jax.tree.leaves(state.extra.target), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    assert float(m["alpha"]) != pytest.approx(0.1, abs=1e-9) and np.isfinite(float(m["loss_actor"]))


JAXNAV_SMALL = ["env=jaxnav", "env_kwargs.map_params={map_size: [7, 7], fill: 0.1}", "env_kwargs.lidar_num_beams=32",
                "env_kwargs.max_steps=100"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("algo, env", [("isac", ["env=MPE_simple_facmac_v1"]), ("masac", JAXNAV_SMALL)],
                         ids=["isac-facmac", "masac-jaxnav"])  # fmt: skip
def test_learns_a_step_on_the_other_box_action_envs(algo, env):
    """The Box-action envs beside continuous spread (facmac's predators with heuristic prey; JaxNav's
    robots): three updates, the third past learning_starts, move the critics with finite losses,
    and every action the policy takes lies inside the env's bounds."""
    sizes = TINY[len(CONTINUOUS) :]  # TINY's sizes without continuous spread
    config = load_config(None, [*sizes, f"algo={algo}", *env, "sac.learning_starts=64", "sac.gradient_steps=1"])
    trainer = make_trainer(config, make_adapter(config))
    update = jax.jit(trainer.update)
    state = trainer.init(jax.random.PRNGKey(0))
    p0 = state.learner.params
    for _ in range(3):
        state, m = update(state)
    assert not _leaves_equal(state.learner.params[sac.CRITIC], p0[sac.CRITIC])
    assert all(np.isfinite(float(m[k])) for k in ("loss_critic", "loss_actor", "alpha")) and float(m["loss_critic"]) > 0
    actions, _ = trainer.act(state.learner.params, state.actors.obs, {}, {}, {}, jax.random.PRNGKey(1))
    for g in trainer.env.groups:
        low = -np.inf if g.action_low is None else g.action_low
        high = np.inf if g.action_high is None else g.action_high
        a = np.asarray(actions[g.name])
        assert a.shape[-1] == g.action_dim and np.all(a >= low - 1e-6) and np.all(a <= high + 1e-6), g.name


def test_fixed_temperature_stays():
    trainer = _trainer("isac", "sac.learning_starts=0", "sac.autotune=false", "sac.init_alpha=0.3")
    state = trainer.init(jax.random.PRNGKey(0))
    state, m = jax.jit(trainer.update)(state)
    np.testing.assert_allclose(float(m["alpha"]), 0.3, rtol=1e-6)
    assert _leaves_equal(
        state.learner.params[sac.LOG_ALPHA], trainer.init(jax.random.PRNGKey(0)).learner.params[sac.LOG_ALPHA]
    )


def test_masac_critic_sees_every_agent():
    """The central critics take the world state, the joint action and the agent's id; ISAC's take
    one agent's observation and action (with an id where the set is shared)."""
    masac = _trainer("masac").init(jax.random.PRNGKey(0)).learner.params[sac.CRITIC]
    isac = _trainer("isac").init(jax.random.PRNGKey(0)).learner.params[sac.CRITIC]
    first = lambda p: p["params"]["MLP_0"]["Dense_0"]["kernel"]  # noqa: E731 - the first twin's input layer
    # spread: 3 agents, obs 18 (world: 54), Box(5): masac 54 + 3 ids + 15 actions; isac 18 + 3 ids + 5
    assert first(masac).shape == (54 + 3 + 15, 32)
    assert first(isac["agents"]).shape == (1, 18 + 3 + 5, 32)  # [sets, in, out]


@pytest.mark.parametrize("sharing", ["shared", "per_role", "independent"])
def test_actions_lie_in_the_bounds_for_every_sharing(sharing):
    trainer = _trainer("masac", f"param_sharing={sharing}")
    state = trainer.init(jax.random.PRNGKey(0))
    obs = state.actors.obs
    for greedy in (True, False):
        actions, _ = trainer.act(state.learner.params, obs, {}, {}, {}, jax.random.PRNGKey(1), greedy=greedy)
        a = np.asarray(actions["agents"])
        assert a.shape == (4, 3, 5) and a.min() >= 0.0 and a.max() <= 1.0  # MPE's Box(0, 1)
    sets = jax.tree.leaves(state.learner.params["agents"])[0].shape[0]
    assert sets == (3 if sharing == "independent" else 1)


def test_discrete_actions_are_refused_in_one_line():
    config = load_config(None, ["algo=isac", "env=MPE_simple_spread_v3"])  # Discrete(5) by default
    with pytest.raises(ConfigError) as info:
        make_trainer(config, make_adapter(config))
    assert info.value.field == "algo" and "continuous" in str(info.value) and "\n" not in str(info.value)
    assert "action_type=Continuous" in str(info.value)


@pytest.mark.parametrize("change, field", [(["recurrent=true"], "recurrent"), (["sac.buffer_size=16"], "sac.buffer_size"),
                                           (["sac.tau=2"], "sac.tau"), (["mesh.agent=2"], "mesh.agent")])  # fmt: skip
def test_bad_settings_name_the_field(change, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*TINY, "algo=isac", *change])
    assert info.value.field == field


@pytest.mark.slow
def test_checkpoint_with_replay_resumes_bitwise(tmp_path):
    """The replay buffer, the target critics, the temperature and every Adam state come back from a
    checkpoint: a run stopped after 3 of 6 chunks and resumed writes the same rows and buffer."""
    base = [*TINY, "algo=masac", "total_timesteps=768", "sac.learning_starts=128", "num_chunks=6", "checkpoint_every=4",
            "progress=false", "plot=false"]  # fmt: skip
    ref = train(load_config(None, [*base, f"out_dir={tmp_path / 'ref'}"]), log=lambda s: None)
    out = tmp_path / "killed"
    train(load_config(None, [*base, f"out_dir={out}"]), log=lambda s: None, max_chunks=3)
    resumed = train(load_config(None, [*base, f"out_dir={out}", "resume=true"]), log=lambda s: None)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_s", "env_steps_per_s")} for r in rows]  # noqa: E731
    assert strip(resumed.rows) == strip(ref.rows)
    assert _leaves_equal(resumed.state.extra, ref.state.extra)
    assert _leaves_equal(resumed.state.learner.opt_state, ref.state.learner.opt_state)


_DATA_RUN = """
import json
import jax
import numpy as np
from marljax.config import load_config
from marljax.train.loop import train
cfg = load_config(None, {settings} + ["algo=masac", "num_envs=8", "total_timesteps=256", "num_chunks=2",
    "sac.learning_starts={starts}", "mesh.data={data}", "out_dir={out}", "progress=false", "plot=false"])
result = train(cfg, log=lambda s: None)
rows = [{{k: v for k, v in r.items() if k not in ("wall_s", "env_steps_per_s")}} for r in result.rows]
replicas = [np.asarray(s.data) for s in jax.tree.leaves(result.state.learner.params)[0].addressable_shards]
print(json.dumps(dict(rows=rows, replicas_agree=all(np.array_equal(r, replicas[0]) for r in replicas))))
"""


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); IPPO's one-vs-eight-devices runs the data axis in CI
def test_mesh_data_two_against_one_device(tmp_path):
    """mesh.data=2: acting is the same (keys per global environment), so before learning the rows
    are equal; learning averages the gradients over the shards, so the parameter replicas agree."""
    run = lambda data, starts, out: run_with_devices(  # noqa: E731
        _DATA_RUN.format(settings=TINY, data=data, starts=starts, out=tmp_path / out), data
    )
    one, two = run(1, 10**6, "one"), run(2, 10**6, "two")
    assert one["rows"] == two["rows"]
    learn = run(2, 0, "learn")
    assert learn["replicas_agree"] and all(
        np.isfinite(r["loss_critic"]) and r["loss_critic"] > 0 for r in learn["rows"]
    )


# ------------------------------------------------------------------ learning
MARGIN = 1.8  # per agent, over the better of no-op and random on the same episodes: the smallest below
# (id, steps, margin: about half the measured gap). Measured with seed 0, 64 episodes, on this shared 2-core CPU:
# isac 1e5: learned -23.75, no-op -27.43, random -28.80 (84 s); isac 2e5: learned -19.98, no-op -27.13,
# random -27.54 (282 s); masac 2e5: learned -22.86 on the same episodes (346 s). Nightly:
# python -m pytest -m nightly tests/test_sac.py -s
# MPE_simple_facmac_v1 (3 predators, Box actions, heuristic prey), 2e5 steps, seed 0, 64 episodes, 2026-11-27:
# isac learned 16.60, masac 16.21, against no-op -0.60 and random 0.28 (65 s and 73 s here); IPPO's Gaussian policy
# at the same steps 8.62 (its no-op -0.55, random 0.41: other episodes, as its updates differ). Margin 8.0: about half.
# JaxNav's 7x7 map (JAXNAV_SMALL), isac 1e6: 0.13 against no-op -1.00 and random -4.91 (215 s); 3e5: -0.47. Margin 0.5
FACMAC = ["env=MPE_simple_facmac_v1"]
# Fresh seeds (issue 63): every case trains 3 seeds vmapped in one run, fold_in(PRNGKey(7919), 0..2), which no
# defaults search used (tests/test_defaults_learn.py), and asserts on their mean (the cases whose env settings hold it).
# Margins re-derived from those seeds by tests/test_learns.py's MARGIN_RULE (floor 1.0, rounded down to 0.5), over the
# better mean of no-op and random; measured 2026-11-29, one case at a time on one core beside another's process, by
# python -m pytest -m nightly -s "tests/test_sac.py::test_learns_above_no_op_and_random[ID]" (figures per seed):
# isac-1e5: -21.49 / -20.98 / -22.38 against no-op -25.80 / -25.09 / -25.62, mean gain +3.88 (+4.31 +4.10 +3.24),
#   2 SE 0.65: margin 2.5 (seed 0's 1.8); 79 s
# isac-facmac-2e5: 7.84 / 7.46 / 15.04 against random -0.34 / 0.34 / -0.75, mean gain +10.36 (+8.17 +7.12 +15.79),
#   2 SE 5.46: margin 4.5 (seed 0's 8.0, from its 16.60); 150 s
# masac-facmac-2e5: 29.49 / 19.48 / 31.61 against the same random, mean gain +27.11 (+29.82 +19.14 +32.36), 2 SE 8.10:
#   margin 19.0 (seed 0's 8.0, from its 16.21); 179 s
# isac-jaxnav-1e6: 0.94 / 1.79 / 0.32 against no-op -1.00 on each, mean gain +2.02 (+1.94 +2.79 +1.32), 2 SE 0.85:
#   margin 1.0 (seed 0's 0.5, from its 0.13); 568 s. Under CI's -n 2 that one run took 666 s, past a nightly slice, so
#   the case is split by seed as tests/test_defaults_learn.py's Sable cases (fresh_seed_alone: seed=7919+i
#   num_seeds=1), each seed asserting a floor by that module's PER_SEED_FLOORS rule (the smallest gain less 0.5,
#   rounded down to 0.5): alone, seeds 7919 / 7920 / 7921 learned 1.90 / 1.29 / 0.81 against no-op -1.00 (+2.90
#   +2.29 +1.81; 329 / 329 / 303 s, 2026-11-30, one per core); with the vmapped run's +1.32 the floor is 0.5
# isac-2e5: -21.97 / -18.21 / -20.21 against no-op -26.52 / -22.33 / -25.60, mean gain +4.68 (+4.55 +4.12 +5.38),
#   2 SE 0.74: margin 3.5 (seed 0's 3.5); 121 s
# masac-2e5: -24.18 / -23.76 / -23.08 against the same no-op, mean gain +1.14 (+2.34 -1.43 +2.52), 2 SE 2.57: the rule
#   gives no positive margin (-1.5), one seed ending below no-op; expected to fail (NOT_YET), the old 2.0 kept; 127 s
# measured not to clear a margin on the fresh seeds (strict: a fix shows)
NOT_YET = pytest.mark.xfail(
    strict=True,
    reason="MASAC on continuous spread at 2e5 steps gains +1.14 over no-op on the fresh seeds (+2.34 -1.43 +2.52: "
    "-24.18 / -23.76 / -23.08 against -26.52 / -22.33 / -25.60; 127 s here, 2026-11-29), short of the 2.0 its seed 0 "
    "met (-22.86); the rule gives no positive margin (mean gain less 2 SE 2.57), so it is not shown to learn there",
)
LEARNS = [
    pytest.param("isac", [*CONTINUOUS, *FRESH], "1e5", 2.5, id="isac-1e5", marks=pytest.mark.nightly),
    pytest.param("isac", [*CONTINUOUS, *FRESH], "2e5", 3.5, id="isac-2e5", marks=pytest.mark.nightly),
    pytest.param("masac", [*CONTINUOUS, *FRESH], "2e5", 2.0, id="masac-2e5", marks=[pytest.mark.nightly, NOT_YET]),
    pytest.param("isac", [*FACMAC, *FRESH], "2e5", 4.5, id="isac-facmac-2e5", marks=pytest.mark.nightly),
    pytest.param("masac", [*FACMAC, *FRESH], "2e5", 19.0, id="masac-facmac-2e5", marks=pytest.mark.nightly),
    *split_by_seed("isac-jaxnav-1e6", lambda seed: ("isac", [*JAXNAV_SMALL, *seed], "1e6", 0.5), pytest.mark.nightly),
]


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.parametrize("algo, env, steps, margin", LEARNS)
def test_learns_above_no_op_and_random(algo, env, steps, margin, tmp_path):
    assert_learns([f"algo={algo}", *env, f"total_timesteps={steps}"], tmp_path / "run", margin)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["isac", "masac"])
def test_smoke_a_short_run_through_the_host_loop(algo, tmp_path):
    """Both algorithms through the host loop: 40 updates (learning from the 5th), every
    loss stays finite, the replay holds what was collected, and the temperature falls from its
    start (the squashed policy begins far above the target entropy of -5)."""
    config = load_config(None, [*TINY, f"algo={algo}", "total_timesteps=1280", "sac.learning_starts=128",
                                "num_chunks=4", "eval_every=40", "eval_episodes=4", "checkpoint_every=0",
                                "progress=false", "plot=false", f"out_dir={tmp_path}"])  # fmt: skip
    rows = train(config, log=lambda line: None).rows
    last = rows[-1]
    assert all(np.isfinite(last[k]) for k in sac.LOSSES) and np.isfinite(last["eval_return"])
    assert last["replay_size"] == 320  # the buffer's 320 transitions, full
    assert 0 < last["alpha"] < 0.1 and last["entropy"] > -5.0  # still above the target, so alpha is still falling


def test_negative_control_the_untrained_policy_does_not_pass():
    """The yardstick above discriminates: the untrained greedy policy, on the same kind of
    episodes, stays within the margin of the better baseline (it stands nearly still)."""
    config = load_config(None, ["algo=isac", *CONTINUOUS, "num_envs=4", "num_steps=8", "total_timesteps=32"])
    trainer = make_trainer(config, make_adapter(config))
    keys = eval_keys(0, jnp.arange(1), 0)
    params = jax.vmap(trainer.init_learner)(keys).params
    returns = {}
    for name, act in (("untrained", None), ("noop", baseline_act(trainer.env, "noop")),
                      ("random", baseline_act(trainer.env, "random"))):  # fmt: skip
        evaluate = make_evaluator(trainer, 64, act=act) if act is not None else make_evaluator(trainer, 64)
        returns[name] = float(np.mean(evaluate(params, keys).returns))
    assert returns["untrained"] < max(returns["noop"], returns["random"]) + MARGIN, returns
