"""The run's one frozen configuration, assembled from what each layer declares.

A run's settings are one frozen `Config`: the core every run has (declared here: the algorithm,
the env, the rollout shape and budget, the optimiser, the networks, seeds, the execution mode),
each layer's settings declared beside its code (`marljax/parallel/settings.py`: `mesh.*`,
`distributed.*`; `marljax/run_settings.py`: the host loop, checkpoints, evaluation, `log.*`,
`reward_shaping.*`, the compile cache; `marljax/pipeline/settings.py`: `async.*`), and the
chosen algorithm's sections only (`ppo.*`, `q.*`, `replay.*`, ...). Each algorithm registers its
sections and its own defaults (`register_schema`, called by `marljax.algos.registry`), so
`marljax train algo=qmix` starts from QMIX's defaults and a key of another algorithm's section is
refused with a line naming the section that takes it.

Values come from a YAML file and `key=value` overrides (dots reach nested sections:
`mesh.data=4`, `ppo.clip_eps=0.1`, `env_kwargs.scenario=3m`). The engine that reads, coerces,
walks and checks them knows no field (`marljax/schema.py`); validation happens before anything is
compiled, and every error names the field and what is allowed. It re-exports the engine's and the
layers' names (`from marljax.config import load_config, ConfigError, ...`) for scripts and tests;
modules inside marljax import those from their owners (`marljax.schema`, the layers' `settings.py`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import marljax.parallel.settings  # noqa: F401  (registers mesh.*, distributed.*)
import marljax.pipeline.settings  # noqa: F401  (registers async.*, a section of the algorithms that support it)
import marljax.run_settings  # noqa: F401  (registers the host loop, checkpoints, evaluation, log.*, ...)
import marljax.schema
from marljax.device_defaults import DEVICES
from marljax.device_defaults import declared as device_declared
from marljax.device_defaults import overrides as device_overrides
from marljax.device_defaults import platform as device_platform
from marljax.families import FAMILY_NAMES, family_of
from marljax.parallel.settings import DistributedConfig, MeshConfig
from marljax.pipeline.settings import AsyncConfig
from marljax.run_settings import (
    COMPILE_CACHE_AUTO,
    COMPILE_CACHE_OFF,
    TRACKER_MODULES,
    TRACKERS,
    CheckpointConfig,
    EvaluationConfig,
    LogConfig,
    RewardShapingConfig,
    RunConfig,
    compile_cache_problem,
)
from marljax.schema import (
    FILE_FORMATS,
    INT32_MAX,
    ConfigError,
    FileFormat,
    Part,
    algorithm_schema,
    algorithms,
    build,
    check_field,
    check_fields,
    coerce,
    config_walk,
    core_keys,
    divisors,
    dump_yaml,
    fields,
    first_line,
    homes,
    listed,
    merge,
    misplaced,
    one_of,
    parse_overrides,
    parse_scalar,
    parts,
    read_yaml_mapping,
    register_file_format,
    register_part,
    register_schema,
    resumable_keys,
    set_dotted,
    setting,
    shown,
    to_flat,
    traced_keys,
    unknown_key,
    walk,
)

ACTIVATIONS = ("tanh", "relu")
TORSOS = ("auto", "mlp", "cnn")
LR_DECAYS = ("linear", "cosine", "exponential")
DTYPES = ("float32", "bfloat16")  # the networks' matmul/conv compute dtype (marljax.nn.networks)
SHARING = ("shared", "per_role", "independent")
MODES = ("anakin", "async")
MAX_UPDATES = 2**31 - 1  # the most updates a run may have: LearnerState.update is int32 [] (types.py)
NETWORK_KEYS = ("hidden_size", "num_layers")  # what network.<group>.* may override


# ----------------------------------------------------------------------------- the core


@dataclasses.dataclass(frozen=True)
class CoreConfig:
    """What every run has: the algorithm, the env, the rollout shape and budget, the optimiser,
    the networks and the seeds (flat keys)."""

    algo: str = setting("ippo", "the algorithm (marljax train --help lists them)")
    env: str = setting(
        "MPE_simple_spread_v3",
        "a JaxMARL env id, or module:callable returning an env (imports and runs that code)",
        jaxmarl="ENV_NAME",
    )
    family_defaults: str = setting(
        "auto",
        "whose defaults the algorithm starts from: auto (those it declares for "
        "the env's family, e.g. mpe), none (its own), or a family's name",
        choices=("auto", "none", *FAMILY_NAMES),
    )
    device_defaults: str = setting(
        "auto",
        "whose defaults an accelerator adds over the family's: auto (those "
        "declared for this machine's GPU or TPU; none on a CPU), none, or a device "
        "(cpu, gpu, tpu)",
        choices=("auto", "none", *DEVICES),
    )
    env_kwargs: dict = setting(
        factory=dict, mapping="shallow", help="keyword arguments of the env's constructor (env_kwargs.name=value)"
    )

    # rollout shape and budget
    total_timesteps: int = setting(
        5_000_000,
        "env steps of one seed over the whole run",
        minimum=1,
        maximum=10**15,
        resumable=True,
        jaxmarl="TOTAL_TIMESTEPS",
    )
    num_envs: int = setting(64, "environments stepped in parallel per seed", minimum=1, jaxmarl="NUM_ENVS")
    num_steps: int = setting(
        128, "steps of every environment per update (the rollout length)", minimum=1, jaxmarl="NUM_STEPS"
    )

    # optimiser (every algorithm)
    lr: float = setting(2e-3, "Adam learning rate", above=0.0, traced=True, jaxmarl="LR")
    anneal_lr: bool = setting(
        True, "decay the learning rate to 0 over the run (lr_decay says how)", jaxmarl=("ANNEAL_LR", "LR_LINEAR_DECAY")
    )
    lr_decay: str = setting(
        "linear",
        "the decay's shape when anneal_lr: linear | cosine (to 0 over the run) | "
        "exponential (by lr_exp_decay_rate per update)",
        choices=LR_DECAYS,
        jaxmarl="LR_DECAY_TYPE",
    )
    lr_exp_decay_rate: float = setting(
        0.0,
        "lr_decay=exponential: the fraction the rate falls by per update, lr x (1 - rate)^updates after any warm-up",
        minimum=0.0,
        maximum=0.99,
        jaxmarl="LR_EXP_DECAY_RATE",
    )
    lr_warmup: float = setting(
        0.0,
        "fraction of the run's updates over which the learning rate first rises "
        "linearly from 0 (then decays over the rest when anneal_lr)",
        minimum=0.0,
        maximum=0.99,
        jaxmarl="LR_WARMUP",
    )
    lr_schedule_resumes: Any = setting(
        factory=list,
        resumable=True,
        help="written by resume=true when "
        "total_timesteps changed: one [update, updates planned before] per change; "
        "the learning rate goes on from where it was, what was left of its schedule "
        "stretched over the updates now left (docs/guide/checkpoints.md)",
    )
    max_grad_norm: float = setting(
        0.5, "clip the global gradient norm to this", above=0.0, traced=True, jaxmarl="MAX_GRAD_NORM"
    )
    adam_eps: float = setting(
        1e-5, "Adam's epsilon (added to the root of the second moment)", above=0.0, jaxmarl="EPS_ADAM"
    )
    weight_decay: float = setting(
        0.0,
        "decoupled weight decay (AdamW): each step also subtracts lr x weight_decay x the parameters",
        minimum=0.0,
        jaxmarl="WEIGHT_DECAY_ADAM",
    )
    gamma: float = setting(0.99, "discount factor", minimum=0.0, maximum=1.0, traced=True, jaxmarl="GAMMA")

    # networks
    activation: str = setting("tanh", "hidden-layer activation", choices=ACTIVATIONS, jaxmarl="ACTIVATION")
    hidden_size: int = setting(
        64, "width of the hidden layers", minimum=1, jaxmarl=("FC_DIM_SIZE", "AGENT_HIDDEN_DIM", "HIDDEN_SIZE")
    )
    num_layers: int = setting(2, "hidden layers of the feed-forward torso", minimum=1, jaxmarl="NUM_LAYERS")
    network: dict = setting(
        factory=dict,
        mapping="deep",
        help="per-group sizes over hidden_size/num_layers: network.<group>.hidden_size=32, "
        "network.<group>.num_layers=1 (groups as param_sharing forms them)",
    )
    recurrent: bool = setting(False, "GRU networks; the hidden state resets at episode ends")
    gru_hidden_size: int = setting(128, "GRU state width (recurrent=true)", minimum=1, jaxmarl="GRU_HIDDEN_DIM")
    torso: str = setting("auto", "observation encoder; auto: cnn for [H, W, C] observations", choices=TORSOS)
    dtype: str = setting(
        "float32",
        "the networks' matmul/conv inputs; bfloat16: bf16 operands, float32 accumulation, "
        "float32 parameters and outputs (for GPUs/TPUs; slower on CPU)",
        choices=DTYPES,
    )
    agent_id: bool = setting(True, "append a one-hot agent id where agents share parameters", jaxmarl="ADD_AGENT_ID")
    param_sharing: str = setting(
        "shared",
        "shared: one set per group of identical spaces | per_role: one per agent class | independent: one per agent",
        choices=SHARING,
    )

    # seeds and devices
    seed: int = setting(
        0,
        "the run's seed; seed i of num_seeds uses a key derived from it",
        minimum=0,
        maximum=2**32 - 1,
        jaxmarl="SEED",
    )
    num_seeds: int = setting(1, "independent seeds trained at once (vmapped)", minimum=1, jaxmarl="NUM_SEEDS")

    def check(self, config: Config) -> None:
        """What the algorithm supports, the networks, and the budget against the rollout shape."""
        c = config
        _check_supports(c, algorithm_schema(c.algo))
        if not isinstance(c.env_kwargs, dict):
            raise ConfigError("env_kwargs", "must be a mapping")
        _check_env_sizes(c.env_kwargs)
        _check_network(c)
        if c.total_timesteps < c.num_steps * c.num_envs:
            raise ConfigError(
                "total_timesteps",
                f"must be at least num_steps*num_envs={c.num_steps * c.num_envs} (one update), got {c.total_timesteps}",
            )
        _check_schedule_resumes(c.lr_schedule_resumes, c.num_updates)
        if c.num_updates > MAX_UPDATES:  # the learner's update counter is int32: it would wrap, or the program overflow
            per = c.num_steps * c.num_envs
            raise ConfigError(
                "total_timesteps",
                f"{c.total_timesteps:,} env steps are {c.num_updates:,} updates of "
                f"num_envs*num_steps={per:,}; at most {MAX_UPDATES:,} updates (int32), so total_timesteps "
                f"<= {MAX_UPDATES * per:,} with this num_envs and num_steps",
            )


def _check_schedule_resumes(resumes: Any, num_updates: int) -> None:
    """`lr_schedule_resumes`: [update, updates planned before] pairs, the updates rising, each
    within the budget planned before it, and below this run's."""
    pairs = resumes if isinstance(resumes, list) else None
    ok = pairs is not None and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in p)
        for p in pairs
    )
    if ok and pairs:
        starts = [s for s, _ in pairs]
        ok = starts == sorted(set(starts)) and all(0 < s <= n for s, n in pairs) and starts[-1] < num_updates
    if not ok:
        raise ConfigError(
            "lr_schedule_resumes",
            "a list of [update, updates planned before] pairs, as resume=true "
            f"writes it (updates rising, below this run's {num_updates}); got {resumes!r}",
        )


