"""Host (PettingZoo) envs that fail: the async mode's env-failure tests.

    env=pettingzoo:tests.flaky_env:parallel_env env_kwargs.fail_p=0.1            # 10% of episodes raise
    env_kwargs.hang_flag=PATH env_kwargs.hang_at=20 env_kwargs.hang_s=30         # one copy hangs, once
    env_kwargs.bad_flag=PATH                                                      # one copy raises, always

The flags are files claimed atomically (O_EXCL) by the first copy to get there, so exactly one
copy of the run misbehaves whatever thread steps it.
"""

from __future__ import annotations

import os
import time

import numpy as np

from marljax.testing.host_spread import HostSpread


def _claim(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


class FlakySpread(HostSpread):
    def __init__(self, fail_p: float = 0.0, hang_flag: str = "", hang_at: int = 20, hang_s: float = 30.0,
                 bad_flag: str = "", **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.fail_p, self.hang_flag, self.hang_at, self.hang_s, self.bad_flag = (
            fail_p,
            hang_flag,
            hang_at,
            hang_s,
            bad_flag,
        )
        self.bad, self.steps, self.fail_at = False, 0, -1

    def reset(self, seed: int | None = None, options=None):
        if self.bad:
            raise RuntimeError("a broken simulator (reset)")
        # whether (and when) this episode raises is drawn from its seed
        rng = np.random.default_rng(seed)
        self.fail_at = int(rng.integers(1, self.max_cycles)) if rng.random() < self.fail_p else -1
        return super().reset(seed, options)

    def step(self, actions: dict):
        self.steps += 1
        if self.bad_flag and (self.bad or _claim(self.bad_flag)):
            self.bad = True
            raise RuntimeError("a broken simulator (step)")
        if self.hang_flag and self.steps >= self.hang_at and _claim(self.hang_flag):
            time.sleep(self.hang_s)  # a simulator that stops answering (once)
        if self.t + 1 == self.fail_at:
            raise RuntimeError(f"simulator crashed at step {self.fail_at} of its episode")
        return super().step(actions)


def parallel_env(**kwargs) -> FlakySpread:
    return FlakySpread(**kwargs)
