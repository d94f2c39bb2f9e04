"""Multi-host on one machine: two local processes over loopback (gloo), 2 fake CPU devices each,
against one process with 4; a two-process checkpoint resumed in one process; a sweep across
processes; misconfigurations that must fail fast with a clear message instead of hanging."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from tests._multihost import device_env
from tests._multihost import free_port as _free_port
from tests._multihost import marljax as _marljax
from tests._multihost import one_process as _one_process
from tests._multihost import two_processes as _two_processes
from tests._multihost import whole_run as _whole_run
from tests._trees import SEEDS, assert_same_run

# the tolerances below are drifts measured on optimised compiles; the tests compile unoptimised
# (tests/conftest.py), where the drift measured less than a fifth of them (MARLJAX_TEST_DRIFT=1 prints it)
pytestmark = [pytest.mark.slow]

RUN = ["num_envs=8", "num_steps=16", "total_timesteps=2048", "num_seeds=2", "num_chunks=8", "checkpoint_every=4",
       "keep_checkpoints=5", "progress=false", "plot=false", "mesh.seed=1", "mesh.data=4"]  # fmt: skip


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mh") / "two"
    results = _two_processes(["train", *RUN, f"out_dir={out}", "log.backends=[tensorboard]"])
    for rc, text in results:
        assert rc == 0, text[-3000:]
    return out, results


def test_two_processes_match_one_process_with_the_same_devices(two_process_run, tmp_path):
    out, results = two_process_run
    (_, primary), (_, other) = results
    assert "mesh {'seed': 1, 'data': 4, 'agent': 1} on 4 cpu device(s)" in primary  # the mesh spans both
    assert "return per agent" in primary and "return per agent" not in other  # process 0 alone logs
    assert len(list((out / "tensorboard").iterdir())) == 1  # and alone opens trackers: one event file
    single = tmp_path / "one"
    _one_process(["train", *RUN, f"out_dir={single}"])
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir()) == [4, 8, 12, 16]  # written together
    # the same mesh on the same 4 devices, but the cross-process collectives (gloo) reduce in
    # another order than one process's: not bitwise (1 ulp apart in Adam's moments), equal to
    # float reduction order. After 16 updates the whole state (learner and environments, every seed)
    # and every metrics row: measured max |diff| 2.1e-7 (state), 5.7e-6 on returns and losses
    # ~30 (relative 2e-7); tolerance 1e-6 + 2e-6 |x|, 5-10x that. The seed control differs by 0.98.
    # Unoptimised: 2.4e-7 (state), 3.8e-6 on 28.6, 0.16 of the tolerance.
    two, one = _whole_run(out, 16), _whole_run(single, 16)
    assert_same_run(one, two, atol=1e-6, rtol=2e-6, controls=(SEEDS,))


def test_a_two_process_checkpoint_resumes_in_one_process(two_process_run, tmp_path):
    out, _ = two_process_run
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    import shutil

    shutil.copytree(out / "checkpoints" / "8", resumed / "checkpoints" / "8")
    rows = [line for line in (out / "metrics.jsonl").read_text().splitlines() if json.loads(line)["update"] <= 8]
    (resumed / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    text = _one_process(["train", *RUN, f"out_dir={resumed}", "resume=true"])
    assert "update 8 of 16" in text
    # updates 9-16 in one process on the same 4 devices against the two processes: equal to float
    # reduction order, as above (measured max |diff| 6e-8 in the state, 5.7e-6 in the metrics,
    # relative 2e-7); tolerance as above
    assert_same_run(_whole_run(out, 16), _whole_run(resumed, 16), atol=1e-6, rtol=2e-6, controls=(SEEDS,))


@pytest.mark.nightly  # 2-3 CPU-minutes; CI keeps two-process training and one-process sweeps equal to single runs
@pytest.mark.optimized  # its tolerance is a drift measured on optimised compiles
def test_a_sweep_across_two_processes_matches_one_process(tmp_path):
    from marljax.sweeps.results import load

    spec = {"base": {"num_envs": 8, "num_steps": 16, "total_timesteps": 1024, "eval_every": 4, "eval_episodes": 4,
                     "plot": False, "mesh": {"seed": 4, "data": 1}},
            "axes": {"lr": [1e-3, 3e-3]}, "seeds": 2}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(spec))
    results = _two_processes(["sweep", str(path), f"out_dir={tmp_path / 'two'}", "progress=false"])
    for rc, text in results:
        assert rc == 0, text[-3000:]
    assert "| cell |" in results[0][1] and "| cell |" not in results[1][1]
    _one_process(["sweep", str(path), f"out_dir={tmp_path / 'one'}", "progress=false"])
    a, b = load(tmp_path / "two"), load(tmp_path / "one")
    np.testing.assert_array_equal(a.eval_steps, b.eval_steps)
    np.testing.assert_allclose(a.evals, b.evals, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a.absolute, b.absolute, rtol=1e-4, atol=1e-4)


def test_an_unreachable_coordinator_fails_fast_with_its_address():
    port = _free_port()  # nobody listens there
    t = time.perf_counter()
    proc = _marljax(["train", "progress=false", "out_dir=unused", f"distributed.coordinator=127.0.0.1:{port}",
                     "distributed.num_processes=2", "distributed.process_id=1", "distributed.timeout_s=3"], 2)  # fmt: skip
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1 and time.perf_counter() - t < 60
    assert f"coordinator 127.0.0.1:{port}" in text and "did not answer within distributed.timeout_s=3s" in text


def test_a_missing_process_stops_the_others_after_the_timeout():
    port = _free_port()
    t = time.perf_counter()
    proc = _marljax(["train", "progress=false", "out_dir=unused", f"distributed.coordinator=127.0.0.1:{port}",
                     "distributed.num_processes=2", "distributed.process_id=0", "distributed.timeout_s=3"], 2)  # fmt: skip
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and time.perf_counter() - t < 60  # JAX stops it; no hang
    assert "process 0 of 2 joining" in text and "did not join in time" in text and "DEADLINE_EXCEEDED" in text


def test_processes_with_different_configs_are_refused_naming_the_field(tmp_path):
    results = _two_processes(
        ["train", *RUN, f"out_dir={tmp_path / 'x'}"], extra=(["lr=1e-3"], ["lr=3e-3"]), timeout=200
    )
    for rc, text in results:
        assert rc == 2, text[-2000:]
        assert "every process must run the same config" in text and "in: lr" in text
    assert not (tmp_path / "x" / "checkpoints").exists()


GATHER = """
import sys, numpy as np, jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
from marljax.parallel.distributed import every_process, any_process
p = jax.process_index()
print(every_process(np.array([10 + p, 20 + p, 30], np.int64)).tolist(), any_process(p == 1), any_process(False))
"""


@pytest.mark.newest_jax  # jax.distributed, gloo's collectives and multihost_utils on the newest jax too (CI leg 2)
def test_every_process_gathers_each_processs_values_in_process_order():
    """The all-gather behind the async rows' by_process and the agreed stop: on every process,
    process 0's values first, then process 1's (each sent its own)."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", GATHER, f"127.0.0.1:{port}", str(i)], env=device_env(1),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert out.strip().splitlines()[-1] == "[[10, 20, 30], [11, 21, 30]] True False", out
