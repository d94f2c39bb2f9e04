"""`marljax bench sequence` (issue 42): Sable's rows per agent count, chunked and parallel, with
MAPPO beside them; figures are printed, never checked against a time."""

import json

import pytest

from marljax.arguments import UsageError
from marljax.bench.sequence import run_sequence_bench
from marljax.cli import main, resolve

TINY = ["num_envs=2", "num_steps=4", "ppo.num_minibatches=1", "ppo.update_epochs=1", "sable.embed_dim=8",
        "hidden_size=8", "sable.chunk_size=2"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.nightly  # nightly since 2026-11-28: CI's time (issue 63); a bench's figures, not a contract of training
def test_rows_per_agent_count_and_model():
    lines: list[str] = []
    result = run_sequence_bench((4,), TINY, lines.append)
    assert json.loads(lines[-1]) == json.loads(json.dumps(result))
    rows = {r["model"]: r for r in result["rows"]}
    assert set(rows) == {"sable, chunk 2", "sable, chunk 4 (parallel)", "mappo (shared)"}
    for r in rows.values():
        assert r["num_agents"] == 4 and r["update_s"] > 0 and r["params"] > 0 and r["temp_mib"] > 0, r
    assert rows["sable, chunk 2"]["params"] == rows["sable, chunk 4 (parallel)"]["params"]  # one network, two forms
    assert "| 4 | sable, chunk 2 |" in "\n".join(lines)
    alone = result["retention_rows"]
    assert [r["num_agents"] for r in alone] == [256, 1024, 4096]
    assert all(r["chunked_mib"] < r["parallel_mib"] for r in alone)  # chunks of 2 hold no N x N scores


def test_bad_agent_lists_are_refused_in_one_line(capsys):
    arguments = resolve(["bench", "sequence"])[0][-1].arguments
    for bad in ("", "4,x", "1,4"):
        with pytest.raises(UsageError) as info:
            arguments.parse(["--agents", bad])
        assert str(info.value).startswith("--agents: expected comma-separated whole numbers >= 2, got ")
    assert main(["bench", "sequence", "--agents", "1,4"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "marljax: bench sequence: --agents: expected comma-separated whole numbers >= 2, got '1,4' "
        "(usage: marljax bench sequence [--agents 4,16,64,128] [key=value ...])"
    ]
    assert main(["bench", "sequence", "--agents", "4", "sable.num_heads=3"]) == 2  # 64 is not divided by 3
    assert "sable.num_heads" in capsys.readouterr().err