@dataclasses.dataclass(frozen=True)
class ExecutionConfig:
    """The execution mode (flat key `mode`): on device, or the async pipeline."""

    mode: str = setting(
        "anakin",
        "anakin: rollout and update fused on device | async: actor threads and a "
        "learner joined by a host-side trajectory buffer",
        choices=MODES,
    )


register_part(Part("core", CoreConfig, order=10, flat=True))
register_part(Part("execution", ExecutionConfig, order=90, flat=True))


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
    resume: bool = True  # resume=true from a checkpoint, bitwise
    sweeps: bool = True  # marljax sweep (seeds and traced hyperparameters vmapped)
    processes: bool = True  # several processes (distributed.num_processes > 1)


@dataclasses.dataclass(frozen=True)
class AlgorithmSchema:
    """What the config needs to know of one algorithm: its sections, defaults and supports."""

    name: str
    summary: str  # one line for `--help`
    sections: Mapping[str, type]  # key -> frozen dataclass (e.g. {"ppo": PPOConfig})
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # nested overrides of field defaults
    supports: Supports = Supports()
    check: Callable[[Config], None] | None = None  # checks across core and section fields
    jaxmarl_files: tuple[str, ...] = ()  # JaxMARL config-file stems it answers to besides its name (ql: ql_*.yaml)
    # env family (marljax.families) -> nested overrides of `defaults` for it; a setting given explicitly wins
    family_defaults: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    # why it runs far slower on a CPU than on an accelerator (said as a CPU run starts); "": nothing to say
    cpu_note: str = ""


