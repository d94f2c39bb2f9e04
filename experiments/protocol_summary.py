"""The table at the end of experiments/gpu_protocol.sh: every figure its steps printed.

    python experiments/protocol_summary.py OUT_DIR

Reads the logs gpu_protocol.sh left in OUT_DIR (each benchmark's last line is its JSON) and
prints one table; a step that did not run or failed says so. Then one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _last_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    for line in reversed(path.read_text().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def _last_line(path: Path, starts: str) -> str | None:
    if not path.is_file():
        return None
    lines = [line for line in path.read_text().splitlines() if line.strip().startswith(starts)]
    return lines[-1].strip() if lines else None


def summary(out: Path) -> tuple[list[str], dict]:
    steps = {}
    if (out / "steps.tsv").is_file():
        for line in (out / "steps.tsv").read_text().splitlines():
            name, rc, *_ = line.split("\t")
            steps[name] = int(rc)
    status = lambda name: "not run" if name not in steps else ("ok" if steps[name] == 0 else f"FAILED (exit {steps[name]})")  # noqa: E731
    lines, figures = [], {"steps": steps}

    doctor = _last_json(out / "doctor.log")
    if doctor:
        kinds = sorted({f"{d['platform']} {d['kind']}" for d in doctor["devices"]})
        lines.append(f"doctor        {status('doctor')}: jax {doctor['versions']['jax']}, backend {doctor['backend']}, "
                     f"{doctor['device_count']} x {', '.join(kinds)}; builds {doctor['builds'] or 'cpu'}")  # fmt: skip
        figures["doctor"] = {k: doctor[k] for k in ("backend", "device_count", "builds")}
    else:
        lines.append(f"doctor        {status('doctor')}")

    tests = _last_line(out / "tests.log", "=") or _last_line(out / "tests.log", "")
    lines.append(f"tests         {status('tests')}: {tests or '-'}")

    scale = _last_json(out / "bench_scale.log")
    lines.append(f"bench-scale   {status('bench_scale')}" + (f", stopped: {scale['stopped']}" if scale else ""))
    if scale:
        figures["bench_scale"] = scale["rows"]
        lines.append(f"  {'envs/device':>11} {'env-steps/s':>14} {'MFU':>7} {'peak MiB':>9} {'compile s':>9}")
        for r in scale["rows"]:
            memory = r.get("peak_device_mb") or r.get("peak_rss_mb")
            lines.append(f"  {r['num_envs_per_device']:>11,} {r['train_env_steps_per_s']:>14,.0f} {100 * r['mfu']:>6.2f}% "
                         f"{memory:>9,.0f} {r['compile_s']:>9.1f}")  # fmt: skip

    train = _last_line(out / "train.log", "return per agent")
    wall = (out / "train_wall.tsv").read_text().split()[-1] if (out / "train_wall.tsv").is_file() else None
    lines.append(f"train         {status('train')}: {train or '-'}" + (f"; whole process {float(wall):.0f} s" if wall else ""))
    figures["train"] = {"summary": train, "wall_s": float(wall) if wall else None}

    for name in ("jaxmarl_own_config", "jaxmarl_4096_envs"):
        side = _last_json(out / f"{name}.log")
        lines.append(f"{name:<13} {status(name)}")
        if side:
            figures[name] = side
            for who in ("jaxmarl", "marljax"):
                r = side[who]
                lines.append(f"  {who:<8} {r['env_steps_per_s']:>14,.0f} env-steps/s, compile {r['compile_s']:.1f} s, "
                             f"final return {r['final_return']:.2f} per agent")  # fmt: skip
            lines.append(f"  marljax / jaxmarl: {side['speedup']:.2f}x at {side['num_envs']} envs x {side['seeds']} seeds")
    return lines, figures


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python experiments/protocol_summary.py OUT_DIR (the directory gpu_protocol.sh wrote)", file=sys.stderr)
        return 2
    lines, figures = summary(Path(argv[0]))
    print("\n".join(lines))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
