"""The parallel layer's settings: `mesh.*` (marljax/parallel/mesh.py, placement.py) and
`distributed.*` (marljax/parallel/distributed.py). Light on purpose: it imports only the settings
engine, so that `marljax.config` can register it without importing JAX."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from marljax.schema import ConfigError, Part, divisors, register_part, setting


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh shape. -1 on one axis fills it with the devices left over."""

    seed: int = setting(1, "devices that split the seeds (-1: the devices left over)", resumable=True)
    data: int = setting(-1, "devices that split the environments; gradients are averaged over them", resumable=True)
    agent: int = setting(
        1, "devices that split each group's per-agent parameters (param_sharing=independent)", minimum=1, resumable=True
    )
    placement: str = setting(
        "split",
        "how groups use mesh.agent: split (every group's agents divided over it; "
        "each count must divide mesh.agent) or balanced (split where the count divides, else "
        "replicated: whole on every agent device, its environments split over it)",
        choices=("split", "balanced"),
    )
    replicate: str = setting(
        "",
        "comma-separated groups kept whole on every agent device (e.g. a heavy or "
        "odd-sized group), whatever mesh.placement says",
    )

    @property
    def replicated(self) -> tuple[str, ...]:
        """mesh.replicate's group names."""
        return tuple(name.strip() for name in str(self.replicate).split(",") if name.strip())

    def check(self, config: Any) -> None:
        """The mesh against the run's seeds, environments, sharing and mode (devices: parallel.mesh)."""
        c = config
        if c.mode == "async" and (self.data not in (-1, 1) or self.seed not in (-1, 1)):
            raise ConfigError(
                "mesh",
                "mode=async places work with async.actor_devices and async.learner_devices (mesh.agent splits the "
                "learner's agents); leave mesh.seed and mesh.data at their defaults",
            )
        for axis in ("seed", "data"):
            size = getattr(self, axis)
            if size == 0 or size < -1:
                raise ConfigError(f"mesh.{axis}", f"must be a positive device count or -1, got {size}")
        if not isinstance(self.agent, int) or self.agent < 1:
            raise ConfigError("mesh.agent", f"must be a positive device count, got {self.agent!r}")
        if self.agent > 1 and c.param_sharing != "independent":
            raise ConfigError(
                "mesh.agent",
                f"splits per-agent parameter sets, so it needs param_sharing=independent "
                f"(got {c.param_sharing!r}, which has one set per group); use mesh.data to add devices",
            )
        if self.seed == -1 and self.data == -1:
            raise ConfigError("mesh", "only one of mesh.seed and mesh.data may be -1")
        if self.seed > 0 and c.num_seeds % self.seed:
            raise ConfigError("mesh.seed", f"must divide num_seeds={c.num_seeds}; allowed: {divisors(c.num_seeds)}")
        if self.data > 0 and c.num_envs % (self.data * self.agent):
            raise ConfigError(
                "mesh.data",
                f"mesh.data*mesh.agent must divide num_envs={c.num_envs} (they split the environments "
                f"while acting); allowed products: {divisors(c.num_envs)}",
            )


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Multi-host runs (marljax.parallel.distributed), in both modes (mode=async: one pipeline per
    process, one learner mesh across them; marljax/pipeline/processes.py). `distributed=auto` lets
    JAX find the cluster itself (Cloud TPU, Slurm, Open MPI); else give all three of the first fields."""

    coordinator: str = setting("", "host:port of process 0, reachable from every process", resumable=True)
    num_processes: int = setting(1, "processes in the run; 1: a single-process run", minimum=1, resumable=True)
    process_id: int = setting(0, "this process, 0 .. num_processes-1", resumable=True)
    auto: bool = setting(
        False, "jax.distributed.initialize() with no arguments (JAX finds the cluster)", resumable=True
    )
    timeout_s: int = setting(
        120, "seconds before joining gives up (a missing process, a wrong address)", minimum=1, resumable=True
    )

    def check(self, config: Any) -> None:
        if not 0 <= self.process_id < self.num_processes:
            raise ConfigError(
                "distributed.process_id",
                f"must lie in 0..{self.num_processes - 1} (distributed.num_processes - 1), got {self.process_id}",
            )
        if self.num_processes > 1 and not self.auto and not re.fullmatch(r"[^:\s]+:\d+", self.coordinator):
            raise ConfigError(
                "distributed.coordinator",
                f"needs host:port of process 0 (e.g. 10.0.0.2:8476) with num_processes > 1, got {self.coordinator!r}",
            )
        port = self.coordinator.rpartition(":")[2]
        if self.coordinator and port.isdigit() and not 1 <= int(port) <= 65535:  # was: waited, then "did not answer"
            why = "allowed: 1..65535 (e.g. 10.0.0.2:8476)"
            raise ConfigError("distributed.coordinator", f"port {port} of {self.coordinator!r} is no TCP port; {why}")


register_part(Part("mesh", MeshConfig, order=20, help="device mesh shape: mesh.seed, mesh.data, mesh.agent"))
register_part(
    Part(
        "distributed",
        DistributedConfig,
        order=30,
        help="multi-host: distributed.* or distributed=auto",
        shorthand={"auto": {"auto": True}},
    )
)
