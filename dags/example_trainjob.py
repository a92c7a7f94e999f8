"""Example: the PyTorch DDP example as a Kubeflow Trainer TrainJob on the ``torch-distributed`` runtime, on spot nodes.

The same trainer as ``example_torch_ddp`` (``dags/scripts/train_torch.py``: a small MLP, DDP over gloo, checkpoints
through ``airflow_elastic.runtime``), as one homogeneous role of 2 nodes, which is what the Trainer runs: the operator
renders a ``TrainJob`` (``backend="trainjob"``) whose ``trainer`` gives the image, the command, the environment
contract and ``numNodes: 2``; placement and labels travel in a ``runtimePatches`` entry, and the runtime itself is
never edited. The Trainer's JobSet (same name) runs both nodes in one Indexed Job and sets only torchrun's variables
(``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ...), so the command is a bare ``torchrun``: static
rendezvous at node 0's pod, port 29500.

When a node is reclaimed, the other one's next all-reduce fails; ``runtime.peer_loss`` saves the last completed step
and, since no group restart comes under the Trainer (a lost pod is recreated alone), exits at once: its container
restarts in place and rejoins the replacement pod from that checkpoint. No step is lost and the task succeeds in try 1.

Run it against the local cluster (from the repository root; ``cluster up`` installs the ``torch-distributed``
runtime), then reclaim the node of pod ``...-node-0-1`` meanwhile::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml   # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_trainjob --conf '{"script": "'$PWD'/dags/scripts/train_torch.py"}'
    airflow-elastic cluster preempt <the node> --style gke

On a real cluster: Kubeflow Trainer v2.3 with its default runtimes, the torch trainer image of ``example_torch_ddp``
(``script``'s default is its path there) and a checkpoint location both nodes reach (``checkpoint_root``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.sdk import DAG

from airflow_elastic import Checkpointing, FailurePolicy, Role, RunOptions, TrainingGroup, WaitSettings
from airflow_elastic.operators import TrainingGroupOperator

# The trainer image, its settings and params of example_torch_ddp (the DAGs folder is on sys.path under Airflow).
if (here := str(Path(__file__).resolve().parent)) not in sys.path:
    sys.path.append(here)
from torch_example import ENV, RESOURCES, SPOT, TORCH_TRAINER_IMAGE, torch_params

#: The Trainer's rendezvous port (``PET_MASTER_PORT``); the group's coordinator port must say the same.
TRAINER_PORT = 29500

GROUP = TrainingGroup(
    name="torch-trainjob",
    image=TORCH_TRAINER_IMAGE,
    roles=[
        Role(
            "node",
            replicas=2,
            resources=RESOURCES,
            placement=SPOT,
            command=("torchrun", "{{ params.script }}"),  # torchrun reads the Trainer's PET_* variables itself
        )
    ],
    failure=FailurePolicy(max_failures=1, max_preemptions=5),
    checkpoint=Checkpointing(uri="{{ params.checkpoint_root }}/{{ run_id }}", keep=3),
    env=ENV,
    coordinator_port=TRAINER_PORT,
)

with DAG(
    "example_trainjob",
    schedule=None,
    catchup=False,
    params=torch_params(GROUP.name),
    tags=["example", "airflow-elastic", "pytorch", "kubeflow"],
):
    # [START howto_training_group_operator_trainjob]
    TrainingGroupOperator(
        task_id="train",
        group=GROUP,
        backend="trainjob",
        runtime="torch-distributed",  # the Trainer's default ClusterTrainingRuntime
        options=RunOptions(
            kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
            wait=WaitSettings(poll_interval=1, startup_timeout=180),
        ),
    )
    # [END howto_training_group_operator_trainjob]
