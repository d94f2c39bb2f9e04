"""`marljax doctor`: reports the install and what JAX sees; --expect gpu|tpu fails on a CPU-only jax."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from marljax.doctor import TESTED_JAX, check, installed_builds, range_verdict

CPU_ONLY = {"devices": [{"platform": "cpu"}], "builds": []}


def _doctor(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "marljax.cli", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def test_doctor_prints_versions_devices_and_a_json_line():
    proc = _doctor()
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["backend"] == "cpu" and report["device_count"] == len(report["devices"]) >= 1
    jax_minor = ".".join(report["versions"]["jax"].split(".")[:2])
    assert jax_minor in TESTED_JAX and report["versions"]["jaxmarl"] == "0.2.0"
    assert (
        report["tested"].startswith(f"yes: jax {jax_minor} is tested on")
        and "\ntested range       yes: jax" in proc.stdout
    )
    assert report["process_count"] == 1 and report["ok"] is True
    assert "accelerator build" in proc.stdout and "backend            cpu" in proc.stdout


@pytest.mark.skipif(bool(installed_builds()), reason="a jax accelerator build is installed here: jax is not CPU-only")
def test_expecting_a_gpu_on_a_cpu_only_jax_fails_with_the_fix():
    """Where the CUDA plugin is installed (the GPU node), JAX_PLATFORMS=cpu hides the card but the
    build is there, and `check` says so instead (test_check_names_what_is_missing, its last case)."""
    proc = _doctor("--expect", "gpu")
    assert proc.returncode == 1
    assert "expected a GPU, but JAX sees only cpu" in proc.stderr
    assert "marljax[cuda13]" in proc.stderr and "marljax[cuda12]" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is False
    assert _doctor("--expect", "cpu").returncode == 0  # the same check passes when the expectation is met


def test_a_bad_argument_is_refused():
    proc = _doctor("--expect", "quantum")
    assert proc.returncode == 2 and "usage: marljax doctor [--expect cpu|gpu|tpu]" in proc.stderr


@pytest.mark.parametrize(
    "report, expect, words",
    [
        ({"devices": [{"platform": "gpu"}], "builds": ["cuda12"]}, "gpu", None),
        (CPU_ONLY, "cpu", None),
        (CPU_ONLY, "tpu", 'pip install "marljax[tpu]"'),
        ({"devices": [{"platform": "cpu"}], "builds": ["cuda12"]}, "gpu", "installed but JAX found no such device"),
    ],
)
def test_check_names_what_is_missing(report, expect, words):
    problem = check(report, expect)
    assert (problem is None) if words is None else (words in problem)


@pytest.mark.parametrize(
    "jax_version, python, verdict",
    [
        ("0.10.2", "3.11.7", "yes: jax 0.10 is tested on Python 3.11"),
        ("0.12.0.1", "3.13.0", "yes: jax 0.12 is tested on Python 3.13"),
        ("0.13.0", "3.13.0", "no: jax 0.13.0 outside the tested jax 0.10-0.12"),  # newer than any tested
        ("0.12.0", "3.14.1", "no: Python 3.14.1 outside the tested"),
        ("0.9.2", "3.10.4", "no: jax 0.9.2 and Python 3.10.4 outside"),
    ],
)
def test_tested_range_says_whether_this_jax_and_python_are_tested(jax_version, python, verdict):
    assert range_verdict(jax_version, python).startswith(verdict)


def test_the_tested_jax_table_ends_where_pyprojects_range_does():
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    jax = next(Requirement(r) for r in project["dependencies"] if Requirement(r).name == "jax")
    newest = max(TESTED_JAX, key=Version)
    nxt = f"0.{Version(newest).minor + 1}.0"
    assert f"{newest}.0" in jax.specifier and nxt not in jax.specifier, (jax.specifier, newest)
    assert f"{min(TESTED_JAX, key=Version)}.0" in jax.specifier
