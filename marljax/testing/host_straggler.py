"""host_spread with stragglers: 1 copy in `slow_every` costs `slow_factor` times as much per step.

    env=pettingzoo:marljax.testing.host_straggler:parallel_env env_kwargs.slow_every=8 env_kwargs.slow_factor=10

For measuring `async.host_stepping` (`marljax bench stragglers`). Copies count off as
they are made (in one process): of any `slow_every` made one after another, exactly one is slow,
so an actor's `num_envs=8` copies hold one straggler. `slow_every=0`: every copy is fast. The
slow copy sleeps so that its whole step costs `slow_factor` times a fast one's (about 50 us of
numpy work included): with `step_cost_s=0` it sleeps about 0.45 ms.
"""

from __future__ import annotations

import itertools

from marljax.testing.host_spread import HostSpread

_made = itertools.count()
NUMPY_S = 5e-5  # about what a step's own numpy work costs (host_spread, 3 agents), beside its sleep


class StragglerSpread(HostSpread):
    def __init__(self, slow_every: int = 8, slow_factor: float = 10.0, step_cost_s: float = 0.002, **kwargs):
        super().__init__(step_cost_s=step_cost_s, **kwargs)
        self.slow = bool(slow_every) and next(_made) % slow_every == slow_every - 1
        if self.slow:  # its cost is slow_factor x a fast copy's, whose numpy work is about NUMPY_S
            self.step_cost_s = slow_factor * (step_cost_s + NUMPY_S) - NUMPY_S


def parallel_env(**kwargs) -> StragglerSpread:
    return StragglerSpread(**kwargs)
