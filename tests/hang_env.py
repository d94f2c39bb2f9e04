"""A host (PettingZoo) env whose `step` never returns on one copy: the async watchdog's test case.

env=pettingzoo:tests.hang_env:parallel_env env_kwargs.hang_copy=2 env_kwargs.hang_at=40
"""

from __future__ import annotations

import itertools
import time

from marljax.testing.host_spread import HostSpread

_made = itertools.count()  # copies are made in order, so the k-th env made is copy k of actor 0


class HangingSpread(HostSpread):
    def __init__(self, hang_copy: int = 0, hang_at: int = 10, **kwargs):
        super().__init__(**kwargs)
        self.copy, self.hang_copy, self.hang_at, self.steps = next(_made) - 1, hang_copy, hang_at, 0

    def step(self, actions: dict):
        self.steps += 1
        if self.copy == self.hang_copy and self.steps >= self.hang_at:
            while True:  # a simulator that never answers
                time.sleep(1.0)
        return super().step(actions)


def parallel_env(**kwargs) -> HangingSpread:
    return HangingSpread(**kwargs)
