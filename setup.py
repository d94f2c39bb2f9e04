"""Build hook (pyproject.toml holds everything else): a wheel built from a git checkout records the
commit it was built from, so that a run of a non-editable install (`pip install .` from a clone)
still names its code (marljax.train.records.git_commit). Nothing is recorded outside a checkout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUILD_RECORD = "_build.json"  # marljax/_build.json in the wheel (marljax.train.records reads it)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


class BuildPyWithCommit(build_py):
    def run(self) -> None:
        super().run()
        head = _git("rev-parse", "HEAD")
        if head is None:
            return
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        record = {"git_commit": head + ("+dirty" if dirty else "")}
        target = Path(self.build_lib) / "marljax" / BUILD_RECORD
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record) + "\n")


setup(cmdclass={"build_py": BuildPyWithCommit})
