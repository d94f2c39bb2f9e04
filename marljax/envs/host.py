"""Host-side environments with the PettingZoo parallel API, stepped in the async mode's actor threads.

    env=pettingzoo:my_package.envs:parallel_env mode=async

A Python simulator cannot run inside a jitted program; in `mode=async` each actor thread
steps `num_envs` copies of it on the host while the learner trains. `HostEnvAdapter`
describes the agents as marljax groups (identical spaces share a group), exactly like
`EnvAdapter` does for JAX envs, so the networks and the learner are the same; the policy
runs jitted on the actor's device once per step for all copies.

Supported: `Box` observations (flattened), `Discrete` or `Box` actions. Agents that leave
before the episode ends get zero observations and rewards and count as done. A copy whose
agents are all done is reset at once, and the observation returned for it starts the new
episode, as JaxMARL's auto-reset does.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable

import numpy as np

from marljax.config import ConfigError
from marljax.envs.adapter import AgentGroup

HOST_PREFIX = "pettingzoo:"


def is_host_env(name: str) -> bool:
    return name.startswith(HOST_PREFIX)


def host_env_factory(name: str, kwargs: dict) -> Callable[[], Any]:
    """`pettingzoo:module:callable` -> a function that makes one env copy."""
    path = name[len(HOST_PREFIX):]
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ConfigError("env", f"a host env is pettingzoo:module:callable, got {name!r}")
    if importlib.util.find_spec("pettingzoo") is None:
        raise ConfigError("env", 'host envs need pettingzoo: pip install "marljax[host]"')
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("env", f"cannot import {path!r}: {exc}") from exc
    return lambda: fn(**kwargs)


class HostEnvAdapter:
    """Groups of a PettingZoo ParallelEnv's agents; `vector(n, seed)` makes n copies to step."""

    host = True
    has_world_state = False
    has_win = False  # no win condition is read from host envs

    def __init__(self, make_one: Callable[[], Any], name: str):
        self.make_one, self.name = make_one, name
        proto = make_one()
        self.agents = tuple(proto.possible_agents)
        self.num_agents = len(self.agents)
        by_spec: dict[tuple, list[int]] = {}
        for i, a in enumerate(self.agents):
            obs_space, act_space = proto.observation_space(a), proto.action_space(a)
            if not hasattr(obs_space, "shape") or obs_space.shape is None:
                raise ConfigError("env", f"{name}: agent {a!r} has a non-array observation space {obs_space}")
            obs_shape = (int(np.prod(obs_space.shape)),)
            if hasattr(act_space, "n"):
                spec = (obs_shape, True, int(act_space.n), None, None)
            elif getattr(act_space, "shape", None):
                low, high = float(np.min(act_space.low)), float(np.max(act_space.high))
                spec = (obs_shape, False, int(np.prod(act_space.shape)), low, high)
            else:
                raise ConfigError("env", f"{name}: agent {a!r} has an unsupported action space {act_space}")
            by_spec.setdefault(spec, []).append(i)
        groups = []
        for k, (spec, idx) in enumerate(by_spec.items()):
            gname = "agents" if len(by_spec) == 1 else f"group{k}"
            groups.append(AgentGroup(gname, tuple(self.agents[i] for i in idx), tuple(idx), *spec))
        # keep the agent-concatenation order of the groups equal to env order within each group
        self.groups = tuple(groups)

    def vector(self, n: int, seed: int) -> "HostVectorEnv":
        return HostVectorEnv(self, n, seed)

    def describe(self) -> str:
        parts = [
            f"{g.name}: {g.size} agent(s), obs {g.obs_shape}, "
            f"{'Discrete' if g.discrete else 'Box'}({g.action_dim})"
            for g in self.groups
        ]
        return f"{self.name} (host, PettingZoo): " + "; ".join(parts)


class HostVectorEnv:
    """n copies of a host env, stepped together; arrays are group -> [n, A_g, ...] numpy."""

    def __init__(self, adapter: HostEnvAdapter, n: int, seed: int):
        self.adapter, self.n = adapter, n
        self.envs = [adapter.make_one() for _ in range(n)]
        self._seed = seed
        self._episodes = 0

    def _next_seed(self) -> int:
        self._episodes += 1
        return self._seed * 1_000_003 + self._episodes

    def _group(self, per_env: list[dict], fill, dtype, shape=()) -> dict[str, np.ndarray]:
        out = {}
        for g in self.adapter.groups:
            arr = np.full((self.n, g.size) + shape, fill, dtype)
            for e, values in enumerate(per_env):
                for j, a in enumerate(g.agents):
                    if a in values:
                        arr[e, j] = np.reshape(values[a], shape) if shape else values[a]
            out[g.name] = arr
        return out

    def _obs(self, per_env: list[dict]) -> dict[str, np.ndarray]:
        out = {}
        for g in self.adapter.groups:
            arr = np.zeros((self.n, g.size) + g.obs_shape, np.float32)
            for e, values in enumerate(per_env):
                for j, a in enumerate(g.agents):
                    if a in values:
                        arr[e, j] = np.asarray(values[a], np.float32).ravel()
            out[g.name] = arr
        return out

    def reset(self) -> dict[str, np.ndarray]:
        return self._obs([env.reset(seed=self._next_seed())[0] for env in self.envs])

    def step(self, actions: dict[str, np.ndarray], on_copy: Callable[[int], None] | None = None):
        """-> (obs, reward group -> [n, A_g], done group -> [n, A_g], episode_done [n]).
        on_copy(e) is called before copy e steps (the async watchdog's heartbeat)."""
        obs_l, rew_l, done_l, ep_done = [], [], [], np.zeros(self.n, bool)
        for e, env in enumerate(self.envs):
            if on_copy is not None:
                on_copy(e)
            live = list(env.agents)
            act = {}
            for g in self.adapter.groups:
                for j, a in enumerate(g.agents):
                    if a in live:
                        x = actions[g.name][e, j]
                        act[a] = int(x) if g.discrete else np.clip(x, g.action_low, g.action_high)
            obs, rew, term, trunc, _ = env.step(act)
            done = {a: bool(term.get(a, False) or trunc.get(a, False)) or a not in live for a in self.adapter.agents}
            if not env.agents or all(done.values()):
                ep_done[e] = True
                obs = env.reset(seed=self._next_seed())[0]
            obs_l.append(obs)
            rew_l.append(rew)
            done_l.append(done)
        reward = self._group(rew_l, 0.0, np.float32)
        done = self._group(done_l, True, bool)
        done = {k: d | ep_done[:, None] for k, d in done.items()}
        return self._obs(obs_l), reward, done, ep_done
