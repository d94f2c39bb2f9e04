"""`marljax record`: a policy's experience in its env, written as an offline dataset.

    marljax record SOURCE OUT [transitions=N] [num_envs=E] [epsilon=X] [greedy=true] [quality=LABEL] ...

SOURCE is a run's directory (its newest good checkpoint, seed `seed_index`), an exported policy
(`marljax export`), or `random` (a uniformly random available action; `env=` and `env_kwargs.*=`
choose the env). The policy acts in `num_envs` environments side by side for `transitions` steps
in all; with `epsilon` each agent takes a uniformly random available action (Box: uniform within
the bounds) with that probability instead of the policy's, and `greedy` says whether the policy's
own action is its most likely one or a sample of it. OUT is the dataset's `<name>.vlt` directory;
the dataset goes in `OUT/<quality>` (`marljax.datasets` describes the layout), with its
episode-return distribution and a quality label beside it: the one given, else derived from the
policy (random: Poor; a trained policy with exploration, epsilon > 0 or sampled actions: Medium;
greedy without exploration: Good), as OG-MARL labels its datasets by the policy that made them.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from marljax.config import Config, load_config
from marljax.datasets import DatasetWriter, check_stackable, episode_returns, return_distribution
from marljax.envs.adapter import EnvAdapter, cut_by_time_limit
from marljax.envs.host import HostEnvAdapter
from marljax.run_settings import RecordSettings
from marljax.schema import ConfigError
from marljax.train.evaluate import baseline_act

RANDOM = "random"
CHUNK_STEPS = 2048  # steps of every stream per jitted chunk (and per Vault write: fewer, larger files)
_RECORD_TAG = 0x72_65_63  # folded into the seed: recording keys never meet a training run's


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """The policy that acts: `act` with `Trainer.act`'s signature, its parameters and recurrent state."""

    config: Config
    env: EnvAdapter
    act: Callable
    params: Any
    initial_hidden: Callable[[int], dict]
    described: dict  # what the dataset's description says of it
    trained: bool  # false for the random policy


def _device_env(env: EnvAdapter | HostEnvAdapter) -> EnvAdapter:
    """The env a recording steps: jitted reset and step on device, which a host (PettingZoo) env has not."""
    if isinstance(env, HostEnvAdapter):
        raise ConfigError("env", f"{env.name}: a host (PettingZoo) env steps on the host; record needs a JAX env")
    return env


def behaviour(source: str, settings: RecordSettings, overrides: list[str], log: Callable = print) -> Behaviour:
    """The acting policy of SOURCE (module docstring); ConfigError / PolicyError for a bad one."""
    from marljax.train.policy import PolicyError, acting_params, load_policy, restore_run
    from marljax.train.wiring import make_adapter, make_trainer

    if source == RANDOM:
        config = load_config(None, overrides)
        env = _device_env(make_adapter(config))
        return Behaviour(config, env, baseline_act(env, RANDOM), None, lambda _: {}, {"source": RANDOM}, False)
    if overrides:
        raise ConfigError(
            overrides[0].split("=")[0],
            f"sets the env of a random policy (SOURCE=random); {source} acts in the env it was trained on",
        )
    path = Path(source)
    if (path / "policy.json").is_file():
        policy = load_policy(path, settings.trust_code, log)
        trainer = make_trainer(policy.config, policy.env)
        described: dict[str, Any] = {"source": "policy", "path": str(path.absolute()), "algo": policy.config.algo}
        return Behaviour(policy.config, policy.env, trainer.act, policy.params, trainer.initial_hidden, described, True)
    if not (path / "checkpoints").is_dir():
        raise PolicyError(
            f"{source} is neither a run's directory (with checkpoints/), an exported policy "
            f"(with policy.json) nor {RANDOM}"
        )
    state, meta, config = restore_run(path, log, settings.trust_code)
    if not 0 <= settings.seed_index < config.num_seeds:
        raise ConfigError("seed_index", f"must be in [0, {config.num_seeds}) for this run, got {settings.seed_index}")
    env = _device_env(make_adapter(config))
    trainer = make_trainer(config, env)
    learner = state if config.mode == "async" else state.learner
    params = jax.tree.map(lambda x: x[settings.seed_index], acting_params(trainer, learner.params))
    described = {
        "source": "run",
        "path": str(path.absolute()),
        "algo": config.algo,
        "update": int(meta["update"]),
        "seed_index": settings.seed_index,
    }
    return Behaviour(config, env, trainer.act, params, trainer.initial_hidden, described, True)


