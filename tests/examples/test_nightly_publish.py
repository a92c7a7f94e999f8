"""The nightly pipeline's publish step on real storage (``dags/nightly_training.py``): versioned layout, promotion to
``latest`` only without regression, and the warm start the next night reads back."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

from airflow_elastic.contract import checkpoints
from tests.support.paths import ROOT, load_dag_file


@pytest.fixture(scope="module")
def nightly() -> ModuleType:
    return load_dag_file("nightly_training")


@pytest.fixture(scope="module")
def gate(nightly) -> ModuleType:
    """The promotion gate's module, as the flagship imported it."""
    return sys.modules["nightly_promotion"]


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


def publish(gate: ModuleType, tmp_path: Path, run_id: str, accuracy: float) -> dict:
    root = gate.models_root({"root": str(tmp_path / "storage")})
    sweep, train, evaluation = night(tmp_path, run_id, accuracy)
    return gate.publish_run(root, run_id, sweep, train, evaluation, [], {"tolerance": 0.0})


def test_a_night_is_published_as_a_version_and_promoted_only_without_regression(gate, tmp_path):
    models = tmp_path / "storage" / "models" / "digits"
    root = gate.models_root({"root": str(tmp_path / "storage")})
    assert gate.read_previous_sweep(root) is None  # the first night starts cold

    first = publish(gate, tmp_path, "scheduled__2026-12-01T02:00:00+00:00", 0.95)
    version = "scheduled__2026-12-01T02-00-00-00-00"
    assert first["version"] == version and first["promotion"]["promote"] is True
    newest = (models / version / "checkpoint" / "model.pt").read_bytes()  # model/ is the evaluation's export
    assert newest == f"{first['run_id']}-20".encode()  # the newest step
    assert json.loads((models / version / "metrics.json").read_text())["test_accuracy"] == 0.95
    assert (models / version / "sweep" / "sweep.png").exists() and (models / version / "report.json").exists()
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == version
    (models / "latest" / "stale-file").write_text("only in the first latest")

    worse = publish(gate, tmp_path, "second", 0.90)
    assert worse["promotion"]["promote"] is False and "regresses" in worse["promotion"]["reason"]
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == version  # unchanged
    assert (models / "second" / "checkpoint" / "model.pt").exists()  # the version is published all the same
    # The next night warm-starts from the newest published sweep, promoted or not.
    assert json.loads((models / "LAST_RUN.json").read_text())["version"] == "second"
    assert gate.read_previous_sweep(root)["report"]["png"].startswith(str(tmp_path / "second"))

    better = publish(gate, tmp_path, "third", 0.97)
    assert better["promotion"]["promote"] is True and better["promotion"]["incumbent"] == 0.95
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == "third"
    assert (models / "latest" / "checkpoint" / "model.pt").read_bytes() == b"third-20"
    assert not (models / "latest" / "stale-file").exists()  # latest is the promoted version, nothing else


def test_nothing_is_published_without_a_complete_checkpoint(gate, tmp_path):
    root = gate.models_root({"root": str(tmp_path / "storage")})
    sweep, train, evaluation = night(tmp_path, "x", 0.9)
    train["checkpoint"] = str(tmp_path / "empty")
    with pytest.raises(ValueError, match="no complete checkpoint under"):
        gate.publish_run(root, "x", sweep, train, evaluation, [], None)
    assert not (tmp_path / "storage" / "models" / "digits" / "LAST_RUN.json").exists()


