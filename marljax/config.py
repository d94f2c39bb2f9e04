"""The typed, frozen run configuration: core schema, per-algorithm sections, parsing, validation.

A run's settings are one frozen `Config`: the core fields every run has (env, rollout shape,
optimiser, networks, seeds and devices, host loop, checkpoints, evaluation, execution mode)
and the sections of the chosen algorithm only (`ppo.*`, `q.*`, `replay.*`, `async.*`, ...).
Each algorithm registers its sections and its own defaults (`register_schema`, called by
`marljax.algos.registry`), so `marljax train algo=qmix` starts from QMIX's defaults and a key of
another algorithm's section is refused with a line naming the section that takes it.

Values come from a YAML file and `key=value` overrides (dots reach nested sections:
`mesh.data=4`, `ppo.clip_eps=0.1`, `env_kwargs.scenario=3m`). Every field declares, in its
metadata, one line of help (the CLI's `--help` is generated from it), its allowed values, and
whether it is `traced` (a float hyperparameter carried in the learner state, so that a sweep
can vmap it) or `resumable` (may change when a run is resumed). Validation happens here,
before anything is compiled, and every error names the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad configuration value. The message names the field and what is allowed."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


# ----------------------------------------------------------------------------- fields


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    choices: tuple = (),
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    traced: bool = False,
    resumable: bool = False,
    jaxmarl: str | tuple[str, ...] = (),
) -> Any:
    """A config field with its help line and constraints, checked by `validate`.

    `minimum`/`maximum`: inclusive bounds; `above`: exclusive lower bound. `traced`: a float
    hyperparameter carried as a traced scalar (sweeps vmap it). `resumable`: may change on resume.
    `jaxmarl`: JaxMARL's UPPERCASE config keys that mean this setting, in its units
    (marljax/jaxmarl_config.py translates through them).
    """
    meta = {"help": help, "choices": tuple(choices), "minimum": minimum, "above": above, "maximum": maximum,
            "traced": traced, "resumable": resumable,
            "jaxmarl": (jaxmarl,) if isinstance(jaxmarl, str) else tuple(jaxmarl)}  # fmt: skip
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


# ----------------------------------------------------------------------------- core sections

ACTIVATIONS = ("tanh", "relu")
TORSOS = ("auto", "mlp", "cnn")
LR_DECAYS = ("linear", "cosine")
DTYPES = ("float32", "bfloat16")  # the networks' matmul/conv compute dtype (marljax.nn.networks)
SHARING = ("shared", "per_role", "independent")
MODES = ("anakin", "async")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh shape. -1 on one axis fills it with the devices left over."""

    seed: int = setting(1, "devices that split the seeds (-1: the devices left over)", resumable=True)
    data: int = setting(-1, "devices that split the environments; gradients are averaged over them", resumable=True)
    agent: int = setting(1, "devices that split each group's per-agent parameters (param_sharing=independent)",
                         minimum=1, resumable=True)  # fmt: skip
    placement: str = setting("split", "how groups use mesh.agent: split (every group's agents divided over it; "
                             "each count must divide mesh.agent) or balanced (split where the count divides, else "
                             "replicated: whole on every agent device, its environments split over it)",
                             choices=("split", "balanced"))  # fmt: skip
    replicate: str = setting("", "comma-separated groups kept whole on every agent device (e.g. a heavy or "
                             "odd-sized group), whatever mesh.placement says")  # fmt: skip

    @property
    def replicated(self) -> tuple[str, ...]:
        """mesh.replicate's group names."""
        return tuple(name.strip() for name in str(self.replicate).split(",") if name.strip())


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Multi-host runs (marljax.parallel.distributed), in both modes (mode=async: one pipeline per
    process, one learner mesh across them; marljax/pipeline/processes.py). `distributed=auto` lets
    JAX find the cluster itself (Cloud TPU, Slurm, Open MPI); else give all three of the first fields."""

    coordinator: str = setting("", "host:port of process 0, reachable from every process", resumable=True)
    num_processes: int = setting(1, "processes in the run; 1: a single-process run", minimum=1, resumable=True)
    process_id: int = setting(0, "this process, 0 .. num_processes-1", resumable=True)
    auto: bool = setting(
        False, "jax.distributed.initialize() with no arguments (JAX finds the cluster)", resumable=True
    )
    timeout_s: int = setting(120, "seconds before joining gives up (a missing process, a wrong address)",
                             minimum=1, resumable=True)  # fmt: skip


TRACKERS = ("tensorboard", "wandb", "neptune", "mlflow")  # besides jsonl, which is always on
TRACKER_MODULES = {"tensorboard": "tensorboardX", "wandb": "wandb", "neptune": "neptune", "mlflow": "mlflow"}


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """`log.*`: experiment trackers that mirror every metrics row (marljax/train/trackers.py).
    metrics.jsonl is always written; each tracker is an optional extra, imported only when chosen."""

    backends: Any = setting(help="trackers besides metrics.jsonl: a list of tensorboard, wandb, neptune, mlflow",
                            factory=list, resumable=True)  # fmt: skip
    project: str = setting("marljax", "the tracker's project (wandb, neptune) or experiment (mlflow)", resumable=True,
                           jaxmarl="PROJECT")  # fmt: skip
    entity: str = setting("", "wandb entity / neptune workspace; empty: the account's default", resumable=True,
                          jaxmarl="ENTITY")  # fmt: skip
    run_name: str = setting("", "the run's name in the tracker; empty: the out_dir's name", resumable=True)
    tags: Any = setting(help="tags of the tracker's run (a list of strings)", factory=list, resumable=True)
    group: str = setting("", "group the tracker's runs under this name (a sweep groups its cells by default)",
                         resumable=True)  # fmt: skip
    offline: bool = setting(True, "wandb, neptune: write under out_dir and sync later (false: stream to the server)",
                            resumable=True)  # fmt: skip
    mlflow_uri: str = setting("", "MLflow tracking URI (a server, sqlite:///...); empty: a file store in <out_dir>/mlruns",
                              resumable=True)  # fmt: skip

    def check(self, config: Config) -> None:
        for name in ("backends", "tags"):
            v = getattr(self, name)
            if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
                raise ConfigError(
                    f"log.{name}", f"must be a list of names, e.g. [{', '.join(TRACKERS[:2])}], got {v!r}"
                )
        for b in self.backends:
            if b == "jsonl":
                continue  # always on
            if b not in TRACKERS:
                raise ConfigError("log.backends", f"unknown tracker {b!r}; allowed: jsonl, {', '.join(TRACKERS)}")
            if importlib.util.find_spec(TRACKER_MODULES[b]) is None:
                raise ConfigError("log.backends", f'{b} is not installed: pip install "marljax[{b}]"')


@dataclasses.dataclass(frozen=True)
class RewardShapingConfig:
    """`reward_shaping.*`: a dense reward the env reports in its step `info` (agent -> scalar), added
    to the training reward scaled by a factor that falls linearly from 1 to 0 over `horizon` env
    steps (JaxMARL's Overcooked pays `info["shaped_reward"]` for onions placed, dishes taken and
    soups picked up). Logged returns stay the env's own reward."""

    info_key: str = setting("", "the env step's info key holding a per-agent dense reward (overcooked: "
                            "shaped_reward); empty: no shaping")  # fmt: skip
    horizon: int = setting(0, "env steps (of one seed) over which the shaping factor falls linearly from 1 to 0; "
                           "0: constant 1", minimum=0)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class AsyncConfig:
    """`async.*`: the actor-learner pipeline of mode=async (marljax/pipeline).

    For algorithms that support it: actor threads produce version-stamped rollouts into a bounded
    host-side buffer that the learner consumes."""

    actor_devices: Any = setting(1, "a device count (the first N devices act) or a list of device indices",
                                 resumable=True)  # fmt: skip
    learner_devices: Any = setting(1, "a device count (the next M devices learn) or a list of device indices",
                                   resumable=True)  # fmt: skip
    actor_backend: str = setting(
        "default", "where the actors run: default (the devices of JAX's default backend, shared out with the learner "
        "by async.actor_devices / learner_devices) | cpu (the host CPU backend's devices, while the learner takes "
        "the accelerator's; async.actor_devices then counts or indexes CPU devices, async.learner_devices the "
        "accelerator's; on a CPU-only machine the same as default)", choices=("default", "cpu"), resumable=True)  # fmt: skip
    num_actor_threads: int = setting(1, "actor threads, each with num_envs environments", minimum=1)
    buffer_capacity: int = setting(2, "batches the buffer may hold (started and not consumed, for block)", minimum=1)
    max_staleness: int = setting(1, "K: the most policy versions a consumed batch may lag the learner", minimum=0)
    staleness_policy: str = setting("block", "block: actors wait rather than exceed K; drop: stale batches are dropped",
                                    choices=("block", "drop"))  # fmt: skip
    correction: str = setting("ppo_clip", "off-policy correction: none | ppo_clip (decoupled PPO) | vtrace",
                              choices=("none", "ppo_clip", "vtrace"))  # fmt: skip
    deterministic: bool = setting(False, "lockstep with a fixed lag of exactly K versions; bitwise reproducible")
    micro_batches: int = setting(
        1, "M: each actor thread rolls out its num_envs environments in M slices of num_envs/M, each its own "
        "jitted rollout and buffer item with its own version stamp; an update concatenates M slices (host envs: "
        "num_envs/M finished segments, or M groups of copies in lockstep; must divide num_envs)", minimum=1, resumable=True)  # fmt: skip
    record_trajectories: str = setting(
        "",
        "append every consumed batch to this zarr dataset (marljax.pipeline.recorder; "
        "several processes: process p writes PATH/process_<p>)",
    )
    actor_timeout_s: float = setting(
        300.0, "fail the run, naming the actor, when one rollout (a JAX env's, compilation included) or one host "
        "env step takes longer than this; 0 waits forever", minimum=0.0, resumable=True)  # fmt: skip
    host_stepping: str = setting(
        "auto", "host (PettingZoo) env copies: independent (each copy steps on its own worker thread; a slow or "
        "failing copy holds back only its own trajectory) | lockstep (all copies step together, one after another) "
        "| auto (lockstep when deterministic, else independent)", choices=("auto", "independent", "lockstep"),
        resumable=True)  # fmt: skip
    env_step_timeout_s: float = setting(
        0.0, "independent stepping: a host env step longer than this fails its copy, which is restarted from a "
        "fresh env; 0: off (a hung step then stops the run after actor_timeout_s)", minimum=0.0, resumable=True)  # fmt: skip
    max_env_failures: int = setting(
        3, "independent stepping: a host env copy is retired at this many failures (raises or timeouts) in a row; "
        "a finished episode ends the row", minimum=1, resumable=True)  # fmt: skip
    min_env_copies: int = setting(
        1, "independent stepping: the run fails when fewer live host env copies than this remain for one seed of "
        "an actor thread (at most num_envs)", minimum=1, resumable=True)  # fmt: skip
    balance: str = setting(
        "off", "production/consumption balance: off | rate (pause actor threads between batches, within "
        "[min_actor_threads, num_actor_threads], and bound the batches in flight, so that about balance_target "
        "batches wait for the learner and none is dropped; with micro-batches it counts slices; "
        "marljax/pipeline/balance.py). Ignored with deterministic=true",
        choices=("off", "rate"), resumable=True)  # fmt: skip
    min_actor_threads: int = setting(1, "balance=rate: the fewest active actor threads (at most num_actor_threads)",
                                     minimum=1, resumable=True)  # fmt: skip
    balance_target: int = setting(0, "balance=rate: batches that should wait in the buffer behind the one the learner "
                                  "takes (below buffer_capacity)", minimum=0, resumable=True)  # fmt: skip

    def check(self, config: Config) -> None:
        for name in ("actor_devices", "learner_devices"):
            v = getattr(self, name)
            ok_count = isinstance(v, int) and not isinstance(v, bool) and v >= 1
            ok_list = isinstance(v, (list, tuple)) and v and all(isinstance(i, int) and i >= 0 for i in v)
            if not (ok_count or ok_list) or (ok_list and len(set(v)) != len(v)):
                raise ConfigError(
                    f"async.{name}", f"must be a device count >= 1 or a list of distinct device indices, got {v!r}"
                )
        lists = isinstance(self.actor_devices, (list, tuple)) and isinstance(self.learner_devices, (list, tuple))
        if lists and self.actor_backend == "default":  # with cpu they may index two platforms (async_mesh checks)
            shared = sorted(set(self.actor_devices) & set(self.learner_devices))
            if shared:
                raise ConfigError(
                    "async.learner_devices", f"actor and learner devices must be disjoint; both list {shared}"
                )
        if self.record_trajectories and config.mode != "async":
            raise ConfigError("async.record_trajectories", "records the async learner's batches; set mode=async")
        if (
            config.mode == "async"
            and self.deterministic
            and (self.num_actor_threads != 1 or self.staleness_policy != "block")
        ):
            raise ConfigError(
                "async.deterministic",
                "needs async.num_actor_threads=1 and async.staleness_policy=block (lockstep with a fixed lag)",
            )
        if self.deterministic and self.host_stepping == "independent":
            raise ConfigError("async.host_stepping", "independent stepping depends on timing; with async.deterministic=true "
                              "allowed: lockstep or auto")  # fmt: skip
        if self.min_env_copies > config.num_envs:
            raise ConfigError(
                "async.min_env_copies", f"must be between 1 and num_envs={config.num_envs}, got {self.min_env_copies}"
            )
        if self.env_step_timeout_s and self.actor_timeout_s and self.env_step_timeout_s >= self.actor_timeout_s:
            raise ConfigError("async.env_step_timeout_s", f"must be below async.actor_timeout_s={self.actor_timeout_s:g} "
                              f"(or 0: off), got {self.env_step_timeout_s:g}; else the run stops before a hung copy is restarted")  # fmt: skip

        self._check_micro_batches(config)
        if self.min_actor_threads > self.num_actor_threads:
            raise ConfigError("async.min_actor_threads", f"must be between 1 and async.num_actor_threads="
                              f"{self.num_actor_threads}, got {self.min_actor_threads}")  # fmt: skip
        if self.balance_target >= self.buffer_capacity:
            raise ConfigError("async.balance_target", f"must be between 0 and async.buffer_capacity - 1 = "
                              f"{self.buffer_capacity - 1}, got {self.balance_target}")  # fmt: skip

    def _check_micro_batches(self, config: Config) -> None:
        M, E = self.micro_batches, config.num_envs
        if E % M:
            allowed = ", ".join(str(d) for d in range(1, E + 1) if E % d == 0)
            raise ConfigError("async.micro_batches", f"must divide num_envs={E} (each slice takes num_envs/micro_batches "
                              f"environments of an actor thread); allowed: {allowed}; got {M}")  # fmt: skip

    def balanced(self) -> bool:
        """Whether the balance controller runs (never in deterministic mode: timing must not steer it)."""
        return self.balance == "rate" and not self.deterministic

    def stepping(self) -> str:
        """How host env copies step: `independent` or `lockstep` (auto resolved)."""
        if self.host_stepping == "auto":
            return "lockstep" if self.deterministic else "independent"
        return self.host_stepping


