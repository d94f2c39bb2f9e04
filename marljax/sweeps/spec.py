"""Sweep files: a `base` config, grid `axes`, optional `zip` axes, `seeds`; expanded into cells and programs.

    name: lr_sweep                 # optional; default: the file's stem
    base: {env: MPE_simple_spread_v3, total_timesteps: 1e6, eval_every: 10}
    axes:                          # the grid: every combination is a cell
      lr: [1e-4, 3e-4, 1e-3]
      param_sharing: [shared, independent]
    zip:                           # optional: varied together, position by position
      ppo.clip_eps: [0.1, 0.2]
      ppo.ent_coef: [0.0, 0.01]
    seeds: 8                       # runs per cell (seed indices 0..7 of base.seed)
    traced: [lr]                   # optional; default: every traceable axis
    out_dir: runs/sweeps/lr_sweep  # optional
    max_cells: 4096                # optional: a larger grid is refused before anything is made

A *cell* is one point of the grid; it runs with `seeds` seeds. Axes over values that
can be traced (the fields declared `traced`: the hyperparameters a trainer carries in its state) are
batched with `vmap` inside one compiled *program* together with the seeds; structural
axes (algo, env, network sizes, sharing mode, ...) change the program, so every
combination of them is a program of its own. Every error names the key and what is
allowed, before anything is compiled.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marljax.config import Config, check_key, from_dict
from marljax.files import expand_home
from marljax.schema import (
    ConfigError,
    merge,
    parse_overrides,
    parse_scalar,
    read_yaml_mapping,
    set_dotted,
    to_flat,
    traced_keys,
    unknown_key,
)

SWEEP_KEYS = ("name", "base", "axes", "zip", "seeds", "traced", "out_dir", "max_cells")
# the most cells a sweep may have unless its file says `max_cells: N`: 10^4 cells took minutes to
# expand and to write their directories before anything compiled, 10^7 never finished doing so
MAX_CELLS = 4096
SET_BY_SWEEP = ("num_seeds", "out_dir", "resume", "overwrite", "progress")  # not allowed in base or axes


def cell_dirname(name: str) -> str:
    """A cell's directory under <out_dir>/cells: its name without '=' and ','."""
    return name.replace("=", "-").replace(",", "_")


@dataclasses.dataclass(frozen=True)
class Cell:
    index: int
    name: str  # "lr=0.001,param_sharing=shared": the varied values, unique in the sweep
    values: dict  # dotted key -> value, for every axis
    config: Config  # base + values, num_seeds = seeds: `marljax train` of it gives the same runs

    @property
    def dirname(self) -> str:
        return cell_dirname(self.name)


@dataclasses.dataclass(frozen=True)
class Program:
    """Cells that differ only in traced values: one compiled program with len(cells) * seeds rows."""

    index: int
    name: str  # the structural values ("algo=mappo,param_sharing=shared"), or "all"
    cells: tuple[Cell, ...]
    config: Config  # the first cell's config with num_seeds = len(cells) * seeds

    @property
    def rows(self) -> int:
        return self.config.num_seeds


@dataclasses.dataclass(frozen=True)
class Sweep:
    name: str
    out_dir: Path
    seeds: int
    traced: tuple[str, ...]  # axis keys batched with vmap
    structural: tuple[str, ...]  # axis keys that compile separately
    cells: tuple[Cell, ...]
    programs: tuple[Program, ...]
    spec: dict  # the sweep as resolved (overrides applied): written beside the results

    def describe(self) -> str:
        trace = ", ".join(f"{k} ({len(_axis_values(self, k))})" for k in self.traced) or "none"
        struct = ", ".join(f"{k} ({len(_axis_values(self, k))})" for k in self.structural) or "none"
        return (
            f"sweep {self.name}: {len(self.cells)} cell(s) x {self.seeds} seed(s) = {len(self.cells) * self.seeds} runs "
            f"in {len(self.programs)} compiled program(s)\n"
            f"  traced (vmapped with the seeds inside one program): {trace}\n"
            f"  structural (one program per combination): {struct}"
        )


def _axis_values(sweep: Sweep, key: str) -> list:
    seen = []
    for c in sweep.cells:
        if c.values[key] not in seen:
            seen.append(c.values[key])
    return seen


