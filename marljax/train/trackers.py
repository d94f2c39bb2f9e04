"""Experiment trackers (`log.backends`): each mirrors every metrics row of a run.

    log.backends=[tensorboard,wandb,mlflow]   log.project=... log.run_name=... log.tags=[...]

metrics.jsonl stays the record; a tracker receives the same rows: every number of a row as a
scalar, every per-seed list (`return_per_seed`, `eval_return_per_seed`, ...) as one scalar per
seed (`return_per_seed/seed_1`), all at x = the row's `env_steps` (one run's steps, as
`total_timesteps` counts them). At the end each gets the returns plot and the resolved config
with the run record (marljax version, git commit, library versions). Only process 0 of a
multi-host run opens trackers. Each backend is imported only when chosen; `LogConfig.check`
refuses one that is not installed before anything compiles, naming the extra to install.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

from marljax.config import Config, to_flat


class Tracker(Protocol):
    def row(self, row: dict) -> None: ...

    def finish(self, plot: Path | None, config_text: str) -> None: ...


def scalars(row: dict) -> dict[str, float]:
    """The numbers of a metrics row, per-seed lists spread into `<key>/seed_<i>`; None and NaN dropped."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, (int, float)):
            if math.isfinite(value):
                out[key] = float(value)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    out[f"{key}/seed_{i}"] = float(v)
        elif isinstance(value, dict):  # e.g. dropped_by_reason, return per group
            for k, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    out[f"{key}/{k}"] = float(v)
    return out


def run_name(config: Config, out_dir: Path) -> str:
    return config.log.run_name or Path(out_dir).name


class TensorBoard:
    """Event files in <out_dir>/tensorboard (tensorboardX): `tensorboard --logdir <out_dir>`."""

    def __init__(self, config: Config, out_dir: Path, record: dict):
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=str(Path(out_dir) / "tensorboard"))

    def row(self, row: dict) -> None:
        step = int(row["env_steps"])
        for key, value in scalars(row).items():
            self.writer.add_scalar(key, value, global_step=step)

    def finish(self, plot: Path | None, config_text: str) -> None:
        self.writer.add_text("config", "```\n" + config_text + "\n```")
        if plot is not None and plot.exists():
            from matplotlib.image import imread

            self.writer.add_image("returns", imread(str(plot))[..., :3], dataformats="HWC")
        self.writer.close()


class WandB:
    """A wandb run in <out_dir>/wandb (offline by default: `wandb sync <out_dir>/wandb/offline-run-*`)."""

    def __init__(self, config: Config, out_dir: Path, record: dict):
        import wandb

        self.wandb = wandb
        log = config.log
        self.run = wandb.init(
            project=log.project, entity=log.entity or None, name=run_name(config, out_dir), tags=list(log.tags) or None,
            group=log.group or None, dir=str(out_dir), mode="offline" if log.offline else "online",
            config={**to_flat(config.to_dict()), **{f"record/{k}": v for k, v in record.items()}}, reinit="create_new",
        )  # fmt: skip
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def row(self, row: dict) -> None:
        self.run.log(scalars(row))

    def finish(self, plot: Path | None, config_text: str) -> None:
        if plot is not None and plot.exists():
            self.run.log({"returns_plot": self.wandb.Image(str(plot))})
        self.run.finish()


class MLflow:
    """An MLflow run (experiment `log.project`) in `log.mlflow_uri`, by default <out_dir>/mlruns."""

    def __init__(self, config: Config, out_dir: Path, record: dict):
        from mlflow.tracking import MlflowClient

        uri = config.log.mlflow_uri or (Path(out_dir).absolute() / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(config.log.project)
        exp_id = experiment.experiment_id if experiment else self.client.create_experiment(config.log.project)
        tags = {"mlflow.runName": run_name(config, out_dir), **{f"tag.{t}": "1" for t in config.log.tags}}
        if config.log.group:
            tags["group"] = config.log.group
        self.run_id = self.client.create_run(exp_id, tags=tags).info.run_id
        params = {**to_flat(config.to_dict()), **{f"record.{k}": v for k, v in record.items()}}
        for key, value in params.items():
            self.client.log_param(self.run_id, key.replace("/", "."), str(value)[:6000])

    def row(self, row: dict) -> None:
        from mlflow.entities import Metric

        step, stamp = int(row["env_steps"]), 0
        metrics = [Metric(key, value, stamp, step) for key, value in scalars(row).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def finish(self, plot: Path | None, config_text: str) -> None:
        self.client.log_text(self.run_id, config_text, "config.yaml")
        if plot is not None and plot.exists():
            self.client.log_artifact(self.run_id, str(plot))
        self.client.set_terminated(self.run_id)


BACKENDS: dict[str, Any] = {"tensorboard": TensorBoard, "wandb": WandB, "mlflow": MLflow}


def open_trackers(config: Config, out_dir: Path, record: dict) -> list[Tracker]:
    """One tracker per chosen backend (none on processes other than 0)."""
    from marljax.parallel import distributed

    if not distributed.is_primary():
        return []
    return [BACKENDS[b](config, out_dir, record) for b in config.log.backends if b != "jsonl"]
