"""Where one chunk of training spends its time: the JAX profiler's trace, attributed by named scope.

    python experiments/profile_chunk.py [--updates N] [--envs 16 1024] [key=value ...]

For each environment count: compile the sharded chunk exactly as `marljax train` does, run it once
to warm up, then trace one more run with `jax.profiler` (offline, on CPU too) and read the trace
back with `jax.profiler.ProfileData`. Every executed XLA op (a thunk on CPU) is attributed to a
phase by the first `jax.named_scope` label in its HLO metadata (`policy`, `env_step`, `episodes`,
`swap`, `gae`, `shuffle`, `forward_backward`, `optimizer`; see acting.py, ippo.py, learning.py);
ops with no label are the scans' plumbing (stacking the trajectory, slicing minibatches, keys).

Shares are of the summed op time (both CPU cores together, so the sum can exceed the wall time).
Bytes moved are each data-movement op's output bytes times its executions in the trace; FLOPs
per update come from `marljax.bench.train.count_flops` (XLA's cost analysis of the unscanned
pieces), so `bytes / FLOP` compares the two.
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import tempfile
import time

import jax

from marljax.bench.train import count_flops, unsharded_pieces
from marljax.config import load_config
from marljax.parallel.mesh import seed_keys, shard_trainer
from marljax.train.wiring import prepare

PHASES = ("policy", "env_step", "episodes", "swap", "gae", "shuffle", "forward_backward", "optimizer")
CONTAINERS = {"while", "call", "conditional"}  # their thunks span their bodies' ops: not counted twice
MOVES = ("dynamic-update-slice", "gather", "scatter", "transpose", "dynamic-slice", "concatenate", "copy", "slice")
DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2, "f64": 8, "s64": 8,
               "u64": 8}  # fmt: skip
INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.*)$")
COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) .*\{$")


class Op:
    """One HLO instruction of the compiled chunk: what it is, where it came from, what it writes."""

    def __init__(self, opcode: str, shape: str, scope: str, calls: str | None, computation: str, operands: list[str]):
        self.opcode, self.shape, self.scope, self.calls, self.computation = opcode, shape, scope, calls, computation
        self.operands, self.out_bytes = operands, _bytes(shape)


def _type_and_rest(text: str) -> tuple[str, str]:
    """Split 'TYPE opcode(...)...' where TYPE may be a parenthesised tuple."""
    if not text.startswith("("):
        return tuple(text.split(" ", 1))  # type: ignore[return-value]
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return text[: i + 1], text[i + 2 :]
    return text, ""


def _bytes(shape_text: str) -> int:
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape_text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * DTYPE_BYTES.get(dtype, 4)
    return total


def _scope(op_name: str) -> str:
    """The leftmost phase label in a JAX name stack; 'loop plumbing' where there is none."""
    hits = [(op_name.find(f"/{p}"), p) for p in PHASES if re.search(rf"/{p}(/|$)", op_name)]
    return min(hits)[1] if hits else "loop plumbing"


def parse_hlo(text: str) -> tuple[dict[str, Op], dict[str, set[str]]]:
    """(instruction name -> Op, computation name -> the opcodes it holds) of compiled HLO text."""
    ops: dict[str, Op] = {}
    holds: dict[str, set[str]] = collections.defaultdict(set)
    computation = ""
    for line in text.splitlines():
        if m := COMPUTATION.match(line):
            computation = m.group(1)
            continue
        if not (m := INSTRUCTION.match(line)):
            continue
        name, rest = m.groups()
        shape, rest = _type_and_rest(rest)
        opcode, args = rest.split("(", 1) if "(" in rest else (rest, "")
        operands = re.findall(r"%([\w.\-]+)", args.split(")", 1)[0])
        holds[computation].add(opcode)
        op_name = re.search(r'op_name="([^"]*)"', rest)
        calls = re.search(r"calls=%([\w.\-]+)", rest)
        ops[name] = Op(opcode, shape, _scope(op_name.group(1)) if op_name else "loop plumbing",
                       calls.group(1) if calls else None, computation, operands)  # fmt: skip
    _label_matmuls(ops, holds)
    return ops, holds


def _label_matmuls(ops: dict[str, Op], holds: dict[str, set[str]]) -> None:
    """XLA drops the metadata of some matmuls (the backward pass's weight gradients, its own
    matmul fusions): an unlabelled matmul takes the most common label of its computation."""
    labels: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for op in ops.values():
        if op.scope != "loop plumbing":
            labels[op.computation][op.scope] += 1
    for op in ops.values():
        matmul = op.opcode in ("dot", "convolution") or "dot" in holds.get(op.calls or "", set())
        if matmul and op.scope == "loop plumbing" and labels[op.computation]:
            op.scope = labels[op.computation].most_common(1)[0][0]


def moved_bytes(op: Op, ops: dict[str, Op], kind: str) -> int:
    """Bytes an op writes: its output, except an in-place dynamic-update-slice, which writes
    only its update (the scans stack their outputs this way, one slice per trip)."""
    if kind != "dynamic-update-slice":
        return op.out_bytes
    dus = (
        op
        if op.opcode == kind
        else next((o for o in ops.values() if o.computation == op.calls and o.opcode == kind), None)
    )
    update = ops.get(dus.operands[1]) if dus is not None and len(dus.operands) > 1 else None
    return update.out_bytes if update is not None else op.out_bytes


def move_kind(op: Op, holds: dict[str, set[str]]) -> str | None:
    """The data-movement kind of an op (a fusion: the heaviest movement it fuses), or None."""
    inside = holds.get(op.calls, set()) if op.opcode == "fusion" else {op.opcode}
    if "dot" in inside or "convolution" in inside:
        return None
    return next((k for k in MOVES if k in inside), None)


def profile(overrides: list[str], updates: int) -> dict:
    config = load_config(None, overrides)
    env, mesh, trainer = prepare(config)
    fns = shard_trainer(trainer, mesh)
    state = fns.init(seed_keys(config.seed, config.num_seeds))
    compiled = fns.chunk.lower(state, updates).compile()
    ops, holds = parse_hlo(compiled.as_text())
    state, _ = jax.block_until_ready(compiled(state))  # warm-up
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        t = time.perf_counter()
        state, _ = jax.block_until_ready(compiled(state))
        wall = time.perf_counter() - t
        jax.profiler.stop_trace()
        data = jax.profiler.ProfileData.from_file(glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True)[0])

    time_by = collections.Counter()
    bytes_by = collections.Counter()
    runs_by_op = collections.Counter()
    time_by_op = collections.Counter()
    bytes_by_op = collections.Counter()
    written: dict[tuple[str, str], int] = {}
    for plane in data.planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                op = ops.get(stats.get("hlo_op", ""))
                if op is None or "chunk" not in str(stats.get("hlo_module", "")) or op.opcode in CONTAINERS:
                    continue
                time_by[op.scope] += event.duration_ns / 1e9
                name = stats["hlo_op"]
                runs_by_op[name] += 1
                time_by_op[name] += event.duration_ns / 1e9
                kind = move_kind(op, holds)
                if kind is not None:
                    if (name, kind) not in written:
                        written[(name, kind)] = moved_bytes(op, ops, kind)
                    bytes_by[(op.scope, kind)] += written[(name, kind)]
                    bytes_by_op[name] += written[(name, kind)]
    shapes, pieces = unsharded_pieces(config, trainer)
    flops_per_update = count_flops(config, env, shapes, pieces)["flops_per_update_per_seed"] * config.num_seeds
    return {
        "config": config, "wall": wall, "updates": updates, "time_by": time_by, "bytes_by": bytes_by,
        "flops_per_update": flops_per_update, "ops": ops, "holds": holds, "runs_by_op": runs_by_op,
        "time_by_op": time_by_op, "bytes_by_op": bytes_by_op,
    }  # fmt: skip


def report(p: dict) -> None:
    c, n = p["config"], p["updates"]
    total = sum(p["time_by"].values())
    print(f"\n== {c.algo} on {c.env}: {c.num_seeds} seed x {c.num_envs} envs x {c.num_steps} steps, "
          f"{n} updates: wall {p['wall']:.3f} s ({n * c.env_steps_per_update / p['wall']:,.0f} env-steps/s), "
          f"op time {total:.3f} s")  # fmt: skip
    print(f"{'phase':<18} {'ms/update':>10} {'share':>7}")
    for phase in (*PHASES, "loop plumbing"):
        s = p["time_by"].get(phase, 0.0)
        print(f"{phase:<18} {1e3 * s / n:>10.2f} {100 * s / total:>6.1f}%")
    moved = sum(p["bytes_by"].values()) / n
    print("\nbytes moved per update by data-movement ops (output bytes x executions), by phase and kind:")
    for (scope, kind), b in sorted(p["bytes_by"].items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {scope:<18} {kind:<22} {b / n / 1e6:>9.2f} MB")
    flops = p["flops_per_update"]
    print(
        f"total moved {moved / 1e6:.2f} MB/update; FLOPs {flops / 1e6:.1f} M/update; {moved / flops:.3f} bytes per FLOP"
    )
    print("\nlargest movers (MB per update, executions per update, phase, op, output shape):")
    for name, b in p["bytes_by_op"].most_common(8):
        op = p["ops"][name]
        print(f"  {b / n / 1e6:9.2f} MB  x{p['runs_by_op'][name] // n:<6} {op.scope:<16} {name}: {op.shape[:60]}")
    print("\nslowest ops (ms per update, executions per update, phase, opcode or fused opcodes):")
    for name, s in p["time_by_op"].most_common(10):
        op = p["ops"][name]
        inside = sorted(p["holds"].get(op.calls, set()) - {"parameter"}) if op.opcode == "fusion" else [op.opcode]
        print(f"  {1e3 * s / n:8.2f} ms  x{p['runs_by_op'][name] // n:<6} {op.scope:<16} {name}: "
              f"{','.join(inside)[:70]}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 1024])
    parser.add_argument("--updates", type=int, default=2, help="updates in the traced chunk")
    args, overrides = parser.parse_known_args()
    for e in args.envs:
        report(profile([*overrides, f"num_envs={e}"], args.updates))


if __name__ == "__main__":
    main()
