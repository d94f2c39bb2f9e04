"""JaxMARL's own baseline configs: `marljax train baselines/IPPO/config/ippo_ff_mpe.yaml`.

A YAML file whose keys are all UPPERCASE (`LR`, `NUM_ENVS`, `ENV_NAME`, `ENV_KWARGS`, ...) is read
as a JaxMARL baseline config and translated into marljax's keys. The algorithm comes from an
`algo=` override or from the file's name (`ippo_rnn_smax.yaml` -> ippo, `qmix_*` -> qmix,
`pqn_vdn_*` -> pqn_vdn, ...). Keys with no marljax equivalent are refused, all of them in one
message, rather than silently dropped: a run that ignored one would not be the run its file
describes. Keys that change only what JaxMARL prints (`VERBOSE`, `WANDB_ONLINE_REPORT`, ...) are
accepted and ignored.

Units agree where JaxMARL counts env steps of one seed (`TOTAL_TIMESTEPS`,
`EPSILON_ANNEAL_TIME`, `LEARNING_STARTS`, `TEST_INTERVAL`); `TARGET_UPDATE_INTERVAL` counts
updates, as in JaxMARL's current QLearning baselines.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping

from marljax.config import ConfigError

PPO_ALGOS = ("ippo", "mappo")
Q_ALGOS = ("pqn_vdn", "iql", "vdn", "qmix")  # pqn_vdn first: a pqn_vdn_* file is not vdn


def is_jaxmarl(values: Mapping[str, Any]) -> bool:
    """Every key is UPPERCASE (JaxMARL's style; marljax's keys are lowercase)."""
    return bool(values) and all(isinstance(k, str) and k == k.upper() and re.search("[A-Z]", k) for k in values)


def infer_algo(path: str | Path) -> str | None:
    """The algorithm a JaxMARL config file's name starts with (`mappo_homogenous_rnn_mpe` -> mappo)."""
    name = Path(path).stem.lower()
    for algo in (*Q_ALGOS, *PPO_ALGOS):
        if name == algo or name.startswith(algo + "_"):
            return algo
    return None


