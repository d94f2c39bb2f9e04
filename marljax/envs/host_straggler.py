"""host_spread with stragglers: 1 copy in `slow_every` costs `slow_factor` times as much per step.

    env=pettingzoo:marljax.envs.host_straggler:parallel_env env_kwargs.slow_every=8 env_kwargs.slow_factor=10

For measuring `async.host_stepping` (`python -m marljax.bench.stragglers`). Copies count off as
they are made (in one process): of any `slow_every` made one after another, exactly one is slow,
so an actor's `num_envs=8` copies hold one straggler. `slow_every=0`: every copy is fast.
"""

from __future__ import annotations

import itertools

from marljax.envs.host_spread import HostSpread

_made = itertools.count()


class StragglerSpread(HostSpread):
    def __init__(self, slow_every: int = 8, slow_factor: float = 10.0, step_cost_s: float = 0.002, **kwargs):
        super().__init__(step_cost_s=step_cost_s, **kwargs)
        self.slow = bool(slow_every) and next(_made) % slow_every == slow_every - 1
        if self.slow:
            self.step_cost_s *= slow_factor


def parallel_env(**kwargs) -> StragglerSpread:
    return StragglerSpread(**kwargs)
