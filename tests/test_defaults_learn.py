"""Every algorithm's bare defaults learn: `marljax train algo=A total_timesteps=1e6` (Sable: 8e5) on the default
env (MPE_simple_spread_v3), on 3 fresh seeds vmapped in one run, ends with a mean at least its margin (MARGINS)
per agent above the no-op policy, both evaluated greedily on the same EPISODES episodes per seed (the same
evaluation keys, so the same initial states); so do the recurrent networks of IPPO and VDN at smaller budgets,
and the recurrent Sable at 8e5. Sable's and TransfQMix's cases, too long for a nightly slice as one run,
train each fresh seed in a test of its own and assert a floor per seed (PER_SEED_FLOORS).
ISAC and MASAC, which take Box actions only, are tests/test_sac.py's (on spread's continuous version).

Standing still is the yardstick because it beats random play on this env (measured over 1024
episodes: random -27.91, always no-op -25.28): a margin over random play could be met by a
policy that learned to stand still."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax.config import algorithm_schema, algorithms, load_config
from marljax.envs.adapter import AgentGroup
from marljax.train.evaluate import baseline_act, eval_keys, make_evaluator
from marljax.train.wiring import make_adapter, make_trainer
from tests._learning import FRESH_SEED, FRESH_SEEDS, fresh_seed_alone, learned_vs_baselines

EPISODES = 64
# Fresh seeds (issue 63): each case trains 3 seeds vmapped in one run, `seed=7919 num_seeds=3`, and asserts on their
# mean: mean greedy return >= mean no-op return + its margin, per agent, each seed's policy and no-op on that seed's
# same EPISODES episodes. Seed i of a run trains from fold_in(PRNGKey(seed), i) (marljax/parallel/mesh.py's
# seed_keys), so these are fold_in(PRNGKey(7919), 0..2), none of them seed 0's single-seed key fold_in(PRNGKey(0), 0);
# the defaults searches and the figures quoted for them used seeds 0 and 1 (`num_seeds=2`), the repository's other runs
# seeds below 40: none used 7919.
# The evaluation's episodes derive from the seed too (train/evaluate.py's eval_keys): fresh as well.
SEED, SEEDS = FRESH_SEED, FRESH_SEEDS
# Each case's margin, re-derived from its 3 fresh seeds (docs/guide/algorithms.md, "Fresh seeds", lists each seed):
# the mean gain over no-op less the larger of 1.0 and two standard errors of the 3 per-seed gains (sd / sqrt(3)),
# rounded down to 0.5. Three seeds give a rough spread, not an interval: the 1.0 keeps a margin off the mean where
# three seeds happened to agree. Seed 0 alone had been asserted at +3.0 in every case; pqn_vdn now asserts less than
# that (its fresh mean is +3.4), the other cases more; Sable's cases assert a floor per seed (PER_SEED_FLOORS).
# Measured 2026-11-29, one case at a time beside another engineer's process (2-core machine); the replay learners'
# (iql, vdn, qmix, shaq) again that day with their MPE family defaults (one-step targets bootstrapping past the time
# limit) and the replay draw over the filled slots' count (replay.draw), two cases at a time, one per core.
MARGINS = {
    ("ippo", False): 4.0,  # mean gain +5.62 (seeds +7.04 +4.66 +5.16)
    ("mappo", False): 11.0,  # +12.31 (+13.11 +12.12 +11.69): critic.time, its MPE default (2026-11-29); before +5.98
    ("happo", False): 12.0,  # +13.37 (+13.66 +12.38 +14.06): critic.time as for mappo; before it +6.49
    ("pqn_vdn", False): 1.5,  # +3.42 (+3.51 +1.86 +4.89)
    ("iql", False): 6.5,  # +8.29 (+9.21 +9.04 +6.62): the MPE family defaults (2026-11-29); before them +3.77
    ("vdn", False): 8.0,  # +9.45 (+10.25 +9.73 +8.36); before them +4.78
    ("qmix", False): 6.5,  # +7.77 (+8.07 +7.99 +7.25); before them +3.71
    ("shaq", False): 7.5,  # +8.94 (+9.20 +8.57 +9.04); before them +3.68
    ("ippo", True): 3.5,  # +4.96 (+5.52 +4.02 +5.35)
    ("vdn", True): 4.5,  # +5.55 (+5.45 +6.24 +4.94); before them +4.66
}
# Cases whose 3 fresh seeds vmapped in one run take longer than a nightly slice (docs/nightly.md; Sable's took 1203 s
# and 1222 s here): each seed is its own test, `seed=SEED+i num_seeds=1` for i = 0, 1, 2 (seed i's key is
# fold_in(PRNGKey(SEED+i), 0), the first one the vmapped run's seed 0, though not its numbers: one seed alone sums
# in another order and its run drifts apart), 150-490 s each outside pytest (TransfQMix's 741-752 s here: by hand;
# Sable's two at 8e5 fit a slice), and asserts
# that seed's greedy return >= its no-op return + the case's floor, so the three together assert every seed, and
# their mean, above no-op by the floor. The floor is re-derived from the fresh seeds measured for the case (these
# three alone; the recurrent Sable's also with the replay before 2026-11-30's): the smallest gain less 0.5, rounded
# down to 0.5. Measured one test per core, 2026-11-29 (Sable's two at 8e5: 2026-11-30).
PER_SEED_FLOORS = {
    # at 8e5 steps, seeds 7919 / 7920 / 7921 alone: +3.09 +3.14 +1.51 (253 / 241 / 237 s outside pytest, pinned to one
    # core, 2026-11-30, with learning's replay of all a run's steps at once; with the loop over them before it, +2.02
    # +2.76 +2.85). At 2e6, by hand: +3.37 +4.09 +4.39 (vmapped +1.68 +3.57 +2.87), 392-487 s a seed outside pytest
    # and 720 s in a pinned slice. At 7e5 seed 7920 fell below no-op (-1.20, the loop's replay)
    ("sable", True): 1.0,
    # at 8e5 steps, seeds 7919 / 7920 / 7921 alone: +2.61 +2.42 +3.16 (186 / 148 / 148 s outside pytest, pinned to
    # one core, 2026-11-30). At 2e6 they had gained less, +1.78 +1.69 +3.58 (vmapped: +2.47 +1.26 +1.15; a floor of
    # 0.5), in 277-370 s a seed outside pytest and about 720 s in a pinned slice: too long for one, so by hand
    ("sable", False): 1.5,
    # seeds 7919 / 7920 / 7921 alone: +15.61 +16.38 +16.69 (seed 0, the defaults' own, +17.59), 741-752 s a seed, with
    # replay.draw (2026-11-29; before it +13.01 +16.00 +12.09, a floor of 11.5)
    ("transf_qmix", False): 15.0,
}


# Each algorithm's bare defaults at 1M steps; the recurrent (GRU) networks too, at smaller
# budgets (measured with `marljax train algo=A recurrent=true total_timesteps=S num_seeds=2
# eval_episodes=64`: ippo -19.2 at 500k steps, vdn -20.1 at 300k; no-op about -25.3). The recurrent Sable,
# seed 0 at 2M steps (`learned_vs_baselines`): -20.45 against no-op -25.92 (+5.47; the feed-forward one +3.28).
# TransfQMix at its MPE family defaults (JaxMARL's spread file, layer norm), seed 0: -11.04 at 1M steps in a run with
# evaluations every 150k (docs/guide/algorithms.md); before them it did not learn spread.
# CI runs the headline (ippo's defaults; recurrent nets run in CI on every env, test_every_env.py); the rest are nightly
# (1-4.5 minutes each here for 3 seeds): python -m pytest -m nightly tests/test_defaults_learn.py -s. The headline's
# 3 seeds cost 59 s against seed 0's 25 s alone (2.3x wall; CPU 70 s against 39 s, 1.8x, what a worker of CI's -n 2
# pays), measured back to back on 2026-11-29
IN_CI = {("ippo", False)}
# Sable learns spread more slowly per env step than the PPO family: at its MPE family defaults (64-step
# rollouts, lr 4e-3) seed 0 gains +2.57 over no-op at 1M steps (two seeds +3.58) and +3.28 at 2M. Its case ran 2M
# until 2026-11-30, by hand (too long for a nightly slice); the fresh seeds gain as much at 8e5 (PER_SEED_FLOORS),
# which fits one (docs/guide/algorithms.md); so do the recurrent Sable's at 8e5 since its learning replays a run's
# steps at once (1.5x faster: docs/benchmarks.md)
STEPS = {"sable": "8e5"}
# ISAC and MASAC (Box actions only) learn from their defaults on this env's continuous version in tests/test_sac.py,
# at 2e5 steps (nightly; README and docs/guide/algorithms.md cite those); their 1M-step runs here would take about
# 25 CPU-minutes each (5x the 282 s and 346 s of their 2e5 runs), more than a nightly slice (docs/nightly.md)
BOX_ONLY = {algo for algo in algorithms() if "discrete" not in algorithm_schema(algo).supports.actions}


def _marks(algo: str, recurrent: bool) -> list:
    if (algo, recurrent) in IN_CI:
        return []
    # Sable's 8e5 steps of one seed: up to 300 s here, beside CI's other worker maybe more than the default 900 s limit;
    # TransfQMix's 1M steps of transformers (8 envs x 25 steps, one gradient step each): ~13 CPU-minutes per seed
    longer = [pytest.mark.timeout(3600)] if algo in (*STEPS, "transf_qmix") else []
    return [pytest.mark.nightly, *longer]


def _params(algo: str, recurrent: bool, steps: str) -> list:
    """One test of the case's 3 seeds vmapped, or (PER_SEED_FLOORS) one test per seed, `part` its seed."""
    case, marks = f"{algo}-{recurrent}-{steps}", _marks(algo, recurrent)
    if (algo, recurrent) not in PER_SEED_FLOORS:
        return [pytest.param(algo, recurrent, steps, None, marks=marks, id=case)]
    return [
        pytest.param(algo, recurrent, steps, SEED + i, marks=marks, id=f"{case}-seed{SEED + i}") for i in range(SEEDS)
    ]


