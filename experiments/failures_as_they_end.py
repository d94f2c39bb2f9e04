"""pytest plugin of the GPU protocol's tests step (`python -m pytest -p failures_as_they_end`, with
experiments/ on PYTHONPATH): each failing test's report (its traceback, as pytest would print it at
the end) is appended to the file $MARLJAX_FAILURES_LOG the moment the test ends. A step stopped at
its time limit never reaches pytest's summary, and on a lent card the rerun may not fit: the file
keeps what the summary would have said about every failure that finished.
"""

from __future__ import annotations

import os

import pytest

_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("MARLJAX_FAILURES_LOG")
    # under xdist the controller receives every worker's reports; the workers themselves write nothing
    if not path or not report.failed or (_config is not None and hasattr(_config, "workerinput")):
        return
    with open(path, "a") as f:
        f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
