"""Experiment tracking: the run's metrics, config and results sent to TensorBoard, W&B or MLflow.

`report_to` in the config lists the trackers (default none; `metrics.jsonl` and
`report.html` are always written). Each gets, per step, every numeric metric of
`metrics.jsonl`; at the start the resolved config; at the end the HTML report and the
final checkpoint's path. Where each writes:

- tensorboard: `<run>/tensorboard/` event files (scalars; config and paths as text);
- wandb: `<run>/wandb/`; online or offline as `WANDB_MODE` says (`offline` needs no account);
  project from `WANDB_PROJECT` (default "mapo");
- mlflow: the tracking URI in `MLFLOW_TRACKING_URI`, else a file store at `<run>/mlruns`;
  experiment from `MLFLOW_EXPERIMENT_NAME` (default "mapo"); the config as flattened params.

`check_installed` runs before anything slow, so a listed tracker that is missing
stops the run at its start with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

# tracker -> (module that must import, pip package); the `tracking` extra installs all three
TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}


class TrackerMissing(ValueError):
    """A tracker listed in `report_to` whose package is not installed; the message has the install command."""


def validate_names(names: Sequence[str]) -> None:
    """ValueError for a name that is not a tracker (config check; needs nothing installed)."""
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ValueError(f"report_to: unknown tracker {unknown[0]!r}; choose from {', '.join(TRACKERS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"report_to lists a tracker twice: {list(names)}")


def check_installed(names: Sequence[str]) -> None:
    """TrackerMissing naming the pip command when a listed tracker cannot be imported."""
    missing = [TRACKERS[n][1] for n in names if importlib.util.find_spec(TRACKERS[n][0]) is None]
    if missing:
        raise TrackerMissing(
            f"report_to lists {', '.join(missing)} but it is not installed: pip install {' '.join(missing)} "
            "(or, from a mapo checkout, pip install -e '.[tracking]' for all three)"
        )


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (what every tracker can plot), without the step."""
    out = {}
    for key, value in metrics.items():
        if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
    return out


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"rollout.max_turns": "3", ...}: nested config as dotted keys with JSON values (MLflow params)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = json.dumps(value)
    return out


class Tracker(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self, report: Path, final: Path) -> None: ...

    def close(self, failed: bool) -> None: ...


class TensorBoardTracker:
    def __init__(self, run: Path, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run / "tensorboard"))
        # markdown code block: TensorBoard's text plugin would otherwise reflow the YAML
        self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, report: Path, final: Path) -> None:
        self.writer.add_text("report", str(report))
        self.writer.add_text("final_checkpoint", str(final))

    def close(self, failed: bool) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, run: Path, config: dict[str, Any]) -> None:
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "mapo"),
            name=run.name,
            dir=str(run),
            config=config,
            reinit="create_new",  # one W&B run per training run, also when several run in one process
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self, report: Path, final: Path) -> None:
        self.run.summary["report"] = str(report)
        self.run.summary["final_checkpoint"] = str(final)
        self.run.save(str(report), base_path=str(report.parent), policy="now")

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class MlflowTracker:
    def __init__(self, run: Path, config: dict[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (run / "mlruns").resolve().as_uri()
            # a plain folder needs no server or database; MLflow 3 wants this opt-in to write one
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        # a client of its own, not mlflow's process-global active run: nothing leaks between runs
        self.client = MlflowClient(uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "mapo")
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment_id, run_name=run.name).info.run_id
        params = [Param(k, v) for k, v in flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def finish(self, report: Path, final: Path) -> None:
        self.client.log_artifact(self.run_id, str(report))
        self.client.set_tag(self.run_id, "final_checkpoint", str(final))

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


_CLASSES: dict[str, type] = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MlflowTracker}


class Tracking:
    """The trackers of one training run. `with tracking:` ends them as failed if training raises;
    `finish` sends the results and ends them normally."""

    def __init__(self, names: Sequence[str], run: Path, config: dict[str, Any]) -> None:
        check_installed(names)
        self.trackers: list[Tracker] = []
        try:
            for name in names:
                self.trackers.append(_CLASSES[name](Path(run), config))
        except BaseException:
            self.close(failed=True)
            raise

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        values = numeric(metrics)
        for tracker in self.trackers:
            tracker.log(values, step)

    def finish(self, report: Path, final: Path) -> None:
        for tracker in self.trackers:
            tracker.finish(report, final)
        self.close(failed=False)

    def close(self, failed: bool) -> None:
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close(failed)

    def __enter__(self) -> Tracking:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if exc_type is not None:
            self.close(failed=True)
