"""Shared test set-up. JAX sees 1 CPU device in-process; multi-device tests run in subprocesses
with XLA_FLAGS set before JAX is imported (see tests/_subprocess.py)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
