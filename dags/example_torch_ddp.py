"""Example: PyTorch DistributedDataParallel (gloo) on spot workers, three ways, each surviving a reclaim in one try.

The trainer (``dags/scripts/train_torch.py``) trains a small MLP on synthetic data with plain ``torch.distributed``,
checkpoints through ``airflow_elastic.runtime`` and wraps each step in ``runtime.peer_loss``, so a reclaimed worker
costs no step: the leader (on-demand, it writes the checkpoints) saves the last completed step as soon as its
collective fails, and every survivor waits for the group restart instead of failing first.

* ``example_torch_ddp``: one process per pod, started as the image's entrypoint; ``init_process_group("gloo")``
  reads ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` from the environment contract.
* ``example_torch_torchrun``: ``processes_per_pod=2`` under torchrun's static rendezvous (``NNODES``,
  ``NODE_RANK``, ``NPROC_PER_NODE`` from the contract; the leader's pod hosts the store).
* ``example_torch_elastic``: an elastic worker role (``Elastic(1, 2)``): torchrun's c10d rendezvous with
  ``NNODES=2:3``; a reclaimed worker is replaced without restarting the group, and torchrun re-forms it.

Run one against the local cluster (from the repository root), then reclaim a worker's node meanwhile::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml   # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_torch_ddp
    airflow dags test example_torch_torchrun --conf '{"script": "'$PWD'/dags/scripts/train_torch.py"}'
    airflow-elastic cluster preempt <a worker's node> --style gke

The torch trainer image runs ``python /app/train_torch.py``; the local cluster records images instead of pulling
them, and ``dags/image-map.yaml`` maps this one to the script (from Python: ``ClusterConfig(image_map=
{TORCH_TRAINER_IMAGE: ["python", "/abs/path/dags/scripts/train_torch.py"]})``). The torchrun groups give a command
instead (``torchrun ... <script>``, ``script`` being the trainer's path in the image); ``torchrun`` is the one next
to the cluster's interpreter. On a real cluster build the image (torch 2.13, the script, ``pip install --no-deps
airflow-elastic``), change the connection and give a checkpoint location every pod can reach (``checkpoint_root``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.sdk import DAG

from airflow_elastic import Checkpointing, Elastic, FailurePolicy, Role, RunOptions, TrainingGroup, WaitSettings
from airflow_elastic.operators import TrainingGroupOperator

# Shared with example_trainjob. Airflow's dag processor puts the DAGs folder on sys.path; a bare DagBag does not.
if (here := str(Path(__file__).resolve().parent)) not in sys.path:
    sys.path.append(here)
from torch_example import ENV, RESOURCES, SPOT, TORCH_TRAINER_IMAGE, torch_params

#: torchrun's conventional rendezvous port; a local cluster shares one port space for stores bound to every address.
PORT = 29400
STATIC_TORCHRUN = (
    "torchrun",
    "--nnodes=$(NNODES)",
    "--node-rank=$(NODE_RANK)",
    "--nproc-per-node=$(NPROC_PER_NODE)",
    "--master-addr=$(MASTER_ADDR)",
    "--master-port=$(MASTER_PORT)",
    "{{ params.script }}",
)


def torch_group(name: str, leader: Role, workers: Role, elastic: Elastic | None = None) -> TrainingGroup:
    # torch 2.13's shared rendezvous store publishes the workers' store address in the first round only: a
    # replacement pod joining a later round would wait for it forever. Without sharing, every round publishes it.
    env = {**ENV, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if elastic else ENV
    return TrainingGroup(
        name=name,
        image=TORCH_TRAINER_IMAGE,
        roles=[leader, workers],
        elastic=elastic,
        failure=FailurePolicy(max_failures=1, max_preemptions=5),
        checkpoint=Checkpointing(uri="{{ params.checkpoint_root }}/{{ run_id }}", keep=3),
        env=env,
        coordinator_port=PORT,
    )


# [START howto_elastic_group]
def elastic_torchrun(hosts_store: bool) -> tuple[str, ...]:
    """torchrun with c10d rendezvous at the coordinator; only the leader's pod hosts the store, so a reclaimed
    worker does not take it along. Each lost peer costs one of ``--max-restarts``."""
    return (
        "torchrun",
        "--nnodes=$(NNODES)",
        "--nproc-per-node=$(NPROC_PER_NODE)",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
        "--rdzv-id=$(AE_JOBSET)",
        f"--rdzv-conf=is_host={int(hosts_store)},last_call_timeout=5",
        "--max-restarts=3",
        "{{ params.script }}",
    )


#: A leader on on-demand capacity (it writes the checkpoints, and hosts the rendezvous store) and two elastic workers
#: on spot: a reclaimed worker is replaced without a group restart, and torchrun re-forms the group.
ELASTIC = torch_group(
    "torch-elastic",
    Role("leader", resources=RESOURCES, command=elastic_torchrun(True)),
    Role("worker", replicas=2, resources=RESOURCES, placement=SPOT, command=elastic_torchrun(False)),
    elastic=Elastic(1, 2, role="worker"),
)
# [END howto_elastic_group]

GROUPS = {
    "example_torch_ddp": torch_group(
        "torch-ddp",
        Role("leader", resources=RESOURCES),  # on-demand: it writes the checkpoints
        Role("worker", replicas=2, resources=RESOURCES, placement=SPOT),
    ),
    "example_torch_torchrun": torch_group(
        "torch-torchrun",
        Role("leader", resources=RESOURCES, command=STATIC_TORCHRUN, processes_per_pod=2),
        Role("worker", resources=RESOURCES, placement=SPOT, command=STATIC_TORCHRUN, processes_per_pod=2),
    ),
    "example_torch_elastic": ELASTIC,
}

for dag_id, group in GROUPS.items():
    with DAG(
        dag_id,
        schedule=None,
        catchup=False,
        params=torch_params(group.name),
        tags=["example", "airflow-elastic", "pytorch"],
    ):
        TrainingGroupOperator(
            task_id="train",
            group=group,
            options=RunOptions(
                kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
                wait=WaitSettings(poll_interval=1, startup_timeout=180),
            ),
        )
