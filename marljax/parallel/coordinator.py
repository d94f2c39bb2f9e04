"""The coordination service of a multi-process run, served by a child process of process 0.

JAX serves its coordination service from inside process 0. When process 0 died, every other
process's runtime lost the service and aborted within a second (exit 134, a C++ stack, measured:
0.2 s after a SIGKILL), before marljax could say anything: the callback JAX offers for that case
cannot be set from Python in jax 0.10-0.12. Served from a child process instead, the service
outlives process 0, so its loss is an ordinary lost peer: the others' heartbeat watch
(peer_watch.py) names process 0 and the newest checkpoint, as for any other process.

The child serves until process 0 says stop (JAX's own shutdown of the service, at exit), or, when
process 0 is gone without saying so, until the others have gone too (at most LINGER_S), then
exits. It runs in a session of its own, so a Ctrl-C meant for process 0 does not end it. A machine
that goes down takes the child with it: the others then abort as before (the join message says
what that abort means). Not used for `distributed=auto`, where JAX chooses the coordinator.

This file is also the child's script: run by path, it imports the standard library and the
jaxlib module JAX took the service from, nothing of marljax's.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# at most, once process 0 is gone: the others' watch decides within 15-18 s (peer_watch.LOST_AFTER_S
# + settle), then they end and the child with them (on Linux; elsewhere it serves the whole LINGER_S)
LINGER_S = 60.0
READY_S = 60.0  # the child imports jaxlib and binds the port: about 0.2 s here


class ServiceBeside:
    """Process 0's handle on the child that serves the coordination service (what JAX keeps as
    `global_state.service` and shuts down at exit)."""

    def __init__(self, module: str, address: str, num_nodes: int, options: dict[str, Any]):
        self.proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), module, address, str(num_nodes), json.dumps(options)]
            + [str(LINGER_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the service's own log would hold process 0's output open for LINGER_S
            start_new_session=True,
            text=True,
        )
        assert self.proc.stdout is not None
        said = ""
        if select.select([self.proc.stdout], [], [], READY_S)[0]:
            said = self.proc.stdout.readline().strip()
        self.proc.stdout.close()
        if said != "ready":
            self.proc.kill()
            why = said.removeprefix("error: ") or f"no answer in {READY_S:.0f} s (exit {self.proc.poll()})"
            raise RuntimeError(f"the coordination service on {address} did not start in its own process: {why}")

    def shutdown(self) -> None:
        """Stop serving (after this process's client has left, as JAX does with its own service)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()


class _ServedBeside:
    """jax._src.distributed's jaxlib module, except that the coordination service starts in a child."""

    def __init__(self, real: Any):
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_distributed_runtime_service(self, address: str, num_nodes: int, **options: Any) -> ServiceBeside:
        return ServiceBeside(self._real.__name__, address, num_nodes, options)


@contextmanager
def service_beside() -> Iterator[None]:
    """While process 0 joins (jax.distributed.initialize): its coordination service starts in a
    child process. With a JAX whose service is started elsewhere, nothing changes (served in process 0)."""
    from jax._src import distributed as jax_distributed

    real = getattr(jax_distributed, "_jax", None)
    if real is None or not hasattr(real, "get_distributed_runtime_service"):
        yield
        return
    jax_distributed._jax = _ServedBeside(real)
    try:
        yield
    finally:
        jax_distributed._jax = real


def _serve(module: str, address: str, num_nodes: int, options: dict[str, Any], linger_s: float) -> int:
    """The child: serve until process 0 says stop; if it goes without a word, `linger_s` longer."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    try:
        service = importlib.import_module(module).get_distributed_runtime_service(address, num_nodes, **options)
    except Exception as exc:  # noqa: BLE001 - said to process 0, which raises it
        print(f"error: {type(exc).__name__}: {exc}", flush=True)
        return 1
    print("ready", flush=True)
    while True:
        if select.select([sys.stdin], [], [], 1.0)[0]:
            line = sys.stdin.readline()
            if line.strip() == "stop":
                service.shutdown()
                return 0
            if not line:  # process 0 is gone: its end of the pipe closed
                break
        elif os.getppid() != parent:  # process 0 is gone, though a child of its holds the pipe
            break
    # until the others have gone too (a rerun on the same port is refused while this serves)
    port, until, idle = int(address.rsplit(":", 1)[1]), time.monotonic() + linger_s, 0
    while time.monotonic() < until and idle < 2:
        time.sleep(1.0)
        idle = idle + 1 if _connections(port) == 0 else 0
    os._exit(0)  # the service's own shutdown would wait on the calls the others left open


def _connections(port: int) -> int | None:
    """Established TCP connections to `port` on this host (Linux's /proc/net/tcp*); None where unknown."""
    count, known = 0, False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        known = True
        count += sum(1 for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "01")
    return count if known else None


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), float(sys.argv[5])))
