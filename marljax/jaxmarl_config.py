"""JaxMARL's own baseline configs: `marljax train baselines/IPPO/config/ippo_ff_mpe.yaml`.

A YAML file whose keys are all UPPERCASE (`LR`, `NUM_ENVS`, `ENV_NAME`, `ENV_KWARGS`, ...) is read
as a JaxMARL baseline config and translated into marljax's keys. The algorithm comes from an
`algo=` override or from the file's name, through the stems each algorithm's schema answers to
(its name, and `jaxmarl_files`): `ippo_rnn_smax.yaml` -> ippo, `pqn_vdn_*` -> pqn_vdn; a stem that
several answer to (`ql_*`, which serves JaxMARL's iql, vdn and qmix scripts) needs `algo=`.

Each setting declares the JaxMARL keys that mean it (`setting(..., jaxmarl="LR")`, in config.py
and in the algorithms' sections), so this module names no algorithm: a key maps through what the
chosen algorithm's schema declares. `RULES` below handle the keys whose units differ (a fraction
of the run where marljax counts env steps) or that set several things. Keys that change nothing
computed (W&B, devices, printing) are accepted and listed in one note; any other key is refused,
all of them in one message, rather than silently dropped: a run that ignored one would not be
the run its file describes.

Units agree where JaxMARL counts env steps of one seed (`TOTAL_TIMESTEPS`, `EPSILON_ANNEAL_TIME`,
`LEARNING_STARTS`), except `EPSILON_ANNEAL_TIME` in SHAQ's and TransfQMix's files, whose scripts
count steps of the vectorised env (x NUM_ENVS here); `TARGET_UPDATE_INTERVAL` counts updates, as in JaxMARL's current QLearning
baselines; `EPS_DECAY`, `LR_WARMUP` and a `TEST_INTERVAL` of at most 1 are fractions of the run.
A file that gives no `NUM_STEPS` (SHAQ's: JaxMARL's script steps an episode's length) counts
updates with the rollout the run will have: the algorithm's default on the file's env.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from marljax.config import schema_fields
from marljax.schema import ConfigError, FileFormat, algorithm_schema, algorithms, register_file_format

# what JaxMARL prints, where it runs or how it reports; nothing a run computes depends on them
IGNORED = {
    "VERBOSE",
    "WANDB_ONLINE_REPORT",
    "WANDB_LOG_ALL_SEEDS",
    "DEBUG",
    "SAVE_PATH",
    "ALG_NAME",
    "TUNE",
    "HYP_TUNE",
    "DEVICE",
    "DISABLE_JIT",
    "LOG_AGENTS_SEPARATELY",
    "TEST_NUM_STEPS",  # the evaluation's step budget: marljax's evaluation plays whole episodes
    "NORM_INPUTS",
    "LOSS_TYPE",  # read by no JaxMARL script (PQN reads NORM_INPUT): they change nothing there either
}


def is_jaxmarl(values: Mapping[str, Any]) -> bool:
    """Every key is UPPERCASE (JaxMARL's style; marljax's keys are lowercase)."""
    return bool(values) and all(isinstance(k, str) and k == k.upper() and re.search("[A-Z]", k) for k in values)


def answering(path: str | Path) -> tuple[str, ...]:
    """The registered algorithms that answer to a JaxMARL config file's name: those whose name or
    `jaxmarl_files` stem it starts with (`mappo_homogenous_rnn_mpe` -> mappo). The longest stem wins
    (`pqn_vdn_*` is pqn_vdn, not vdn); several answer to a shared stem (`ql_*`: iql, vdn, qmix)."""
    name = Path(path).stem.lower()
    claims = [
        (stem, a)
        for a in algorithms()
        for stem in (a, *algorithm_schema(a).jaxmarl_files)
        if name == stem or name.startswith(stem + "_")
    ]
    longest = max((len(stem) for stem, _ in claims), default=0)
    return tuple(a for stem, a in claims if len(stem) == longest)


def infer_algo(path: str | Path) -> str | None:
    """The one registered algorithm a JaxMARL config file's name says (see `answering`), or None."""
    found = answering(path)
    return found[0] if len(found) == 1 else None


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


def _bool(value: Any) -> bool:
    """True/False (or 0/1, as Python scripts test them); anything else, e.g. a list, is no switch."""
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise TypeError(f"not a boolean: {value!r}")


