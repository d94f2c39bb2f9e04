"""Shared test set-up. JAX sees 1 CPU device in-process; multi-device tests run in subprocesses
with XLA_FLAGS set before JAX is imported (see tests/_subprocess.py).

One persistent compilation cache serves the whole session: the pytest process creates it and
the xdist workers and test subprocesses inherit its path through the environment, so a program
that several tests (or the runs inside one test) compile is compiled once. It changes no
result: the cache hands back the executable XLA built for the same program. The directory is
removed when the session ends; set JAX_COMPILATION_CACHE_DIR yourself to keep one."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="marljax-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # cache every program, however quick
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
