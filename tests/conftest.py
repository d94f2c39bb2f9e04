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
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="marljax-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # cache every program, however quick
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def pytest_collection_modifyitems(config, items) -> None:
    """Slow tests first: the xdist workers' queues then end on quick tests, and neither waits
    long for the other's last test. The order changes nothing a test checks."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


@pytest.hookimpl(optionalhook=True)  # an xdist hook: harmless where xdist is not installed
def pytest_xdist_make_scheduler(config, log):
    """`pytest -n N` (xdist's default `--dist load`): tests are handed out one by one as workers
    free up, except that the tests of a module with a module-scoped fixture (a training run, a
    sweep, a wheel install) all go to one worker, so that fixture runs once, not on every worker.
    (xdist's own `--dist loadgroup` would do this from markers, but with pytest 9 it no longer
    groups: it renames `item._nodeid`, which pytest 9's node ids do not read.)"""
    if config.getvalue("dist") != "load":
        return None  # the user chose another mode: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    here = Path(__file__).parent
    shared = {f"{here.name}/{p.name}" for p in here.glob("test_*.py") if 'scope="module"' in p.read_text()}

    class OneWorkerPerSharedFixture(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in shared else nodeid

    return OneWorkerPerSharedFixture(config, log)
