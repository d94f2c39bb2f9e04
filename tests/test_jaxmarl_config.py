"""JaxMARL's own UPPERCASE baseline YAML runs as `marljax train FILE`: known keys are mapped, the
algorithm comes from the file's name (or algo=), and unknown keys are refused, all of them listed.
The YAMLs below have the shape of JaxMARL's baselines/*/config files (written here, not fetched)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import jax.numpy as jnp
import pytest

from marljax.algos.ippo import PPOConfig
from marljax.algos.mappo import CriticConfig
from marljax.algos.mixers import MixerConfig
from marljax.algos.q_acting import QConfig
from marljax.algos.qlearning import ReplayConfig
from marljax.cli import main
from marljax.config import ConfigError, algorithms, load_config

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
"CLIP_EPS": 0.2
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
        "ippo",
        "MPE_simple_spread_v3",
        {},
        10_000_000,
        16,
        128,
    )
    assert (c.lr, c.anneal_lr, c.max_grad_norm, c.gamma, c.activation, c.seed, c.num_seeds) == (
        2.5e-4,
        True,
        0.5,
        0.99,
        "tanh",
        30,
        10,
    )
    assert (c.section(PPOConfig).update_epochs, c.section(PPOConfig).num_minibatches, c.section(PPOConfig).gae_lambda, c.section(PPOConfig).clip_eps, c.section(PPOConfig).ent_coef,
            c.section(PPOConfig).vf_coef) == (4, 4, 0.95, 0.2, 0.01, 0.5)  # fmt: skip
    assert not c.recurrent and not c.agent_id and c.log.backends == [] and c.log.project == "jaxmarl-mpe"


def test_ippo_rnn_smax_is_recurrent_with_its_map_and_env_kwargs(tmp_path):
    c = load_config(_write(tmp_path, "ippo_rnn_smax.yaml", IPPO_RNN_SMAX))
    assert (c.algo, c.env, c.recurrent, c.gru_hidden_size, c.hidden_size, c.activation) == (
        "ippo",
        "HeuristicEnemySMAX",
        True,
        128,
        128,
        "relu",
    )
    assert c.env_kwargs == {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest",
                            "scenario": "2s3z"}  # fmt: skip
    assert (c.lr, c.max_grad_norm, c.section(PPOConfig).clip_eps) == (0.004, 0.25, 0.05)


@pytest.mark.parametrize(
    "name",
    ["ippo_rnn_mpe.yaml", "mappo_homogenous_rnn_mpe.yaml", "ippo_ff_hanabi.yaml", "mappo_homogenous_rnn_smax.yaml"],
)
def test_files_whose_script_hard_codes_relu_train_relu_whatever_they_say(tmp_path, capsys, name):
    """JaxMARL's recurrent PPO scripts (and IPPO-FF Hanabi's) build relu networks and never read ACTIVATION:
    its MPE RNN files say tanh. The file's ACTIVATION is named among the keys ignored."""
    for said in ('"ACTIVATION": "tanh"', '"ACTIVATION": "relu"', ""):
        c = load_config(_write(tmp_path, name, IPPO_FF_MPE.replace('"ACTIVATION": "tanh"', said)))
        assert c.activation == "relu", (name, said)
        assert ("ACTIVATION" in capsys.readouterr().err) == bool(said)


@pytest.mark.parametrize(
    "name, text, timed",
    [("mappo_homogenous_rnn_mpe.yaml", "mpe", True), ("mappo_homogenous_rnn_smax.yaml", "smax", True),
     ("mappo_homogenous_rnn_hanabi.yaml", "mpe", False), ("mappo_homogenous_ff_hanabi.yaml", "mpe", False)],
)  # fmt: skip
def test_recurrent_mappo_files_on_timed_envs_show_the_critic_the_time(tmp_path, name, text, timed):
    # JaxMARL's MAPPO-RNN critic on MPE and SMAX is a GRU that can count the steps; marljax's feed-forward critic is
    # shown the elapsed fraction (critic.time). Controls: the Hanabi files (no time limit to measure by)
    c = load_config(_write(tmp_path, name, IPPO_RNN_SMAX if text == "smax" else IPPO_FF_MPE), ["algo=mappo"])
    assert c.section(CriticConfig).time is timed


