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
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from marljax.config import Config, from_dict
from marljax.envs.adapter import EnvAdapter
from marljax.envs.registry import is_import_path
from marljax.files import DamagedFile, read_json, write_text_atomic
from marljax.parallel.mesh import first_device_sharding
from marljax.schema import ConfigError, first_line
from marljax.train import library_log
from marljax.train.checkpoint import Checkpointer, abstract_like, config_from_meta, fingerprint, versions
from marljax.train.wiring import make_adapter, make_trainer

Array = jax.Array
POLICY_JSON = "policy.json"
POLICY_JSON_MAX_BYTES = 16 << 20  # a policy.json is a few KB: one far larger is not one export wrote


class Policy(NamedTuple):
    """A trained team's actors, ready to act in the environment (one env, unbatched)."""

    act: Callable  # (obs, key, carry=None, avail_actions=None, greedy=False) -> (actions, carry)
    init_carry: Callable[[], Any]  # () -> recurrent state for a new episode (None: feed-forward)
    config: Config
    params: dict  # group -> actor parameters, leaves [1 or A_g, ...]
    env: EnvAdapter


class PolicyError(ValueError):
    """A saved run or policy that cannot be loaded as it is; the message names the file and why."""


def _rebuild(config: Config, trust_code: bool, where: Path):
    """The env adapter and trainer of a saved config. An env given as an import path
    (`module:callable`) is imported and called, which runs that module's code: from a saved
    file, only when the caller says it trusts the file."""
    if is_import_path(config.env) and not trust_code:
        raise PolicyError(
            f"{where} names env {config.env!r}, an import path: rebuilding it would import and run that code. "
            "If you trust this file, pass trust_code=True (marljax export ... trust_code=true)"
        )
    env = make_adapter(config)
    return env, make_trainer(config, env)


def acting_params(trainer, params: dict) -> dict:
    """The parameters `trainer.act` reads: its groups' networks (no critic, no mixer)."""
    return {k: v for k, v in params.items() if k in trainer.networks}


