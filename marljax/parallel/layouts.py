"""The two layouts of the agent-parallel mode, and the only code that moves data between them.

Inside a sharded chunk a device sits at (seed s, data d, agent a) of the mesh, with
D = mesh.data and K = mesh.agent devices on those axes.

* **Learning layout.** Group g's parameter sets and Adam moments are split over `agent`:
  device a holds agents [a*A_g/K, (a+1)*A_g/K) (leaves [A_g/K, ...]) and nothing else, so
  no device keeps optimizer state it doesn't update. Trajectories are *agent-major*: each
  device holds its own agents on every environment of its data shard,
  [T, E/D, A_g/K, ...]. A central critic (MAPPO) is replicated over `agent`.
* **Acting layout.** Every device needs every agent's policy beside every environment it
  steps: parameters are whole ([A_g, ...]) and environments are split over data x agent,
  trajectories *environment-major* [T, E/(D*K), A_g, ...].

* **A replicated group** (`mesh.placement=balanced`, `mesh.replicate`; see agent_placement.py)
  keeps its parameters and Adam moments whole on every device and learns in the acting layout,
  [T, E/(D*K), A_g, ...]: it takes no part in the swap, and its gradients are averaged over data
  and agent, like a central critic's.

`to_acting` (parameters, learning -> acting) and `to_learning` (trajectories,
acting -> learning) are the swap; each is one collective over the `agent` axis. With
K = 1 both are the identity and the layouts coincide.

Global environment e lives, in the acting layout, on device (d, a) with
d*K + a = e // (E/(D*K)); in the learning layout on data shard d = e // (E/D), in the same
order, so per-environment random keys and shuffles agree with a single device.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from marljax.nn import ops

Array = jax.Array
AGENT = "agent"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Which mesh axes split a trainer's environments and agents (None: not sharded)."""

    data_axis: str | None = None
    num_data: int = 1
    agent_axis: str | None = None
    num_agent: int = 1
    # groups kept whole on every agent device: acting layout while learning too, no swap
    replicated: frozenset[str] = frozenset()
    # async micro-batches and processes (unsharded actors only): this trainer steps slice
    # `env_slice` of `num_env_slices` equal, consecutive slices of the environments, with their keys
    env_slice: int = 0
    num_env_slices: int = 1

    @property
    def agent_parallel(self) -> bool:
        return self.agent_axis is not None and self.num_agent > 1

    @property
    def env_axes(self) -> tuple[str, ...] | None:
        """Axes that split environments in the acting layout (every axis of the program)."""
        axes = tuple(a for a in (self.data_axis, self.agent_axis) if a is not None)
        return axes or None

    @property
    def num_env_shards(self) -> int:
        return self.num_data * self.num_agent

    @classmethod
    def env_slice_of(cls, index: int, count: int) -> Layout:
        """An unsharded trainer that steps slice `index` of `count` of the environments."""
        if not 0 <= index < count:
            raise ValueError(f"env slice {index} of {count}")
        return cls(env_slice=index, num_env_slices=count)

    def local_agents(self, size: int) -> tuple[Array | int, int]:
        """(first agent index, count) of a group of `size` agents on this device, learning layout."""
        if not self.agent_parallel:
            return 0, size
        n = size // self.num_agent
        return jax.lax.axis_index(self.agent_axis) * n, n

    # ------------------------------------------------------------------ the swap
    def to_acting(self, params: dict, split: frozenset[str]) -> dict:
        """Parameters from the learning to the acting layout: gather every agent's set.

        params[k] for k in `split` has leaves [A_g/K, ...] -> [A_g, ...]; other entries
        (a replicated central critic) pass through. One all-gather for all leaves.
        """
        if not self.agent_parallel:
            return params
        flat, unravel = ravel_pytree({k: params[k] for k in split})  # agent-local leaves [A_g/K, ...]
        gathered = jax.lax.all_gather(flat, self.agent_axis)  # [K, P]
        per_device = [unravel(row) for row in gathered]  # K trees of [A_g/K, ...] leaves
        whole = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *per_device)
        return {**params, **whole}

    def to_learning(self, per_agent: Any, per_env: Any) -> tuple[Any, Any]:
        """Trajectories from environment-major to agent-major, in one all-to-all.

        per_agent: leaves [T, E/(D*K), A_g, ...] -> [T, E/D, A_g/K, ...] (this device's agents).
        per_env:   leaves [T, E/(D*K), ...]      -> [T, E/D, ...]        (every env of the data shard).
        """
        if not self.agent_parallel:
            return per_agent, per_env
        K = self.num_agent
        buffer, leaves, treedef = self._outgoing(per_agent, per_env)
        received = jax.lax.all_to_all(buffer, self.agent_axis, 0, 0)  # row k came from device k
        out, start = [], 0
        for leaf in leaves:
            size = leaf.size // K
            x = received[:, start : start + size].reshape(leaf.shape).astype(leaf.dtype)  # [K, T, e, ...]
            start += size
            x = jnp.moveaxis(x, 0, 1)  # [T, K, e, ...]: source device k holds envs k*e..(k+1)*e
            out.append(x.reshape((x.shape[0], K * x.shape[2]) + x.shape[3:]))
        return jax.tree.unflatten(treedef, out)

    def _outgoing(self, per_agent: Any, per_env: Any) -> tuple[Array, list, Any]:
        """The all-to-all's send buffer [K, n] (row k goes to device k), its leaves and treedef."""
        K = self.num_agent

        def to_agent_chunks(x):  # [T, e, A, ...] -> [K, T, e, A/K, ...]: chunk k goes to device k
            x = x.reshape(x.shape[:2] + (K, x.shape[2] // K) + x.shape[3:])
            return jnp.moveaxis(x, 2, 0)

        def to_every_device(x):  # [T, e, ...] -> [K, T, e, ...]
            return jnp.broadcast_to(x, (K,) + x.shape)

        send = (jax.tree.map(to_agent_chunks, per_agent), jax.tree.map(to_every_device, per_env))
        leaves, treedef = jax.tree.flatten(send)
        dtype = jnp.result_type(*leaves)  # float32 for PPO's batches: exact for masks and action ids
        buffer = jnp.concatenate([leaf.reshape(K, -1).astype(dtype) for leaf in leaves], axis=1)
        return buffer, leaves, treedef

    # ------------------------------------------------------------ accounting
    def swap_bytes(self, params: dict, split: frozenset[str], per_agent: Any, per_env: Any) -> dict[str, int]:
        """Bytes one device receives in each half of the swap (shapes of one seed's local arrays suffice).

        params: learning layout; per_agent / per_env: acting layout, as `to_learning` takes them.
        """
        if not self.agent_parallel:
            return {"params": 0, "trajectories": 0}
        K = self.num_agent
        local = jax.eval_shape(lambda p: ravel_pytree({k: p[k] for k in split})[0], params)
        buffer = jax.eval_shape(lambda a, e: self._outgoing(a, e)[0], per_agent, per_env)
        return {
            "params": (K - 1) * local.size * local.dtype.itemsize,  # K-1 other devices' shards
            "trajectories": (K - 1) * (buffer.size // K) * buffer.dtype.itemsize,  # one row from each
        }

    # ------------------------------------------------------------- the learner
    def reduce_grads(self, grads: dict, split: frozenset[str]) -> tuple[dict, Array]:
        """Average gradients over the devices that share each parameter; return them and their norm.

        Every loss is a mean over a group's samples. A split parameter set (one agent's) sees
        samples only on its own agent column: sum over `data` of the local means / (D*K). A
        replicated one (the central critic) sees them everywhere: mean over data and agent.
        """
        grads = ops.pmean_tree(grads, self.data_axis)
        if not self.agent_parallel:
            return grads, ops.global_norm(grads)
        mine = {k: jax.tree.map(lambda g: g / self.num_agent, v) for k, v in grads.items() if k in split}
        shared = {k: v for k, v in grads.items() if k not in split}
        # one all-reduce over `agent`: the shared grads' mean and the split grads' squared norm
        shared, mine_sq = ops.pmean_tree((shared, ops.global_norm(mine) ** 2 * self.num_agent), self.agent_axis)
        norm = jnp.sqrt(mine_sq + ops.global_norm(shared) ** 2)
        return {**mine, **shared}, norm
