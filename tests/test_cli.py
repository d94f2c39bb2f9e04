"""Command-line smoke tests, each in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from marljax.arguments import Arguments
from marljax.cli import main

NUM_ENVS, NUM_STEPS, TOTAL, CHUNKS = 4, 8, 256, 2


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", "marljax.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _train_args(out_dir: Path, *extra: str) -> list[str]:
    return [
        "train",
        f"num_envs={NUM_ENVS}",
        f"num_steps={NUM_STEPS}",
        f"total_timesteps={TOTAL}",
        f"num_chunks={CHUNKS}",
        f"out_dir={out_dir}",
        "progress=false",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny training run shared by the tests that inspect its outputs."""
    out_dir = tmp_path_factory.mktemp("cli") / "run"
    proc = _run(*_train_args(out_dir))
    return out_dir, proc


def test_train_writes_outputs(trained):
    out_dir, proc = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out_dir / "config.yaml").is_file()
    assert (out_dir / "returns.png").is_file() and (out_dir / "returns.png").stat().st_size > 0

    saved = yaml.safe_load((out_dir / "config.yaml").read_text())
    assert saved["num_envs"] == NUM_ENVS and saved["num_steps"] == NUM_STEPS
    assert saved["total_timesteps"] == TOTAL and saved["out_dir"] == str(out_dir)

    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == CHUNKS
    for row in rows:
        for key in ("update", "env_steps", "env_steps_per_s", "return_mean", "loss_total"):
            assert key in row, key
    num_updates = TOTAL // (NUM_STEPS * NUM_ENVS)
    assert rows[-1]["update"] == num_updates
    # env_steps count one run's (one seed's) steps, as total_timesteps does, whatever num_seeds is
    assert rows[-1]["env_steps"] == num_updates * NUM_STEPS * NUM_ENVS == TOTAL
    assert [r["env_steps"] for r in rows] == sorted(r["env_steps"] for r in rows)
    assert all(isinstance(r["loss_total"], float) for r in rows)
    assert "compiled in" in proc.stdout