# ----------------------------------------------------------------------------- the assembled config


S = typing.TypeVar("S")


@dataclasses.dataclass(frozen=True, eq=False)
class Config(CoreConfig, ExecutionConfig, RunConfig, CheckpointConfig, EvaluationConfig):
    """One training run: the flat parts' fields (the core's, the execution mode's, the host loop's,
    checkpoints', evaluation's) are its own (`config.num_envs`), each nested part is one
    (`config.mesh.seed`), and the chosen algorithm's sections are in `sections`, read by class
    (`config.section(PPOConfig).clip_eps`; the async pipeline's as `config.async_`). Assembled here,
    above the layers; a layer's functions take their own part (`config.part("checkpoint")`).
    `tests/test_config.py` holds these fields equal to the registered parts'."""

    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)
    log: LogConfig = dataclasses.field(default_factory=LogConfig)
    reward_shaping: RewardShapingConfig = dataclasses.field(default_factory=RewardShapingConfig)
    sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # key -> the algorithm's section

    @classmethod
    def assemble(cls, built: Mapping[str, Any], sections: Mapping[str, Any]) -> Config:
        """The Config of every registered part's instance (by key) and the algorithm's sections."""
        values: dict[str, Any] = {}
        for part in parts():
            value = built[part.key]
            values.update({n: getattr(value, n) for n in fields(part.cls)} if part.flat else {part.key: value})
        return cls(**values, sections=dict(sections))

    def section(self, cls: type[S]) -> S:
        """The algorithm's section of class `cls`; an error naming the sections it has if none."""
        for value in self.sections.values():
            if type(value) is cls:
                return value
        raise AttributeError(
            f"algo={self.algo} has no {cls.__name__} section (its sections: {', '.join(self.sections) or 'none'})"
        )

    @property
    def async_(self) -> AsyncConfig:
        """The async pipeline's section (`async.*`), of the algorithms that support mode=async."""
        return self.section(AsyncConfig)

    def part(self, key: str) -> Any:
        """The registered part `key` (a flat one too): what a layer's functions receive."""
        part = next(p for p in parts() if p.key == key)
        return part.cls(**{n: getattr(self, n) for n in fields(part.cls)}) if part.flat else getattr(self, key)

    def value(self, dotted: str) -> Any:
        """The value of a dotted key: `lr`, `ppo.clip_eps`, `mesh.data`."""
        head, *rest = dotted.split(".")
        node: Any = self.sections[head] if head in self.sections else getattr(self, head)
        for name in rest:
            node = getattr(node, name)
        return node

    def to_dict(self) -> dict:
        """Every part's fields, then the algorithm's sections, as nested plain values (config.yaml)."""
        out: dict[str, Any] = {}
        for part in parts():
            value = dataclasses.asdict(self.part(part.key))
            out.update(value if part.flat else {part.key: value})
        out.update({name: dataclasses.asdict(section) for name, section in self.sections.items()})
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # (values hold dicts, as the dataclass's did)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"

    def group_network(self, group: str) -> tuple[int, int]:
        """(hidden_size, num_layers) of group's networks: `network.<group>.*` over the global fields."""
        over = self.network.get(group, {})
        return over.get("hidden_size", self.hidden_size), over.get("num_layers", self.num_layers)

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


