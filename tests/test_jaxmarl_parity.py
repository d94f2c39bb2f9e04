"""experiments/jaxmarl_parity.py's own arithmetic, without a JaxMARL checkout: the IQM over seeds, the
per-update grouping of what JaxMARL's scripts log, and the padding that lets its IPPO script run
simple_tag. The comparison itself runs by hand (`python experiments/readme_figures.py parity`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import jaxmarl_parity  # noqa: E402


def test_iqm_is_the_mean_of_the_middle_half():
    assert jaxmarl_parity.iqm([5.0, -100.0, 1.0, 2.0, 3.0]) == pytest.approx(2.0)  # 5 seeds: the middle 3
    assert jaxmarl_parity.iqm([1.0, 2.0, 3.0, 4.0, 50.0, -50.0, 5.0, 6.0]) == pytest.approx(3.5)  # 8: the middle 4
    assert jaxmarl_parity.iqm([4.0, 2.0]) == pytest.approx(3.0)  # too few to trim: the mean
    assert jaxmarl_parity.iqm([5.0, -100.0, 1.0, 2.0, 3.0]) != pytest.approx(np.mean([5.0, -100.0, 1.0, 2.0, 3.0]))


def test_logged_values_are_grouped_by_update_whatever_their_order():
    # two seeds, three updates, logged out of order as an unordered callback may
    logged = [{"update_steps": np.asarray(u), "ret": np.asarray(10.0 * u + s)} for u in (3, 1, 2) for s in (0, 1)]
    curve = jaxmarl_parity._by_update(logged, "update_steps", "ret", seeds=2)
    np.testing.assert_array_equal(curve, [[10.0, 20.0, 30.0], [11.0, 21.0, 31.0]])  # [seeds, updates]


def test_a_missing_seed_is_refused_not_averaged_over():
    logged = [{"update_steps": np.asarray(1), "ret": np.asarray(0.0)}] * 2 + [
        {"update_steps": np.asarray(2), "ret": np.asarray(0.0)}
    ]
    with pytest.raises(RuntimeError, match="expected 2 logged 'ret' per update, got \\[1, 2\\]"):
        jaxmarl_parity._by_update(logged, "update_steps", "ret", seeds=2)


def test_observations_of_different_sizes_are_zero_padded_and_stacked():
    obs = {"adversary_0": np.ones((3, 4)), "agent_0": np.full((3, 2), 7.0)}  # [envs, obs]: 4 and 2 wide
    stacked = np.asarray(jaxmarl_parity._padded_batchify(obs, ["adversary_0", "agent_0"], num_actors=6))
    assert stacked.shape == (6, 4)  # [agents x envs, the widest obs]
    np.testing.assert_array_equal(stacked[:3], np.ones((3, 4)))
    np.testing.assert_array_equal(stacked[3:], [[7.0, 7.0, 0.0, 0.0]] * 3)


def test_every_combination_names_a_script_and_config_of_the_minimal_mpe_set():
    assert set(jaxmarl_parity.COMBOS) == {"ippo_ff_spread", "mappo_rnn_spread", "vdn_rnn_spread", "qmix_rnn_spread",
                                          "ippo_ff_reference", "ippo_ff_tag"}  # fmt: skip
    for combo in jaxmarl_parity.COMBOS.values():
        assert combo.script.endswith(".py") and combo.config.endswith(".yaml")
        assert combo.q_learning == (combo.algo is not None)  # the ql_* file is shared: the algo picks the script
