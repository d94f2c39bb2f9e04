"""The summary at the end of experiments/gpu_protocol.sh: every figure its steps printed, each with
the command that printed it, then the table of steps with their exit codes.

    python experiments/protocol_summary.py OUT_DIR [--check]

Reads what gpu_protocol.sh left in OUT_DIR: steps.tsv (step, exit code, seconds, limit) and one
log per step, in which each command stands on a line of its own after "$ ", followed by its
output (a benchmark's last line is its JSON) and "whole process: S s". A step that did not run
or failed says so. Last, one JSON line. --check exits 1 unless every step ran and exited 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

STEPS = ("doctor", "tests", "bench_scale", "train", "jaxmarl_own_config", "jaxmarl_4096_envs", "dtype", "async")


class Block(NamedTuple):
    """One command of a step's log and what it printed."""

    command: str
    lines: list[str]
    wall_s: float | None  # the whole process, as the protocol timed it


class Step(NamedTuple):
    rc: int
    seconds: int | None
    limit: int | None


def read_log(path: Path) -> list[Block]:
    """The commands of a step's log, in order, each with its output."""
    if not path.is_file():
        return []
    blocks: list[Block] = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("$ "):
            blocks.append(Block(line[2:].strip(), [], None))
        elif blocks and line.startswith("whole process: ") and line.endswith(" s"):
            blocks[-1] = blocks[-1]._replace(wall_s=float(line.split()[2]))
        elif blocks:
            blocks[-1].lines.append(line)
    return blocks


def read_steps(out: Path) -> dict[str, Step]:
    steps = {}
    path = out / "steps.tsv"
    for line in path.read_text().splitlines() if path.is_file() else []:
        name, rc, *rest = line.split("\t")
        seconds, limit = (int(v) for v in (rest + ["", ""])[:2]) if len(rest) >= 2 else (None, None)
        steps[name] = Step(int(rc), seconds, limit)
    return steps


def last_json(lines: list[str]) -> dict | None:
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def last_line(lines: list[str], starts: str) -> str | None:
    found = [line.strip() for line in lines if line.strip().startswith(starts)]
    return found[-1] if found else None


def pytest_summary(lines: list[str]) -> str | None:
    """pytest -q's closing line ('12 passed, 3 skipped in 4.5s'), without its '=' frame."""
    for line in reversed(lines):
        text = line.strip().strip("=").strip()
        if " in " in text and any(w in text for w in ("passed", "failed", "error", "skipped", "deselected")):
            return text
    return None


def _doctor(b: Block, figures: dict) -> list[str]:
    r = last_json(b.lines)
    if not r:
        return []
    kinds = sorted({f"{d['platform']} {d['kind']}" for d in r["devices"]})
    figures["doctor"] = {k: r[k] for k in ("backend", "device_count", "builds")} | {"jax": r["versions"]["jax"]}
    return [f"jax {r['versions']['jax']}, python {r['python']}, backend {r['backend']}, {r['device_count']} x "
            f"{', '.join(kinds)}; accelerator build {', '.join(r['builds']) or 'none (CPU)'}"]  # fmt: skip


def _tests(b: Block, figures: dict) -> list[str]:
    text = pytest_summary(b.lines)
    figures["tests"] = text
    skipped = sorted(
        {
            line.split("needs ", 1)[1].split(",")[0]
            for line in b.lines
            if "needs " in line and "not installed here" in line
        }
    )
    return [text or "-"] + ([f"skipped for want of: {', '.join(skipped)}"] if skipped else [])


def _bench_scale(b: Block, figures: dict) -> list[str]:
    r = last_json(b.lines)
    if not r or "rows" not in r:
        return []
    figures["bench_scale"] = r["rows"]
    lines = [
        f"stopped: {r['stopped']}",
        f"{'envs/device':>11} {'env-steps/s':>14} {'MFU':>7} {'peak MiB':>9} {'compile s':>9}",
    ]
    for row in r["rows"]:
        memory = row.get("peak_device_mb") or row.get("peak_rss_mb") or 0
        lines.append(f"{row['num_envs_per_device']:>11,} {row['train_env_steps_per_s']:>14,.0f} {100 * row['mfu']:>6.2f}% "
                     f"{memory:>9,.0f} {row['compile_s']:>9.1f}")  # fmt: skip
    return lines


def _train(b: Block, figures: dict) -> list[str]:
    text = last_line(b.lines, "return per agent")
    figures["train"] = {"summary": text, "wall_s": b.wall_s}
    return [f"{text or '-'}; whole process {b.wall_s:.1f} s" if b.wall_s is not None else text or "-"]


