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

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

from marljax.envs.adapter import AgentGroup
from marljax.envs.factory import BUILD_TIMEOUT_S, build_env, import_env_module
from marljax.schema import ConfigError

HOST_PREFIX = "pettingzoo:"


def is_host_env(name: str) -> bool:
    return name.startswith(HOST_PREFIX)


def host_env_factory(name: str, kwargs: dict) -> Callable[[], Any]:
    """`pettingzoo:module:callable` -> a function that makes one env copy."""
    path = name[len(HOST_PREFIX) :]
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ConfigError("env", f"a host env is pettingzoo:module:callable, got {name!r}")
    if importlib.util.find_spec("pettingzoo") is None:
        raise ConfigError("env", 'host envs need pettingzoo: pip install "marljax[host]"')
    try:
        fn = getattr(import_env_module(module_name, path), attr)
    except AttributeError as exc:
        raise ConfigError("env", f"cannot import {path!r}: {exc}") from exc
    return lambda: fn(**kwargs)


class HostEnvAdapter:
    """Groups of a PettingZoo ParallelEnv's agents; `vector(n, seed)` makes n copies to step."""

    host = True
    has_world_state = False
    has_win = False  # no win condition is read from host envs

    def __init__(self, make_one: Callable[[], Any], name: str, timeout_s: float = BUILD_TIMEOUT_S):
        self.make_one, self.name = make_one, name
        proto = build_env(
            make_one,
            name,
            "PettingZoo ParallelEnv",
            ("possible_agents", "reset", "step", "observation_space", "action_space"),
            timeout_s,
        )
        self.agents = tuple(proto.possible_agents)
        self.num_agents = len(self.agents)
        by_spec: dict[tuple, list[int]] = {}
        for i, a in enumerate(self.agents):
            obs_space, act_space = proto.observation_space(a), proto.action_space(a)
            if not hasattr(obs_space, "shape") or obs_space.shape is None:
                raise ConfigError("env", f"{name}: agent {a!r} has a non-array observation space {obs_space}")
            obs_shape = (int(np.prod(obs_space.shape)),)
            spec: tuple[tuple[int], bool, int, float | None, float | None]  # obs, discrete, dim, low, high
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

    def vector(self, n: int, seed: int) -> HostVectorEnv:
        return HostVectorEnv(self, n, seed)

    def describe(self) -> str:
        parts = [
            f"{g.name}: {g.size} agent(s), obs {g.obs_shape}, {'Discrete' if g.discrete else 'Box'}({g.action_dim})"
            for g in self.groups
        ]
        return f"{self.name} (host, PettingZoo): " + "; ".join(parts)


class HostCopy:
    """One copy of a host env, as marljax sees it: arrays are group -> [A_g, ...] numpy.

    `next_seed()` gives the seed of every reset, the automatic one after an episode included.
    """

    def __init__(self, adapter: HostEnvAdapter, env: Any, next_seed: Callable[[], int]):
        self.adapter, self.env, self.next_seed = adapter, env, next_seed

    def _obs(self, values: dict) -> dict[str, np.ndarray]:
        out = {}
        for g in self.adapter.groups:
            arr = np.zeros((g.size,) + g.obs_shape, np.float32)
            for j, a in enumerate(g.agents):
                if a in values:
                    arr[j] = np.asarray(values[a], np.float32).ravel()
            out[g.name] = arr
        return out

    def _group(self, values: dict, fill, dtype) -> dict[str, np.ndarray]:
        out = {}
        for g in self.adapter.groups:
            arr = np.full((g.size,), fill, dtype)
            for j, a in enumerate(g.agents):
                if a in values:
                    arr[j] = values[a]
            out[g.name] = arr
        return out

    def reset(self) -> dict[str, np.ndarray]:
        return self._obs(self.env.reset(seed=self.next_seed())[0])

    def step(self, actions: dict[str, np.ndarray]):
        """actions group -> [A_g, ...] -> (obs, reward group -> [A_g], done group -> [A_g], episode_done).
        A finished episode is reset at once: `obs` then starts the next one."""
        env = self.env
        live = list(env.agents)
        act = {}
        for g in self.adapter.groups:
            for j, a in enumerate(g.agents):
                if a in live:
                    x = actions[g.name][j]
                    act[a] = int(x) if g.discrete else np.clip(x, g.action_low, g.action_high)
        obs, rew, term, trunc, _ = env.step(act)
        unpaid = [a for a in live if a not in rew]
        if unpaid:  # was read as a reward of 0 and trained on "successfully"
            raise ValueError(
                f"{self.adapter.name}: step returned no reward for {', '.join(map(str, unpaid))}, which acted "
                "(a PettingZoo ParallelEnv's step returns a reward for every agent in env.agents before it)"
            )
        done = {a: bool(term.get(a, False) or trunc.get(a, False)) or a not in live for a in self.adapter.agents}
        ep_done = not env.agents or all(done.values())
        if ep_done:
            obs = env.reset(seed=self.next_seed())[0]
        reward = self._group(rew, 0.0, np.float32)
        done_g = {k: d | ep_done for k, d in self._group(done, True, bool).items()}
        return self._obs(obs), reward, done_g, ep_done


class HostVectorEnv:
    """n copies of a host env, stepped one after another (lockstep); arrays are group -> [n, A_g, ...].

    The copies share one sequence of reset seeds, drawn in copy order: a seed reproduces bitwise."""

    def __init__(self, adapter: HostEnvAdapter, n: int, seed: int):
        self.adapter, self.n = adapter, n
        self._seed = seed
        self._episodes = 0
        self.copies = [HostCopy(adapter, adapter.make_one(), self._next_seed) for _ in range(n)]

    def _next_seed(self) -> int:
        self._episodes += 1
        return self._seed * 1_000_003 + self._episodes

    @staticmethod
    def _stack(per_copy: list[dict]) -> dict[str, np.ndarray]:
        return {k: np.stack([c[k] for c in per_copy]) for k in per_copy[0]}

    def reset(self) -> dict[str, np.ndarray]:
        return self._stack([c.reset() for c in self.copies])

    def step(self, actions: dict[str, np.ndarray], on_copy: Callable[[int], None] | None = None):
        """-> (obs, reward group -> [n, A_g], done group -> [n, A_g], episode_done [n]).
        on_copy(e) is called before copy e steps (the async watchdog's heartbeat)."""
        outs = []
        for e, copy in enumerate(self.copies):
            if on_copy is not None:
                on_copy(e)
            outs.append(copy.step({k: v[e] for k, v in actions.items()}))
        obs, reward, done, ep_done = zip(*outs)
        return self._stack(list(obs)), self._stack(list(reward)), self._stack(list(done)), np.array(ep_done, bool)
