"""The placement planner (marljax/parallel/agent_placement.py) on hand-computed cases."""

import pytest

from marljax.parallel.agent_placement import REPLICATE, SPLIT, GroupCost, balanced, modes_for, naive

# 4 narrow agents (cost 1) and 2 wide ones (cost 40, 10x the parameters), on 4 agent devices
NARROW = GroupCost("narrow", agents=4, params=10, flops=1.0, param_bytes=40, opt_bytes=80)
WIDE = GroupCost("wide", agents=2, params=400, flops=40.0, param_bytes=1600, opt_bytes=3200)


def test_naive_pads_the_group_that_does_not_divide():
    p = naive([NARROW, WIDE], 4)
    assert p.modes == {"narrow": SPLIT, "wide": SPLIT}
    # every device computes one narrow and one (possibly padded) wide slot: 1 + 40
    assert [d.flops for d in p.devices] == [41.0] * 4
    assert [d.agents for d in p.devices] == [2, 2, 1, 1]  # devices 2 and 3 compute a pad
    assert p.mean_flops == (4 * 1 + 2 * 40) / 4 == 21.0
    assert p.imbalance == pytest.approx(41 / 21)
    assert p.max_bytes == 120 + 4800 and p.devices[0].params == 410


def test_balanced_replicates_the_group_that_does_not_divide():
    p = balanced([NARROW, WIDE], 4)
    assert p.modes == {"narrow": SPLIT, "wide": REPLICATE} and p.replicated == {"wide"}
    assert [d.flops for d in p.devices] == [1 + 2 * 40 / 4] * 4  # 21: the mean
    assert p.imbalance == 1.0
    assert p.max_bytes == 120 + 2 * 4800  # both wide sets on every device
    assert [d.agents for d in p.devices] == [1.5] * 4


def test_three_and_three_on_four_devices_replicates_both():
    groups = [GroupCost("a", 3, 10, 1.0, 40, 80), GroupCost("b", 3, 400, 40.0, 1600, 3200)]
    assert naive(groups, 4).imbalance == pytest.approx(41 / (3 * 41 / 4))  # 4/3
    p = balanced(groups, 4)
    assert p.replicated == {"a", "b"} and p.imbalance == 1.0


def test_dividing_groups_stay_split_and_k1_is_one_device():
    p = balanced([NARROW, WIDE], 2)
    assert p.replicated == frozenset() and p.imbalance == 1.0
    assert p.devices[0].bytes == 2 * 120 + 1 * 4800
    one = naive([NARROW, WIDE], 1)
    assert one.devices[0].flops == 84.0 and one.imbalance == 1.0


def test_modes_follow_the_config():
    sizes = {"narrow": 4, "wide": 2}
    assert modes_for(sizes, 4, "split") == {"narrow": SPLIT, "wide": SPLIT}  # wiring refuses the wide split
    assert modes_for(sizes, 2, "split", ["wide"]) == {"narrow": SPLIT, "wide": REPLICATE}
    assert modes_for(sizes, 4, "balanced", ["narrow"]) == {"narrow": REPLICATE, "wide": REPLICATE}
    with pytest.raises(ValueError, match="placement"):
        modes_for(sizes, 4, "even")


def test_bench_rows_show_every_device_of_both_placements():
    from marljax.bench.placement import placement_figures, placement_rows, timed_placements
    from marljax.config import load_config

    r = placement_figures([NARROW, WIDE], 4)
    assert r["placement_naive_flops"] == [41.0] * 4 and r["placement_balanced_flops"] == [21.0] * 4
    assert r["placement_balanced_replicated"] == ["wide"] and r["placement_naive_imbalance"] == pytest.approx(41 / 21)

    def refuse_split(config):  # the learner refuses a split that does not divide: naive is not timed
        if config.mesh.placement == "split":
            from marljax.config import ConfigError

            raise ConfigError("mesh.agent", "does not divide")
        return 0.5

    r.update(timed_placements(load_config(None, ["param_sharing=independent", "mesh.agent=2"]), refuse_split))
    assert r["placement_naive_update_s"] is None and r["placement_balanced_update_s"] == 0.5
    rows = placement_rows(r)
    assert [row[0] for row in rows] == ["placement naive"] + [f"  device {a}" for a in range(4)] + \
        ["placement balanced"] + [f"  device {a}" for a in range(4)]  # fmt: skip
    assert rows[0][1] == "1.952x" and "not run: mesh.agent" in rows[0][2] and rows[5][1] == "1.000x"
    assert "update 500.0 ms" in rows[5][2] and rows[6][1] == "21"
