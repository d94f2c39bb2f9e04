"""A small dataset for the offline algorithms' tests, written directly (no policy to compile): MPE
spread's shapes (3 agents, observations of 18, 5 actions, or with `continuous` Box(0, 1, 5) actions
as `env_kwargs.action_type=Continuous` makes them), random numbers, an episode ending every 26 steps
by the time limit, as marljax would describe it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from marljax.datasets import DatasetWriter

SPREAD = "MPE_simple_spread_v3"


def spread_dataset(root: Path, streams: int = 4, steps: int = 60, seed: int = 0, uid: str = "Poor",
                   continuous: bool = False) -> Path:  # fmt: skip
    """<root>/spread.vlt/<uid>: a dataset with MPE spread's shapes, described as recorded there."""
    rng = np.random.default_rng(seed)
    N, O, A = 3, 18, 5  # noqa: E741 (O: the observation width)
    truncations = np.zeros((streams, steps, N), np.float32)
    truncations[:, 25::26] = 1
    exp = {
        "observations": rng.normal(size=(streams, steps, N, O)).astype(np.float32),
        "actions": rng.random((streams, steps, N, A)).astype(np.float32)
        if continuous
        else rng.integers(0, A, (streams, steps, N)).astype(np.int32),
        "rewards": -rng.random((streams, steps, N)).astype(np.float32),
        "terminals": np.zeros((streams, steps, N), np.float32),
        "truncations": truncations,
        "infos": {} if continuous else {"legals": np.ones((streams, steps, N, A), np.float32)},
    }
    writer = DatasetWriter(Path(root) / "spread.vlt", uid, exp, {"env": SPREAD})
    writer.append(exp)
    kwargs = {"action_type": "Continuous"} if continuous else {}
    return writer.finish({"env": SPREAD, "env_kwargs": kwargs, "agents": ["agent_0", "agent_1", "agent_2"]})