CONVERT: dict[type, Callable] = {int: _int, float: float, bool: _bool, str: str}


def declared(algo: str) -> dict[str, str]:
    """JaxMARL key -> marljax's dotted key, from what the core and algo's sections declare."""
    table: dict[str, str] = {}
    for dotted, field, _ in schema_fields(algo):
        for key in field.metadata.get("jaxmarl", ()):
            table[key] = dotted
    return table


def _types(algo: str) -> dict[str, type]:
    return {dotted: type(default) for dotted, _, default in schema_fields(algo)}


# JaxMARL's shaq.py and transf_qmix.py (by their config files' stems) count epsilon in steps of the
# vectorised env (EPSILON_ANNEAL_TIME is x NUM_ENVS env steps; its other QLearning scripts count env steps)
SHAQ_TRANSF_SCRIPTS = ("shaq", "transf_qmix")
# the scripts that reset every environment at each update's start (replay.reset_each_update): SHAQ's,
# TransfQMix's and iql/vdn/qmix_rnn.py (ql_rnn_* files); vdn_ff.py, the CNN scripts and PQN's carry episodes on
RESET_EACH_UPDATE_SCRIPTS = (*SHAQ_TRANSF_SCRIPTS, "ql_rnn")

# JaxMARL's PPO scripts behind these files (by stem) never read ACTIVATION: their networks are relu
# whatever the file says (ippo_rnn_mpe.yaml and mappo_homogenous_rnn_mpe.yaml say tanh; ippo_ff_hanabi.yaml
# says nothing). Its other PPO scripts, IPPO-RNN Overcooked v2's among them, read it.
RELU_SCRIPTS = ("ippo_ff_hanabi", "ippo_rnn_hanabi", "ippo_rnn_jaxrobotarium", "ippo_rnn_mpe", "ippo_rnn_smax",
                "mappo_homogenous_rnn")  # fmt: skip

# JaxMARL's recurrent MAPPO scripts behind these files (by stem) give the critic a GRU, which can count the steps
# of MPE's and SMAX's time-limited episodes; marljax's critic is feed-forward and is shown the elapsed fraction
# instead (critic.time). Without it marljax trailed JaxMARL's MAPPO on spread by 4.3 per agent (docs/benchmarks.md)
TIMED_CRITIC_SCRIPTS = ("mappo_homogenous_rnn_mpe", "mappo_homogenous_rnn_smax")

# JaxMARL's iql/vdn/qmix_rnn.py (ql_rnn_* files) cut a step's target by the done stored with it, the previous
# step's ("use next done because last done was saved for rnn re-init"), so they bootstrap at every episode's end.
# marljax bootstraps where the time limit cut the episode (replay.bootstrap_time_limit): on MPE, where it ends every
# episode, the same targets. On MPE's 26-step rollouts, one whole episode each, the step the limit ends is the last,
# which the files also leave out (below), so there it changes nothing; it matters where an episode ends mid-rollout
BOOTSTRAP_TIME_LIMIT_SCRIPTS = ("ql_rnn",)
# These scripts and shaq.py and transf_qmix.py learn from every step of a stored rollout but its last, which serves
# only as the bootstrap of the one before (on MPE, one 26-step episode a rollout, the step the time limit ends, whose
# target bootstraps from the next episode's first observation). Learning from it as well left marljax's VDN 0.7 per
# agent behind JaxMARL's on spread at 1e7 steps, and QMIX level instead of ahead (docs/benchmarks.md)
SKIP_LAST_STEP_SCRIPTS = (*SHAQ_TRANSF_SCRIPTS, "ql_rnn")
# Each setting above, turned on for its scripts' files; every other file keeps its plain default (off), since a file's
# run takes no family defaults (MPE's turn each of these on for some algorithms; `translate` sets family_defaults=none)
SCRIPT_SWITCHES = {
    "replay.reset_each_update": RESET_EACH_UPDATE_SCRIPTS,
    "critic.time": TIMED_CRITIC_SCRIPTS,
    "replay.bootstrap_time_limit": BOOTSTRAP_TIME_LIMIT_SCRIPTS,
    "replay.skip_last_step": SKIP_LAST_STEP_SCRIPTS,
}


