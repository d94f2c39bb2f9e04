"""The typed, frozen run configuration: schema, parsing, validation, derived values.

Every setting lives in one frozen dataclass. Values come from a YAML file and
`key=value` overrides (dots reach nested sections: `mesh.data=4`,
`env_kwargs.scenario=3m`). Validation happens here, before anything is
compiled, and every error names the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from pathlib import Path
from typing import Any, Mapping

import yaml


class ConfigError(ValueError):
    """A bad configuration value. The message names the field and what is allowed."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh shape. -1 on one axis fills it with the devices left over."""

    seed: int = 1  # devices that split the seeds
    data: int = -1  # devices that split the environments (gradients averaged over them)
    agent: int = 1  # devices that split each group's per-agent parameters (param_sharing=independent)


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Multi-host runs (marljax.parallel.distributed). `distributed=auto` lets JAX find the
    cluster itself (Cloud TPU, Slurm, Open MPI); else give all three of the first fields."""

    coordinator: str = ""  # host:port of process 0, reachable from every process
    num_processes: int = 1  # 1: a single-process run (the default)
    process_id: int = 0  # this process, 0 .. num_processes-1
    auto: bool = False  # jax.distributed.initialize() with no arguments
    timeout_s: int = 120  # joining gives up after this long (a missing process, a wrong address)


@dataclasses.dataclass(frozen=True)
class Config:
    """One training run. Names follow JaxMARL's IPPO keys in lower case."""

    # ippo | mappo (centralised critic on the global state) | pqn_vdn (replay-free Q-learning) |
    # iql | vdn | qmix (Q-learning with replay and a target network)
    algo: str = "ippo"
    env: str = "MPE_simple_spread_v3"  # a JaxMARL id, or `module:callable` returning an env
    env_kwargs: dict = dataclasses.field(default_factory=dict)

    # PPO: JaxMARL's IPPO-FF MPE settings except lr, num_envs and total_timesteps, raised so
    # that the default run shows a clear rise in a few CPU minutes
    # (experiments/jaxmarl_ippo_ff_mpe.yaml holds JaxMARL's own values)
    lr: float = 2e-3
    num_envs: int = 64
    num_steps: int = 128
    total_timesteps: int = 5_000_000
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    anneal_lr: bool = True

    # Q-learning (algo=pqn_vdn|iql|vdn|qmix): epsilon-greedy acting, Q(lambda) targets; the PPO keys above give
    # lr, num_envs, num_steps, update_epochs, num_minibatches, gamma, max_grad_norm, anneal_lr
    eps_start: float = 1.0
    eps_finish: float = 0.05
    eps_decay_steps: int = 1_000_000  # env steps of one seed over which epsilon falls linearly
    td_lambda: float = 0.65
    # ... with replay (iql, vdn, qmix): sequences of num_steps steps of one environment
    buffer_size: int = 5000  # sequences kept (the oldest are overwritten)
    batch_size: int = 32  # sequences per gradient step; update_epochs gradient steps per update
    learning_starts: int = 10_000  # env steps of one seed before the first gradient step
    target_update_interval: int = 10  # updates between target-network copies; 0: Polyak averaging with tau
    tau: float = 0.005

    # networks
    activation: str = "tanh"  # tanh | relu
    hidden_size: int = 64
    num_layers: int = 2
    recurrent: bool = False  # GRU actor-critic; hidden state resets at episode ends
    gru_hidden_size: int = 128
    torso: str = "auto"  # auto | mlp | cnn  (auto: cnn for [H, W, C] observations)
    agent_id: bool = True  # append a one-hot agent id where agents share parameters
    # shared: one set per group of identical spaces | per_role: one per agent class (the env's
    # agent_classes, split further where spaces differ) | independent: one set per agent
    param_sharing: str = "shared"

    # seeds and devices
    seed: int = 0
    num_seeds: int = 1
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)

    # host loop
    out_dir: str = ""  # empty: runs/<algo>_<env>_<timestamp>
    overwrite: bool = False  # allow replacing a run already in out_dir
    num_chunks: int = 50  # jitted chunks the run is split into (one metrics row each)
    progress: bool = True
    plot: bool = True

    # checkpoints (<out_dir>/checkpoints): the whole training state, saved asynchronously
    checkpoint_every: int = 100  # updates between checkpoints (at chunk ends); 0: only at the end
    keep_checkpoints: int = 3  # the newest this many are kept
    resume: bool = False  # continue from the newest good checkpoint in out_dir (fresh start if none)
    nan_guard: bool = True  # stop on a non-finite loss or parameter, before it is checkpointed

    # evaluation, separate from the training rollouts (marljax.train.evaluate): every eval_every updates
    # (at chunk ends; 0: never) each seed plays eval_episodes fresh episodes; a sweep also keeps
    # each seed's best parameters and re-evaluates them with 10x the episodes (the absolute metric)
    eval_every: int = 0
    eval_episodes: int = 32
    eval_greedy: bool = True  # the policy's most likely action (false: sample it)

    # execution mode: anakin (rollout and update fused on device) | async (actor threads and a
    # learner joined by a host-side trajectory buffer; see marljax/pipeline)
    mode: str = "anakin"
    # async devices: a count (the first N devices act, the next M learn) or a list of device
    # indices (actor_devices=[0,1] learner_devices=[2,3]); on one device both share it
    actor_devices: Any = 1
    learner_devices: Any = 1
    num_actor_threads: int = 1  # async: each owns num_envs environments and produces whole batches
    buffer_capacity: int = 2  # async: batches the buffer may hold (started and not consumed, for block)
    max_staleness: int = 1  # async: K, the most policy versions a consumed batch may lag the learner
    staleness_policy: str = "block"  # block: actors wait rather than exceed K | drop: stale batches dropped
    correction: str = "ppo_clip"  # async off-policy correction: none | ppo_clip (decoupled PPO) | vtrace
    deterministic: bool = False  # async: lockstep with a fixed lag of exactly K versions; bitwise reproducible
    record_trajectories: str = ""  # async: append every consumed batch to this zarr dataset (marljax.pipeline.recorder)

    # ---- derived values: the one place they are computed ----
    @property
    def num_updates(self) -> int:
        return self.total_timesteps // (self.num_steps * self.num_envs)

    @property
    def updates_per_chunk(self) -> int:
        return max(1, math.ceil(self.num_updates / min(self.num_chunks, self.num_updates)))

    @property
    def minibatch_steps(self) -> int:
        """Time steps of every environment that one minibatch takes."""
        return self.num_steps // self.num_minibatches

    @property
    def env_steps_per_update(self) -> int:
        """Environment transitions per update, summed over envs and seeds."""
        return self.num_steps * self.num_envs * self.num_seeds

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


