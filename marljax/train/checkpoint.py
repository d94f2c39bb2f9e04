"""Full-state checkpoints with orbax: save, verify, restore onto any mesh, refuse unsafe resumes.

A checkpoint (`<out_dir>/checkpoints/<update>/`) holds the whole `TrainState`:
parameters, Adam moments, hyperparameters, PRNG keys, the update counter,
environment states, last observations, recurrent state and running episode
statistics. Beside it, as JSON: the resolved config, the library versions, the
update and env-step counters, and a fingerprint of every array.

* Saving is asynchronous: `save` returns once the arrays are copied off the
  devices, and orbax writes them while training goes on. orbax writes into a
  temporary directory and renames it when complete, so a save that fails or a
  process that is killed never touches the previous checkpoint.
* Restoring reads the arrays straight into the target shardings of the current
  mesh, so a checkpoint saved on 8 devices continues on 1, 2 or 4.
* The fingerprint (a wrapping sum of each array's bits) is checked after a
  restore: a checkpoint that restores without error but with altered bytes is
  still caught, and the previous one is used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from marljax.config import Config, from_dict
from marljax.parallel import distributed
from marljax.schema import ConfigError, core_keys, first_line, resumable_keys, to_flat
from marljax.train import library_log

# Fields a resumed run may change: when and how it runs, not what it trains. Everything else
# (env, algo, network, sharing, hyperparameters that live in the state, seeds, envs) is structural.
PACKAGES = ("marljax", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "jaxmarl")


DEBUG_LOG = "debug.log"  # beside checkpoints/: orbax's own log records and tracebacks (marljax.train.library_log)


class CheckpointError(RuntimeError):
    """Saving a checkpoint failed; the message names the update and the directory."""


def not_a_checkpoint_dir(directory: Path) -> str | None:
    """Why `directory` cannot hold checkpoints (it, or a parent, is a file), or None."""
    directory = Path(directory).absolute()
    for path in (directory, *directory.parents):
        if path.exists() and not path.is_dir():
            what = "it" if path == directory else f"{path} above it"
            return (
                f"{directory} cannot hold checkpoints: {what} is a file, not a directory; nothing was changed: "
                "move the file aside, or start over with overwrite=true"
            )
        if path.is_dir():
            return None
    return None


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out


def _leaf_bits(x: jax.Array) -> jax.Array:
    """A wrapping uint32 sum of one array's bits (its bytes' fingerprint; sharding-independent)."""
    if x.dtype == jnp.bool_:
        return jnp.sum(x.astype(jnp.uint32), dtype=jnp.uint32)
    width = jnp.dtype(f"uint{8 * x.dtype.itemsize}")
    bits = jax.lax.bitcast_convert_type(x, width)
    # mix in the position so that swapped elements are caught too
    position = jnp.arange(x.size, dtype=jnp.uint32).reshape(x.shape)
    return jnp.sum(bits.astype(jnp.uint32) * (position * 2 + 1), dtype=jnp.uint32)


_fingerprint = jax.jit(lambda tree: [_leaf_bits(x) for x in jax.tree.leaves(tree)])


def fingerprint(tree) -> list[int]:
    """One uint32 per array of `tree` (computed on the devices, a few bytes come back)."""
    from marljax.parallel.distributed import host_values

    return [int(v) for v in host_values(_fingerprint(tree))]


def structural_changes(saved: dict, config: Config) -> list[str]:
    """Dotted keys of `config` that differ from the saved config and a resume may not change
    (the fields declared `resumable` may; see marljax.config). A field the saved config lacks (a
    setting added after it was written) counts as its default: a new setting's default keeps the
    old behaviour, so a run saved before it resumes unless the setting is changed."""
    try:
        defaults = to_flat(from_dict(saved).to_dict())
    except ConfigError:  # unreadable: compared as saved (check_resumable names stale keys first)
        defaults = {}
    before, now = {**defaults, **to_flat(saved)}, to_flat(config.to_dict())
    resumable = resumable_keys(config)
    return sorted(
        f"{k}: {before.get(k)!r} -> {now.get(k)!r}"
        for k in set(before) | set(now)
        if k not in resumable and before.get(k) != now.get(k)
    )


# A TEST HOOK, not a setting: "SECONDS" or "SECONDS@UPDATE" holds every save (or only the save of
# checkpoint UPDATE) for SECONDS once orbax has written all of it into its temporary directory and
# before it renames that to `<update>/`, so that a test can SIGKILL a process while a save is in
# flight (tests/test_sigkill.py). It prints one line when the hold begins.
TEST_SAVE_DELAY = "MARLJAX_TEST_SAVE_DELAY_S"


class _SaveDelay:
    """The MARLJAX_TEST_SAVE_DELAY_S hook: orbax's post-finalization callback, which its background
    thread calls after the item handlers have finalized the temporary directory and before the
    rename that makes the checkpoint visible."""

    def __init__(self, spec: str, log: Callable[[str], None]):
        seconds, _, update = spec.partition("@")
        try:
            self.seconds, self.only = float(seconds), int(update) if update else None
        except ValueError:
            raise ConfigError(TEST_SAVE_DELAY, f"must be SECONDS or SECONDS@UPDATE, got {spec!r}") from None
        self.log = log
        self.update: int | None = None  # the save in flight (set by Checkpointer.save)

    def __call__(self) -> None:
        if self.only is None or self.update == self.only:
            self.log(
                f"test hook {TEST_SAVE_DELAY}: the save of update {self.update} is written but not renamed; "
                f"holding it {self.seconds:g}s"
            )
            time.sleep(self.seconds)


class Checkpointer:
    """An orbax `CheckpointManager` over `<out_dir>/checkpoints`, with marljax's checks."""

    def __init__(self, directory: Path, keep: int, log: Callable[[str], None] = print):
        self.directory = Path(directory).absolute()
        self.log = log
        problem = not_a_checkpoint_dir(self.directory)
        if problem:
            raise CheckpointError(problem)
        library_log.divert(self.directory.parent / DEBUG_LOG)  # orbax's own tracebacks: not on stderr
        spec = os.environ.get(TEST_SAVE_DELAY)
        self._delay = _SaveDelay(spec, log) if spec else None
        hold = ocp.AsyncOptions(post_finalization_callback=self._delay) if self._delay else None
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=True, create=True, async_options=hold
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)
        self._failed = False  # a save failure was raised (as CheckpointError) by save or wait
        self._in_flight: int | None = None  # the update of the last save started (it may still be writing)

    def steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def _foreign(self) -> dict[int, str]:
        """Entries named like a checkpoint that no save wrote: a symbolic link (orbax would read
        through it another checkpoint's bytes, or skip a dangling one and then fail to save that
        update) or a file. {step: what it is}; each is unusable, whatever it points at."""
        found = {}
        for path in self.directory.iterdir() if self.directory.is_dir() else ():
            if path.name.isdigit() and (path.is_symlink() or not path.is_dir()):
                what = f"a symbolic link to {os.readlink(path)}" if path.is_symlink() else "a file"
                found[int(path.name)] = f"it is {what}, not a checkpoint directory a save wrote"
        return found

    def save(self, update: int, state: Any, meta: dict) -> None:
        """Start saving `state` as checkpoint `update`; raises CheckpointError on failure.

        A failure of an earlier asynchronous save surfaces here or in `wait`.
        """
        meta = {**meta, "update": int(update), "fingerprint": fingerprint(state), "versions": versions()}
        meta = json.loads(json.dumps(meta, default=_plain))  # plain JSON types, as it reads back
        meta["meta_sha256"] = meta_digest(meta)
        self.wait()  # orbax would wait for the previous save anyway; a failure of it names its own update
        self._in_flight = int(update)
        if self._delay is not None:  # the test hook holds the save in flight, whose update is this one
            self._delay.update = int(update)
        try:
            self._manager.save(
                update, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
            )
        except Exception as exc:  # noqa: BLE001 - any I/O failure stops the run with this message
            self._failed = True
            raise self._error(update, exc) from exc

    def wait(self) -> None:
        """Block until every started save is on disk."""
        try:
            self._manager.wait_until_finished()
        except Exception as exc:  # noqa: BLE001
            self._failed = True
            raise self._error(self._in_flight, exc) from exc

    def _error(self, update: int | None, exc: Exception) -> CheckpointError:
        good = [s for s in self.steps() if s != update]
        kept = f"the checkpoint of update {good[-1]} is intact" if good else "no earlier checkpoint exists"
        return CheckpointError(
            f"saving the checkpoint of update {update} in {self.directory} failed "
            f"({type(exc).__name__}: {first_line(exc)}); {kept}"
        )

    def read_meta(self, step: int) -> dict:
        """The checkpoint's meta; ValueError when it does not match the digest saved with it."""
        meta = dict(self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"])
        check_meta(meta)
        return meta

    def newest_meta(self) -> tuple[int, dict] | None:
        """(step, meta) of the newest checkpoint whose meta reads back and holds a config; an
        unreadable one (an empty directory, a deleted or garbled meta) is skipped with a warning.
        None when none reads."""

        def read(step: int) -> dict:
            meta = self.read_meta(step)
            if not isinstance(meta.get("config"), dict):
                raise ValueError("its meta holds no config")
            return meta

        return self._newest_usable(read)

    def _newest_usable(self, read: Callable[[int], Any]) -> tuple[int, Any] | None:
        """(step, read(step)) for the newest step that `read` does not raise on; every one it
        raises on is skipped with a warning. None when none is usable."""
        foreign = self._foreign()
        for step in sorted(set(self.steps()) | set(foreign), reverse=True):
            try:
                if step in foreign:  # judged by its own entry, not by what a link leads to
                    raise ValueError(foreign[step])
                found = read(step)
                update = (found[1] if isinstance(found, tuple) else found).get("update")
                if update != step:  # a copy of another checkpoint's files
                    raise ValueError(f"its meta is of update {update}, not {step}: a copy of another checkpoint")
                return step, found
            except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint: fall back
                self._unusable(step, exc)
        return None

    def set_aside_newer(self, step: int) -> list[Path]:
        """Move every checkpoint newer than `step` (the unusable ones a resume skipped) into
        `<out_dir>/checkpoints_unusable/`, so that the resumed run saves those updates afresh
        (orbax will not save a step at or below its newest one). Nothing is deleted."""
        newer = [s for s in sorted(set(self.steps()) | set(self._foreign())) if s > step]
        moved = []
        if newer and distributed.is_primary():
            aside = self.directory.parent / "checkpoints_unusable"
            aside.mkdir(exist_ok=True)
            for s in newer:
                target = aside / f"{s}-{time.strftime('%Y%m%d-%H%M%S')}"
                shutil.move(str(self.directory / str(s)), str(target))
                moved.append(target)
                self.log(f"moved the unusable checkpoint {self.directory / str(s)} aside to {target}")
        distributed.barrier("marljax_set_aside")
        self._manager.reload()
        return moved

    def _unusable(self, step: int, exc: Exception) -> None:
        self.log(
            f"warning: checkpoint {self.directory / str(step)} is unusable "
            f"({type(exc).__name__}: {first_line(exc)}); trying the one before it"
        )

    def restore_latest(self, target: Any) -> tuple[Any, dict] | None:
        """The newest checkpoint that reads back intact, restored into `target`'s shapes and shardings.

        target: a pytree of `jax.ShapeDtypeStruct` with `sharding` set. A checkpoint that fails to
        read, or whose arrays don't match their saved fingerprint, is skipped with a warning.
        Returns (state, meta), or None when there is no usable checkpoint.
        """

        def read(step: int) -> tuple[Any, dict]:
            args = ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
            restored = self._manager.restore(step, args=args)
            state, meta = restored["state"], dict(restored["meta"])
            check_meta(meta)
            if fingerprint(state) != meta["fingerprint"]:
                raise ValueError("its arrays don't match the fingerprint saved with them")
            return state, meta

        found = self._newest_usable(read)
        return None if found is None else found[1]

    def close(self) -> None:
        """Release the manager. orbax raises a failed asynchronous save again here; once save or
        wait has raised it as CheckpointError it is not raised a second time, so that the raw
        OSError cannot replace that CheckpointError in the caller's `finally`. After a failed save,
        orbax's threads still waiting for it are released (else the process cannot exit)."""
        try:
            self._manager.close()
        except Exception:  # noqa: BLE001
            if not self._failed:
                raise
        finally:
            if self._failed:
                library_log.release_waiting_threads()


def _plain(x: Any) -> Any:
    """numpy / JAX scalars and arrays as JSON values."""
    return x.tolist() if hasattr(x, "tolist") else str(x)


def meta_digest(meta: dict) -> str:
    """sha256 of the meta's canonical JSON, the digest itself left out."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=_plain).encode()).hexdigest()


def check_meta(meta: dict) -> None:
    """ValueError when the meta (config, update, versions, ...) changed after it was saved. A
    checkpoint saved before digests were written has none and passes; this detects damage and
    careless edits, not a forger who recomputes the digest (saved files are never trusted to
    name code to run: see `marljax.train.policy`)."""
    if "meta_sha256" in meta and meta["meta_sha256"] != meta_digest(meta):
        raise ValueError("its meta does not match the digest saved with it (edited or damaged)")


def check_resumable(saved_config: dict, config: Config, where: Path) -> None:
    """ConfigError listing the structural fields that differ from the run being resumed."""
    if saved_config.get("algo", config.algo) != config.algo:  # before the sections: another algorithm's read as stale
        raise ConfigError(
            "algo",
            f"the run in {where} was trained with algo={saved_config['algo']}, this config has algo={config.algo}; "
            f"resume it with algo={saved_config['algo']}, or start the {config.algo} run in another out_dir",
        )
    stale = sorted(k for k in saved_config if k not in core_keys() and k not in config.sections)
    if stale:
        raise ConfigError(
            "resume",
            f"the run in {where} was saved by an older marljax whose config this version does not read "
            f"(keys {', '.join(stale[:6])}{', ...' if len(stale) > 6 else ''}); start a new run in another out_dir",
        )
    changes = structural_changes(saved_config, config)
    if changes:
        raise ConfigError(
            "resume",
            f"the run in {where} was trained with a different setup; these fields may not change on "
            f"resume: {'; '.join(changes)}. Only {', '.join(sorted(resumable_keys(config) - {'resume'}))} may",
        )


def abstract_like(shapes: Any, shardings: Any) -> Any:
    """ShapeDtypeStructs carrying target shardings (what orbax restores into) and weak types."""
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh, weak_type=getattr(s, "weak_type", False)),
        shapes,
        shardings,
    )


def with_weak_types(tree: Any, target: Any) -> Any:
    """`tree` (restored: orbax gives every array a strong type) with the weak types of `target`'s
    leaves again (an env's step counter made from a Python int is weakly typed in a fresh state).
    Otherwise a resumed run traces another program than a fresh run of the same config, compiles
    it again and cannot read it back from the compile cache."""
    from jax._src.lax import lax as lax_internal  # the one public-free way to set an array's weak type

    leaves, treedef = jax.tree.flatten(tree)
    weak = [getattr(t, "weak_type", False) for t in jax.tree.leaves(target)]
    if len(weak) != len(leaves) or not any(w and not x.weak_type for x, w in zip(leaves, weak)):
        return tree
    out = [
        lax_internal._convert_element_type(x, x.dtype, weak_type=True) if w and not x.weak_type else x
        for x, w in zip(leaves, weak)
    ]
    return jax.tree.unflatten(treedef, out)


def config_from_meta(meta: dict) -> Config:
    """The run's config as its checkpoint saved it; ConfigError when this version cannot read it."""
    try:
        return from_dict(meta["config"])
    except ConfigError as exc:
        raise ConfigError(
            exc.field,
            f"{str(exc)[len(exc.field) + 2 :]} (the checkpoint's config.yaml was written by another marljax version)",
        ) from None


__all__ = [
    "Checkpointer",
    "CheckpointError",
    "check_resumable",
    "structural_changes",
    "fingerprint",
    "versions",
    "abstract_like",
    "with_weak_types",
    "config_from_meta",
]
