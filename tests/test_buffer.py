"""The trajectory buffer: staleness bound, block vs drop, exact counters, under skewed concurrent producers."""

from __future__ import annotations

import threading
import time

import pytest

from marljax.pipeline.buffer import BufferClosed, ParamStore, Stamped, TrajectoryBuffer


def _pipeline(policy: str, K: int, actor_delays: list[float], learner_delay: float, updates: int, capacity: int = 4):
    """Actors and a learner exchanging dummy batches; returns the buffer after the learner's last update."""
    buf, store = TrajectoryBuffer(capacity, K, policy), ParamStore(keep=K + 2)
    store.publish(0, "params-0")
    errors: list[BaseException] = []

    def actor(i: int, delay: float):
        seq = 0
        try:
            while True:
                ticket, min_version = buf.start()
                version, _, waited = store.wait_for(min_version)
                buf.record_actor_wait(waited)
                time.sleep(delay)  # "generating"
                buf.put(Stamped(data=(i, seq), version=version, actor=i, seq=seq, ticket=ticket))
                seq += 1
        except BufferClosed:
            pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=actor, args=(i, d), daemon=True) for i, d in enumerate(actor_delays)]
    for t in threads:
        t.start()
    seen = []
    for _ in range(updates):
        batch = buf.get(timeout=30)
        seen.append(batch)
        time.sleep(learner_delay)  # "learning"
        store.publish(buf.finish_update(), f"params-{buf.stats().version}")
    buf.close()
    store.close()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "an actor thread hung after close"
    assert not errors, errors
    return buf, seen


@pytest.mark.parametrize("policy", ["block", "drop"])
@pytest.mark.parametrize(
    "actor_delays,learner_delay",
    [([0.001, 0.001], 0.01), ([0.01, 0.01], 0.001), ([0.001, 0.01, 0.003], 0.003)],
    ids=["learner-10x-slower", "actors-10x-slower", "mixed-actors"],
)
@pytest.mark.parametrize("K", [0, 1, 3])
def test_staleness_bounded_and_counts_exact(policy, actor_delays, learner_delay, K):
    buf, seen = _pipeline(policy, K, actor_delays, learner_delay, updates=40)
    s = buf.stats()
    assert s.consumed == 40 and len(seen) == 40
    assert s.produced == s.consumed + sum(s.dropped.values()), s  # after close nothing is held
    assert s.held == 0
    assert s.staleness_max <= K and max(s.staleness_hist) <= K
    assert sum(s.staleness_hist.values()) == s.consumed
    if policy == "block":
        assert "stale" not in s.dropped
        assert [b.ticket for b in seen] == list(range(40))  # consumed in ticket order


def test_drop_mode_drops_stale_batches_and_says_why():
    # one fast actor, a slow learner, K=0: batches made with an older version are dropped at dequeue
    buf, _ = _pipeline("drop", 0, [0.0005], 0.005, updates=20, capacity=8)
    s = buf.stats()
    assert s.dropped.get("stale", 0) > 0
    assert s.staleness_hist == {0: 20}


def test_block_mode_makes_fast_actors_wait():
    buf, _ = _pipeline("block", 1, [0.0005, 0.0005], 0.01, updates=20)
    s = buf.stats()
    assert s.actor_wait_s > 0.05 and s.dropped.get("stale", 0) == 0


def test_capacity_bounds_what_is_held():
    buf = TrajectoryBuffer(capacity=2, max_staleness=10, policy="drop")
    for i in range(2):
        buf.put(Stamped(i, 0, 0, i, i))
    with pytest.raises(TimeoutError):
        buf.put(Stamped(2, 0, 0, 2, 2), timeout=0.05)
    assert buf.stats().held == 2 and buf.stats().produced == 2


def test_close_wakes_waiters_and_counts_leftovers():
    buf = TrajectoryBuffer(capacity=1, max_staleness=1, policy="block")
    buf.start()
    buf.put(Stamped("x", 0, 0, 0, 0))
    outcome = []

    def blocked_actor():  # capacity 1 is taken: start() waits
        try:
            buf.start()
        except BufferClosed:
            outcome.append("closed")

    t = threading.Thread(target=blocked_actor)
    t.start()
    time.sleep(0.05)
    buf.close()
    t.join(timeout=5)
    assert outcome == ["closed"]
    s = buf.stats()
    assert s.dropped == {"end of run": 1} and s.produced == s.consumed + 1


def test_param_store_exact_and_newest():
    store = ParamStore(keep=2)
    store.publish(0, "a")
    store.publish(1, "b")
    assert store.wait_for(0)[:2] == (1, "b")
    assert store.wait_for(1, exact=True)[:2] == (1, "b")
    store.publish(2, "c")
    with pytest.raises(KeyError):
        store.wait_for(0, exact=True)
    with pytest.raises(TimeoutError):
        store.wait_for(5, timeout=0.02)
