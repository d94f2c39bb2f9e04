"""A host (PettingZoo) env whose observations say which copy made them and when: the tests of
how independent host stepping cuts each copy's steps into batch columns (tests/test_segments.py).

    env=pettingzoo:tests.counter_env:parallel_env env_kwargs.episode=5 env_kwargs.step_cost_s=0.001

Every agent observes [copy, t, 0]: `copy` numbers the env copies in the order they are made (in
one process), `t` counts the steps of the current episode from 0. The reward of a step taken at
`t` is t + 1 for every agent; an episode ends after `episode` steps (truncated). The copy made
`slow_copy`-th sleeps `slow_s` per step instead of `step_cost_s`.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

_made = itertools.count()


class CounterEnv(ParallelEnv):
    metadata = {"name": "counter_v0"}

    def __init__(self, episode: int = 5, step_cost_s: float = 0.0, slow_copy: int = -1, slow_s: float = 0.05):
        self.episode, self.step_cost_s = episode, step_cost_s
        self.copy = next(_made)
        if self.copy == slow_copy:  # one copy much slower than the others
            self.step_cost_s = slow_s
        self.possible_agents = ["a0", "a1"]
        self.agents = list(self.possible_agents)
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(-1e9, 1e9, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self) -> dict:
        return {a: np.array([self.copy, self.t, 0.0], np.float32) for a in self.possible_agents}

    def reset(self, seed: int | None = None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict):
        if self.step_cost_s:
            time.sleep(self.step_cost_s)
        reward = float(self.t + 1)
        self.t += 1
        over = self.t >= self.episode
        obs = self._obs()
        out = ({a: reward for a in self.agents}, {a: False for a in self.agents}, {a: over for a in self.agents})
        if over:
            self.agents = []
        return (obs, *out, {a: {} for a in self.possible_agents})


def parallel_env(**kwargs) -> CounterEnv:
    return CounterEnv(**kwargs)
