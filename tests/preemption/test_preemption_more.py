"""More of the operator's preemption layer under ``airflow dags test`` (``dags/preemption_more_dags.py``), each
disruption injected at a step the test observes in the task's checkpoint directory:

1. the preemption budget spent by resubmissions: two Karpenter raw deletes nothing labels, with
   ``FailurePolicy(max_failures=0, max_preemptions=1)``; the first is resubmitted from the checkpoint (a second uid),
   the second exhausts the budget: the task fails in try 1 and the group is deleted;
2. a genuine failure after a complete checkpoint (``max_failures=0``) fails try 1; Airflow's retry (try 2), with a
   fresh attempt history, passes ``AE_RESUME_FROM`` = the latest complete checkpoint and trains from it to the
   target step.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.training_group_helpers import jobsets, pods_of, xcom
from tests.support.waiting import wait_for

BUDGET_DAG = "training_group_preemption_budget"
RETRY_DAG = "training_group_failure_retry"
ROLE_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RAW_DELETE = {"style": "karpenter", "deadline_seconds": 0.5, "replace_after": 0.5}


def _try_number(db: Path, dag_id: str, task_id: str) -> int:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (value,) = connection.execute(
            "SELECT try_number FROM task_instance WHERE dag_id = ? AND task_id = ?", (dag_id, task_id)
        ).fetchone()
    finally:
        connection.close()
    return int(value)


def _checkpoint_at_least(directory: Path, step: int) -> Callable[[], int | None]:
    """A probe for :func:`wait_for`: the newest complete checkpoint's step, once it is ``step`` or more."""

    def probe() -> int | None:
        latest = checkpoints.latest_complete(None, str(directory))
        return latest.step if latest is not None and latest.step >= step else None

    return probe


def _running_worker(api_client: Any, namespace: str, prefix: str, skip: frozenset[str] = frozenset()) -> Any:
    """A probe for :func:`wait_for`: ``(jobset, pod)`` of a running worker of a JobSet named ``<prefix>-*`` that is
    not in ``skip``."""
    return lambda: _find_worker(api_client, namespace, prefix, skip)


def _find_worker(api_client: Any, namespace: str, prefix: str, skip: frozenset[str]) -> tuple[str, Any] | None:
    for name in jobsets(api_client, namespace):
        if not name.startswith(f"{prefix}-") or name in skip:
            continue
        for pod in pods_of(api_client, namespace, name):
            running = pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
            if running and pod.metadata.labels.get(ROLE_LABEL) == "worker":
                return name, pod
    return None


