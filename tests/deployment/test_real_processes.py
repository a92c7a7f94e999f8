"""What ``airflow dags test`` cannot show, with real Airflow processes (``tests/support/processes.py``): an
api-server, a scheduler with the LocalExecutor, a dag-processor and a triggerer on a SQLite DB, against the session's
local cluster, with Airflow's metrics sent to a StatsD listener on localhost. One deployment for the module, running
two DAG files from a DAGs folder of its own.

**Disturbances** (``tests/dags/real_processes_dag.py``): one DAG run, three disturbances at once:

* the triggerer is restarted (SIGTERM, then a new one) while ``train_deferred`` waits in it: the new triggerer
  takes the trigger over and the task succeeds with its group's result, which was created once and never
  deleted (a restart is not a kill: the trigger's ``on_kill`` must not run);
* then the spot node of ``train_deferred``'s worker is reclaimed (the local cluster's GKE-style fault injection)
  while the new trigger watches: the JobSet restarts in place, the reclaim is absorbed, and the worker that resumes
  the task sends its metrics (docs/concepts/metrics.md): ``training.finished``, ``preemptions_absorbed`` and
  ``restarts`` of 1 with their ``dag_id``, ``task_id`` and ``outcome`` tags, and no ``preemptions_resubmitted``;
* the worker running ``train_sync`` (sync mode, ``retries=1``) is SIGKILLed after it created its group: no
  ``on_kill`` runs, the scheduler notices the missing heartbeats and retries the task, and try 2 adopts the
  running group (``task_state_store`` and the group's labels) instead of creating a second one; its verdict's
  metrics are sent once, by try 2.

Both groups wait for a release file before training, so they are still running when the test needs them to.
Proof comes from three places: task instances, XComs and ``task_state_store`` in Airflow's DB; the task logs;
and the local cluster's server-side request log (exactly one JobSet create per task instance, no delete).

**The promotion gate** (``tests/dags/promotion_gate_dag.py``): see :func:`test_promotion_gate_assets_and_approvals`.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators.identity import STATE_KEY
from tests.dags import real_processes_dag as dag_module
from tests.support.airflow_env import CLUSTER_CONN_ID, airflow_environment, kubernetes_connection
from tests.support.paths import DAGS, ROOT, load_dag_file
from tests.support.processes import AirflowDeployment, deployment_environment, free_port, query
from tests.support.raynodes import ray_namespace
from tests.support.statsd import Received, StatsdListener
from tests.support.training_group_helpers import JOBSET_RESOURCE, jobsets, pods_of, pods_watched, xcom

DAG_ID = dag_module.DAG_ID
#: The promotion test's DAGs, not imported here: they import ``nightly_promotion`` from the DAGs folder.
GATE_DAG_FILE = ROOT / "tests" / "dags" / "promotion_gate_dag.py"
RAY_DAG_FILE = ROOT / "tests" / "dags" / "ray_dags.py"
RAY_DAG = "ray_job_outcomes"
GATE, CONSUMER = "promotion_gate", "promotion_consumer"
RUN_ID = "real_processes_run"
DEFERRED, SYNC = "train_deferred", "train_sync"
STEPS = 3
#: The TrainingGroupOperator's metrics as StatsD receives them (Airflow's ``statsd_prefix``, then the package's).
TRAINING_METRICS = "airflow.airflow_elastic.training."
ROLE_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
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


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdListener]:
    """Where every component and worker of the deployment sends Airflow's metrics."""
    with StatsdListener() as listener:
        yield listener


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, migrated_airflow_db: Path, local_cluster: LocalCluster, statsd
) -> Iterator[AirflowDeployment]:
    """Airflow's four components, running ``real_processes_dag.py``, ``promotion_gate_dag.py`` (beside the
    flagship's ``nightly_promotion.py``, which it imports) and ``ray_dags.py`` from a DAGs folder of their own;
    metrics to ``statsd``."""
    home = tmp_path_factory.mktemp("airflow-home")
    db = Path(shutil.copyfile(migrated_airflow_db, home / "airflow.db"))
    dags = home / "dags"
    dags.mkdir()
    for source in (Path(dag_module.__file__), GATE_DAG_FILE, RAY_DAG_FILE, DAGS / "nightly_promotion.py"):
        (dags / source.name).symlink_to(source.resolve())
    connection = kubernetes_connection(local_cluster.kubeconfig, "default")  # each task names its namespace
    base = airflow_environment(home, db, connections={CLUSTER_CONN_ID: connection})
    env = deployment_environment(base, dags_folder=dags, api_port=free_port()) | statsd.environment()
    with AirflowDeployment(home, env, db) as airflow:
        airflow.start_all()
        yield airflow
    assert not airflow.leftovers, f"processes outlived their Airflow component: {airflow.leftovers}"


