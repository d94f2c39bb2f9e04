"""`marljax doctor [--expect cpu|gpu|tpu]`: what this install is and what JAX sees.

Prints the versions of marljax and its stack, the backend, every device with its kind and
memory, the process count, which accelerator build of jax is installed (the `cuda12`,
`cuda13` or `tpu` extra, or the CPU build) and whether the jax and Python found are in the range
this project tests, then one JSON line. With `--expect gpu` (or `tpu`) it exits
with code 1 and one clear line when JAX sees no such device: the check a setup script or a
notebook runs before it trains, so that a GPU runtime that ended up on jax's CPU build says
so instead of training silently on the CPU.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

STACK = ("marljax", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "chex", "jaxmarl", "tensorstore", "numpy")
# the distribution that makes each accelerator build; none of them: jax's CPU build
BUILDS = {"cuda12": "jax-cuda12-plugin", "cuda13": "jax-cuda13-plugin", "tpu": "libtpu", "rocm": "jax-rocm7-plugin"}
# What this project runs its tests on (docs/getting-started.md, "Tested combinations"): each jax minor with the
# Python it was tested under. pyproject.toml's jax range ends where this table does.
TESTED_JAX = {
    "0.10": "Python 3.11, CI",
    "0.11": "Python 3.12, the offline GPU kit's rehearsal",
    "0.12": "Python 3.13, CI",
}
TESTED_PYTHON = ("3.11", "3.12", "3.13")


def _minor(v: str | None) -> str | None:
    return ".".join(v.split(".")[:2]) if v else None


def range_verdict(jax_version: str | None, python_version: str) -> str:
    """One line: whether this jax and this Python are ones the project tests, and what is."""
    jax_minor, py_minor = _minor(jax_version), _minor(python_version)
    tested = f"jax {min(TESTED_JAX)}-{max(TESTED_JAX)} on Python {TESTED_PYTHON[0]}-{TESTED_PYTHON[-1]}"
    if jax_minor in TESTED_JAX and py_minor in TESTED_PYTHON:
        return f"yes: jax {jax_minor} is tested on {TESTED_JAX[jax_minor]} (tested: {tested})"
    outside = [f"jax {jax_version or '(not installed)'}"] if jax_minor not in TESTED_JAX else []
    outside += [f"Python {python_version}"] if py_minor not in TESTED_PYTHON else []
    return f"no: {' and '.join(outside)} outside the tested {tested}; it may work, but nothing here checked it"


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def installed_builds() -> list[str]:
    """The accelerator builds of jax installed here (e.g. ["cuda12"]); [] for the CPU build alone."""
    return [build for build, dist in BUILDS.items() if _version(dist) is not None]


def _memory_gib(device: Any) -> float | None:
    """The device's memory in GiB as its runtime reports it; None where it reports none (CPU)."""
    from marljax.parallel.placement import memory_stats

    limit = memory_stats(device).get("bytes_limit")
    return round(limit / 2**30, 2) if limit else None


def report() -> dict[str, Any]:
    """Everything `marljax doctor` prints, as one dict (JAX is imported here: it starts the backend)."""
    import jax

    devices = jax.devices()
    return {
        "versions": {name: _version(name) for name in STACK},
        "python": sys.version.split()[0],
        "backend": jax.default_backend(),
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_device_count": jax.local_device_count(),
        "device_count": jax.device_count(),
        "devices": [
            {
                "id": d.id,
                "platform": d.platform,
                "kind": d.device_kind,
                "process": d.process_index,
                "memory_gib": _memory_gib(d),
            }
            for d in devices
        ],
        "builds": installed_builds(),
        "tested": range_verdict(_version("jax"), sys.version.split()[0]),
    }


def _lines(r: dict[str, Any]) -> list[str]:
    builds = ", ".join(r["builds"]) or "none (jax's CPU build)"
    lines = [f"{name:<18} {v or 'not installed'}" for name, v in r["versions"].items()]
    lines += [
        f"{'python':<18} {r['python']}",
        f"{'accelerator build':<18} {builds}",
        f"{'tested range':<18} {r['tested']}",
        f"{'backend':<18} {r['backend']}",
        f"{'processes':<18} {r['process_count']} (this is process {r['process_index']})",
        f"{'devices':<18} {r['device_count']} in all, {r['local_device_count']} here",
    ]
    for d in r["devices"]:
        memory = f", {d['memory_gib']} GiB" if d["memory_gib"] else ""
        lines.append(f"  {d['id']:>3}  {d['platform']}  {d['kind']}{memory}  (process {d['process']})")
    return lines


def check(r: dict[str, Any], expect: str | None) -> str | None:
    """Why the install does not match `expect` (a platform), or None when it does."""
    if expect is None or expect == "cpu":
        return None
    found = {d["platform"] for d in r["devices"]}
    if expect in found:
        return None
    if expect == "gpu" and "cuda12" not in r["builds"] and "cuda13" not in r["builds"] and "rocm" not in r["builds"]:
        fix = (
            'jax\'s CPU build is installed: pip install "marljax[cuda13]" (CUDA 13 driver, >= 580) or '
            '"marljax[cuda12]" (or keep a runtime\'s own CUDA jax)'
        )
    elif expect == "tpu" and "tpu" not in r["builds"]:
        fix = 'libtpu is not installed: pip install "marljax[tpu]"'
    else:
        fix = "the accelerator build is installed but JAX found no such device (driver, runtime type, or another process holds it)"
    return f"expected a {expect.upper()}, but JAX sees only {', '.join(sorted(found))}: {fix}"


def main(expect: str | None, log=print) -> int:
    """`marljax doctor [--expect PLATFORM]`: the report, then exit 1 when `expect` is not met."""
    r = report()
    for line in _lines(r):
        log(line)
    problem = check(r, expect)
    r["expect"], r["ok"] = expect, problem is None
    log(json.dumps(r))
    if problem:
        print(f"marljax doctor: {problem}", file=sys.stderr)
        return 1
    return 0