def _run(dag_id: str, env: dict[str, str], conf: dict[str, Any], inject: Callable[[], None]) -> str:
    """``airflow dags test dag_id`` while ``inject`` disrupts it; returns its output."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(dags_test, dag_id, env, conf)
        try:
            inject()
        finally:
            out = future.result().stdout
    return out


def test_preemption_budget_spent_by_resubmission(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    base = tmp_path / "ckpt"
    directory = base / "pm-budget"
    injected: list[str] = []
    seen: dict[str, Any] = {}

    def raw_delete(skip: frozenset[str], at_least: int) -> str:
        step = wait_for(
            _checkpoint_at_least(directory, at_least),
            90,
            what=lambda: f"checkpoint step {at_least}; so far: {injected}",
        )
        name, pod = wait_for(  # the resubmitted group's pods start on loaded cores
            _running_worker(api_client, namespace, "pm-budget", skip),
            180,
            what=lambda: f"a running worker; so far: {injected}",
        )
        local_cluster.preempt_node(pod.spec.node_name, **RAW_DELETE)
        injected.append(f"raw delete of {pod.spec.node_name} ({name}) at checkpoint step {step}")
        seen.setdefault("steps", []).append(step)
        return name

    def inject() -> None:
        first = raw_delete(frozenset(), 2)
        seen["first"] = first
        # The resubmitted group (another JobSet) trains two steps past the step the first one was stopped at.
        seen["second"] = raw_delete(frozenset({first}), seen["steps"][0] + 2)

    out = _run(BUDGET_DAG, cluster_airflow_env, {"namespace": namespace, "base": str(base)}, inject)
    assert task_states(airflow_db, BUDGET_DAG) == {"budget": "failed"}, (injected, tail(out, 200))
    assert len(injected) == 2 and seen["first"] != seen["second"], injected
    assert _try_number(airflow_db, BUDGET_DAG, "budget") == 1, tail(out)

    # The first raw delete was resubmitted from the checkpoint, the second spent the budget.
    assert "resubmitting a fresh group from the latest checkpoint" in out, tail(out)
    assert "1 of max_preemptions=1 used" in out, tail(out)
    assert f"JobSet {seen['second']} resumes from checkpoint step" in out, tail(out)
    assert "preemption budget exhausted: 2 preemption(s), max_preemptions=1" in out, tail(out)
    assert "on-demand capacity" in out, tail(out)
    # Two JobSets with different uids, and the last one is deleted with the task.
    assert xcom(airflow_db, BUDGET_DAG, "budget", "jobset_name") == seen["second"]
    left = jobsets(api_client, namespace)
    assert seen["second"] not in left or left[seen["second"]]["metadata"].get("deletionTimestamp"), left.keys()
    assert xcom(airflow_db, BUDGET_DAG, "budget") is None  # failed: no result
    # The task log's account of the attempts: the two JobSets, with two uids.
    logged = dict(re.findall(r"attempt \d+: JobSet (pm-budget-\w+) \(uid ([^)]+)\)", out))
    assert set(logged) == {seen["first"], seen["second"]} and len(set(logged.values())) == 2, logged


def test_genuine_failure_is_retried_from_the_checkpoint(
    cluster_airflow_env, airflow_db, namespace, api_client, tmp_path: Path
):
    base = tmp_path / "ckpt"
    directory = base / "pm-retry"
    marker = base / "fail-now"
    injected: list[str] = []

    def inject() -> None:
        step = wait_for(_checkpoint_at_least(directory, 2), 90, what=lambda: f"checkpoint step 2; so far: {injected}")
        name, _ = wait_for(
            _running_worker(api_client, namespace, "pm-retry"), 90, what=lambda: f"a running worker; so far: {injected}"
        )
        marker.touch()  # the worker exits 3 and removes it: a genuine failure, once
        injected.append(f"failure of {name}'s worker at checkpoint step {step}")

    out = _run(RETRY_DAG, cluster_airflow_env, {"namespace": namespace, "base": str(base)}, inject)
    assert task_states(airflow_db, RETRY_DAG) == {"retried": "success"}, (injected, tail(out, 200))
    assert not marker.exists(), injected
    assert _try_number(airflow_db, RETRY_DAG, "retried") == 2, tail(out)
    assert "user_error" in out, tail(out)

    result = xcom(airflow_db, RETRY_DAG, "retried")
    metrics = result["metrics"]
    assert metrics["step"] == 10, (metrics, tail(out))
    # Try 2's pods were given the latest complete checkpoint and started from it.
    resumed = metrics["resumed_from"]
    assert resumed >= 2 and metrics["resume_env"], metrics
    assert Path(metrics["resume_env"]).name == f"step-{resumed:09d}", metrics
    assert f"resumes from checkpoint step {resumed}" in out, tail(out)
    # Try 1 ended with its verdict, so try 2 started a fresh attempt history (its budgets from zero).
    [attempt] = result["attempts"]
    assert attempt["outcome"] == "succeeded" and attempt["uid"] == result["uid"], result["attempts"]
    assert result["preemptions"] == 0, result
    assert re.search(r"attempt 1: JobSet pm-retry-\w+ \(uid [^)]+\) failed, cause user_error", out), tail(out)
    # Each try ran its own JobSet (kept after it finished), labelled with its try number.
    tries = {
        js["metadata"]["labels"]["airflow-elastic.io/try"]: name for name, js in jobsets(api_client, namespace).items()
    }
    assert set(tries) == {"1", "2"} and tries["2"] == result["name"], tries
