"""``make demo`` runs the nightly pipeline with ``airflow dags test`` on a local cluster, through a spot reclaim of one
of the final training's torchft replica groups, to a KServe rollout, and shows its progress, the reclaim's outcome
(the survivor untouched, the replacement healed from it) and the report; the assertions read what it left in
storage."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.airflow  # `airflow dags test` through tools/demo.py
pytest.importorskip("torch")  # the `examples` extra (part of `dev`)
pytest.importorskip("sklearn")


@pytest.mark.timeout(1200)
def test_demo_runs_the_nightly_pipeline_through_a_spot_reclaim(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1100,
        cwd=ROOT,
    )
    shown = out.stdout
    assert out.returncode == 0, shown[-6000:] + out.stderr[-3000:]
    # Progress, stage by stage and trial by trial.
    for task in ("prepare", "sweep", "train", "evaluate", "publish", "serve"):
        assert f"[{task}] started" in shown and f"[{task}] success after" in shown, task
    assert "[serve] started (task 9/9)" in shown, shown  # every task that runs is counted
    assert "[sweep] trial 6/6 " in shown and "[train] injected: spot reclaim of node " in shown
    assert "] error: " not in shown, shown  # no task logged an error
    # The reclaim took one replica group; the other trained on in the same pod, never restarted, and the
    # replacement healed from it (torchft's own line, read from the replacement's log).
    assert "quorum of 1 replica group(s)" in shown and "survivor untouched: replica group " in shown
    assert "survivor touched" not in shown and "replacement healed from a live peer: " in shown
    assert "'s replacement digits-final-" in shown and "healed: healing is required step=" in shown
    # The final training survived the reclaim in Airflow try 1, and the model was published and promoted.
    assert "final training: try 1;" in shown
    models = tmp_path / "storage" / "models" / "digits"
    latest = json.loads((models / "latest" / "LATEST.json").read_text())
    report = json.loads((models / latest["version"] / "report.json").read_text())
    assert report["promotion"]["promote"] is True and "no model published yet" in report["promotion"]["reason"]
    assert report["training"]["preemptions_survived"] >= 1, report["training"]
    assert report["trials"]["total"] == 6 and report["best_params"].keys() == {"lr", "hidden", "dropout", "layers"}
    assert report["test"]["test_rows"] == 360 and report["test"]["test_accuracy"] > 0.8, report["test"]
    assert report["test"]["epoch"] == 100  # the last epoch's checkpoint, written by one pod of the quorum
    assert (models / "latest" / "model" / "model.pt").stat().st_size > 0  # the TorchScript the predictor loaded
    assert (models / "latest" / "checkpoint" / "model.pt").stat().st_size > 0
    # The promoted version was rolled out to KServe, and its predictor answered the smoke request through its Service.
    model = report["locations"]["model"]
    assert f"[serve] Created InferenceService default/digits serving {model}" in shown
    assert f"serving: InferenceService default/digits serves {model} (1 replica(s), Standard mode)" in shown
    assert "smoke request through the service proxy: test digits [" in shown and "-> predicted [" in shown
    assert (models / latest["version"] / "sweep" / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report printed at the end is the one in storage, and says where things are.
    assert f"plot: {report['locations']['plot']}" in shown and f"model: {report['locations']['model']}" in shown
    assert f"checkpoints: {report['locations']['checkpoints']}" in shown
    # Airflow recorded one event per Asset: the split, the promotion (through publish's alias) and the served model.
    events = {line.split(" from ")[0]: line for line in shown.splitlines() if line.startswith("asset event: ")}
    assert sorted(events) == [f"asset event: nightly_training.digits.{a}" for a in ("data", "model", "served")], events
    assert "from publish: " in events["asset event: nightly_training.digits.model"]
    assert f'"version": "{latest["version"]}"' in events["asset event: nightly_training.digits.model"]
    assert f'"storage_uri": "{model}"' in events["asset event: nightly_training.digits.served"]