def test_triggerer_restart_reclaim_and_worker_kill(
    deployment: AirflowDeployment,
    statsd: StatsdListener,
    local_cluster: LocalCluster,
    api_client,
    namespace,
    second_namespace,
    tmp_path,
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
    restart_mark = local_cluster.request_count()
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
    # A spot reclaim while the new trigger watches the group's pods: the JobSet restarts in place, then trains.
    reclaimed = _reclaim_worker_node(airflow, local_cluster, api_client, namespace, restart_mark)
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

    # The reclaim was absorbed in the cluster: one free restart caused by the spot reclaim, no resubmission.
    deferred = xcom(airflow.db, DAG_ID, DEFERRED)
    assert (deferred["restarts"], deferred["preemptions"], deferred["failures"]) == (1, 1, 0), (reclaimed, deferred)
    assert [a["restart_causes"] for a in deferred["attempts"]] == [{"0": "spot_reclaim"}], (reclaimed, deferred)
    # ... and each verdict's metrics reached StatsD once, tagged, from the worker that finished the task: the resumed
    # deferred task and the sync task's second try (its killed first try had no verdict).
    sent = airflow.wait_until(
        lambda: (got := _training_metrics(statsd.received(TRAINING_METRICS))).keys() == namespaces.keys() and got,
        30,
        "the training metrics of both tasks at the StatsD listener",
        extra=lambda: "\n".join(statsd.lines[-50:]),
    )
    assert sent[DEFERRED]["finished"] == ("c", 1, "succeeded"), sent
    assert sent[DEFERRED]["preemptions_absorbed"] == ("c", 1, "succeeded") == sent[DEFERRED]["restarts"], sent
    assert "preemptions_resubmitted" not in sent[DEFERRED] and sent[DEFERRED]["goodput"][1] == 1.0, sent
    assert sent[DEFERRED]["spot_share"][:1] == ("g",) and 0 < sent[DEFERRED]["spot_share"][1] < 1, sent
    assert sent[SYNC]["finished"] == ("c", 1, "succeeded"), sent
    assert not {"preemptions_absorbed", "preemptions_resubmitted", "restarts"} & sent[SYNC].keys(), sent

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


def _reclaim_worker_node(
    airflow: AirflowDeployment, cluster: LocalCluster, api_client: Any, namespace: str, since: int
) -> str:
    """Reclaim (GKE style) the spot node of ``train_deferred``'s worker once a trigger listed the group's pods after
    request mark ``since`` (so the stopped pod reaches its evidence), and wait until its JobSet restarted; returns
    what was done, for messages."""
    airflow.wait_until(
        lambda: pods_watched(cluster, since, namespace), 60, f"a new trigger to watch the pods of {DEFERRED}'s group"
    )
    [name] = jobsets(api_client, namespace)
    [worker] = [
        pod
        for pod in pods_of(api_client, namespace, name)
        if pod.metadata.labels.get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
        and pod.status.phase == "Running"
    ]
    node = worker.spec.node_name
    cluster.preempt_node(node, style="gke", grace_seconds=1, delete_after=1, replace_after=0.5)
    airflow.wait_until(
        lambda: (jobsets(api_client, namespace)[name].get("status") or {}).get("restarts", 0) >= 1,
        60,
        f"JobSet {name} to restart after the reclaim of {node}",
    )
    return f"reclaimed {node} (worker {worker.metadata.name} of {name})"


def _training_metrics(received: list[Received]) -> dict[str, dict[str, tuple[str, float, str | None]]]:
    """task -> metric (without the prefix) -> (type, value, outcome tag), for this DAG; every metric sent once."""
    found: dict[str, dict[str, tuple[str, float, str | None]]] = {}
    for r in received:
        assert r.tags["dag_id"] == DAG_ID, r
        metric = r.name.removeprefix(TRAINING_METRICS)
        task = found.setdefault(r.tags["task_id"], {})
        assert metric not in task, (r, task)
        task[metric] = (r.type, r.value, r.tags.get("outcome"))
    return found


def _trigger_holder(
    airflow: AirflowDeployment, dag_id: str = DAG_ID, run_id: str = RUN_ID, task_id: str = DEFERRED
) -> int | None:
    """The id of the running triggerer job that holds a task's trigger (default ``train_deferred``'s; ``None``:
    nobody, yet)."""
    rows = query(
        airflow.db,
        "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
        "JOIN job j ON j.id = t.triggerer_id WHERE ti.dag_id = ? AND ti.run_id = ? AND ti.task_id = ? "
        "AND j.state = 'running'",
        dag_id,
        run_id,
        task_id,
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


# -------------------------------------------------------------------------------------------- the promotion gate

#: The test accuracy of the model each run's ``latest/`` holds before the run.
INCUMBENT = 0.95
#: run id -> (the candidate's test accuracy, the answer given through the REST API). Tolerance 0, review margin 0.02.
CANDIDATES: dict[str, tuple[float, str | None]] = {
    "gate_promote": (0.96, None),  # no regression: promoted by the rule
    "gate_refuse": (0.90, None),  # 0.05 worse, beyond the review margin: refused, nobody is asked
    "gate_approve": (0.94, "Approve"),  # 0.01 worse: waits for a person, who approves
    "gate_reject": (0.94, "Reject"),  # the same, rejected
}
#: The state of each gate task per outcome (``approve`` and ``adopt`` are skipped without a review).
GATE_STATES = {
    "gate_promote": {"publish": "success", "under_review": "success", "approve": "skipped", "adopt": "skipped",
                     "promoted": "success", "serve": "success"},
    "gate_refuse": {"publish": "success", "under_review": "success", "approve": "skipped", "adopt": "skipped",
                    "promoted": "success", "serve": "skipped"},
    "gate_approve": {"publish": "success", "under_review": "success", "approve": "success", "adopt": "success",
                     "promoted": "success", "serve": "success"},
    "gate_reject": {"publish": "success", "under_review": "success", "approve": "success", "adopt": "skipped",
                    "promoted": "success", "serve": "skipped"},
}  # fmt: skip


def test_promotion_gate_assets_and_approvals(deployment: AirflowDeployment, namespace: str, tmp_path: Path):
    """The flagship's promotion gate (``nightly_promotion.promotion_gate``: the very tasks ``nightly_training``
    runs) under Airflow's own components. **Evaluation is an input here**: each run's conf gives the candidate's
    test metrics and a checkpoint, and its own storage root, whose ``latest/`` holds an incumbent (0.95) published
    by the gate's own ``publish_run``; ``tests/deployment/test_nightly_deployment.py`` covers the training and
    evaluation that produce them for real. Four runs of one DAG, at once:

    * promoted by the rule: one model Asset event (from ``publish``), and ``promotion_consumer`` (scheduled on the
      model Asset, as ``example_batch_scoring`` is) runs on it;
    * refused beyond the review margin: no event, so no consumer run, and nobody is asked;
    * in the grey zone, answered **Approve** through the REST API (``PATCH .../hitlDetails``, after reading the
      comparison the approver sees): ``adopt`` promotes it, one event (from ``adopt``, naming the approver), a
      consumer run;
    * in the grey zone, answered **Reject**: not promoted, no event, ``latest/`` unchanged.
    """
    airflow = deployment
    gate = load_dag_file("nightly_promotion", "nightly_promotion_in_test")
    checkpoint = _checkpoint(tmp_path / "checkpoint")
    for run_id, (accuracy, _) in CANDIDATES.items():
        root = tmp_path / run_id
        incumbent = {"name": "incumbent", "namespace": namespace, "checkpoint": checkpoint}
        models = gate.models_root({"root": str(root)})
        gate.publish_run(models, "incumbent", {}, incumbent, {"test_accuracy": INCUMBENT}, [], {})  # the first: latest
        train = {"name": f"digits-final-{run_id}", "namespace": namespace, "checkpoint": checkpoint}
        evaluation = {"metrics": {"test_accuracy": accuracy, "test_loss": 0.2}}
        conf = {"root": str(root), "sweep": {"best_params": {"lr": 0.01}}, "train": train, "evaluation": evaluation}
        airflow.trigger(GATE, run_id, conf)

    def ti(run_id: str, task_id: str) -> dict:
        return airflow.task_instance(GATE, run_id, task_id)

    # The two grey-zone candidates wait for a person: the comparison is what the approver reads; the API answers.
    answered = {}
    for run_id, (_, answer) in CANDIDATES.items():
        if answer is None:
            continue
        airflow.wait_until(
            lambda run_id=run_id: (
                ti(run_id, "approve").get("state") == "awaiting_input" and airflow.parked(GATE, run_id, "approve")
            ),
            120,
            f"{run_id}: approve to await input, its parking reported to the scheduler",
            extra=lambda: airflow.task_states(GATE),
        )
        path = f"/dags/{GATE}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails"
        detail = airflow.api("GET", path)
        assert detail["subject"] == f"Promote digits version {run_id}?" and detail["defaults"] == ["Reject"], detail
        assert "| test_accuracy | 0.94 | 0.95 | -0.01 |" in detail["body"], detail["body"]
        answered[run_id] = airflow.api("PATCH", path, {"chosen_options": [answer]})
        assert answered[run_id]["chosen_options"] == [answer], answered[run_id]

    airflow.wait_until(
        lambda: {state for _, state in _runs(airflow, GATE)} == {"success"} and len(_runs(airflow, GATE)) == 4,
        120,
        "the four gate runs to succeed",
        extra=lambda: airflow.task_states(GATE),
    )
    states = {run_id: {task: ti(run_id, task)["state"] for task in GATE_STATES[run_id]} for run_id in CANDIDATES}
    assert states == GATE_STATES, airflow.task_states(GATE)
    for run_id, (_, answer) in CANDIDATES.items():
        latest = json.loads((tmp_path / run_id / "models" / "digits" / "latest" / "LATEST.json").read_text())
        promoted = answer == "Approve" or run_id == "gate_promote"
        assert latest["version"] == (run_id if promoted else "incumbent"), (run_id, latest)

    # One model event per promotion, from the task that promoted, with the version and who approved it.
    events = query(
        airflow.db,
        "SELECT e.id, e.source_run_id, e.source_task_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id"
        " WHERE a.name = ? AND a.uri = ?",
        gate.MODEL_ASSET.name,
        gate.MODEL_ASSET.uri,
    )
    assert sorted((run, task) for _, run, task, _ in events) == [("gate_approve", "adopt"), ("gate_promote", "publish")]
    extras = {run: json.loads(extra) for _, run, _, extra in events}
    approver = answered["gate_approve"]["responded_by"]["name"]
    assert extras["gate_approve"]["approved_by"] == approver and extras["gate_promote"]["approved_by"] is None, extras
    assert {run: extra["version"] for run, extra in extras.items()} == {"gate_promote": "gate_promote",
                                                                       "gate_approve": "gate_approve"}  # fmt: skip

    # The asset-scheduled DAG ran on those two events and no other (refused and rejected candidates emit none).
    consumed = airflow.wait_until(
        lambda: (
            (got := _consumed_events(airflow)) and len(got) == 2 and all(s == "success" for s in got.values()) and got
        ),
        60,
        f"{CONSUMER} to run on both promotions",
        extra=lambda: f"{_runs(airflow, CONSUMER)} {_consumed_events(airflow)}",
    )
    assert set(consumed) == {event_id for event_id, *_ in events}, (consumed, events)
    assert all(state == "success" for _, state in _runs(airflow, CONSUMER)), _runs(airflow, CONSUMER)


def _checkpoint(directory: Path) -> str:
    """A complete checkpoint step under ``directory`` (what the final training leaves); returns the directory."""
    step = Path(checkpoints.step_dir(str(directory), 1))
    step.mkdir(parents=True)
    (step / "model.pt").write_bytes(b"weights")
    (step / checkpoints.MARKER).write_bytes(checkpoints.marker_bytes(1, 1))
    return str(directory)


def _runs(airflow: AirflowDeployment, dag_id: str) -> list[tuple[str, str]]:
    return query(airflow.db, "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY run_id", dag_id)


def _consumed_events(airflow: AirflowDeployment) -> dict[int, str]:
    """The asset events that started a run of the consumer DAG, with that run's state."""
    rows = query(
        airflow.db,
        "SELECT x.event_id, r.state FROM dagrun_asset_event x JOIN dag_run r ON r.id = x.dag_run_id WHERE r.dag_id = ?",
        CONSUMER,
    )
    return dict(rows)


@pytest.fixture
def ray_ns(core: Any) -> Iterator[str]:
    """A fresh namespace for Ray pods (skips without ``.venv-ray``)."""
    yield from ray_namespace(core, "af-ray")


# The waits below end (with every component's log tail and the tasks' logs) before pytest-timeout would, which says
# nothing: a CI run once timed out at 300 s on the finish wait, where the file alone takes two minutes.
@pytest.mark.timeout(720)
def test_ray_jobs_under_the_real_scheduler_and_a_restarted_triggerer(
    deployment: AirflowDeployment, local_cluster: LocalCluster, core: Any, ray_ns: str
):
    """``tests/dags/ray_dags.py`` under Airflow's own components: three RayJobs at once on the local cluster's KubeRay
    (real Ray 2.60 heads), the triggerer restarted while the deferred one waits. The new triggerer takes its
    trigger over; each task instance created exactly one RayJob; the results and KubeRay's failure are as under
    ``airflow dags test`` (``tests/ray/test_rayjob_dags.py``)."""
    airflow, run_id, namespace = deployment, "ray_run", ray_ns
    mark = local_cluster.request_count()
    airflow.trigger(RAY_DAG, run_id, {"namespace": namespace})

    def ti(task_id: str) -> dict:
        return airflow.task_instance(RAY_DAG, run_id, task_id)

    def log_of(task_id: str) -> Callable[[], str]:
        return lambda: f"----- {task_id} -----\n{airflow.task_log(RAY_DAG, run_id, task_id, 1)[-6000:]}"

    old = airflow.wait_until(
        lambda: ti("succeeds").get("state") == "deferred" and _trigger_holder(airflow, RAY_DAG, run_id, "succeeds"),
        180,
        "the RayJob of succeeds to be awaited by a triggerer",
        extra=log_of("succeeds"),
    )
    airflow.restart("triggerer", signal.SIGTERM)
    airflow.wait_until(
        lambda: (job := _trigger_holder(airflow, RAY_DAG, run_id, "succeeds")) not in (None, old) and job,
        60,
        f"a new triggerer to take the RayJob's trigger over (the old one ran as job {old})",
    )

    tasks = ("succeeds", "succeeds_sync", "fails")

    def finished() -> dict[str, str] | None:
        states = {t: ti(t).get("state") for t in tasks}
        return states if all(s in ("success", "failed", "upstream_failed") for s in states.values()) else None

    def all_logs() -> str:
        pods = core.list_namespaced_pod(namespace).items
        listing = "\n".join(f"{p.metadata.name} {p.status.phase} node={p.spec.node_name}" for p in pods)
        return "\n".join([f"----- pods in {namespace} -----\n{listing}", *(log_of(t)() for t in tasks)])

    states = airflow.wait_until(finished, 400, "the three RayJob tasks to finish", extra=all_logs)
    assert states == {"succeeds": "success", "succeeds_sync": "success", "fails": "failed"}, log_of("fails")()
    for task_id in ("succeeds", "succeeds_sync"):
        value = xcom(airflow.db, RAY_DAG, task_id)
        assert value["job_status"] == "SUCCEEDED" and value["reported"] == {"answer": 42, "task": task_id}, value
    assert "reason=AppFailed" in airflow.task_log(RAY_DAG, run_id, "fails", 1), log_of("fails")()
    creates = local_cluster.requests(since=mark, verb="create", resource="rayjobs.ray.io", namespace=namespace)
    assert len([r for r in creates if r["code"] == 201]) == 3, creates
