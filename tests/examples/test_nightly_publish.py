"""The nightly pipeline's publish step on real storage (``dags/nightly_training.py``): versioned layout, promotion to
``latest`` only without regression, and the warm start the next night reads back."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from airflow_elastic.contract import checkpoints
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def nightly() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nightly_training", ROOT / "dags" / "nightly_training.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def night(tmp_path: Path, name: str, accuracy: float) -> tuple[dict, dict, dict]:
    """One night's sweep, train and evaluate results, with the files they point at."""
    ckpt = tmp_path / name / "ckpt"
    for step in (19, 20):
        directory = Path(checkpoints.step_dir(str(ckpt), step))
        directory.mkdir(parents=True)
        (directory / "model.pt").write_bytes(f"{name}-{step}".encode())
        (directory / checkpoints.MARKER).write_bytes(checkpoints.marker_bytes(step, 3))
    reports = tmp_path / name / "report"
    reports.mkdir()
    for kind in ("csv", "json", "png"):
        (reports / f"sweep.{kind}").write_text(f"{name} {kind}")
    sweep = {
        "best_params": {"lr": 0.01},
        "best_value": 0.2,
        "best_trial": 1,
        "trials": [{"number": 1, "state": "complete", "preemptions": 0}],
        "report": {kind: str(reports / f"sweep.{kind}") for kind in ("csv", "json", "png")},
    }
    train = {"name": f"digits-final-{name}", "namespace": "default", "checkpoint": str(ckpt), "preemptions": 0}
    return sweep, train, {"test_accuracy": accuracy, "test_loss": 0.3}


def publish(nightly: ModuleType, tmp_path: Path, run_id: str, accuracy: float) -> dict:
    root = nightly.models_root({"root": str(tmp_path / "storage")})
    sweep, train, evaluation = night(tmp_path, run_id, accuracy)
    return nightly.publish_run(root, run_id, sweep, train, evaluation, [], {"tolerance": 0.0})


def test_a_night_is_published_as_a_version_and_promoted_only_without_regression(nightly, tmp_path):
    models = tmp_path / "storage" / "models" / "digits"
    root = nightly.models_root({"root": str(tmp_path / "storage")})
    assert nightly.read_previous_sweep(root) is None  # the first night starts cold

    first = publish(nightly, tmp_path, "scheduled__2026-12-01T02:00:00+00:00", 0.95)
    version = "scheduled__2026-12-01T02-00-00-00-00"
    assert first["version"] == version and first["promotion"]["promote"] is True
    newest = (models / version / "checkpoint" / "model.pt").read_bytes()  # model/ is the evaluation's export
    assert newest == f"{first['run_id']}-20".encode()  # the newest step
    assert json.loads((models / version / "metrics.json").read_text())["test_accuracy"] == 0.95
    assert (models / version / "sweep" / "sweep.png").exists() and (models / version / "report.json").exists()
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == version
    (models / "latest" / "stale-file").write_text("only in the first latest")

    worse = publish(nightly, tmp_path, "second", 0.90)
    assert worse["promotion"]["promote"] is False and "regresses" in worse["promotion"]["reason"]
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == version  # unchanged
    assert (models / "second" / "checkpoint" / "model.pt").exists()  # the version is published all the same
    # The next night warm-starts from the newest published sweep, promoted or not.
    assert json.loads((models / "LAST_RUN.json").read_text())["version"] == "second"
    assert nightly.read_previous_sweep(root)["report"]["png"].startswith(str(tmp_path / "second"))

    better = publish(nightly, tmp_path, "third", 0.97)
    assert better["promotion"]["promote"] is True and better["promotion"]["incumbent"] == 0.95
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == "third"
    assert (models / "latest" / "checkpoint" / "model.pt").read_bytes() == b"third-20"
    assert not (models / "latest" / "stale-file").exists()  # latest is the promoted version, nothing else


def test_nothing_is_published_without_a_complete_checkpoint(nightly, tmp_path):
    root = nightly.models_root({"root": str(tmp_path / "storage")})
    sweep, train, evaluation = night(tmp_path, "x", 0.9)
    train["checkpoint"] = str(tmp_path / "empty")
    with pytest.raises(ValueError, match="no complete checkpoint under"):
        nightly.publish_run(root, "x", sweep, train, evaluation, [], None)
    assert not (tmp_path / "storage" / "models" / "digits" / "LAST_RUN.json").exists()
