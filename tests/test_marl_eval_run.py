"""marl-eval JSON of one training run, from hand-written metrics rows with known values."""

import json

from marljax.config import load_config
from marljax.train.marl_eval_run import env_task, run_marl_eval, write_run_marl_eval


def _rows() -> list[dict]:
    """Four chunks of a 3-seed SMAX run; the 2nd and 4th evaluated; seed 2's last evaluation NaN."""
    return [
        {"update": 2, "env_steps": 64, "return_mean": None, "return_per_seed": [None, None, None]},
        {"update": 4, "env_steps": 128, "return_mean": 1.0, "return_per_seed": [1.0, 1.0, 1.0],
         "eval_return": 2.0, "eval_return_per_seed": [1.0, 2.0, 3.0], "eval_episode_length": 25.5,
         "eval_win_rate": 0.5, "eval_win_rate_per_seed": [0.25, 0.5, 0.75]},
        {"update": 6, "env_steps": 192, "return_mean": 2.0, "return_per_seed": [2.0, 2.0, 2.0]},
        {"update": 8, "env_steps": 256, "return_mean": 3.0, "return_per_seed": [3.0, 3.0, 3.0],
         "eval_return": 5.0, "eval_return_per_seed": [4.0, 6.0, float("nan")], "eval_episode_length": 30.0,
         "eval_win_rate": 1.0, "eval_win_rate_per_seed": [1.0, 1.0, float("nan")]},
    ]  # fmt: skip


def _config(*env: str):
    return load_config(
        None, ["num_seeds=3", "algo=mappo", *(env or ["env=HeuristicEnemySMAX", "env_kwargs.scenario=3m"])]
    )


def test_layout_and_values():
    data = run_marl_eval(_rows(), _config())
    assert list(data) == ["HeuristicEnemySMAX"] and list(data["HeuristicEnemySMAX"]) == ["HeuristicEnemySMAX"]
    seeds = data["HeuristicEnemySMAX"]["HeuristicEnemySMAX"]["mappo"]
    assert list(seeds) == ["seed_0", "seed_1", "seed_2"]
    assert seeds["seed_0"] == {
        "step_0": {"step_count": 128, "return": [1.0], "episode_length": [25.5], "win_rate": [0.25]},
        "step_1": {"step_count": 256, "return": [4.0], "episode_length": [30.0], "win_rate": [1.0]},
        "absolute_metrics": {"return": [4.0], "win_rate": [1.0]},  # the last evaluation, repeated
    }
    assert seeds["seed_1"]["step_1"]["return"] == [6.0] and seeds["seed_1"]["absolute_metrics"]["return"] == [6.0]
    # seed 2's last evaluation is NaN: left out, so its final (absolute) value is its first evaluation
    assert list(seeds["seed_2"]) == ["step_0", "absolute_metrics"]
    assert seeds["seed_2"]["absolute_metrics"] == {"return": [3.0], "win_rate": [0.75]}
    assert list(seeds["seed_0"])[-1] == "absolute_metrics"  # marl-eval reads the last entry as the final one


def test_no_win_rate_without_a_win_condition_and_env_task_split():
    rows = [{k: v for k, v in r.items() if "win" not in k} for r in _rows()]
    data = run_marl_eval(rows, _config("env=MPE_simple_spread_v3"))
    seeds = data["MPE"]["simple_spread_v3"]["mappo"]
    assert seeds["seed_0"]["step_0"] == {"step_count": 128, "return": [1.0], "episode_length": [25.5]}
    assert seeds["seed_0"]["absolute_metrics"] == {"return": [4.0]}
    assert env_task("MPE_simple_spread_v3") == ("MPE", "simple_spread_v3")


def test_write_is_atomic_json_and_none_without_evaluations(tmp_path):
    config = _config()
    path = write_run_marl_eval(_rows(), config, tmp_path)
    assert path == tmp_path / "metrics.json"
    assert json.loads(path.read_text()) == run_marl_eval(_rows(), config)
    assert not (tmp_path / "metrics.json.tmp").exists()
    assert write_run_marl_eval(_rows()[:1], config, tmp_path / "none") is None
    assert not (tmp_path / "none").exists()
    assert "NaN" not in path.read_text()  # strict JSON: marl-eval's reader refuses NaN


def test_jumanji_ids_are_named_and_not_import_paths():
    """A Jumanji id is an env family and task, and rebuilding it runs no user code (no trust_code
    needed to load its policy); an import path, the PettingZoo form included, does run code."""
    from marljax.envs.registry import is_import_path

    assert env_task("jumanji:RobotWarehouse-v0") == ("Jumanji", "RobotWarehouse-v0")
    assert not is_import_path("jumanji:RobotWarehouse-v0")
    assert not is_import_path("MPE_simple_spread_v3")
    assert is_import_path("my_pkg.envs:make_env") and is_import_path("pettingzoo:my_pkg:parallel_env")
