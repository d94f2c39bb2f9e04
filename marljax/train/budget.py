"""A resumed run whose `total_timesteps` changed: what it keeps, and the one line that says so.

The rule (docs/guide/checkpoints.md): the learning rate goes on from the value it had reached at
the checkpoint, and what was left of its schedule is stretched (or shrunk) over the updates now
left (`lr_schedule_resumes`, `marljax.nn.ops.schedule_position`); the chunk length stays the
saved run's unless `num_chunks` is given anew, so that the chunk program compiled for it is read
back from the compile cache where nothing else changed (an annealed schedule's new end is a
constant of the program: that one compiles again, once).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from marljax.config import Config, replace
from marljax.train.checkpoint import Checkpointer, config_from_meta


def saved_run(ckpt_dir: Path, keep: int) -> tuple[int, dict] | None:
    """(update, saved config) of the newest checkpoint whose meta reads, or None (nothing there to
    resume; the resume itself then says why). Reads only: nothing is moved or written."""
    if not ckpt_dir.is_dir() or not any(p.name.isdigit() for p in ckpt_dir.iterdir()):
        return None
    checkpointer = Checkpointer(ckpt_dir, keep, lambda _line: None)  # its warnings come again, from the resume
    try:
        found = checkpointer.newest_meta()
    finally:
        checkpointer.close()
    return None if found is None else (int(found[1]["update"]), found[1]["config"])


def _per_chunk(num_updates: int, num_chunks: int) -> int:
    return max(1, math.ceil(num_updates / min(num_chunks, num_updates)))


def continue_budget(config: Config, saved: dict, update: int, log: Callable[[str], None]) -> Config:
    """`config` (resume=true, from a checkpoint at `update` whose config was `saved`) as it runs
    on: with the saved chunk length and the learning-rate schedule continued when the budget
    changed; one line says what changed. The same config when the budget did not."""
    steps_per_update = config.run_steps_per_update
    before = int(saved.get("total_timesteps", config.total_timesteps))
    planned = before // steps_per_update
    if before == config.total_timesteps or update >= config.num_updates:
        return config
    changes: dict = {}
    said = [
        f"resumed with total_timesteps {before:,} -> {config.total_timesteps:,} "
        f"({planned} -> {config.num_updates} updates, from update {update})"
    ]
    chunk = _per_chunk(planned, int(saved.get("num_chunks", config.num_chunks)))
    if saved.get("num_chunks", config.num_chunks) == config.num_chunks:
        chunks = math.ceil(config.num_updates / chunk)
        changes["num_chunks"] = chunks
        kept = _per_chunk(config.num_updates, chunks) == chunk
        said.append(
            f"chunks of {chunk} updates as before"
            if kept
            else f"chunks of {_per_chunk(config.num_updates, chunks)} updates ({chunk} cannot split the new budget)"
        )
    if config.anneal_lr or config.lr_warmup:  # a schedule that depends on the budget
        resumes = [list(map(int, pair)) for pair in saved.get("lr_schedule_resumes", [])] + [[update, planned]]
        changes["lr_schedule_resumes"] = resumes
    continued = replace(config, **changes) if changes else config
    if "lr_schedule_resumes" in changes:
        rate = _rate_at(config_from_meta({"config": saved}), update)
        said.append(
            f"the learning rate goes on from {rate:.3g} (what was left of its schedule now spans "
            f"updates {update} to {config.num_updates})"
        )
        if rate == 0.0:
            said.append(
                f"it had annealed to 0, so the {config.num_updates - update} added updates do not learn; "
                "for a longer run start one with the larger total_timesteps"
            )
    log("; ".join(said))
    return continued


def _rate_at(config: Config, update: int) -> float:
    """The learning rate `config`'s schedule gives at `update` (from its own lr)."""
    import jax.numpy as jnp

    from marljax.algos.learning import schedule

    return float(schedule(config)(jnp.float32(config.lr), jnp.int32(update)))


__all__ = ["continue_budget", "saved_run"]
