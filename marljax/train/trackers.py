"""Experiment trackers (`log.backends`): each mirrors every metrics row of a run.

    log.backends=[tensorboard,wandb,neptune,mlflow]   log.project=... log.run_name=... log.tags=[...]

metrics.jsonl stays the record; a tracker receives the same rows: every number of a row as a
scalar, every per-seed list (`return_per_seed`, `eval_return_per_seed`, ...) as one scalar per
seed (`return_per_seed/seed_1`), all at x = the row's `env_steps` (the env steps of one run, i.e.
of one seed, as `total_timesteps` counts them). At the end each gets the returns plot and the
resolved config with its run record (marljax version, git commit, library versions).

- Only process 0 of a multi-host run opens trackers.
- Each backend is imported only when chosen; `LogConfig.check` refuses one that is not installed
  before anything compiles, naming the extra to install.
- A resumed run continues the same tracker runs: their ids are kept in `<out_dir>/trackers.json`.
- A tracker that fails (a full disk, a lost connection) is reported once and switched off; the
  training run goes on, and metrics.jsonl is unaffected.
- Offline by default (`log.offline=true`): wandb and Neptune write under the run's directory and
  sync later (`wandb sync <out_dir>/wandb/offline-run-*`; `neptune sync --path <out_dir>`, which
  reads `<out_dir>/.neptune`);
  MLflow writes a file store in `<out_dir>/mlruns` unless `log.mlflow_uri` names a server.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from marljax.config import Config
from marljax.files import write_text_atomic
from marljax.run_settings import LogConfig
from marljax.schema import to_flat


def scalars(row: dict) -> dict[str, float]:
    """The numbers of a metrics row, per-seed lists spread into `<key>/seed_<i>` and mappings into
    `<key>/<name>`; None and non-finite values dropped."""
    out: dict[str, float] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)  # bool too: a flag as 0/1

    for key, value in row.items():
        if isinstance(value, list):
            for i, v in enumerate(value):
                put(f"{key}/seed_{i}", v)
        elif isinstance(value, dict):  # e.g. dropped_by_reason
            for k, v in value.items():
                put(f"{key}/{k}", v)
        else:
            put(key, value)
    return out


class TensorBoard:
    """Event files in <out_dir>/tensorboard (tensorboardX): `tensorboard --logdir <out_dir>`."""

    name = "tensorboard"

    def __init__(
        self,
        log: LogConfig,
        params: dict,
        out_dir: Path,
        store: Path,
        run_name: str,
        group: str,
        record: dict,
        ids: dict,
    ):
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=str(out_dir / "tensorboard"))

    def row(self, row: dict, values: dict[str, float]) -> None:
        step = int(row["env_steps"])
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def finish(self, plot: Path | None, config_text: str, failed: bool) -> None:
        self.writer.add_text("config", "```\n" + config_text + "\n```")
        if plot is not None and plot.exists():
            from matplotlib.image import imread

            self.writer.add_image("returns", imread(str(plot))[..., :3], dataformats="HWC")
        self.writer.close()


class WandB:
    """A wandb run in <out_dir>/wandb, offline unless `log.offline=false`."""

    name = "wandb"

    def __init__(
        self,
        log: LogConfig,
        params: dict,
        out_dir: Path,
        store: Path,
        run_name: str,
        group: str,
        record: dict,
        ids: dict,
    ):
        import wandb

        self.wandb = wandb
        ids.setdefault("wandb", uuid.uuid4().hex[:12])
        self.run = wandb.init(
            project=log.project,
            entity=log.entity or None,
            name=run_name,
            tags=list(log.tags) or None,
            group=group or None,
            dir=str(out_dir),
            mode="offline" if log.offline else "online",
            id=ids["wandb"],
            resume="allow",
            reinit="create_new",
            config={**params, **{f"record/{k}": v for k, v in record.items()}},
        )
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def row(self, row: dict, values: dict[str, float]) -> None:
        self.run.log(values)

    def finish(self, plot: Path | None, config_text: str, failed: bool) -> None:
        (Path(self.run.dir) / "config.yaml").write_text(config_text)  # the run's files/ are synced with it
        if plot is not None and plot.exists():
            self.run.log({"returns_plot": self.wandb.Image(str(plot))})
        self.run.finish(exit_code=1 if failed else 0)


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """`name=value` in the environment for the block only (libraries that read settings from it)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class Neptune:
    """A Neptune run (project `log.entity/log.project`), offline by default in <out_dir>/.neptune
    (where `neptune sync --path <out_dir>` looks)."""

    name = "neptune"

    def __init__(
        self,
        log: LogConfig,
        params: dict,
        out_dir: Path,
        store: Path,
        run_name: str,
        group: str,
        record: dict,
        ids: dict,
    ):
        import neptune

        ids.setdefault("neptune", uuid.uuid4().hex[:16])
        project = f"{log.entity}/{log.project}" if log.entity else None  # None: $NEPTUNE_PROJECT
        # the client reads its data directory from the environment when the run opens
        with _environ("NEPTUNE_DATA_DIRECTORY", str(out_dir / ".neptune")):
            self.run = neptune.init_run(
                project=project,
                name=run_name,
                tags=list(log.tags),
                custom_run_id=ids["neptune"],
                mode="offline" if log.offline else "async",
                capture_stdout=False,
                capture_stderr=False,
            )
        if group:
            self.run["sys/group_tags"].add([group])
        self.run["config"] = {k.replace(".", "/"): str(v) for k, v in params.items()}
        self.run["record"] = dict(record)

    def row(self, row: dict, values: dict[str, float]) -> None:
        step = float(row["env_steps"])
        for key, value in values.items():
            self.run[f"metrics/{key}"].append(value, step=step)

    def finish(self, plot: Path | None, config_text: str, failed: bool) -> None:
        self.run["config_yaml"] = config_text
        if plot is not None and plot.exists():
            self.run["returns_plot"].upload(str(plot), wait=True)
        self.run.stop()