# ----------------------------------------------------------------------------- the algorithm table


@dataclasses.dataclass(frozen=True)
class Supports:
    """What an algorithm can run with; config validation refuses the rest before compiling."""

    actions: tuple[str, ...] = ("discrete",)  # discrete and/or continuous
    recurrent: bool = True
    param_sharing: tuple[str, ...] = SHARING
    agent_axis: bool = False  # mesh.agent > 1 (param_sharing=independent)
    agent_replicate: bool = False  # a group replicated over mesh.agent (mesh.placement=balanced, mesh.replicate)
    async_mode: bool = False  # mode=async
    host_envs: bool = False  # PettingZoo envs stepped on the host (mode=async)


@dataclasses.dataclass(frozen=True)
class AlgorithmSchema:
    """What the config needs to know of one algorithm: its sections, defaults and supports."""

    name: str
    summary: str  # one line for `--help`
    sections: Mapping[str, type]  # key -> frozen dataclass (e.g. {"ppo": PPOConfig})
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # nested overrides of field defaults
    supports: Supports = Supports()
    check: Callable[[Config], None] | None = None  # checks across core and section fields


_SCHEMAS: dict[str, AlgorithmSchema] = {}


def register_schema(schema: AlgorithmSchema) -> None:
    """Make `algo=schema.name` known to the config (`marljax.algos.registry.register` calls this)."""
    sections = dict(schema.sections)
    if schema.supports.async_mode:
        sections.setdefault("async", AsyncConfig)
    _SCHEMAS[schema.name] = dataclasses.replace(schema, sections=sections)