def _check_key(where: str, key: str, algos: Sequence[str]) -> None:
    """Axis and base keys: config keys (dotted for sections) of every algorithm the sweep runs,
    except the ones the sweep sets itself."""
    for algo in algos:
        try:
            check_key(key, str(algo))
        except ConfigError as exc:
            raise ConfigError(f"{where}.{exc.field}", str(exc)[len(exc.field) + 2 :]) from None
    if key in SET_BY_SWEEP:
        raise ConfigError(f"{where}.{key}", f"is set by the sweep (seeds, out_dir); remove it from {where}")


def _hashable(value: Any) -> Any:
    """`value` where it can be counted as it is (1 and 1.0 alike, as == has them), else its repr (a list, a mapping)."""
    try:
        hash(value)
    except TypeError:
        return ("unhashable", repr(value))
    return value


def _values_list(where: str, values: Any) -> list:
    if not isinstance(values, list):
        raise ConfigError(where, f"expected a list of values, got {values!r}")
    if not values:
        raise ConfigError(where, "is empty; give at least one value")
    values = [parse_scalar(v, where) if isinstance(v, str) else v for v in values]  # 1e-4 is a string to YAML
    # counted in one pass: values.count(v) per value was quadratic (100,000 values never reached max_cells)
    counts = collections.Counter(_hashable(v) for v in values)
    dupes = sorted({repr(v) for v in values if counts[_hashable(v)] > 1})
    if dupes:
        raise ConfigError(where, f"repeats {', '.join(dupes)}; every value must be distinct")
    return values


def load_sweep(path: str | Path, overrides: Sequence[str] = ()) -> Sweep:
    """Read and check a sweep file; `overrides` (key=value) change `base`, or `seeds=` / `out_dir=`."""
    spec = read_yaml_mapping(path, "sweep", f"a mapping with keys {', '.join(SWEEP_KEYS)}")
    spec.setdefault("name", Path(path).stem)
    changes = parse_overrides(overrides)
    spec.update({key: changes.pop(key) for key in ("seeds", "out_dir", "name") if key in changes})
    if changes:
        spec["base"] = merge(dict(spec.get("base") or {}), changes)
    return expand(spec)


def expand(spec: Mapping[str, Any]) -> Sweep:
    """Check a sweep mapping and expand it into cells and programs."""
    for key in spec:
        if key not in SWEEP_KEYS:
            raise unknown_key(str(key), SWEEP_KEYS, prefix="sweep.")
    base = spec.get("base") or {}
    if not isinstance(base, Mapping):
        raise ConfigError("base", "expected a mapping of config keys to values")
    base_flat = to_flat(base)
    axes = spec.get("axes") or {}
    zipped = spec.get("zip") or {}
    for where, table in (("axes", axes), ("zip", zipped)):
        if not isinstance(table, Mapping):
            raise ConfigError(where, "expected a mapping of config keys to lists of values")
    if not axes and not zipped:
        raise ConfigError("axes", "a sweep needs at least one axis (axes or zip)")
    grid = {k: _values_list(f"axes.{k}", v) for k, v in axes.items()}
    zip_values = {k: _values_list(f"zip.{k}", v) for k, v in zipped.items()}
    algos = grid.get("algo") or zip_values.get("algo") or [base_flat.get("algo", "ippo")]  # the algorithms it runs
    for key in base_flat:
        _check_key("base", key, algos)
    for where, table in (("axes", grid), ("zip", zip_values)):
        for key in table:
            _check_key(where, key, algos)
            if key in base_flat:
                raise ConfigError(
                    f"{where}.{key}",
                    f"is also set in base ({base_flat[key]!r}); a key is either fixed in base or swept",
                )
    both = sorted(set(grid) & set(zip_values))
    if both:
        raise ConfigError(f"zip.{both[0]}", "is also an axis in axes; sweep it in one of them")
    lengths = {len(v) for v in zip_values.values()}
    if len(lengths) > 1:
        raise ConfigError(
            "zip",
            f"every zip axis needs the same number of values, got { ({k: len(v) for k, v in zip_values.items()}) }",
        )

    seeds = spec.get("seeds", 1)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError("seeds", f"must be a positive integer (runs per cell), got {seeds!r}")
    _check_cell_count(grid, zip_values, spec.get("max_cells", MAX_CELLS))

    axis_keys = list(grid) + list(zip_values)
    # every combination of the grid, times every zip position
    zip_rows = [dict(zip(zip_values, vals)) for vals in zip(*zip_values.values())] or [{}]
    combos = [dict(zip(grid, vals)) | z for vals in itertools.product(*grid.values()) for z in zip_rows]
    varied = [k for k in axis_keys if len({repr(c[k]) for c in combos}) > 1] or axis_keys
    name = str(spec.get("name") or "sweep")
    cells = []
    for i, values in enumerate(combos):
        cell_name = ",".join(f"{k}={_label(values[k])}" for k in varied)
        cells.append(Cell(i, cell_name, values, _cell_config(base, values, seeds, f"cell {cell_name}")))
    # traceable: carried as traced scalars in every cell's learner state (marljax.schema.traced_keys)
    traceable = [k for k in traced_keys(cells[0].config) if all(k in traced_keys(c.config) for c in cells)]

    traced_spec = spec.get("traced")
    if traced_spec is None:
        traced = tuple(k for k in axis_keys if k in traceable)
    else:
        if not isinstance(traced_spec, list):
            raise ConfigError("traced", f"expected a list of axis keys, got {traced_spec!r}")
        for key in traced_spec:
            if key not in axis_keys:
                raise ConfigError(f"traced.{key}", f"is not an axis; the axes are {', '.join(axis_keys)}")
            if key not in traceable:
                raise ConfigError(
                    f"traced.{key}",
                    f"is structural (it changes the compiled program) and can't be traced; traceable: {', '.join(traceable)}",
                )
        traced = tuple(k for k in axis_keys if k in traced_spec)
    structural = tuple(k for k in axis_keys if k not in traced)

    programs: list[Program] = []
    by_structure: dict[tuple, list[Cell]] = {}
    for cell in cells:
        by_structure.setdefault(tuple(repr(cell.values[k]) for k in structural), []).append(cell)
    for i, members in enumerate(by_structure.values()):
        pname = ",".join(f"{k}={_label(members[0].values[k])}" for k in structural if k in varied) or "all"
        rows = len(members) * seeds
        config = _cell_config(base, members[0].values, rows, f"program {pname}", fit_mesh=False)
        programs.append(Program(i, pname, tuple(members), config))
    out_dir = Path(expand_home(str(spec.get("out_dir") or Path("runs") / "sweeps" / name), "out_dir"))
    resolved = {k: v for k, v in spec.items()} | {"seeds": seeds, "out_dir": str(out_dir), "name": name}
    return Sweep(name, out_dir, seeds, traced, structural, tuple(cells), tuple(programs), _plain(resolved))