ALGOS = ("ippo", "mappo", "pqn_vdn", "iql", "vdn", "qmix")
Q_ALGOS = ("pqn_vdn", "iql", "vdn", "qmix")
ACTIVATIONS = ("tanh", "relu")
TORSOS = ("auto", "mlp", "cnn")
SHARING = ("shared", "per_role", "independent")
MODES = ("anakin", "async")
STALENESS_POLICIES = ("block", "drop")
CORRECTIONS = ("none", "ppo_clip", "vtrace")

_POSITIVE_INTS = (
    "num_envs", "num_steps", "total_timesteps", "update_epochs", "num_minibatches",
    "hidden_size", "num_layers", "gru_hidden_size", "num_seeds", "num_chunks",
)  # fmt: skip
_NON_NEGATIVE_FLOATS = ("lr", "ent_coef", "vf_coef", "clip_eps", "max_grad_norm")
_UNIT_FLOATS = ("gamma", "gae_lambda", "eps_start", "eps_finish", "td_lambda", "tau")


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _unknown_key(key: str, allowed: typing.Iterable[str], prefix: str = "") -> ConfigError:
    """ConfigError for field `prefix + key`, with the closest allowed key as a hint."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{prefix}{key}", f"unknown key{hint}; allowed keys: {', '.join(allowed)}")


def read_yaml_mapping(path: str | Path, field: str, expected: str) -> dict:
    """The mapping in YAML file `path`; ConfigError(field) when the file is missing or holds
    something else (`expected` says what it should hold)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(field, f"file not found: {path}")
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(field, f"{path} must hold {expected}")
    return loaded


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    """Convert a parsed YAML/CLI value to the field's declared type, or raise ConfigError."""
    kind = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict}.get(
        annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""),
    )
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(name, f"expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool):
            raise ConfigError(name, f"expected an integer, got {value!r}")
        if isinstance(value, str):
            value = _parse_scalar(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        raise ConfigError(name, f"expected an integer, got {value!r}")
    if kind is float:
        if isinstance(value, str):
            value = _parse_scalar(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(name, f"expected a number, got {value!r}")
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(name, f"expected a string, got {value!r}")
    if kind is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise ConfigError(name, f"expected a mapping, got {value!r}")
    return value


def _parse_scalar(text: str) -> Any:
    """Parse a CLI value: numbers like 2e6 (which YAML reads as a string), else YAML."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return yaml.safe_load(text) if text != "" else ""


def _build(cls, values: Mapping[str, Any], prefix: str = ""):
    fields = _fields(cls)
    kwargs = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in fields:
            raise _unknown_key(full, [f"{prefix}{k}" for k in fields])
        hints = typing.get_type_hints(cls)
        hint = hints[key]
        if hint is DistributedConfig and value == "auto":
            value = {"auto": True}
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(full, f"expected a mapping of {', '.join(_fields(hint))}")
            kwargs[key] = _build(hint, value, prefix=f"{full}.")
        else:
            kwargs[key] = _coerce(full, value, hint)
    return cls(**kwargs)


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(dotted, f"'{part}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(args: typing.Sequence[str]) -> dict:
    """`["lr=1e-3", "mesh.data=4"]` -> nested dict of parsed values."""
    tree: dict = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(arg, "expected key=value (for example lr=3e-4 or mesh.data=4)")
        key, text = arg.split("=", 1)
        _set_dotted(tree, key.strip(), _parse_scalar(text.strip()))
    return tree


def _merge(base: dict, over: Mapping) -> dict:
    out = dict(base)
    for k, v in over.items():
        if k != "env_kwargs" and isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        elif k == "env_kwargs" and isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML file (optional), apply `key=value` overrides, validate, freeze."""
    values = read_yaml_mapping(path, "config", "a mapping of keys to values") if path is not None else {}
    values = _merge(values, parse_overrides(overrides))
    return validate(_build(Config, values))


def from_dict(values: Mapping[str, Any]) -> Config:
    """Build and validate a Config from a (nested) mapping, e.g. a saved config.yaml."""
    return validate(_build(Config, values))


def replace(config: Config, **changes: Any) -> Config:
    """A validated copy with some fields changed (configs are never mutated)."""
    return validate(_build(Config, _merge(config.to_dict(), changes)))


def validate(config: Config) -> Config:
    """Check every field and the relations between them. Devices are checked in parallel.mesh."""
    c = config
    _one_of("algo", c.algo, ALGOS)
    _one_of("activation", c.activation, ACTIVATIONS)
    _one_of("torso", c.torso, TORSOS)
    _one_of("param_sharing", c.param_sharing, SHARING)
    _one_of("mode", c.mode, MODES)
    _one_of("staleness_policy", c.staleness_policy, STALENESS_POLICIES)
    _one_of("correction", c.correction, CORRECTIONS)
    for name in ("actor_devices", "learner_devices"):
        v = getattr(c, name)
        ok_count = isinstance(v, int) and not isinstance(v, bool) and v >= 1
        ok_list = isinstance(v, (list, tuple)) and v and all(isinstance(i, int) and i >= 0 for i in v)
        if not (ok_count or ok_list) or (ok_list and len(set(v)) != len(v)):
            raise ConfigError(name, f"must be a device count >= 1 or a list of distinct device indices, got {v!r}")
    if isinstance(c.actor_devices, (list, tuple)) and isinstance(c.learner_devices, (list, tuple)):
        shared = sorted(set(c.actor_devices) & set(c.learner_devices))
        if shared:
            raise ConfigError("learner_devices", f"actor and learner devices must be disjoint; both list {shared}")
    for name in ("num_actor_threads", "buffer_capacity"):
        if getattr(c, name) < 1:
            raise ConfigError(name, f"must be >= 1, got {getattr(c, name)}")
    if c.max_staleness < 0:
        raise ConfigError("max_staleness", f"must be >= 0 policy versions, got {c.max_staleness}")
    if c.record_trajectories and c.mode != "async":
        raise ConfigError("record_trajectories", "records the async learner's batches; set mode=async")
    if c.mode == "async":
        if c.deterministic and (c.num_actor_threads != 1 or c.staleness_policy != "block"):
            raise ConfigError(
                "deterministic", "needs num_actor_threads=1 and staleness_policy=block (lockstep with a fixed lag)"
            )
        if c.mesh.data not in (-1, 1) or c.mesh.seed not in (-1, 1):
            raise ConfigError(
                "mesh", "mode=async places work with actor_devices and learner_devices (mesh.agent splits the "
                "learner's agents); leave mesh.seed and mesh.data at their defaults",
            )
    for name in _POSITIVE_INTS:
        if getattr(c, name) <= 0:
            raise ConfigError(name, f"must be a positive integer, got {getattr(c, name)}")
    for name in _NON_NEGATIVE_FLOATS:
        value = getattr(c, name)
        if not (value >= 0 and math.isfinite(value)):
            raise ConfigError(name, f"must be a finite number >= 0, got {value}")
    if c.lr <= 0:
        raise ConfigError("lr", f"must be > 0, got {c.lr}")
    for name in _UNIT_FLOATS:
        value = getattr(c, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(name, f"must lie in [0, 1], got {value}")
    if c.num_steps % c.num_minibatches:
        raise ConfigError(
            "num_minibatches",
            f"must divide num_steps={c.num_steps} (each minibatch takes num_steps/num_minibatches "
            f"steps of every environment); allowed: {_divisors(c.num_steps)}",
        )
    if c.total_timesteps < c.num_steps * c.num_envs:
        raise ConfigError(
            "total_timesteps",
            f"must be at least num_steps*num_envs={c.num_steps * c.num_envs} (one update), "
            f"got {c.total_timesteps}",
        )
    for axis in ("seed", "data"):
        size = getattr(c.mesh, axis)
        if size == 0 or size < -1:
            raise ConfigError(f"mesh.{axis}", f"must be a positive device count or -1, got {size}")
    if not isinstance(c.mesh.agent, int) or c.mesh.agent < 1:
        raise ConfigError("mesh.agent", f"must be a positive device count, got {c.mesh.agent!r}")
    if c.mesh.agent > 1 and c.param_sharing != "independent":
        raise ConfigError(
            "mesh.agent",
            f"splits per-agent parameter sets, so it needs param_sharing=independent "
            f"(got {c.param_sharing!r}, which has one set per group); use mesh.data to add devices",
        )
    if c.mesh.seed == -1 and c.mesh.data == -1:
        raise ConfigError("mesh", "only one of mesh.seed and mesh.data may be -1")
    if c.mesh.seed > 0 and c.num_seeds % c.mesh.seed:
        raise ConfigError(
            "mesh.seed", f"must divide num_seeds={c.num_seeds}; allowed: {_divisors(c.num_seeds)}"
        )
    if c.mesh.data > 0 and c.num_envs % (c.mesh.data * c.mesh.agent):
        raise ConfigError(
            "mesh.data",
            f"mesh.data*mesh.agent must divide num_envs={c.num_envs} (they split the environments "
            f"while acting); allowed products: {_divisors(c.num_envs)}",
        )
    d = c.distributed
    if d.num_processes < 1:
        raise ConfigError("distributed.num_processes", f"must be >= 1, got {d.num_processes}")
    if not 0 <= d.process_id < d.num_processes:
        raise ConfigError(
            "distributed.process_id", f"must lie in 0..{d.num_processes - 1} (distributed.num_processes - 1), got {d.process_id}"
        )
    if d.num_processes > 1 and not d.auto and not re.fullmatch(r"[^:\s]+:\d+", d.coordinator):
        raise ConfigError(
            "distributed.coordinator", f"needs host:port of process 0 (e.g. 10.0.0.2:8476) with num_processes > 1, got {d.coordinator!r}"
        )
    if d.timeout_s < 1:
        raise ConfigError("distributed.timeout_s", f"must be >= 1 second, got {d.timeout_s}")
    if (d.auto or d.num_processes > 1) and c.mode == "async":
        raise ConfigError("distributed", "mode=async runs in one process (its actor threads share the host); use mode=anakin across hosts")
    if c.checkpoint_every < 0:
        raise ConfigError("checkpoint_every", f"must be >= 0 updates (0: only at the end), got {c.checkpoint_every}")
    if c.algo in Q_ALGOS:
        if c.mesh.agent > 1 and c.algo != "pqn_vdn":
            raise ConfigError("mesh.agent", f"algo={c.algo} has no agent-parallel replay yet; allowed: 1 (mesh.data and mesh.seed add devices; algo=pqn_vdn takes mesh.agent)")
        if c.mode != "anakin":
            raise ConfigError("mode", f"algo={c.algo} runs on device; allowed: anakin")
        for name in ("buffer_size", "batch_size"):
            if getattr(c, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(c, name)}")
        if c.algo != "pqn_vdn" and c.buffer_size < c.num_envs:
            raise ConfigError("buffer_size", f"must hold at least one rollout: >= num_envs={c.num_envs} sequences, got {c.buffer_size}")
        if c.learning_starts < 0 or c.target_update_interval < 0:
            raise ConfigError("learning_starts" if c.learning_starts < 0 else "target_update_interval", "must be >= 0")
        if c.eps_finish > c.eps_start:
            raise ConfigError("eps_finish", f"must be <= eps_start={c.eps_start}, got {c.eps_finish}")
        if c.eps_decay_steps < 1:
            raise ConfigError("eps_decay_steps", f"must be >= 1 env step, got {c.eps_decay_steps}")
    if c.eval_every < 0:
        raise ConfigError("eval_every", f"must be >= 0 updates (0: no evaluation), got {c.eval_every}")
    if c.eval_episodes < 1:
        raise ConfigError("eval_episodes", f"must be >= 1, got {c.eval_episodes}")
    if c.keep_checkpoints < 1:
        raise ConfigError("keep_checkpoints", f"must be >= 1, got {c.keep_checkpoints}")
    if c.resume and not c.out_dir:
        raise ConfigError("out_dir", "resume=true needs the out_dir of the run to continue")
    if c.resume and c.overwrite:
        raise ConfigError("resume", "resume=true continues the run in out_dir; overwrite=true would delete it. Pick one")
    if not isinstance(c.env_kwargs, dict):
        raise ConfigError("env_kwargs", "must be a mapping")
    return c


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(name, f"got {value!r}{hint}; allowed: {', '.join(allowed)}")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def dump_yaml(config: Config) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


__all__ = [
    "Config", "MeshConfig", "DistributedConfig", "ConfigError", "load_config", "from_dict", "replace", "validate",
    "parse_overrides", "dump_yaml", "read_yaml_mapping",
]  # fmt: skip