def _side_by_side(b: Block, figures: dict, name: str) -> list[str]:
    r = last_json(b.lines)
    if not r or "speedup" not in r:
        return []
    figures[name] = {k: v for k, v in r.items() if k != "bench"}
    lines = [
        f"{r['num_envs']} envs x {r['seeds']} seeds, {r['timesteps']:.3g} steps each, on {r['platform']} ({r['device_kind']})"
    ]
    for who in ("jaxmarl", "marljax"):
        s = r[who]
        lines.append(f"{who:<8} {s['env_steps_per_s']:>14,.0f} env-steps/s, compile {s['compile_s']:.1f} s, "
                     f"final return {s['final_return']:.2f} per agent")  # fmt: skip
    lines.append(
        f"marljax / jaxmarl: {r['speedup']:.2f}x (the env alone / jaxmarl: {r['env_alone_over_jaxmarl']:.2f}x)"
    )
    return lines


def _bench(b: Block, figures: dict, key: str) -> list[str]:
    r = last_json(b.lines)
    if not r:
        return []
    if "overlap_efficiency" in r:  # mode=async
        figures[key] = {k: r[k] for k in ("generation_samples_per_s", "learning_samples_per_s", "sync_samples_per_s",
                                          "async_samples_per_s", "overlap_efficiency")}  # fmt: skip
        return [f"samples/s: generation {r['generation_samples_per_s']:,.0f}, learning {r['learning_samples_per_s']:,.0f}, "
                f"sync {r['sync_samples_per_s']:,.0f}, async {r['async_samples_per_s']:,.0f}; overlap efficiency "
                f"{r['overlap_efficiency']:.2f}"]  # fmt: skip
    figures[key] = {k: r.get(k) for k in ("num_envs", "train_env_steps_per_s", "mfu", "peak_matmul_gflops",
                                          "peak_matmul_dtype", "compile_s")}  # fmt: skip
    return [f"{r.get('peak_matmul_dtype', '?')}: {r['train_env_steps_per_s']:,.0f} env-steps/s at {r['num_envs']} envs, MFU "
            f"{100 * r['mfu']:.2f}% of a measured {r.get('peak_matmul_dtype', '?')} matmul peak of "
            f"{r['peak_matmul_gflops']:,.0f} GFLOP/s, compile {r['compile_s']:.1f} s"]  # fmt: skip


def figures_of(name: str, blocks: list[Block], figures: dict) -> list[tuple[str, list[str]]]:
    """(command, the lines of figures it printed) for each command of step `name`."""
    found = []
    for i, b in enumerate(blocks):
        if name == "doctor":
            lines = _doctor(b, figures)
        elif name == "tests":
            lines = _tests(b, figures)
        elif name == "bench_scale":
            lines = _bench_scale(b, figures)
        elif name == "train":
            lines = _train(b, figures)
        elif name.startswith("jaxmarl_"):
            lines = _side_by_side(b, figures, name)
        else:
            # dtype: float32 then bfloat16; async: actors beside the learner, then on the host CPU
            key = f"{name}_{i}" if name == "dtype" else (name if i == 0 else f"{name}_cpu_actors")
            lines = _bench(b, figures, key)
        found.append((b.command, lines))
    return found


def status(step: Step | None) -> str:
    if step is None:
        return "not run"
    if step.rc in (124, 137):
        return f"TIMED OUT (exit {step.rc})"
    return "ok" if step.rc == 0 else f"FAILED (exit {step.rc})"


def summary(out: Path) -> tuple[list[str], dict[str, Any]]:
    steps = read_steps(out)
    figures: dict[str, Any] = {"steps": {name: s.rc for name, s in steps.items()}}
    lines = [f"marljax GPU protocol: {out}"]
    for name in STEPS:
        lines.append(f"{name}: {status(steps.get(name))}")
        for command, shown in figures_of(name, read_log(out / f"{name}.log"), figures):
            lines += [f"  {line}" for line in shown] or ["  (no figures)"]
            lines.append(f"  from: {command}")
    lines += ["", f"{'step':<20} {'exit':>5} {'seconds':>8} {'limit':>6}  result"]
    for name in STEPS + tuple(sorted(set(steps) - set(STEPS))):  # a step run alone (perf) too
        s = steps.get(name)
        cells = (
            (s.rc, s.seconds if s.seconds is not None else "-", s.limit if s.limit is not None else "-")
            if s
            else ("-",) * 3
        )
        lines.append(f"{name:<20} {cells[0]:>5} {cells[1]:>8} {cells[2]:>6}  {status(s)}")
    total = sum(s.seconds or 0 for s in steps.values())
    lines.append(f"{'total':<20} {'':>5} {total:>8}")
    return lines, figures


def all_ok(out: Path) -> bool:
    steps = read_steps(out)
    return all(name in steps and steps[name].rc == 0 for name in STEPS)


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--check"]
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python experiments/protocol_summary.py OUT_DIR [--check] (the directory gpu_protocol.sh wrote)",
              file=sys.stderr)  # fmt: skip
        return 2
    out = Path(args[0])
    lines, figures = summary(out)
    print("\n".join(lines))
    print(json.dumps(figures))
    if "--check" in argv and not all_ok(out):
        print("protocol_summary: not every step ran and exited 0", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
