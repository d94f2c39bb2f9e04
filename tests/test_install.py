"""What pyproject.toml promises about installs holds: its Python range is the one the pinned
dependencies accept (read from their installed metadata), the accelerator extras pull the
same tested jax range, and the README states that range."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PYTHONS = [Version(f"3.{minor}") for minor in range(8, 16)]  # every Python a range could name today


def _requires_python(name: str) -> SpecifierSet:
    try:
        return SpecifierSet(metadata(name).get("Requires-Python") or "")
    except PackageNotFoundError:
        pytest.fail(f"{name} is a dependency of marljax but is not installed")


def _dependencies() -> list[str]:
    # jaxlib: jax's compiled half, installed with it and the strictest about Python
    return [Requirement(r).name for r in PROJECT["dependencies"]] + ["jaxlib"]


def test_the_python_range_is_what_the_dependencies_accept():
    jax = Version(metadata("jax")["Version"])
    lowest = next(Requirement(r) for r in PROJECT["dependencies"] if Requirement(r).name == "jax").specifier
    if f"{jax.major}.{jax.minor - 1}.0" in lowest:
        # the metadata read is the installed jax's: only the range's oldest jax speaks for the lowest Python
        pytest.skip(f"jax {jax} is installed; this check reads the oldest jax of the range (CI's Python 3.11 leg)")
    ours = SpecifierSet(PROJECT["requires-python"])
    allowed = [v for v in PYTHONS if v in ours]
    refused_by = {}
    for name in _dependencies():
        theirs = _requires_python(name)
        too_new_for_them = [str(v) for v in allowed if v not in theirs]
        assert not too_new_for_them, f"marljax allows Python {too_new_for_them}, which {name} ({theirs}) refuses"
        refused_by.update({str(v): name for v in PYTHONS if v not in theirs and v not in refused_by})
    below = Version(f"3.{allowed[0].minor - 1}")
    # negative control: one minor version lower is refused by some dependency, so the bound is not stricter than needed
    assert str(below) in refused_by, f"every dependency accepts Python {below}; requires-python could say so"


def test_the_accelerator_extras_pull_the_tested_jax_range():
    jax = next(Requirement(r) for r in PROJECT["dependencies"] if Requirement(r).name == "jax")
    extras = PROJECT["optional-dependencies"]
    for extra in ("cuda12", "cuda13", "tpu"):
        (req,) = [Requirement(r) for r in extras[extra]]
        assert req.name == "jax" and req.extras == {extra} and req.specifier == jax.specifier, req


def test_the_readme_states_the_python_range():
    lowest = SpecifierSet(PROJECT["requires-python"])
    first = next(v for v in PYTHONS if v in lowest)
    assert f"Python {first} or newer" in (ROOT / "README.md").read_text()