def test_a_promotion_is_a_model_asset_event_and_a_refusal_none(nightly, gate, tmp_path):
    """``publish`` declares the alias ``PROMOTIONS``; only a promoted version adds a ``MODEL_ASSET`` event to it,
    with the version, where it is, and the comparison (what Airflow then records in ``asset_event``)."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_elastic.serving import publishing

    assert nightly.dag.get_task("publish").outlets == [gate.PROMOTIONS]
    data = str(tmp_path / "storage" / "data" / "digits" / "v")
    first = publish(gate, tmp_path, "first", 0.95)
    events = OutletEventAccessors()
    assert gate.announce(first, events, data=data) is True
    [added] = events[gate.PROMOTIONS].asset_alias_events
    assert (added.source_alias_name, added.dest_asset_key.name) == (gate.PROMOTIONS.name, gate.MODEL_ASSET.name)
    assert added.extra == publishing.model_event_extra(first, data=data)
    assert added.extra["version"] == "first" and added.extra["value"] == 0.95
    assert added.extra["model"] == f"file://{tmp_path}/storage/models/digits/first/model"

    refused = publish(gate, tmp_path, "second", 0.90)
    events = OutletEventAccessors()
    assert gate.announce(refused, events, data=data) is False
    assert events[gate.PROMOTIONS].asset_alias_events == []


def test_the_data_and_served_assets_are_static_outlets_with_the_runs_location(nightly, gate):
    prepare, serve = nightly.dag.get_task("prepare"), nightly.dag.get_task("serve")
    assert prepare.outlets == [gate.DATA_ASSET] and serve.outlets == [nightly.SERVED_ASSET]
    assert gate.MODEL_ASSET.uri == "x-airflow-elastic://nightly_training/models/digits/latest"
    env = nightly.dag.get_template_env()
    context = {"params": {"root": "/srv/night"}, "run_id": "manual__1:2", "var": {"value": {}}}
    rendered = {k: env.from_string(v).render(**context) for k, v in prepare.outlet_extra.items()}
    assert rendered == {"version": "manual__1-2", "uri": "file:///srv/night/data/digits/manual__1-2"}


def test_the_scoring_example_runs_on_the_nightly_model_and_reads_the_event(gate):
    spec = importlib.util.spec_from_file_location("example_batch_scoring", ROOT / "dags" / "example_batch_scoring.py")
    assert spec is not None and spec.loader is not None
    scoring = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scoring)
    assert scoring.MODEL_ASSET == gate.MODEL_ASSET  # name and URI: the same asset
    assert list(scoring.dag.timetable.asset_condition.objects) == [gate.MODEL_ASSET]  # its only schedule
    env = scoring.dag.get_template_env()
    event = type("Event", (), {"extra": {"checkpoints": "file:///c/v/final", "data": "file:///d/v"}})()
    stage = scoring.dag.get_task("score").stage
    rendered = {k: env.from_string(v).render(triggering_asset_events={gate.MODEL_ASSET: [event]}, var={"value": {}})
                for k, v in stage.env.items() if k != "PYTHONUNBUFFERED"}  # fmt: skip
    assert rendered == {"MODEL_URI": "file:///c/v/final", "DATA_URI": "file:///d/v"}


def test_a_candidate_in_the_grey_zone_waits_and_an_approval_promotes_it(gate, tmp_path):
    """tolerance 0, review margin 0.02: 0.94 after 0.95 waits for a person (latest unchanged, no event), whose
    approval promotes it (latest, its report, a model event naming the approver); 0.90 is refused outright."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    models = tmp_path / "storage" / "models" / "digits"
    root = gate.models_root({"root": str(tmp_path / "storage")})
    params = {"tolerance": 0.0, "review_margin": 0.02}

    def night_of(run_id: str, accuracy: float) -> dict:
        sweep, train, evaluation = night(tmp_path, run_id, accuracy)
        return gate.publish_run(root, run_id, sweep, train, evaluation, [], params)

    night_of("first", 0.95)
    refused = night_of("far", 0.90)
    assert not refused["promotion"]["promote"] and not refused["promotion"]["review"]
    with pytest.raises(ValueError, match="only a candidate under review"):
        gate.promote_approved(root, refused, "alice")

    close = night_of("close", 0.94)
    assert close["promotion"]["review"] and not close["promotion"]["promote"]
    assert "waits for approval" in close["promotion"]["reason"]
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == "first"  # until approved
    events = OutletEventAccessors()
    assert gate.announce(close, events, data="/d") is False  # publish emits nothing for it

    approved = gate.promote_approved(root, close, "alice")
    assert approved["promotion"]["promote"] and approved["promotion"]["approved_by"] == "alice"
    assert json.loads((models / "latest" / "LATEST.json").read_text())["version"] == "close"
    assert json.loads((models / "close" / "report.json").read_text())["promotion"]["approved_by"] == "alice"
    assert json.loads((models / "latest" / "report.json").read_text())["promotion"]["approved_by"] == "alice"
    assert gate.announce(approved, events, data="/d") is True
    [added] = events[gate.PROMOTIONS].asset_alias_events
    assert added.extra["approved_by"] == "alice" and added.extra["version"] == "close"


def test_the_approver_sees_the_comparison_and_silence_rejects(nightly, gate):
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    dag = nightly.dag
    approve = dag.get_task("approve")
    assert isinstance(approve, ApprovalOperator) and approve.defaults == ["Reject"]
    assert approve.response_timeout == gate.APPROVAL_TIMEOUT < timedelta(days=1)
    assert dag.get_task("promoted").trigger_rule == "none_failed_min_one_success"  # runs when adopt is skipped
    assert dag.get_task("adopt").outlets == [gate.PROMOTIONS]
    assert dag.params["review_margin"] == gate.REVIEW_MARGIN > 0
    promotion = {"promote": False, "review": True, "reason": "test_accuracy 0.94 regresses: waits for approval",
                 "metric": "test_accuracy", "candidate": 0.94, "incumbent": 0.95}  # fmt: skip
    report = {"version": "v7", "run_id": "r", "promotion": promotion, "test": {"test_accuracy": 0.94},
              "best_params": {}, "training": {"preemptions_survived": 0, "spot_share": 1.0},
              "locations": {"version": "/m/v7"}}  # fmt: skip
    ti = type("TI", (), {"xcom_pull": lambda self, task_ids: report})()
    env = dag.get_template_env()
    assert env.from_string(approve.subject).render(ti=ti) == "Promote digits version v7?"
    body = env.from_string(approve.body).render(ti=ti)
    assert "| test_accuracy | 0.94 | 0.95 | -0.01 |" in body and "waits for approval" in body


def test_serve_follows_the_rule_or_the_approval(nightly):
    promoted = nightly.dag.get_task("promoted").python_callable
    under_review = nightly.dag.get_task("under_review").python_callable
    review = {"promotion": {"promote": False, "review": True}}
    adopted = {"promotion": {"promote": True, "review": True, "approved_by": "alice"}}
    pull = lambda value: type("TI", (), {"xcom_pull": lambda self, task_ids: value})()  # noqa: E731
    assert under_review(review) is True and under_review({"promotion": {"promote": True}}) is False
    assert promoted(review, ti=pull(adopted)) is True  # approved: served
    assert promoted(review, ti=pull(None)) is False  # rejected or timed out: adopt skipped, nothing served
    assert promoted({"promotion": {"promote": True}}, ti=pull(None)) is True  # promoted by the rule