def restore_run(run_dir: str | Path, log: Callable = print, trust_code: bool = False) -> tuple[Any, dict, Config]:
    """The newest good checkpoint of the run in `run_dir`, on the first device: (state, meta, config).

    state is the whole TrainState for mode=anakin and the LearnerState for mode=async (what
    each mode checkpoints). Unreadable checkpoints are skipped with a warning each.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "checkpoints").is_dir():  # checked first: the Checkpointer would create the directory
        raise PolicyError(f"{run_dir} holds no run (no {run_dir / 'checkpoints'} directory)")
    checkpointer = Checkpointer(run_dir / "checkpoints", keep=1_000_000, log=log)
    try:
        found = checkpointer.newest_meta()
        if found is None:
            raise PolicyError(f"no checkpoint in {checkpointer.directory} could be read")
        config = config_from_meta(found[1])
        _, trainer = _rebuild(config, trust_code, checkpointer.directory / str(found[0]))
        init = trainer.init_learner if config.mode == "async" else trainer.init
        shapes = jax.eval_shape(jax.vmap(init), jax.ShapeDtypeStruct((config.num_seeds, 2), jnp.uint32))
        sharding = first_device_sharding()
        restored = checkpointer.restore_latest(abstract_like(shapes, jax.tree.map(lambda _: sharding, shapes)))
        if restored is None:
            raise PolicyError(f"no checkpoint in {checkpointer.directory} could be read")
    finally:
        checkpointer.close()
    return restored[0], restored[1], config


def export_policy(
    run_dir: str | Path, path: str | Path, seed_index: int = 0, log: Callable = print, trust_code: bool = False
) -> Path:
    """Write the actors of seed `seed_index` from the newest good checkpoint in `run_dir` to `path`."""
    run_dir, path = Path(run_dir), Path(path).absolute()
    if path.exists():  # checked before anything is read or written
        raise ConfigError("path", f"{path} exists; export writes a new directory")
    from marljax.train.loop import set_aside_runs

    for line in set_aside_runs(run_dir):
        log(line)
    state, meta, config = restore_run(run_dir, log, trust_code)
    if not 0 <= seed_index < config.num_seeds:
        raise ConfigError("seed_index", f"must be in [0, {config.num_seeds}) for this run, got {seed_index}")
    learner = state if config.mode == "async" else state.learner
    _, trainer = _rebuild(config, trust_code, run_dir)
    params = {k: jax.tree.map(lambda x: x[seed_index], v) for k, v in acting_params(trainer, learner.params).items()}
    library_log.install()
    info = {
        "config": config.to_dict(),
        "seed_index": seed_index,
        "update": meta["update"],
        "versions": versions(),
        "params_fingerprint": fingerprint(params),
    }
    try:
        saver = ocp.StandardCheckpointer()
        try:
            saver.save(path / "params", params)
            saver.wait_until_finished()
        finally:
            saver.close()
        write_text_atomic(path / POLICY_JSON, json.dumps(info, indent=1))
    except Exception as exc:  # noqa: BLE001 - a full disk, a directory it may not write: orbax's text says which
        shutil.rmtree(path, ignore_errors=True)  # export's own new directory: no half-written policy is left
        raise PolicyError(f"writing the policy to {path} failed ({first_line(exc)}); nothing was left there") from None
    log(f"exported seed {seed_index} at update {meta['update']} of {run_dir} to {path}")
    return path


def _read_policy_json(path: Path) -> dict:
    file = path / POLICY_JSON
    if not path.is_dir():  # a file, or nothing: either way not the directory export writes
        if not path.exists():
            raise PolicyError(
                f"{path} does not exist; give the directory marljax export wrote ({POLICY_JSON}, params/)"
            )
        where = f"; give its directory, {path.parent}" if path.name == POLICY_JSON else ""
        raise PolicyError(
            f"{path} is a file, not a policy directory (marljax export writes one holding {POLICY_JSON} and params/)"
            + where
        )
    if file.exists() and not file.is_file():
        kind = "a directory" if file.is_dir() else "not a regular file"
        raise PolicyError(f"{file} is {kind}, not the JSON file marljax export writes; export the policy again")
    try:
        info = read_json(file, "export the policy again", POLICY_JSON_MAX_BYTES)
    except FileNotFoundError:
        raise PolicyError(
            f"{path} holds no exported policy (no {POLICY_JSON}; write one with marljax export)"
        ) from None
    except DamagedFile as exc:
        raise PolicyError(str(exc)) from None
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise PolicyError(f"{file} holds no config; export the policy again")
    return info


def check_versions(saved: Any, where: Path, log: Callable = print) -> None:
    """A policy saved by another marljax major version is refused, another minor version warned of."""
    ours = versions().get("marljax", "0.0.0").split(".")
    theirs = str((saved or {}).get("marljax", "unknown")).split(".") if isinstance(saved, dict) else ["unknown"]
    if theirs[0] != ours[0]:
        raise PolicyError(
            f"{where} was written by marljax {'.'.join(theirs)}; this is marljax {'.'.join(ours)}, "
            "a different major version: export it again with this version"
        )
    if theirs[:2] != ours[:2]:
        log(f"warning: {where} was written by marljax {'.'.join(theirs)}; this is {'.'.join(ours)}")


def _grouped_obs(obs: Any, env: EnvAdapter, env_name: str, where: Path) -> dict[str, Array]:
    """`obs` as group arrays; PolicyError naming the env the policy was trained on when the
    observations are another env's (other agents, other shapes). Shapes are static: under jit
    this is checked once, when `act` is traced."""
    try:
        grouped = env.group_obs(obs)
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyError(
            f"the policy in {where} acts in {env_name} (agents {', '.join(map(str, env.agents))}); "
            f"these observations do not fit it ({type(exc).__name__}: {str(exc)[:200]}): "
            f"give it {env_name}'s observation dict"
        ) from None
    for g in env.groups:
        got = tuple(grouped[g.name].shape[1:])
        if got != tuple(g.obs_shape):
            raise PolicyError(
                f"the policy in {where} was trained on {env_name}, whose agents {', '.join(map(str, g.agents))} "
                f"observe shape {tuple(g.obs_shape)}; got {got}: observations of another env? "
                f"act takes {env_name}'s observations"
            )
    return grouped


def _observation_layout(env: EnvAdapter) -> Any:
    """The env's own observations from reset, as shapes (None where they cannot be traced: a host env)."""
    try:
        return jax.eval_shape(lambda key: env.env.reset(key)[0], jax.random.PRNGKey(0))
    except Exception:  # noqa: BLE001 - only a finer check is lost: _grouped_obs still checks agents and shapes
        return None


