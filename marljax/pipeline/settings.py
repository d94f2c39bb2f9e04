"""The pipeline layer's settings: `async.*`, the actor-learner pipeline of mode=async
(marljax/pipeline). A section of every algorithm whose `Supports(async_mode=True)`. Light on
purpose: it imports only the settings engine."""

from __future__ import annotations

import dataclasses
from typing import Any

from marljax.schema import ConfigError, Part, register_part, setting


@dataclasses.dataclass(frozen=True)
class AsyncConfig:
    """`async.*`: the actor-learner pipeline of mode=async (marljax/pipeline).

    For algorithms that support it: actor threads produce version-stamped rollouts into a bounded
    host-side buffer that the learner consumes."""

    actor_devices: Any = setting(
        1, "a device count (the first N devices act) or a list of device indices", resumable=True
    )
    learner_devices: Any = setting(
        1, "a device count (the next M devices learn) or a list of device indices", resumable=True
    )
    actor_backend: str = setting(
        "default",
        "where the actors run: default (the devices of JAX's default backend, shared out with the learner "
        "by async.actor_devices / learner_devices) | cpu (the host CPU backend's devices, while the learner takes "
        "the accelerator's; async.actor_devices then counts or indexes CPU devices, async.learner_devices the "
        "accelerator's; on a CPU-only machine the same as default)",
        choices=("default", "cpu"),
        resumable=True,
    )
    num_actor_threads: int = setting(1, "actor threads, each with num_envs environments", minimum=1)
    buffer_capacity: int = setting(2, "batches the buffer may hold (started and not consumed, for block)", minimum=1)
    max_staleness: int = setting(1, "K: the most policy versions a consumed batch may lag the learner", minimum=0)
    staleness_policy: str = setting(
        "block", "block: actors wait rather than exceed K; drop: stale batches are dropped", choices=("block", "drop")
    )
    correction: str = setting(
        "ppo_clip",
        "off-policy correction: none | ppo_clip (decoupled PPO) | vtrace",
        choices=("none", "ppo_clip", "vtrace"),
    )
    deterministic: bool = setting(False, "lockstep with a fixed lag of exactly K versions; bitwise reproducible")
    micro_batches: int = setting(
        1,
        "M: each actor thread rolls out its num_envs environments in M slices of num_envs/M, each its own "
        "jitted rollout and buffer item with its own version stamp; an update concatenates M slices (host envs: "
        "num_envs/M finished segments, or M groups of copies in lockstep; must divide num_envs)",
        minimum=1,
        resumable=True,
    )
    record_trajectories: str = setting(
        "",
        "append every consumed batch to this zarr dataset (marljax.pipeline.recorder; "
        "several processes: process p writes PATH/process_<p>)",
    )
    actor_timeout_s: float = setting(
        300.0,
        "fail the run, naming the actor, when one rollout (a JAX env's, compilation included) or one host "
        "env step takes longer than this; 0 waits forever",
        minimum=0.0,
        resumable=True,
    )
    host_stepping: str = setting(
        "auto",
        "host (PettingZoo) env copies: independent (each copy steps on its own worker thread; a slow or "
        "failing copy holds back only its own trajectory) | lockstep (all copies step together, one after another) "
        "| auto (lockstep when deterministic, else independent)",
        choices=("auto", "independent", "lockstep"),
        resumable=True,
    )
    env_step_timeout_s: float = setting(
        0.0,
        "independent stepping: a host env step longer than this fails its copy, which is restarted from a "
        "fresh env; 0: off (a hung step then stops the run after actor_timeout_s)",
        minimum=0.0,
        resumable=True,
    )
    max_env_failures: int = setting(
        3,
        "independent stepping: a host env copy is retired at this many failures (raises or timeouts) in a row; "
        "a finished episode ends the row",
        minimum=1,
        resumable=True,
    )
    min_env_copies: int = setting(
        1,
        "independent stepping: the run fails when fewer live host env copies than this remain for one seed of "
        "an actor thread (at most num_envs)",
        minimum=1,
        resumable=True,
    )
    balance: str = setting(
        "off",
        "production/consumption balance: off | rate (pause actor threads between batches, within "
        "[min_actor_threads, num_actor_threads], and bound the batches in flight, so that about balance_target "
        "batches wait for the learner and none is dropped; with micro-batches it counts slices; "
        "marljax/pipeline/balance.py). Ignored with deterministic=true",
        choices=("off", "rate"),
        resumable=True,
    )
    min_actor_threads: int = setting(
        1, "balance=rate: the fewest active actor threads (at most num_actor_threads)", minimum=1, resumable=True
    )
    balance_target: int = setting(
        0,
        "balance=rate: batches that should wait in the buffer behind the one the learner takes (below buffer_capacity)",
        minimum=0,
        resumable=True,
    )

    def check(self, config: Any) -> None:
        for name in ("actor_devices", "learner_devices"):
            v = getattr(self, name)
            ok_count = isinstance(v, int) and not isinstance(v, bool) and v >= 1
            ok_list = isinstance(v, (list, tuple)) and v and all(isinstance(i, int) and i >= 0 for i in v)
            if not (ok_count or ok_list) or (ok_list and len(set(v)) != len(v)):
                raise ConfigError(
                    f"async.{name}", f"must be a device count >= 1 or a list of distinct device indices, got {v!r}"
                )
        lists = isinstance(self.actor_devices, (list, tuple)) and isinstance(self.learner_devices, (list, tuple))
        if lists and self.actor_backend == "default":  # with cpu they may index two platforms (async_mesh checks)
            shared = sorted(set(self.actor_devices) & set(self.learner_devices))
            if shared:
                raise ConfigError(
                    "async.learner_devices", f"actor and learner devices must be disjoint; both list {shared}"
                )
        if self.record_trajectories and config.mode != "async":
            raise ConfigError("async.record_trajectories", "records the async learner's batches; set mode=async")
        if (
            config.mode == "async"
            and self.deterministic
            and (self.num_actor_threads != 1 or self.staleness_policy != "block")
        ):
            raise ConfigError(
                "async.deterministic",
                "needs async.num_actor_threads=1 and async.staleness_policy=block (lockstep with a fixed lag)",
            )
        if self.deterministic and self.host_stepping == "independent":
            raise ConfigError(
                "async.host_stepping",
                "independent stepping depends on timing; with async.deterministic=true allowed: lockstep or auto",
            )
        if self.min_env_copies > config.num_envs:
            raise ConfigError(
                "async.min_env_copies", f"must be between 1 and num_envs={config.num_envs}, got {self.min_env_copies}"
            )
        if self.env_step_timeout_s and self.actor_timeout_s and self.env_step_timeout_s >= self.actor_timeout_s:
            raise ConfigError(
                "async.env_step_timeout_s",
                f"must be below async.actor_timeout_s={self.actor_timeout_s:g} "
                f"(or 0: off), got {self.env_step_timeout_s:g}; else the run stops before a hung copy is restarted",
            )

        self._check_micro_batches(config)
        if self.min_actor_threads > self.num_actor_threads:
            raise ConfigError(
                "async.min_actor_threads",
                f"must be between 1 and async.num_actor_threads={self.num_actor_threads}, got {self.min_actor_threads}",
            )
        if self.balance_target >= self.buffer_capacity:
            raise ConfigError(
                "async.balance_target",
                f"must be between 0 and async.buffer_capacity - 1 = "
                f"{self.buffer_capacity - 1}, got {self.balance_target}",
            )

    def _check_micro_batches(self, config: Any) -> None:
        M, E = self.micro_batches, config.num_envs
        if E % M:
            allowed = ", ".join(str(d) for d in range(1, E + 1) if E % d == 0)
            raise ConfigError(
                "async.micro_batches",
                f"must divide num_envs={E} (each slice takes num_envs/micro_batches "
                f"environments of an actor thread); allowed: {allowed}; got {M}",
            )

    def balanced(self) -> bool:
        """Whether the balance controller runs (never in deterministic mode: timing must not steer it)."""
        return self.balance == "rate" and not self.deterministic

    def stepping(self) -> str:
        """How host env copies step: `independent` or `lockstep` (auto resolved)."""
        if self.host_stepping == "auto":
            return "lockstep" if self.deterministic else "independent"
        return self.host_stepping


register_part(Part("async", AsyncConfig, order=100, when=lambda supports: supports.async_mode))


@dataclasses.dataclass(frozen=True)
class HostRunSettings:
    """What the host collectors (host_rollout.py, host_copies.py) read of a run: its seeds, rollout
    shape, recurrence and `async.*`. The train layer builds it (`of`); the pipeline never sees the Config."""

    seed: int
    num_seeds: int
    num_envs: int
    num_steps: int
    recurrent: bool
    gru_hidden_size: int
    async_: AsyncConfig

    @classmethod
    def of(cls, config: Any) -> HostRunSettings:
        """The fields of a run's Config (any object with them and `async_`)."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: getattr(config, name) for name in names})
