"""The operator's preemption layer under ``airflow dags test`` against the local cluster
(``dags/preemption_dags.py``): absorbed in-cluster reclaims, resubmission from the latest checkpoint after a
disruption Kubernetes does not label, budget exhaustion, and a genuine failure past ``max_failures``.

``airflow dags test`` runs the four tasks one after another; while it runs, the test watches each task's checkpoint
directory and disrupts the worker's node once that task's checkpoints reach step 2 (an observed step, not a timer).
Airflow's metrics go to a StatsD listener on localhost, where the test reads what each verdict sent
(``airflow_elastic.training.*``, docs/concepts/metrics.md).
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.statsd import Received, StatsdListener
from tests.support.training_group_helpers import jobsets, pods_of, xcom

DAG_ID = "training_group_preemption"
#: task -> (checkpoint directory name, preemption style and options)
DISRUPTIONS = {
    "reclaim": ("pe-reclaim", {"style": "gke", "grace_seconds": 1, "delete_after": 1, "replace_after": 0.5}),
    "raw_delete": ("pe-raw", {"style": "karpenter", "deadline_seconds": 0.5, "replace_after": 0.5}),
    "exhausted": ("pe-exhaust", {"style": "gke", "grace_seconds": 1, "delete_after": 1, "replace_after": 0.5}),
}


def _try_number(db: Path, task_id: str) -> int:
    import sqlite3

    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (value,) = connection.execute(
            "SELECT try_number FROM task_instance WHERE dag_id = ? AND task_id = ?", (DAG_ID, task_id)
        ).fetchone()
    finally:
        connection.close()
    return int(value)


def _disrupt_at_step(
    cluster: LocalCluster, api_client, namespace: str, base: Path, done: threading.Event, log: list[str]
) -> dict[str, int]:
    """Reclaim the worker's node of each task once, when its checkpoints reach step 2; returns the checkpoint step
    each task had reached then."""
    steps: dict[str, int] = {}
    pending = dict(DISRUPTIONS)
    while pending and not done.is_set():
        for task_id, (name, options) in list(pending.items()):
            latest = checkpoints.latest_complete(None, str(base / name))
            if latest is None or latest.step < 2:
                continue
            found = [js for js in jobsets(api_client, namespace) if js.startswith(f"{name}-")]
            workers = [
                p
                for js in found
                for p in pods_of(api_client, namespace, js)
                if p.metadata.labels.get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
                and p.status.phase == "Running"
            ]
            if not workers:
                continue
            node = workers[0].spec.node_name
            cluster.preempt_node(node, **options)
            log.append(f"{task_id}: {options['style']} reclaim of {node} at step {latest.step}")
            steps[task_id] = latest.step
            del pending[task_id]
        time.sleep(0.2)
    return steps


def test_preemption_budget_and_resubmission(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    base = tmp_path / "ckpt"
    done, injected, steps = threading.Event(), [], {}
    with StatsdListener() as statsd, ThreadPoolExecutor(1) as pool:
        env = {**cluster_airflow_env, **statsd.environment()}  # and the metrics each verdict sends (5)
        run = pool.submit(dags_test, DAG_ID, env, {"namespace": namespace, "base": str(base)})
        try:
            steps = _disrupt_at_step(local_cluster, api_client, namespace, base, done, injected)
        finally:
            result = run.result()
            done.set()
    out = result.stdout
    states = task_states(airflow_db, DAG_ID)
    assert states == {"reclaim": "success", "raw_delete": "success", "exhausted": "failed", "diverges": "failed"}, (
        injected,
        tail(out, 200),
    )
    assert len(injected) == 3, injected

    # (1) A GKE-style reclaim is absorbed in the cluster: one free restart, no resubmission, same try.
    reclaim = xcom(airflow_db, DAG_ID, "reclaim")
    assert (reclaim["restarts"], reclaim["failures"], reclaim["preemptions"]) == (1, 0, 1), reclaim
    [attempt] = reclaim["attempts"]
    assert attempt["restart_causes"] == {"0": "spot_reclaim"}, attempt
    assert _try_number(airflow_db, "reclaim") == 1

    # (2) A raw delete nobody labels fails the JobSet; the operator resubmits from the latest checkpoint.
    raw = xcom(airflow_db, DAG_ID, "raw_delete")
    first, second = raw["attempts"]
    assert first["outcome"] == "resubmit" and first["cause"] == "spot_reclaim", first
    assert second["outcome"] == "succeeded" and first["uid"] != second["uid"] == raw["uid"]
    # The new group resumed from the latest complete checkpoint, at least the one seen when the node was deleted.
    resumed = raw["metrics"]["resumed_from"]
    assert resumed >= steps["raw_delete"], (raw["metrics"], steps)
    assert raw["metrics"]["resume_env"] == str(base / "pe-raw" / f"step-{resumed:09d}"), raw["metrics"]
    assert raw["preemptions"] == 1, raw
    # The step the first group reached is known only from a stopped pod's last report: the raw-deleted worker leaves
    # no final status, and the leader's may be gone with the failed JobSet's Jobs before the trigger reads it (a race
    # the operator cannot always win). Where it was read, the lost steps are exactly the ones past the checkpoint; the
    # trainer checkpoints a step before it reports it, so a stop between the two leaves a report one step behind the
    # checkpoint: nothing lost.
    reached = first["reached_step"]
    assert first["lost_steps"] == (None if reached is None else max(reached - resumed, 0)), first
    assert raw["lost_steps"] == first["lost_steps"], raw
    assert _try_number(airflow_db, "raw_delete") == 1
    assert "resubmitting a fresh group from the latest checkpoint" in out

    # (3) max_preemptions=0: the reclaim is absorbed in the cluster (one free restart), and the trigger, counting the
    # free restarts of the still-running group, stops it: no JobSet failure, no resubmission.
    name = xcom(airflow_db, DAG_ID, "exhausted", "jobset_name")
    assert "preemption budget exhausted" in out and "on-demand capacity" in out, tail(out)
    stopped = re.compile(
        rf"attempt 1: JobSet {name} \(uid [^)]+\) preemption_budget_exhausted, cause [^,]+, 1 preemption\(s\), "
        r"0 failure\(s\), in-cluster restart causes \{'0': 'spot_reclaim'\}"
    )
    assert stopped.search(out), tail(out)
    left = jobsets(api_client, namespace)
    assert name not in left or left[name]["metadata"].get("deletionTimestamp"), name

    # (4) A genuine failure beyond max_failures fails the task (an Airflow retry would apply).
    diverged = xcom(airflow_db, DAG_ID, "diverges", "jobset_name")
    assert f"JobSet {namespace}/{diverged} failed" in out and "user_error" in out, tail(out)

    # (5) Each verdict's metrics, read from a StatsD listener on localhost as Airflow's Stats sent them (tags in the
    # name): the reclaim absorbed, the raw delete resubmitted, the spent budget stopped, the divergence failed.
    sent = _metrics(statsd.received("airflow.airflow_elastic.training."))
    assert {task: got["finished"] for task, got in sent.items()} == {
        "reclaim": ("c", 1, "succeeded"),
        "raw_delete": ("c", 1, "succeeded"),
        "exhausted": ("c", 1, "stopped"),
        "diverges": ("c", 1, "failed"),
    }, sent
    assert sent["reclaim"]["preemptions_absorbed"] == ("c", 1, "succeeded") == sent["reclaim"]["restarts"], sent
    assert "preemptions_resubmitted" not in sent["reclaim"] and sent["reclaim"]["goodput"][1] == 1.0, sent
    assert sent["raw_delete"]["preemptions_resubmitted"] == ("c", 1, "succeeded"), sent
    assert 0 < sent["raw_delete"]["goodput"][1] < 1, sent  # the work past the checkpoint, the gap to the next group
    assert sent["exhausted"]["preemptions_absorbed"] == ("c", 1, "stopped"), sent
    logged = re.search(rf"attempt 1: JobSet {diverged} \(uid [^)]+\) failed, .*?, (\d+) failure\(s\)", out)
    assert logged and sent["diverges"]["failures"] == ("c", int(logged.group(1)), "failed"), (sent, tail(out))
    for task in ("reclaim", "raw_delete"):
        value = xcom(airflow_db, DAG_ID, task)
        assert sent[task]["gpu_hours"] == ("g", value["gpu_hours"], "succeeded"), (sent, value)
        elapsed = value["attempts"][-1]["ended"] - value["attempts"][0]["started"]
        assert elapsed * 1000 <= sent[task]["time_to_verdict"][1] < (elapsed + 30) * 1000, (sent, value)


def _metrics(received: list[Received]) -> dict[str, dict[str, tuple[str, float, str | None]]]:
    """task -> metric (without the prefix) -> (type, value, outcome tag); every metric sent once per task."""
    found: dict[str, dict[str, tuple[str, float, str | None]]] = {}
    for r in received:
        assert r.tags["dag_id"] == DAG_ID, r
        metric = r.name.removeprefix("airflow.airflow_elastic.training.")
        task = found.setdefault(r.tags["task_id"], {})
        assert metric not in task, (r, task)
        task[metric] = (r.type, r.value, r.tags.get("outcome"))
    return found
