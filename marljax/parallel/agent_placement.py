"""How each agent group uses the `agent` mesh axis: the placement planner (pure Python, no JAX).

In SPMD every device of the agent axis runs the same program, so a group's arrays have one shape
on every device. A group can use the axis in two ways:

* `split`: its A_g agents divided over the K devices (agent-major learning layout, the swap of
  `layouts.py`). A count that does not divide K would be padded to ceil(A_g/K) slots per device,
  and every device computes its slots, pads included: ceil(A_g/K) * c_g per device.
* `replicate`: its parameters and Adam moments whole on every device, its environments split over
  data x agent in both layouts (no swap), gradients averaged over `agent` like over `data`:
  A_g * c_g / K per device for any A_g, at the price of A_g parameter sets on every device.

The mean (ideal) load is sum_g A_g * c_g / K. When one agent outweighs it (a wide group beside
narrow ones), no assignment of *whole* agents comes near it; replicating the heavy group does.
The learner does not pad: `naive` (every group split) shows what a padded split would cost, and
`balanced` splits the groups whose count divides K and replicates the others (see `modes_for`).

FLOPs are per environment step of one data shard (learning layout), i.e. what a device computes
while learning; acting is environment-major for every group and so even under any placement.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

SPLIT, REPLICATE = "split", "replicate"
PLACEMENTS = ("split", "balanced")  # mesh.placement


@dataclasses.dataclass(frozen=True)
class GroupCost:
    """What one agent of a group costs (every agent of a group costs the same)."""

    name: str
    agents: int  # A_g
    params: int  # parameters of one agent's set
    flops: float  # FLOPs per agent step (forward; the ratio between groups is what matters)
    param_bytes: int  # bytes of one agent's parameters
    opt_bytes: int  # bytes of one agent's optimizer state (Adam: two moments)


@dataclasses.dataclass(frozen=True)
class DeviceLoad:
    """One agent device's share under a placement."""

    agents: float  # real agents it learns (a replicated group counts A_g/K, as its share of the work)
    params: int  # parameters it holds (pads and replicas included)
    flops: float  # FLOPs it computes per data-shard env step (pads included)
    bytes: int  # parameter + optimizer bytes it holds


@dataclasses.dataclass(frozen=True)
class Placement:
    modes: dict[str, str]  # group -> split | replicate
    devices: tuple[DeviceLoad, ...]  # K entries
    mean_flops: float  # sum_g A_g * c_g / K: the useful load of a device if perfectly even

    @property
    def max_flops(self) -> float:
        return max(d.flops for d in self.devices)

    @property
    def imbalance(self) -> float:
        """Most-loaded device / mean useful load (1.0: even, no padding)."""
        return self.max_flops / self.mean_flops if self.mean_flops else 1.0

    @property
    def max_bytes(self) -> int:
        return max(d.bytes for d in self.devices)

    @property
    def replicated(self) -> frozenset[str]:
        return frozenset(g for g, m in self.modes.items() if m == REPLICATE)


def place(groups: list[GroupCost], k: int, modes: Mapping[str, str]) -> Placement:
    """Per-device loads of `groups` on k agent devices, each group placed as `modes` says."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    devices = []
    for a in range(k):
        agents, params, flops, nbytes = 0.0, 0, 0.0, 0
        for g in groups:
            per_agent_bytes = g.param_bytes + g.opt_bytes
            if modes[g.name] == REPLICATE:
                agents += g.agents / k
                params += g.agents * g.params
                flops += g.agents * g.flops / k
                nbytes += g.agents * per_agent_bytes
            else:
                slots = math.ceil(g.agents / k)  # padded: the same shape on every device
                agents += max(0, min(g.agents, (a + 1) * slots) - a * slots)
                params += slots * g.params
                flops += slots * g.flops
                nbytes += slots * per_agent_bytes
        devices.append(DeviceLoad(agents, params, flops, nbytes))
    mean = sum(g.agents * g.flops for g in groups) / k
    return Placement({g.name: modes[g.name] for g in groups}, tuple(devices), mean)


def naive(groups: list[GroupCost], k: int) -> Placement:
    """Every group split over the agent axis (today's placement, padded where A_g % k != 0)."""
    return place(groups, k, {g.name: SPLIT for g in groups})


def modes_for(sizes: Mapping[str, int], k: int, placement: str, replicate: Iterable[str] = ()) -> dict[str, str]:
    """group -> split | replicate, as `mesh.placement` (`split` | `balanced`) and `mesh.replicate` say.

    `split`: every group split (today's), those in `replicate` excepted. `balanced`: a group split
    where its count divides k, else replicated. Why no search: the learner does not pad, so a split
    group loads every device with exactly A_g/K agents, the mean; a replicated one loads each with
    A_g * c_g / K, the mean too. Every runnable placement is thus even in FLOPs, and split holds
    fewer bytes (A_g/K sets, not A_g). Not in the model: a replicated group's Adam step touches all
    A_g sets on every device, and its gradients take an all-reduce over `agent`."""
    forced = set(replicate)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    even = placement == "split"
    return {g: REPLICATE if g in forced or not (even or n % k == 0) else SPLIT for g, n in sizes.items()}


def balanced(groups: list[GroupCost], k: int, replicate: Iterable[str] = ()) -> Placement:
    """The `balanced` placement's loads (see `modes_for`)."""
    return place(groups, k, modes_for({g.name: g.agents for g in groups}, k, "balanced", replicate))