def algorithm_schema(name: str) -> AlgorithmSchema:
    if name not in _SCHEMAS:
        _one_of("algo", name, tuple(_SCHEMAS))
    return _SCHEMAS[name]


def algorithms() -> tuple[str, ...]:
    """Every registered algorithm's name, in registration order."""
    return tuple(_SCHEMAS)


# ----------------------------------------------------------------------------- the core schema


# compile_cache's values (marljax/train/compile_cache.py uses the directory they mean)
COMPILE_CACHE_OFF = (False, "false", "off", "no", "0")
COMPILE_CACHE_AUTO = (True, "auto", "true", "on", "yes")


def compile_cache_problem(value: Any) -> str | None:
    """Why `compile_cache=value` is not allowed, or None."""
    if value in COMPILE_CACHE_OFF or value in COMPILE_CACHE_AUTO:
        return None
    if isinstance(value, str) and value.strip():
        return None
    return f"must be auto, false or a directory, got {value!r}"


@dataclasses.dataclass(frozen=True)
class Config:
    """One training run: the core fields, plus the chosen algorithm's sections in `sections`
    (reached as attributes: `config.ppo.clip_eps`; the `async` section as `config.async_`)."""

    algo: str = setting("ippo", "the algorithm (marljax train --help lists them)")
    env: str = setting("MPE_simple_spread_v3", "a JaxMARL env id, or module:callable returning an env "
                       "(imports and runs that code)", jaxmarl="ENV_NAME")  # fmt: skip
    env_kwargs: dict = setting(factory=dict, help="keyword arguments of the env's constructor (env_kwargs.name=value)")

    # rollout shape and budget
    total_timesteps: int = setting(5_000_000, "env steps of one seed over the whole run", minimum=1,
                                   maximum=10**15, resumable=True, jaxmarl="TOTAL_TIMESTEPS")  # fmt: skip
    num_envs: int = setting(64, "environments stepped in parallel per seed", minimum=1, jaxmarl="NUM_ENVS")
    num_steps: int = setting(128, "steps of every environment per update (the rollout length)", minimum=1,
                             jaxmarl="NUM_STEPS")  # fmt: skip

    # optimiser (every algorithm)
    lr: float = setting(2e-3, "Adam learning rate", above=0.0, traced=True, jaxmarl="LR")
    anneal_lr: bool = setting(True, "decay the learning rate to 0 over the run (lr_decay says how)",
                              jaxmarl=("ANNEAL_LR", "LR_LINEAR_DECAY"))  # fmt: skip
    lr_decay: str = setting("linear", "the decay's shape when anneal_lr: linear | cosine", choices=LR_DECAYS)
    lr_warmup: float = setting(0.0, "fraction of the run's updates over which the learning rate first rises "
                               "linearly from 0 (then decays over the rest when anneal_lr)", minimum=0.0, maximum=0.99,
                               jaxmarl="LR_WARMUP")  # fmt: skip
    max_grad_norm: float = setting(0.5, "clip the global gradient norm to this", above=0.0, traced=True,
                                   jaxmarl="MAX_GRAD_NORM")  # fmt: skip
    gamma: float = setting(0.99, "discount factor", minimum=0.0, maximum=1.0, traced=True, jaxmarl="GAMMA")

    # networks
    activation: str = setting("tanh", "hidden-layer activation", choices=ACTIVATIONS, jaxmarl="ACTIVATION")
    hidden_size: int = setting(64, "width of the hidden layers", minimum=1,
                               jaxmarl=("FC_DIM_SIZE", "AGENT_HIDDEN_DIM", "HIDDEN_SIZE"))  # fmt: skip
    num_layers: int = setting(2, "hidden layers of the feed-forward torso", minimum=1, jaxmarl="NUM_LAYERS")
    network: dict = setting(factory=dict, help="per-group sizes over hidden_size/num_layers: network.<group>.hidden_size=32, "
                            "network.<group>.num_layers=1 (groups as param_sharing forms them)")  # fmt: skip
    recurrent: bool = setting(False, "GRU networks; the hidden state resets at episode ends")
    gru_hidden_size: int = setting(128, "GRU state width (recurrent=true)", minimum=1, jaxmarl="GRU_HIDDEN_DIM")
    torso: str = setting("auto", "observation encoder; auto: cnn for [H, W, C] observations", choices=TORSOS)
    dtype: str = setting("float32", "the networks' matmul/conv inputs; bfloat16: bf16 operands, float32 accumulation, "
                         "float32 parameters and outputs (for GPUs/TPUs; slower on CPU)", choices=DTYPES)  # fmt: skip
    agent_id: bool = setting(True, "append a one-hot agent id where agents share parameters", jaxmarl="ADD_AGENT_ID")
    param_sharing: str = setting("shared", "shared: one set per group of identical spaces | per_role: one per agent "
                                 "class | independent: one per agent", choices=SHARING)  # fmt: skip

    # seeds and devices
    seed: int = setting(0, "the run's seed; seed i of num_seeds uses a key derived from it", minimum=0,
                        maximum=2**32 - 1, jaxmarl="SEED")  # fmt: skip
    num_seeds: int = setting(1, "independent seeds trained at once (vmapped)", minimum=1, jaxmarl="NUM_SEEDS")
    mesh: MeshConfig = setting(factory=MeshConfig, help="device mesh shape: mesh.seed, mesh.data, mesh.agent")
    distributed: DistributedConfig = setting(
        factory=DistributedConfig, help="multi-host: distributed.* or distributed=auto"
    )
    log: LogConfig = setting(
        factory=LogConfig, help="experiment trackers: log.backends=[tensorboard,wandb,neptune,mlflow]"
    )
    reward_shaping: RewardShapingConfig = setting(factory=RewardShapingConfig, help="a dense reward from the env's info, "
                                                  "annealed: reward_shaping.info_key, reward_shaping.horizon")  # fmt: skip

    # host loop
    out_dir: str = setting("", "the run's directory; empty: runs/<algo>_<env>_<timestamp>", resumable=True)
    overwrite: bool = setting(False, "allow replacing a run already in out_dir", resumable=True)
    num_chunks: int = setting(
        50, "jitted chunks the run is split into (one metrics row each)", minimum=1, resumable=True
    )
    progress: bool = setting(True, "show a progress bar", resumable=True)
    plot: bool = setting(True, "write returns.png at the end", resumable=True)
    compile_cache: Any = setting(
        "auto", "JAX's persistent compilation cache, kept across runs: auto (~/.cache/marljax/jax-compile/<machine>; "
        "JAX_COMPILATION_CACHE_DIR wins when set) | false | a directory", resumable=True)  # fmt: skip

    # checkpoints (<out_dir>/checkpoints): the whole training state, saved asynchronously
    checkpoint_every: int = setting(100, "updates between checkpoints (at chunk ends); 0: only at the end",
                                    minimum=0, resumable=True)  # fmt: skip
    keep_checkpoints: int = setting(3, "the newest this many checkpoints are kept", minimum=1, resumable=True)
    resume: bool = setting(False, "continue from the newest good checkpoint in out_dir", resumable=True)
    nan_guard: bool = setting(True, "stop on a non-finite loss or parameter, before it is checkpointed", resumable=True)

    # evaluation, apart from the training rollouts (marljax.train.evaluate)
    eval_every: int = setting(
        0, "updates between greedy evaluations (at chunk ends); 0: never", minimum=0, resumable=True
    )
    eval_episodes: int = setting(32, "fresh episodes each seed plays per evaluation", minimum=1, resumable=True,
                                 jaxmarl=("NUM_TEST_EPISODES", "TEST_NUM_ENVS", "NUM_TEST_ENVS"))  # fmt: skip
    eval_greedy: bool = setting(True, "evaluate the policy's most likely action (false: sample it)", resumable=True)

    # execution mode
    mode: str = setting("anakin", "anakin: rollout and update fused on device | async: actor threads and a "
                        "learner joined by a host-side trajectory buffer", choices=MODES)  # fmt: skip

    sections: Mapping[str, Any] = dataclasses.field(default_factory=dict, metadata={"help": "", "section_table": True})

    def __getattr__(self, name: str) -> Any:
        """`config.ppo` -> the ppo section (`async_` -> the async section)."""
        sections = self.__dict__.get("sections")
        key = name[:-1] if name.endswith("_") else name
        if sections is not None and key in sections:
            return sections[key]
        if sections is not None and not name.startswith("__"):
            raise AttributeError(f"algo={self.__dict__.get('algo')} has no field or section {name!r} "
                                 f"(its sections: {', '.join(sections) or 'none'})")  # fmt: skip
        raise AttributeError(name)

    def group_network(self, group: str) -> tuple[int, int]:
        """(hidden_size, num_layers) of group's networks: `network.<group>.*` over the global fields."""
        over = self.network.get(group, {})
        return over.get("hidden_size", self.hidden_size), over.get("num_layers", self.num_layers)

    def value(self, dotted: str) -> Any:
        """The value of a dotted key: `lr`, `ppo.clip_eps`, `mesh.data`."""
        node: Any = self
        for part in dotted.split("."):
            node = node.sections[part] if node is self and part in self.sections else getattr(node, part)
        return node

    # ---- derived values: the one place they are computed ----
    @property
    def num_updates(self) -> int:
        return self.total_timesteps // (self.num_steps * self.num_envs)

    @property
    def updates_per_chunk(self) -> int:
        return max(1, math.ceil(self.num_updates / min(self.num_chunks, self.num_updates)))

    @property
    def env_steps_per_update(self) -> int:
        """Environment transitions per update, summed over envs and seeds (throughput counts these)."""
        return self.num_steps * self.num_envs * self.num_seeds

    @property
    def run_steps_per_update(self) -> int:
        """Environment steps per update of one run (one seed): the x-axis of every curve, the
        `env_steps` of metrics rows and marl-eval's `step_count`; `total_timesteps` counts these."""
        return self.num_steps * self.num_envs

    def to_dict(self) -> dict:
        """Core fields, then the algorithm's sections, as nested plain values (config.yaml)."""
        out = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "sections"}
        out.update({name: _plain(section) for name, section in self.sections.items()})
        return out


