"""Example: train a small real model with its workers on spot capacity, surviving preemptions in one Airflow try.

A leader on on-demand capacity and two workers on spot nodes train a linear regression data-parallel
(``dags/scripts/train_model.py``): checkpoints every ``checkpoint_every`` steps, an emergency checkpoint when a
pod is stopped or a peer is lost, resume from the latest complete checkpoint. Reclaims the cluster labels restart
the group in place (free, up to ``max_preemptions``); a group that fails because of a disruption Kubernetes does
not label (a Karpenter raw delete) is resubmitted by the operator from the latest complete checkpoint, within the
same Airflow try. The task returns every attempt with its preemptions and their causes, and the trainer's final
metrics (step, loss, each resume with the steps it lost).

Run it against the local cluster, whose spot pool carries the generic spot labels and taints::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml   # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_preemptible_training
    airflow-elastic cluster preempt <a worker's node> --style gke     # meanwhile: a spot reclaim

The trainer image's entrypoint runs ``dags/scripts/train_model.py``; the local cluster records images instead of
pulling them, and ``dags/image-map.yaml`` (run from the repository root) maps the examples' images to their scripts.
From Python: ``ClusterConfig(image_map={PREEMPTIBLE_TRAINER_IMAGE: ["python", "/abs/dags/scripts/train_model.py"]})``.

On a real cluster build that image (the script plus ``pip install --no-deps airflow-elastic``), change the
connection, and give a checkpoint location every pod can reach, e.g. ``--conf '{"checkpoint_root":
"gs://bucket/ckpt"}'`` (with the fsspec backend in the image); on GKE/EKS/AKS set ``spot_platform`` on the
placement. Each DAG run checkpoints under ``<checkpoint_root>/<run id>``, so Airflow retries and clears resume it.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_elastic import (
    Checkpointing,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    RunOptions,
    SuccessPolicy,
    TrainingGroup,
    WaitSettings,
)
from airflow_elastic.operators import TrainingGroupOperator

#: The trainer image: its entrypoint runs ``dags/scripts/train_model.py`` (an image map on the local cluster).
PREEMPTIBLE_TRAINER_IMAGE = "ghcr.io/airflow-elastic/preemptible-trainer:0.1.0"

RESOURCES = Resources(cpu="500m", memory="256Mi")
#: The generic spot pool (selector ``airflow-elastic.io/capacity-type=spot``, toleration ``airflow-elastic.io/spot``),
#: which is what the local cluster's spot nodes carry; on GKE/EKS/AKS/Karpenter set ``spot_platform`` instead.
SPOT = Placement(spot=True)

# [START howto_spot_group]
spot_regression = TrainingGroup(
    name="spot-regression",
    image=PREEMPTIBLE_TRAINER_IMAGE,
    roles=[
        Role("leader", resources=RESOURCES),  # on-demand: it holds the model and writes the checkpoints
        Role("worker", replicas=2, resources=RESOURCES, placement=SPOT),  # workers on spot
    ],
    success=SuccessPolicy(roles=("leader",)),
    failure=FailurePolicy(max_failures=1, max_preemptions=5),
    checkpoint=Checkpointing(uri="{{ params.checkpoint_root }}/{{ run_id }}", keep=3),
    env={
        "TRAIN_STEPS": "{{ params.steps }}",
        "STEP_SECONDS": "{{ params.step_seconds }}",
        "CHECKPOINT_EVERY": "{{ params.checkpoint_every }}",
        "PYTHONUNBUFFERED": "1",
    },
)
# [END howto_spot_group]

with DAG(
    "example_preemptible_training",
    schedule=None,
    catchup=False,
    params={
        "steps": Param(60, type="integer", minimum=1, description="target step count"),
        "step_seconds": Param(0.2, type="number", minimum=0, description="extra time per step (simulated compute)"),
        "checkpoint_every": Param(5, type="integer", minimum=5, description="steps between periodic checkpoints"),
        "checkpoint_root": Param(
            "/tmp/airflow-elastic/checkpoints/spot-regression",
            type="string",
            description="checkpoints of a run go to <checkpoint_root>/<run id> (a path or URI every pod reaches)",
        ),
    },
    tags=["example", "airflow-elastic"],
):
    TrainingGroupOperator(
        task_id="train",
        group=spot_regression,
        options=RunOptions(
            kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
            wait=WaitSettings(poll_interval=1, startup_timeout=120),
        ),
    )