def test_rerun_into_same_out_dir_is_refused(trained):
    out_dir, first = trained
    assert first.returncode == 0, first.stderr[-3000:]
    metrics = (out_dir / "metrics.jsonl").read_bytes()
    config = (out_dir / "config.yaml").read_bytes()
    proc = _run(*_train_args(out_dir, "seed=7"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "out_dir" in proc.stderr and "overwrite=true" in proc.stderr
    assert "compiled" not in proc.stdout
    assert (out_dir / "metrics.jsonl").read_bytes() == metrics
    assert (out_dir / "config.yaml").read_bytes() == config


def test_bad_key_exits_2_with_one_line(tmp_path):
    proc = _run(*_train_args(tmp_path / "run", "lrr=1"))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "lrr" in lines[0] and "did you mean 'lr'" in lines[0]
    assert "compiled" not in proc.stdout
    assert not (tmp_path / "run").exists()


def test_unknown_env_exits_2(tmp_path):
    proc = _run(*_train_args(tmp_path / "run", "env=MPE_simple_sprad_v3"))
    assert proc.returncode == 2
    assert "env" in proc.stderr and "MPE_simple_spread_v3" in proc.stderr
    assert "compiled" not in proc.stdout
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_unknown_command_exits_2():
    proc = _run("trian")
    assert proc.returncode == 2
    assert "usage" in proc.stderr


def test_help_exits_0():
    proc = _run("--help")
    assert proc.returncode == 0
    assert "usage: marljax" in proc.stdout
    script = Path(sys.executable).parent / "marljax"
    if script.exists():  # the installed console script
        proc = subprocess.run(
            [str(script), "--help"],
            capture_output=True,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            timeout=120,
        )
        assert proc.returncode == 0
        assert "usage: marljax" in proc.stdout


def test_help_into_a_closed_pipe_ends_quietly():
    """`marljax --help | head -1`: the reader has left before marljax writes. No error line, SIGPIPE's
    status (141); control: with its reader there, the same command prints its usage and exits 0."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write: every write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "marljax.cli", "--help"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            timeout=120,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")
    assert _run("--help").returncode == 0


@pytest.mark.slow
def test_non_finite_loss_stops_the_run_with_a_clear_message(tmp_path):
    # An absurd step size drives the parameters to inf within a few updates.
    out = tmp_path / "nan"
    proc = subprocess.run(
        [sys.executable, "-m", "marljax.cli", "train", "lr=1e30", "max_grad_norm=1e30", "num_envs=4",
         "num_steps=8", "total_timesteps=512", "num_chunks=4", "progress=false", "plot=false", f"out_dir={out}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("marljax: update ") and "non-finite" in last and "loss" in last
    # the rows up to and including the bad chunk were written, then the run stopped
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert 1 <= len(rows) <= 4


def test_help_is_generated_from_the_schema_for_the_chosen_algorithm(capsys):
    from marljax.config import algorithm_schema, schema_fields

    for algo in ("ippo", "qmix"):
        assert main(["train", f"algo={algo}", "--help"]) == 0
        printed = capsys.readouterr().out
        keys = [line.split()[0] for line in printed.splitlines() if line.startswith("  ") and line.split()]
        fields = schema_fields(algo)
        assert keys == [key for key, _, _ in fields]  # every key of the core and of algo's sections, in order
        for key, field, default in fields:  # each with its default for this algorithm and its help line
            line = next(x for x in printed.splitlines() if x.split() and x.split()[0] == key)
            assert field.metadata["help"] in line, key
            assert (str(default).lower() if isinstance(default, bool) else str(default) or "''") in line, key
        assert set(algorithm_schema(algo).sections) == {k.split(".")[0] for k in keys if k.split(".")[0] in
                                                        algorithm_schema(algo).sections}  # fmt: skip
    assert main(["train", "algo=qmix", "--help"]) == 0
    printed = capsys.readouterr().out
    assert "replay.buffer_size" in printed and "\n  ppo." not in printed and "algo=qmix" in printed


@pytest.mark.parametrize(
    "command, words",
    [("sweep", "SWEEP.yaml"), ("report", "SWEEP_DIR"), ("export", "POLICY_DIR"), ("compare", "SWEEP_DIR:CELL")],
)
def test_command_help_prints_usage_instead_of_reading_a_file(command, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command, "--help"]) == 0
    printed = capsys.readouterr().out
    assert f"usage: marljax {command}" in printed and words in printed
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_version(capsys):
    from marljax import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"marljax {__version__} (jax ")


def _missing_from_usage(text: str, commands) -> list[str]:
    """The declared commands (and subcommands) that a usage text does not show:
    each command's usage line and the first words of its summary, each subcommand's row."""
    missing = []
    for command in commands:
        row = f"  {command.name:<8}{command.summary[:30]}" in text
        # a name of 8 or more characters stands on its own line, its summary indented below it
        wrapped = f"\n  {command.name}\n" in text and " ".join(command.summary[:30].split()) in " ".join(text.split())
        if f"marljax {command.name} {command.args}" not in text or not (row or wrapped):
            missing.append(command.name)
        for sub in command.subcommands:
            if f"  {sub.name:<12}{sub.summary[:30]}" not in text:
                missing.append(f"{command.name} {sub.name}")
    return missing


def test_usage_lists_every_declared_command(capsys, monkeypatch):
    from marljax import cli

    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    assert main(["help"]) == 0 and capsys.readouterr().out == printed
    assert _missing_from_usage(printed, cli.COMMANDS) == []
    names = [c.name for c in cli.COMMANDS]
    assert names == ["train", "sweep", "report", "compare", "bench", "export", "record", "finetune", "doctor"]
    assert [c.name for c in cli.BY_NAME["bench"].subcommands] == [
        "throughput",
        "target",
        "scale",
        "agents",
        "sequence",
        "checkpoint",
        "sweep",
        "stragglers",
        "balance",
    ]
    # negative control: a usage without one command's line, or one bench's row, is caught
    assert _missing_from_usage(printed.replace("marljax report SWEEP_DIR", ""), cli.COMMANDS) == ["report"]
    assert _missing_from_usage(printed.replace("  stragglers", ""), cli.COMMANDS) == ["bench stragglers"]
    # the usage comes from the table: a command declared there is listed (and runs) with no other change
    extra = cli.Command(
        "hello", Arguments(more="NAME"), "say hello to NAME", lambda a: print("hello", *a.positional) or 0
    )
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, extra))
    monkeypatch.setitem(cli.BY_NAME, "hello", extra)
    assert main(["--help"]) == 0
    assert _missing_from_usage(capsys.readouterr().out, cli.COMMANDS) == []
    assert main(["hello", "world"]) == 0 and capsys.readouterr().out == "hello world\n"


def test_bench_help_lists_every_bench(capsys):
    from marljax import cli

    assert main(["bench", "--help"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage: marljax bench [NAME] [CONFIG.yaml] [key=value ...]")
    for sub in cli.BY_NAME["bench"].subcommands:
        assert f"  {sub.name:<12}{sub.summary[:30]}" in printed, sub.name
        assert main(["bench", sub.name, "--help"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: marljax bench {sub.name} {sub.args}\n")
    assert main(["help", "bench", "target"]) == 0
    assert "marljax bench target [CONFIG.yaml] [target=R] [key=value ...]" in capsys.readouterr().out
    assert main(["bench", "algo=qmix", "--help"]) == 0  # the default bench's settings, as before
    assert "replay.buffer_size" in capsys.readouterr().out
    assert main(["bench", "nosuch"]) == 2 and "unknown bench 'nosuch'" in capsys.readouterr().err
    assert main(["bench", "nosuch", "--help"]) == 2 and "unknown bench 'nosuch'" in capsys.readouterr().err


def test_a_bench_is_named_after_bench_only(capsys):
    from marljax.cli import resolve, usage

    # the default bench: `bench key=value` and `bench throughput key=value` run one handler
    assert resolve(["bench", "num_envs=4"])[0][-1].subcommands[0].run is resolve(["bench", "throughput"])[0][-1].run
    assert resolve(["bench-target", "target=abc"]) == ((), ["bench-target", "target=abc"])  # no other spelling
    assert "bench-" not in usage()
    assert main(["bench", "target", "target=abc"]) == 2
    assert (
        capsys.readouterr().err == "marljax: config error: target: expected a number (a return per agent), got 'abc'\n"
    )