def _plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def core_keys() -> tuple[str, ...]:
    return tuple(name for name in _fields(Config) if name != "sections")


# ----------------------------------------------------------------------------- walking the schema


def _walk(cls, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, type]]:
    """(dotted key, field, owning class) of every leaf field of a schema class, nested included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "sections":
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _walk(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f, cls


def schema_fields(algo: str) -> list[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, default for this algorithm) of the core and of algo's sections."""
    defaults = to_flat(load_config(None, [f"algo={algo}"]).to_dict())
    out = [(key, f, defaults[key]) for key, f, _ in _walk(Config)]
    for name, cls in algorithm_schema(algo).sections.items():
        out += [(key, f, defaults[key]) for key, f, _ in _walk(cls, f"{name}.")]
    return out


def traced_keys(config: Config) -> tuple[str, ...]:
    """Dotted keys of the traced hyperparameters of this config (core, then its sections)."""
    return tuple(key for key, f, _ in _config_walk(config) if f.metadata.get("traced"))


def resumable_keys(config: Config) -> frozenset[str]:
    """Dotted keys that may change when this run is resumed."""
    return frozenset(key for key, f, _ in _config_walk(config) if f.metadata.get("resumable"))


def _config_walk(config: Config) -> Iterator[tuple[str, dataclasses.Field, type]]:
    yield from _walk(Config)
    for name, section in config.sections.items():
        yield from _walk(type(section), f"{name}.")