def test_scripts_that_read_activation_take_the_files(tmp_path):
    """The negative control: IPPO-FF MPE's and IPPO-RNN Overcooked v2's scripts read ACTIVATION."""
    assert load_config(_write(tmp_path, "ippo_ff_mpe.yaml", IPPO_FF_MPE)).activation == "tanh"
    v2 = _write(tmp_path, "ippo_rnn_overcooked_v2.yaml", IPPO_RNN_SMAX.replace('"relu"', '"tanh"'))
    assert load_config(v2).activation == "tanh"


def test_overcooked_shaping_horizon_maps_to_reward_shaping(tmp_path):
    c = load_config(_write(tmp_path, "ippo_ff_overcooked.yaml", IPPO_FF_MPE.replace(
        '"MPE_simple_spread_v3"', '"overcooked"') + '"REW_SHAPING_HORIZON": 2.5e6\n'))  # fmt: skip
    assert (c.env, c.reward_shaping.info_key, c.reward_shaping.horizon) == ("overcooked", "shaped_reward", 2_500_000)


def test_unknown_keys_are_refused_all_listed(tmp_path):
    path = _write(tmp_path, "qmix_smax.yaml", QMIX_SMAX)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: JaxMARL keys with no marljax equivalent for algo=qmix: CLIP_EPS; remove them "
                              "from the file (marljax's own keys: marljax train --help)")  # fmt: skip
    kept = "".join(line + "\n" for line in QMIX_SMAX.splitlines() if "CLIP_EPS" not in line)
    c = load_config(_write(tmp_path, "qmix_smax.yaml", kept))
    assert (c.algo, c.param_sharing, c.hidden_size, c.env_kwargs) == ("qmix", "shared", 256, {"scenario": "3m"})
    assert c.section(MixerConfig).embed_dim == 64
    assert (
        c.section(ReplayConfig).buffer_size,
        c.section(ReplayConfig).batch_size,
        c.section(ReplayConfig).target_update_interval,
    ) == (5000, 32, 10)
    assert (
        c.section(QConfig).eps_start,
        c.section(QConfig).eps_finish,
        c.section(QConfig).eps_decay_steps,
        c.section(QConfig).td_lambda,
    ) == (1.0, 0.05, 100_000, 0.6)
    assert (c.eval_every, c.eval_episodes) == (100, 32)  # 102400 env steps / (8 x 128) per update


def test_the_algorithm_comes_from_algo_or_the_file_name(tmp_path):
    path = _write(tmp_path, "my_spread.yaml", IPPO_FF_MPE)
    every = r"\|".join(algorithms())  # every registered algorithm, in registration order
    assert every.startswith(r"ippo\|mappo")
    with pytest.raises(ConfigError, match=r"^algo: .*my_spread.yaml is a JaxMARL config, which does not name its "
                                          rf"algorithm: pass algo=<{every}>$"):  # fmt: skip
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


