"""`marljax finetune`: an offline run's policy continues online (offline-to-online).

    marljax finetune OFFLINE_RUN_DIR out_dir=D [algo=ippo] [key=value ...]

The online run starts from the offline run's newest good checkpoint: in the same env, with the same
networks (`CARRIED_KEYS` are taken from it) and seeds (seed i continues the offline run's seed i);
every parameter the online algorithm has that the offline run has too (same group, same path in
the network, same shape) is copied, the rest (a critic the offline algorithm did not train, say)
starts from the online algorithm's own initialisation; the optimiser starts afresh. `bc` and `maicq`
runs hold IPPO's actor-critic, so `algo=ippo` (the default) takes all of it (mappo: the actor);
an `iql_cql` run's Q-networks are those of `algo=iql` (whose target network starts as the copy).

It then is an ordinary run: the copied state is saved as the online run's checkpoint of update 0 in
`out_dir`, and `marljax train` resumes from it (`resume=true`), with every part of a run (metrics,
evaluation, checkpoints, a later `resume=true` of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from marljax.config import Config, from_dict, replace
from marljax.files import check_writable_dir
from marljax.schema import ConfigError, merge, parse_overrides

# what the offline run decides for the online one: the env, the networks' shapes and the seeds
CARRIED_KEYS = (
    "env",
    "env_kwargs",
    "hidden_size",
    "num_layers",
    "network",
    "activation",
    "torso",
    "dtype",
    "agent_id",
    "param_sharing",
    "recurrent",
    "gru_hidden_size",
    "seed",
    "num_seeds",
)


def online_config(offline: Config, overrides: list[str]) -> Config:
    """The online run's config: algo=ippo and the offline run's `CARRIED_KEYS`, then `overrides`
    (which may change any of them; the parameters must still fit, `copy_params` checks)."""
    base = {"algo": "ippo", **{key: offline.value(key) for key in CARRIED_KEYS}}
    config = from_dict(merge(base, parse_overrides(overrides)))
    if not config.out_dir:
        raise ConfigError("out_dir", "finetune writes a new run: give out_dir=D")
    return config


def _leaves(tree: Any) -> dict[str, Any]:
    return {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def copy_params(offline: dict, online: dict, groups: list[str], where: str) -> tuple[dict, list[str]]:
    """`online`'s parameters (group -> tree, leaves [S, ...]) with every leaf that `offline` has at the
    same group and path, of the same shape, copied from it. -> (them, one line per group on what was
    copied and what kept its own initialisation). ConfigError when a shared leaf's shape differs, or
    when nothing at all is shared."""
    out, said, copied_any = dict(online), [], False
    for g in groups:
        if g not in offline:
            said.append(f"{g}: not in the offline run, initialised afresh")
            continue
        theirs, ours = _leaves(offline[g]), _leaves(online[g])
        for path in sorted(set(theirs) & set(ours)):
            if theirs[path].shape != ours[path].shape:
                raise ConfigError(
                    "algo",
                    f"the network of group {g} differs from the offline run's ({where}): "
                    f"{path} is {tuple(theirs[path].shape)} there, {tuple(ours[path].shape)} here; "
                    "keep its network settings (hidden_size, num_layers, network.*, param_sharing, "
                    "num_seeds)",
                )
        shared = set(theirs) & set(ours)
        copied_any |= bool(shared)
        flat, treedef = jax.tree_util.tree_flatten_with_path(online[g])
        leaves = [theirs[jax.tree_util.keystr(p)] if jax.tree_util.keystr(p) in shared else leaf for p, leaf in flat]
        out[g] = jax.tree_util.tree_unflatten(treedef, leaves)
        fresh = len(ours) - len(shared)
        said.append(
            f"{g}: {len(shared)} of {len(ours)} parameter arrays copied"
            + (f", {fresh} initialised afresh" if fresh else "")
            + (f"; {len(theirs) - len(shared)} of the offline run's left out" if len(theirs) > len(shared) else "")
        )
    if not copied_any:
        raise ConfigError(
            "algo",
            f"the offline run's networks ({where}) share no parameter with this algorithm's: a "
            "bc or maicq run continues with algo=ippo (or mappo), an iql_cql run with algo=iql",
        )
    return out, said


def finetune(
    run_dir: str | Path, overrides: list[str], log: Callable[[str], None] = print, max_chunks: int | None = None
):
    """Continue the offline run in `run_dir` online, as the module docstring says; -> the RunResult."""
    from marljax.parallel.mesh import seed_keys, shard_trainer
    from marljax.train.checkpoint import Checkpointer
    from marljax.train.loop import train
    from marljax.train.policy import acting_params, restore_run
    from marljax.train.wiring import make_adapter, make_trainer, prepare

    run_dir = Path(run_dir)
    state, meta, offline = restore_run(run_dir, log)
    if "offline" not in offline.sections:
        log(f"note: {run_dir} is an online run ({offline.algo}); its policy continues all the same")
    config = online_config(offline, overrides)
    out_dir = Path(config.out_dir)
    if (problem := check_writable_dir(out_dir)) is not None:
        raise ConfigError("out_dir", problem)
    if (out_dir / "checkpoints").exists() or (out_dir / "metrics.jsonl").exists():
        raise ConfigError(
            "out_dir", f"{out_dir} already holds a run; finetune starts a new one: choose another out_dir"
        )
    learner = state if offline.mode == "async" else state.learner
    theirs = acting_params(make_trainer(offline, make_adapter(offline)), learner.params)
    env, mesh, trainer = prepare(config)
    fns = shard_trainer(trainer, mesh)
    fresh = fns.init(seed_keys(config.seed, config.num_seeds))
    params, said = copy_params(
        jax.device_get(theirs), jax.device_get(fresh.learner.params), list(trainer.networks), str(run_dir)
    )
    extra = fresh.extra
    if extra is not None and hasattr(extra, "target"):  # a Q-learner's target network starts as the copy
        extra = extra.replace(target=params)
    start = fresh.replace(learner=fresh.learner.replace(params=params), extra=extra)
    start = jax.device_put(start, fns.shardings)
    log(f"{config.algo} continues {offline.algo}'s policy from {run_dir} (update {meta['update']}): " + "; ".join(said))
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpointer = Checkpointer(out_dir / "checkpoints", config.keep_checkpoints, log)
    try:
        origin = {"run": str(run_dir.absolute()), "algo": offline.algo, "update": int(meta["update"])}
        checkpointer.save(0, start, {"config": config.to_dict(), "env_steps": 0, "continues": origin})
        checkpointer.wait()
    finally:
        checkpointer.close()
    return train(replace(config, resume=True), log=log, max_chunks=max_chunks)


__all__ = ["CARRIED_KEYS", "copy_params", "finetune", "online_config"]
