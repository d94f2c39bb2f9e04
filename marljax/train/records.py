"""What a run's files record about the code that produced them: the marljax version, the git commit
of the checkout it ran from, and the versions of the libraries that decide its numbers.

`config.yaml` starts with these as comment lines, so the file still loads as a config
(`marljax train out_dir/config.yaml` reruns the run) while a reader sees what produced it.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

from marljax.config import Config, device_defaults, family_defaults
from marljax.schema import algorithm_schema, dump_yaml
from marljax.train.checkpoint import versions

BUILD_RECORD = Path(__file__).resolve().parents[1] / "_build.json"  # written into a wheel by setup.py


@functools.cache
def git_commit() -> str:
    """The commit of the checkout marljax is imported from ('+dirty' with uncommitted changes); for
    a non-editable install (`pip install .` from a clone), the commit its wheel was built from, as
    setup.py recorded it then; else 'unknown' (a wheel built outside a checkout, no git)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return _built_from()
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return _built_from()
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _built_from(record: Path = BUILD_RECORD) -> str:
    """The commit setup.py recorded when it built this install's wheel, or 'unknown'."""
    try:
        return str(json.loads(record.read_text())["git_commit"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"


def run_record() -> dict[str, str]:
    """{'marljax': version, 'git_commit': ..., 'jax': ..., ...}"""
    found = versions()
    return {"marljax": found.pop("marljax"), "git_commit": git_commit(), **found}


def family_note(config: Config) -> str | None:
    """'defaults for env family mpe: lr=0.004, num_steps=64 (...)' where the algorithm declares
    defaults for the env's family and the run kept some of them, else None."""
    notes = []
    family, kept = family_defaults(config)
    if kept:
        settings = ", ".join(f"{key}={value}" for key, value in kept.items())
        notes.append(
            f"defaults for env family {family}: {settings} (algo={config.algo}'s for it; "
            "family_defaults=none leaves them out)"
        )
    device, chosen = device_defaults(config)
    if chosen:
        settings = ", ".join(f"{key}={value}" for key, value in chosen.items())
        notes.append(f"defaults for the {device}: {settings} (device_defaults=none leaves them out)")
    return "; ".join(notes) or None


def cpu_speed_note(config: Config, obs_shapes: list[tuple[int, ...]], platform: str) -> str | None:
    """One line where a run is built for an accelerator but runs on a CPU (a transformer over the
    agents, a CNN over image observations), with the command that measures it here; else None."""
    if platform != "cpu":
        return None
    why = []
    if note := algorithm_schema(config.algo).cpu_note:
        why.append(note)
    if config.torso == "cnn" or config.torso == "auto" and any(len(shape) == 3 for shape in obs_shapes):
        why.append("the observations are images, encoded by a CNN")
    if not why:
        return None
    return (
        f"on a CPU: {' and '.join(why)}, so expect several times fewer env-steps/s than IPPO's MLP on "
        f"MPE and a longer compile (`marljax bench algo={config.algo} env={config.env}` measures it here); "
        "a GPU is what this is built for"
    )


def config_yaml(config: Config) -> str:
    """The resolved config as YAML, after comment lines recording what produced it (and which
    env family's defaults it kept)."""
    record, note = run_record(), family_note(config)
    header = [
        f"# written by marljax {record['marljax']} (git {record['git_commit']})",
        "# with " + ", ".join(f"{k} {v}" for k, v in record.items() if k not in ("marljax", "git_commit")),
        *([f"# {note}"] if note else []),
        "# every setting as resolved; `marljax train <this file>` runs it again",
    ]
    return "\n".join(header) + "\n" + dump_yaml(config)


def read_record(path: str | Path) -> dict[str, str]:
    """The record in a config.yaml's header comments (for tools and tests)."""
    lines = Path(path).read_text().splitlines()
    out: dict[str, str] = {}
    for line in lines:
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if text.startswith("written by marljax "):
            version, _, rest = text.removeprefix("written by marljax ").partition(" (git ")
            out["marljax"], out["git_commit"] = version, rest.rstrip(")")
        elif text.startswith("defaults for env family "):
            out["family"], _, rest = text.removeprefix("defaults for env family ").partition(": ")
            out["family_defaults"] = rest.partition(" (")[0]
        elif text.startswith("with "):
            for part in text.removeprefix("with ").split(", "):
                name, _, version = part.partition(" ")
                out[name] = version
    return out


__all__ = ["git_commit", "run_record", "family_note", "config_yaml", "read_record"]
