"""async.balance=rate: the controller on synthetic observations, its config checks, its effect on
dropped batches (counts, never timings), and deterministic mode ignoring it bitwise."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from marljax.config import ConfigError, load_config
from marljax.pipeline.balance import Decision, Observation, RateBalancer, Throttle
from marljax.pipeline.buffer import BufferClosed

BUSY = Observation(waiting=0, dropped=0, learner_wait_s=0.0, interval_s=0.03)  # the learner always fed, nothing queued
OVER = Observation(waiting=2, dropped=1, learner_wait_s=0.0, interval_s=0.03)  # a queue and a drop
STARVED = Observation(waiting=0, dropped=0, learner_wait_s=0.02, interval_s=0.05)  # the learner idle 40% of the time


def _feed(ctl: RateBalancer, obs: Observation, n: int) -> list[Decision]:
    return [ctl.update(obs) for _ in range(n)]


def test_controller_ignores_warmup_then_narrows_the_window_with_a_cooldown():
    ctl = RateBalancer(max_active=4, min_active=1, cooldown=2, warmup=2)
    assert ctl.decision() == Decision(4, 4)  # one batch in flight per thread to begin with
    decisions = _feed(ctl, OVER, 12)
    assert decisions[:2] == [Decision(4, 4)] * 2  # warm-up: compilation
    windows = [d.window for d in decisions[2:]]
    assert windows == [3, 3, 3, 2, 2, 2, 1, 1, 1, 1]  # one step, then `cooldown` updates without a change
    assert decisions[-1] == Decision(1, 1)  # the floor: one batch in flight


def test_controller_holds_in_the_band_and_widens_when_starved_up_to_no_limit():
    ctl = RateBalancer(max_active=3, min_active=2, cooldown=0, warmup=0, patience=1)
    _feed(ctl, OVER, 5)
    assert ctl.decision() == Decision(2, 1)  # the window can go below min_active; the threads cannot
    assert _feed(ctl, BUSY, 5) == [Decision(2, 1)] * 5  # fed and nothing waiting: the hysteresis band holds
    # a short wait (below starve_fraction of the update) is noise, not starvation
    assert ctl.update(Observation(0, 0, 0.005, 0.05)) == Decision(2, 1)
    assert _feed(ctl, STARVED, 3) == [Decision(2, 2), Decision(3, 3), Decision(3, None)]
    assert ctl.update(STARVED) == Decision(3, None)  # the ceiling: every thread, no limit
    # the target: batches allowed to wait behind the one taken
    ctl = RateBalancer(max_active=2, target=1, cooldown=0, warmup=0)
    assert ctl.update(Observation(1, 0, 0.0, 0.03)) == Decision(2, 2)
    assert ctl.update(Observation(2, 0, 0.0, 0.03)) == Decision(1, 1)
    # patience: widening only after that many starved updates in a row
    ctl = RateBalancer(max_active=2, cooldown=0, warmup=0, patience=3)
    ctl.update(OVER)
    assert [ctl.update(o).window for o in (STARVED, STARVED, BUSY, STARVED, STARVED, STARVED)] == [1, 1, 1, 1, 1, 2]
    with pytest.raises(ValueError, match="min_active"):
        RateBalancer(max_active=1, min_active=2)


def test_throttle_pauses_threads_and_holds_the_window():
    import threading

    th = Throttle(active=2)
    th.set(Decision(active=1, window=1))
    th.wait_turn(0)  # thread 0: one batch outstanding
    started = []
    waiter = threading.Thread(target=lambda: (th.wait_turn(0), started.append(0)))
    waiter.start()
    waiter.join(0.2)
    assert not started  # the window is full
    th.taken()  # the learner took the batch
    waiter.join(5)
    assert started == [0]
    paused = threading.Thread(target=lambda: pytest.raises(BufferClosed, th.wait_turn, 1))
    paused.start()
    paused.join(0.2)
    assert paused.is_alive()  # thread 1 is paused (index >= active)
    th.close()
    paused.join(5)
    assert not paused.is_alive()


def test_balance_settings_are_checked_before_anything_compiles():
    with pytest.raises(ConfigError, match=r"async.balance.*allowed: off, rate"):
        load_config(None, ["mode=async", "async.balance=fast"])
    with pytest.raises(ConfigError, match="async.min_actor_threads"):
        load_config(None, ["mode=async", "async.num_actor_threads=2", "async.min_actor_threads=3"])
    with pytest.raises(ConfigError, match="async.balance_target"):
        load_config(None, ["mode=async", "async.buffer_capacity=2", "async.balance_target=2"])
    assert load_config(None, ["mode=async"]).async_.balance == "off"


def _drop_runs(micro_batches: int, updates: int = 48) -> dict[str, dict]:
    """balance=off, then rate, on one runner (compiled once): drop mode, K=1, 2 actor threads, M slices."""
    from marljax.bench.balance import DEFAULTS, balanced_run, pad_generation, pad_learning
    from marljax.config import replace
    from marljax.train.actor_learner import AsyncRun
    from marljax.train.wiring import make_adapter, make_trainer

    config = load_config(None, DEFAULTS + [f"async.micro_batches={micro_batches}"])
    runner = AsyncRun(config, make_adapter(config), make_trainer, log=lambda s: None)
    # 2 threads of 20 ms rollouts against 30 ms updates: 3x more production than consumption
    pad_learning(runner, 0.03)
    pad_generation(runner, 0.02)
    return {b: balanced_run(runner, replace(config, **{"async": {"balance": b}}), updates) for b in ("off", "rate")}


@pytest.mark.nightly  # ~40 s on a 2-core machine, nearly all of it compiling the runner
@pytest.mark.parametrize("micro_batches", [1, 2])  # 2: every count, the window included, in slices
def test_rate_balance_drops_fewer_batches_than_off(micro_batches):
    runs = _drop_runs(micro_batches)
    off, rate = runs["off"], runs["rate"]
    for r in (off, rate):
        assert r["produced"] == r["consumed"] + r["dropped_stale"] + r["dropped_end_of_run"]
        assert r["consumed"] == 48 * micro_batches
    assert off["active_actors"] == [2] * len(off["active_actors"]) and set(off["batch_window"]) == {None}
    assert all(1 <= a <= 2 for a in rate["active_actors"])
    # counts, not timings: off drops about half of what it makes; rate keeps production near consumption
    assert rate["drop_share"] < off["drop_share"] / 2, (off, rate)


def test_deterministic_mode_ignores_balance_bitwise():
    """One runner (compiled once) from the same initial state, run with balance=off and =rate."""
    from marljax.config import replace
    from marljax.train.actor_learner import AsyncRun
    from marljax.train.wiring import make_adapter, make_trainer

    base = load_config(None, ["mode=async", "num_envs=8", "num_steps=16", "async.deterministic=true",
                              "async.max_staleness=2"])  # fmt: skip
    runner = AsyncRun(base, make_adapter(base), make_trainer, log=lambda s: None)
    initial = jax.device_get(runner.learner)  # the learner state is donated: keep a host copy
    sharding = jax.tree.map(lambda x: x.sharding, runner.learner)
    out = {}
    for balance in ("off", "rate"):
        runner.config = replace(base, **{"async": {"balance": balance}})
        runner.learner = jax.device_put(initial, sharding)
        rows: list = []
        runner.run(8, lambda m, wall, row, learner: rows.append((jax.device_get(m), row)), chunk=4)  # noqa: B023 (run returns before the next balance)
        out[balance] = (rows, jax.device_get(runner.learner))
    (rows_off, learner_off), (rows_rate, learner_rate) = out["off"], out["rate"]
    for (m_off, row_off), (m_rate, row_rate) in zip(rows_off, rows_rate, strict=True):
        jax.tree.map(np.testing.assert_array_equal, m_off, m_rate)
        assert row_off["staleness_mean"] == row_rate["staleness_mean"]  # the same fixed lag
        assert row_rate["active_actors"] == 1 and row_rate["batch_window"] is None  # the controller never ran
        assert row_rate["balance_target"] is None
    assert rows_rate[-1][1]["staleness_mean"] == 2.0  # after the first K batches every one is K old
    jax.tree.map(np.testing.assert_array_equal, learner_off, learner_rate)
