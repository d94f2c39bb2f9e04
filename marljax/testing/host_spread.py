"""A PettingZoo parallel environment written in numpy: cooperative navigation, with a host step cost.

    env=pettingzoo:marljax.testing.host_spread:parallel_env env_kwargs.step_cost_s=0.0005 mode=async

`n` agents and `n` landmarks in the unit square; each agent moves by one of 5 discrete
actions (stay, left, right, down, up). Every agent receives the same reward: minus the sum,
over landmarks, of the distance to the nearest agent. An agent observes its position, every
landmark relative to it and every other agent relative to it. Episodes last `max_cycles`
steps. `step_cost_s` seconds of `time.sleep` per step stand for a simulator's cost (the GIL
is released, so the learner runs meanwhile). Needs `pettingzoo` (`pip install "marljax[host]"`).
"""

from __future__ import annotations

import time

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], np.float32)


class HostSpread(ParallelEnv):
    metadata = {"name": "host_spread_v0"}

    def __init__(self, n: int = 3, max_cycles: int = 25, step_cost_s: float = 0.0, speed: float = 0.1):
        self.n, self.max_cycles, self.step_cost_s, self.speed = n, max_cycles, step_cost_s, speed
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.agents = list(self.possible_agents)
        dim = 2 + 2 * n + 2 * (n - 1)
        self._obs_space = spaces.Box(-2.0, 2.0, (dim,), np.float32)
        self._act_space: spaces.Space = spaces.Discrete(5)
        self._rng = np.random.default_rng(0)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _obs(self) -> dict:
        out = {}
        for i, a in enumerate(self.possible_agents):
            others = np.delete(self.pos, i, axis=0) - self.pos[i]
            out[a] = np.concatenate([self.pos[i], (self.landmarks - self.pos[i]).ravel(), others.ravel()]).astype(
                np.float32
            )
        return out

    def reset(self, seed: int | None = None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.pos = self._rng.uniform(0, 1, (self.n, 2)).astype(np.float32)
        self.landmarks = self._rng.uniform(0, 1, (self.n, 2)).astype(np.float32)
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict):
        if self.step_cost_s:
            time.sleep(self.step_cost_s)
        moves = np.stack([MOVES[int(actions[a])] for a in self.possible_agents])
        self.pos = np.clip(self.pos + self.speed * moves, 0.0, 1.0)
        self.t += 1
        dist = np.linalg.norm(self.landmarks[:, None, :] - self.pos[None, :, :], axis=-1)  # [landmark, agent]
        reward = -float(dist.min(axis=1).sum())
        truncated = self.t >= self.max_cycles
        obs = self._obs()
        rewards = {a: reward for a in self.agents}
        terminations = {a: False for a in self.agents}
        truncations = {a: truncated for a in self.agents}
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if truncated:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


def parallel_env(**kwargs) -> HostSpread:
    return HostSpread(**kwargs)