# ----------------------------------------------------------------- every key JaxMARL's baselines use
# (the inputs are written here: CI has no JaxMARL checkout)
BASE = '"ENV_NAME": "MPE_simple_spread_v3"\n"NUM_ENVS": 16\n"NUM_STEPS": 16\n"TOTAL_TIMESTEPS": 25600\n'  # 100 updates
KEYS = [  # (file name, the key's line, {marljax key: value})
    ("ippo_ff_mpe.yaml", '"LR": 5e-4', {"lr": 5e-4}),
    ("ippo_ff_mpe.yaml", '"ANNEAL_LR": False', {"anneal_lr": False}),
    ("ippo_ff_mpe.yaml", '"GAMMA": 0.9', {"gamma": 0.9}),
    ("ippo_ff_mpe.yaml", '"MAX_GRAD_NORM": 0.25', {"max_grad_norm": 0.25}),
    ("ippo_ff_mpe.yaml", '"ACTIVATION": "relu"', {"activation": "relu"}),
    ("ippo_ff_mpe.yaml", '"SEED": 7', {"seed": 7}),
    ("ippo_ff_mpe.yaml", '"NUM_SEEDS": 3', {"num_seeds": 3}),
    ("ippo_ff_mpe.yaml", '"ENTITY": "me"', {"log.entity": "me"}),
    ("ippo_ff_mpe.yaml", '"PROJECT": "p"', {"log.project": "p"}),
    ("ippo_ff_mpe.yaml", '"WANDB_MODE": "offline"', {"log.backends": ["wandb"], "log.offline": True}),
    ("ippo_ff_mpe.yaml", '"UPDATE_EPOCHS": 2', {"ppo.update_epochs": 2}),
    ("ippo_ff_mpe.yaml", '"NUM_MINIBATCHES": 8', {"ppo.num_minibatches": 8}),
    ("ippo_ff_mpe.yaml", '"GAE_LAMBDA": 0.9', {"ppo.gae_lambda": 0.9}),
    ("ippo_ff_mpe.yaml", '"CLIP_EPS": 0.1', {"ppo.clip_eps": 0.1}),
    ("ippo_ff_mpe.yaml", '"ENT_COEF": 0.0', {"ppo.ent_coef": 0.0}),
    ("ippo_ff_mpe.yaml", '"VF_COEF": 1.0', {"ppo.vf_coef": 1.0}),
    ("ippo_ff_mpe.yaml", '"SCALE_CLIP_EPS": False', {"ppo.clip_eps": 0.2}),
    ("ippo_ff_mpe.yaml", '"ENV_KWARGS": {"num_agents": 4}', {"env_kwargs": {"num_agents": 4}}),
    ("ippo_ff_mpe.yaml", '"ADD_AGENT_ID": True', {"agent_id": True}),
    ("ippo_ff_mpe.yaml", '"FC_DIM_SIZE": 32', {"hidden_size": 32}),
    ("ippo_rnn_mpe.yaml", '"GRU_HIDDEN_DIM": 32', {"gru_hidden_size": 32, "recurrent": True}),
    ("ippo_rnn_mpe.yaml", '"HIDDEN_SIZE": 96', {"hidden_size": 96, "gru_hidden_size": 96, "recurrent": True}),
    ("ippo_ff_mpe.yaml", '"HIDDEN_SIZE": 96', {"hidden_size": 96, "gru_hidden_size": 128, "recurrent": False}),
    ("ippo_rnn_mpe.yaml", '"LR_WARMUP": 0.05', {"lr_warmup": 0.05, "lr_decay": "cosine"}),
    ("ippo_ff_mpe.yaml", '"REW_SHAPING_HORIZON": 1e4', {"reward_shaping.horizon": 10_000}),
    ("ippo_ff_mpe.yaml", '"TEST_DURING_TRAINING": False\n"TEST_INTERVAL": 0.05', {"eval_every": 0}),
    ("ippo_ff_mpe.yaml", '"TEST_INTERVAL": 0.05', {"eval_every": 5}),  # a fraction of the 100 updates
    ("ippo_ff_mpe.yaml", '"TEST_INTERVAL": 2560', {"eval_every": 10}),  # env steps: 2560 / 256 per update
    ("ippo_ff_mpe.yaml", '"NUM_TEST_ENVS": 64', {"eval_episodes": 64}),
    ("mappo_rnn_mpe.yaml", '"OBS_WITH_AGENT_ID": True', {"algo": "mappo"}),
    ("mappo_rnn_smax.yaml", '"MAP_NAME": "3m"', {"env_kwargs": {"scenario": "3m"}}),
    ("pqn_vdn_ff_mpe.yaml", '"NUM_LAYERS": 3', {"num_layers": 3}),
    ("pqn_vdn_ff_mpe.yaml", '"NORM_TYPE": "layer_norm"', {"q.norm": "layer_norm"}),
    ("pqn_vdn_ff_mpe.yaml", '"NORM_TYPE": "none"', {"q.norm": "none"}),
    ("pqn_vdn_ff_mpe.yaml", '"DUELING": True', {"q.dueling": True}),
    ("pqn_vdn_ff_mpe.yaml", '"NORM_INPUT": False', {"q.norm": "none", "q.norm_input": False}),
    ("pqn_vdn_rnn_smax.yaml", '"NORM_INPUT": True', {"q.norm_input": True}),
    ("pqn_vdn_rnn_smax.yaml", '"NORM_TYPE": "batch_norm"', {"q.norm": "batch_norm"}),
    ("pqn_vdn_ff_mpe.yaml", '"MEMORY_WINDOW": 0', {"recurrent": False, "pqn.memory_window": 0}),
    ("pqn_vdn_rnn_smax.yaml", '"MEMORY_WINDOW": 4', {"pqn.memory_window": 4, "pqn.minibatch_split": "envs"}),
    ("pqn_vdn_ff_mpe.yaml", '"EPS_START": 0.5', {"q.eps_start": 0.5}),
    ("pqn_vdn_ff_mpe.yaml", '"EPS_FINISH": 0.01', {"q.eps_finish": 0.01}),
    ("pqn_vdn_ff_mpe.yaml", '"EPS_DECAY": 0.1', {"q.eps_decay_steps": 2560}),  # 10% of the 100 updates x 256 steps
    ("pqn_vdn_ff_mpe.yaml", '"LAMBDA": 0.3', {"q.td_lambda": 0.3}),
    ("pqn_vdn_ff_mpe.yaml", '"NUM_EPOCHS": 2', {"pqn.update_epochs": 2}),
    ("pqn_vdn_ff_mpe.yaml", '"LR_LINEAR_DECAY": False', {"anneal_lr": False}),
    ("pqn_vdn_ff_mpe.yaml", '"REW_SCALE": 10.', {"q.reward_scale": 10.0}),
    ("pqn_vdn_ff_mpe.yaml", '"TEST_NUM_ENVS": 128', {"eval_episodes": 128}),
    ("vdn_ff_mpe.yaml", '"BUFFER_SIZE": 1e5', {"replay.buffer_size": 100_000, "q.td_lambda": 0.0, "q.norm": "none"}),
    ("vdn_ff_mpe.yaml", '"BUFFER_BATCH_SIZE": 64', {"replay.batch_size": 64}),
    ("vdn_ff_mpe.yaml", '"NUM_EPOCHS": 8', {"replay.gradient_steps": 8}),
    ("vdn_ff_mpe.yaml", '"LEARNING_STARTS": 1e3', {"replay.learning_starts": 1000}),
    ("vdn_ff_mpe.yaml", '"TARGET_UPDATE_INTERVAL": 200', {"replay.target_update_interval": 200}),
    ("vdn_ff_mpe.yaml", '"TAU": 1.', {"replay.target_update_interval": 10}),  # 1: a copy, as marljax's default
    ("vdn_ff_mpe.yaml", '"TAU": 0.01', {"replay.tau": 0.01, "replay.target_update_interval": 0}),
    ("vdn_ff_mpe.yaml", '"PARAMETERS_SHARING": False', {"param_sharing": "independent"}),
    ("vdn_ff_mpe.yaml", '"EPSILON_START": 0.9', {"q.eps_start": 0.9}),
    ("vdn_ff_mpe.yaml", '"EPSILON_FINISH": 0.1', {"q.eps_finish": 0.1}),
    ("vdn_ff_mpe.yaml", '"EPSILON_ANNEAL_TIME": 5000', {"q.eps_decay_steps": 5000}),
    # SHAQ's and TransfQMix's scripts count epsilon's steps per step of the vectorised env (NUM_ENVS = 16 here)
    ("shaq_mpe.yaml", '"EPSILON_ANNEAL_TIME": 5000', {"q.eps_decay_steps": 80000}),
    ("transf_qmix_smax.yaml", '"EPSILON_ANNEAL_TIME": 5000', {"q.eps_decay_steps": 80000}),
    ("vdn_ff_mpe.yaml", '"TD_LAMBDA": 0.6', {"q.td_lambda": 0.6}),
    ("vdn_ff_mpe.yaml", '"TD_LAMBDA_LOSS": False\n"TD_LAMBDA": 0.6', {"q.td_lambda": 0.0}),
    ("vdn_ff_mpe.yaml", '"AGENT_HIDDEN_DIM": 48', {"hidden_size": 48}),
    ("vdn_ff_mpe.yaml", '"NUM_TEST_EPISODES": 8', {"eval_episodes": 8}),
    ("qmix_rnn_mpe.yaml", '"MIXER_EMBEDDING_DIM": 16', {"mixer.embed_dim": 16}),
    ("qmix_rnn_mpe.yaml", '"MIXER_HYPERNET_HIDDEN_DIM": 24', {"mixer.hyper_hidden": 24}),
    ("qmix_rnn_mpe.yaml", '"MIXER_INIT_SCALE": 0.001', {"mixer.init_scale": 0.001}),
    ("shaq_mpe.yaml", '"EPS_ADAM": 0.001', {"adam_eps": 0.001}),
    ("shaq_mpe.yaml", '"AGENT_INIT_SCALE": 2.', {"q.init_scale": 2.0}),
    ("transf_qmix_mpe.yaml", '"AGENT_INIT_SCALE": 1.', {"q.init_scale": 1.0}),
    ("transf_qmix_mpe.yaml", '"USE_FAST_ATTENTION": True', {"transf.fast_attention": True}),
    ("transf_qmix_smax.yaml", '"USE_FAST_ATTENTION": False', {"transf.fast_attention": False}),
    # JaxMARL's entity embedders always end in batch norm; SCALE_INPUTS adds one on the raw features
    (
        "transf_qmix_mpe.yaml",
        '"SCALE_INPUTS": False',
        {"transf.scale_inputs": False, "transf.embed_norm": "batch_norm"},
    ),
    ("transf_qmix_smax.yaml", '"SCALE_INPUTS": True', {"transf.scale_inputs": True, "transf.embed_norm": "batch_norm"}),
    ("shaq_mpe.yaml", '"WEIGHT_DECAY_ADAM": 0.00001', {"weight_decay": 1e-5}),
]


