"""Test DAG: a node-loss cascade (``airflow dags test`` against the local cluster).

A leader on on-demand capacity and one worker on spot train ``scripts/train_peers.py`` in lockstep, with no peer-loss
guard and ``max_failures=0``; the test makes the worker's node vanish once checkpoints reach an observed step. The
leader fails first (exit 1, its peer gone) and the JobSet fails on the leader's Job; the operator must charge that
to the lost node (preemption budget) and resubmit from the checkpoint within try 1. The ``_restart`` variant has
``max_failures=1``: the JobSet restarts the group itself, and that counted restart must be charged to the lost node.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, SuccessPolicy, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["python", str(ROOT / "tests" / "data" / "scripts" / "train_peers.py")]
SPOT = Placement(
    spot=True, tolerations=[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]
)

#: DAG id -> ``max_failures``: 0, the JobSet fails on the leader's Job and the operator resubmits; 1, the JobSet
#: restarts the group in-cluster (counted against ``maxRestarts``) and the operator charges that restart to the
#: preemption budget instead.
DAGS = {"training_group_node_loss": 0, "training_group_node_loss_restart": 1}

for dag_id, max_failures in DAGS.items():
    with DAG(
        dag_id,
        schedule=None,
        catchup=False,
        tags=["test"],
        params={"namespace": Param("default", type="string"), "base": Param("/tmp/ae-node-loss", type="string")},
    ):
        TrainingGroupOperator(
            task_id="cascade",
            group=TrainingGroup(
                name="nl-cascade",
                image="ghcr.io/airflow-elastic/tiny-trainer:0.1.0",  # recorded by the local cluster, never pulled
                roles=[Role("leader", command=TRAIN), Role("worker", command=TRAIN, placement=SPOT)],
                success=SuccessPolicy(roles=("leader",)),
                failure=FailurePolicy(max_failures=max_failures, max_preemptions=2),
                checkpoint=Checkpointing(uri="{{ params.base }}/nl-cascade", keep=2),
                env={"PYTHONPATH": str(ROOT), "TRAIN_STEPS": "12", "STEP_SECONDS": "0.3"},
            ),
            namespace="{{ params.namespace }}",
            kubernetes_conn_id="local_cluster",
            poll_interval=0.3,
            startup_timeout=60,
            retries=0,  # a failure fails at once (before node-loss cascades, the leader's exit failed the task)
        )
