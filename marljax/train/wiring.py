"""From a config to the pieces a run needs: the env adapter, the algorithm's trainer and the
mesh it runs on. Everything here can fail on bad input, and does so before anything compiles.
The host loop, sweeps, policy export and the benchmarks all build their runs here."""

from __future__ import annotations

import sys

from jax.sharding import Mesh

from marljax.algos import registry
from marljax.algos.api import Trainer
from marljax.config import Config, Supports, algorithms_that
from marljax.envs.adapter import EnvAdapter
from marljax.envs.factory import BUILD_TIMEOUT_S
from marljax.envs.host import HostEnvAdapter, host_env_factory, is_host_env
from marljax.envs.registry import make_env
from marljax.parallel.layouts import Layout
from marljax.parallel.mesh import build_mesh, mesh_layout, replicated_groups
from marljax.parallel.placement import platform
from marljax.schema import ConfigError, algorithm_schema


def _build_timeout(config: Config) -> float:
    """How long building the env may take: async.actor_timeout_s where the algorithm has an async
    section (the limit on its env steps too), else the same default."""
    return config.sections["async"].actor_timeout_s if "async" in config.sections else BUILD_TIMEOUT_S


def make_adapter(config: Config) -> EnvAdapter | HostEnvAdapter:
    """The env adapter, grouped as `param_sharing` needs: by role for per_role, else by spaces.

    `env=pettingzoo:module:callable` gives a host-side adapter (mode=async only).
    """
    if is_host_env(config.env):
        hosts = [name for name in registry.names() if algorithm_schema(name).supports.host_envs]
        if config.mode != "async" or config.algo not in hosts:
            raise ConfigError("env", f"host (PettingZoo) envs run in mode=async with algo={' or '.join(hosts)}")
        if config.eval_every:
            raise ConfigError("eval_every", "evaluation runs on device; host (PettingZoo) envs have none (set 0)")
        host = HostEnvAdapter(host_env_factory(config.env, config.env_kwargs), config.env, _build_timeout(config))
        check_group_networks(config, host)
        check_action_kinds(config, host)
        return host
    group_by = "roles" if config.param_sharing == "per_role" else "spaces"
    env = EnvAdapter(
        make_env(config.env, config.env_kwargs, _build_timeout(config)),
        config.env,
        group_by=group_by,
        bonus_key=config.reward_shaping.info_key,
    )
    check_group_networks(config, env)
    check_action_kinds(config, env)
    return env


def check_action_kinds(config: Config, env: EnvAdapter | HostEnvAdapter) -> None:
    """Every group's action space must be a kind the algorithm declares (`Supports.actions`):
    refused here, in one line naming the groups and the algorithms that take them, before a build
    fails deeper (or a Box is read as a count of discrete actions)."""
    takes = algorithm_schema(config.algo).supports.actions
    for kind in ("discrete", "continuous"):
        groups = [g.name for g in env.groups if g.discrete == (kind == "discrete") and kind not in takes]
        if groups:
            space = "Discrete" if kind == "discrete" else "Box"

            def takes_kind(s: Supports, kind: str = kind) -> bool:
                return kind in s.actions

            others = algorithms_that(takes_kind)
            hint = " (MPE: env_kwargs.action_type=Continuous gives Box actions)" if kind == "discrete" else ""
            raise ConfigError(
                "algo",
                f"algo={config.algo} takes {' and '.join(takes)} actions; {config.env} has "
                f"{space} actions in group(s) {', '.join(groups)}: {others} take them{hint}",
            )


def check_group_networks(config: Config, env: EnvAdapter | HostEnvAdapter) -> None:
    """`network.<group>` must name a group of this env as `param_sharing` forms them (a typo
    would otherwise leave that group at the global sizes, silently)."""
    names = [g.name for g in env.groups]
    unknown = [name for name in config.network if name not in names]
    if unknown:
        raise ConfigError(
            f"network.{unknown[0]}",
            f"{config.env} has no group {unknown[0]!r} with param_sharing={config.param_sharing}; its groups: {', '.join(names)}",
        )


def check_agent_axis(config: Config, env: EnvAdapter | HostEnvAdapter) -> frozenset[str]:
    """Every group split over `mesh.agent` must split evenly; `mesh.replicate` must name groups of
    this env. -> the groups kept whole on every agent device (`replicated_groups`)."""
    names = [g.name for g in env.groups]
    unknown = [name for name in config.mesh.replicated if name not in names]
    if unknown:
        raise ConfigError(
            "mesh.replicate",
            f"{config.env} has no group {unknown[0]!r} with "
            f"param_sharing={config.param_sharing}; its groups: {', '.join(names)}",
        )
    k = config.mesh.agent
    replicated = replicated_groups(config.mesh, {g.name: g.size for g in env.groups})
    split = [g for g in env.groups if g.name not in replicated]
    bad = [f"{g.name} ({g.size})" for g in split if g.size % k]
    if bad:
        smallest = min(g.size for g in split)
        allowed = [n for n in range(1, smallest + 1) if all(g.size % n == 0 for g in split)]
        raise ConfigError(
            "mesh.agent",
            f"{k} devices must split every agent group of {config.env} evenly, but these groups "
            f"don't divide: {', '.join(bad)}; allowed: {allowed} (or keep them whole on every agent "
            "device: mesh.placement=balanced or mesh.replicate=<group>, for algo=ippo or mappo)",
        )
    return replicated


def make_trainer(config: Config, env: EnvAdapter | HostEnvAdapter, layout: Layout = Layout()) -> Trainer:
    """`config.algo`'s pure pieces for `env` (unsharded unless `layout` names mesh axes).

    The off-policy correction applies in async mode only; on device the data is on-policy.
    """
    correction = config.async_.correction if config.mode == "async" else "none"
    return registry.get(config.algo).make_train(config, env, layout=layout, correction=correction)


def warn_slow_dtype(config: Config, mesh: Mesh | None = None) -> None:
    """dtype=bfloat16 on a CPU is allowed but slower than float32 there: one line on stderr."""
    if config.dtype == "bfloat16" and platform(mesh) == "cpu":
        print(
            "warning: dtype=bfloat16 on a CPU: bf16 matmuls run slower than float32 here; the option is for GPUs "
            "and TPUs",
            file=sys.stderr,
        )


def prepare(config: Config):
    """Everything that can fail on bad input, before anything is compiled."""
    env = make_adapter(config)
    replicated = check_agent_axis(config, env)
    mesh = build_mesh(config.mesh, config.num_seeds, config.num_envs)
    warn_slow_dtype(config, mesh)
    return env, mesh, make_trainer(config, env, mesh_layout(mesh, replicated))