def hparams_values(config: Config) -> dict[str, float]:
    """The traced hyperparameters' values, by dotted key."""
    return {key: float(config.value(key)) for key in traced_keys(config)}


FREEFORM = ("env_kwargs", "network")  # dict fields whose keys are the env's, not the schema's


def to_flat(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """{"mesh": {"data": 2}} -> {"mesh.data": 2}; env_kwargs and network stay one value."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, Mapping) and k not in FREEFORM:
            out.update(to_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ----------------------------------------------------------------------------- reading


def listed(items: typing.Iterable[Any], first: int = 8) -> str:
    """The first few items, comma-separated, and how many more (a message stays one short line
    however many keys a file holds)."""
    items = [str(x) for x in items]
    more = f" and {len(items) - first} more" if len(items) > first else ""
    return ", ".join(items[:first]) + more


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 300 characters), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def unknown_key(key: str, allowed: typing.Iterable[str], prefix: str = "") -> ConfigError:
    """ConfigError for field `prefix + key`, with the closest allowed key as a hint."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{prefix}{key}", f"unknown key{hint}; allowed keys: {', '.join(allowed)}")


RENAMED = {
    "update_epochs": ("ppo.update_epochs", "pqn.update_epochs", "replay.gradient_steps")
}  # keys whose name changed


