"""A Ray Tune experiment as Ray 2.60 stores it becomes the native sweep's history and report.

The fixture ``tests/data/tune/digits-probe`` is a real experiment (``tests/data/tune/generate.py``): under ASHA
(``max_t=8``) trial 1 (``lr=0.01``) crashes once and is restarted from its checkpoint, trials 2 and 3 are stopped at
ASHA's first rung, trial 4 raises at its first step.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from airflow_elastic.ray.tune import TuneExperiment, read_experiment, tune_history
from airflow_elastic.sweeps.report import write_report

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "tune" / "digits-probe"


@pytest.fixture(scope="module")
def experiment() -> TuneExperiment:
    return read_experiment(str(FIXTURE))


def test_every_tune_outcome_maps_to_the_sweep_state(experiment: TuneExperiment) -> None:
    history = tune_history(experiment, objective="val_loss")
    by_lr = {t.params["lr"]: t for t in history.trials}
    assert [t.number for t in history.trials] == [1, 2, 3, 4]
    assert by_lr[0.01].state == "complete"
    assert sorted(by_lr[0.01].intermediate) == list(range(1, 9))
    assert by_lr[0.01].value == pytest.approx(0.0125)
    assert by_lr[0.01].preemptions == 1  # restarted once from its checkpoint, then ran to the end
    for lr in (0.03, 0.06):
        assert by_lr[lr].state == "pruned"
        assert by_lr[lr].cause == "stopped early by the Tune scheduler after 2 of 8 iterations"
        assert by_lr[lr].value == by_lr[lr].intermediate[2]
    assert by_lr[0.095].state == "failed"
    assert by_lr[0.095].cause == "RuntimeError: loss diverged: nan"
    assert by_lr[0.095].value is None and by_lr[0.095].finished_at is None
    assert all(t.started_at for t in history.trials)
    assert history.best("min") is by_lr[0.01]


def test_a_restore_without_a_counted_failure_is_a_restart() -> None:
    """Ray 2.60 restores a trial whose node was drained (a graceful spot reclaim) without counting a failure: the
    trial's reports start ``iterations_since_restore`` again at 1 (seen end to end in the example's reclaim)."""
    tag = {"trial_id": "t", "experiment_tag": "0_lr=0.1", "status": "TERMINATED", "relative_logdir": "t0"}
    runtime = {"num_failures": 0, "start_time": 1.0, "last_result_time": 9.0}
    rows = [
        {"training_iteration": i, "iterations_since_restore": s, "val_loss": 1 / i}
        for i, s in [(1, 1), (2, 2), (3, 1), (4, 2)]
    ]
    experiment = TuneExperiment({"trial_data": [[json.dumps(tag), json.dumps(runtime)]]}, {"t0": rows})
    (trial,) = tune_history(experiment, objective="val_loss").trials
    assert (trial.state, trial.preemptions, trial.value) == ("complete", 1, 0.25)


def test_max_iterations_decides_what_counts_as_stopped_early(experiment: TuneExperiment) -> None:
    history = tune_history(experiment, objective="val_loss", max_iterations=2)
    assert [t.state for t in history.trials] == ["complete", "complete", "complete", "failed"]


def test_the_newest_experiment_state_is_read(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    shutil.copytree(FIXTURE, root)
    newest = sorted(root.glob("experiment_state-*.json"))[-1]
    state = json.loads(newest.read_text())
    for pair in state["trial_data"]:
        trial = json.loads(pair[0])
        trial["status"] = "RUNNING"
        pair[0] = json.dumps(trial)
    (root / "experiment_state-2000-01-01_00-00-00.json").write_text(json.dumps(state))  # older: ignored
    assert tune_history(read_experiment(str(root)), objective="val_loss").trials[0].state == "complete"
    (root / "experiment_state-2999-01-01_00-00-00.json").write_text(json.dumps(state))  # a restore wrote a newer one
    history = tune_history(read_experiment(f"file://{root}"), objective="val_loss")
    assert {t.state for t in history.trials} == {"stopped"}
    assert history.trials[0].cause == "the experiment ended while the trial was RUNNING"


def test_a_missing_experiment_names_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/nowhere: no Ray Tune experiment state"):
        read_experiment(str(tmp_path / "nowhere"))


def test_a_state_that_is_not_tunes_is_refused() -> None:
    with pytest.raises(ValueError, match="no 'trial_data' list"):
        tune_history(TuneExperiment({"trials": []}), objective="val_loss")
    odd = {"trial_data": [[json.dumps({"trial_id": "x", "experiment_tag": "0_a=1", "status": "WEIRD"}), "{}"]]}
    with pytest.raises(ValueError, match="trial 'x': unknown status 'WEIRD'"):
        tune_history(TuneExperiment(odd), objective="val_loss")


def test_the_report_is_the_native_sweeps(experiment: TuneExperiment, tmp_path: Path) -> None:
    history = tune_history(experiment, objective="val_loss")
    paths = write_report(history, objective="val_loss", mode="min", uri=str(tmp_path / "report"))
    rows = list(csv.DictReader(io.StringIO(Path(paths["csv"]).read_text())))
    assert [row["state"] for row in rows] == ["complete", "pruned", "pruned", "failed"]
    assert json.loads(Path(paths["json"]).read_text())["best_trial"] == 1
    assert Path(paths["png"]).read_bytes().startswith(b"\x89PNG")
