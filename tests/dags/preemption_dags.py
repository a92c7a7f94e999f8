"""Test DAG: the operator's preemption budget and resubmission against the local cluster (``airflow dags test``).

Each task trains ``scripts/train_ckpt.py`` (leader on-demand, one worker on spot) with checkpoints under
``{{ params.base }}/<task>``; the test disrupts the worker's node once a task's checkpoints reach an observed step.

* ``reclaim``: a GKE-style reclaim, absorbed in the cluster (a free restart).
* ``raw_delete``: a Karpenter raw delete past its deadline (``karpenter.sh/do-not-disrupt`` blocks the eviction), which
  no pod condition labels: the JobSet fails (``max_failures=0``) and the operator resubmits from the checkpoint.
* ``exhausted``: ``max_preemptions=0``, so the first reclaim stops the group and fails the task.
* ``diverges``: the worker exits 3 at step 2 on every attempt; one counted restart, then the task fails.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, SuccessPolicy, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["python", str(ROOT / "tests" / "data" / "scripts" / "train_ckpt.py")]
IMAGE = "ghcr.io/airflow-elastic/tiny-trainer:0.1.0"  # recorded by the local cluster, never pulled
SPOT = Placement(
    spot=True, tolerations=[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]
)
PARAMS = {
    "namespace": Param("default", type="string"),
    "conn_id": Param("local_cluster", type="string"),
    "base": Param("/tmp/airflow-elastic-preemption", type="string"),
}
COMMON = {
    "namespace": "{{ params.namespace }}",
    "kubernetes_conn_id": "{{ params.conn_id }}",
    "poll_interval": 0.3,
    "startup_timeout": 60,
    "retries": 0,
}


def group(name: str, *, failure: FailurePolicy, worker_env: dict[str, str] | None = None, **worker) -> TrainingGroup:
    """A leader on on-demand capacity and one worker on spot, checkpointing every step."""
    return TrainingGroup(
        name=name,
        image=IMAGE,
        roles=[
            Role("leader", command=TRAIN),
            Role("worker", command=TRAIN, placement=SPOT, env=worker_env, **worker),
        ],
        success=SuccessPolicy(roles=("leader",)),
        failure=failure,
        checkpoint=Checkpointing(uri="{{ params.base }}/" + name, keep=2),
        env={"PYTHONPATH": str(ROOT), "TRAIN_STEPS": "10", "STEP_SECONDS": "0.3"},
    )


with DAG("training_group_preemption", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    TrainingGroupOperator(task_id="reclaim", group=group("pe-reclaim", failure=FailurePolicy()), **COMMON)
    TrainingGroupOperator(
        task_id="raw_delete",
        group=group(
            "pe-raw",
            failure=FailurePolicy(max_failures=0, max_preemptions=3),
            pod_overrides={"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}},
        ),
        **COMMON,
    )
    TrainingGroupOperator(
        task_id="exhausted", group=group("pe-exhaust", failure=FailurePolicy(max_preemptions=0)), **COMMON
    )
    TrainingGroupOperator(
        task_id="diverges",
        group=group("pe-diverge", failure=FailurePolicy(max_failures=1), worker_env={"FAIL_AT_STEP": "2"}),
        **COMMON,
    )
