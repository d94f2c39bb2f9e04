"""Jumanji's multi-agent environments behind JaxMARL's env API: `env=jumanji:RobotWarehouse-v0`.

`JumanjiEnv` turns one Jumanji env (`reset(key) -> (state, timestep)`, `step(state, actions)`,
one structured observation for all agents, no auto-reset) into what `EnvAdapter` reads from a
JaxMARL `MultiAgentEnv`: agents named `agent_0..agent_{N-1}`, each with its own observation (a
dict of arrays the adapter ravels into one vector), a reward and a done per agent, an automatic
reset when the episode ends (the returned observation is then the new episode's, the reward the
last step's, as JaxMARL's envs do) and `get_avail_actions` from the observation's `action_mask`.

Each agent's observation, a tuple of arrays the adapter ravels into one float32 vector in this
order (`time` last):

- RobotWarehouse-v0: `view` (its `agents_view` row), `mask` (its legal actions), `time`
  (step_count / time_limit).
- LevelBasedForaging-v0: the same three.
- Connector-v3: `grid`, the shared grid as six 0/1 channels seen from this agent (its own path,
  head and target; every other agent's paths, heads and targets), then `mask` and `time`.
- Cleaner-v0: `grid` as two 0/1 channels (dirty, wall), `own` (its row, col scaled to [0, 1]),
  `agents` (every agent's, same scale), `mask`, `time`.

Shared rewards (RobotWarehouse, Cleaner: one scalar) go to every agent; per-agent rewards and
discounts (LevelBasedForaging, Connector) stay per agent, and an agent whose discount is 0 (a
connected or blocked Connector agent) is done. `env_kwargs` take the env's own arguments
(`time_limit`, `penalty`, ...) and, flat beside them, its generator's (`num_agents`,
`grid_size`, ...), which replace the defaults Jumanji's registered id uses.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from marljax.schema import ConfigError, first_line, listed

PREFIX = "jumanji:"
INSTALL = "pip install 'marljax[jumanji]'"

Array = jax.Array


class _Spec(NamedTuple):
    env: str  # module:class of the env
    generator: str  # module:class of the generator the registered id builds
    defaults: dict  # the generator arguments the env's constructor uses when given none


_ROUTING = "jumanji.environments.routing"
# The multi-agent ids (the other Jumanji envs are single-agent). Defaults copied from each env's
# constructor (jumanji 1.1.2), which builds its generator with them when given none.
SPECS = {
    "RobotWarehouse-v0": _Spec(
        "jumanji.environments:RobotWarehouse",
        f"{_ROUTING}.robot_warehouse.generator:RandomGenerator",
        {
            "column_height": 8,
            "shelf_rows": 2,
            "shelf_columns": 3,
            "num_agents": 4,
            "sensor_range": 1,
            "request_queue_size": 8,
        },
    ),
    "LevelBasedForaging-v0": _Spec(
        "jumanji.environments:LevelBasedForaging",
        f"{_ROUTING}.lbf.generator:RandomGenerator",
        {"grid_size": 8, "fov": 8, "num_agents": 2, "num_food": 2, "force_coop": True},
    ),
    "Connector-v3": _Spec(
        "jumanji.environments:Connector",
        f"{_ROUTING}.connector.generator:RandomWalkGenerator",
        {"grid_size": 10, "num_agents": 10},
    ),
    "Cleaner-v0": _Spec(
        "jumanji.environments:Cleaner",
        f"{_ROUTING}.cleaner.generator:RandomGenerator",
        {"num_rows": 10, "num_cols": 10, "num_agents": 3},
    ),
}
_NOT_KWARGS = ("self", "generator", "viewer", "reward_fn")  # objects, not settings


def is_jumanji(name: str) -> bool:
    return name.startswith(PREFIX)


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def check_id(name: str) -> None:
    """ConfigError (before anything compiles) unless `name` is a Jumanji multi-agent id and jumanji
    is installed."""
    env_id = name[len(PREFIX) :]
    if env_id not in SPECS:
        import difflib

        close = difflib.get_close_matches(env_id, list(SPECS), n=1)
        hint = f" (did you mean '{PREFIX}{close[0]}'?)" if close else ""
        raise ConfigError(
            "env", f"unknown Jumanji environment {env_id!r}{hint}; allowed: {', '.join(PREFIX + k for k in SPECS)}"
        )
    try:
        import jumanji  # noqa: F401
    except ImportError:
        raise ConfigError("env", f"{name} needs jumanji, which is not installed: {INSTALL}") from None


def _arguments(cls) -> list[str]:
    return [p for p in inspect.signature(cls.__init__).parameters if p not in _NOT_KWARGS]


def make_jumanji(name: str, env_kwargs: Mapping[str, Any] | None = None) -> JumanjiEnv:
    """The JaxMARL-API view of the Jumanji env `jumanji:<id>`, built with `env_kwargs` (the env's
    arguments and its generator's, flat)."""
    check_id(name)
    spec = SPECS[name[len(PREFIX) :]]
    env_cls, gen_cls = _import(spec.env), _import(spec.generator)
    env_args, gen_args = _arguments(env_cls), _arguments(gen_cls)
    kwargs = dict(env_kwargs or {})
    unknown = sorted(k for k in kwargs if k not in env_args and k not in gen_args)
    if unknown:
        raise ConfigError(
            f"env_kwargs.{unknown[0]}",
            f"{name} does not take {listed(unknown)}; it takes: {listed(sorted(env_args + gen_args), 40)}",
        )
    generator = {**spec.defaults, **{k: v for k, v in kwargs.items() if k in gen_args}}
    own = {k: v for k, v in kwargs.items() if k in env_args}
    try:
        built = gen_cls(**generator)
        env = env_cls(generator=built, **own)
        _check_warehouse(name, built)
        return JumanjiEnv(env, name)  # traces a reset: more agents than cells fails here
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a grid too small for its agents
        given = ", ".join(f"{k}={v!r}" for k, v in {**generator, **own}.items())
        raise ConfigError(
            "env_kwargs",
            f"building the env failed: {name}({given}) raised "
            f"{type(exc).__name__}: {first_line(exc)}; check env_kwargs",
        ) from exc


def _check_warehouse(name: str, generator) -> None:
    """RobotWarehouse's generator builds any layout but fails only inside the first jitted step: with
    no shelves (one shelf column, the middle one left free for the goals), or a request queue as long
    as the shelves (a delivery then draws its replacement from an empty set)."""
    if name != f"{PREFIX}RobotWarehouse-v0":
        return
    shelves, queue = len(generator.shelf_ids), int(generator.request_queue_size)
    if shelves == 0:
        layout = {k: int(getattr(generator, k)) for k in ("shelf_rows", "shelf_columns", "column_height")}
        field = "shelf_columns" if layout["shelf_columns"] < 3 else min(layout, key=layout.__getitem__)
        given = ", ".join(f"{k}={v}" for k, v in layout.items())
        raise ConfigError(
            f"env_kwargs.{field}",
            f"{name}({given}) has no shelves (the middle shelf column is left "
            "free for the goals): it takes shelf_columns >= 3 and the others >= 1",
        )
    if not 1 <= queue < shelves:
        raise ConfigError(
            "env_kwargs.request_queue_size",
            f"{name}: {queue} is not allowed; this layout has {shelves} shelves, so it takes 1 to {shelves - 1}",
        )


class Discrete(NamedTuple):
    """An agent's action space: `n` actions (what `EnvAdapter` reads of a gymnax Discrete)."""

    n: int
    shape: tuple = ()


class Box(NamedTuple):
    """An agent's observation space, as its encoded observation's shape."""

    shape: tuple
    dtype: Any = jnp.float32


class JumanjiState(NamedTuple):
    env: Any  # Jumanji's own state pytree
    obs: Any  # its last observation (holds the action masks get_avail_actions returns)


def _channels(grid: Array, values: tuple) -> Array:
    """[*grid.shape, len(values)] float32: one 0/1 channel per value."""
    return jnp.stack([grid == v for v in values], -1).astype(jnp.float32)


class JumanjiEnv:
    """One Jumanji multi-agent env with JaxMARL's `MultiAgentEnv` API (see the module docstring)."""

    def __init__(self, env, name: str):
        self.env, self.name = env, name
        self.env_id = name[len(PREFIX) :]
        self.num_agents = int(env.num_agents)
        self.agents = [f"agent_{i}" for i in range(self.num_agents)]
        num_values = jnp.asarray(env.action_spec.num_values).reshape(-1)
        self._num_actions = [int(n) for n in jnp.broadcast_to(num_values, (self.num_agents,))]
        self.time_limit = int(env.time_limit)
        self._encode: Callable = {
            "Connector-v3": self._encode_connector,
            "Cleaner-v0": self._encode_cleaner,
        }.get(self.env_id, self._encode_view)
        shapes = jax.eval_shape(lambda k: self.reset(k)[0], jax.random.PRNGKey(0))
        self._obs_sizes = {a: sum(math.prod(x.shape) for x in jax.tree.leaves(shapes[a])) for a in self.agents}

    # ------------------------------------------------------------ encoding
    def _time(self, obs) -> Array:
        return (jnp.asarray(obs.step_count, jnp.float32) / self.time_limit).reshape(1)

    def _encode_view(self, obs) -> list[tuple[Array, ...]]:
        view = jnp.asarray(obs.agents_view, jnp.float32)
        mask = jnp.asarray(obs.action_mask, jnp.float32)
        return [(view[i], mask[i], self._time(obs)) for i in range(self.num_agents)]

    def _encode_connector(self, obs) -> list[tuple[Array, ...]]:
        # the grid is shared: agent k's path, head and target are 3k+1, 3k+2, 3k+3 (0: empty)
        grid = jnp.asarray(obs.grid, jnp.int32)
        owner, kind = (grid - 1) // 3, (grid - 1) % 3
        kinds = jnp.stack([(grid > 0) & (kind == k) for k in range(3)], -1)  # [G, G, 3]
        mask = jnp.asarray(obs.action_mask, jnp.float32)
        out: list[tuple[Array, ...]] = []
        for i in range(self.num_agents):
            own = kinds & (owner == i)[..., None]
            channels = jnp.concatenate([own, kinds & ~own], -1).astype(jnp.float32)  # [G, G, 6]
            out.append((channels, mask[i], self._time(obs)))
        return out

    def _encode_cleaner(self, obs) -> list[tuple[Array, ...]]:
        from jumanji.environments.routing.cleaner.constants import DIRTY, WALL

        grid = _channels(obs.grid, (DIRTY, WALL))
        scale = jnp.asarray([max(obs.grid.shape[0] - 1, 1), max(obs.grid.shape[1] - 1, 1)], jnp.float32)
        where = jnp.asarray(obs.agents_locations, jnp.float32) / scale
        mask = jnp.asarray(obs.action_mask, jnp.float32)
        return [(grid, where[i], where, mask[i], self._time(obs)) for i in range(self.num_agents)]

    def _per_agent(self, value, dtype) -> Array:
        """[N] `dtype`: a shared scalar broadcast to every agent, or the per-agent values."""
        return jnp.broadcast_to(jnp.asarray(value, dtype).reshape(-1), (self.num_agents,))

    # ------------------------------------------------------------ the API
    def reset(self, key: Array) -> tuple[dict, JumanjiState]:
        state, timestep = self.env.reset(key)
        obs = timestep.observation
        return dict(zip(self.agents, self._encode(obs))), JumanjiState(state, obs)

    def step(self, key: Array, state: JumanjiState, actions: Mapping[str, Array]):
        """One step; a finished episode resets with `key` (its new observation is returned)."""
        action = jnp.stack([jnp.asarray(actions[a], jnp.int32).reshape(()) for a in self.agents])
        env_state, timestep = self.env.step(state.env, action)
        episode_done = timestep.last()
        reset_state, reset_step = self.env.reset(key)
        stepped = JumanjiState(env_state, timestep.observation)
        restarted = JumanjiState(reset_state, reset_step.observation)
        new = jax.tree.map(lambda r, s: jnp.where(episode_done, r, s), restarted, stepped)
        reward = self._per_agent(timestep.reward, jnp.float32)
        agent_done = jnp.logical_or(self._per_agent(timestep.discount, jnp.float32) == 0, episode_done)
        rewards = {a: reward[i] for i, a in enumerate(self.agents)}
        dones = {a: agent_done[i] for i, a in enumerate(self.agents)}
        dones["__all__"] = episode_done
        return dict(zip(self.agents, self._encode(new.obs))), new, rewards, dones, {}

    def get_avail_actions(self, state: JumanjiState) -> dict[str, Array]:
        """agent -> [n] bool: the observation's `action_mask` (a row with no legal action, which
        these envs never give, is left all true rather than leaving a policy nothing to choose)."""
        mask = jnp.asarray(state.obs.action_mask, bool)
        mask = jnp.where(mask.any(-1, keepdims=True), mask, True)
        return {a: mask[i] for i, a in enumerate(self.agents)}

    def action_space(self, agent: str | None = None) -> Discrete:
        return Discrete(self._num_actions[self.agents.index(agent) if agent is not None else 0])

    def observation_space(self, agent: str | None = None) -> Box:
        return Box((self._obs_sizes[agent if agent is not None else self.agents[0]],))
