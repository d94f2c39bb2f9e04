"""Independent host stepping (marljax/pipeline/host_copies.py) cuts each copy's steps into batch
columns: every column is T consecutive steps of ONE copy of its seed, each step's observation,
action, value, reward and done in the same row, and the column's last value that of the
observation after its last step. Checked with an env whose observations say which copy made
them and when (tests/counter_env.py), stepping inline and on workers, with stale segments
discarded while steps are in flight."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

from marljax.config import load_config
from marljax.pipeline import host_copies
from marljax.pipeline.env_workers import EnvHealth
from marljax.pipeline.host_copies import IndependentHostCollector
from marljax.pipeline.settings import HostRunSettings
from marljax.train.wiring import make_adapter

EPISODE, T, E, S = 5, 6, 4, 2


def _policy(params, obs, reset, hidden, key):
    """A stand-in for the policy: action t % 2, logp -t, value 1000 * copy + t ([S, E, A] each)."""
    out = {}
    for g, o in obs.items():
        o = np.asarray(o)  # [S, E, A, 3]: copy, t, 0
        copy, t = o[..., 0], o[..., 1]
        out[g] = ((t % 2).astype(np.int32), -t, 1000.0 * copy + t, np.zeros(o.shape[:3] + (1,), np.float32))
    return out


def _collector(step_cost_s: float, workers: bool, extra: tuple[str, ...] = ()) -> IndependentHostCollector:
    args = ["mode=async", "env=pettingzoo:tests.counter_env:parallel_env", f"num_envs={E}", f"num_steps={T}",
            f"num_seeds={S}", "hidden_size=8", "ppo.num_minibatches=1", "progress=false", "async.host_stepping=independent",
            "async.max_staleness=0", f"env_kwargs.episode={EPISODE}", f"env_kwargs.step_cost_s={step_cost_s}"]  # fmt: skip
    if workers:  # with a step timeout every copy steps on its worker (stepping.py)
        args.append("async.env_step_timeout_s=30")
    args += extra
    config = load_config(None, args)
    keys = jax.random.split(jax.random.PRNGKey(0), S)
    return IndependentHostCollector(
        HostRunSettings.of(config), make_adapter(config), _policy, None, keys, 0, EnvHealth()
    )


def _column_errors(traj, seed_copies: list[set[int]]) -> list[str]:
    """What is wrong with the batch's columns (empty: nothing)."""
    errors = []
    for g, b in traj.batch.items():
        obs, action, logp, value = (np.asarray(x) for x in (b.obs, b.action, b.logp, b.value))  # [S, T, E, A, ...]
        reward, done, last = np.asarray(b.reward), np.asarray(b.done), np.asarray(traj.last_value[g])
        for s, e in itertools.product(range(S), range(E)):
            copy, t = obs[s, :, e, :, 0], obs[s, :, e, :, 1]  # [T, A]
            where = f"group {g} seed {s} column {e}"
            if not (copy == copy[0, 0]).all() or int(copy[0, 0]) not in seed_copies[s]:
                errors.append(f"{where}: steps of copies {np.unique(copy)}, not one copy of the seed")
            if not (np.diff(t, axis=0) == np.where(done[s, :-1, e], -t[:-1], 1)).all():
                errors.append(f"{where}: steps not consecutive: t {t[:, 0]}, done {done[s, :, e, 0]}")
            if not ((done[s, :, e] == (t == EPISODE - 1)).all() and (reward[s, :, e] == t + 1).all()):
                errors.append(f"{where}: reward or done not of the row's step")
            if not ((value[s, :, e] == 1000 * copy + t).all() and (logp[s, :, e] == -t).all()
                    and (action[s, :, e] == t % 2).all()):  # fmt: skip
                errors.append(f"{where}: the policy's outputs not of the row's observation")
            after = np.where(done[s, -1, e], 0, t[-1] + 1)
            if not (last[s, e] == 1000 * copy[-1] + after).all():
                errors.append(f"{where}: last value {last[s, e]}, not of the observation after the last step")
    return errors


def _seed_copies(collector) -> list[set[int]]:
    return [{c.worker.env.env.copy for c in collector.seed_copies(s)} for s in range(S)]


