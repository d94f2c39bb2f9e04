"""Every algorithm's bare defaults learn: `marljax train algo=A total_timesteps=1e6` (Sable: 2e6) on the default
env (MPE_simple_spread_v3) ends at least MARGIN per agent above the no-op policy, both evaluated
greedily on the same EPISODES episodes (the same evaluation keys, so the same initial states);
so do the recurrent networks of IPPO and VDN at smaller budgets, and the recurrent Sable at its 2e6.
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
from tests._learning import learned_vs_baselines

MARGIN = 3.0  # per agent, over the no-op policy on the same episodes
EPISODES = 64


# Each algorithm's bare defaults at 1M steps; the recurrent (GRU) networks too, at smaller
# budgets (measured with `marljax train algo=A recurrent=true total_timesteps=S num_seeds=2
# eval_episodes=64`: ippo -19.2 at 500k steps, vdn -20.1 at 300k; no-op about -25.3). The recurrent Sable,
# seed 0 at 2M steps (`learned_vs_baselines`): -20.45 against no-op -25.92 (+5.47; the feed-forward one +3.28).
# TransfQMix at its MPE family defaults (JaxMARL's spread file, layer norm), seed 0: -11.04 at 1M steps in a run with
# evaluations every 150k (docs/guide/algorithms.md); before them it did not learn spread.
# CI runs the headline (ippo's defaults; recurrent nets run in CI on every env, test_every_env.py); the rest are nightly
# (about 2-4 CPU-minutes each here): python -m pytest -m nightly tests/test_defaults_learn.py -s
IN_CI = {("ippo", False)}
NOT_YET: dict[str, pytest.MarkDecorator] = {}  # algorithms measured not to learn yet: algo -> an xfail mark
# Sable learns spread more slowly per env step than the PPO family: at its MPE family defaults (64-step
# rollouts, lr 4e-3) seed 0 gains +2.57 over no-op at 1M steps (two seeds +3.58) and +3.28 at 2M, so its
# case gets 2M (docs/guide/algorithms.md)
STEPS = {"sable": "2e6"}
# ISAC and MASAC (Box actions only) learn from their defaults on this env's continuous version in tests/test_sac.py,
# at 2e5 steps (nightly; README and docs/guide/algorithms.md cite those); their 1M-step runs here would take about
# 25 CPU-minutes each (5x the 282 s and 346 s of their 2e5 runs), more than a nightly slice (docs/nightly.md)
BOX_ONLY = {algo for algo in algorithms() if "discrete" not in algorithm_schema(algo).supports.actions}


def _marks(algo: str, recurrent: bool) -> list:
    if (algo, recurrent) in IN_CI:
        return []
    # Sable's 2M steps: 10-15 CPU-minutes here, more than the default 900 s limit on a shared machine; TransfQMix's
    # 1M steps of transformers (8 envs x 25 steps, one gradient step each): 25-45 CPU-minutes
    longer = [pytest.mark.timeout(3600)] if algo in (*STEPS, "transf_qmix") else []
    return [pytest.mark.nightly, *longer, *([NOT_YET[algo]] if algo in NOT_YET else [])]


CASES = [
    pytest.param(algo, recurrent, steps, marks=_marks(algo, recurrent))
    for algo, recurrent, steps in [
        # (the offline algorithms learn from a dataset, not from these defaults: tests/test_offline_learn.py)
        *[
            (algo, False, STEPS.get(algo, "1e6"))
            for algo in algorithms()
            if algo not in BOX_ONLY and "offline" not in algorithm_schema(algo).sections
        ],
        ("ippo", True, "5e5"),
        ("vdn", True, "3e5"),
        ("sable", True, "2e6"),
    ]
]


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.parametrize("algo, recurrent, steps", CASES)
def test_the_defaults_learn(algo, recurrent, steps, tmp_path):
    overrides = [f"algo={algo}", f"total_timesteps={steps}", *(["recurrent=true"] if recurrent else [])]
    # the README's table of defaults quotes the printed lines: python -m pytest tests/test_defaults_learn.py -s
    scores = learned_vs_baselines(overrides, tmp_path / "run", EPISODES)
    learned, standing_still = scores.learned, scores.noop
    assert learned >= standing_still + MARGIN, (
        f"{' '.join(overrides)}: greedy return {learned:.2f} per agent, no-op {standing_still:.2f} on the same "
        f"{EPISODES} episodes; needs +{MARGIN}"
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