def _check_cell_count(grid: Mapping[str, list], zip_values: Mapping[str, list], max_cells: Any) -> None:
    """Refuse, before any cell is made, a grid of more than `max_cells` cells, naming its size."""
    if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
        raise ConfigError("max_cells", f"must be a positive integer, got {max_cells!r}")
    zip_len = len(next(iter(zip_values.values()))) if zip_values else 1
    cells = math.prod(len(v) for v in grid.values()) * zip_len
    if cells > max_cells:
        sizes = " x ".join([f"{k} {len(v)}" for k, v in grid.items()] + ([f"zip {zip_len}"] if zip_values else []))
        raise ConfigError(
            "axes",
            f"the grid has {cells:,} cells ({sizes}), more than max_cells={max_cells:,}; "
            "shrink an axis, or put max_cells: N in the sweep file to run it anyway",
        )


def _label(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


@contextlib.contextmanager
def located(where: str):
    """Re-raise a ConfigError with the place it concerns (a cell, a program) before its field."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc.field}", str(exc)[len(exc.field) + 2 :]) from None


def _cell_config(base: Mapping, values: Mapping, seeds: int, where: str, fit_mesh: bool = True) -> Config:
    """base + values with `seeds` seeds. `fit_mesh`: a cell run alone has only `seeds` rows for the
    program's mesh.seed devices to split, so mesh.seed shrinks to a divisor of `seeds`."""
    tree: dict = merge({}, base)
    for key, value in values.items():
        set_dotted(tree, key, value)
    tree.update(num_seeds=seeds, progress=False)
    mesh = dict(tree.get("mesh") or {})
    if fit_mesh and isinstance(mesh.get("seed"), int) and mesh["seed"] > 0:
        mesh["seed"] = math.gcd(mesh["seed"], seeds)
        tree["mesh"] = mesh
    with located(where):
        return from_dict(tree)


def _plain(tree: Any) -> Any:
    """YAML-safe copy (tuples to lists)."""
    if isinstance(tree, Mapping):
        return {str(k): _plain(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_plain(v) for v in tree]
    return tree
