"""A host (PettingZoo) env whose `step` never returns agent_0's reward (issue 66: it trained "successfully").

env=pettingzoo:tests.unpaid_env:parallel_env mode=async
"""

from __future__ import annotations

from marljax.testing.host_spread import HostSpread


class UnpaidSpread(HostSpread):
    def step(self, actions: dict):
        obs, rewards, terminations, truncations, infos = super().step(actions)
        rewards.pop("agent_0")
        return obs, rewards, terminations, truncations, infos


def parallel_env(**kwargs) -> UnpaidSpread:
    return UnpaidSpread(**kwargs)
