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


def pytest_collection_modifyitems(config, items) -> None:
    """Order and group the tests for `pytest -n 2 --dist loadgroup` (pyproject's addopts).

    - A test that uses a module-scoped fixture joins its module's xdist group, so the fixture (a
      training run, a sweep, a wheel install) runs on one worker, not once on each.
    - Slow tests go first: the workers' queues then end on quick tests, and neither waits long
      for the other's last test.
    Neither changes what a test checks; without xdist the groups are ignored."""
    import pytest

    for item in items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope == "module" for fixturedefs in defs.values() for d in fixturedefs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow ones first
