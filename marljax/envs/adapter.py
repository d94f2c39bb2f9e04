"""One adapter over JaxMARL's env API, used by every algorithm.

Agents with identical observation and action spaces form a *group*; a group's
arrays carry a leading agent axis (`[A_g, ...]`), and groups are never padded
to each other. The adapter hides JaxMARL's per-env quirks: observations that
are agent-keyed dicts, stacked arrays (storm_np), tuples (storm_2p) or nested
dicts (storm); `agent_classes` as a method, a property or missing; masks from
`get_avail_actions`, hanabi's `get_legal_moves`, or none; integer rewards; and
observation spaces that disagree with the observations (the real shapes are
read from `reset`).

All methods act on ONE environment; algorithms `vmap` them over environments.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from marljax.schema import ConfigError

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class AgentGroup:
    """Agents that share observation and action spaces."""

    name: str
    agents: tuple  # agent names as the env spells them (str or int)
    indices: tuple[int, ...]  # positions in env.agents
    obs_shape: tuple[int, ...]  # one agent's observation, after flattening dict observations
    discrete: bool  # Discrete actions (else a Box)
    action_dim: int  # number of actions (Discrete) or action vector length (Box)
    action_low: float | None = None  # Box bounds (actions are clipped to them before env.step)
    action_high: float | None = None
    has_mask: bool = False  # the env reports available actions for this group

    @property
    def size(self) -> int:
        return len(self.agents)


def cut_by_time_limit(ended: Array, length: Array, limit: int | None) -> Array:
    """[E] bool: the episodes that ended at or past `limit` steps (`length` counts the step that ended
    them), truncations rather than terminals; none where `limit` is None."""
    return ended & (length >= limit) if limit else jnp.zeros_like(ended)


class StepResult(NamedTuple):
    obs: dict[str, Array]  # group -> [A_g, *obs_shape]
    state: Any  # the env's own state pytree
    reward: dict[str, Array]  # group -> [A_g] float32
    done: dict[str, Array]  # group -> [A_g] bool (agent done, or the episode ended)
    episode_done: Array  # [] bool: dones["__all__"]; the env auto-reset
    bonus: dict | None = None  # group -> [A_g] float32: info[bonus_key] (reward shaping); None without one


# Envs whose stacked (non agent-keyed) observations put the agent axis somewhere that cannot be
# inferred when other axes have the same length: env class -> {top-level key: agent axis}.
_AGENT_AXIS = {"InTheGrid": {"inventory": -1}}


def _action_spec(space) -> tuple[bool, int, float | None, float | None]:
    if hasattr(space, "n") and not getattr(space, "shape", ()):
        return True, int(space.n), None, None
    shape = tuple(int(s) for s in np.atleast_1d(getattr(space, "shape", ())))
    if hasattr(space, "n"):  # Discrete spaces that report shape ()
        return True, int(space.n), None, None
    if len(shape) != 1:
        raise ConfigError("env", f"action space {space} with shape {shape} is not supported (Discrete or 1-D Box)")
    low = float(np.min(np.asarray(space.low)))
    high = float(np.max(np.asarray(space.high)))
    return False, shape[0], (low if np.isfinite(low) else None), (high if np.isfinite(high) else None)


def _agent_classes(env) -> dict | None:
    try:
        classes = env.agent_classes
        if callable(classes):
            classes = classes()
    except (NotImplementedError, AttributeError, TypeError):
        return None
    return dict(classes) if isinstance(classes, dict) and classes else None


def _role_name(agent) -> str:
    return re.sub(r"[_\s-]*\d+$", "", str(agent)) or "agents"


class EnvAdapter:
    """Group-major, single-environment view of a JaxMARL `MultiAgentEnv`."""

    def __init__(self, env, name: str = "", group_by: str = "roles", bonus_key: str = ""):
        """`group_by`: "roles" splits agents by the env's `agent_classes` and then by spaces;
        "spaces" groups every agent with identical observation and action spaces together.
        `bonus_key`: an info key of the env's step holding a per-agent reward (agent -> scalar),
        returned as `StepResult.bonus` (reward shaping); empty: none."""
        if group_by not in ("roles", "spaces"):
            raise ConfigError("group_by", f"got {group_by!r}; allowed: roles, spaces")
        self.group_by = group_by
        self.env = env
        self.name = name or type(env).__name__
        self.agents: tuple = tuple(env.agents)
        self.num_agents = len(self.agents)
        # agents named 0..N-1 (the STORM family) get their actions as a tuple in agent order:
        # storm_2p unpacks them (`a0, a1 = actions`), which on a dict yields the keys 0, 1
        self._positional_actions = self.agents == tuple(range(self.num_agents))
        if self.num_agents == 0:
            raise ConfigError("env", f"{self.name} has no agents")
        self._obs_is_dict_of_agents = True
        obs_shapes = self._probe_obs_shapes()
        self._mask_fn = self._find_mask_fn()
        self.groups: tuple[AgentGroup, ...] = self._make_groups(obs_shapes)
        self._world_fn = self._find_world_fn()
        self._win_bonus = self._find_win_bonus()
        self.bonus_key = bonus_key
        if bonus_key:
            self._check_bonus_key()

    # ---------------------------------------------------------------- probing
    def _probe_obs_shapes(self) -> dict:
        def flat_obs(key):
            per_agent = self._split_by_agent(self.env.reset(key)[0])
            return {a: self._flatten_obs(per_agent[a]) for a in self.agents}

        shapes = jax.eval_shape(flat_obs, jax.random.PRNGKey(0))
        return {a: shapes[a].shape for a in self.agents}

    def _check_bonus_key(self) -> None:
        """ConfigError unless one step's info holds `bonus_key` with one scalar per agent (traced only)."""

        def info(key):
            _, state = self.env.reset(key)
            actions = {
                g.name: jnp.zeros(
                    (g.size,) if g.discrete else (g.size, g.action_dim), jnp.int32 if g.discrete else jnp.float32
                )
                for g in self.groups
            }
            return self.env.step(key, state, self.env_actions(actions))[4]

        found = jax.eval_shape(info, jax.random.PRNGKey(0))
        field = "reward_shaping.info_key"
        keys = sorted(map(str, found)) if isinstance(found, dict) else []
        if self.bonus_key not in keys:
            raise ConfigError(
                field, f"{self.name}'s step info has no key {self.bonus_key!r}; its keys: {', '.join(keys) or 'none'}"
            )
        value = found[self.bonus_key]
        if not (isinstance(value, dict) and all(a in value and value[a].size == 1 for a in self.agents)):
            raise ConfigError(
                field,
                f"info[{self.bonus_key!r}] of {self.name} must map every agent to a scalar "
                f"reward, got {jax.tree.map(lambda x: x.shape, value)}",
            )

    def _find_mask_fn(self):
        _, state = jax.eval_shape(self.env.reset, jax.random.PRNGKey(0))
        for attr in ("get_avail_actions", "get_legal_moves"):
            fn = getattr(self.env, attr, None)
            if fn is None:
                continue
            try:
                masks = jax.eval_shape(fn, state)
            except NotImplementedError:
                continue
            if isinstance(masks, dict) and all(a in masks for a in self.agents):
                return fn
        return None

    def _find_world_fn(self):
        """The env's own `get_world_state`, where it has a working one."""
        fn = getattr(self.env, "get_world_state", None)
        if fn is None:
            return None
        _, state = jax.eval_shape(self.env.reset, jax.random.PRNGKey(0))
        try:
            jax.eval_shape(fn, state)
        except (NotImplementedError, TypeError, AttributeError):
            return None
        return fn

    def _find_win_bonus(self) -> float | None:
        """SMAX's won-battle bonus, where the env (or the SMAX it wraps) pays one.

        SMAX pays every ally the team reward: the enemies' health lost this step, normalised
        to at most 1, plus the bonus when every enemy is dead and an ally is alive. On an
        episode's last step the reward therefore exceeds the bonus exactly when the battle was
        won (a draw, or a loss, pays at most 1 = the bonus, and a won last step always takes
        some enemy health)."""
        for env in (self.env, getattr(self.env, "_env", None)):
            bonus = getattr(env, "won_battle_bonus", None)
            if bonus is not None and float(bonus) > 0 and not getattr(env, "use_self_play_reward", False):
                return float(bonus)
        return None

    @property
    def has_win(self) -> bool:
        """The env has a win condition (`won` tells won episodes apart), e.g. SMAX."""
        return self._win_bonus is not None

    def won(self, reward: dict[str, Array], episode_done: Array) -> Array:
        """[] bool: this step ended a won episode (always false without a win condition).
        `reward`: group -> [A_g], the step's rewards as `step` returns them."""
        if self._win_bonus is None:
            return jnp.zeros((), bool)
        team = jnp.max(jnp.concatenate([r.reshape(-1) for r in reward.values()]))
        return jnp.logical_and(episode_done, team > self._win_bonus)

    @property
    def has_world_state(self) -> bool:
        return self._world_fn is not None

    def _make_groups(self, obs_shapes: dict) -> tuple[AgentGroup, ...]:
        spec = {a: (obs_shapes[a], _action_spec(self.env.action_space(a))) for a in self.agents}
        classes = _agent_classes(self.env) if self.group_by == "roles" else None
        # Candidate groups: the env's agent classes, else every agent on its own.
        if classes:
            candidates = [(str(k), [v] if isinstance(v, (str, int)) else list(v)) for k, v in classes.items()]
            listed = {a for _, members in candidates for a in members}
            candidates += [(_role_name(a), [a]) for a in self.agents if a not in listed]
        else:
            candidates = [("agents", list(self.agents))]
        # with group_by="spaces", groups of different spaces take their first agent's role name
        groups: list[tuple[str, list]] = []
        for cname, members in candidates:
            # split a candidate further wherever spaces differ (never pad)
            by_spec: dict = {}
            for a in members:
                by_spec.setdefault(spec[a], []).append(a)
            for i, same in enumerate(by_spec.values()):
                gname = cname if len(by_spec) == 1 else _role_name(same[0]) or f"{cname}_{i}"
                groups.append((gname, same))
        names = [g for g, _ in groups]
        out = []
        for i, (gname, members) in enumerate(groups):
            if names.count(gname) > 1:
                gname = f"{gname}_{i}"
            members = sorted(members, key=self.agents.index)
            obs_shape, (discrete, dim, low, high) = spec[members[0]]
            out.append(
                AgentGroup(
                    name=gname,
                    agents=tuple(members),
                    indices=tuple(self.agents.index(a) for a in members),
                    obs_shape=tuple(obs_shape),
                    discrete=discrete,
                    action_dim=dim,
                    action_low=low,
                    action_high=high,
                    has_mask=self._mask_fn is not None and discrete,
                )
            )
        return tuple(sorted(out, key=lambda g: g.indices[0]))

    # --------------------------------------------------------- normalisation
    def _split_by_agent(self, tree) -> dict:
        """Per-agent view of an observation/reward structure in any of JaxMARL's layouts."""
        if isinstance(tree, dict) and all(a in tree for a in self.agents):
            return {a: tree[a] for a in self.agents}
        if isinstance(tree, (tuple, list)) and len(tree) == self.num_agents:
            return {a: tree[i] for i, a in enumerate(self.agents)}
        n = self.num_agents
        known = _AGENT_AXIS.get(type(self.env).__name__, {})

        def take(path, leaf, i):
            top = str(getattr(path[0], "key", "")) if path else ""
            if top in known:
                return jnp.take(leaf, i, axis=known[top])
            first = bool(leaf.ndim) and leaf.shape[0] == n
            last = bool(leaf.ndim) and leaf.shape[-1] == n
            if first and last and leaf.ndim > 1:
                raise ConfigError(
                    "env",
                    f"{self.name}: observation leaf {jax.tree_util.keystr(path)} is shaped {leaf.shape}; "
                    f"with {n} agents its agent axis could be the first or the last",
                )
            if first:
                return leaf[i]
            if last:
                return leaf[..., i]
            raise ConfigError("env", f"{self.name}: cannot find the agent axis of a leaf shaped {leaf.shape}")

        return {
            a: jax.tree_util.tree_map_with_path(functools.partial(take, i=i), tree) for i, a in enumerate(self.agents)
        }

    @staticmethod
    def _flatten_obs(obs) -> Array:
        """One agent's observation as one float32 array (dict observations are raveled)."""
        leaves = jax.tree.leaves(obs)
        if len(leaves) == 1:
            return jnp.asarray(leaves[0], jnp.float32)
        return jnp.concatenate([jnp.ravel(jnp.asarray(x, jnp.float32)) for x in leaves])

    def _group_obs(self, obs) -> dict[str, Array]:
        per_agent = self._split_by_agent(obs)
        return {g.name: jnp.stack([self._flatten_obs(per_agent[a]) for a in g.agents]) for g in self.groups}

    def _group_scalar(self, values, default=None) -> dict[str, Array]:
        if isinstance(values, dict) and not all(a in values for a in self.agents):
            values = {a: default for a in self.agents}
        per_agent = self._split_by_agent(values)
        return {g.name: jnp.stack([jnp.asarray(per_agent[a]).reshape(()) for a in g.agents]) for g in self.groups}

    # ---------------------------------------------------------------- the API
    def reset(self, key: Array) -> tuple[dict[str, Array], Any]:
        obs, state = self.env.reset(key)
        return self._group_obs(obs), state

    def group_obs(self, obs) -> dict[str, Array]:
        """The env's own observations (agent name -> obs) as group arrays [A_g, *obs_shape]."""
        return self._group_obs(obs)

    def agent_actions(self, actions: dict[str, Array]) -> dict[str, Array]:
        """Group actions (`[A_g]` ints or `[A_g, dim]` floats) as the env's agent name -> action."""
        env_actions = {}
        for g in self.groups:
            acts = actions[g.name]
            if not g.discrete and (g.action_low is not None or g.action_high is not None):
                acts = jnp.clip(acts, g.action_low, g.action_high)
            for i, a in enumerate(g.agents):
                env_actions[a] = acts[i]
        return env_actions

    def env_actions(self, actions: dict[str, Array]) -> dict | tuple:
        """Group actions in the container the env's `step` takes, in `env.agents` order (coin_game
        reads `actions.values()`): agent name -> action, or a tuple where the agents are named
        0..N-1 (it indexes the same way, and unpacks)."""
        by_agent = self.agent_actions(actions)
        if self._positional_actions:
            return tuple(by_agent[a] for a in self.agents)
        return {a: by_agent[a] for a in self.agents}

    def group_masks(self, avail: dict[str, Array]) -> dict[str, Array]:
        """Available actions given per agent name -> group -> [A_g, action_dim] bool."""
        return {
            g.name: jnp.stack([jnp.asarray(avail[a]).astype(bool) for a in g.agents])
            for g in self.groups
            if g.discrete and all(a in avail for a in g.agents)
        }

    def step(self, key: Array, state, actions: dict[str, Array]) -> StepResult:
        """Step one env with group actions (`[A_g]` ints or `[A_g, dim]` floats)."""
        obs, state, reward, done, info = self.env.step(key, state, self.env_actions(actions))
        episode_done = jnp.asarray(done["__all__"]).reshape(())
        reward = {g: r.astype(jnp.float32) for g, r in self._group_scalar(reward).items()}
        done = {
            g: jnp.logical_or(d.astype(bool), episode_done)
            for g, d in self._group_scalar(done, default=episode_done).items()
        }
        bonus = None
        if self.bonus_key:
            bonus = {g: b.astype(jnp.float32) for g, b in self._group_scalar(info[self.bonus_key]).items()}
        return StepResult(self._group_obs(obs), state, reward, done, episode_done, bonus)

    def world_state(self, state, obs: dict[str, Array]) -> Array:
        """Global state for a centralised critic, [W] float32: the env's `get_world_state` where
        JaxMARL provides one (SMAX, facmac, jaxnav), else every agent's observation concatenated."""
        if self._world_fn is not None:  # may be an array or a pytree (facmac returns a dict)
            leaves = jax.tree.leaves(self._world_fn(state))
            return jnp.concatenate([jnp.ravel(jnp.asarray(x, jnp.float32)) for x in leaves])
        return jnp.concatenate([jnp.ravel(obs[g.name]) for g in self.groups])

    @property
    def time_limit(self) -> int | None:
        """Steps after which an episode is cut (JaxMARL's `max_steps`: MPE, SMAX), None where the env declares none."""
        limit = getattr(self.env, "max_steps", None)
        return int(limit) if isinstance(limit, (int, np.integer)) and limit > 0 else None

    def required_time_limit(self, field: str, purpose: str) -> int:
        """The time limit a setting (`field`) needs `purpose` for; refused in one line where the env declares none."""
        if not self.time_limit:
            raise ConfigError(field, f"{self.name} declares no time limit (max_steps) {purpose}; allowed: false")
        return self.time_limit

    def action_mask(self, state) -> dict[str, Array]:
        """Available actions, group -> [A_g, action_dim] bool (all true where the env has none)."""
        masks = self._mask_fn(state) if self._mask_fn is not None else {}
        out = self.group_masks({a: m for a, m in masks.items() if a in self.agents})
        for g in self.groups:
            if g.discrete and (g.name not in out or not g.has_mask):
                out[g.name] = jnp.ones((g.size, g.action_dim), bool)
        return out

    def describe(self) -> str:
        parts = []
        for g in self.groups:
            act = f"Discrete({g.action_dim})" if g.discrete else f"Box({g.action_dim})"
            mask = ", masked" if g.has_mask else ""
            parts.append(f"{g.name}: {g.size} agent(s), obs {g.obs_shape}, {act}{mask}")
        return f"{self.name}: " + "; ".join(parts)