@pytest.mark.parametrize("name, line, expected", KEYS, ids=[f"{n}:{line.split(':')[0]}" for n, line, _ in KEYS])
def test_every_key_of_the_baselines_maps_to_its_setting(tmp_path, name, line, expected):
    from marljax.config import to_flat

    flat = to_flat(load_config(_write(tmp_path, name, BASE + line + "\n")).to_dict())
    assert {k: flat[k] for k in expected} == expected


IGNORED_KEYS = ['"DEVICE": 0', '"DISABLE_JIT": False', '"VERBOSE": False', '"WANDB_ONLINE_REPORT": True',
                '"WANDB_LOG_ALL_SEEDS": False', '"SAVE_PATH": "models"', '"ALG_NAME": "vdn_ff"', '"TUNE": False',
                '"HYP_TUNE": False', '"LOG_AGENTS_SEPARATELY": True', '"TEST_NUM_STEPS": 30', '"NORM_INPUTS": False',
                '"LOSS_TYPE": "vdn"']  # fmt: skip


def test_run_plumbing_keys_are_accepted_with_one_note_line(tmp_path, capsys):
    plain = load_config(_write(tmp_path, "vdn_ff_mpe.yaml", BASE))
    c = load_config(_write(tmp_path, "vdn_ff_mpe.yaml", BASE + "\n".join(IGNORED_KEYS) + "\n"))
    assert c == plain  # nothing computed changes
    err = capsys.readouterr().err.strip().splitlines()
    names = ", ".join(line.split('"')[1] for line in IGNORED_KEYS)
    assert err == [f"marljax: JaxMARL keys ignored (they change nothing computed here): {names}"]


