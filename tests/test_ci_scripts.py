"""CI's own scripts (.ci/): Python 3.13 is taken as found, never built, and .ci/run parses."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python313(home: Path) -> subprocess.CompletedProcess:
    """The script with an empty PATH (no python3.13 there, and no apt-get or compiler either, so that a script
    that still tried to build could not touch the machine) and `home`/.pyenv as pyenv's root."""
    (home / "bin").mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(home / "bin"), "HOME": str(home), "PYENV_ROOT": str(home / ".pyenv")}
    return subprocess.run(["/bin/bash", str(ROOT / ".ci" / "python313.sh")], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_python313_without_one_says_so_in_one_line_and_builds_nothing(tmp_path):
    done = python313(tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "no working Python 3.13" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]  # nothing written: no cache, no sources


def _working_python313() -> str | None:
    for candidate in [shutil.which("python3.13"), *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"))]:
        if (
            candidate
            and subprocess.run([str(candidate), "-c", "import venv, ssl"], capture_output=True).returncode == 0
        ):
            return str(candidate)
    return None


def test_python313_takes_pyenvs_when_there_is_one(tmp_path):
    if (real := _working_python313()) is None:
        pytest.skip("no working Python 3.13 on this machine to point a fake pyenv at")
    found = tmp_path / ".pyenv" / "versions" / "3.13.9" / "bin"
    found.mkdir(parents=True)
    (found / "python3.13").symlink_to(Path(real).resolve())
    done = python313(tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == str(found / "python3.13"), done.stderr


def test_the_ci_script_parses():
    done = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
