"""Offline datasets: multi-agent experience in flashbax's Vault format, laid out as OG-MARL lays
out its datasets, described and checked when read.

OG-MARL (InstaDeep's offline MARL datasets and baselines) stores every dataset as a flashbax
Vault, so marljax reads and writes them with flashbax itself (`pip install "marljax[offline]"`):
OG-MARL's tools read marljax's datasets and marljax reads theirs.

    <name>.vlt/<uid>/              one dataset (uid: its quality label, Good | Medium | Poor, or any name)
        metadata.json              flashbax's: the structure (shape, dtype) of every field below
        manifest.ocdbt, d/...      the arrays (tensorstore zarr arrays in one OCDBT store)
        marljax.json               marljax's description: env, env_kwargs, agents, the policy and
                                   exploration that made it, its episode-return distribution and
                                   quality label, and the size and sha256 of every file above

The experience, every leaf [B, T, ...] (B: streams recorded side by side, T: steps along each;
N: agents, in the env's order):

    observations  [B, T, N, *obs] float32   what each agent saw before acting
    actions       [B, T, N] int32 (Discrete) | [B, T, N, D] float32 (Box, as executed: clipped)
    rewards       [B, T, N] float32
    terminals     [B, T, N] float32         1: the episode ended after this step, not by the time limit
    truncations   [B, T, N] float32         1: it hit the env's time limit after this step
    infos.legals  [B, T, N, A] float32      available actions (Discrete; all 1 where the env has no masks)
    infos.state   [B, T, S] float32         the env's global state, where it has one

The step after an ended one starts the stream's next episode; the observation that followed the
last step of an episode is not stored (OG-MARL's convention), so a learner bootstraps only across
steps that did not end one.

`read_dataset(path)` checks before it loads: every file `marljax.json` lists has its size and
sha256 (a truncated file, a flipped byte, a missing file is refused in one line naming the file),
then the structure (every field there, the same [B, T] everywhere). A Vault marljax did not write
(no `marljax.json`: OG-MARL's, or one made with flashbax's own API) has no digests to check; its
structure is checked all the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from marljax.files import DamagedFile, read_json, write_text_atomic

DESCRIPTION = "marljax.json"  # marljax's description of a dataset, inside its directory
FORMAT = "marljax dataset 1"
FIELDS = ("observations", "actions", "rewards", "terminals", "truncations")  # every dataset has these
QUANTILES = (5, 25, 50, 75, 95)
INSTALL = 'pip install "marljax[offline]" (flashbax, which reads and writes the Vault format)'


class DatasetError(ValueError):
    """A dataset that cannot be read or written as asked; the message names the file and why."""


class Dataset(NamedTuple):
    path: Path  # the dataset's directory (<name>.vlt/<uid>)
    experience: dict  # the fields above, numpy arrays [B, T, ...] (infos: a dict of them)
    description: dict  # marljax.json's contents; {} for a Vault marljax did not write


def _flashbax():
    """flashbax's Vault and buffer state; DatasetError naming the extra when it is not installed."""
    try:
        from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
        from flashbax.vault import Vault
    except ImportError:
        raise DatasetError(f"offline datasets need flashbax: {INSTALL}") from None
    return Vault, TrajectoryBufferState