def test_a_ql_file_serves_three_algorithms_and_ignores_the_mixer_keys_for_iql_and_vdn(tmp_path, capsys):
    path = _write(tmp_path, "ql_rnn_mpe.yaml", BASE + '"MIXER_EMBEDDING_DIM": 16\n"HIDDEN_SIZE": 64\n')
    with pytest.raises(ConfigError, match=r"serves JaxMARL's iql, vdn and qmix scripts: pass algo=<iql\|vdn\|qmix>$"):
        load_config(path)
    assert load_config(path, ["algo=qmix"]).section(MixerConfig).embed_dim == 16
    c = load_config(path, ["algo=vdn"])
    assert (c.algo, c.recurrent, c.gru_hidden_size) == ("vdn", True, 64)
    assert "ignored (they change nothing computed here): MIXER_EMBEDDING_DIM" in capsys.readouterr().err


@pytest.mark.parametrize("name, line, message", [
    ("mappo_rnn_smax.yaml", '"OBS_WITH_AGENT_ID": False', "OBS_WITH_AGENT_ID=False (marljax's MAPPO critic always"),
    ("ippo_rnn_smax.yaml", '"SCALE_CLIP_EPS": True', "SCALE_CLIP_EPS=True (marljax does not scale"),
    ("ippo_ff_mpe.yaml", '"EPS_DECAY": 0.1', "algo=ippo: EPS_DECAY; remove them"),
])  # fmt: skip
def test_values_marljax_does_not_compute_are_refused_in_one_line(tmp_path, name, line, message):
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, name, BASE + line + "\n"))
    assert message in str(err.value) and "\n" not in str(err.value)


