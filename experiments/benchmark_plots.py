"""The benchmark plots of the docs (docs/benchmarks/*.png) and the README's headline figure.

    python experiments/benchmark_plots.py curves --jaxmarl PATH   # returns over wall-clock time beside JaxMARL's script
    python experiments/benchmark_plots.py throughput              # train and env-only env-steps/s against num_envs
    python experiments/benchmark_plots.py scale                   # the same from `marljax bench scale` (64 .. 64k envs)
    python experiments/benchmark_plots.py scale --from-log LOG --device-kind NAME --date D
                                                                  # ... from a GPU protocol's bench_scale.log
    python experiments/benchmark_plots.py sweep                   # `marljax bench sweep`: vmapped vs one after another
    python experiments/benchmark_plots.py async                   # `marljax bench mode=async`: generation, learning, overlap
    python experiments/benchmark_plots.py headline                # README's figure: curves beside throughput
    python experiments/benchmark_plots.py NAME --replot           # redraw NAME's PNG from its saved JSON
    python experiments/benchmark_plots.py NAME --quick            # tiny budgets: checks the plumbing only

Each measuring plot runs the public commands (`marljax bench ...`, `experiments/jaxmarl_side_by_side.py`)
in subprocesses, keeps what they printed in docs/benchmarks/NAME.json (with the command lines, the
machine and the date) and draws docs/benchmarks/NAME.png from that file, so a figure can be redrawn
without measuring again and every number on it can be traced to a command. `headline` measures
nothing: it draws curves.json and throughput.json side by side (docs/benchmarks/headline.png), with
scale.json's rows beside the CPU's throughput where that file exists. `scale --from-log` reads the
rows that `marljax bench scale` printed into an offline GPU protocol's OUT/bench_scale.log
(experiments/gpu_protocol.sh), measuring nothing: a node with no network brings back its log.
`--quick` writes to a temporary directory, never over the committed figures.

Figures from a shared CPU (this project's 2-core machines) say how the curves compare within one
sitting; their absolute times mean little. Run them on a GPU node with `--out DIR` and put the
card's name in the docs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from readme_figures import ASYNC_COMMON, ASYNC_ROWS, TWO_DEVICES, last_json, marljax  # experiments/, beside this file

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "benchmarks"
NUM_ENVS = (16, 32, 64, 128, 256, 512, 1024)


def _bench(args: Sequence[str], env: dict[str, str] | None = None) -> tuple[str, dict]:
    """`marljax bench ARGS` (readme_figures' runner): the command as a user types it, and its JSON line."""
    return "marljax bench " + " ".join(args), last_json(marljax(["bench", *args], env))


def _machine() -> dict:
    import jax

    device = jax.devices()[0]
    return {"platform": device.platform, "device_kind": device.device_kind, "cpu": platform.processor() or "?",
            "cores": os.cpu_count(), "date": datetime.date.today().isoformat()}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# measuring: each returns the JSON-able record its plot is drawn from


def measure_curves(quick: bool, jaxmarl: Path | None) -> dict:
    if jaxmarl is None:
        raise SystemExit("curves: --jaxmarl PATH (a checkout of FLAIROx/JaxMARL) is needed")
    args = ["--jaxmarl", str(jaxmarl), "--seeds", "1" if quick else "2", "--timesteps", "2e4" if quick else "1e7"]
    with tempfile.TemporaryDirectory() as tmp:
        curves = Path(tmp) / "curves.json"
        cmd = [sys.executable, "experiments/jaxmarl_side_by_side.py", *args, "--with-defaults", "--curves", str(curves)]
        print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
        line = last_json(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
        sides = json.loads(curves.read_text())
    command = "python " + " ".join(cmd[1:-2])
    return {"command": command, "machine": _machine(), "summary": line, "sides": sides}


def measure_throughput(quick: bool, jaxmarl: Path | None) -> dict:
    rows = []
    for n in NUM_ENVS[:2] if quick else NUM_ENVS:
        command, r = _bench([f"num_envs={n}", *(["num_steps=8"] if quick else [])])
        rows.append({"num_envs": n, "command": command, "train": r["train_env_steps_per_s"],
                     "env_only": r["env_only_env_steps_per_s"], "compile_s": r["compile_s"]})  # fmt: skip
    return {"command": "marljax bench num_envs=N", "machine": _machine(), "rows": rows}


def scale_rows(text: str) -> list[dict]:
    """The rows of `marljax bench scale`'s output: one JSON line per num_envs (not its last line, the summary)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("{") and '"env_only_env_steps_per_s"' in line:
            r = json.loads(line)
            rows.append({"num_envs": r["num_envs"], "train": r["train_env_steps_per_s"], "platform": r["platform"],
                         "env_only": r["env_only_env_steps_per_s"], "compile_s": r["compile_s"], "mfu": r["mfu"],
                         "peak_device_mb": r.get("peak_device_mb")})  # fmt: skip
    if not rows:
        raise SystemExit("scale: no `marljax bench scale` rows (JSON lines with env_only_env_steps_per_s) found")
    return rows


def measure_scale(quick: bool, jaxmarl: Path | None) -> dict:
    args = ["bench", "scale", *(["num_steps=8", "--max-envs", "256"] if quick else ["--timeout", "100"])]
    return {"command": "marljax " + " ".join(args), "machine": _machine(), "rows": scale_rows(marljax(args))}


def scale_from_log(log: Path, device_kind: str, date: str) -> dict:
    """scale's record from a protocol's bench_scale.log: its first line is the command after `$ `."""
    text = log.read_text()
    command = text.splitlines()[0].removeprefix("$ ").replace("python3 -m marljax.cli", "marljax")
    rows = scale_rows(text)
    machine = {"platform": rows[0]["platform"], "device_kind": device_kind, "cpu": "?", "cores": None, "date": date}
    return {"command": command, "machine": machine, "rows": rows, "log": log.name}


def measure_sweep(quick: bool, jaxmarl: Path | None) -> dict:
    args = ["sweep", *(["total_timesteps=4096", "num_envs=8", "num_steps=16"] if quick else [])]
    command, r = _bench(args)
    return {"command": command, "machine": _machine(), "result": r}


def measure_async(quick: bool, jaxmarl: Path | None) -> dict:
    rows = []
    for label, args in ASYNC_ROWS:
        quick_args = ["num_envs=8", "num_steps=8"] if quick else []
        command, r = _bench([*ASYNC_COMMON, *args, *quick_args],
                            env=TWO_DEVICES)  # fmt: skip
        rows.append({"label": label, "command": f"XLA_FLAGS={TWO_DEVICES['XLA_FLAGS']} {command}",
                     **{k: r[k] for k in ("generation_samples_per_s", "learning_samples_per_s", "sync_samples_per_s",
                                          "async_samples_per_s", "overlap_efficiency")}})  # fmt: skip
    return {"command": "marljax bench mode=async ...", "machine": _machine(), "rows": rows}


# ---------------------------------------------------------------------------------------------
# drawing: each takes the saved record and returns a figure


def _where(record: dict) -> str:
    m = record["machine"]
    cores = f", {m['cores']} cores" if m.get("cores") else ""
    return f"{m['device_kind']} ({m['platform']}{cores}), {m['date']}"


def _smooth(values: Sequence[float | None], points: int = 100) -> np.ndarray:
    """Means over consecutive blocks of updates, about `points` of them (a per-update return is noisy)."""
    x = np.asarray(values, dtype=float)  # [U]; None (no episode ended in that update) becomes nan
    block = max(1, x.size // points)
    return np.nanmean(x[: x.size // block * block].reshape(-1, block), axis=1)  # [U // block]


def draw_curves_on(ax, record: dict) -> None:
    for side in record["sides"].values():
        ax.plot(_smooth(side["time_s"]), _smooth(side["return"]), label=side["label"])
    ax.set_xlim(left=0)
    ax.set_xlabel("wall-clock seconds (compile included)")
    ax.set_ylabel("return per agent")
    ax.set_title("IPPO on MPE simple_spread")
    ax.legend(fontsize=8)


def draw_throughput_on(ax, record: dict, machine: str = "") -> None:
    rows = record["rows"]
    n = [r["num_envs"] for r in rows]
    on = f", {machine}" if machine else ""
    ax.plot(n, [r["train"] for r in rows], "o-", label=f"training (rollout + update){on}")
    ax.plot(n, [r["env_only"] for r in rows], "s--", label=f"env alone (random actions){on}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("num_envs (one seed)")
    ax.set_ylabel("env-steps/s")
    ax.set_title("throughput against num_envs")
    ax.legend(fontsize=8)


def _figure(record: dict, size: tuple[float, float]) -> tuple[Figure, Any]:
    """A figure of one plot, titled with the machine and date the record was measured on."""
    fig = Figure(figsize=size, layout="constrained")
    fig.suptitle(_where(record), fontsize=8)
    return fig, fig.add_subplot()


def draw_curves(record: dict) -> Figure:
    fig, ax = _figure(record, (6, 4))
    draw_curves_on(ax, record)
    return fig


def draw_throughput(record: dict) -> Figure:
    fig, ax = _figure(record, (6, 4))
    draw_throughput_on(ax, record)
    return fig


def draw_sweep(record: dict) -> Figure:
    r = record["result"]
    fig, ax = _figure(record, (7, 3.5))
    labels = [f"{r['runs']} runs as\none vmapped program", f"the same {r['runs']} runs\none after another"]
    compile_s = [r["vmapped_compile_s"], r["sequential_compile_s"]]
    run_s = [r["vmapped_run_s"], r["sequential_run_s"]]
    ax.barh(labels, compile_s, label="compile")
    ax.barh(labels, run_s, left=compile_s, label="run")
    ax.set_xlabel("seconds for the whole sweep")
    ax.set_title(
        f"`marljax bench sweep`: {r['speedup_total']:.1f}x end to end, {r['speedup_run_only']:.1f}x run only",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return fig


def draw_async(record: dict) -> Figure:
    rows = record["rows"]
    fig, ax = _figure(record, (7, 4))
    keys = [("generation_samples_per_s", "actors alone"), ("learning_samples_per_s", "learner alone"),
            ("sync_samples_per_s", "sync loop"), ("async_samples_per_s", "async")]  # fmt: skip
    width = 0.8 / len(keys)
    x = np.arange(len(rows))
    for i, (key, label) in enumerate(keys):
        ax.bar(x + i * width, [r[key] for r in rows], width, label=label)
    ax.set_xticks(
        x + width * (len(keys) - 1) / 2,
        [f"{textwrap.fill(r['label'].replace('`', ''), 32)}\noverlap {r['overlap_efficiency']:.2f}, "
         f"async / sync {r['async_samples_per_s'] / r['sync_samples_per_s']:.2f}x" for r in rows],
    )  # fmt: skip
    ax.set_yscale("log")  # the rows' rates differ 10x: on a linear axis the slow env's bars vanish
    ax.set_ylabel("env-steps/s")
    ax.set_title("async actor-learner: generation and learning overlapped")
    ax.legend(fontsize=8)
    return fig


def draw_headline(out: Path) -> Figure:
    curves, throughput = (json.loads((out / f"{name}.json").read_text()) for name in ("curves", "throughput"))
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    draw_curves_on(left, curves)
    scale = out / "scale.json"
    if scale.exists():  # the accelerator's rows beside the CPU's: each series names its machine
        accelerator = json.loads(scale.read_text())
        draw_throughput_on(right, throughput, "2-core CPU")
        draw_throughput_on(right, accelerator, accelerator["machine"]["device_kind"])
    else:
        draw_throughput_on(right, throughput)
    fig.suptitle(f"left and CPU rows: {_where(curves)}", fontsize=8)
    return fig


PLOTS: dict[str, tuple[Callable[[bool, Path | None], dict], Callable[[dict], Figure]]] = {
    "curves": (measure_curves, draw_curves),
    "throughput": (measure_throughput, draw_throughput),
    "scale": (measure_scale, draw_throughput),
    "sweep": (measure_sweep, draw_sweep),
    "async": (measure_async, draw_async),
}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plot", choices=[*PLOTS, "headline"])
    parser.add_argument("--jaxmarl", type=Path, help="a checkout of FLAIROx/JaxMARL (curves)")
    parser.add_argument("--quick", action="store_true", help="tiny budgets, written to a temporary directory")
    parser.add_argument("--replot", action="store_true", help="redraw from the saved JSON, measuring nothing")
    parser.add_argument("--from-log", type=Path, help="scale: a GPU protocol's bench_scale.log, measuring nothing")
    parser.add_argument("--device-kind", default="?", help="with --from-log: the card's name (the log has none)")
    parser.add_argument("--date", default=datetime.date.today().isoformat(), help="with --from-log: when it ran")
    parser.add_argument("--out", type=Path, default=None, help=f"where the JSON and PNG go (default {OUT})")
    args = parser.parse_args(argv)
    out = args.out or (Path(tempfile.mkdtemp(prefix="benchmark_plots_")) if args.quick else OUT)
    out.mkdir(parents=True, exist_ok=True)
    if args.plot == "headline":
        fig = draw_headline(out)
    else:
        measure, draw = PLOTS[args.plot]
        data = out / f"{args.plot}.json"
        if args.from_log and args.plot != "scale":
            raise SystemExit("--from-log: only the scale plot reads a log")
        if args.from_log:
            data.write_text(json.dumps(scale_from_log(args.from_log, args.device_kind, args.date), indent=1) + "\n")
        elif not args.replot:
            record = measure(args.quick, args.jaxmarl)
            data.write_text(json.dumps(record, indent=1) + "\n")
        fig = draw(json.loads(data.read_text()))
    png = out / f"{args.plot}.png"
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
