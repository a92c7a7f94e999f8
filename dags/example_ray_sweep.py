"""Example: a Ray Tune sweep of the digits classifier as one KubeRay RayJob, the trials on spot workers.

``dags/scripts/tune_digits.py`` is the driver: Tune's random search with ASHA over an MLP's ``lr``, ``hidden``,
``layers`` and ``alpha``, a checkpoint per epoch, the experiment under ``<storage>/<experiment>``. The head runs no
trials (``num-cpus: 0``) on on-demand capacity; the trials run on the ``spot`` worker group. What the two kinds of
loss do:

* a worker pod lost to a reclaim (or a vanished node, an eviction): KubeRay replaces the pod, Tune restarts the
  interrupted trials from their checkpoints; the task counts the loss against ``max_preemptions`` and lists it;
* the head lost: KubeRay starts a new head and the submitter submits the Ray job again in the same RayJob (only a
  submitter out of retries fails it, and the task then submits the next RayJob); the driver restores the experiment
  (``Tuner.restore``): trials that finished are not run again. The task charges the loss to ``max_preemptions``.

The result is the Ray job's (id, statuses, timings, the driver's ``AE_RESULT``) plus ``sweep``: the same best
parameters, trials and report (CSV, JSON, PNG) as ``HyperparameterSweepOperator``'s, read from Tune's storage.

Run it against the local cluster (from the repository root; ``make ray-venv`` once, for the Ray image)::

    airflow-elastic cluster up --detach          # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_ray_sweep --conf '{"trials": 4, "epochs": 4}'
    kubectl get rayjobs,rayclusters               # the RayJob, its cluster while it runs

On a real cluster: an image ``FROM rayproject/ray:2.60.0`` with scikit-learn and ``tune_digits.py`` (set ``image``
and ``script``), and a ``storage`` every Ray pod and the Airflow worker can reach (``s3://...``, ``gs://...``).
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from airflow_elastic import Placement, Resources
from airflow_elastic.operators import RayJobOperator
from airflow_elastic.ray import RayCluster, RayHead, TuneSweep, WorkerGroup

SCRIPT = Path(__file__).resolve().parent / "scripts" / "tune_digits.py"
#: The experiment's folder under ``storage``: one per DAG run (a resubmitted RayJob restores it).
EXPERIMENT = "digits-{{ run_id | replace(':', '-') | replace('+', '-') }}"

cluster = RayCluster(
    "digits-tune",
    head=RayHead(resources=Resources(cpu="1", memory="2Gi"), ray_start_params={"num-cpus": 0}),
    worker_groups=[
        WorkerGroup(
            "spot",
            replicas=1,
            resources=Resources(cpu="2", memory="2Gi"),
            placement=Placement(spot=True),
        )
    ],
    env={"PYTHONUNBUFFERED": "1"},
)

with DAG(
    "example_ray_sweep",
    schedule=None,
    catchup=False,
    params={
        "trials": Param(8, type="integer", minimum=1, description="Tune samples"),
        "epochs": Param(6, type="integer", minimum=1, description="epochs per trial (ASHA's max_t)"),
        "epoch_seconds": Param(0.0, type="number", minimum=0, description="pause per epoch (a slower sweep)"),
        "storage": Param(
            "/tmp/airflow-elastic/ray-tune",
            type="string",
            description="Tune's storage_path: the experiment, its checkpoints and the report go under it",
        ),
        "script": Param(str(SCRIPT), type="string", description="tune_digits.py as the Ray image has it"),
    },
    tags=["example", "airflow-elastic", "ray", "sweep"],
):
    # [START howto_ray_job_operator]
    sweep = RayJobOperator(
        task_id="sweep",
        cluster=cluster,
        entrypoint=(
            "python {{ params.script }} --storage-path {{ params.storage }} --name " + EXPERIMENT + " "
            "--trials {{ params.trials }} --epochs {{ params.epochs }} --epoch-seconds {{ params.epoch_seconds }}"
        ),
        tune=TuneSweep(experiment="{{ params.storage }}/" + EXPERIMENT, objective="val_loss", mode="min"),
        max_preemptions=5,
        kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
    )
    # [END howto_ray_job_operator]
