"""The backend-specific choices (nn/backend.py), the flat minibatch loop, the loop-trip count
and the device defaults: each against a reference computed another way, with a negative control."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marljax import device_defaults
from marljax.algos.learning import Minibatches
from marljax.bench.measure import loop_trips
from marljax.config import ConfigError, load_config
from marljax.config import device_defaults as kept_device_defaults
from marljax.nn import backend, ops


def _rollout(T: int = 32, E: int = 6, A: int = 3, p_done: float = 0.1):
    k = jax.random.split(jax.random.PRNGKey(3), 4)
    return (
        jax.random.normal(k[0], (T, E, A)),
        jax.random.normal(k[1], (T, E, A)),
        jax.random.bernoulli(k[2], p_done, (T, E, A)),
        jax.random.normal(k[3], (E, A)),
    )


def test_associative_gae_is_the_scan_to_float_rounding():
    reward, value, done, last = _rollout()
    adv, target = ops.gae(reward, value, done, last, 0.99, 0.95, "scan")
    adv2, target2 = ops.gae(reward, value, done, last, 0.99, 0.95, "associative")
    np.testing.assert_allclose(adv2, adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target2, target, rtol=1e-5, atol=1e-5)
    # negative control: the episode ends matter, and the comparison sees them
    ignored, _ = ops.gae(reward, value, jnp.zeros_like(done), last, 0.99, 0.95, "associative")
    assert np.max(np.abs(np.asarray(ignored - adv))) > 1e-2
    with pytest.raises(ValueError, match="method must be"):
        ops.gae(reward, value, done, last, 0.99, 0.95, "parallel")


def test_choices_per_backend_and_forced(monkeypatch):
    monkeypatch.delenv("MARLJAX_BACKEND_CHOICES", raising=False)
    assert backend.choices("cpu") == backend.Choices(gae="scan", conv="patch")
    assert backend.choices("gpu") == backend.choices("tpu") == backend.Choices(gae="associative", conv="xla")
    assert backend.choices() == backend.choices(jax.default_backend())  # the tests' backend: a CPU, or the card's
    monkeypatch.setenv("MARLJAX_BACKEND_CHOICES", "gae=associative")
    assert backend.choices("cpu") == backend.Choices(gae="associative", conv="patch")
    monkeypatch.setenv("MARLJAX_BACKEND_CHOICES", "gae=fast")
    with pytest.raises(ValueError, match="'gae=fast' is not a choice; allowed: gae=scan|associative"):
        backend.choices("cpu")


def _nested_run(batches: Minibatches, step, carry, key, shuffle, data):
    """The loop as it was: a scan over epochs around a scan over each epoch's shuffled minibatches."""

    def epoch(carry, key_e):
        return jax.lax.scan(step, carry, shuffle(data, key_e))

    return jax.lax.scan(epoch, carry, jax.random.split(key, batches.epochs))


@pytest.mark.parametrize("runs", [False, True], ids=["steps", "runs"])
def test_the_flat_minibatch_loop_sees_what_the_nested_one_saw(runs):
    T, M, E = 8, 4, 6
    batches = Minibatches(T, M, 3, E, E, None)
    data = {"x": jnp.arange(T * E * 2, dtype=jnp.float32).reshape(T, E, 2), "y": jnp.arange(T * E).reshape(T, E)}

    def step(carry, mb):  # the carry depends on the order of the minibatches and their contents
        return carry * 1.5 + jnp.sum(mb["x"] * jnp.arange(1, mb["x"].size + 1).reshape(mb["x"].shape)), mb

    shuffle = lambda d, k: batches.shuffle(d, k, runs=runs)  # noqa: E731
    key = jax.random.PRNGKey(7)
    flat = jax.jit(lambda d: batches.run(step, 0.0, key, shuffle, d))(data)
    nested = jax.jit(lambda d: _nested_run(batches, step, 0.0, key, shuffle, d))(data)
    assert jax.tree.structure(flat) == jax.tree.structure(nested)
    for a, b in zip(jax.tree.leaves(flat), jax.tree.leaves(nested)):
        np.testing.assert_array_equal(a, b)  # bitwise: the same minibatches in the same order
    other = jax.jit(lambda d: _nested_run(batches, step, 0.0, jax.random.PRNGKey(8), shuffle, d))(data)
    assert not np.array_equal(other[1]["x"], flat[1]["x"])  # negative control: another key, other minibatches


def test_loop_trips_counts_nested_loops_once_per_trip():
    def program(x):
        def outer(c, _):
            c, _ = jax.lax.scan(lambda c2, _: (c2 * 1.01, None), c, None, length=4)
            return c, None

        x, _ = jax.lax.scan(outer, x, None, length=3)
        x, _ = jax.lax.scan(lambda c, _: (c + 1.0, None), x, None, length=7)
        return x + jax.random.uniform(jax.random.PRNGKey(0), x.shape)  # the hash's own loop is not counted

    assert loop_trips(jax.jit(program).lower(jnp.ones(3)).compile().as_text()) == 3 * (1 + 4) + 7
    assert loop_trips(jax.jit(lambda x: x * 2.0).lower(jnp.ones(3)).compile().as_text()) == 0


def test_device_defaults_sit_between_the_family_and_explicit_settings(monkeypatch):
    monkeypatch.setattr(device_defaults, "DEVICE_DEFAULTS", {"gpu": {"ippo": {"mpe": {"num_envs": 1024}}}})
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # (on a card's test run too)
    on_cpu = load_config(None, [])
    assert on_cpu.num_envs == 64 and kept_device_defaults(on_cpu) == ("cpu", {})  # nothing changes on a CPU
    on_gpu = load_config(None, ["device_defaults=gpu"])
    assert on_gpu.num_envs == 1024 and on_gpu.lr == 4e-3  # over the family's lr, which stays
    assert kept_device_defaults(on_gpu) == ("gpu", {"num_envs": 1024})
    explicit = load_config(None, ["device_defaults=gpu", "num_envs=32"])
    assert explicit.num_envs == 32 and kept_device_defaults(explicit) == ("gpu", {})  # an explicit setting wins
    assert load_config(None, ["device_defaults=gpu", "env=HeuristicEnemySMAX"]).num_envs == 64  # not declared there
    with pytest.raises(ConfigError, match="device_defaults"):
        load_config(None, ["device_defaults=ipu"])


def test_a_multi_process_run_asks_no_backend_for_its_device_defaults(monkeypatch):
    """On the card, asking JAX's backend at config time came before jax.distributed.initialize, and
    every multi-process run failed ("must be initialized before JAX touches a device")."""
    import marljax.config

    asked: list[bool] = []
    monkeypatch.setattr(
        marljax.config, "device_platform", lambda start_backend=True: asked.append(start_backend) or "gpu"
    )
    load_config(None, [])
    assert asked == []  # no device declares defaults for the run: no device is asked
    monkeypatch.setattr(device_defaults, "DEVICE_DEFAULTS", {"gpu": {"ippo": {"mpe": {"num_envs": 1024}}}})
    assert load_config(None, []).num_envs == 1024 and asked == [True]  # control: one process asks the backend
    for processes in (
        ["distributed.num_processes=2", "distributed.coordinator=127.0.0.1:1234"],
        ["distributed.auto=true"],
    ):
        asked.clear()
        assert load_config(None, processes).num_envs == 1024 and asked == [False], processes


def test_platform_is_cpu_without_importing_an_accelerator(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert device_defaults.platform() == "cpu"