def _homes(key: str) -> list[tuple[str, str, list[str]]]:
    """Where a top-level key that is not core lives: (section, dotted key, algorithms taking it)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for schema in _SCHEMAS.values():
        for name, cls in schema.sections.items():
            if key == name:  # a whole section
                found.setdefault(name, (name, []))[1].append(schema.name)
            for field in _fields(cls):
                if field == key or f"{name}.{field}" in RENAMED.get(key, ()):
                    found.setdefault(f"{name}.{field}", (name, []))[1].append(schema.name)
    return [(section, dotted, algos) for dotted, (section, algos) in found.items()]


def _misplaced(key: str, algo: str, sections: Mapping[str, type]) -> ConfigError:
    """The error for a top-level key that is neither core nor one of algo's sections."""
    homes = _homes(key)
    mine = [dotted for section, dotted, _ in homes if section in sections]
    if mine:
        return ConfigError(key, f"is a key of a section now: write {mine[0]}")
    if homes:
        where = "; ".join(f"{'the section' if dotted == section else dotted} of algo={', '.join(algos)}"
                          for section, dotted, algos in homes)  # fmt: skip
        takes = ", ".join(f"{s}.*" for s in sections) or "no section"
        return ConfigError(key, f"is {where}; algo={algo} takes {takes}")
    allowed = list(core_keys()) + [f"{s}.{f}" for s, cls in sections.items() for f in _fields(cls)]
    return unknown_key(key, allowed)


def check_key(dotted: str, algo: str) -> None:
    """ConfigError (naming `dotted`) unless `dotted` is a key that algo's config takes."""
    schema = algorithm_schema(algo)
    head, _, rest = dotted.partition(".")
    if head == "env_kwargs" or (head == "distributed" and not rest):
        return
    if head == "network":  # network.<group>.<size field>; the group is checked against the env in wiring
        if not rest:  # the whole mapping (a sweep's base, a flat config): its entries are checked in validate
            return
        group, _, leaf = rest.partition(".")
        if not group or leaf not in NETWORK_KEYS:
            raise ConfigError(dotted, f"expected network.<group>.<{'|'.join(NETWORK_KEYS)}>")
        return
    if head in schema.sections or (
        head in core_keys() and dataclasses.is_dataclass(typing.get_type_hints(Config)[head])
    ):
        cls = schema.sections.get(head) or typing.get_type_hints(Config)[head]
        allowed = [k for k, _, _ in _walk(cls, f"{head}.")]
        if dotted not in allowed:
            raise unknown_key(dotted, allowed)
    elif not rest:
        if head not in core_keys():
            raise _misplaced(dotted, algo, schema.sections)
    else:  # a dotted key whose head is not a section of algo
        homes = [algos for section, dotted_home, algos in _homes(head) if dotted_home == section]
        if homes:
            takes = ", ".join(f"{s}.*" for s in schema.sections) or "no section"
            raise ConfigError(
                dotted, f"is in section {head}.* of algo={', '.join(homes[0])}; algo={algo} takes {takes}"
            )
        raise _misplaced(head, algo, schema.sections)


