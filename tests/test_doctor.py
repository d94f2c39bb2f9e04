"""`marljax doctor`: reports the install and what JAX sees; --expect gpu|tpu fails on a CPU-only jax."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from marljax.doctor import check

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
    assert report["versions"]["jax"].startswith("0.10.") and report["versions"]["jaxmarl"] == "0.2.0"
    assert report["process_count"] == 1 and report["ok"] is True
    assert "accelerator build" in proc.stdout and "backend            cpu" in proc.stdout


def test_expecting_a_gpu_on_a_cpu_only_jax_fails_with_the_fix():
    proc = _doctor("--expect", "gpu")
    assert proc.returncode == 1
    assert "expected a GPU, but JAX sees only cpu" in proc.stderr and "marljax[cuda12]" in proc.stderr
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
