"""JaxMARL's own UPPERCASE baseline YAML runs as `marljax train FILE`: known keys are mapped, the
algorithm comes from the file's name (or algo=), and unknown keys are refused, all of them listed.
The YAMLs below have the shape of JaxMARL's baselines/*/config files (written here, not fetched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marljax.cli import main
from marljax.config import ConfigError, load_config
from marljax.train.loop import train

IPPO_FF_MPE = """\
"LR": 2.5e-4
"NUM_ENVS": 16
"NUM_STEPS": 128
"TOTAL_TIMESTEPS": 1e7
"UPDATE_EPOCHS": 4
"NUM_MINIBATCHES": 4
"GAMMA": 0.99
"GAE_LAMBDA": 0.95
"CLIP_EPS": 0.2
"ENT_COEF": 0.01
"VF_COEF": 0.5
"MAX_GRAD_NORM": 0.5
"ACTIVATION": "tanh"
"ENV_NAME": "MPE_simple_spread_v3"
"ENV_KWARGS": {}
"ANNEAL_LR": True
"SEED": 30
"NUM_SEEDS": 10

# WandB Params
"ENTITY": ""
"PROJECT": "jaxmarl-mpe"
"WANDB_MODE" : "disabled"
"""

IPPO_RNN_SMAX = """\
"LR": 0.004
"NUM_ENVS": 128
"NUM_STEPS": 128
"GRU_HIDDEN_DIM": 128
"FC_DIM_SIZE": 128
"TOTAL_TIMESTEPS": 1e7
"UPDATE_EPOCHS": 4
"NUM_MINIBATCHES": 4
"GAMMA": 0.99
"GAE_LAMBDA": 0.95
"CLIP_EPS": 0.05
"SCALE_CLIP_EPS": False
"ENT_COEF": 0.01
"VF_COEF": 0.5
"MAX_GRAD_NORM": 0.25
"ACTIVATION": "relu"
"ENV_NAME": "HeuristicEnemySMAX"
"MAP_NAME": "2s3z"
"SEED": 0
"ENV_KWARGS":
  "see_enemy_actions": True
  "walls_cause_death": True
  "attack_mode": "closest"
"ANNEAL_LR": True
"ADD_AGENT_ID": False
"""

QMIX_SMAX = """\
"NUM_ENVS": 8
"NUM_STEPS": 128
"BUFFER_SIZE": 5000
"BUFFER_BATCH_SIZE": 32
"TOTAL_TIMESTEPS": 20000000
"AGENT_HIDDEN_DIM": 256
"PARAMETERS_SHARING": True
"EPSILON_START": 1.0
"EPSILON_FINISH": 0.05
"EPSILON_ANNEAL_TIME": 100000
"MIXER_EMBEDDING_DIM": 64
"MAX_GRAD_NORM": 10
"TARGET_UPDATE_INTERVAL": 10
"LR": 0.005
"EPS_ADAM": 0.001
"TD_LAMBDA_LOSS": True
"TD_LAMBDA": 0.6
"GAMMA": 0.99
"VERBOSE": False
"NUM_TEST_EPISODES": 32
"TEST_INTERVAL": 102400
"ENV_NAME": "HeuristicEnemySMAX"
"MAP_NAME": "3m"
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_ippo_ff_mpe_maps_every_key(tmp_path):
    c = load_config(_write(tmp_path, "ippo_ff_mpe.yaml", IPPO_FF_MPE))
    assert (c.algo, c.env, c.env_kwargs, c.total_timesteps, c.num_envs, c.num_steps) == (
        "ippo", "MPE_simple_spread_v3", {}, 10_000_000, 16, 128)
    assert (c.lr, c.anneal_lr, c.max_grad_norm, c.gamma, c.activation, c.seed, c.num_seeds) == (
        2.5e-4, True, 0.5, 0.99, "tanh", 30, 10)
    assert (c.ppo.update_epochs, c.ppo.num_minibatches, c.ppo.gae_lambda, c.ppo.clip_eps, c.ppo.ent_coef,
            c.ppo.vf_coef) == (4, 4, 0.95, 0.2, 0.01, 0.5)  # fmt: skip
    assert not c.recurrent and not c.agent_id and c.log.backends == [] and c.log.project == "jaxmarl-mpe"