def read_yaml_mapping(path: str | Path, field: str, expected: str) -> dict:
    """The mapping in YAML file `path`; ConfigError(field) when the file is missing or holds
    something else (`expected` says what it should hold)."""
    path = Path(path)
    if not path.is_file():
        if path.is_dir():
            raise ConfigError(field, f"{path} is a directory, not a YAML file; give the file in it")
        if path.exists():  # a FIFO, socket or device: reading it could block or never end
            raise ConfigError(field, f"{path} is not a regular file (a FIFO, socket or device); give a YAML file")
        raise ConfigError(field, f"file not found: {path}")
    try:
        loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(field, f"{path} is not valid YAML{line}: {problem}") from None
    except OSError as exc:
        raise ConfigError(field, f"{path} cannot be read ({exc.strerror})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(field, f"{path} must hold {expected}")
    return loaded


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (no Python objects), refusing a key given twice in one mapping
    (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


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
            value = parse_scalar(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        raise ConfigError(name, f"expected an integer, got {value!r}")
    if kind is float:
        if isinstance(value, str):
            value = parse_scalar(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(name, f"expected a number, got {value!r}")
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        hint = " (YAML reads yes/no/on/off/true/false as booleans: quote the word)" if isinstance(value, bool) else ""
        raise ConfigError(name, f"expected a string, got {value!r}{hint}")
    if kind is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise ConfigError(name, f"expected a mapping, got {value!r}")
    return value


def parse_scalar(text: str) -> Any:
    """Parse a CLI value: numbers like 2e6 (which YAML reads as a string), else YAML."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return yaml.safe_load(text) if text != "" else ""


def _build(cls, values: Mapping[str, Any], prefix: str = ""):
    """An instance of schema class `cls` from a mapping (nested classes from nested mappings)."""
    fields = _fields(cls)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in fields or key == "sections":
            raise unknown_key(full, [f"{prefix}{k}" for k in fields if k != "sections"])
        hint = hints[key]
        if hint is DistributedConfig and value == "auto":
            value = {"auto": True}
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(full, f"expected a mapping of {', '.join(_fields(hint))}")
            kwargs[key] = _build(hint, value, prefix=f"{full}.")
        else:
            if isinstance(value, bool) and {"on", "off"} & set(fields[key].metadata.get("choices", ())):
                value = "on" if value else "off"  # YAML 1.1 reads a bare off/on as a boolean: `async.balance=off`
            kwargs[key] = _coerce(full, value, hint)
    return cls(**kwargs)


def _build_config(values: Mapping[str, Any]) -> Config:
    """The Config of a nested mapping: algo's defaults first, the mapping's values over them."""
    algo = _coerce("algo", values.get("algo", _fields(Config)["algo"].default), str)
    schema = algorithm_schema(algo)
    values = merge(dict(schema.defaults), values)
    core, sections = {}, {}
    for key, value in values.items():
        if key in schema.sections:
            if not isinstance(value, Mapping):
                raise ConfigError(
                    key, f"is a section: give {key}.<field>=value (fields: {', '.join(_fields(schema.sections[key]))})"
                )
            sections[key] = value
        elif key in core_keys():
            core[key] = value
        else:
            raise _misplaced(key, algo, schema.sections)
    config = _build(Config, core)
    built = {name: _build(cls, sections.get(name, {}), prefix=f"{name}.") for name, cls in schema.sections.items()}
    return dataclasses.replace(config, sections=built)


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
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
        set_dotted(tree, key.strip(), parse_scalar(text.strip()))
    return tree


def merge(base: dict, over: Mapping) -> dict:
    out = dict(base)
    for k, v in over.items():
        if k != "env_kwargs" and isinstance(v, Mapping) and isinstance(out.get(k), Mapping):  # network merges per group
            out[k] = merge(out[k], v)
        elif k == "env_kwargs" and isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


class FileFormat(typing.NamedTuple):
    """Another project's config files, read into marljax's keys: JaxMARL's UPPERCASE baseline YAML
    (marljax/jaxmarl_config.py). A reader sits above this module (it asks envs/ whether the env can
    be built here), so it registers itself here rather than this module importing it; the package's
    __init__ imports it, so it is registered before any load_config runs."""

    claims: Callable[[Mapping[str, Any]], bool]  # are these a file's values in this format?
    read: Callable[[Mapping[str, Any], Path, str | None], dict]  # (values, path, algo= override) -> marljax's mapping


FILE_FORMATS: list[FileFormat] = []


def register_file_format(file_format: FileFormat) -> None:
    if file_format not in FILE_FORMATS:
        FILE_FORMATS.append(file_format)


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML file (optional; marljax's keys, or JaxMARL's UPPERCASE baseline keys, see
    marljax/jaxmarl_config.py), apply `key=value` overrides, validate, freeze."""
    values = read_yaml_mapping(path, "config", "a mapping of keys to values") if path is not None else {}
    changes = parse_overrides(overrides)
    for file_format in FILE_FORMATS:
        if path is not None and file_format.claims(values):
            values = file_format.read(values, Path(path), changes.get("algo"))
            break
    values = merge(values, changes)
    return validate(_build_config(values))


def from_dict(values: Mapping[str, Any]) -> Config:
    """Build and validate a Config from a (nested) mapping, e.g. a saved config.yaml."""
    return validate(_build_config(values))


def replace(config: Config, **changes: Any) -> Config:
    """A validated copy with some fields changed (configs are never mutated). Changing `algo`
    drops the old algorithm's sections: the new one's start from its defaults."""
    base = config.to_dict()
    if "algo" in changes and changes["algo"] != config.algo:
        base = {k: v for k, v in base.items() if k not in config.sections}
    return validate(_build_config(merge(base, changes)))


# ----------------------------------------------------------------------------- validation


def _check_field(key: str, value: Any, meta: Mapping) -> None:
    """The constraints a field declares in its metadata."""
    if meta.get("choices"):
        _one_of(key, value, meta["choices"])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value}")
    low, above, high = meta.get("minimum"), meta.get("above"), meta.get("maximum")
    if low is not None and high is not None and not low <= value <= high:
        raise ConfigError(key, f"must lie in [{_num(low)}, {_num(high)}], got {value}")
    if low is not None and value < low:
        raise ConfigError(key, f"must be >= {_num(low)}, got {value}")
    if above is not None and not value > above:
        raise ConfigError(key, f"must be > {_num(above)}, got {value}")
    if high is not None and value > high:
        raise ConfigError(key, f"must be <= {_num(high)}, got {value}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


MAX_UPDATES = 2**31 - 1  # the most updates a run may have: LearnerState.update is int32 [] (types.py)


def validate(config: Config) -> Config:
    """Check every field and the relations between them. Devices are checked in parallel.mesh."""
    c = config
    schema = algorithm_schema(c.algo)
    if set(c.sections) != set(schema.sections):
        raise ConfigError("algo", f"algo={c.algo} takes the sections {', '.join(schema.sections) or 'none'}; "
                                  f"got {', '.join(c.sections) or 'none'}")  # fmt: skip
    for key, f, _ in _config_walk(c):
        _check_field(key, c.value(key), f.metadata)
    for section in c.sections.values():
        if hasattr(section, "check"):
            section.check(c)
    c.log.check(c)
    if (why := compile_cache_problem(c.compile_cache)) is not None:
        raise ConfigError("compile_cache", why)
    _check_supports(c, schema)
    if not isinstance(c.env_kwargs, dict):
        raise ConfigError("env_kwargs", "must be a mapping")
    _check_network(c)
    if c.total_timesteps < c.num_steps * c.num_envs:
        raise ConfigError(
            "total_timesteps",
            f"must be at least num_steps*num_envs={c.num_steps * c.num_envs} (one update), got {c.total_timesteps}",
        )
    if c.num_updates > MAX_UPDATES:  # the learner's update counter is int32: it would wrap, or the program overflow
        per = c.num_steps * c.num_envs
        raise ConfigError("total_timesteps", f"{c.total_timesteps:,} env steps are {c.num_updates:,} updates of "
                          f"num_envs*num_steps={per:,}; at most {MAX_UPDATES:,} updates (int32), so total_timesteps "
                          f"<= {MAX_UPDATES * per:,} with this num_envs and num_steps")  # fmt: skip
    if c.mode == "async" and (c.mesh.data not in (-1, 1) or c.mesh.seed not in (-1, 1)):
        raise ConfigError(
            "mesh",
            "mode=async places work with async.actor_devices and async.learner_devices (mesh.agent splits the "
            "learner's agents); leave mesh.seed and mesh.data at their defaults",
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
        raise ConfigError("mesh.seed", f"must divide num_seeds={c.num_seeds}; allowed: {divisors(c.num_seeds)}")
    if c.mesh.data > 0 and c.num_envs % (c.mesh.data * c.mesh.agent):
        raise ConfigError(
            "mesh.data",
            f"mesh.data*mesh.agent must divide num_envs={c.num_envs} (they split the environments "
            f"while acting); allowed products: {divisors(c.num_envs)}",
        )
    d = c.distributed
    if not 0 <= d.process_id < d.num_processes:
        raise ConfigError(
            "distributed.process_id",
            f"must lie in 0..{d.num_processes - 1} (distributed.num_processes - 1), got {d.process_id}",
        )
    if d.num_processes > 1 and not d.auto and not re.fullmatch(r"[^:\s]+:\d+", d.coordinator):
        raise ConfigError(
            "distributed.coordinator",
            f"needs host:port of process 0 (e.g. 10.0.0.2:8476) with num_processes > 1, got {d.coordinator!r}",
        )
    if c.reward_shaping.info_key and c.mode == "async":
        raise ConfigError("reward_shaping.info_key", "the shaping factor follows the learner's updates on device; "
                          "allowed with mode=anakin (or leave it empty)")  # fmt: skip
    if c.resume and not c.out_dir:
        raise ConfigError("out_dir", "resume=true needs the out_dir of the run to continue")
    if c.resume and c.overwrite:
        raise ConfigError(
            "resume", "resume=true continues the run in out_dir; overwrite=true would delete it. Pick one"
        )
    if schema.check is not None:
        schema.check(c)
    return c


NETWORK_KEYS = ("hidden_size", "num_layers")  # what network.<group>.* may override


def _check_network(c: Config) -> None:
    """network.<group>.<size>: positive integers of known size fields. Group names need the env
    (marljax.train.wiring.check_group_networks checks them)."""
    if not isinstance(c.network, dict):
        raise ConfigError(
            "network", f"expected a mapping network.<group>.<{'|'.join(NETWORK_KEYS)}>, got {c.network!r}"
        )
    for group, sizes in c.network.items():
        if group == "dtype":  # one compute dtype for every network: a core key
            raise ConfigError(
                "network.dtype", f"the networks' compute dtype is the core key: write dtype={'|'.join(DTYPES)}"
            )
        if not isinstance(sizes, Mapping):
            raise ConfigError(f"network.{group}", f"expected a mapping of {', '.join(NETWORK_KEYS)}, got {sizes!r}")
        for key, value in sizes.items():
            if key not in NETWORK_KEYS:
                raise unknown_key(key, NETWORK_KEYS, prefix=f"network.{group}.")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"network.{group}.{key}", f"must be a positive integer, got {value!r}")


def _check_supports(c: Config, schema: AlgorithmSchema) -> None:
    """Refuse what the algorithm does not support, naming the algorithms that do."""
    s = schema.supports

    def others(pred: Callable[[Supports], bool]) -> str:
        names = [n for n, other in _SCHEMAS.items() if pred(other.supports)]
        return f"algo={', '.join(names)}" if names else "no algorithm"

    if c.mode == "async" and not s.async_mode:
        raise ConfigError(
            "mode", f"algo={c.algo} runs on device; allowed: anakin (mode=async: {others(lambda o: o.async_mode)})"
        )
    if c.mesh.agent > 1 and not s.agent_axis:
        raise ConfigError("mesh.agent", f"algo={c.algo} has no agent-parallel learner yet; allowed: 1 (mesh.data and mesh.seed "
                                        f"add devices; mesh.agent: {others(lambda o: o.agent_axis)})")  # fmt: skip
    if (c.mesh.placement != "split" or c.mesh.replicated) and c.mesh.agent > 1:
        field = "mesh.replicate" if c.mesh.replicated else "mesh.placement"
        if not s.agent_replicate:
            raise ConfigError(field, f"algo={c.algo} splits every group over mesh.agent; replicating a group "
                              f"there needs {others(lambda o: o.agent_replicate)} (allowed here: mesh.placement=split, "
                              "mesh.replicate empty)")  # fmt: skip
        if c.mode == "async":
            raise ConfigError(field, "mode=async splits every group over mesh.agent; allowed: mesh.placement=split, "
                              "mesh.replicate empty")  # fmt: skip
    if c.recurrent and not s.recurrent:
        raise ConfigError("recurrent", f"algo={c.algo} has no recurrent networks; allowed: false")
    if c.param_sharing not in s.param_sharing:
        _one_of("param_sharing", c.param_sharing, s.param_sharing)


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(name, f"got {value!r}{hint}; allowed: {', '.join(str(a) for a in allowed)}")


def divisors(n: int) -> str:
    """Every divisor of n, for messages that list the allowed values."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def dump_yaml(config: Config) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


__all__ = [
    "Config", "MeshConfig", "DistributedConfig", "LogConfig", "AsyncConfig", "RewardShapingConfig", "ConfigError", "Supports", "AlgorithmSchema",
    "load_config", "from_dict", "replace", "validate", "parse_overrides", "dump_yaml", "read_yaml_mapping",
    "register_schema", "algorithm_schema", "algorithms", "setting", "traced_keys", "resumable_keys",
    "hparams_values", "schema_fields", "to_flat", "divisors",
]  # fmt: skip