class _Run:
    """One translation: the file's values, what they map to, what was refused or ignored."""

    def __init__(self, values: Mapping[str, Any], algo: str, path: Path):
        self.values, self.algo, self.path = values, algo, path
        self.table, self.types = declared(algo), _types(algo)
        self.flat: dict[str, Any] = {"algo": algo}
        self.unknown: list[str] = []
        self.ignored: list[str] = []
        self.current = ""  # the file's key being read
        self.defaults: dict[str, Any] = {}  # dotted key -> the run's default, read when the file lacks a key (`given`)
        self.stem = path.stem.lower()  # which JaxMARL script a file belongs to, by the tuples above
        self.recurrent = "GRU_HIDDEN_DIM" in values or "_rnn_" in f"_{self.stem}_"
        self.shaq_or_transf = self.stem.startswith(SHAQ_TRANSF_SCRIPTS)  # see SHAQ_TRANSF_SCRIPTS
        self.relu_script = self.stem.startswith(RELU_SCRIPTS)  # see RELU_SCRIPTS

    def set(self, key: str, value: Any) -> None:
        """Set the setting that JaxMARL's `key` maps to; where this algorithm has none, the file's
        key being read (`current`) is refused."""
        if key not in self.table:
            self.unknown.append(self.current)
            return
        dotted = self.table[key]
        self.flat[dotted] = CONVERT[self.types[dotted]](value)

    def given(self, key: str) -> int:
        """The file's count `key` (TOTAL_TIMESTEPS, NUM_STEPS, ...), else the value the run will resolve
        for its setting: the algorithm's default, without family defaults as the file's run (JaxMARL's SHAQ files
        give no NUM_STEPS)."""
        if key in self.values:  # a count another key's unit is read with: checked here, naming it
            try:
                count = _int(self.values[key])
            except (TypeError, ValueError, OverflowError):
                count = 0
            if count < 1:
                raise ConfigError(f"{self.path}: {key}", f"must be a positive integer, got {self.values[key]!r}")
            return count
        if not self.defaults:
            env = self.values.get("ENV_NAME")
            env = env if isinstance(env, str) else None
            self.defaults = {k: d for k, _, d in schema_fields(self.algo, env, family_defaults="none")}
        return int(self.defaults[self.table[key]])

    def per_update(self) -> int:
        """Env steps of one seed per update: NUM_STEPS x NUM_ENVS."""
        return self.given("NUM_STEPS") * self.given("NUM_ENVS")

    def updates(self) -> int:
        """JaxMARL's NUM_UPDATES."""
        return max(self.given("TOTAL_TIMESTEPS") // self.per_update(), 1)


def _env_kwargs(run: _Run, value: Any) -> None:
    if not isinstance(value, Mapping) and value is not None:
        raise ConfigError(
            f"{run.path}: ENV_KWARGS", f"expected a mapping of the env's keyword arguments, got {value!r}"
        )
    run.flat["env_kwargs"] = {**dict(value or {}), **run.flat.get("env_kwargs", {})}


def _map_name(run: _Run, value: Any) -> None:  # SMAX: JaxMARL builds the scenario from the map's name
    run.flat.setdefault("env_kwargs", {})["scenario"] = str(value)


def _wandb_mode(run: _Run, value: Any) -> None:
    if value in ("online", "offline"):
        run.flat["log.backends"] = ["wandb"]
        run.flat["log.offline"] = value == "offline"
    elif value != "disabled":
        run.unknown.append(f"WANDB_MODE={value!r} (allowed: online, offline, disabled)")


def _sharing(run: _Run, value: Any) -> None:
    run.flat["param_sharing"] = "shared" if value else "independent"


def _tau(run: _Run, value: Any) -> None:
    """JaxMARL blends the target with TAU every TARGET_UPDATE_INTERVAL updates (TAU=1: a copy)."""
    if float(value) == 1.0:
        return
    if "replay.tau" not in run.types:
        run.unknown.append(f"TAU={value} (algo={run.algo} keeps no target network)")
        return
    run.flat["replay.tau"] = float(value)
    if _int(run.values.get("TARGET_UPDATE_INTERVAL", 0)) > 1:
        run.unknown.append("TAU<1 with TARGET_UPDATE_INTERVAL>1 (marljax: one or the other)")
    run.flat["replay.target_update_interval"] = 0


def _td_lambda_loss(run: _Run, value: Any) -> None:
    if not value:  # one-step targets, whatever TD_LAMBDA says (before or after this key)
        run.values = {**run.values, "TD_LAMBDA": 0.0}
        run.set("TD_LAMBDA", 0.0)


def _test_during_training(run: _Run, value: Any) -> None:
    if not value:
        run.flat["eval_every"] = 0


def _test_interval(run: _Run, value: Any) -> None:
    """At most 1: a fraction of the updates (JaxMARL's recent scripts); above: env steps (SHAQ's)."""
    if not run.values.get("TEST_DURING_TRAINING", True):
        return
    value = float(_number(value))
    if value <= 1:
        run.flat["eval_every"] = max(1, int(run.updates() * value))
    else:
        run.flat["eval_every"] = max(1, round(value / run.per_update()))


def _eps_anneal_time(run: _Run, value: Any) -> None:
    """Env steps of one seed, or steps of the vectorised env in the scripts that count those."""
    run.set("EPSILON_ANNEAL_TIME", _int(value) * (run.given("NUM_ENVS") if run.shaq_or_transf else 1))


def _eps_decay(run: _Run, value: Any) -> None:
    """A fraction of the updates -> env steps of one seed."""
    run.set("EPSILON_ANNEAL_TIME", max(1, round(float(_number(value)) * run.updates() * run.per_update())))


def _shaping(run: _Run, value: Any) -> None:  # JaxMARL's Overcooked: info["shaped_reward"], annealed over it
    run.flat["reward_shaping.info_key"] = "shaped_reward"
    run.flat["reward_shaping.horizon"] = _int(value)


def _norm_type(run: _Run, value: Any) -> None:
    run.set("NORM_TYPE", "none" if value in (None, "none", "None") else value)


def _beside(run: _Run, key: str, name: str) -> str:
    """The dotted setting `name` in the section of the one JaxMARL's `key` maps to."""
    return run.table[key].rsplit(".", 1)[0] + "." + name


def _scale_inputs(run: _Run, value: Any) -> None:
    """TransfQMix's batch norm of the raw entity features; its embeddings end in batch norm too
    (JaxMARL's embedder has no other), set in the same section."""
    run.set("SCALE_INPUTS", value)
    if "SCALE_INPUTS" in run.table:
        run.flat[_beside(run, "SCALE_INPUTS", "embed_norm")] = "batch_norm"


def _memory_window(run: _Run, value: Any) -> None:
    """PQN's steps of the previous rollout leading each sequence; JaxMARL's recurrent PQN learns
    whole sequences of environments, which marljax needs for it."""
    run.set("MEMORY_WINDOW", value)
    if "MEMORY_WINDOW" in run.table and _int(value):
        run.flat[_beside(run, "MEMORY_WINDOW", "minibatch_split")] = "envs"


def _num_minibatches(run: _Run, value: Any) -> None:
    """marljax's minibatches are slices of time by default; where the file's count does not divide
    its steps (JaxMARL's PPO splits the actors), they are slices of the environments."""
    run.set("NUM_MINIBATCHES", value)
    if _int(value) < 1:
        raise ConfigError(f"{run.path}: NUM_MINIBATCHES", f"must be a positive integer, got {value!r}")
    if "NUM_MINIBATCHES" in run.table and "NUM_STEPS" in run.table and run.given("NUM_STEPS") % _int(value):
        run.flat[_beside(run, "NUM_MINIBATCHES", "minibatch_split")] = "envs"


def _gradient_steps(run: _Run) -> int:
    """Gradient steps per update where the algorithm declares them (N_MINI_UPDATES: the file's, else
    the run's default), else 1: the unit of TransfQMix's schedules, which optax steps per gradient step."""
    return run.given("N_MINI_UPDATES") if "N_MINI_UPDATES" in run.table else 1


def _lr_warmup(run: _Run, value: Any) -> None:
    """A fraction of the updates (IPPO-RNN Overcooked v2's), joined to a cosine decay; in a file with
    LR_DECAY_TYPE (TransfQMix's), gradient steps, read only with LR_DECAY_TYPE=cos."""
    if "LR_DECAY_TYPE" in run.values:
        if run.values["LR_DECAY_TYPE"] != "cos":
            run.ignored.append(run.current)
            return
        value = float(_number(value)) / (run.updates() * _gradient_steps(run))
    run.set("LR_WARMUP", value)
    run.flat["lr_decay"] = "cosine"  # both scripts that read LR_WARMUP join it to a cosine decay


def _lr_decay_type(run: _Run, value: Any) -> None:
    """TransfQMix's exp | cos | linear; any other value (None included) decays linearly there too:
    its script's `elif "linear":` is always true, though its files' comment calls None static."""
    run.flat["anneal_lr"] = True
    run.set("LR_DECAY_TYPE", {"exp": "exponential", "cos": "cosine"}.get(value, "linear"))


def _lr_exp_decay_rate(run: _Run, value: Any) -> None:
    """A fraction per gradient step (TransfQMix's optax count, N_MINI_UPDATES per update) -> per update,
    as marljax steps its schedule: 1 - (1 - rate)^N_MINI_UPDATES. Read only with LR_DECAY_TYPE=exp."""
    if run.values.get("LR_DECAY_TYPE") != "exp":
        run.ignored.append(run.current)
        return
    run.set("LR_EXP_DECAY_RATE", -math.expm1(_gradient_steps(run) * math.log1p(-float(value))))


def _manual_alpha(run: _Run, value: Any) -> None:  # null: alpha learned, the setting's default (0)
    if value is not None:
        run.set("MANUAL_ALPHA_ESTIMATES", value)


def _activation(run: _Run, value: Any) -> None:
    """The hidden layers' activation, where the file's script reads it (see RELU_SCRIPTS)."""
    if run.relu_script:
        run.ignored.append(run.current)
    else:
        run.set("ACTIVATION", value)


def _hidden_size(run: _Run, value: Any) -> None:
    run.set("HIDDEN_SIZE", value)
    if run.recurrent and "GRU_HIDDEN_DIM" not in run.values:  # JaxMARL's recurrent scripts size the GRU by it too
        run.set("GRU_HIDDEN_DIM", value)


RULES: dict[str, Callable[[_Run, Any], None]] = {
    "ENV_KWARGS": _env_kwargs,
    "MAP_NAME": _map_name,
    "WANDB_MODE": _wandb_mode,
    "PARAMETERS_SHARING": _sharing,
    "TAU": _tau,
    "TD_LAMBDA_LOSS": _td_lambda_loss,
    "TEST_DURING_TRAINING": _test_during_training,
    "TEST_INTERVAL": _test_interval,
    "EPS_DECAY": _eps_decay,
    "EPSILON_ANNEAL_TIME": _eps_anneal_time,
    "REW_SHAPING_HORIZON": _shaping,
    "NORM_TYPE": _norm_type,
    "LR_WARMUP": _lr_warmup,
    "HIDDEN_SIZE": _hidden_size,
    "ACTIVATION": _activation,
    "MANUAL_ALPHA_ESTIMATES": _manual_alpha,
    "LR_DECAY_TYPE": _lr_decay_type,
    "LR_EXP_DECAY_RATE": _lr_exp_decay_rate,
    "SCALE_INPUTS": _scale_inputs,
    "NUM_MINIBATCHES": _num_minibatches,
    "MEMORY_WINDOW": _memory_window,
}
# keys accepted at the one value that is what marljax computes; another value is refused, saying why
ONLY: dict[str, tuple[Any, str]] = {
    "SCALE_CLIP_EPS": (False, "marljax does not scale the clip range by the agent count"),
    "OBS_WITH_AGENT_ID": (True, "marljax's MAPPO critic always sees the agent's one-hot id"),
}


def _refuse_algo(path: Path) -> ConfigError:
    if len(shared := answering(path)) > 1:
        names = f"{', '.join(shared[:-1])} and {shared[-1]}"
        return ConfigError("algo", f"{path} serves JaxMARL's {names} scripts: pass algo=<{'|'.join(shared)}>")
    return ConfigError(
        "algo", f"{path} is a JaxMARL config, which does not name its algorithm: pass algo=<{'|'.join(algorithms())}>"
    )


def _siblings_keys(algo: str) -> set[str]:
    """Keys declared by the algorithms that share a section with `algo` (the scripts a shared
    file serves): another script's key, such as QMIX's MIXER_* for vdn, is ignored, not refused."""
    mine = set(algorithm_schema(algo).sections)
    return {k for a in algorithms() if a != algo and mine & set(algorithm_schema(a).sections) for k in declared(a)}


def _translate_key(run: _Run, key: str, value: Any, others: set[str]) -> None:
    if key in RULES:
        RULES[key](run, value)
    elif key in ONLY:
        if value != ONLY[key][0]:
            run.unknown.append(f"{key}={value!r} ({ONLY[key][1]})")
    elif key in run.table:
        run.set(key, run.values[key])  # (a rule may have changed what an earlier key said)
    elif key in IGNORED or key in others:  # (others: keys another script of a shared file reads)
        run.ignored.append(key)
    else:
        run.unknown.append(key)


KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _expected(run: _Run, key: str) -> str:
    """What JaxMARL's `key` takes, as far as the setting it maps to says."""
    kind = KINDS.get(run.types.get(run.table.get(key, ""), object))
    return f"expected {kind} ({run.table[key]})" if kind else "expected a value of the kind JaxMARL's script reads"


def translate(values: Mapping[str, Any], path: str | Path, algo: str | None = None) -> tuple[dict, list[str]]:
    """(marljax's nested config mapping, the keys ignored) for JaxMARL config `values` read from
    `path`; `algo`: an `algo=` override, else the file's name decides. ConfigError listing every
    key it cannot map."""
    path = Path(path)
    algo = algo or infer_algo(path)
    if algo is None:
        raise _refuse_algo(path)
    if isinstance(values.get("ENV_NAME"), str):  # an env that cannot be installed here: say so before anything else
        from marljax.envs.registry import check_env_name

        check_env_name(values["ENV_NAME"])
    run = _Run({k: _number(v) for k, v in values.items()}, algo, path)
    others = _siblings_keys(algo) if len(answering(path)) > 1 else set()
    for key, value in run.values.items():
        run.current = key
        try:
            _translate_key(run, key, value, others)
        except (TypeError, ValueError, ArithmeticError) as exc:  # a value of the wrong kind: said with its key
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"{path}: {key}", f"got {value!r}; {_expected(run, key)}") from None
    if "ADD_AGENT_ID" not in values and "CLIP_EPS" in run.table:
        run.flat["agent_id"] = False  # JaxMARL's PPO baselines add no agent id unless asked
    if "NORM_TYPE" not in values and "NORM_TYPE" in run.table:
        run.set("NORM_TYPE", "none")  # JaxMARL's Q-networks without NORM_TYPE have no normalisation
    if not {"TD_LAMBDA", "LAMBDA", "TD_LAMBDA_LOSS"} & values.keys() and "TD_LAMBDA" in run.table:
        run.set("TD_LAMBDA", 0.0)  # JaxMARL's Q scripts that name no lambda learn from one-step targets
    if run.recurrent:
        run.flat["recurrent"] = True
    if run.relu_script and "ACTIVATION" in run.table:
        run.set("ACTIVATION", "relu")
    for key, stems in SCRIPT_SWITCHES.items():
        if key in run.types and run.stem.startswith(stems):
            run.flat[key] = True
    # a file is its script: a key it leaves unset takes marljax's plain default, never one tuned for the env's family
    run.flat["family_defaults"] = "none"
    if run.unknown:
        raise ConfigError(
            str(path),
            f"JaxMARL keys with no marljax equivalent for algo={algo}: {', '.join(run.unknown)}; "
            "remove them from the file (marljax's own keys: marljax train --help)",
        )
    return _nest(run.flat), run.ignored


def read(values: Mapping[str, Any], path: str | Path, algo: str | None = None) -> dict:
    """`load_config`'s reader of a JaxMARL file: `translate`'s mapping, saying on stderr which keys it ignored."""
    nested, ignored = translate(values, path, algo)
    if note := ignored_note(ignored):
        print(note, file=sys.stderr)
    return nested


def ignored_note(ignored: list[str]) -> str | None:
    """The one line saying which keys were accepted and ignored, or None."""
    if not ignored:
        return None
    return f"marljax: JaxMARL keys ignored (they change nothing computed here): {', '.join(ignored)}"


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


__all__ = ["is_jaxmarl", "infer_algo", "translate", "read", "ignored_note", "declared"]


register_file_format(FileFormat(is_jaxmarl, read))  # marljax.config.load_config reads JaxMARL's files through it
