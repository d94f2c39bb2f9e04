"""pytest plugin of the GPU protocol's tests step (`python -m pytest -p absent_extras`, with
experiments/ on PYTHONPATH): a test that fails only because an optional package the offline kit
does not carry is absent (the notebooks' Jupyter stack, the wandb / neptune / mlflow trackers)
is reported as skipped, naming the package, rather than failed. Any other failure stays one.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

# dev extras of pyproject.toml that the offline kit leaves out (large, and nothing the GPU checks need)
OPTIONAL = frozenset({"nbformat", "nbclient", "ipykernel", "jupyter_client", "wandb", "neptune", "mlflow"})
NOT_INSTALLED = re.compile(r"\b([a-z_]+) is not installed")  # marljax's ConfigError for a tracker


def _absent(name: str) -> bool:
    top = name.split(".")[0]
    return top in OPTIONAL and importlib.util.find_spec(top) is None


def missing_package(exc: BaseException) -> str | None:
    """The absent optional package `exc` was raised for, or None when it is any other failure."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and _absent(exc.name):
        return exc.name.split(".")[0]
    found = NOT_INSTALLED.search(str(exc))
    return found.group(1) if found and _absent(found.group(1)) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None:
        name = missing_package(call.excinfo.value)
        if name:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: needs {name}, not installed here")
