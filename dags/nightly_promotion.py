"""The nightly pipeline's promotion gate: publish a version, promote it by the rule or after a person's approval,
and say whether it was promoted. No DAG here: :func:`promotion_gate` adds the gate's tasks to the DAG being defined,
``nightly_training``'s (``dags/nightly_training.py``) and the real-deployment test's, which feeds it evaluations as
the run's input (``tests/dags/promotion_gate_dag.py``). Kept beside the DAG file, which imports it as
``nightly_promotion`` (Airflow puts the DAGs folder on ``sys.path``; copy both files to deploy the pipeline)::

    publish ────────────────────────────────────────> promoted
       └─> under_review ──> approve ──> adopt ─────────┘

* ``publish``: the run's version under ``<root>/models/digits/<version>/`` (checkpoint, metrics, sweep report, run
  report), promoted to ``latest/`` if its test accuracy does not regress by more than the ``tolerance`` param
  (:func:`airflow_elastic.serving.publishing.decide`); a promotion is an event of ``MODEL_ASSET``.
* ``under_review``, ``approve``, ``adopt``: a candidate worse by at most ``review_margin`` more (the param, default
  ``REVIEW_MARGIN``) waits for a person's answer (Airflow's ``ApprovalOperator``, showing the comparison); Approve:
  ``adopt`` promotes it (a ``MODEL_ASSET`` event naming the approver); Reject, or no answer within
  ``APPROVAL_TIMEOUT``: nothing is promoted. Worse still: refused, nobody is asked.
* ``promoted``: short-circuits what follows (the flagship's ``serve``) unless the version was promoted.

A DAG calling :func:`promotion_gate` declares the params ``root``, ``tolerance`` and ``review_margin`` and has
``FILTERS`` among its ``user_defined_filters``.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Asset, AssetAlias, task

from airflow_elastic.operators.links import RunReportLink
from airflow_elastic.serving import publishing

#: A setting a run leaves empty falls back to the Airflow Variable ``nightly_training_<param>``, then to its default.
VARIABLE_PREFIX = "nightly_training_"
DEFAULT_ROOT = "/tmp/airflow-elastic/nightly"
ROOT_VARIABLE = f"{VARIABLE_PREFIX}root"
#: The cluster: the connection `airflow-elastic cluster up` prints (on a real cluster, one naming it).
CONN_ID = "local_cluster"
#: The pipeline's Assets: static logical URIs (``x-airflow-elastic://nightly_training/<path under the root>``), as
#: the root is only known when a run starts; each event's extra ``uri`` says where the run wrote. A contract:
#: docs/concepts/assets.md. The gate reads the data split's (``publish``'s inlet) and emits the model's.
PIPELINE = "nightly_training"
DATA_ASSET = Asset(name=f"{PIPELINE}.digits.data", uri=publishing.asset_uri(PIPELINE, "data/digits"))
MODEL_ASSET = Asset(name=f"{PIPELINE}.digits.model", uri=publishing.asset_uri(PIPELINE, "models/digits/latest"))
#: ``publish``'s and ``adopt``'s outlet: an alias, so that a run emits a ``MODEL_ASSET`` event only when it promotes
#: (a task emits an event for each plain ``Asset`` outlet whenever it succeeds).
PROMOTIONS = AssetAlias(f"{PIPELINE}.digits.promotions")
#: What the promotion rule compares: the evaluation's test accuracy, higher is better.
PROMOTION_METRIC = "test_accuracy"
#: The grey zone beyond the ``tolerance`` param: a candidate whose test accuracy is worse by at most this more waits
#: for a person's approval (``approve``); further: refused. The ``review_margin`` param overrides it (0: no review).
REVIEW_MARGIN = 0.02
#: How long a candidate under review waits for an answer; then ``approve`` takes its default, Reject: ``latest``
#: stays as it is and nothing is served. Shorter than a day, so the next night's run is not held up.
APPROVAL_TIMEOUT = timedelta(hours=12)
#: The Jinja filters the gate's templates use (``approve``'s body).
FILTERS = {"review_text": publishing.review_text}


def promotion_gate(sweep: Any, train: Any, evaluation: Any) -> Any:
    """Add ``publish``, ``under_review``, ``approve``, ``adopt`` and ``promoted`` to the DAG being defined.

    Args:
        sweep: the sweep's result (``HyperparameterSweepOperator``'s XCom, or a template giving it).
        train: the final training's result (``TrainingGroupOperator``'s): its ``checkpoint`` directory is published.
        evaluation: the evaluation stage's result: ``{"metrics": {"test_accuracy": ..., ...}}``.

    Returns:
        ``promoted``'s output: set what runs only for a promoted version downstream of it.
    """
    report = publish(sweep, train, evaluation)
    report.operator.operator_extra_links = (RunReportLink(),)  # the run report as a button on the task in the UI
    # A person sees the comparison and approves or rejects; no answer within APPROVAL_TIMEOUT: Reject. Rejecting
    # skips ``adopt``. The run waits meanwhile (max_active_runs=1: the next night queues behind it).
    approve = ApprovalOperator(
        task_id="approve",
        subject="Promote digits version {{ ti.xcom_pull(task_ids='publish')['version'] }}?",
        body="{{ ti.xcom_pull(task_ids='publish') | review_text }}",
        defaults="Reject",
        response_timeout=APPROVAL_TIMEOUT,
    )
    adopted = adopt(report, approve.output)
    under_review(report) >> approve
    gate = promoted(report)
    adopted >> gate
    return gate


@task(outlets=[PROMOTIONS], inlets=[DATA_ASSET])
def publish(
    sweep: dict[str, Any],
    train: dict[str, Any],
    evaluation: dict[str, Any],
    params: dict[str, Any] | None = None,
    run_id: str | None = None,
    outlet_events: Any = None,
) -> dict[str, Any]:
    """Write this run's version, promote it if the test metric does not regress, return the run report; a
    promotion is a ``MODEL_ASSET`` event."""
    evidence = training_evidence(train)
    metrics = {k: v for k, v in evaluation["metrics"].items() if not k.startswith("smoke_")}
    root = models_root(params or {})
    report = publish_run(root, str(run_id), sweep, train, metrics, evidence, params)
    announce(report, outlet_events, data=str(root.parent.parent / "data" / "digits" / report["version"]))
    return report


@task.short_circuit(ignore_downstream_trigger_rules=False)
def under_review(report: dict[str, Any]) -> bool:
    """Ask for approval only for a candidate in the grey zone; else skip ``approve`` (and so ``adopt``)."""
    return bool(report["promotion"].get("review"))


@task(outlets=[PROMOTIONS])
def adopt(
    report: dict[str, Any],
    approval: dict[str, Any],
    params: dict[str, Any] | None = None,
    outlet_events: Any = None,
) -> dict[str, Any]:
    """Promote the approved candidate to ``latest`` (a ``MODEL_ASSET`` event), return the run report."""
    user = approval.get("responded_by_user") or {}
    approver = str(user.get("name") or user.get("id") or "an approver")
    root = models_root(params or {})
    approved = promote_approved(root, report, approver)
    announce(approved, outlet_events, data=str(root.parent.parent / "data" / "digits" / report["version"]))
    return approved


@task.short_circuit(trigger_rule="none_failed_min_one_success")
def promoted(report: dict[str, Any], ti: Any = None) -> bool:
    """Roll out only a promoted version (by the rule, or approved); else skip ``serve``."""
    approved = ti.xcom_pull(task_ids="adopt") if ti is not None else None
    return bool((approved or report)["promotion"]["promote"])


# ------------------------------------------------------------------------------------------------ publishing I/O


def models_root(params: dict[str, Any]) -> Any:
    """``<root>/models/digits`` as an ``ObjectStoragePath``."""
    from airflow.sdk import ObjectStoragePath, Variable

    root = params.get("root") or Variable.get(ROOT_VARIABLE, default=DEFAULT_ROOT)
    return ObjectStoragePath(str(root).rstrip("/")) / "models" / "digits"


def read_json(path: Any) -> Any:
    import json

    return json.loads(path.read_text()) if path.exists() else None


def write_json(path: Any, value: Any) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))


def copy_tree(source: Any, target: Any) -> None:
    """Every file under ``source`` to the same relative path under ``target`` (any two storages)."""
    for item in source.rglob("*"):
        if item.is_file():
            destination = target / str(item.relative_to(source))
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(item.read_bytes())


def training_evidence(train: dict[str, Any]) -> list[dict[str, Any]]:
    """The stopped pods the final training's wait classified and saved on its JobSet (kept after it finished):
    the evidence of reclaims an elastic role absorbed, which no restart count shows."""
    import logging

    from airflow_elastic.hooks.errors import KubernetesApiError
    from airflow_elastic.hooks.jobset import JobSetHook
    from airflow_elastic.preemption import saved

    try:
        jobset = JobSetHook(CONN_ID).get_jobset(train["namespace"], train["name"])
    except KubernetesApiError as error:
        logging.getLogger("airflow.task").warning("no disruption evidence from JobSet %s: %s", train["name"], error)
        return []
    evidence = saved.restore(jobset)
    return list(evidence.records) if evidence is not None else []


def promote(root: Any, version: str, run_id: str) -> None:
    """Copy the version to ``latest/``: readers trust it only with its marker, which goes first and comes back last."""
    latest = root / publishing.LATEST
    if latest.exists():
        (latest / publishing.LATEST_MARKER).unlink(missing_ok=True)
        latest.rmdir(recursive=True)
    copy_tree(root / version, latest)
    write_json(latest / publishing.LATEST_MARKER, {"version": version, "run_id": run_id})


def promote_approved(root: Any, report: dict[str, Any], approver: str) -> dict[str, Any]:
    """The candidate under review, approved by ``approver``: its report says so, and it becomes ``latest``.

    Raises:
        ValueError: the report's version was not under review (only an approval of one promotes).
    """
    promotion = publishing.Promotion.from_json(report["promotion"]).approved(approver)
    approved = {**report, "promotion": promotion.to_json()}
    write_json(root / report["version"] / "report.json", approved)
    promote(root, report["version"], report["run_id"])
    logging.getLogger("airflow.task").info("promotion: %s", promotion.reason)
    return approved


def announce(report: dict[str, Any], outlet_events: Any, *, data: str) -> bool:
    """Emit a ``MODEL_ASSET`` event through ``PROMOTIONS`` if ``report``'s version was promoted (its extra:
    :func:`~airflow_elastic.serving.publishing.model_event_extra`); a refused version emits nothing."""
    if not report["promotion"]["promote"]:
        return False
    outlet_events[PROMOTIONS].add(MODEL_ASSET, extra=publishing.model_event_extra(report, data=data))
    return True


def read_previous_sweep(root: Any) -> dict[str, Any] | None:
    last = read_json(root / publishing.LAST_RUN)
    return read_json(root / last["version"] / "sweep.json") if last else None


def publish_run(
    root: Any,
    run_id: str,
    sweep: dict[str, Any],
    train: dict[str, Any],
    evaluation: dict[str, Any],
    evidence: list[dict[str, Any]],
    params: dict[str, Any] | None,
) -> dict[str, Any]:
    """Write the version ``run_id`` under ``root``, promote it to ``latest`` unless its test metric regresses,
    point ``LAST_RUN.json`` at it, and return the run report."""
    import logging

    from airflow.sdk import ObjectStoragePath

    from airflow_elastic.contract import checkpoints

    log = logging.getLogger("airflow.task")
    version = publishing.version_name(run_id)
    target = root / version
    step = checkpoints.latest_complete(None, train["checkpoint"])  # the final training's last complete checkpoint
    if step is None:
        raise ValueError(f"no complete checkpoint under {train['checkpoint']}: nothing to publish")
    copy_tree(ObjectStoragePath(step.path), target / "checkpoint")  # model/ holds the served TorchScript
    for path in (sweep.get("report") or {}).values():
        if path:
            (target / "sweep").mkdir(parents=True, exist_ok=True)
            source = ObjectStoragePath(path)
            (target / "sweep" / source.name).write_bytes(source.read_bytes())
    write_json(target / "metrics.json", evaluation)
    write_json(target / "sweep.json", sweep)
    latest = root / publishing.LATEST
    promotion = publishing.decide(
        evaluation,
        read_json(latest / "metrics.json"),
        metric=PROMOTION_METRIC,
        mode="max",
        tolerance=float((params or {}).get("tolerance") or 0.0),
        review_margin=float((params or {}).get("review_margin") or 0.0),
    )
    plot = (sweep.get("report") or {}).get("png")
    locations = {
        "version": str(target),
        "model": str(target / "model"),
        "checkpoint": str(target / "checkpoint"),
        "plot": str(target / "sweep" / ObjectStoragePath(plot).name) if plot else "-",
        "report": str(target / "report.json"),
        "checkpoints": str(train["checkpoint"]),
        "latest": str(latest),
    }
    report = publishing.run_report(
        evidence=evidence,
        run_id=run_id,
        version=version,
        sweep=sweep,
        train=train,
        evaluation=evaluation,
        promotion=promotion,
        objective="val_loss",
        locations=locations,
    )
    write_json(target / "report.json", report)
    if promotion.promote:
        promote(root, version, run_id)
    write_json(root / publishing.LAST_RUN, {"version": version, "run_id": run_id})
    for line in publishing.report_lines(report):
        log.info("%s", line)
    return report