def _number(value: Any) -> Any:
    """YAML 1.1 reads `1e7` (no dot) as a string; JaxMARL's scripts cast it."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _int(value: Any) -> int:
    return int(float(_number(value)))


# JaxMARL key -> (marljax key, conversion) for every algorithm; sections by family below
COMMON: dict[str, tuple[str, Callable]] = {
    "LR": ("lr", float), "NUM_ENVS": ("num_envs", _int), "NUM_STEPS": ("num_steps", _int),
    "TOTAL_TIMESTEPS": ("total_timesteps", _int), "GAMMA": ("gamma", float),
    "MAX_GRAD_NORM": ("max_grad_norm", float), "ANNEAL_LR": ("anneal_lr", bool), "LR_LINEAR_DECAY": ("anneal_lr", bool),
    "ACTIVATION": ("activation", str), "ENV_NAME": ("env", str), "SEED": ("seed", _int), "NUM_SEEDS": ("num_seeds", _int),
    "FC_DIM_SIZE": ("hidden_size", _int), "AGENT_HIDDEN_DIM": ("hidden_size", _int),
    "GRU_HIDDEN_DIM": ("gru_hidden_size", _int), "ADD_AGENT_ID": ("agent_id", bool),
    "ENTITY": ("log.entity", str), "PROJECT": ("log.project", str), "NUM_TEST_EPISODES": ("eval_episodes", _int),
}  # fmt: skip
PPO: dict[str, tuple[str, Callable]] = {
    "UPDATE_EPOCHS": ("ppo.update_epochs", _int), "NUM_MINIBATCHES": ("ppo.num_minibatches", _int),
    "GAE_LAMBDA": ("ppo.gae_lambda", float), "CLIP_EPS": ("ppo.clip_eps", float),
    "ENT_COEF": ("ppo.ent_coef", float), "VF_COEF": ("ppo.vf_coef", float),
}  # fmt: skip
Q: dict[str, tuple[str, Callable]] = {
    "EPSILON_START": ("q.eps_start", float), "EPSILON_FINISH": ("q.eps_finish", float),
    "EPSILON_ANNEAL_TIME": ("q.eps_decay_steps", _int), "TD_LAMBDA": ("q.td_lambda", float),
}  # fmt: skip
PQN: dict[str, tuple[str, Callable]] = {
    "NUM_EPOCHS": ("pqn.update_epochs", _int), "NUM_MINIBATCHES": ("pqn.num_minibatches", _int),
}  # fmt: skip
REPLAY: dict[str, tuple[str, Callable]] = {
    "BUFFER_SIZE": ("replay.buffer_size", _int), "BUFFER_BATCH_SIZE": ("replay.batch_size", _int),
    "NUM_EPOCHS": ("replay.gradient_steps", _int), "LEARNING_STARTS": ("replay.learning_starts", _int),
    "TARGET_UPDATE_INTERVAL": ("replay.target_update_interval", _int),
}  # fmt: skip

# what JaxMARL prints or how it reports; nothing a run computes depends on them
IGNORED = {"VERBOSE", "WANDB_ONLINE_REPORT", "WANDB_LOG_ALL_SEEDS", "DEBUG", "SAVE_PATH", "ALG_NAME", "TUNE"}


def _table(algo: str) -> dict[str, tuple[str, Callable]]:
    if algo in PPO_ALGOS:
        return {**COMMON, **PPO}
    return {**COMMON, **Q, **(PQN if algo == "pqn_vdn" else REPLAY)}


def from_jaxmarl(values: Mapping[str, Any], path: str | Path, algo: str | None = None) -> dict:
    """marljax's nested config mapping for JaxMARL config `values` (read from `path`); `algo`: an
    `algo=` override, else the file's name decides. ConfigError listing every key it cannot map."""
    algo = algo or infer_algo(path)
    if algo is None:
        raise ConfigError("algo", f"{path} is a JaxMARL config, which does not name its algorithm: pass "
                                  f"algo=<{'|'.join(PPO_ALGOS + Q_ALGOS)}>")  # fmt: skip
    table, flat, unknown = _table(algo), {"algo": algo}, []
    values = {k: _number(v) for k, v in values.items()}
    for key, value in values.items():
        if key in table:
            name, convert = table[key]
            flat[name] = convert(value)
        elif key == "ENV_KWARGS":
            flat["env_kwargs"] = dict(value or {})
        elif key == "MAP_NAME":  # SMAX: JaxMARL builds the scenario from the map's name, as env_kwargs.scenario does
            flat.setdefault("env_kwargs", {})
        elif key == "WANDB_MODE":
            if value in ("online", "offline"):
                flat["log.backends"] = ["wandb"]
                flat["log.offline"] = value == "offline"
            elif value != "disabled":
                unknown.append(f"WANDB_MODE={value!r} (allowed: online, offline, disabled)")
        elif key == "PARAMETERS_SHARING":
            flat["param_sharing"] = "shared" if value else "independent"
        elif key == "TAU" and algo not in PPO_ALGOS and algo != "pqn_vdn":
            if float(value) != 1.0:  # JaxMARL blends with TAU every TARGET_UPDATE_INTERVAL updates
                flat["replay.tau"] = float(value)
                if int(values.get("TARGET_UPDATE_INTERVAL", 0)) > 1:
                    unknown.append("TAU<1 with TARGET_UPDATE_INTERVAL>1 (marljax: one or the other)")
                flat["replay.target_update_interval"] = 0
        elif key == "TD_LAMBDA_LOSS":
            if not value:
                flat["q.td_lambda"] = 0.0  # one-step targets
        elif key == "SCALE_CLIP_EPS" and not value:
            pass  # the default: the clip range is not scaled by the agent count
        elif key == "TEST_DURING_TRAINING" and not value:
            flat["eval_every"] = 0
        elif key == "REW_SHAPING_HORIZON":  # JaxMARL's Overcooked IPPO: info["shaped_reward"], annealed over it
            flat["reward_shaping.info_key"] = "shaped_reward"
            flat["reward_shaping.horizon"] = _int(value)
        elif key == "TEST_INTERVAL":
            continue  # below, once the update size is known
        elif key in IGNORED:
            continue
        else:
            unknown.append(key)
    if "MAP_NAME" in values:
        flat["env_kwargs"]["scenario"] = str(values["MAP_NAME"])
    if "TEST_INTERVAL" in values and values.get("TEST_DURING_TRAINING", True):
        if "num_steps" in flat and "num_envs" in flat:  # env steps -> updates
            flat["eval_every"] = max(1, round(float(values["TEST_INTERVAL"]) / (flat["num_steps"] * flat["num_envs"])))
        else:
            unknown.append("TEST_INTERVAL without NUM_ENVS and NUM_STEPS")
    if algo in PPO_ALGOS and "ADD_AGENT_ID" not in values:
        flat["agent_id"] = False  # JaxMARL's PPO baselines add no agent id unless asked
    if "GRU_HIDDEN_DIM" in values or "_rnn_" in f"_{Path(path).stem.lower()}_":
        flat["recurrent"] = True
    if unknown:
        raise ConfigError(str(path), f"JaxMARL keys with no marljax equivalent for algo={algo}: {', '.join(unknown)}; "
                                     "remove them from the file (marljax's own keys: marljax train --help)")  # fmt: skip
    return _nest(flat)


def _nest(flat: Mapping[str, Any]) -> dict:
    """{"ppo.clip_eps": 0.2} -> {"ppo": {"clip_eps": 0.2}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *heads, last = key.split(".")
        for head in heads:
            node = node.setdefault(head, {})
        node[last] = value
    return out


__all__ = ["is_jaxmarl", "infer_algo", "from_jaxmarl"]
