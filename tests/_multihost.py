"""Several local processes over loopback (gloo) for the multi-host tests: each process runs the
marljax command line with its own fake CPU devices, as process i of a distributed job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests._trees import flat, load_checkpoint, rows_tree

# runs `marljax ARGS` after PRELUDE (Python, e.g. a patch of a seam for a negative control)
WITH_PRELUDE = "import sys\n{prelude}\nfrom marljax.cli import main\nsys.exit(main(sys.argv[1:]))"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def device_env(devices: int) -> dict:
    env = dict(os.environ)
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", PYTHONUNBUFFERED="1")
    return env


def marljax(args: list[str], devices: int, prelude: str = "") -> subprocess.Popen:
    command = ["-c", WITH_PRELUDE.format(prelude=prelude)] if prelude else ["-m", "marljax.cli"]
    return subprocess.Popen(
        [sys.executable, *command, *args], env=device_env(devices),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def two_processes(args: list[str], *, extra: tuple[list[str], list[str]] = ([], []), timeout: int = 400,
                  devices: int = 2, prelude: str = "") -> list[tuple[int, str]]:  # fmt: skip
    """Run `marljax ARGS` as processes 0 and 1 of a 2-process job; returns [(rc, output)] per process."""
    port = free_port()
    common = [f"distributed.coordinator=127.0.0.1:{port}", "distributed.num_processes=2", "distributed.timeout_s=60"]
    procs = [marljax([*args, *common, f"distributed.process_id={i}", *extra[i]], devices, prelude) for i in range(2)]
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a two-process run hung") from None
        out.append((p.returncode, text))
    return out


def one_process(args: list[str], devices: int = 4) -> str:
    proc = subprocess.run([sys.executable, "-m", "marljax.cli", *args], env=device_env(devices), capture_output=True,
                          text=True, timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def whole_run(out: Path, update: int) -> dict:
    """A run's checkpoint at `update` (its whole state) and its metrics rows, as one flat tree."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {**load_checkpoint(out / "checkpoints" / str(update)), **flat({"rows": rows_tree(rows)})}
