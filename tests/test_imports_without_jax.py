"""The schema engine and every layer's settings load in a process where importing JAX fails.

A `sys.meta_path` finder refuses `jax` and `jaxlib` before anything is imported; the package
itself (which every submodule import runs), `marljax.schema` and each `marljax/**/settings.py`
must import under it, and a module that needs JAX must not (the control: the block is real).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "marljax").rglob("*settings.py")
)  # a layer's settings.py, and run_settings.py (the run's, beside config.py)

BLOCKED = """
import importlib, importlib.abc, json, sys

class NoJax(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib"):
            raise ImportError(f"{name} is blocked by the test")

sys.meta_path.insert(0, NoJax())
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = "ok"
    except ImportError as exc:
        out[name] = f"ImportError: {exc}"
out["jax loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib"))
print(json.dumps(out))
"""


def _imports_without_jax(*modules: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, *modules], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_schema_and_every_settings_module_import_without_jax():
    # the glob finds them (a new layer's settings.py joins by itself)
    assert {"marljax.parallel.settings", "marljax.pipeline.settings", "marljax.run_settings"} <= set(SETTINGS)
    modules = ["marljax", "marljax.schema", *SETTINGS]
    out = _imports_without_jax(*modules)
    assert {name: out[name] for name in modules} == dict.fromkeys(modules, "ok")
    assert out["jax loaded"] == []


def test_the_block_is_real():
    """The control: a module that needs JAX fails to import under the same finder."""
    out = _imports_without_jax("marljax.algos", "marljax.nn.ops")
    assert out["marljax.algos"].startswith("ImportError: jax is blocked by the test")
    assert out["marljax.nn.ops"].startswith("ImportError: jax is blocked by the test")
