"""async.actor_backend=cpu: the actors take host CPU devices and the learner the accelerator's.

No accelerator here, so the two-pool split is checked on stand-in devices of two platforms, and
on this CPU-only machine the setting is checked to leave the placement as it is (the accelerator
path itself runs in the offline GPU protocol's async step, docs/offline_gpu.md)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from marljax.config import ConfigError, load_config
from marljax.pipeline.async_mesh import _split, async_placement


def _placement(config):
    return async_placement(config.async_, config.mesh.agent, config.num_envs)


BASE = ["mode=async", "num_envs=8", "num_steps=16", "total_timesteps=2048", "progress=false", "plot=false"]


class Dev(NamedTuple):  # what _split reads of a device
    platform: str
    id: int


GPUS = [Dev("gpu", i) for i in range(2)]
CPUS = [Dev("cpu", i) for i in range(4)]


@pytest.mark.parametrize(
    "actors, learners, want_actors, want_learners",
    [
        ("1", "1", CPUS[:1], GPUS[:1]),
        ("3", "2", CPUS[:3], GPUS),
        ("[0,2]", "[0]", [CPUS[0], CPUS[2]], [GPUS[0]]),  # the same index in two pools names two devices
    ],
)
def test_actors_come_from_the_host_cpus_and_the_learner_from_the_accelerator(
    actors, learners, want_actors, want_learners
):
    config = load_config(None, BASE + ["async.actor_backend=cpu", f"async.actor_devices={actors}",
                                       f"async.learner_devices={learners}"])  # fmt: skip
    actor, learner = _split(config.async_, GPUS, CPUS)
    assert (actor, learner) == (want_actors, want_learners)
    # negative control: without the CPU pool the same counts share the accelerator's devices out
    if "[" not in actors and int(actors) + int(learners) <= len(GPUS):
        assert _split(config.async_, GPUS) == (GPUS[: int(actors)], GPUS[int(actors) : int(actors) + int(learners)])


def test_the_cpu_pool_is_used_only_when_asked_for_and_the_default_backend_is_not_the_cpu(monkeypatch):
    import jax

    from marljax.pipeline import async_mesh

    monkeypatch.setattr(jax, "local_devices", lambda backend=None: CPUS if backend == "cpu" else GPUS)
    cpu = load_config(None, BASE + ["async.actor_backend=cpu"])
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert async_mesh._host_cpu_devices(cpu.async_) == CPUS
    assert async_mesh._host_cpu_devices(load_config(None, BASE).async_) is None  # actor_backend=default
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert async_mesh._host_cpu_devices(cpu.async_) is None  # a CPU-only machine: one pool


def test_too_many_devices_name_the_field_and_the_platform():
    config = load_config(None, BASE + ["async.actor_backend=cpu", "async.actor_devices=1", "async.learner_devices=3"])
    with pytest.raises(
        ConfigError, match=r"async\.learner_devices: 3 devices asked for, but 2 gpu devices are visible"
    ):
        _split(config.async_, GPUS, CPUS)
    config = load_config(
        None, BASE + ["async.actor_backend=cpu", "async.actor_devices=[7]", "async.learner_devices=[0]"]
    )
    with pytest.raises(ConfigError, match=r"async\.actor_devices: device indices \[7\] don't exist; 4 cpu devices"):
        _split(config.async_, GPUS, CPUS)


def test_overlapping_index_lists_are_allowed_only_across_two_platforms():
    both = ["async.actor_devices=[0]", "async.learner_devices=[0]"]
    load_config(None, BASE + ["async.actor_backend=cpu"] + both)  # two pools: CPU 0 and GPU 0
    with pytest.raises(ConfigError, match="disjoint"):
        load_config(None, BASE + both)  # one pool: the same device twice
    with pytest.raises(ConfigError, match="disjoint"):  # cpu on a CPU-only machine is one pool too
        _split(load_config(None, BASE + ["async.actor_backend=cpu"] + both).async_, CPUS)


def test_cpu_actors_move_only_the_actors_to_the_host():
    """On a CPU-only machine async.actor_backend=cpu changes nothing; on an accelerator (the GPU
    protocol's tests step) the actors move to the host CPU and the learner stays on the card."""
    import jax

    a = _placement(load_config(None, BASE + ["async.actor_backend=cpu"]))
    b = _placement(load_config(None, BASE))
    assert list(a.learner_mesh.devices.flat) == list(b.learner_mesh.devices.flat)
    assert a.actor_devices[0].platform == "cpu"
    if jax.default_backend() == "cpu":
        assert a.actor_devices == b.actor_devices
    else:
        assert all(d.platform != "cpu" for d in list(b.actor_devices) + list(b.learner_mesh.devices.flat))


def test_an_unknown_backend_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match=r"async\.actor_backend.*default.*cpu"):
        load_config(None, BASE + ["async.actor_backend=tpu"])
