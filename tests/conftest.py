"""Shared test set-up. JAX sees 1 CPU device in-process; multi-device tests run in subprocesses
with XLA_FLAGS set before JAX is imported (see tests/_subprocess.py).

One persistent compilation cache serves the whole session: the pytest process creates it and
the xdist workers and test subprocesses inherit its path through the environment, so a program
that several tests (or the runs inside one test) compile is compiled once. It changes no
result: the cache hands back the executable XLA built for the same program. The directory is
removed when the session ends; set JAX_COMPILATION_CACHE_DIR yourself to keep one.

Most tests are all compile (a few updates of a few envs), so they compile with XLA's backend
optimisations off (JAX_DISABLE_MOST_OPTIMIZATIONS=1: LLVM's passes, which only make the generated
machine code faster; the HLO program, its sharding and its collectives are the ones a user's run
compiles). Tests marked `optimized` compile as a user's run does: those that train long enough
for run time to matter (the learning tests; the notebooks run in a kernel of their own), and those
that compare two programs (1 vs N devices, processes or rows) within a float drift measured on
optimised compiles, since the drift is the generated code's (PQN-VDN on 1 vs 2 data devices:
1.2e-7 optimised, 1e-5 unoptimised, an epsilon-greedy action flipped). The other comparisons of
two programs compile unoptimised, each with its drift measured so beside its tolerance
(MARLJAX_TEST_DRIFT=1 python -m pytest -s ... prints every comparison's drift and the share of
the tolerance it uses); those left optimised used 0.3 or more of it unoptimised
(test_multidevice 0.47 and 0.60, the replayed agent axis 0.30) or have a history across CPUs (a
sweep's vmapped row). Bitwise comparisons of one program with itself hold either way. Measured
side by side on 2 cores: the GRU data8 multidevice test 118 -> 92 s unoptimised, MAPPO's three
actor kinds 70 -> 56 s; IPPO at 1M steps 107 -> 159 s. JAX_DISABLE_MOST_OPTIMIZATIONS=0 compiles every test as a user's run does.

Where JAX_PLATFORMS is set to anything but "cpu" (an accelerator), float32 matmuls run at full
float32 precision rather than JAX's TF32 default there (below)."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import _nightly

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if os.environ["JAX_PLATFORMS"] != "cpu":
    # on an accelerator (the GPU protocol's tests step) float32 matmuls run as full float32, in this
    # process and the runs it starts: JAX's default there is TF32 (10-bit mantissas), and the tests'
    # tolerances are float32's (acting's Q-values and log-probs against learning's, 1e-5; an
    # orthogonal init's W^T W, 1e-4). What a user's run computes on the card (TF32) is what the
    # protocol's bench and train steps measure. A CPU computes float32 either way.
    os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="marljax-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # cache every program, however quick
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# read by JAX in this process and in every test subprocess (the persistent cache keys on it)
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
import jax  # noqa: E402  (after the settings above, which it reads once on import)

_SESSION_UNOPTIMISED: bool = jax.config.values["jax_disable_most_optimizations"]  # as JAX parsed the variable


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Before any of the test's fixtures (a module-scoped one included, which the first test of its
    module sets up): a test marked `optimized` compiles as a user's run does, in this process and
    in the processes it starts; any other test as the session's setting says."""
    unoptimised = _SESSION_UNOPTIMISED and item.get_closest_marker("optimized") is None
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1" if unoptimised else "0"
    jax.config.update("jax_disable_most_optimizations", unoptimised)


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--nightly-slice",
        metavar="K/N",
        help="run slice K of N of the nightly tests, in place of -m (CI's rotation: tests/_nightly.py, docs/nightly.md; "
        "`python -m tests._nightly rotation` prints the commit's K/N)",
    )


def pytest_configure(config) -> None:
    if spec := config.getoption("nightly_slice"):
        try:
            _nightly.parse_slice(spec)
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
        config.option.markexpr = "nightly"  # the slice is the selection; -m 'not nightly' (addopts) would empty it
        _pin_worker_to_its_cores()


def _pin_worker_to_its_cores() -> None:
    """An xdist worker of a nightly slice keeps its share of the cores (worker i of n: every n-th from the i-th), it
    and the processes it starts, so a slice's long test is not slowed by the other worker's multi-process tests: the
    table's figures (one test per core) then hold. Unpinned, a Sable seed measured at 487 s so took 802 s in slice
    2/14 (docs/nightly.md). Before any test: XLA's threads, made at its first computation, inherit the set."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and count.isdigit() and hasattr(os, "sched_setaffinity")):
        return
    cpus, i, n = sorted(os.sched_getaffinity(0)), int(worker[2:]), int(count)
    if len(cpus) >= n:
        os.sched_setaffinity(0, cpus[i::n])


@pytest.hookimpl(tryfirst=True)  # before -m deselects the nightly tests: the slices are over all of them
def pytest_collection_modifyitems(config, items) -> None:
    """Note every nightly test (tests/test_nightly.py checks the durations table against them). With
    --nightly-slice K/N keep only slice K's tests, longest first but for the quick ones each worker
    holds behind its first (_nightly.xdist_order); otherwise slow tests first. Either
    way the xdist workers' queues end on quick tests, and neither waits long for the other's last
    test. Neither changes anything a test checks."""
    nightly = [item for item in items if item.get_closest_marker("nightly") is not None]
    tests_dir = Path(__file__).parent
    config.stash[_nightly.NIGHTLY_IDS] = [item.nodeid for item in nightly]
    config.stash[_nightly.WHOLE_SUITE] = all(
        Path(arg).resolve() in (tests_dir, tests_dir.parent) for arg in config.args
    )
    if not (spec := config.getoption("nightly_slice")):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable; -m and -k keep the order
        return
    k, n = _nightly.parse_slice(spec)
    table = _nightly.load_table()
    if missing := [item.nodeid for item in nightly if item.nodeid not in {**table.tests, **table.by_hand}]:
        raise pytest.UsageError(f"{_nightly.TABLE.name} has no duration for {missing}: measure each "
                                "(python -m pytest -m nightly --durations=0 NODEID) and add it")  # fmt: skip
    slice_of = _nightly.partition({t: e.seconds for t, e in table.tests.items()}, n)
    kept = sorted((i for i in nightly if slice_of.get(i.nodeid) == k), key=lambda i: -table.tests[i.nodeid].seconds)
    workers = config.getoption("numprocesses", None)
    kept = _nightly.xdist_order(kept, workers if isinstance(workers, int) and workers > 0 else _nightly.WORKERS)
    chosen = {item.nodeid for item in kept}
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in chosen])
    items[:] = kept


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

    shared = _nightly.shared_fixture_modules(Path(__file__).parent)

    class OneWorkerPerSharedFixture(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _nightly.scope_of(nodeid, shared)

    return OneWorkerPerSharedFixture(config, log)