class MLflow:
    """An MLflow run (experiment `log.project`) at `log.mlflow_uri`, by default a file store in
    <out_dir>/mlruns, a sweep's cells all in <sweep out_dir>/mlruns
    (`mlflow ui --backend-store-uri <that directory>`)."""

    name = "mlflow"

    def __init__(
        self,
        log: LogConfig,
        params: dict,
        out_dir: Path,
        store: Path,
        run_name: str,
        group: str,
        record: dict,
        ids: dict,
    ):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        if log.mlflow_uri:
            self.client = MlflowClient(tracking_uri=log.mlflow_uri)
        else:  # MLflow 3 asks for this opt-in before it opens a local file store
            with _environ("MLFLOW_ALLOW_FILE_STORE", "true"):
                self.client = MlflowClient(tracking_uri=(store.absolute() / "mlruns").as_uri())
                self.client.search_experiments(max_results=1)  # opens the store while the opt-in holds
        if "mlflow" in ids:
            self.run_id = ids["mlflow"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name(log.project)
        exp_id = experiment.experiment_id if experiment else self.client.create_experiment(log.project)
        tags = {"mlflow.runName": run_name, **{t: "" for t in log.tags}}
        if group:
            tags["group"] = group
        self.run_id = ids["mlflow"] = self.client.create_run(exp_id, tags=tags).info.run_id
        params = {**params, **{f"record.{k}": v for k, v in record.items()}}
        items = [Param(key, str(value)[:6000]) for key, value in params.items()]
        for i in range(0, len(items), 100):  # log_batch takes at most 100 params
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def row(self, row: dict, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        step, stamp = int(row["env_steps"]), int(time.time() * 1000)
        metrics = [Metric(key, value, stamp, step) for key, value in values.items()]
        for i in range(0, len(metrics), 1000):  # log_batch takes at most 1000 metrics
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def finish(self, plot: Path | None, config_text: str, failed: bool) -> None:
        self.client.log_text(self.run_id, config_text, "config.yaml")
        if plot is not None and plot.exists():
            self.client.log_artifact(self.run_id, str(plot))
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


BACKENDS: dict[str, Any] = {"tensorboard": TensorBoard, "wandb": WandB, "neptune": Neptune, "mlflow": MLflow}


class Trackers:
    """The chosen trackers of one run (or one sweep cell), fed together and closed once.

    `name`: the run's name in the trackers (default `log.run_name`, else the directory's name);
    `group`: runs shown together (default `log.group`; a sweep passes its own name); `store`: where
    a store shared by the group lives (MLflow's file store; default `out_dir`, a sweep's cells
    share the sweep's)."""

    def __init__(self, config: Config, out_dir: Path, name: str = "", group: str = "", store: Path | None = None):
        from marljax.parallel import distributed
        from marljax.train.records import run_record

        self.out_dir = Path(out_dir)
        self.backends: list[Any] = []
        chosen = [b for b in config.log.backends if b != "jsonl"]
        if not chosen or not distributed.is_primary():
            return
        ids_path = self.out_dir / "trackers.json"
        ids = json.loads(ids_path.read_text()) if ids_path.exists() else {}
        name = config.log.run_name or name or self.out_dir.name
        record, params = run_record(), to_flat(config.to_dict())  # a backend gets log.* and the flat settings
        try:
            for b in chosen:
                backend = BACKENDS[b](
                    config.log,
                    params,
                    self.out_dir,
                    Path(store or out_dir),
                    name,
                    config.log.group or group,
                    record,
                    ids,
                )
                self.backends.append(backend)
        except Exception:
            self.finish(None, "", failed=True)  # close the ones already open
            raise
        finally:
            write_text_atomic(ids_path, json.dumps(ids, indent=1) + "\n")

    def row(self, row: dict) -> None:
        if not self.backends:
            return
        values = scalars(row)
        for backend in list(self.backends):
            try:
                backend.row(row, values)
            except Exception as exc:  # noqa: BLE001 - a tracker's trouble must not end the training run
                print(
                    f"warning: log.backends: {backend.name} failed ({type(exc).__name__}: {exc}); "
                    "it is switched off for the rest of this run, metrics.jsonl is unaffected"
                )
                self.backends.remove(backend)

    def finish(self, plot: Path | None, config_text: str, failed: bool = False) -> None:
        """The plot and the config to every tracker, then each run ends (marked failed if `failed`)."""
        backends, self.backends = self.backends, []
        for backend in backends:
            try:
                backend.finish(plot, config_text, failed)
            except Exception as exc:  # noqa: BLE001 - the others still get closed
                print(f"warning: log.backends: closing {backend.name} failed: {type(exc).__name__}: {exc}")


__all__ = ["scalars", "Trackers", "BACKENDS"]
