"""`marljax bench target`: stops at the chunk that reaches the target, reports figures that agree
with metrics.jsonl, and fails clearly when the budget runs out or the target is bad."""

import json
import signal

import pytest

from marljax.bench import target as target_module
from marljax.bench.target import StoppedUnsaved, TargetNotReached, default_target, run_target_bench
from marljax.cli import main, resolve
from marljax.config import ConfigError, load_config

# 4 chunks of one update, 4 envs x 32 steps: MPE's 25-step episodes end in every chunk
TINY = ["num_envs=4", "num_steps=32", "total_timesteps=512", "num_chunks=4", "num_seeds=2"]


def test_stops_at_the_first_chunk_that_reaches_the_target(tmp_path):
    config = load_config(None, [*TINY, f"out_dir={tmp_path / 'run'}"])
    lines: list[str] = []
    result = run_target_bench(config, target=-1e4, log=lines.append)  # any return reaches it
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and result["chunks"] == 1  # stopped after the first of 4 chunks
    assert result["env_steps"] == rows[0]["env_steps"] == 128
    assert result["env_steps_all_seeds"] == 256
    assert result["return"] == pytest.approx(sum(rows[0]["return_per_seed"]) / 2)
    assert result["curve"] == [[128, result["wall_s"], result["return"]]]
    assert 0 < result["compile_s"] < result["wall_s"]
    assert json.loads(lines[-1]) == result  # the JSON line comes last


def test_a_target_not_reached_within_the_budget_is_a_clear_error(tmp_path):
    config = load_config(None, [*TINY, "num_chunks=2", f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(TargetNotReached, match=r"target=1e\+06 not reached within total_timesteps=512 .*best -?\d"):
        run_target_bench(config, target=1e6, log=lambda line: None)


def stopped_after_two_chunks(run, log, on_row, on_compiled):
    """Stands in for train: two chunks' rows, then the stop SIGTERM causes at a chunk boundary."""
    on_row({"env_steps": 128, "return_per_seed": [-30.0, -28.0]})
    on_row({"env_steps": 256, "return_per_seed": [-25.0, -27.0]})
    raise target_module.Stopped(signal.SIGTERM, 2, f"{run.out_dir}/checkpoints/2")


def test_a_stopped_run_in_its_own_temporary_directory_offers_no_resume(monkeypatch, tmp_path):
    monkeypatch.setattr(target_module, "train", stopped_after_two_chunks)
    config = load_config(None, TINY)
    with pytest.raises(StoppedUnsaved) as stopped:
        run_target_bench(config, target=1e6, log=lambda line: None)
    message = str(stopped.value)
    assert "SIGTERM at update 2 (best -26.000 at 256 env steps)" in message and "temporary" in message
    assert "resume=true" not in message and stopped.value.exit_code == 143
    # negative control: with an out_dir of the caller's the checkpoint stays, and so does the resume hint
    with pytest.raises(target_module.Stopped, match=r"continue with resume=true") as kept:
        run_target_bench(load_config(None, [*TINY, f"out_dir={tmp_path}"]), target=1e6, log=lambda line: None)
    assert not isinstance(kept.value, StoppedUnsaved)


@pytest.mark.parametrize(
    "args, message",
    [
        (["target=abc"], "target: expected a number"),
        (["target=nan"], "target: expected a finite number"),
        (["env=MPE_simple_tag_v3"], "target: no default target for env=MPE_simple_tag_v3"),
    ],
)
def test_bad_targets_are_refused_before_compiling(args, message, capsys):
    assert main(["bench", "target", *args]) == 2
    assert message in capsys.readouterr().err


def test_default_targets():
    assert default_target(load_config(None, [])) == -20.3
    smax = load_config(None, ["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"])
    assert default_target(smax) == 1.8
    arguments = resolve(["bench", "target"])[0][-1].arguments
    args = arguments.parse(["num_envs=8", "target=-19.5"])
    assert args.options == {"target": -19.5} and args.overrides == ["num_envs=8"]
    with pytest.raises(ConfigError, match="target"):
        arguments.parse(["target=inf"])