@pytest.mark.parametrize("workers", [False, True], ids=["inline", "workers"])
def test_every_column_is_consecutive_steps_of_one_copy(workers):
    collector = _collector(0.002 if workers else 0.0, workers)
    calls = itertools.count()
    collector.newest = lambda: (next(calls), None)  # a new policy version at every policy call
    moved = 0  # discarded segments whose copy had a step in flight (it starts the copy's next segment)
    try:
        # at least 24 batches, more where the copies' steps happened to end before each batch (a fast
        # machine: the card's 16 cores), until one was in flight
        for ticket in range(240):
            if ticket >= 24 and (moved or not workers):
                break
            # every other batch: the staleness bound drops what started more than 2 policy calls ago
            version = max(next(calls) - 2, 0) if ticket % 2 else 0
            moved += sum(
                c.pending is not None and c.filled > 0 and c.segment_version < version for c in collector.copies
            )
            traj, oldest = collector.collect(None, ticket, version=version)
            assert oldest >= version
            assert _column_errors(traj, _seed_copies(collector)) == []
    finally:
        collector.close()
    if workers:  # (inline, equal copies step in sync: nothing is carried over, nothing discarded)
        assert collector.health.snapshot()["env_steps_discarded"] > 0
        assert moved > 0  # the in-flight case was exercised
    else:
        assert collector.health.snapshot()["env_steps_inline"] > 0


def test_the_column_check_finds_a_broken_column():  # the negative control of the test above
    collector = _collector(0.0, workers=False)
    try:
        traj, _ = collector.collect(None, 0)
    finally:
        collector.close()
    seeds = _seed_copies(collector)
    assert _column_errors(traj, seeds) == []
    g = next(iter(traj.batch))
    b = traj.batch[g]
    swapped = b.obs.copy()
    swapped[0, :, [0, 1]] = swapped[0, :, [1, 0]]  # two columns' observations exchanged
    assert _column_errors(traj._replace(batch={g: b._replace(obs=swapped)}), seeds)
    shifted = b.reward.copy()
    shifted[1, :, 2] = np.roll(shifted[1, :, 2], 1, axis=0)  # one column's rewards a step late
    assert _column_errors(traj._replace(batch={g: b._replace(reward=shifted)}), seeds)
    late = {g: traj.last_value[g] + 1}
    assert _column_errors(traj._replace(last_value=late), seeds)


def _parked(slow: bool, items: int = 40) -> tuple[IndependentHostCollector, list[list[bool]]]:
    """`items` items with a new policy version each and max_staleness 0; slow: the copy made first
    after the adapter's prototype (seed 0's first) steps 50x slower than the others. (collector,
    for every item whether each copy was parked during it)."""
    import tests.counter_env as counter_env

    first = next(counter_env._made) + 2  # this count, the adapter's prototype, then the copies in order
    extra = (f"env_kwargs.slow_copy={first if slow else -1}", "env_kwargs.slow_s=0.05")
    collector = _collector(0.001, workers=False, extra=extra)
    parked = []
    try:
        for ticket in range(items):
            traj, _ = collector.collect(None, ticket, version=ticket)
            assert _column_errors(traj, _seed_copies(collector)) == []
            parked.append([c.parked_until > collector.items - 1 for c in collector.copies])
    finally:
        collector.close()
    return collector, parked


# Parking reads wall-clock step times, so on a loaded machine (CI's two test workers on two cores) a stall can
# leave a fast copy's segment stale twice in a row and park it for PARK_ITEMS[0] = 4 items: seen twice in CI
# runs, once in each test below. So the tests count items parked per copy: measured on a quiet machine, the slow
# copy is parked during 28-29 of the 40 items and every other copy during none, slow or not. A fast copy may be
# parked twice (8 items, a fifth of the run) before either test fails; the slow one must be parked half the time.
STALLS_ALLOWED = 2 * host_copies.PARK_ITEMS[0]  # items a fast copy may spend parked


def _items_parked(parked: list[list[bool]]) -> list[int]:
    """For every copy, the number of items during which it was parked."""
    return [sum(p[i] for p in parked) for i in range(len(parked[0]))]


def test_a_copy_too_slow_for_the_staleness_bound_is_parked():
    collector, parked = _parked(slow=True)
    assert collector.copies[0].worker.env.env.step_cost_s == 0.05  # the slow one is seed 0's first copy
    assert collector.health.snapshot()["env_copies_parked"] >= 1
    counts = _items_parked(parked)
    assert counts[0] >= len(parked) // 2 and max(counts[1:]) <= STALLS_ALLOWED, counts  # it, far more than another
    assert max(sum(p[s * E : (s + 1) * E]) for p in parked for s in range(S)) <= (E - 1) // 2


def test_equal_copies_are_parked_no_longer_than_a_stall():  # the negative control of the test above
    collector, parked = _parked(slow=False)
    counts = _items_parked(parked)
    assert max(counts) <= STALLS_ALLOWED, counts  # at most a stall's parking, where the slow copy's is >= 20 items
