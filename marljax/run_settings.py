"""The train layer's settings: the run's directory and host loop, checkpoints, evaluation
(flat keys: `out_dir=`, `checkpoint_every=`, `eval_every=`), the trackers (`log.*`,
marljax/train/trackers.py), reward shaping (`reward_shaping.*`) and the compile cache
(marljax/train/compile_cache.py); and what `marljax record` takes (RecordSettings). Light on purpose: it
imports only the settings engine."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any

from marljax.schema import ConfigError, Part, register_part, setting

TRACKERS = ("tensorboard", "wandb", "neptune", "mlflow")  # besides jsonl, which is always on
TRACKER_MODULES = {"tensorboard": "tensorboardX", "wandb": "wandb", "neptune": "neptune", "mlflow": "mlflow"}


LOGIN = {"wandb": "`wandb login` or WANDB_API_KEY", "neptune": "NEPTUNE_API_TOKEN"}


def _login_missing(tracker: str) -> bool:
    """True when the tracker finds no credentials to stream a run with, by its own lookup (no network,
    no prompt); False where it has no lookup to ask (its run then asks, as it would anyway)."""
    if tracker == "neptune":
        return not os.environ.get("NEPTUNE_API_TOKEN")
    try:  # wandb: environment, .netrc, its settings file, for the server it is set up for
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib.wbauth.authenticate import authenticate_session

        host = wandb_setup.singleton().settings.base_url
        return authenticate_session(host=host, source="marljax", prompt=False, update_session=False) is None
    except Exception:  # noqa: BLE001 - another wandb version: leave it to wandb.init
        return False


def check_logins(log: LogConfig) -> None:
    """ConfigError naming log.offline when a tracker set to stream finds no login. Asked by a run or sweep
    before anything compiles (its trackers open only after compiling), not by config validation: a saved
    run that streamed still loads elsewhere (export, load_policy)."""
    if log.offline:
        return
    for b in log.backends:
        if b in LOGIN and _login_missing(b):
            raise ConfigError(
                "log.offline",
                f"false streams to {b}, which finds no login here ({LOGIN[b]}); "
                "log in, or keep log.offline=true (the run is written under out_dir, to sync later)",
            )


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """`log.*`: experiment trackers that mirror every metrics row (marljax/train/trackers.py).
    metrics.jsonl is always written; each tracker is an optional extra, imported only when chosen."""

    backends: Any = setting(
        help="trackers besides metrics.jsonl: a list of tensorboard, wandb, neptune, mlflow",
        factory=list,
        resumable=True,
    )
    project: str = setting(
        "marljax", "the tracker's project (wandb, neptune) or experiment (mlflow)", resumable=True, jaxmarl="PROJECT"
    )
    entity: str = setting(
        "", "wandb entity / neptune workspace; empty: the account's default", resumable=True, jaxmarl="ENTITY"
    )
    run_name: str = setting("", "the run's name in the tracker; empty: the out_dir's name", resumable=True)
    tags: Any = setting(help="tags of the tracker's run (a list of strings)", factory=list, resumable=True)
    group: str = setting(
        "", "group the tracker's runs under this name (a sweep groups its cells by default)", resumable=True
    )
    offline: bool = setting(
        True, "wandb, neptune: write under out_dir and sync later (false: stream to the server)", resumable=True
    )
    mlflow_uri: str = setting(
        "", "MLflow tracking URI (a server, sqlite:///...); empty: a file store in <out_dir>/mlruns", resumable=True
    )

    def check(self, config: Any) -> None:
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

    info_key: str = setting(
        "", "the env step's info key holding a per-agent dense reward (overcooked: shaped_reward); empty: no shaping"
    )
    horizon: int = setting(
        0, "env steps (of one seed) over which the shaping factor falls linearly from 1 to 0; 0: constant 1", minimum=0
    )

    def check(self, config: Any) -> None:
        if self.info_key and config.mode == "async":
            raise ConfigError(
                "reward_shaping.info_key",
                "the shaping factor follows the learner's updates on device; "
                "allowed with mode=anakin (or leave it empty)",
            )


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
class RunConfig:
    """The host loop (flat keys)."""

    out_dir: str = setting("", "the run's directory; empty: runs/<algo>_<env>_<timestamp>", resumable=True)
    overwrite: bool = setting(False, "allow replacing a run already in out_dir", resumable=True)
    num_chunks: int = setting(
        50, "jitted chunks the run is split into (one metrics row each)", minimum=1, resumable=True
    )
    progress: bool = setting(True, "show a progress bar", resumable=True)
    plot: bool = setting(True, "write returns.png at the end", resumable=True)
    compile_cache: Any = setting(
        "auto",
        "JAX's persistent compilation cache, kept across runs: auto (~/.cache/marljax/jax-compile/<machine>; "
        "JAX_COMPILATION_CACHE_DIR wins when set) | false | a directory",
        resumable=True,
    )

    def check(self, config: Any) -> None:
        if (why := compile_cache_problem(self.compile_cache)) is not None:
            raise ConfigError("compile_cache", why)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints (<out_dir>/checkpoints, flat keys): the whole training state, saved asynchronously."""

    checkpoint_every: int = setting(
        100, "updates between checkpoints (at chunk ends); 0: only at the end", minimum=0, resumable=True
    )
    keep_checkpoints: int = setting(3, "the newest this many checkpoints are kept", minimum=1, resumable=True)
    resume: bool = setting(False, "continue from the newest good checkpoint in out_dir", resumable=True)
    nan_guard: bool = setting(
        True,
        "stop on a non-finite loss or parameter, before it is checkpointed (a sweep marks "
        "that run diverged and goes on)",
        resumable=True,
    )

    def check(self, config: Any) -> None:
        if self.resume and not config.out_dir:
            raise ConfigError("out_dir", "resume=true needs the out_dir of the run to continue")
        if self.resume and config.overwrite:
            raise ConfigError(
                "resume", "resume=true continues the run in out_dir; overwrite=true would delete it. Pick one"
            )


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Evaluation apart from the training rollouts (marljax.train.evaluate; flat keys)."""

    eval_every: int = setting(
        0, "updates between greedy evaluations (at chunk ends); 0: never", minimum=0, resumable=True
    )
    eval_episodes: int = setting(
        32,
        "fresh episodes each seed plays per evaluation",
        minimum=1,
        resumable=True,
        jaxmarl=("NUM_TEST_EPISODES", "TEST_NUM_ENVS", "NUM_TEST_ENVS"),
    )
    eval_greedy: bool = setting(True, "evaluate the policy's most likely action (false: sample it)", resumable=True)


register_part(
    Part("log", LogConfig, order=40, help="experiment trackers: log.backends=[tensorboard,wandb,neptune,mlflow]")
)
register_part(
    Part(
        "reward_shaping",
        RewardShapingConfig,
        order=50,
        help="a dense reward from the env's info, annealed: reward_shaping.info_key, reward_shaping.horizon",
    )
)
register_part(Part("run", RunConfig, order=60, flat=True))
register_part(Part("checkpoint", CheckpointConfig, order=70, flat=True))
register_part(Part("evaluation", EvaluationConfig, order=80, flat=True))


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    """What `marljax record` takes besides SOURCE and OUT (key=value on the command line)."""

    transitions: int = 100_000  # steps recorded in all (rounded up to a multiple of num_envs)
    num_envs: int = 64  # environments stepped side by side: the dataset's streams
    epsilon: float = 0.0  # probability of a uniformly random available action per agent and step
    greedy: bool = True  # the policy's most likely action (false: a sample of its distribution)
    quality: str = ""  # the dataset's label (its directory name); empty: derived from the policy
    seed: int = 0
    seed_index: int = 0  # which seed of a run's checkpoint acts
    trust_code: bool = False  # a run or policy whose env is an import path may be rebuilt (runs its code)

    def check(self) -> None:
        if self.transitions < 1:
            raise ConfigError("transitions", f"must be >= 1, got {self.transitions}")
        if self.num_envs < 1:
            raise ConfigError("num_envs", f"must be >= 1, got {self.num_envs}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ConfigError("epsilon", f"must lie in [0, 1], got {self.epsilon}")
        if self.quality and ("/" in self.quality or self.quality.startswith(".")):
            raise ConfigError("quality", f"{self.quality!r} cannot name a directory; a label like Good, Medium, Poor")
