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
        "--each-test-once",
        action="store_true",
        help="run each selected test function once, with its first selected parameter set (CI's leg 2: every "
        "check once on the newest jax; leg 1 runs every parameter set on the oldest)",
    )


@pytest.hookimpl(trylast=True)  # after -m and -k deselected theirs: "first" is the first parameter set left
def pytest_collection_modifyitems(config, items) -> None:
    """With --each-test-once, one item per test function. Then slow tests first: the xdist workers'
    queues end on quick tests, and neither waits long for the other's last test. Neither changes
    anything a test checks."""
    if config.getoption("each_test_once"):
        seen: set[str] = set()
        kept, dropped = [], []
        for item in items:
            function = item.nodeid.split("[", 1)[0]  # the node id without its parameter ids
            once = item.get_closest_marker("every_param") is None
            (dropped if once and function in seen else kept).append(item)
            seen.add(function)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
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
