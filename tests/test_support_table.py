"""The algorithm support table (marljax/algos/support.py) against the code: the README and the
algorithms guide hold the generated table; every "no" cell is refused in one line before anything
compiles; every "yes" cell runs a 2-update smoke through the command line (nightly: about 50 runs),
and a "yes" cell whose code path is broken fails its smoke (the negative control)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from marljax.algos import registry, support
from marljax.config import ConfigError, load_config, set_dotted
from marljax.train.wiring import make_adapter
from tests._multihost import device_env, two_processes

ROOT = Path(__file__).resolve().parents[1]
TINY = ["num_envs=4", "num_steps=4", "total_timesteps=32", "num_chunks=2", "eval_episodes=2", "progress=false",
        "plot=false"]  # fmt: skip
REPLAY = ["replay.buffer_size=16", "replay.batch_size=4", "replay.learning_starts=0"]
HOST_ENV = "env=pettingzoo:marljax.testing.host_spread:parallel_env"

# feature -> (does the algorithm declare it, the settings that ask for it, fake devices it needs)
FEATURES = {
    "recurrent": (lambda s: s.recurrent, ["recurrent=true"], 1),
    "continuous": (lambda s: "continuous" in s.actions, ["env_kwargs.action_type=Continuous"], 1),
    "async": (lambda s: s.async_mode, ["mode=async"], 1),
    "host_envs": (lambda s: s.host_envs, ["mode=async", HOST_ENV], 1),
    # spread's 3 agents over 3 devices, which also split the environments while acting: 6 of them
    "agent_axis": (
        lambda s: s.agent_axis,
        ["param_sharing=independent", "mesh.agent=3", "num_envs=6", "total_timesteps=48"],
        3,
    ),
    "resume": (lambda s: s.resume, [], 1),
    "sweeps": (lambda s: s.sweeps, [], 1),
    "processes": (lambda s: s.processes, [], 2),
}


def _base(algo: str, feature: str = "") -> list[str]:
    schema = registry.get(algo).schema
    replay = REPLAY if "replay" in schema.sections else []
    box = [] if "discrete" in schema.supports.actions else ["env_kwargs.action_type=Continuous"]
    sharing = [] if "shared" in schema.supports.param_sharing else [f"param_sharing={schema.supports.param_sharing[0]}"]
    # an offline algorithm's smoke learns from a dataset; its "no" cells are refused without one
    data = [f"offline.dataset={_dataset(feature == 'continuous')}"] if "offline" in schema.sections and feature else []
    return [f"algo={algo}", *TINY, *replay, *box, *sharing, *data]


@functools.cache
def _dataset(continuous: bool) -> Path:
    """An offline algorithm learns from a dataset (marljax/algos/offline.py): one with MPE spread's shapes."""
    from tests._offline import spread_dataset

    return spread_dataset(Path(tempfile.mkdtemp(prefix="support-table-")), continuous=continuous)


def _cells(declared: bool) -> list[tuple[str, str]]:
    return [
        (algo, feature)
        for algo in registry.names()
        for feature, (has, _, _) in FEATURES.items()
        if bool(has(registry.get(algo).schema.supports)) == declared
    ]


def test_the_readme_and_the_guide_hold_the_generated_table():
    for name in support.FILES:
        text = (ROOT / name).read_text()
        assert support.replaced(text, name) == text, f"{name}: run python -m marljax.algos.support --write"
    with pytest.raises(ValueError, match="no support-table markers"):  # the check can fail
        support.replaced("a page without the table", "page.md")


def test_the_table_prints_and_a_mistyped_flag_is_one_line(capsys):
    assert support.main([]) == 0 and capsys.readouterr().out.startswith("| `algo=` |")
    assert support.main(["--wrte"]) == 2
    assert capsys.readouterr().err == (
        "python -m marljax.algos.support: unknown option --wrte; did you mean --write? "
        "(usage: python -m marljax.algos.support [--write])\n"
    )


@pytest.mark.parametrize(("algo", "feature"), _cells(declared=False))
def test_a_no_cell_is_refused_in_one_line(algo, feature):
    _, settings, _ = FEATURES[feature]
    with pytest.raises(ConfigError) as info:
        make_adapter(load_config(None, [*_base(algo), *settings]))  # nothing is compiled
    message = str(info.value)
    field = message.split(":")[0]  # the field it names: one the cell sets, or the algorithm that lacks it
    assert "\n" not in message and (field == "algo" or field in " ".join(settings)), message


def _marljax(args: list[str], devices: int = 1, prelude: str = "") -> subprocess.CompletedProcess:
    code = ["-c", f"import sys\n{prelude}\nfrom marljax.cli import main\nsys.exit(main(sys.argv[1:]))"]
    return subprocess.run([sys.executable, *code, *args], env=device_env(devices), capture_output=True, text=True,
                          timeout=1500, cwd=ROOT)  # fmt: skip


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def smoke(algo: str, feature: str, out: Path, prelude: str = "") -> None:
    """Two updates of `algo` with `feature`, through `marljax` as a user runs it; raises AssertionError
    with the run's last output if it fails or does not end with its updates' rows."""
    _, settings, devices = FEATURES[feature]
    args = [*_base(algo, feature), *settings, f"out_dir={out}"]

    def ok(proc: subprocess.CompletedProcess | tuple[int, str]) -> None:
        rc, text = (proc.returncode, proc.stdout + proc.stderr) if hasattr(proc, "returncode") else proc
        assert rc == 0, f"{algo} {feature}: rc {rc}\n{text[-3000:]}"

    if feature == "sweeps":
        spec = out.parent / f"{out.name}.yaml"
        settings = (a.split("=", 1) for a in args if not a.startswith(("out_dir", "progress")))  # the sweep's own
        base: dict = {}
        for key, value in settings:  # nested: a sweep's base holds sections as mappings (replay: {...})
            set_dotted(base, key, yaml.safe_load(value))
        spec.write_text(json.dumps({"base": base, "axes": {"lr": [1e-3, 3e-3]}, "seeds": 2}))
        ok(_marljax(["sweep", str(spec), f"out_dir={out}", "progress=false"], prelude=prelude))
        assert len(list(out.glob("cells/*/metrics.jsonl"))) == 2, f"{algo}: the sweep's cells"
        return
    if feature == "processes":
        for result in two_processes(["train", *args], devices=1, timeout=1500, prelude=prelude):
            ok(result)
    else:
        ok(_marljax(["train", *args], devices, prelude))
    if feature == "resume":
        ok(_marljax(["train", str(out / "config.yaml"), "resume=true", "total_timesteps=48"], prelude=prelude))
    updates = [row["update"] for row in _rows(out)]
    assert updates and updates[-1] == (3 if feature == "resume" else 2), f"{algo} {feature}: rows {updates}"


@pytest.mark.nightly  # about 50 whole runs of a few seconds' training, each compiling its own program
@pytest.mark.parametrize(("algo", "feature"), _cells(declared=True))
def test_a_yes_cell_runs(algo, feature, tmp_path):
    smoke(algo, feature, tmp_path / "run")


@pytest.mark.nightly
def test_a_yes_cell_whose_code_path_is_broken_fails_its_smoke(tmp_path):
    """The control: IPPO's recurrent network made to raise when built, its `recurrent` cell fails."""
    broken = "import marljax.algos.ippo as m\nm.RecurrentActorCritic = None"
    with pytest.raises(AssertionError, match="ippo recurrent: rc"):
        smoke("ippo", "recurrent", tmp_path / "run", prelude=broken)