CASES = [
    param
    for algo, recurrent, steps in [
        # (the offline algorithms learn from a dataset, not from these defaults: tests/test_offline_learn.py)
        *[
            (algo, False, STEPS.get(algo, "1e6"))
            for algo in algorithms()
            if algo not in BOX_ONLY and "offline" not in algorithm_schema(algo).sections
        ],
        ("ippo", True, "5e5"),
        ("vdn", True, "3e5"),
        ("sable", True, STEPS["sable"]),
    ]
    for param in _params(algo, recurrent, steps)
]


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.parametrize("algo, recurrent, steps, part", CASES)
def test_the_defaults_learn(algo, recurrent, steps, part, tmp_path):
    overrides = [f"algo={algo}", f"total_timesteps={steps}", *(["recurrent=true"] if recurrent else [])]
    if part is not None:  # one seed of a case split by seed
        overrides += fresh_seed_alone(part - SEED)
        margin = PER_SEED_FLOORS[algo, recurrent]
    else:
        overrides += [f"seed={SEED}", f"num_seeds={SEEDS}"]
        margin = MARGINS[algo, recurrent]
    # docs/guide/algorithms.md's table of fresh seeds quotes the printed lines: python -m pytest tests/test_defaults_learn.py -s
    scores = learned_vs_baselines(overrides, tmp_path / "run", EPISODES)
    learned, standing_still = scores.learned, scores.noop  # means over the seeds, each seed on its own episodes
    assert len(scores.learned_per_seed) == (SEEDS if part is None else 1)
    per_seed = ", ".join(f"{a:.2f} (no-op {b:.2f})" for a, b in zip(scores.learned_per_seed, scores.noop_per_seed))
    assert learned >= standing_still + margin, (
        f"{' '.join(overrides)}: mean greedy return {learned:.2f} per agent, no-op {standing_still:.2f} on the same "
        f"{EPISODES} episodes per seed; needs +{margin}; per seed: {per_seed}"
    )