def test_ippo_rnn_smax_is_recurrent_with_its_map_and_env_kwargs(tmp_path):
    c = load_config(_write(tmp_path, "ippo_rnn_smax.yaml", IPPO_RNN_SMAX))
    assert (c.algo, c.env, c.recurrent, c.gru_hidden_size, c.hidden_size, c.activation) == (
        "ippo", "HeuristicEnemySMAX", True, 128, 128, "relu")
    assert c.env_kwargs == {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest",
                            "scenario": "2s3z"}  # fmt: skip
    assert (c.lr, c.max_grad_norm, c.ppo.clip_eps) == (0.004, 0.25, 0.05)


def test_overcooked_shaping_horizon_maps_to_reward_shaping(tmp_path):
    c = load_config(_write(tmp_path, "ippo_ff_overcooked.yaml", IPPO_FF_MPE.replace(
        '"MPE_simple_spread_v3"', '"overcooked"') + '"REW_SHAPING_HORIZON": 2.5e6\n'))  # fmt: skip
    assert (c.env, c.reward_shaping.info_key, c.reward_shaping.horizon) == ("overcooked", "shaped_reward", 2_500_000)


def test_unknown_keys_are_refused_all_listed(tmp_path):
    path = _write(tmp_path, "qmix_smax.yaml", QMIX_SMAX)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: JaxMARL keys with no marljax equivalent for algo=qmix: MIXER_EMBEDDING_DIM, "
                              "EPS_ADAM; remove them from the file (marljax's own keys: marljax train --help)")  # fmt: skip
    kept = "".join(line + "\n" for line in QMIX_SMAX.splitlines() if "MIXER" not in line and "EPS_ADAM" not in line)
    c = load_config(_write(tmp_path, "qmix_smax.yaml", kept))
    assert (c.algo, c.param_sharing, c.hidden_size, c.env_kwargs) == ("qmix", "shared", 256, {"scenario": "3m"})
    assert (c.replay.buffer_size, c.replay.batch_size, c.replay.target_update_interval) == (5000, 32, 10)
    assert (c.q.eps_start, c.q.eps_finish, c.q.eps_decay_steps, c.q.td_lambda) == (1.0, 0.05, 100_000, 0.6)
    assert (c.eval_every, c.eval_episodes) == (100, 32)  # 102400 env steps / (8 x 128) per update


def test_the_algorithm_comes_from_algo_or_the_file_name(tmp_path):
    path = _write(tmp_path, "my_spread.yaml", IPPO_FF_MPE)
    with pytest.raises(ConfigError, match=r"^algo: .*my_spread.yaml is a JaxMARL config, which does not name its "
                                          r"algorithm: pass algo=<ippo\|mappo\|pqn_vdn\|iql\|vdn\|qmix>$"):  # fmt: skip
        load_config(path)
    assert load_config(path, ["algo=mappo"]).algo == "mappo"
    assert load_config(path, ["algo=mappo", "lr=1e-3"]).lr == 1e-3  # overrides win over the file


def test_the_cli_trains_a_jaxmarl_config_and_refuses_a_bad_one_in_one_line(tmp_path, capsys):
    path = _write(tmp_path, "ippo_ff_mpe.yaml", IPPO_FF_MPE)
    out = tmp_path / "run"
    overrides = ["num_envs=4", "num_steps=8", "total_timesteps=64", "num_seeds=1", "progress=false", "plot=false"]
    assert main(["train", str(path), *overrides, f"out_dir={out}"]) == 0
    assert load_config(out / "config.yaml").seed == 30 and (out / "metrics.jsonl").read_text().count("\n") >= 1
    bad = _write(tmp_path, "ippo_bad.yaml", IPPO_FF_MPE + '"LAYER_NORM": True\n')
    assert main(["train", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"marljax: config error: {bad}: JaxMARL keys with no marljax equivalent for algo=ippo: LAYER_NORM; remove them "
                   "from the file (marljax's own keys: marljax train --help)"]  # fmt: skip
