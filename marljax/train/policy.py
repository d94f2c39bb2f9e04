"""Export a trained policy from a run's checkpoint, and load it back as a jittable `act`.

    marljax export runs/my_run policy_dir [seed_index=0]

writes `policy_dir/params` (an orbax checkpoint of the actors' parameters of one
seed, without the critic) and `policy_dir/policy.json` (the run's config, the
update it was taken at, versions). `marljax.load_policy(policy_dir)` rebuilds
the networks from that config and returns a `Policy` whose `act` works on the
environment's own observation dict, so it drops into any JaxMARL loop:

    policy = marljax.load_policy("policy_dir")
    act = jax.jit(policy.act)
    actions, carry = act(obs, key, policy.init_carry())   # carry is None for feed-forward
    obs, state, reward, done, info = env.step(key_env, state, actions)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from marljax.train.checkpoint import Checkpointer, abstract_like, versions
from marljax.config import Config, ConfigError, from_dict
from marljax.envs.adapter import EnvAdapter
from marljax.parallel.mesh import first_device_sharding
from marljax.train.wiring import make_adapter, make_trainer

Array = jax.Array
POLICY_JSON = "policy.json"


class Policy(NamedTuple):
    """A trained team's actors, ready to act in the environment (one env, unbatched)."""

    act: Callable  # (obs, key, carry=None, avail_actions=None, greedy=False) -> (actions, carry)
    init_carry: Callable[[], Any]  # () -> recurrent state for a new episode (None: feed-forward)
    config: Config
    params: dict  # group -> actor parameters, leaves [1 or A_g, ...]
    env: EnvAdapter


def _rebuild(config: Config):
    env = make_adapter(config)
    return env, make_trainer(config, env)


def acting_params(trainer, params: dict) -> dict:
    """The parameters `trainer.act` reads: its groups' networks (no critic, no mixer)."""
    return {k: v for k, v in params.items() if k in trainer.networks}


def restore_run(run_dir: str | Path, log: Callable = print) -> tuple[Any, dict, Config]:
    """The newest good checkpoint of the run in `run_dir`, on the first device: (state, meta, config).

    state is the whole TrainState for mode=anakin and the LearnerState for mode=async (what
    each mode checkpoints).
    """
    run_dir = Path(run_dir)
    checkpointer = Checkpointer(run_dir / "checkpoints", keep=1_000_000, log=log)
    try:
        if not checkpointer.steps():
            raise ConfigError("out_dir", f"{run_dir} has no checkpoint (looked in {checkpointer.directory})")
        config = from_dict(checkpointer.read_meta(checkpointer.steps()[-1])["config"])
        _, trainer = _rebuild(config)
        init = trainer.init_learner if config.mode == "async" else trainer.init
        shapes = jax.eval_shape(jax.vmap(init), jax.ShapeDtypeStruct((config.num_seeds, 2), jnp.uint32))
        sharding = first_device_sharding()
        restored = checkpointer.restore_latest(abstract_like(shapes, jax.tree.map(lambda _: sharding, shapes)))
        if restored is None:
            raise ConfigError("out_dir", f"no checkpoint in {checkpointer.directory} could be read")
    finally:
        checkpointer.close()
    return restored[0], restored[1], config


def export_policy(run_dir: str | Path, path: str | Path, seed_index: int = 0, log: Callable = print) -> Path:
    """Write the actors of seed `seed_index` from the newest good checkpoint in `run_dir` to `path`."""
    run_dir, path = Path(run_dir), Path(path).absolute()
    state, meta, config = restore_run(run_dir, log)
    if not 0 <= seed_index < config.num_seeds:
        raise ConfigError("seed_index", f"must be in [0, {config.num_seeds}) for this run, got {seed_index}")
    learner = state if config.mode == "async" else state.learner
    _, trainer = _rebuild(config)
    params = {k: jax.tree.map(lambda x: x[seed_index], v) for k, v in acting_params(trainer, learner.params).items()}
    if path.exists():
        raise ConfigError("path", f"{path} exists; export writes a new directory")
    saver = ocp.StandardCheckpointer()
    saver.save(path / "params", params)
    saver.wait_until_finished()
    info = {"config": config.to_dict(), "seed_index": seed_index, "update": meta["update"], "versions": versions()}
    (path / POLICY_JSON).write_text(json.dumps(info, indent=1))
    log(f"exported seed {seed_index} at update {meta['update']} of {run_dir} to {path}")
    return path


def load_policy(path: str | Path) -> Policy:
    """The policy written by `export_policy`; its `act` is pure and jittable."""
    path = Path(path).absolute()
    info = json.loads((path / POLICY_JSON).read_text())
    config = from_dict(info["config"])
    env, trainer = _rebuild(config)
    shapes = acting_params(trainer, jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params)
    sharding = first_device_sharding()
    target = abstract_like(shapes, jax.tree.map(lambda _: sharding, shapes))
    params = ocp.StandardCheckpointer().restore(path / "params", target)

    def init_carry() -> dict | None:
        if not config.recurrent:
            return None
        return {g.name: jnp.zeros((1, g.size, config.gru_hidden_size)) for g in env.groups}

    def act(obs: dict, key: Array, carry: dict | None = None, avail_actions: dict | None = None, greedy: bool = False):
        """obs: the env's agent name -> observation; returns (agent name -> action, next carry)."""
        grouped = {k: v[None] for k, v in env.group_obs(obs).items()}  # [1, A_g, ...]
        mask = {k: v[None] for k, v in env.group_masks(avail_actions).items()} if avail_actions else {}
        hidden = carry if carry is not None else (init_carry() or {})
        reset = {g.name: jnp.zeros((1, g.size), bool) for g in env.groups}
        actions, hidden = trainer.act(params, grouped, reset, hidden, mask, key, greedy)
        return env.agent_actions({k: v[0] for k, v in actions.items()}), (hidden if config.recurrent else None)

    return Policy(act, init_carry, config, params, env)


__all__ = ["Policy", "export_policy", "load_policy", "restore_run"]