def schema_fields(
    algo: str, env: str | None = None, family_defaults: str = "auto"
) -> list[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, default for this algorithm on env: its family's where it declares them, unless
    `family_defaults` says otherwise) of the core and of algo's sections."""
    env_given = [f"env={env}"] if env else []
    defaults = to_flat(load_config(None, [f"algo={algo}", *env_given, f"family_defaults={family_defaults}"]).to_dict())
    out = [(key, f, defaults[key]) for key, f in config_walk()]
    for name, cls in algorithm_schema(algo).sections.items():
        out += [(key, f, defaults[key]) for key, f in walk(cls, f"{name}.")]
    return out


def _family(values: Mapping[str, Any]) -> str | None:
    """The env family whose defaults a mapping's run starts from (`family_defaults`), or None."""
    choice = coerce("family_defaults", values.get("family_defaults", "auto"), str)
    one_of("family_defaults", choice, fields(CoreConfig)["family_defaults"].metadata["choices"])
    if choice == "none":
        return None
    return (
        family_of(coerce("env", values.get("env", fields(CoreConfig)["env"].default), str))
        if choice == "auto"
        else choice
    )


def family_defaults(config: Config) -> tuple[str | None, dict[str, Any]]:
    """(the env family whose defaults apply, {dotted key: value} of those the run kept): what
    config.yaml's header and `--help` report. A key set explicitly to another value is left out."""
    family = _family({"env": config.env, "family_defaults": config.family_defaults})
    declared = to_flat(dict(algorithm_schema(config.algo).family_defaults.get(family or "", {})))
    return family, {key: value for key, value in declared.items() if config.value(key) == value}


