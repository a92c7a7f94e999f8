"""Example: a TPE hyperparameter sweep of a small PyTorch model, each trial a 2-pod DDP group on spot capacity.

Every trial trains ``dags/scripts/train_digits.py`` (an MLP classifying scikit-learn's digits, DistributedDataParallel
over gloo between a leader and one worker) with the trial's ``lr``, ``hidden``, ``dropout`` and ``layers``; the
leader reports the validation loss every epoch (``runtime.report_intermediate``: median stopping prunes trials that
fall behind) and at the end (``runtime.report``). A reclaimed trial resumes from its own checkpoint
(``<checkpoint_root>/<run id>/<sweep>/trial-<n>-<params digest>``) and is not counted as failed. The result is the
best parameters, every trial, and a report (CSV, JSON, PNG) under the checkpoint root; ``train_best`` shows how a
downstream task uses it.

Run it against the local cluster (from the repository root)::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml   # prints AIRFLOW_CONN_LOCAL_CLUSTER=...
    airflow dags test example_sweep --conf '{"max_trials": 4, "max_parallel": 2}'
    kubectl get jobsets -l airflow-elastic.io/sweep -L airflow-elastic.io/trial   # the trials, with their numbers

The digits trainer image (torch 2.13 CPU, scikit-learn, ``train_digits.py`` and ``prepare_digits.py`` under
``/app``) runs ``python /app/train_digits.py``; the local cluster records images instead of pulling them, and
``dags/image-map.yaml`` maps this one to the script. On a real cluster build that image, change the connection, and
give a ``checkpoint_root`` every pod can reach (``gs://...``, ``s3://...``).
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task

from airflow_elastic import (
    Checkpointing,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    RunOptions,
    TrainingGroup,
    WaitSettings,
)
from airflow_elastic.sweeps import HyperparameterSweepOperator, choice, loguniform, randint, uniform

#: torch 2.13 (CPU), scikit-learn and the digits scripts; its entrypoint is ``python /app/train_digits.py``.
DIGITS_IMAGE = "ghcr.io/airflow-elastic/digits-trainer:0.1.0"
RESOURCES = Resources(cpu="500m", memory="1Gi")

trainer = TrainingGroup(
    name="digits-sweep",
    image=DIGITS_IMAGE,
    roles=[Role("leader", resources=RESOURCES), Role("worker", resources=RESOURCES)],
    placement=Placement(spot=True),
    failure=FailurePolicy(max_failures=0, max_preemptions=5),  # a crash is the trial's result; reclaims are free
    checkpoint=Checkpointing(uri="{{ params.checkpoint_root }}/{{ run_id }}", keep=2),
    env={"EPOCHS": "{{ params.epochs }}", "PYTHONUNBUFFERED": "1"},
)

with DAG(
    "example_sweep",
    schedule=None,
    catchup=False,
    params={
        "max_trials": Param(12, type="integer", minimum=1, description="trials to run"),
        "max_parallel": Param(2, type="integer", minimum=1, description="trial groups at once"),
        "epochs": Param(8, type="integer", minimum=1, description="epochs per trial"),
        "checkpoint_root": Param(
            "/tmp/airflow-elastic/checkpoints/digits-sweep",
            type="string",
            description="trials checkpoint under <checkpoint_root>/<run id>/<sweep>/trial-<n>-<params digest>; "
            "the report goes there too",
        ),
    },
    tags=["example", "airflow-elastic", "pytorch", "sweep"],
):
    # [START howto_hyperparameter_sweep_operator]
    sweep = HyperparameterSweepOperator(
        task_id="sweep",
        group=trainer,
        space={
            "lr": loguniform(1e-3, 1e-1),
            "hidden": choice([32, 64, 128]),
            "dropout": uniform(0.0, 0.5),
            "layers": randint(1, 3),
        },
        objective="val_loss",
        mode="min",
        algorithm="tpe",
        max_trials="{{ params.max_trials }}",
        max_parallel="{{ params.max_parallel }}",
        max_failed_trials=2,
        seed=7,
        early_stopping="median",
        stopping_options={"min_trials_required": 2, "start_step": 3},
        options=RunOptions(
            kubernetes_conn_id="local_cluster",  # the connection `airflow-elastic cluster up` prints
            wait=WaitSettings(poll_interval=1, startup_timeout=180),
        ),
    )
    # [END howto_hyperparameter_sweep_operator]

    @task
    def train_best(result: dict) -> dict:
        """What a nightly pipeline hands to its final training: the best parameters (and where the report is)."""
        print(f"best val_loss {result['best_value']:.4f} (trial {result['best_trial']}): {result['best_params']}")
        print(f"report: {result['report']}")
        return result["best_params"]

    train_best(sweep.output)
