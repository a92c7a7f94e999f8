"""The DAG of ``tests/deployment/test_real_processes.py``: two training groups the test disturbs from outside.

It runs under a real scheduler and triggerer (not ``airflow dags test``), in a DAGs folder of its own (a
symlink to this file). The test chooses one namespace per task, so the cluster's request log tells which task
created what, and a release directory: each group's pods wait until a file named after their task appears
there, so a group is still running for as long as the test needs it to (a triggerer restart, a worker killed
and retried), whatever the machine's speed. Then they run the example tiny trainer for ``steps`` steps.

* ``train_deferred`` waits in the triggerer; the test restarts the triggerer while it waits, then reclaims the spot
  node of its worker (the only pod of this DAG on spot capacity): the JobSet restarts in place.
* ``train_sync`` waits on its worker (``deferrable=False``) and may retry once; the test SIGKILLs its worker
  after the submit, and the retry must adopt the running group.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import Placement, Role, SuccessPolicy, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

DAG_ID = "real_processes"
TRAIN_TINY = Path(__file__).resolve().parents[2] / "dags" / "scripts" / "train_tiny.py"
#: Say so, wait (at most 5 minutes) for the release file, then run the tiny trainer. ``python`` is the cluster's.
GATE = (
    "import os, runpy, sys, time\n"
    "release = os.environ['RELEASE_FILE']\n"
    "print('waiting for', release, flush=True)\n"
    "deadline = time.monotonic() + 300\n"
    "while not os.path.exists(release):\n"
    "    if time.monotonic() > deadline:\n"
    "        sys.exit('never released: ' + release)\n"
    "    time.sleep(0.2)\n"
    "print('released', flush=True)\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)
GATED_TRAIN = ["python", "-c", GATE, str(TRAIN_TINY)]


def gated_trainer(name: str, worker: Placement | None = None) -> TrainingGroup:
    """A leader and one worker (placed by ``worker``) running the tiny trainer once ``<release_dir>/<task_id>``
    exists."""
    return TrainingGroup(
        name=name,
        image="ghcr.io/airflow-elastic/tiny-trainer:0.1.0",  # recorded by the local cluster, never pulled
        roles=[Role("leader", command=GATED_TRAIN), Role("worker", command=GATED_TRAIN, placement=worker)],
        success=SuccessPolicy(roles=("leader",)),
        env={"TRAIN_STEPS": "{{ params.steps }}", "RELEASE_FILE": "{{ params.release_dir }}/{{ task.task_id }}"},
    )


with DAG(
    DAG_ID,
    schedule=None,
    catchup=False,
    params={
        "deferred_namespace": Param("default", type="string"),
        "sync_namespace": Param("default", type="string"),
        "release_dir": Param("/nonexistent", type="string"),
        "steps": Param(3, type="integer"),
    },
    tags=["test"],
):
    common = {"kubernetes_conn_id": "local_cluster", "poll_interval": 0.5, "startup_timeout": 120}
    TrainingGroupOperator(
        task_id="train_deferred",
        group=gated_trainer("rp-defer", worker=Placement(spot=True)),  # the local cluster's tainted spot pool
        namespace="{{ params.deferred_namespace }}",
        retries=0,
        **common,
    )
    TrainingGroupOperator(
        task_id="train_sync",
        group=gated_trainer("rp-sync"),
        namespace="{{ params.sync_namespace }}",
        deferrable=False,
        retries=1,
        retry_delay=timedelta(seconds=1),
        **common,
    )