def _kind(value: Any) -> str:
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _check_agents(name: str, given: Any, agents: tuple, env_name: str, also: tuple = ()) -> None:
    """`given` must be a dict keyed by the env's agents (or by `also`: other keys the env itself returns)."""
    if not isinstance(given, Mapping):
        raise PolicyError(
            f"act: {name} must be a dict of agent name -> array, as {env_name} gives them; got {_kind(given)}"
        )
    extra = [k for k in given if k not in agents and k not in also]
    missing = [a for a in agents if a not in given]
    if missing and name == "avail_actions":  # a group with some agents' masks only was used unmasked
        raise PolicyError(f"act: avail_actions lacks {', '.join(map(str, missing))}: give every agent's, or None")
    if extra:
        raise PolicyError(
            f"act: {name} holds {', '.join(map(repr, extra[:5]))}, which {env_name} has no agent of; "
            f"its agents: {', '.join(map(str, agents))}"
        )


def _check_obs_layout(obs: Any, expected: Any, agents: tuple, env_name: str, where: Path) -> None:
    """The container `act` is given against the one the env's reset returns: a dict of the env's
    agents (an extra or a missing agent, or a list instead of the dict, refused), or a sequence of
    one per agent."""
    by_agent = expected is None or (isinstance(expected, Mapping) and all(a in expected for a in agents))
    missing = [a for a in agents if a not in obs] if by_agent and isinstance(obs, Mapping) else []
    if missing:
        raise PolicyError(
            f"the policy in {where} acts in {env_name} (agents {', '.join(map(str, agents))}); these observations "
            f"lack {', '.join(map(str, missing))}: give it {env_name}'s observation dict"
        )
    if isinstance(expected, (tuple, list)):
        if not (isinstance(obs, (tuple, list)) and len(obs) == len(expected)):
            raise PolicyError(
                f"act: obs must be {env_name}'s observations, a sequence of {len(expected)} (one per agent); "
                f"got {_kind(obs)}"
            )
    elif isinstance(expected, Mapping) or expected is None:
        _check_agents("obs", obs, agents, env_name, also=tuple(expected or ()))


def _check_key(key: Any) -> None:
    """One PRNG key: a typed key array of shape (), or the raw uint32 form jax.random.PRNGKey returns."""
    raw = jax.eval_shape(jax.random.PRNGKey, 0)
    shape, dtype = getattr(key, "shape", None), getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    if (typed and shape == ()) or (dtype == raw.dtype and shape == raw.shape):
        return
    got = f"an array of shape {tuple(shape)} and dtype {dtype}" if shape is not None else _kind(key)
    raise PolicyError(
        "act: key must be one PRNG key (jax.random.PRNGKey(seed) or jax.random.key(seed), split for each call); "
        f"got {got}"
    )


def _check_carry(carry: Any, init_carry: Callable[[], Any]) -> None:
    """carry: None (a new episode), or what the last call returned: init_carry()'s structure and shapes."""
    if carry is None:
        return
    fresh = init_carry()
    if fresh is None:
        raise PolicyError(f"act: this policy is feed-forward and keeps no carry; pass carry=None, got {_kind(carry)}")
    want = jax.tree.map(lambda x: (tuple(x.shape), str(x.dtype)), fresh)
    try:
        got = jax.tree.map(lambda x: (tuple(jnp.shape(x)), str(jnp.result_type(x))), carry)
    except TypeError:
        got = _kind(carry)
    if got != want:
        raise PolicyError(
            "act: carry must be what the last act returned (init_carry() at an episode's start), "
            f"as (shape, dtype) {want}; got {got}"
        )


def _shapes_differ(restorer: ocp.StandardCheckpointer, params_dir: Path, target: Any) -> str:
    """The first array whose stored shape is not target's, read from the checkpoint's metadata ("" if
    none or unreadable). Checked before restoring: a restore that fails on a shape leaves orbax's read
    tasks to log their error whenever they are collected, in the middle of unrelated work."""
    try:
        meta = restorer.metadata(params_dir)
        stored_tree = getattr(getattr(meta, "item_metadata", meta), "tree", None)
        stored = {jax.tree_util.keystr(k): tuple(v.shape) for k, v in jax.tree_util.tree_leaves_with_path(stored_tree)}
    except Exception:  # noqa: BLE001 - no metadata to read: the restore names what is wrong
        return ""
    for key, leaf in jax.tree_util.tree_leaves_with_path(target):
        name = jax.tree_util.keystr(key)
        if name in stored and stored[name] != tuple(leaf.shape):
            return f"{name} is stored with shape {stored[name]}; this network's is {tuple(leaf.shape)}"
    return ""


