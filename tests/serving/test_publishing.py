"""The nightly pipeline's publishing decisions: version names, the no-regression promotion rule, the run report."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from airflow_elastic.serving import publishing
from airflow_elastic.serving.publishing import decide


@pytest.mark.parametrize(
    ("run_id", "name"),
    [
        ("scheduled__2026-12-01T02:00:00+00:00", "scheduled__2026-12-01T02-00-00-00-00"),
        ("manual__2026-12-01T13:47:35.991537+00:00", "manual__2026-12-01T13-47-35.991537-00-00"),
        ("my run/with slashes", "my-run-with-slashes"),
    ],
)
def test_a_run_id_becomes_one_safe_path_segment(run_id, name):
    assert publishing.version_name(run_id) == name


@pytest.mark.parametrize("run_id", ["", "///", "latest", ".."])
def test_a_run_id_that_leaves_nothing_usable_or_names_latest_is_refused(run_id):
    with pytest.raises(ValueError, match="no usable version name"):
        publishing.version_name(run_id)


def test_the_first_model_is_promoted():
    promotion = decide({"test_accuracy": 0.9}, None, metric="test_accuracy")
    assert promotion.promote and "no model published yet" in promotion.reason
    assert (promotion.candidate, promotion.incumbent) == (0.9, None)


@pytest.mark.parametrize(
    ("candidate", "incumbent", "mode", "tolerance", "promote"),
    [
        (0.95, 0.94, "max", 0.0, True),  # better
        (0.94, 0.94, "max", 0.0, True),  # equal is not a regression
        (0.93, 0.94, "max", 0.0, False),  # worse
        (0.935, 0.94, "max", 0.01, True),  # worse, within the tolerance
        (0.92, 0.94, "max", 0.01, False),  # worse, beyond it
        (0.30, 0.31, "min", 0.0, True),  # a loss: lower is better
        (0.32, 0.31, "min", 0.0, False),
        (0.315, 0.31, "min", 0.01, True),
    ],
)
def test_a_model_is_promoted_unless_its_test_metric_regresses(candidate, incumbent, mode, tolerance, promote):
    promotion = decide({"m": candidate}, {"m": incumbent}, metric="m", mode=mode, tolerance=tolerance)
    assert promotion.promote is promote, promotion.reason
    assert ("not promoted" in promotion.reason) is not promote
    assert (promotion.candidate, promotion.incumbent) == (candidate, incumbent)


@pytest.mark.parametrize("value", [None, math.nan, math.inf, "0.9", True])
def test_a_candidate_without_a_finite_metric_is_never_promoted(value):
    for incumbent in (None, {"m": 0.5}):
        promotion = decide({"m": value}, incumbent, metric="m")
        assert not promotion.promote and "no finite 'm'" in promotion.reason


def test_an_incumbent_without_the_metric_is_replaced():
    promotion = decide({"m": 0.5}, {"other": 1.0}, metric="m")
    assert promotion.promote and "has no finite 'm'" in promotion.reason


@pytest.mark.parametrize(("mode", "tolerance"), [("best", 0.0), ("max", -0.1), ("max", math.nan)])
def test_bad_rule_settings_are_refused(mode, tolerance):
    with pytest.raises(ValueError, match=r"mode|tolerance"):
        decide({"m": 1.0}, None, metric="m", mode=mode, tolerance=tolerance)


SWEEP = {
    "best_params": {"lr": 0.01, "hidden": 64},
    "best_value": 0.21,
    "best_trial": 3,
    "trials": [
        {"number": 0, "state": "complete", "preemptions": 0},
        {"number": 1, "state": "pruned", "preemptions": 1},
        {"number": 3, "state": "complete", "preemptions": 0},
    ],
    "report": {"png": "/r/sweep.png"},
}


def train_result(preemptions: int = 0) -> dict:
    metrics = {"epoch": 20, "val_loss": 0.1, "params": {"lr": 0.01}}
    return {"name": "digits-abc", "preemptions": preemptions, "failures": 0, "spot_share": 0.5, "gpu_hours": 0.0,
            "lost_steps": 0, "attempts": [{}], "metrics": metrics}  # fmt: skip


def test_the_run_report_gathers_every_step_and_reads_as_lines():
    promotion = decide({"test_accuracy": 0.97}, {"test_accuracy": 0.95}, metric="test_accuracy")
    report = publishing.run_report(
        run_id="manual__x",
        version="manual__x",
        sweep=SWEEP,
        train=train_result(preemptions=0),
        evidence=[record(0, "preemption", pod="digits-final-abc-worker-0-0-x")],
        evaluation={"test_accuracy": 0.97, "test_loss": 0.1, "rows": 360, "checkpoint": "/c/step-20"},
        promotion=promotion,
        objective="val_loss",
        locations={"model": "/m/manual__x/model", "plot": "/m/manual__x/sweep/sweep.png"},
    )
    assert report["best_params"] == {"lr": 0.01, "hidden": 64}
    assert report["objective"] == {"name": "val_loss", "best_value": 0.21, "best_trial": 3}
    assert report["trials"] == {"total": 3, "complete": 2, "pruned": 1} and report["sweep_preemptions"] == 1
    assert report["training"]["preemptions_survived"] == 1 and report["promotion"]["promote"] is True
    assert report["training"]["disrupted_pods"] == ["digits-final-abc-worker-0-0-x (spot_reclaim)"]
    assert "params" not in report["training"]["final"]  # nested values stay in the trainer's own metrics
    text = "\n".join(publishing.report_lines(report))
    assert "best val_loss=0.21 (trial 3): hidden=64, lr=0.01" in text
    assert "test: rows=360, test_accuracy=0.97, test_loss=0.1\n" in text  # numbers only: paths are listed below
    assert "1 preemption(s) survived" in text and "promoted" in text and "lost steps 0" in text
    assert "plot: /m/manual__x/sweep/sweep.png" in text


def record(attempt: int, budget: str, pod: str = "p") -> dict:
    return {
        "attempt": attempt,
        "pod": pod,
        "cause": "spot_reclaim" if budget == "preemption" else "x",
        "budget": budget,
    }


def test_elastic_recoveries_count_as_survived_preemptions():
    # A reclaimed elastic worker is replaced without a group restart: the operator counts no preemption; the
    # evidence its wait saved on the JobSet shows the reclaim.
    assert publishing.preemptions_survived(train_result(0), [record(0, "preemption")]) == 1
    # A free restart and the reclaim that caused it (the decisive stop of attempt 0) are one disruption.
    assert publishing.preemptions_survived(train_result(1), [record(0, "preemption")]) == 1
    assert publishing.preemptions_survived(train_result(1), [record(0, "preemption"), record(1, "preemption")]) == 2
    # Stops charged to no budget (pods the JobSet stopped itself) or to failures are not disruptions survived.
    assert publishing.preemptions_survived(train_result(0), [record(0, "none"), record(1, "failure")]) == 0
    assert publishing.preemptions_survived(train_result(2)) == 2


def test_publishing_is_pure():
    script = (
        "import sys, airflow_elastic.serving.publishing; print(sorted(m for m in sys.modules if m.split('.')[0] in "
    )
    script += "{'airflow', 'kubernetes', 'fsspec', 'numpy'}))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