def agent_order(env: EnvAdapter) -> np.ndarray:
    """Positions that put the groups' agents, concatenated, back in the env's agent order."""
    return np.argsort(np.concatenate([np.asarray(g.indices) for g in env.groups]))


def make_chunk(behave: Behaviour, settings: RecordSettings) -> Callable:
    """(carry, key, steps) -> (carry, experience leaves [steps, E, ...]): `steps` steps of every
    environment, jitted (steps static)."""
    env, E = behave.env, settings.num_envs
    groups = env.groups
    order = agent_order(env)
    explore = baseline_act(env, RANDOM)
    max_steps = env.time_limit  # ends at the time limit are truncations

    def stacked(tree: dict) -> jax.Array:  # group -> [E, A_g, ...] -> [E, N, ...] in the env's agent order
        return jnp.concatenate([tree[g.name] for g in groups], axis=1)[:, order]

    def step(carry, key):
        obs, state, reset, hidden, length = carry
        k_act, k_explore, k_eps, k_env = jax.random.split(key, 4)
        masks = jax.vmap(env.action_mask)(state)
        actions, hidden_next = behave.act(behave.params, obs, reset, hidden, masks, k_act, settings.greedy)
        if settings.epsilon > 0:
            random, _ = explore(None, obs, reset, hidden, masks, k_explore)
            for gi, g in enumerate(groups):
                pick = jax.random.uniform(jax.random.fold_in(k_eps, gi), (E, g.size)) < settings.epsilon  # [E, A_g]
                if not g.discrete:
                    pick = pick[..., None]
                actions[g.name] = jnp.where(pick, random[g.name], actions[g.name])
        for g in groups:  # what the env executes: Box actions clipped to their bounds (as `agent_actions` does)
            if not g.discrete and (g.action_low is not None or g.action_high is not None):
                actions[g.name] = jnp.clip(actions[g.name], g.action_low, g.action_high)
        res = jax.vmap(env.step)(jax.random.split(k_env, E), state, actions)
        length = length + 1
        ended = res.episode_done  # [E]
        truncated = cut_by_time_limit(ended, length, max_steps)
        terminal = ended & ~truncated
        N = env.num_agents
        record = {
            "observations": stacked(obs).astype(jnp.float32),
            "actions": stacked({g.name: actions[g.name] for g in groups}),
            "rewards": stacked(res.reward).astype(jnp.float32),
            "terminals": jnp.broadcast_to(terminal[:, None], (E, N)).astype(jnp.float32),
            "truncations": jnp.broadcast_to(truncated[:, None], (E, N)).astype(jnp.float32),
            "infos": {},
        }
        if all(g.discrete for g in groups):
            record["infos"]["legals"] = stacked(masks).astype(jnp.float32)
        if env.has_world_state:
            record["infos"]["state"] = jax.vmap(env.world_state)(state, obs).astype(jnp.float32)
        length = jnp.where(ended, 0, length)
        return (res.obs, res.state, res.done, hidden_next, length), record

    def chunk(carry, key, steps: int):
        return jax.lax.scan(step, carry, jax.random.split(key, steps))

    return jax.jit(chunk, static_argnums=2)


