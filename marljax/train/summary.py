"""What a finished run says last: what it found, where its time went, where its files are and what
to run next. The same record is `<out_dir>/summary.json` and `RunResult.summary` (`print` it).

The first line keeps its long-standing form, `return per agent A -> B (+C); R env-steps/s` (the
training return per agent of the first and the last chunk that finished an episode, all seeds
pooled), which scripts read. Envs with a win condition (SMAX) add their win rate the same way;
the default env's reference returns (a uniformly random policy, and one that always takes action
0, on the same 1024 episodes) come from `marljax.train.references`, measured by the command named
there.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from marljax.config import Config
from marljax.files import write_text_atomic
from marljax.train.metrics import history_note
from marljax.train.references import reference_for
from marljax.train.timing import time_line

SUMMARY_FILE = "summary.json"


def _rate(sps: float) -> str:
    """36k, 3.1M, 350 (a slow run's 350 is not "0k")."""
    if sps >= 1e6:
        return f"{sps / 1e6:.1f}M"
    return f"{sps / 1e3:.0f}k" if sps >= 1e4 else f"{sps:,.0f}"


def return_line(rows: list[dict]) -> str:
    """First vs last chunk return and mean throughput, one line."""
    scored = [r for r in rows if r.get("return_mean") is not None]
    if not scored:
        return "no episode finished" if rows else "no metrics row to summarise"
    first, last = scored[0]["return_mean"], scored[-1]["return_mean"]
    steps = sum(r["env_steps_per_s"] * r["wall_s"] for r in rows if r.get("env_steps_per_s"))  # every seed's
    sps = steps / max(sum(r["wall_s"] for r in rows), 1e-9)
    return f"return per agent {first:.2f} -> {last:.2f} ({last - first:+.2f}); {_rate(sps)} env-steps/s"


def _first_last(rows: list[dict], key: str) -> tuple[float, float] | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return (values[0], values[-1]) if values else None


@dataclasses.dataclass
class RunSummary:
    """A finished run (or session of a resumed one), as it prints and as summary.json holds it."""

    algo: str
    env: str
    out_dir: str
    update: int  # the last update done
    num_updates: int
    env_steps: int  # of one seed, at the last update
    returns: str  # the `return per agent ...` line
    history: str | None = None  # when the last row is not the last update's (rows set aside on resume)
    win_rate: tuple[float, float] | None = None  # first and last chunk's share of episodes won (SMAX)
    eval_return: float | None = None  # the last greedy evaluation's return per agent, if the run evaluated
    reference: dict | None = None  # this env's measured random / no-op returns (marljax.train.references)
    shaping: str | None = None  # what the training return means under reward shaping
    timing: dict | None = None  # marljax.train.timing's breakdown
    outputs: list[str] = dataclasses.field(default_factory=list)
    next: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (command, what it does)

    def lines(self) -> list[str]:
        out = [self.returns, *([self.history] if self.history else [])]
        if self.win_rate is not None:
            a, b = self.win_rate
            out.append(
                f"win rate {a:.2f} -> {b:.2f} ({b - a:+.2f}) of the episodes finished in the first and last chunk"
            )
        if self.eval_return is not None:
            out.append(f"greedy evaluation at the last update: return per agent {self.eval_return:.2f}")
        if self.reference is not None:
            ref = self.reference
            out.append(
                f"for reference on {self.env}: a random policy scores {ref['random']:.2f} per agent, always "
                f"taking action 0 (standing still) {ref['noop']:.2f} ({ref['episodes']} episodes, "
                f"`{ref['command']}`)"
            )
        if self.shaping:
            out.append(self.shaping)
        if self.timing is not None:
            out.append(time_line(self.timing))
        if self.outputs:
            out.append(f"outputs in {self.out_dir}: {', '.join(self.outputs)}")
        if self.next:
            width = max(len(cmd) for cmd, _ in self.next)
            out += [
                f"{'next:' if i == 0 else '':<6}{cmd:<{width}}   # {what}" for i, (cmd, what) in enumerate(self.next)
            ]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def write(self, out_dir: Path) -> Path:
        return write_text_atomic(Path(out_dir) / SUMMARY_FILE, json.dumps(self.to_dict(), indent=1) + "\n")


def shaping_note(config: Config, rows: list[dict]) -> str | None:
    """Under reward shaping, what the logged return is and why it can fall while the policy learns."""
    rs = config.reward_shaping
    if not rs.info_key:
        if config.env.startswith("overcooked"):  # sparse: a soup is 20 only once it is delivered
            return (
                "overcooked pays only for delivered soups, which early, near-random play rarely earns; IPPO learns "
                "it with a dense bonus annealed away, e.g. reward_shaping.info_key=shaped_reward "
                "reward_shaping.horizon=2.5e5 torso=mlp total_timesteps=5e5 on cramped_room "
                "(docs/guide/environments.md)"
            )
        return None
    fade = (
        f"its weight falls from 1 to 0 over the first {rs.horizon:,} env steps (reward_shaping.horizon)"
        if rs.horizon
        else "at a constant weight (reward_shaping.horizon=0)"
    )
    return (
        f"reward shaping: the policy trains on the env's reward plus its `{rs.info_key}` bonus, {fade}; the "
        "returns above are the env's own reward, which early, bonus-driven play may not earn"
    )


def next_commands(config: Config, out_dir: str, finished: bool) -> list[tuple[str, str]]:
    """The commands a user most likely wants after this run."""
    cmds = []
    if not finished:
        cmds.append((f"marljax train {out_dir}/config.yaml resume=true", "train on from the newest checkpoint"))
    elif not config.anneal_lr:
        more = f"{config.total_timesteps * 2:.0e}".replace("e+0", "e")
        cmds.append(
            (
                f"marljax train {out_dir}/config.yaml resume=true total_timesteps={more}",
                "train on to twice the budget (docs/guide/checkpoints.md)",
            )
        )
    cmds.append((f"marljax compare {out_dir} OTHER_RUN_DIR", "curves and final returns beside another run's"))
    cmds.append((f"marljax export {out_dir} policy/", "one seed's actors, for marljax.load_policy('policy/')"))
    return cmds


def summarize(
    config: Config,
    rows: list[dict],
    out_dir: Path,
    update: int,
    timing: dict | None,
    outputs: list[str],
    finished: bool = True,
) -> RunSummary:
    """The summary of a run that ended at `update` with metrics `rows` (all of them, a resumed
    run's earlier ones too)."""
    evals = [r["eval_return"] for r in rows if r.get("eval_return") is not None]
    return RunSummary(
        algo=config.algo,
        env=config.env,
        out_dir=str(out_dir),
        update=update,
        num_updates=config.num_updates,
        env_steps=update * config.run_steps_per_update,
        returns=return_line(rows),
        history=history_note(rows, update),
        win_rate=_first_last(rows, "win_rate"),
        eval_return=evals[-1] if evals else None,
        reference=reference_for(config),
        shaping=shaping_note(config, rows),
        timing=timing,
        outputs=outputs,
        next=next_commands(config, str(out_dir), finished),
    )


__all__ = ["RunSummary", "SUMMARY_FILE", "return_line", "summarize"]