def _device(choice: Any, algo: str, family: str | None, several_processes: bool) -> str | None:
    """The device whose defaults a run takes (`device_defaults` = `choice`), or None. `auto` asks
    JAX only where some device declares defaults for the run, and never in a multi-process run:
    starting the backend there would come before jax.distributed.initialize."""
    choice = coerce("device_defaults", choice, str)
    one_of("device_defaults", choice, fields(CoreConfig)["device_defaults"].metadata["choices"])
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    if not device_declared(algo, family):
        return None
    return device_platform(start_backend=not several_processes)


def _several_processes(values: Mapping[str, Any]) -> bool:
    """Whether a mapping's run is multi-process (`distributed=auto`, a coordinator, or more than one
    process), read before its DistributedConfig is built."""
    distributed = values.get("distributed")
    if distributed == "auto":
        return True
    if not isinstance(distributed, Mapping):
        return False
    return (
        bool(distributed.get("coordinator"))
        or str(distributed.get("auto", "")).lower() == "true"
        or str(distributed.get("num_processes", 1)) not in ("1", "")
    )


def device_defaults(config: Config) -> tuple[str | None, dict[str, Any]]:
    """(the device whose defaults apply, {dotted key: value} of those the run kept): what the run's
    header, config.yaml and `--help` report. A key set explicitly to another value is left out."""
    family = _family({"env": config.env, "family_defaults": config.family_defaults})
    d = config.distributed
    several = bool(d.coordinator) or d.auto or d.num_processes > 1
    device = _device(config.device_defaults, config.algo, family, several)
    declared = to_flat(dict(device_overrides(device, config.algo, family))) if device else {}
    return device, {key: value for key, value in declared.items() if config.value(key) == value}