SHAQ_AND_TRANSF = [("shaq_mpe.yaml", "shaq", '"SAMPLE_SIZE": 5'),
                   ("transf_qmix_smax.yaml", "transf_qmix", '"MIXER_TRANSF_NUM_LAYERS": 1')]  # fmt: skip


@pytest.mark.parametrize("name, algo, line", SHAQ_AND_TRANSF)
def test_shaq_and_transf_qmix_configs_answer_to_their_algorithms(tmp_path, name, algo, line):
    assert load_config(_write(tmp_path, name, BASE + line + "\n")).algo == algo  # (their own keys: test_shaq.py, ...)


@pytest.mark.parametrize("name, algo", [("shaq_mpe.yaml", "shaq"), ("transf_qmix_mpe.yaml", "transf_qmix"),
                                        ("transf_qmix_smax.yaml", "transf_qmix"), ("ql_rnn_mpe.yaml", "vdn"),
                                        ("ql_rnn_smax.yaml", "qmix"), ("ql_rnn_mpe.yaml", "iql"),
                                        ("vdn_ff_mpe.yaml", "vdn"), ("ql_cnn_overcooked.yaml", "vdn")])  # fmt: skip
def test_files_whose_script_resets_every_environment_each_update_say_so(tmp_path, name, algo):
    # shaq.py, transf_qmix.py and iql/vdn/qmix_rnn.py reset every env at each update's start; vdn_ff.py and
    # the CNN scripts (the controls) carry episodes across updates. iql/vdn/qmix_rnn.py alone cut a target by the
    # previous step's done, so they bootstrap where an episode ends (replay.bootstrap_time_limit). All five scripts
    # that reset each update learn on every stored step but the last (replay.skip_last_step)
    c = load_config(_write(tmp_path, name, BASE), [f"algo={algo}"])
    assert c.section(ReplayConfig).reset_each_update is name.startswith(("shaq", "transf_qmix", "ql_rnn"))
    assert c.section(ReplayConfig).bootstrap_time_limit is name.startswith("ql_rnn")
    assert c.section(ReplayConfig).skip_last_step is name.startswith(("shaq", "transf_qmix", "ql_rnn"))


@pytest.mark.parametrize(
    "env, needs", [("JaxRobotarium_navigation", "jaxrobotarium package"), ("ant_4x2", "jaxmarl[mabrax]")]
)
def test_envs_that_do_not_install_here_are_refused_first_naming_the_install(tmp_path, env, needs):
    pytest.importorskip("jaxmarl")
    if env == "ant_4x2" and importlib.util.find_spec("brax"):
        pytest.skip("brax is installed here")
    text = BASE.replace("MPE_simple_spread_v3", env) + '"NUM_MINIBATCHES": 3\n'  # also a bad minibatch count: env first
    with pytest.raises(ConfigError, match=rf"^env: {env} needs .*{re.escape(needs)}"):
        load_config(_write(tmp_path, "ippo_rnn_x.yaml", text))


