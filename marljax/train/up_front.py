"""What a run can be told before anything compiles: that it will not fit (refused), that it may
not (one warning line), that it is very long (one line with its size).

Called by `train` (both modes) and `marljax sweep` once the trainer is built and before the first
`jit` runs; config validation already refused the updates an int32 counter cannot count
(config.MAX_UPDATES). Costs one trace of the update (0.6 s for the default run, 1.0 s for
algo=qmix, on a shared 2-core CPU), no compilation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp

from marljax.config import Config
from marljax.schema import ConfigError, first_line
from marljax.train import memory
from marljax.train.memory import MemoryEstimate, per_seed, rollout_bytes, tree_bytes
from marljax.train.wiring import make_trainer
from marljax.types import TrainState

LONG_RUN_UPDATES = 10_000_000  # more updates than this: one line saying how many


def long_run_warning(config: Config, chunk: int | None = None) -> str | None:
    """One line for a run of more than LONG_RUN_UPDATES updates: their number and, where the host
    sees the run only between jitted chunks of `chunk` updates, that rows and stops wait for them."""
    if config.num_updates <= LONG_RUN_UPDATES:
        return None
    between = (
        f"; metrics rows, checkpoints and a Ctrl-C/SIGTERM stop come only between chunks of {chunk:,} updates "
        "(raise num_chunks for shorter ones)"
        if chunk and chunk > 1
        else ""
    )
    return (
        f"warning: total_timesteps={config.total_timesteps:,} is {config.num_updates:,} updates of "
        f"{config.run_steps_per_update:,} env steps each, a very long run{between}"
    )


def check_run(
    config: Config,
    estimate: Callable[[], MemoryEstimate],
    devices: Iterable[Any],
    log: Callable[[str], None],
    chunk: int | None = None,
    seeds_field: str = "num_seeds",
) -> None:
    """Refuse (ConfigError) or warn, each in one line, before anything compiles. An estimate that
    fails is one note, never the run's end: the check is a guard, not a requirement."""
    devices = list(devices)
    try:
        est = estimate()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001
        log(f"note: the memory estimate failed ({first_line(exc)}); the run's memory is not checked")
        est = None
    if est is not None:
        if all(d.platform == "cpu" for d in devices):
            est = with_checkpoint_copy(est)
        memory.check_fits(est, memory.memory_limit(devices), config.num_seeds, seeds_field, log)
    if (line := long_run_warning(config, chunk)) is not None:
        log(line)


def with_checkpoint_copy(estimate: MemoryEstimate) -> MemoryEstimate:
    """On CPU, where device memory is the host's: a checkpoint's save copies the state to the host
    before writing it in the background, so the state is held twice while it is written (a qmix run
    with a 15 GiB replay buffer, 73% of the 20.6 GiB available, was killed for memory)."""
    state = {k: estimate.parts[k] for k in estimate.state if k in estimate.parts}
    keys = estimate.keys[max(state, key=lambda name: state[name])]
    return estimate._replace(
        parts={**estimate.parts, "checkpoint copy": sum(state.values())},
        keys={**estimate.keys, "checkpoint copy": keys},
    )


def sync_estimate(config: Config, trainer, shapes: Any, best_params: bool = False) -> MemoryEstimate:
    """The on-device run's estimate (`shapes`: its TrainState's, leaves [S, ...]); a sweep also
    keeps a copy of every row's best parameters."""
    extra = {"best parameters": (tree_bytes(shapes.learner.params), "hidden_size")} if best_params else None
    # the update traced on global shapes: a trainer whose collectives run inside shard_map sees
    # device-local blocks, so trace the unsharded one (the same arrays, whole)
    return memory.estimate(config, make_trainer(config, trainer.env), shapes, extra)


def async_estimate(config: Config, trainer, host_env: bool) -> MemoryEstimate:
    """mode=async: the learner's state, each actor thread's environments, and the rollouts in flight
    (the buffer's capacity, one per actor thread and the one being learned). Host (PettingZoo)
    envs keep their state and rollouts on the host, outside this estimate; so are the learner's
    working buffers."""
    S, a = config.num_seeds, config.async_
    seed_keys = jax.ShapeDtypeStruct((S, 2), jnp.uint32)
    learner = jax.eval_shape(jax.vmap(trainer.init_learner), seed_keys)
    parts = {"training state": tree_bytes(learner)}
    if not host_env:
        actors = jax.eval_shape(jax.vmap(trainer.init_actors), seed_keys)
        one = per_seed(TrainState(learner, actors))
        in_flight = a.buffer_capacity + a.num_actor_threads + 1
        parts["environments"] = tree_bytes(actors) * a.num_actor_threads
        parts["rollouts"] = rollout_bytes(trainer, one) * S * in_flight
    keys = {
        "training state": ("hidden_size",),
        "environments": ("num_envs", "async.num_actor_threads"),
        "rollouts": ("num_envs", "num_steps", "async.buffer_capacity"),
    }
    return memory.estimate_of(config, parts, keys)
