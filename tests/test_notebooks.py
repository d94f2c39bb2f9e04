"""colab/: every notebook runs top to bottom, set-up cell included, with MARLJAX_SMALL=1 in a fresh
kernel of a Colab-like environment (jax present, marljax not: the set-up installs the wheel of
this checkout), and the committed notebooks are exactly what colab/build.py writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COLAB = ROOT / "colab"
NOTEBOOKS = sorted(p.name for p in COLAB.glob("*.ipynb"))


def test_committed_notebooks_match_their_sources_and_carry_no_outputs():
    # first, so that a missing nbformat (a dev extra; colab/build.py needs it too) fails as itself
    import nbformat

    assert NOTEBOOKS == ["01_quickstart.ipynb", "02_agent_parallel_and_async.ipynb", "03_seeded_ablation.ipynb"]
    proc = subprocess.run([sys.executable, str(COLAB / "build.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

    for name in NOTEBOOKS:
        nb = nbformat.read(COLAB / name, as_version=4)
        assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code")


@pytest.fixture(scope="module")
def colab_like(tmp_path_factory) -> tuple[Path, Path]:
    """As Colab starts: a fresh virtual environment that already holds a jax of the tested range
    and a Jupyter kernel, without marljax; and a wheel of this checkout for MARLJAX_SOURCE.
    Returns (the wheel, the directory holding the kernel's spec, for JUPYTER_PATH)."""
    root = tmp_path_factory.mktemp("colab")
    run = lambda *cmd: subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, timeout=900)  # noqa: E731
    run(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-w", root / "wheels")
    (wheel,) = (root / "wheels").glob("marljax-*.whl")
    run(sys.executable, "-m", "venv", root / "venv")
    python = root / "venv" / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "jax>=0.10,<0.11", "ipykernel")
    run(python, "-m", "ipykernel", "install", "--prefix", root / "jupyter", "--name", "colab-like")
    return wheel, root / "jupyter" / "share" / "jupyter"


# CI runs the quick start (its set-up cell installs the wheel); the other two, 2-3 CPU-minutes
# together, are nightly: python -m pytest -m nightly tests/test_notebooks.py
NOTEBOOK_CASES = [pytest.param(name, marks=() if name.startswith("01_") else pytest.mark.nightly) for name in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOK_CASES)
def test_every_notebook_installs_from_the_wheel_and_runs_top_to_bottom(colab_like, tmp_path, monkeypatch, name):
    """One kernel environment for the three, in order: the first notebook's set-up cell installs
    the wheel (keeping the environment's jax), the others find marljax installed (or install it,
    run alone). Each runs in a fresh kernel from its first cell with MARLJAX_SMALL=1."""
    import nbformat
    from nbclient import NotebookClient

    wheel, jupyter_path = colab_like
    monkeypatch.setenv("MARLJAX_SMALL", "1")
    monkeypatch.setenv("MARLJAX_SOURCE", str(wheel))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    # nothing of this checkout or this process leaks into the kernel (the tests' compile settings included)
    for var in ("XLA_FLAGS", "PYTHONPATH", "JAX_DISABLE_MOST_OPTIMIZATIONS"):
        monkeypatch.delenv(var, raising=False)
    checks = {
        "01_quickstart.ipynb": ["installing marljax @ file://", "kept)", "return per agent", "one greedy episode"],
        "02_agent_parallel_and_async.ipynb": ["4 devices", "'agent')", "policy_version"],
        "03_seeded_ablation.ipynb": ["2 compiled program(s)", "(cells, seeds, evaluations, metrics)"],
    }
    nb = nbformat.read(COLAB / name, as_version=4)
    out = tmp_path / name
    out.mkdir()
    NotebookClient(nb, timeout=600, kernel_name="colab-like", resources={"metadata": {"path": str(out)}}).execute()
    text = "\n".join(
        o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )  # fmt: skip
    assert "small budget" in text and "backend cpu" in text and "WARNING" not in text, (name, text[-2000:])
    for words in checks[name]:
        assert words in text, (name, words, text[-2000:])
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {}))
    assert (
        images
        >= {"01_quickstart.ipynb": 2, "02_agent_parallel_and_async.ipynb": 0, "03_seeded_ablation.ipynb": 2}[name]
    )
    assert os.path.isdir(out / "runs")
