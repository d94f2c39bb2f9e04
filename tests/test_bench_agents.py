"""`marljax bench agents` (issue 21, item 4): learner bytes per device fall as 1/K with mesh.agent=K,
the swap moves bytes exactly when K > 1, and the largest-N search finds what fits. Byte counts only:
no timed assertion (rows' times are printed, never checked)."""

import json
import os
import subprocess
import sys

import pytest

from marljax.arguments import UsageError
from marljax.bench.agents import fit_bytes, largest_fit, what_fits
from marljax.cli import resolve
from tests._subprocess import ROOT

TINY = ["num_steps=4", "hidden_size=16", "ppo.update_epochs=1", "ppo.num_minibatches=1"]


def run_bench(agents: str, ks: str) -> dict:
    """The bench as a user starts it: in a process that sees one CPU device, so it re-runs itself
    on 8 fake ones; the JSON line it prints last."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "marljax.cli", "bench", "agents", "--agents", agents, "--mesh-agent", ks, *TINY]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_rows(result: dict, agents: tuple[int, ...], ks: tuple[int, ...]) -> None:
    assert result["devices"] == 8
    rows = {(r["num_agents"], r["mesh_agent"]): r for r in result["rows"]}
    assert set(rows) == {(n, k) for n in agents for k in ks if n % k == 0}
    for (n, k), r in rows.items():
        one = rows[(n, 1)]["learner_bytes_per_device"]
        assert r["learner_bytes_total"] == one  # one device holds all of it at K=1
        assert abs(r["learner_bytes_per_device"] / one - 1 / k) <= 0.15 / k, (n, k, r)
        moved = r["swap_param_bytes"] > 0 and r["swap_traj_bytes"] > 0
        none = r["swap_param_bytes"] == 0 and r["swap_traj_bytes"] == 0
        assert moved if k > 1 else none, (n, k, r)


@pytest.mark.slow
@pytest.mark.nightly  # 2 rows: about 2 minutes on 2 CPU cores, 11 under heavy load (measured)
def test_bench_agents_bytes_fall_as_one_over_k_and_swap_only_when_split():
    result = run_bench("4", "1,2")
    check_rows(result, (4,), (1, 2))
    assert result["largest_fit"] == {} and "two agent counts" in result["fit"]


@pytest.mark.slow
@pytest.mark.nightly  # 6 rows: about 6 minutes on 2 CPU cores (measured at moderate load)
def test_bench_agents_over_n_4_8_and_k_1_2_4():
    result = run_bench("4,8", "1,2,4")
    check_rows(result, (4, 8), (1, 2, 4))
    fits = result["largest_fit"]
    assert fits["1"] <= fits["2"] <= fits["4"]
    assert all(all(c) for c in result["checked"].values()), result["checked"]  # the fit agrees with the shapes


def quadratic_rows(ns, ks, replicated=4):
    """Rows whose split bytes are 10 N^2 + 100 N (N agents, each with a layer growing with N)."""
    split = lambda n: 10 * n * n + 100 * n  # noqa: E731
    return [{"num_agents": n, "mesh_agent": k, "learner_bytes_total": split(n) + replicated,
             "learner_bytes_per_device": split(n) // k + replicated} for n in ns for k in ks]  # fmt: skip


def test_fit_recovers_quadratic_bytes_and_the_search_finds_the_largest_multiple_of_k():
    per_device, how = fit_bytes(quadratic_rows((4, 16, 64), (1, 2, 8)))
    assert how.startswith("N x (bytes per agent")
    assert per_device(1000, 4) == pytest.approx((10 * 1000**2 + 100 * 1000) / 4 + 4)
    budget = 1e6
    for k in (1, 2, 4, 8):
        brute = max(n for n in range(k, 2000, k) if per_device(n, k) <= budget)
        assert largest_fit(per_device, k, budget) == brute
    assert largest_fit(per_device, 1, 1.0) is None


def test_what_fits_defaults_to_half_the_largest_state_and_needs_two_counts():
    rows = quadratic_rows((4, 8), (1, 2))
    one = what_fits(None, quadratic_rows((4,), (1, 2)), (1, 2), None)
    assert one["largest_fit"] == {} and one["device_memory_mib"] == pytest.approx((10 * 16 + 400 + 4) / 2 / 2**20)
    two = what_fits(None, rows, (1, 2), 1e-12)  # nothing fits: no answer to check, base unused
    assert two["largest_fit"] == {"1": None, "2": None} and two["fit"].startswith("N x")


def test_flags():
    arguments = resolve(["bench", "agents"])[0][-1].arguments
    args = arguments.parse(["--agents", "4,8", "--mesh-agent=1,2", "--device-memory-mib", "3.5", "num_envs=16"])
    assert args.overrides == ["num_envs=16"]
    assert args.options == {"agents": (4, 8), "mesh_agent": (1, 2), "device_memory_mib": 3.5}
    for bad in (["--agents", "4,x"], ["--mesh-agent", "0"], ["--device-memory-mib", "nan"], ["--agents"]):
        with pytest.raises(UsageError, match=bad[0]):
            arguments.parse(bad)
