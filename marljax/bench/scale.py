"""`marljax bench scale`: the training throughput of one config as num_envs grows.

    marljax bench scale [CONFIG.yaml] [--max-envs N] [--timeout S] [key=value ...]

Runs `marljax bench` (`train.py`) once per row, each in its own process, at 64, 256, 1k, 4k,
16k and 64k environments per device (times the devices the environments split over), until
a row runs out of memory, passes its time limit, or passes `--max-envs` per device (default
4096 on CPU, 65536 on GPU and TPU). A process per row keeps every row's memory peak its own
and lets an out-of-memory row fail without taking the sweep with it. Prints a table (env-steps
per second, MFU, peak memory, compile time), then a JSON line per row and a last one with all
the rows: the accelerator throughput sweep of the install checks (`experiments/gpu_protocol.sh`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from marljax.bench.table import report
from marljax.config import Config, load_config

PER_DEVICE = (64, 256, 1024, 4096, 16384, 65536)
MAX_PER_DEVICE = {"cpu": 4096}  # elsewhere: every size
DEFAULT_MAX = 65536
ROW_TIMEOUT_S = 900
MIN_STEPS_PER_CHUNK = 262_144  # env steps in a timed chunk, so that small rows do not time dispatch alone
OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "MemoryError")


def env_devices(config: Config, device_count: int) -> int:
    """The devices each seed's environments split over (data x agent)."""
    seed = device_count if config.mesh.seed == -1 else config.mesh.seed
    data = device_count // (seed * config.mesh.agent) if config.mesh.data == -1 else config.mesh.data
    return max(1, data * config.mesh.agent)


def row_overrides(config: Config, num_envs: int) -> list[str]:
    """num_envs, and a budget of total_timesteps holding a few chunks of a useful size."""
    per_update = num_envs * config.num_steps
    updates_per_chunk = min(10, max(1, math.ceil(MIN_STEPS_PER_CHUNK / per_update)))
    chunks = 8  # a warm-up chunk, up to three timed, room to spare
    return [
        f"num_envs={num_envs}",
        f"total_timesteps={per_update * updates_per_chunk * chunks}",
        f"num_chunks={chunks}",
        "progress=false",
        "plot=false",
    ]


def _run_row(path: str | None, overrides: list[str], timeout: int) -> tuple[dict | None, str]:
    """(the row's JSON result, or None; why it stopped: '' when it ran)."""
    cmd = [sys.executable, "-m", "marljax.cli", "bench", *([path] if path else []), *overrides]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return None, f"time limit ({timeout} s)"
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    if any(word in proc.stderr for word in OUT_OF_MEMORY):
        return None, "out of memory"
    last = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or [f"exit {proc.returncode}"]
    return None, f"failed: {last[0][:200]}"


def run_scale_bench(
    path: str | None, overrides: list[str], max_envs: int | None, timeout: int, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    import jax

    config = load_config(path, overrides)  # a bad setting stops here, before any row compiles
    platform, devices = jax.default_backend(), jax.device_count()
    limit = max_envs or MAX_PER_DEVICE.get(platform, DEFAULT_MAX)
    per_env_device = env_devices(config, devices)
    log(
        f"marljax bench scale: {config.algo} on {config.env}, {devices} x {platform}; "
        f"num_envs per device {', '.join(str(n) for n in PER_DEVICE if n <= limit)}"
    )
    rows, stopped = [], ""
    for n in (n for n in PER_DEVICE if n <= limit):
        result, stopped = _run_row(path, [*overrides, *row_overrides(config, n * per_env_device)], timeout)
        if result is None:
            log(f"num_envs {n} per device: {stopped}; the sweep stops here")
            break
        result["num_envs_per_device"] = n
        rows.append(result)
        log(json.dumps(result))
    summary = {
        "bench": "scale",
        "platform": platform,
        "devices": devices,
        "stopped": stopped or "max-envs",
        "rows": [{k: r.get(k) for k in SUMMARY_KEYS} for r in rows],
    }
    report([("num_envs / device", "env-steps/s", "MFU, peak memory, compile")] + [_row(r) for r in rows], summary, log)
    return rows


SUMMARY_KEYS = (
    "num_envs_per_device",
    "num_envs",
    "train_env_steps_per_s",
    "mfu",
    "peak_device_mb",
    "peak_rss_mb",
    "compile_s",
)


def _row(r: dict[str, Any]) -> tuple[str, str, str]:
    memory = f"device {r['peak_device_mb']:,.0f} MiB" if r.get("peak_device_mb") else f"RSS {r['peak_rss_mb']:,.0f} MiB"
    return (
        f"{r['num_envs_per_device']:,} ({r['num_envs']:,} in all)",
        f"{r['train_env_steps_per_s']:,.0f}",
        f"MFU {100 * r['mfu']:.2f}%, {memory}, compile {r['compile_s']:.1f} s",
    )