def test_overcooked_layouts_are_looked_up_by_name():
    pytest.importorskip("jaxmarl")
    from marljax.envs.registry import make_env

    env = make_env("overcooked", {"layout": "coord_ring"})
    assert type(env).__name__ == "Overcooked" and env.layout["height"] == 5  # coord_ring's grid, not cramped_room's 4
    assert type(make_env("overcooked_v2", {"layout": "grounded_coord_simple"})).__name__ == "OvercookedV2"
    with pytest.raises(ConfigError, match=r"^env_kwargs.layout: unknown overcooked layout 'nope'; allowed: cramped_room, "
                                          r"asymm_advantages, coord_ring, forced_coord, counter_circuit$"):  # fmt: skip
        make_env("overcooked", {"layout": "nope"})


def test_a_ql_file_refuses_a_key_no_q_learning_script_reads(tmp_path):
    path = _write(tmp_path, "ql_rnn_mpe.yaml", BASE + '"CLIP_EPS": 0.2\n')  # PPO's: no sibling of vdn declares it
    with pytest.raises(ConfigError, match="no marljax equivalent for algo=vdn: CLIP_EPS;"):
        load_config(path, ["algo=vdn"])


def test_a_file_without_num_steps_counts_updates_with_the_algorithms_default(tmp_path):
    text = '"NUM_ENVS": 8\n"TOTAL_TIMESTEPS": 2050000\n"TEST_INTERVAL": 50000\n"SAMPLE_SIZE": 5\n'  # SHAQ's shape
    c = load_config(_write(tmp_path, "shaq_mpe.yaml", text))
    assert c.num_steps == load_config(None, ["algo=shaq"]).num_steps  # the default: the file says nothing
    assert c.eval_every == round(50_000 / (8 * c.num_steps))  # TEST_INTERVAL counts env steps
    c = load_config(_write(tmp_path, "shaq_mpe.yaml", text.replace(": 50000", ": 0.1")))
    assert c.eval_every == int(0.1 * (2_050_000 // (8 * c.num_steps)))  # a fraction of the updates


def test_a_file_takes_no_family_default_for_a_key_it_leaves_unset(tmp_path):
    # a file is its script: without NUM_STEPS and LR the run takes marljax's plain defaults, not the MPE family's
    text = "\n".join(line for line in IPPO_FF_MPE.splitlines() if not line.startswith(('"NUM_STEPS"', '"LR"')))
    path = _write(tmp_path, "ippo_ff_mpe.yaml", text)
    plain, family = (load_config(None, ["algo=ippo", f"family_defaults={f}"]) for f in ("none", "mpe"))
    assert (plain.num_steps, plain.lr) != (family.num_steps, family.lr)  # the keys the family sets (the control)
    c = load_config(path)
    assert (c.family_defaults, c.num_steps, c.lr) == ("none", plain.num_steps, plain.lr)
    c = load_config(path, ["family_defaults=mpe"])  # asked for on the command line, they apply
    assert (c.num_steps, c.lr) == (family.num_steps, family.lr)


def test_transf_qmix_lr_decay_type_maps_to_lr_decay_per_update(tmp_path, capsys):
    from marljax.algos.learning import schedule

    rate = '"N_MINI_UPDATES": 4\n"LR": 0.005\n"LR_EXP_DECAY_RATE": 0.00002\n"LR_WARMUP": 10\n'  # BASE: 100 updates
    c = load_config(_write(tmp_path, "transf_qmix_smax.yaml", BASE + '"LR_DECAY_TYPE": "exp"\n' + rate))
    assert (c.anneal_lr, c.lr_decay, c.lr_warmup, c.section(ReplayConfig).gradient_steps) == (
        True,
        "exponential",
        0.0,
        4,
    )
    assert "ignored (they change nothing computed here): LR_WARMUP" in capsys.readouterr().err  # read with cos only
    for u in (0, 1, 7, 99):  # JaxMARL: LR (1 - rate)^count per gradient step; here at each update's first step
        lr = float(schedule(c)(jnp.float32(c.lr), jnp.int32(u)))
        assert lr == pytest.approx(0.005 * (1 - 2e-5) ** (4 * u), rel=1e-6)
    c = load_config(_write(tmp_path, "transf_qmix_smax.yaml", BASE + '"LR_DECAY_TYPE": "cos"\n' + rate))
    assert (c.anneal_lr, c.lr_decay, c.lr_warmup) == (True, "cosine", 10 / (100 * 4))  # 10 of 400 gradient steps
    assert "LR_EXP_DECAY_RATE" in capsys.readouterr().err  # read with exp only
    for decay_type in ('"linear"', "", "null"):  # no type decays linearly in JaxMARL's script too
        c = load_config(_write(tmp_path, "transf_qmix_mpe.yaml", BASE + f'"LR_DECAY_TYPE": {decay_type}\n'))
        assert (c.anneal_lr, c.lr_decay) == (True, "linear")


def test_the_table_script_leaves_hydra_records_out_and_retries_a_streaming_file_offline(tmp_path, monkeypatch, capsys):
    """experiments/jaxmarl_configs.py over a checkout laid out as JaxMARL's (written here): hydra's records of
    earlier runs are not configs; a file refused only for streaming to W&B without a login is run again with
    log.offline=true, and its row says so. Control: a file refused for anything else keeps its refusal."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "experiments"))
    import jaxmarl_configs

    config = tmp_path / "baselines" / "IPPO" / "config"
    config.mkdir(parents=True)
    (config / "ippo_ff_mpe.yaml").write_text(
        IPPO_FF_MPE.replace('"WANDB_MODE" : "disabled"', '"WANDB_MODE" : "online"')
    )
    (config / "ippo_bad.yaml").write_text(IPPO_FF_MPE + '"LAYER_NORM": True\n')
    hydra = tmp_path / "baselines" / "IPPO" / "outputs" / "2026-11-27" / "08-29-55" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text("SEED: 0\n")
    streaming = "marljax: config error: log.offline: false streams to wandb, which finds no login here (...)"
    tried = []

    def run(path, overrides, timeout):  # what a run refused for want of a W&B login prints, then runs offline
        tried.append((path.name, overrides))
        if path.name == "ippo_bad.yaml":
            return (
                "refused",
                "marljax: config error: ippo_bad.yaml: JaxMARL keys with no marljax equivalent: LAYER_NORM",
            )
        return ("runs", "") if jaxmarl_configs.OFFLINE in overrides else ("refused", streaming)

    monkeypatch.setattr(jaxmarl_configs, "run", run)
    assert jaxmarl_configs.main([str(tmp_path), "--run"]) == 0
    out = capsys.readouterr().out
    assert "| IPPO/config/ippo_ff_mpe.yaml | runs | with log.offline=true: no W&B login here |" in out, out
    assert "| IPPO/config/ippo_bad.yaml | refused | marljax: config error: ippo_bad.yaml: JaxMARL keys" in out, out
    assert ".hydra" not in out and "1 of 2 run" in out, out
    assert tried == [("ippo_bad.yaml", []), ("ippo_ff_mpe.yaml", []), ("ippo_ff_mpe.yaml", ["log.offline=true"])]


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('"LR": 2.5e-4', '"LR": abc', "ippo_ff_mpe.yaml: LR: got 'abc'; expected a number (lr)"),
        (
            '"TOTAL_TIMESTEPS": 1e7',
            '"TOTAL_TIMESTEPS": lots',
            "TOTAL_TIMESTEPS: got 'lots'; expected an integer (total_timesteps)",
        ),
        ('"ENV_KWARGS": {}', '"ENV_KWARGS": 5', "ENV_KWARGS: expected a mapping of the env's keyword arguments, got 5"),
        ('"NUM_MINIBATCHES": 4', '"NUM_MINIBATCHES": 0', "NUM_MINIBATCHES: must be a positive integer, got 0"),
        ('"ANNEAL_LR": True', '"ANNEAL_LR": [1]', "ANNEAL_LR: got [1]; expected true or false (anneal_lr)"),
    ],
    ids=[
        "a word for a number",
        "a word for a count",
        "a scalar for ENV_KWARGS",
        "no minibatches",
        "a list for a switch",
    ],
)
def test_a_value_of_the_wrong_kind_names_its_jaxmarl_key(tmp_path, old, new, message):
    """Issue 66, before: `ValueError: could not convert string to float: 'abc'`, `TypeError: 'int' object
    is not iterable`, `ZeroDivisionError: integer modulo by zero`; a list read as True."""
    path = _write(tmp_path, "ippo_ff_mpe.yaml", IPPO_FF_MPE.replace(old, new))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)