def _build_config(values: Mapping[str, Any]) -> Config:
    """The Config of a nested mapping: algo's defaults, those for the env's family over them, the
    device's over those, then the mapping's values over all."""
    algo = coerce("algo", values.get("algo", fields(CoreConfig)["algo"].default), str)
    schema = algorithm_schema(algo)
    family = _family(values)
    over = schema.family_defaults.get(family, {}) if family is not None else {}
    device = _device(values.get("device_defaults", "auto"), algo, family, _several_processes(values))
    on_device = device_overrides(device, algo, family) if device else {}
    return Config.assemble(*build(values, schema, merge(merge(dict(schema.defaults), over), on_device)))


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


def validate(config: Config) -> Config:
    """Check every field and the relations between them: each field's metadata, each section's and
    layer's `check`, then the algorithm's own. Devices are checked in parallel.mesh."""
    schema = algorithm_schema(config.algo)
    if set(config.sections) != set(schema.sections):
        raise ConfigError(
            "algo",
            f"algo={config.algo} takes the sections {', '.join(schema.sections) or 'none'}; "
            f"got {', '.join(config.sections) or 'none'}",
        )
    check_fields(config)
    if schema.check is not None:
        schema.check(config)
    return config


MAX_ENV_COUNT = 100_000  # agents, entities or cells per dimension of one env copy
_COUNT_KEY = re.compile(r"(^|_)(num|n|count|size|width|height)(_|$)|^num|count$|size$")


def _check_env_sizes(env_kwargs: Mapping[str, Any]) -> None:
    """A count in env_kwargs beyond any env a run can hold (`num_agents=100000000`): refused before the
    env is built, which would take minutes or never end, and before the out_dir is made."""
    for key, value in env_kwargs.items():
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        if abs(value) > INT32_MAX:
            raise ConfigError(f"env_kwargs.{key}", f"must be <= {INT32_MAX:,}, got {shown(value)}")
        if _COUNT_KEY.search(key) and value > MAX_ENV_COUNT:
            why = "one env copy of that size takes minutes to build and more memory than a machine holds"
            raise ConfigError(
                f"env_kwargs.{key}", f"{value:,} is more than {MAX_ENV_COUNT:,}: {why}; give a smaller one"
            )


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
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT32_MAX:
                raise ConfigError(
                    f"network.{group}.{key}", f"must be an integer in [1, {INT32_MAX:,}], got {shown(value)}"
                )


def algorithms_that(pred: Callable[[Supports], bool]) -> str:
    """`algo=a, b` for the registered algorithms whose `Supports` satisfy `pred` ("no algorithm" if none):
    what a refusal names as the way out."""
    names = [n for n in algorithms() if pred(algorithm_schema(n).supports)]
    return f"algo={', '.join(names)}" if names else "no algorithm"


