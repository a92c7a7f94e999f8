"""What ``airflow dags test`` cannot show, with real Airflow processes (``tests/support/processes.py``): an
api-server, a scheduler with the LocalExecutor, a dag-processor and a triggerer on a SQLite DB, running
``dags/real_processes_dag.py`` against the session's local cluster.

One DAG run, two disturbances at once:

* the triggerer is restarted (SIGTERM, then a new one) while ``train_deferred`` waits in it: the new triggerer
  takes the trigger over and the task succeeds with its group's result, which was created once and never
  deleted (a restart is not a kill: the trigger's ``on_kill`` must not run);
* the worker running ``train_sync`` (sync mode, ``retries=1``) is SIGKILLed after it created its group: no
  ``on_kill`` runs, the scheduler notices the missing heartbeats and retries the task, and try 2 adopts the
  running group (``task_state_store`` and the group's labels) instead of creating a second one.

Both groups wait for a release file before training, so they are still running when the test needs them to.
Proof comes from three places: task instances, XComs and ``task_state_store`` in Airflow's DB; the task logs;
and the local cluster's server-side request log (exactly one JobSet create per task instance, no delete).
"""

from __future__ import annotations

import json
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators.identity import STATE_KEY
from tests.dags import real_processes_dag as dag_module
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, kubernetes_connection
from tests.support.processes import AirflowDeployment, deployment_environment, free_port, query
from tests.support.training_group_helpers import JOBSET_RESOURCE, jobsets, xcom

DAG_ID = dag_module.DAG_ID
RUN_ID = "real_processes_run"
DEFERRED, SYNC = "train_deferred", "train_sync"
STEPS = 3
#: What ``identity.submit`` logs once a try has its group: adopted, or created.
SUBMITTED = re.compile(r"Adopted the running JobSet|Created JobSet")


@pytest.fixture
def second_namespace(api_client) -> Iterator[str]:
    """Another fresh namespace (``train_sync``'s), so the request log tells the two tasks' creates apart."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = f"af-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def deployment(airflow_home: Path, airflow_db: Path, local_cluster: LocalCluster, namespace: str):
    """Airflow's four components, running ``real_processes_dag.py`` alone from a DAGs folder of its own."""
    dags = airflow_home / "dags"
    dags.mkdir()
    (dags / "real_processes_dag.py").symlink_to(Path(dag_module.__file__).resolve())
    connection = kubernetes_connection(local_cluster.kubeconfig, namespace)
    base = airflow_environment(airflow_home, airflow_db, connections={CLUSTER_CONN_ID: connection})
    env = deployment_environment(base, dags_folder=dags, api_port=free_port())
    with AirflowDeployment(airflow_home, env, airflow_db) as airflow:
        airflow.start_all()
        yield airflow
    assert not airflow.leftovers, f"processes outlived their Airflow component: {airflow.leftovers}"