@contextlib.contextmanager
def _quiet():
    """flashbax's Vault prints a line for every vault it opens or creates: kept off stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _open_vault(directory: Path, structure: Any = None, metadata: dict | None = None):
    Vault, _ = _flashbax()
    with _quiet():  # Vault(rel_dir, vault_name, uid) opens <rel_dir>/<vault_name>/<uid>
        return Vault(
            directory.parent.name,
            structure,
            rel_dir=str(directory.parent.parent),
            vault_uid=directory.name,
            metadata=metadata,
        )


# ------------------------------------------------------------------------------------ where
def dataset_dir(path: str | Path) -> Path:
    """The directory of one dataset: `path` itself when it holds a Vault's metadata.json, or the one
    dataset inside a `<name>.vlt` directory that holds exactly one. DatasetError otherwise."""
    path = Path(path).absolute()
    if (path / "metadata.json").is_file():
        return path
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset (marljax record writes one)")
    if not path.is_dir():
        raise DatasetError(f"{path} is a file, not a dataset directory")
    inside = sorted(p.name for p in path.iterdir() if (p / "metadata.json").is_file())
    if len(inside) == 1:
        return path / inside[0]
    if inside:
        raise DatasetError(f"{path} holds {len(inside)} datasets ({', '.join(inside)}); name one: {path / inside[0]}")
    raise DatasetError(f"{path} holds no dataset (no Vault's metadata.json in it or in a directory under it)")


def read_description(path: str | Path) -> dict:
    """marljax.json of the dataset at `path` ({} for a Vault marljax did not write); cheap: no
    array is read, nothing is checked but the description itself."""
    directory = dataset_dir(path)
    file = directory / DESCRIPTION
    if not file.exists():
        return {}
    try:
        described = read_json(file, "record the dataset again")
    except DamagedFile as exc:
        raise DatasetError(str(exc)) from None
    if (
        not isinstance(described, dict)
        or described.get("format") != FORMAT
        or not isinstance(described.get("files"), dict)
    ):
        raise DatasetError(
            f"{file} is not a description marljax wrote (no '{FORMAT}' format and file list); record the dataset again"
        )
    return described


# ------------------------------------------------------------------------------------ digests
def _files(directory: Path) -> list[Path]:
    """Every file of a dataset but its description, sorted: what the digests cover."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != DESCRIPTION)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digests(directory: Path) -> dict[str, dict]:
    """relative path -> {bytes, sha256} of every file of the dataset in `directory`."""
    return {str(p.relative_to(directory)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in _files(directory)}


def verify(directory: Path, description: dict) -> None:
    """Every file the description lists is there with its size and bytes, and no other data file
    joined them; DatasetError naming the first file that is not."""
    listed = description["files"]
    for name, entry in listed.items():
        file = directory / name
        if not file.is_file():
            raise DatasetError(f"{file} is missing: the dataset in {directory} is incomplete; record it again")
        size = file.stat().st_size
        if size != entry.get("bytes"):
            raise DatasetError(
                f"{file} is {size} bytes, {entry.get('bytes')} when written (truncated or "
                "overwritten); the dataset is damaged: record it again"
            )
        if _sha256(file) != entry.get("sha256"):
            raise DatasetError(
                f"{file}: its bytes changed since it was written (sha256 differs); the dataset is "
                "damaged: record it again"
            )
    unlisted = [str(p.relative_to(directory)) for p in _files(directory) if str(p.relative_to(directory)) not in listed]
    if unlisted:
        raise DatasetError(
            f"{directory / unlisted[0]} was not part of the dataset when it was written (added "
            f"since: {len(unlisted)} file(s)); the dataset was changed: record it again"
        )


# ------------------------------------------------------------------------------------ reading
def _structure_problem(metadata: dict) -> str | None:
    """What is wrong with a Vault's structure (its metadata.json), or None."""
    shapes = metadata.get("structure_shape")
    if not isinstance(shapes, dict):
        return "has no structure_shape (not a flashbax Vault's metadata)"
    missing = [f for f in FIELDS if f not in shapes]
    if missing:
        return f"has no field {missing[0]} (its fields: {', '.join(sorted(shapes))}); OG-MARL's layout needs {', '.join(FIELDS)}"
    return None


def read_dataset(path: str | Path) -> Dataset:
    """The dataset at `path`, checked (module docstring) and read whole into host memory.
    DatasetError, one line naming the file, for anything damaged, truncated or missing."""
    directory = dataset_dir(path)
    description = read_description(directory)
    if description:
        verify(directory, description)
    try:
        metadata = read_json(directory / "metadata.json", "the dataset is damaged: record it again")
    except DamagedFile as exc:
        raise DatasetError(str(exc)) from None
    if (problem := _structure_problem(metadata)) is not None:
        raise DatasetError(f"{directory / 'metadata.json'} {problem}")
    try:
        experience = _open_vault(directory).read().experience
        experience = _to_numpy(experience)
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - tensorstore's and flashbax's errors on damaged stores
        text = str(exc).strip().splitlines()
        raise DatasetError(
            f"{directory}: the Vault does not read back ({type(exc).__name__}: "
            f"{text[0][:300] if text else ''}); the dataset is damaged"
        ) from None
    check_experience(experience, directory)
    return Dataset(directory, experience, description)


def _to_numpy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _to_numpy(v) for k, v in tree.items()}
    return np.asarray(tree)


def check_experience(experience: dict, where: Path) -> None:
    """Every field there, each [B, T, ...] with the same B and T, agents [N] where they have them."""
    for name in FIELDS:
        if name not in experience:
            raise DatasetError(f"{where / 'metadata.json'}: the dataset has no field {name}")
    lead = experience["rewards"].shape[:2]
    agents = experience["rewards"].shape[2:3]
    leaves = [(n, experience[n]) for n in FIELDS] + [(f"infos.{k}", v) for k, v in experience.get("infos", {}).items()]
    for name, leaf in leaves:
        if leaf.shape[:2] != lead:
            raise DatasetError(
                f"{where}: {name} is {leaf.shape}, the rewards {experience['rewards'].shape}: "
                "every field holds the same [streams, steps]; the dataset is damaged"
            )
        if name != "infos.state" and leaf.shape[2:3] != agents:
            raise DatasetError(f"{where}: {name} is {leaf.shape}: its agent axis is not the rewards' {agents}")
    if lead[1] == 0:
        raise DatasetError(f"{where}: the dataset holds no steps")