def _check_supports(c: Config, schema: AlgorithmSchema) -> None:
    """Refuse what the algorithm does not support, naming the algorithms that do."""
    s = schema.supports

    if c.mode == "async" and not s.async_mode:
        raise ConfigError(
            "mode",
            f"algo={c.algo} runs on device; allowed: anakin (mode=async: {algorithms_that(lambda o: o.async_mode)})",
        )
    if c.mesh.agent > 1 and not s.agent_axis:
        raise ConfigError(
            "mesh.agent",
            f"algo={c.algo} has no agent-parallel learner yet; allowed: 1 (mesh.data and mesh.seed "
            f"add devices; mesh.agent: {algorithms_that(lambda o: o.agent_axis)})",
        )
    if (c.mesh.placement != "split" or c.mesh.replicated) and c.mesh.agent > 1:
        field = "mesh.replicate" if c.mesh.replicated else "mesh.placement"
        if not s.agent_replicate:
            raise ConfigError(
                field,
                f"algo={c.algo} splits every group over mesh.agent; replicating a group "
                f"there needs {algorithms_that(lambda o: o.agent_replicate)} (allowed here: mesh.placement=split, "
                "mesh.replicate empty)",
            )
        if c.mode == "async":
            raise ConfigError(
                field,
                "mode=async splits every group over mesh.agent; allowed: mesh.placement=split, mesh.replicate empty",
            )
    if c.recurrent and not s.recurrent:
        raise ConfigError("recurrent", f"algo={c.algo} has no recurrent networks; allowed: false")
    if c.param_sharing not in s.param_sharing:
        one_of("param_sharing", c.param_sharing, s.param_sharing)


def check_key(dotted: str, algo: str) -> None:
    """ConfigError (naming `dotted`) unless `dotted` is a key that algo's config takes."""
    schema = algorithm_schema(algo)
    head, _, rest = dotted.partition(".")
    nested = {p.key: p for p in marljax.schema.parts() if not p.flat}
    if head == "env_kwargs" or (head in nested and nested[head].shorthand and not rest):
        return
    if head == "network":  # network.<group>.<size field>; the group is checked against the env in wiring
        if not rest:  # the whole mapping (a sweep's base, a flat config): its entries are checked in validate
            return
        group, _, leaf = rest.partition(".")
        if not group or leaf not in NETWORK_KEYS:
            raise ConfigError(dotted, f"expected network.<group>.<{'|'.join(NETWORK_KEYS)}>")
        return
    if head in schema.sections or head in nested:
        cls = schema.sections[head] if head in schema.sections else nested[head].cls
        allowed = [k for k, _ in walk(cls, f"{head}.")]
        if dotted not in allowed:
            raise unknown_key(dotted, allowed)
    elif not rest:
        if head not in core_keys():
            raise misplaced(dotted, algo, schema.sections)
    else:  # a dotted key whose head is not a section of algo
        found = [algos for section, dotted_home, algos in homes(head) if dotted_home == section]
        if found:
            takes = ", ".join(f"{s}.*" for s in schema.sections) or "no section"
            raise ConfigError(
                dotted, f"is in section {head}.* of algo={', '.join(found[0])}; algo={algo} takes {takes}"
            )
        raise misplaced(head, algo, schema.sections)


__all__ = [
    "Config",
    "CoreConfig",
    "ExecutionConfig",
    "MeshConfig",
    "DistributedConfig",
    "LogConfig",
    "AsyncConfig",
    "RewardShapingConfig",
    "RunConfig",
    "CheckpointConfig",
    "EvaluationConfig",
    "ConfigError",
    "Supports",
    "AlgorithmSchema",
    "FileFormat",
    "load_config",
    "family_defaults",
    "device_defaults",
    "from_dict",
    "replace",
    "validate",
    "parse_overrides",
    "dump_yaml",
    "read_yaml_mapping",
    "register_schema",
    "register_file_format",
    "algorithm_schema",
    "algorithms",
    "algorithms_that",
    "setting",
    "traced_keys",
    "resumable_keys",
    "schema_fields",
    "to_flat",
    "divisors",
    "check_key",
    "core_keys",
    "first_line",
    "listed",
    "merge",
    "parse_scalar",
    "set_dotted",
    "unknown_key",
    "check_field",
    "MAX_UPDATES",
    "TRACKERS",
    "TRACKER_MODULES",
    "COMPILE_CACHE_AUTO",
    "COMPILE_CACHE_OFF",
    "compile_cache_problem",
]
