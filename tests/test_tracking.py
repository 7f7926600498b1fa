"""`report_to`: a tiny training run reports to TensorBoard, W&B (offline) and MLflow (file store),
and each tracker's own records are read back; a listed tracker that is missing stops the run at once."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mapo.cli import app
from mapo.config import ConfigError, load_config
from mapo.core.trainer import train
from mapo.run_folder import RunFolder

TINY = [
    "policy.model=tiny",
    "policy.lora.r=4",
    "threads=1",
    "steps=2",
    "rollout.scenarios_per_step=1",
    "rollout.samples_per_scenario=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=6",
]


def wandb_records(path: Path) -> list:
    """The protobuf records of a `.wandb` file (W&B's LevelDB-style log: 32 KiB blocks of chunked records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, chunks, out = 32768, 7, [], []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            out.append(record)
            chunks = []
        elif kind == 0:
            break
    return out


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.delenv("WANDB_PROJECT", raising=False)
        config = load_config(None, [*TINY, "report_to=[tensorboard, wandb, mlflow]"])
        return train(config, output=tmp_path_factory.mktemp("tracked") / "run", show_progress=False).run_dir


def _logged(run: Path) -> list[dict[str, float]]:
    rows = RunFolder(run).read_metrics()
    assert [r["step"] for r in rows] == [1, 2]
    return [{k: float(v) for k, v in r.items() if k != "step" and isinstance(v, (int, float))} for r in rows]


def test_tensorboard_events_hold_every_scalar_of_every_step(tracked_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked_run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    rows = _logged(tracked_run)
    assert set(events.Tags()["scalars"]) == set(rows[0])
    for key in rows[0]:
        values = {e.step: e.value for e in events.Scalars(key)}
        assert values == pytest.approx({1: rows[0][key], 2: rows[1][key]}, rel=1e-6, abs=1e-6)


def test_wandb_offline_run_folder_holds_config_metrics_and_results(tracked_run: Path) -> None:
    (log_file,) = tracked_run.glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records(log_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["rollout"]["max_turns"] == 2 and config["report_to"] == ["tensorboard", "wandb", "mlflow"]
    assert run.display_name == tracked_run.name
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            history[r.history.step.num] = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item
            }
    rows = _logged(tracked_run)
    for step, row in zip((1, 2), rows):
        assert {k: history[step][k] for k in row} == pytest.approx(row)
    summary = {
        item.key: json.loads(item.value_json)
        for r in records
        if r.WhichOneof("record_type") == "summary"
        for item in r.summary.update
    }
    assert summary["report"] == str(tracked_run / "report.html")
    assert summary["final_checkpoint"] == str(tracked_run / "final")
    assert (log_file.parent / "files" / "report.html").read_bytes() == (tracked_run / "report.html").read_bytes()


def test_mlflow_file_store_holds_the_run_with_params_metrics_and_report(tracked_run: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient((tracked_run / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("mapo").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == tracked_run.name
    assert run.data.params["rollout.max_turns"] == "2" and run.data.params["advantage.estimator"] == '"mapo"'
    rows = _logged(tracked_run)
    assert set(run.data.metrics) == set(rows[0])
    for key in ("reward_mean", "loss", "grad_norm", "step_time"):
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert history == pytest.approx({1: rows[0][key], 2: rows[1][key]})
    assert run.data.tags["final_checkpoint"] == str(tracked_run / "final")
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["report.html"]


def test_a_listed_tracker_that_is_not_installed_stops_the_run_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "--output", str(out), *(f"--set={o}" for o in TINY),
                                      "--set", "report_to=[tensorboard, wandb]"])
    assert result.exit_code == 2
    assert "report_to lists wandb but it is not installed: pip install wandb" in result.output
    assert not out.exists()  # stopped before the model loaded or a run folder was made


def test_report_to_names_are_checked_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="report_to: unknown tracker 'neptune'; choose from tensorboard, wandb, mlflow"):
        load_config(None, ["report_to=[neptune]"])
    assert load_config(None, []).report_to == []


def _old_run_folder(root: Path, tensorboard: bool) -> Path:
    """A run folder's config.yaml as written before report_to: the resolved config with `tensorboard: <bool>`."""
    from mapo.config import TrainConfig, config_dict

    raw = {("tensorboard" if k == "report_to" else k): (tensorboard if k == "report_to" else v)
           for k, v in config_dict(TrainConfig()).items()}
    run = root / f"old-{tensorboard}"
    (run / "final").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return run


def test_config_yaml_of_runs_from_before_report_to_still_loads(tmp_path: Path) -> None:
    from mapo.evaluate.checkpoints import run_config

    with pytest.warns(FutureWarning, match="'tensorboard' is deprecated; use report_to"):
        assert load_config(_old_run_folder(tmp_path, False) / "config.yaml").report_to == []
    with pytest.warns(FutureWarning):
        assert run_config(str(_old_run_folder(tmp_path, True))).report_to == ["tensorboard"]
    with pytest.warns(FutureWarning):  # --set, and no duplicate when report_to already lists it
        assert load_config(None, ["tensorboard=true"]).report_to == ["tensorboard"]
        both = load_config(None, ["report_to=[wandb, tensorboard]", "tensorboard=true"])
        assert both.report_to == ["wandb", "tensorboard"]
        assert load_config(None, ["report_to=[wandb]", "tensorboard=false"]).report_to == ["wandb"]
    with pytest.raises(ConfigError, match="tensorboard .deprecated, use report_to.: expected true or false"):
        load_config(None, ["tensorboard=maybe"])
