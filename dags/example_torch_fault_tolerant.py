"""Example: fault-tolerant DDP with torchft: three replica groups of one pod on spot, the lighthouse on on-demand.

The trainer (``dags/scripts/train_torchft.py``) is a plain torchft DDP loop on synthetic data. The group runs it as
three replica groups under one torchft lighthouse (``FaultTolerance(3)``): when a spot reclaim takes one replica
group's node, the other two train on (the lighthouse drops it from the quorum after ``heartbeat_timeout_ms``), its
Job replaces the pod, and the replacement heals from a live peer. The durable checkpoint (one pod of the quorum
writes it) is only for the case torchft cannot absorb: every replica group lost at once.

Run it against the local cluster (from the repository root), then reclaim a replica group's node meanwhile::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml   # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_torch_fault_tolerant --conf '{"script": "'$PWD'/dags/scripts/train_torchft.py"}'
    airflow-elastic cluster preempt <a trainer pod's node> --style gke

The image has torch, torchft (``pip install 'airflow-elastic[torchft]'``) and the script; each replica group runs it
under torchrun, as torchft's examples do, and the lighthouse pod runs ``torchft_lighthouse`` from the same image
(on the local cluster, the ones next to its interpreter). ``airflow-elastic render
dags/example_torch_fault_tolerant.py`` shows the JobSet.
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import (
    Checkpointing,
    FailurePolicy,
    FaultTolerance,
    Role,
    RunOptions,
    TrainingGroup,
    WaitSettings,
)
from airflow_elastic.operators import TrainingGroupOperator

if (here := str(Path(__file__).resolve().parent)) not in sys.path:
    sys.path.append(here)
from torch_example import ENV, RESOURCES, SPOT, torch_params

#: torch 2.13 (CPU), torchft 0.2.0 and ``train_torchft.py``.
TORCHFT_TRAINER_IMAGE = "ghcr.io/airflow-elastic/torchft-trainer:0.1.0"
#: As torchft's examples run: under torchrun, whose agent on the replica group's pod 0 serves the store the Manager
#: joins (``MASTER_ADDR``/``MASTER_PORT``: that replica group's pod 0; ``AE_RANK``/``AE_WORLD_SIZE``: within it).
TORCHRUN = (
    "torchrun",
    "--nnodes=$(AE_WORLD_SIZE)",
    "--node-rank=$(AE_RANK)",
    "--nproc-per-node=1",
    "--master-addr=$(MASTER_ADDR)",
    "--master-port=$(MASTER_PORT)",
    "{{ params.script }}",
)

GROUP = TrainingGroup(
    name="torch-ft",
    image=TORCHFT_TRAINER_IMAGE,
    roles=[Role("trainer", resources=RESOURCES, placement=SPOT, command=TORCHRUN)],
    failure=FailurePolicy(max_failures=1, max_preemptions=10),
    checkpoint=Checkpointing(uri="{{ params.checkpoint_root }}/{{ run_id }}", keep=3),
    env=ENV,
    # The lighthouse stays on on-demand capacity (its default placement); a silent replica group leaves the
    # quorum after 2 s, and a replacement that finds a quorum waits at most 10 s for stragglers. Every replica
    # group gone for 10 s (all the spot capacity reclaimed at once): the task restarts the whole group from the
    # durable checkpoint. The default bound (305 s) allows for a cloud's spot node provisioning; a local cluster's
    # nodes come back in seconds or not at all.
    fault_tolerance=FaultTolerance(3, heartbeat_timeout_ms=2000, join_timeout_ms=10_000, quorum_lost_timeout=10),
)

with DAG(
    "example_torch_fault_tolerant",
    schedule=None,
    catchup=False,
    params={
        **torch_params(GROUP.name),
        "script": Param("/app/train_torchft.py", type="string", description="the trainer's path in the image"),
    },
    tags=["example", "airflow-elastic", "pytorch", "torchft"],
):
    TrainingGroupOperator(
        task_id="train",
        group=GROUP,
        options=RunOptions(
            kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
            wait=WaitSettings(poll_interval=1, startup_timeout=180),
        ),
    )
