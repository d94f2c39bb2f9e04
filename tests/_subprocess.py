"""Run a snippet of Python in a fresh process that sees `n` fake CPU devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def run_with_devices(code: str, n_devices: int, timeout: int = 600) -> dict:
    """Execute `code` (which must print one JSON line last) with n fake devices; return it parsed."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n_devices}"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