# ------------------------------------------------------------------------------------ describing
def episode_returns(experience: dict) -> np.ndarray:
    """Per-agent returns [episodes] of every complete episode (the team's summed reward over the
    episode divided by the agents, marljax's `return_mean` unit); an episode still running at the
    end of its stream is left out."""
    rewards = np.asarray(experience["rewards"], np.float64).mean(axis=2)  # [B, T]
    ended = np.logical_or(experience["terminals"] > 0, experience["truncations"] > 0).any(axis=2)  # [B, T]
    out = []
    for b in range(rewards.shape[0]):
        ends = np.flatnonzero(ended[b])
        if ends.size == 0:
            continue
        sums = np.cumsum(rewards[b])[ends]
        out.append(np.diff(np.concatenate([[0.0], sums])))
    return np.concatenate(out) if out else np.zeros(0)


def return_distribution(returns: np.ndarray) -> dict:
    """OG-MARL's description of a dataset's quality: the episode-return distribution (per agent)."""
    if returns.size == 0:
        return {"episodes": 0, "unit": "per agent"}
    return {
        "episodes": int(returns.size),
        "unit": "per agent",
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "min": float(returns.min()),
        "max": float(returns.max()),
        "quantiles": {str(q): float(np.percentile(returns, q)) for q in QUANTILES},
    }


# ------------------------------------------------------------------------------------ writing
def check_stackable(env: Any) -> None:
    """OG-MARL's layout stacks every agent's arrays on one axis: the agents of `env` (an EnvAdapter)
    must share their spaces; DatasetError naming them otherwise."""
    kinds = {(tuple(g.obs_shape), g.discrete, g.action_dim) for g in env.groups}
    if len(kinds) > 1:
        spaces = "; ".join(
            f"{g.name}: obs {tuple(g.obs_shape)}, {'Discrete' if g.discrete else 'Box'}({g.action_dim})"
            for g in env.groups
        )
        raise DatasetError(
            f"env {env.name}: its agents differ ({spaces}); a dataset in OG-MARL's layout stacks every "
            "agent's observations and actions on one axis, so every agent needs the same spaces"
        )


class DatasetWriter:
    """Writes one dataset: `append` chunks of experience (leaves [B, t, ...]), then `finish`. The
    Vault is written under a hidden name beside its final one and renamed when complete, so a
    failed or interrupted recording leaves no dataset that looks whole (`abort` removes it)."""

    def __init__(self, vault: str | Path, uid: str, example: dict, metadata: dict | None = None):
        """vault: the `<name>.vlt` directory; uid: the dataset's name in it (its quality label);
        example: one chunk (or any arrays [B, t, ...] with the fields' shapes and dtypes)."""
        if not uid or "/" in uid or uid.startswith("."):
            raise DatasetError(f"quality: {uid!r} cannot name a dataset directory (a label like Medium)")
        self.vault = Path(vault).absolute()
        self.final = self.vault / uid
        if self.final.exists():
            raise DatasetError(f"{self.final} already exists; choose another path or quality label")
        if self.vault.exists() and not self.vault.is_dir():
            raise DatasetError(f"{self.vault} is a file, not a directory")
        self.partial = self.vault / f".{uid}.partial-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
        _, self._State = _flashbax()
        self.vault.mkdir(parents=True, exist_ok=True)
        self._vault = _open_vault(self.partial, example, metadata)
        self.steps = 0

    def append(self, chunk: dict) -> None:
        """Write chunk's steps (leaves [B, t, ...], numpy) after those already written."""
        t = int(chunk["rewards"].shape[1])
        state = self._State(experience=chunk, current_index=np.int32(t), is_full=np.bool_(False))
        written = self._vault.write(state, source_interval=(0, t))
        if written != t:
            raise DatasetError(f"{self.partial}: flashbax wrote {written} of {t} steps")
        self.steps += t

    def finish(self, description: dict) -> Path:
        """The digests of every file into marljax.json (beside the Vault), then the rename to the
        final name. -> the dataset's directory."""
        description = {"format": FORMAT, **description, "steps": self.steps, "files": digests(self.partial)}
        write_text_atomic(self.partial / DESCRIPTION, json.dumps(description, indent=1))
        if self.final.exists():  # made by someone else meanwhile: keep theirs
            raise DatasetError(f"{self.final} appeared while recording; this recording is kept in {self.partial}")
        os.rename(self.partial, self.final)
        return self.final

    def abort(self) -> None:
        shutil.rmtree(self.partial, ignore_errors=True)


__all__ = [
    "DESCRIPTION",
    "FIELDS",
    "Dataset",
    "DatasetError",
    "DatasetWriter",
    "check_stackable",
    "dataset_dir",
    "digests",
    "episode_returns",
    "read_dataset",
    "read_description",
    "return_distribution",
    "verify",
]
