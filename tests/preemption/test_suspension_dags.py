"""Kueue-style suspension end to end (``dags/suspension_dags.py``): ``airflow dags test`` against the local cluster,
the test suspending each task's JobSet once its checkpoints reach step 2 (an observed step, not a timer).

A suspension shorter than ``suspend_timeout`` is waited through: the resumed group trains on from its checkpoint
and the task succeeds in one attempt. One longer than it makes the trigger report ``suspend_timeout``: the operator
deletes the group and fails the task without an Airflow retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.training_group_helpers import JOBSETS, jobsets, pods_of, xcom
from tests.support.waiting import wait_for

DAG_ID = "training_group_suspension"


def _jobset_at_step(api_client: Any, namespace: str, base: Path, prefix: str, step: int) -> Callable[[], str | None]:
    """A probe: the name of the ``<prefix>-*`` JobSet once its checkpoints reach ``step``."""

    def probe() -> str | None:
        latest = checkpoints.latest_complete(None, str(base / prefix))
        if latest is None or latest.step < step:
            return None
        return next((name for name in jobsets(api_client, namespace) if name.startswith(f"{prefix}-")), None)

    return probe


def _suspended_without_pods(api_client: Any, namespace: str, name: str) -> Callable[[], bool]:
    """A probe: the JobSet reports ``Suspended`` and none of its pods still runs."""

    def probe() -> bool:
        conditions = (jobsets(api_client, namespace).get(name) or {}).get("status", {}).get("conditions") or []
        suspended = any(c["type"] == "Suspended" and c["status"] == "True" for c in conditions)
        running = [p for p in pods_of(api_client, namespace, name) if p.status.phase in ("Pending", "Running")]
        return suspended and not running

    return probe


def test_suspension_is_waited_through_until_suspend_timeout(
    cluster_airflow_env, airflow_db, namespace, api_client, local_cluster: LocalCluster, tmp_path: Path
):
    from kubernetes import client

    base = tmp_path / "ckpt"
    log: list[str] = []
    seen: dict[str, Any] = {}

    def inject() -> None:
        pending = {"su-waits", "su-gives-up"}
        while pending:  # `airflow dags test` runs the tasks one after another, in an order of its choosing
            for prefix in sorted(pending):
                name = _jobset_at_step(api_client, namespace, base, prefix, 2)()
                if name is None:
                    continue
                local_cluster.suspend_jobset(namespace, name)
                log.append(f"suspended {name}")
                seen[prefix] = name
                pending.discard(prefix)
                if prefix == "su-waits":
                    wait_for(
                        _suspended_without_pods(api_client, namespace, name),
                        90,
                        what=lambda name=name: f"{name} suspended, its pods gone; so far: {log}",
                    )
                    patch = {"spec": {"suspend": False}}
                    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                        *JOBSETS[:2], namespace, JOBSETS[2], name, patch
                    )
                    log.append(f"resumed {name}")
            time.sleep(0.1)

    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(dags_test, DAG_ID, cluster_airflow_env, {"namespace": namespace, "base": str(base)})
        try:
            inject()
        finally:
            out = run.result().stdout
    assert task_states(airflow_db, DAG_ID) == {"waits": "success", "gives_up": "failed"}, (log, tail(out, 200))

    # Suspended for a while, then resumed: the same group (no resubmission) trained on from its checkpoint.
    waits = xcom(airflow_db, DAG_ID, "waits")
    assert waits["name"] == seen["su-waits"] and waits["restarts"] == 0, waits
    assert waits["metrics"]["step"] == 6 and waits["metrics"]["resumed_from"] >= 2, waits["metrics"]
    assert [a["outcome"] for a in waits["attempts"]] == ["succeeded"], waits["attempts"]

    # Suspended past suspend_timeout=2: the trigger gave up, the operator deleted the group and failed the task.
    name = seen["su-gives-up"]
    assert xcom(airflow_db, DAG_ID, "gives_up", "jobset_name") == name
    assert f"JobSet {namespace}/{name} stayed suspended (" in out and "for more than 2 s" in out, tail(out)
    assert "the group was deleted (suspend_timeout)" in out, tail(out)
    left = jobsets(api_client, namespace)
    assert name not in left or left[name]["metadata"].get("deletionTimestamp"), left.get(name)
    latest = checkpoints.latest_complete(None, str(base / "su-gives-up"))
    assert latest is not None and latest.step < 200, latest  # it never finished training