def _restore_params(path: Path, target: Any, saved_fingerprint: Any, log: Callable) -> dict:
    """The exported parameters, checked against the fingerprint export wrote beside them."""
    library_log.install()  # orbax's tracebacks of a failed restore: off stderr
    restorer = ocp.StandardCheckpointer()
    not_held = f"{path / 'params'} does not hold the parameters of the network {POLICY_JSON} describes"
    try:
        differ = _shapes_differ(restorer, path / "params", target)
        if not differ:
            params = restorer.restore(path / "params", target)
    except Exception as exc:  # noqa: BLE001 - missing, damaged, or another network's parameters
        text = str(exc).strip()
        raise PolicyError(f"{not_held} ({type(exc).__name__}: {text.splitlines()[0][:200] if text else ''})") from None
    finally:
        restorer.close()
    if differ:
        raise PolicyError(f"{not_held} ({differ})")
    if saved_fingerprint is None:
        log(
            f"warning: {path / POLICY_JSON} carries no fingerprint of the parameters (exported by an older marljax); "
            "they are not checked"
        )
    elif fingerprint(params) != saved_fingerprint:
        raise PolicyError(
            f"{path / 'params'} does not match the fingerprint in {POLICY_JSON}: its bytes changed after "
            "export (damaged or edited); export the policy again"
        )
    return params


def load_policy(path: str | Path, trust_code: bool = False, log: Callable = print) -> Policy:
    """The policy written by `export_policy`; its `act` is pure and jittable.

    trust_code: a policy whose env is an import path (`module:callable`) rebuilds that env by
    importing and calling it, running its code; only with trust_code=True.
    """
    path = Path(path).absolute()
    info = _read_policy_json(path)
    check_versions(info.get("versions"), path / POLICY_JSON, log)
    try:
        config = from_dict(info["config"])
    except ConfigError as exc:
        raise PolicyError(f"{path / POLICY_JSON}: its config does not load here ({exc})") from None
    try:
        env, trainer = _rebuild(config, trust_code, path / POLICY_JSON)
        shapes = acting_params(trainer, jax.eval_shape(trainer.init, jax.random.PRNGKey(0)).learner.params)
    except ConfigError as exc:  # e.g. env_kwargs the env does not take: the saved config names a field
        raise PolicyError(f"{path / POLICY_JSON}: its config does not load here ({exc})") from None
    expected_obs = _observation_layout(env)
    sharding = first_device_sharding()
    target = abstract_like(shapes, jax.tree.map(lambda _: sharding, shapes))
    params = _restore_params(path, target, info.get("params_fingerprint"), log)

    def init_carry() -> dict | None:
        if not config.recurrent:
            return None
        return trainer.initial_hidden(1)

    def act(obs: dict, key: Array, carry: dict | None = None, avail_actions: dict | None = None, greedy: bool = False):
        """obs: the env's agent name -> observation; returns (the actions as the env's `step` takes them:
        agent name -> action, or a tuple in agent order for envs whose agents are 0..N-1, next carry)."""
        _check_key(key)
        _check_obs_layout(obs, expected_obs, env.agents, config.env, path)
        grouped = {k: v[None] for k, v in _grouped_obs(obs, env, config.env, path).items()}  # [1, A_g, ...]
        if avail_actions is not None:
            _check_agents("avail_actions", avail_actions, env.agents, config.env)
        mask = {k: v[None] for k, v in env.group_masks(avail_actions).items()} if avail_actions else {}
        _check_carry(carry, init_carry)
        hidden = carry if carry is not None else (init_carry() or {})
        reset = {g.name: jnp.zeros((1, g.size), bool) for g in env.groups}
        actions, hidden = trainer.act(params, grouped, reset, hidden, mask, key, greedy)
        return env.env_actions({k: v[0] for k, v in actions.items()}), (hidden if config.recurrent else None)

    return Policy(act, init_carry, config, params, env)


__all__ = ["Policy", "PolicyError", "export_policy", "load_policy", "restore_run"]
