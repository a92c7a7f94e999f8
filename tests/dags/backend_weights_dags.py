"""The DAG of ``tests/training/test_backend_weights.py``: one group run as a JobSet, a TrainJob and a PyTorchJob.

Each task runs the same :data:`GROUP` object, unchanged, on its ``backend``: ``dags/scripts/train_torch.py`` (DDP over
gloo, a seeded model and data, one process per pod on the 2 pods of one role) for a few steps, reporting a digest of
the final weights. The trainer's command is plain ``python``: the JobSet contract gives it
``MASTER_ADDR``/``RANK``/``WORLD_SIZE``, the training-operator sets them on a PyTorchJob's pods (pod 0 the Master,
pod 1 its Worker), and a TrainJob runs it under ``torchrun --no-python``, which reads the Trainer's ``PET_*``.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import Checkpointing, Resources, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

DAG_ID = "backend_weights"
SCRIPT = Path(__file__).resolve().parents[2] / "dags" / "scripts" / "train_torch.py"
STEPS = 6
RESOURCES = Resources(cpu="500m", memory="1Gi")
NODE = Role("node", replicas=2, resources=RESOURCES, command=("python", str(SCRIPT)))
GROUP = TrainingGroup(
    name="weights",
    image="ghcr.io/airflow-elastic/torch-trainer:0.1.0",  # recorded by the local cluster; the command runs
    roles=[NODE],
    checkpoint=Checkpointing(uri="{{ params.root }}/{{ task.task_id }}"),
    env={"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0", "CHECKPOINT_EVERY": "3", "PYTHONUNBUFFERED": "1"},
    coordinator_port=29500,  # the Trainer's fixed rendezvous port
)
BACKENDS = ("jobset", "trainjob", "pytorchjob")

with DAG(
    DAG_ID,
    schedule=None,
    catchup=False,
    params={"namespace": Param("default", type="string"), "root": Param("/nonexistent", type="string")},
    tags=["test"],
):
    for backend in BACKENDS:
        TrainingGroupOperator(
            task_id=backend,
            group=GROUP,
            backend=backend,
            namespace="{{ params.namespace }}",
            kubernetes_conn_id="local_cluster",
            poll_interval=0.5,
            startup_timeout=120,
            retries=0,
        )