def test_triggerer_restart_and_worker_kill(
    deployment: AirflowDeployment, local_cluster: LocalCluster, api_client, namespace, second_namespace, tmp_path
):
    airflow = deployment
    namespaces = {DEFERRED: namespace, SYNC: second_namespace}
    release = tmp_path / "release"
    release.mkdir()
    mark = local_cluster.request_count()
    airflow.trigger(
        DAG_ID,
        RUN_ID,
        {
            "deferred_namespace": namespace,
            "sync_namespace": second_namespace,
            "release_dir": str(release),
            "steps": STEPS,
        },
    )

    def ti(task_id: str) -> dict:
        return airflow.task_instance(DAG_ID, RUN_ID, task_id)

    def task_log(task_id: str, try_number: int) -> str:
        return airflow.task_log(DAG_ID, RUN_ID, task_id, try_number)

    def log_of(task_id: str, try_number: int = 1):
        return lambda: f"----- {task_id} attempt {try_number} -----\n{task_log(task_id, try_number)[-6000:]}"

    def created(task_id: str) -> list[dict]:
        return local_cluster.requests(
            since=mark, verb="create", resource=JOBSET_RESOURCE, namespace=namespaces[task_id]
        )

    def trigger_log(triggerer_job: int) -> str:
        return airflow.trigger_log(DAG_ID, RUN_ID, DEFERRED, 1, triggerer_job)

    # Both groups are submitted and waiting for their release: one in the triggerer, one on its worker. The
    # trigger is really running once it has copied the leader's first line into the task log.
    old_triggerer = airflow.wait_until(
        lambda: ti(DEFERRED).get("state") == "deferred" and _trigger_holder(airflow),
        120,
        f"{DEFERRED} to be deferred and its trigger assigned to a triggerer",
        extra=log_of(DEFERRED),
    )
    airflow.wait_until(
        lambda: "waiting for" in trigger_log(old_triggerer),
        60,
        f"the trigger of {DEFERRED} to copy its leader's log in triggerer job {old_triggerer}",
        extra=lambda: trigger_log(old_triggerer),
    )
    sync_ti = airflow.wait_until(
        lambda: (t := ti(SYNC)).get("state") == "running" and "Created JobSet" in task_log(SYNC, 1) and t,
        120,
        f"{SYNC} to run with its JobSet created",
        extra=log_of(SYNC),
    )

    # A worker lost with its machine: SIGKILL, so neither on_kill nor a final state report happens.
    killed = airflow.kill_worker(sync_ti["id"])
    assert len(killed) == 2, f"expected the LocalExecutor worker and its task process: {killed}"
    # A triggerer restarted mid-wait (a deploy): the old one stops cleanly, a new one takes the trigger over.
    airflow.restart("triggerer", signal.SIGTERM)
    new_triggerer = airflow.wait_until(
        lambda: (job := _trigger_holder(airflow)) not in (None, old_triggerer) and job,
        60,
        f"a new triggerer to take over {DEFERRED}'s trigger (the old one ran as job {old_triggerer})",
    )
    airflow.wait_until(
        lambda: "starting" in trigger_log(new_triggerer),
        60,
        f"the trigger of {DEFERRED} to start in triggerer job {new_triggerer}",
    )
    assert ti(DEFERRED)["state"] == "deferred", log_of(DEFERRED)()
    (release / DEFERRED).touch()

    # The scheduler notices the dead worker (no heartbeat), and the retry finds the group that try 1 created.
    airflow.wait_until(
        lambda: ti(SYNC).get("try_number") == 2 and SUBMITTED.search(task_log(SYNC, 2)),
        120,
        f"{SYNC} to be retried after its worker {sorted(killed)} was killed, and to submit or adopt",
        extra=log_of(SYNC, 2),
    )
    (release / SYNC).touch()

    def finished() -> dict[str, str] | None:
        states = {task_id: ti(task_id).get("state") for task_id in namespaces}
        return states if all(s in ("success", "failed", "upstream_failed") for s in states.values()) else None

    states = airflow.wait_until(
        finished, 120, "both tasks to finish", extra=lambda: log_of(SYNC, 2)() + log_of(DEFERRED)()
    )
    context = f"{log_of(SYNC, 2)()}\n{log_of(DEFERRED)()}\n{airflow.logs()}"
    assert states == {DEFERRED: "success", SYNC: "success"}, context
    assert (ti(DEFERRED)["try_number"], ti(SYNC)["try_number"]) == (1, 2), context
    assert "Adopted the running JobSet" in task_log(SYNC, 2), log_of(SYNC, 2)()
    # The new triggerer saw the group through to its end.
    assert "final metrics" in trigger_log(new_triggerer), trigger_log(new_triggerer)
    # ... and its lines reached the worker's part of the task log too, which the next wait of the try on the same
    # triggerer could not overwrite (the triggerer reopens its file for writing at every trigger start).
    worker = task_log(DEFERRED, 1)
    archived = worker[worker.find("Output shown while the task was deferred") :]
    assert "Output shown while the task was deferred" in worker and "final metrics" in archived, log_of(DEFERRED)()

    for task_id, namespace_of_task in namespaces.items():
        # One POST per task instance, answered 201, and no DELETE: neither disturbance cost a group.
        creates = created(task_id)
        assert [r["code"] for r in creates] == [201], (task_id, creates)
        deletes = local_cluster.requests(
            since=mark, verb="delete", resource=JOBSET_RESOURCE, namespace=namespace_of_task
        )
        assert deletes == [], (task_id, deletes)
        [(name, jobset)] = jobsets(api_client, namespace_of_task).items()
        assert jobset["metadata"]["labels"]["airflow-elastic.io/try"] == "1"  # created by try 1, adopted by try 2

        result = xcom(airflow.db, DAG_ID, task_id)
        assert result["name"] == name and result["uid"] == jobset["metadata"]["uid"], result
        assert result["state"] == "Succeeded" and result["namespace"] == namespace_of_task, result
        assert result["metrics"]["steps"] == STEPS and result["metrics"]["world_size"] == 2, result
        assert xcom(airflow.db, DAG_ID, task_id, "jobset_name") == name

        record = _state_record(airflow, task_id)
        assert (record["name"], record["uid"], record["namespace"]) == (name, result["uid"], namespace_of_task), record


def _trigger_holder(airflow: AirflowDeployment) -> int | None:
    """The id of the running triggerer job that holds ``train_deferred``'s trigger (``None``: nobody, yet)."""
    rows = query(
        airflow.db,
        "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
        "JOIN job j ON j.id = t.triggerer_id WHERE ti.dag_id = ? AND ti.run_id = ? AND ti.task_id = ? "
        "AND j.state = 'running'",
        DAG_ID,
        RUN_ID,
        DEFERRED,
    )
    return rows[0][0] if rows else None


def _state_record(airflow: AirflowDeployment, task_id: str) -> dict:
    """The operator's ``task_state_store`` record of the task instance."""
    rows = query(
        airflow.db,
        "SELECT value FROM task_state_store WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = ?",
        DAG_ID,
        RUN_ID,
        task_id,
        STATE_KEY,
    )
    assert rows, f"no task_state_store record {STATE_KEY!r} for {task_id}"
    value = json.loads(rows[0][0])
    return json.loads(value) if isinstance(value, str) else value