def test_the_noop_baseline_is_what_it_says():
    """The yardstick itself: no-op plays action 0 everywhere, random differs from it, and on
    MPE spread no-op beats random on the same episodes (so a learning margin over no-op is the
    stricter claim)."""
    config = load_config(None, ["num_envs=4", "num_steps=8", "total_timesteps=32"])
    trainer = make_trainer(config, make_adapter(config))
    keys = eval_keys(0, jnp.arange(2), 0)
    params = jax.vmap(trainer.init_learner)(keys).params  # ignored by the baselines, shaped as the evaluator wants
    returns = {}
    for kind in ("noop", "random"):
        evaluate = make_evaluator(trainer, 128, act=baseline_act(trainer.env, kind))
        returns[kind] = float(np.mean(evaluate(params, keys).returns))
    assert returns["noop"] > returns["random"] + 1.0, returns


def test_box_baselines_stand_still_and_sample_within_the_bounds():
    """With Box actions no-op is the zero vector clipped to the bounds and random is uniform
    within them; discrete groups beside them keep action 0 / a random available action."""
    groups = [AgentGroup("movers", ("a", "b"), (0, 1), (3,), False, 2, 0.25, 1.0),
              AgentGroup("talkers", ("c",), (2,), (3,), True, 4)]  # fmt: skip
    env = SimpleNamespace(groups=groups)
    obs = {"movers": jnp.zeros((64, 2, 3)), "talkers": jnp.zeros((64, 1, 3))}  # [E, A_g, obs]
    noop, _ = baseline_act(env, "noop")(None, obs, None, None, {}, jax.random.PRNGKey(0))
    rand, _ = baseline_act(env, "random")(None, obs, None, None, {}, jax.random.PRNGKey(0))
    assert noop["movers"].shape == rand["movers"].shape == (64, 2, 2)
    np.testing.assert_array_equal(noop["movers"], 0.25)  # 0 lies below the bounds: clipped to 0.25
    np.testing.assert_array_equal(noop["talkers"], 0)
    movers = np.asarray(rand["movers"])
    assert movers.min() >= 0.25 and movers.max() <= 1.0 and movers.std() > 0.1  # uniform on [0.25, 1]: std 0.22
    assert set(np.unique(rand["talkers"])) == {0, 1, 2, 3}