def initial_carry(behave: Behaviour, settings: RecordSettings, key: jax.Array):
    E, env = settings.num_envs, behave.env
    obs, state = jax.vmap(env.reset)(jax.random.split(key, E))
    reset = {g.name: jnp.ones((E, g.size), bool) for g in env.groups}
    return obs, state, reset, behave.initial_hidden(E), jnp.zeros((E,), jnp.int32)


def derived_quality(behave: Behaviour, settings: RecordSettings) -> str:
    """OG-MARL's labels by the policy that made the data: random -> Poor, a trained policy with
    exploration (epsilon > 0, or sampled actions) -> Medium, greedy without exploration -> Good."""
    if not behave.trained:
        return "Poor"
    return "Medium" if settings.epsilon > 0 or not settings.greedy else "Good"


def _versions() -> dict[str, str]:
    out = {}
    for name in ("marljax", "jax", "jaxmarl", "flashbax"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out


def record(
    source: str,
    out: str | Path,
    settings: RecordSettings,
    overrides: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> Path:
    """Record SOURCE's experience as the dataset OUT/<quality> (module docstring); -> its directory."""
    settings.check()
    behave = behaviour(source, settings, list(overrides), log)
    env = behave.env
    check_stackable(env)
    quality = settings.quality or derived_quality(behave, settings)
    E = settings.num_envs
    T = math.ceil(settings.transitions / E)
    chunk = make_chunk(behave, settings)
    key = jax.random.fold_in(jax.random.PRNGKey(settings.seed), _RECORD_TAG)
    key, k_reset = jax.random.split(key)
    carry = initial_carry(behave, settings, k_reset)
    config = behave.config
    agents = [str(a) for a in env.agents]
    metadata = {"source": "marljax", "env": config.env, "env_kwargs": dict(config.env_kwargs), "agents": agents}
    writer, done, returns = None, 0, []
    log(
        f"recording {E} x {T} steps of {env.describe()} ({behave.described['source']} policy, epsilon "
        f"{settings.epsilon}, {'greedy' if settings.greedy else 'sampled'}) into {Path(out) / quality}"
    )
    try:
        while done < T:
            steps = min(CHUNK_STEPS, T - done)
            key, k_chunk = jax.random.split(key)
            carry, traj = chunk(carry, k_chunk, steps)
            part = jax.tree.map(lambda x: np.swapaxes(np.asarray(x), 0, 1), jax.device_get(traj))  # [E, steps, ...]
            if writer is None:
                writer = DatasetWriter(out, quality, part, metadata)
            writer.append(part)
            returns.append({k: part[k] for k in ("rewards", "terminals", "truncations")})  # what the returns need
            done += steps
        whole = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *returns)
        distribution = return_distribution(episode_returns(whole))
        g = env.groups[0]
        description = {
            "env": config.env,
            "env_kwargs": dict(config.env_kwargs),
            "agents": agents,
            "num_agents": env.num_agents,
            "obs_shape": list(g.obs_shape),
            "action": {
                "kind": "discrete" if g.discrete else "continuous",
                "dim": g.action_dim,
                "low": g.action_low,
                "high": g.action_high,
            },
            "state": env.has_world_state,
            "streams": E,
            "transitions": E * T,
            "quality": quality,
            "quality_from": "given" if settings.quality else "derived from the policy",
            "returns": distribution,
            "policy": behave.described,
            "exploration": {"epsilon": settings.epsilon, "greedy": settings.greedy},
            "seed": settings.seed,
            "versions": _versions(),
        }
        assert writer is not None
        path = writer.finish(description)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    mean = distribution.get("mean")
    log(
        f"wrote {E * T} transitions, {distribution['episodes']} complete episodes, return per agent "
        + (f"{mean:.2f} +- {distribution['std']:.2f}" if mean is not None else "- (no episode ended)")
        + f" ({quality}) to {path}"
    )
    return path


__all__ = ["RANDOM", "derived_quality", "record"]
