"""The flagship nightly pipeline: prepare the data, sweep, train the best configuration, evaluate, publish.

Every night at 02:00 (Europe/Amsterdam; ``catchup=False``, one run at a time)::

    previous_sweep ─┐
    prepare ────────┴─> sweep ──> train ──> evaluate ──> publish ─────────────────────────────────> promoted ──> serve
                                                           └─> under_review ──> approve ──> adopt ─┘

* ``prepare`` (batch stage, CPU pool, ``forbid``, skipped when more than 4 hours late): splits scikit-learn's
  digits into train/val/test ``.npz`` under ``<root>/data/digits/<version>`` (``scripts/prepare_digits.py``).
* ``sweep``: a TPE sweep of the PyTorch digits classifier (``scripts/train_digits.py``, DDP over gloo), each trial a
  two-pod group on spot capacity, validation loss the objective; warm-started from the previous run's sweep.
* ``train``: the best parameters trained for longer, fault tolerant (``scripts/train_digits_ft.py``, torchft): two
  replica groups of one pod on spot and the torchft lighthouse on on-demand capacity. A reclaimed replica group
  drops out of the quorum while the other trains on, untouched; its replacement heals from the live peer. One pod
  of the quorum checkpoints every epoch under ``<root>/checkpoints/digits/<version>/final`` (the model ``evaluate``
  scores, and the resume point should every replica group be lost at once).
* ``evaluate`` (batch stage, CPU pool): the final checkpoint's accuracy and loss on the held-out test split
  (``scripts/evaluate_digits.py``), and the model exported as TorchScript to ``<version>/model/model.pt``.
* ``publish``: checkpoint, metrics, sweep report and a run report under ``<root>/models/digits/<version>/``, promoted
  to ``<root>/models/digits/latest/`` only if the test accuracy does not regress
  (:mod:`airflow_elastic.serving.publishing`).
* ``under_review``, ``approve``, ``adopt``: a candidate that regresses beyond ``tolerance`` by at most
  ``review_margin`` (0.02) waits for a person's answer (Airflow's ``ApprovalOperator``, showing the comparison);
  Approve: ``adopt`` promotes it; Reject, or no answer in 12 hours (``APPROVAL_TIMEOUT``): nothing is promoted.
* ``promoted`` skips the rollout of a version that was not promoted. ``publish`` to ``promoted`` are the promotion
  gate, built by ``nightly_promotion.promotion_gate`` (``dags/nightly_promotion.py``, beside this file: deploy both).
* ``serve`` (``InferenceServiceOperator``) rolls ``<version>/model`` out to the KServe InferenceService ``digits``
  (``pytorch`` format), waits until the new model serves, POSTs three test rows to it, and rolls back to the previous
  model if it does not go live.

**Assets** (docs/concepts/assets.md): ``prepare`` updates ``DATA_ASSET`` (the run's split), ``publish`` emits an
event of ``MODEL_ASSET`` only when it promotes (through the alias ``PROMOTIONS``: a refused version emits none), and
``serve`` updates ``SERVED_ASSET`` when the new model serves (a skipped or failed rollout emits none). Each event's
extra says where the run wrote (its ``uri``), the version, and what matters of it; ``example_batch_scoring`` runs on
each promotion.

**Lineage** (docs/concepts/lineage.md): with Airflow's OpenLineage provider installed, ``prepare`` reports the split
it wrote, ``train`` the split it read and its checkpoints, ``evaluate`` both and the version's model it exported.

Data flows only through XCom and object storage: each step's result is the next one's argument or template, and
every artefact lives under ``root``: the ``root`` param, else the Airflow Variable ``nightly_training_root``, else
``/tmp/airflow-elastic/nightly`` (works on the local cluster, whose pods are local processes; on a real cluster give a
URI every pod and the Airflow workers reach, e.g. ``gs://bucket/nightly``, with its fsspec driver in the images).
``<version>`` is the run id made path-safe (``publishing.version_name``).

**Warm start from object storage, not XCom.** ``previous_sweep`` reads the sweep result the last publish wrote
(``<root>/models/digits/LAST_RUN.json`` names it): unlike the previous DAG run's XCom, it survives a metadata-DB
cleanup (``airflow db clean``), a new Airflow deployment, cleared or failed runs in between, and ``airflow dags
test`` with a fresh DB; and it is the sweep the published model came from.

**Settings.** A scheduled run has no conf: each of ``root``, ``scripts``, ``sweep_epochs``, ``final_epochs``,
``final_step_seconds``, ``max_trials`` and ``starting_deadline`` is the run's param, else the Airflow Variable
``nightly_training_<param>``, else its default. Every task retries (``RETRIES``): a retry adopts what its previous
try started or finished.

Locally, scheduled (``make demo`` runs it once with ``airflow dags test``, reclaiming one replica group's node during
``train``)::

    airflow-elastic cluster up --detach --image-map dags/image-map.yaml
    # it prints AIRFLOW_CONN_LOCAL_CLUSTER=... and AIRFLOW_VAR_NIGHTLY_TRAINING_SCRIPTS=<repo>/dags/scripts: export both
    # (after 06:00 also AIRFLOW_VAR_NIGHTLY_TRAINING_STARTING_DEADLINE=86400, else the latest 02:00's run skips)
    AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags airflow standalone   # or api-server, scheduler, dag-processor, triggerer
    airflow dags unpause nightly_training

The stages' and the final training's commands name the scripts under ``scripts``: ``/workspace/scripts``, the
default, in ``docker/trainer/Dockerfile``'s image (built with ``--build-arg SCRIPT=train_digits.py``; it has
torchft, whose ``torchft_lighthouse`` the lighthouse pod runs), so a real cluster needs the connection and
``nightly_training_root`` but no scripts setting. The sweep trials run the image's entrypoint, ``train_digits.py``
(``dags/image-map.yaml`` maps it locally).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param, task

# The promotion gate (publish, under_review, approve, adopt, promoted), the Assets it reads and emits, and the storage
# settings: dags/nightly_promotion.py, beside this file (the DAGs folder is on sys.path).
from nightly_promotion import (
    CONN_ID,
    DATA_ASSET,
    DEFAULT_ROOT,
    FILTERS,
    MODEL_ASSET,
    PIPELINE,
    REVIEW_MARGIN,
    ROOT_VARIABLE,
    VARIABLE_PREFIX,
    models_root,
    promotion_gate,
    read_previous_sweep,
)

from airflow_elastic import (
    BatchStage,
    Checkpointing,
    FailurePolicy,
    FaultTolerance,
    Placement,
    Resources,
    Role,
    RunOptions,
    SuccessPolicy,
    TrainingGroup,
    WaitSettings,
)
from airflow_elastic.operators import BatchStageOperator, InferenceServiceOperator, TrainingGroupOperator
from airflow_elastic.serving import publishing
from airflow_elastic.sweeps import HyperparameterSweepOperator, choice, loguniform, randint, uniform

#: The digits trainer image: torch 2.13 (CPU), torchft, scikit-learn, the scripts under /workspace/scripts; its
#: entrypoint runs ``train_digits.py``.
DIGITS_IMAGE = "ghcr.io/airflow-elastic/digits-trainer:0.1.0"
#: Where the stages' and the final training's scripts are: the image's on a real cluster, ``dags/scripts`` on the
#: local cluster (whose pods are local processes; `airflow-elastic cluster up` prints the Variable to set).
DEFAULT_SCRIPTS = "/workspace/scripts"
SCRIPTS_VARIABLE = f"{VARIABLE_PREFIX}scripts"
#: The sizes of a night: epochs per sweep trial, epochs of the final training, trials of the sweep. Sized for `make
#: demo` (minutes on 2 cores): a real night affords more trials and epochs.
DEFAULT_SIZES = {"sweep_epochs": 6, "final_epochs": 100, "max_trials": 6}
#: Extra seconds per step of the final training, standing in for a real model's compute (``STEP_SECONDS``). The
#: digits model's steps take milliseconds: flat out, its 1600 steps can end before a reclaimed replica group's
#: replacement joins (the Job's 10 s pod failure back-off, then torchrun's and the trainer's imports of torch), so
#: `make demo`, which reclaims one, sets 0.02 to show the replacement healing from its peer.
DEFAULT_STEP_SECONDS = 0


def setting(name: str, default: object) -> str:
    """A template: the run's param ``name``, else the Variable ``nightly_training_<name>``, else ``default``."""
    return (
        f"{{{{ var.value.get('{VARIABLE_PREFIX}{name}', '{default}') if params.{name} in (none, '') "
        f"else params.{name} }}}}"
    )


ROOT = setting("root", DEFAULT_ROOT)
VERSION = "{{ run_id | version }}"
DATA = f"{ROOT}/data/digits/{VERSION}"
#: ``DATA`` as a URI (``file:///...`` for a local root): the extra ``uri`` of a ``DATA_ASSET`` event.
DATA_URI = (
    f"{{{{ ((params.root or var.value.get('{ROOT_VARIABLE}', '{DEFAULT_ROOT}')) ~ '/data/digits/' ~ (run_id | version))"
    " | location_uri }}"
)
#: The served model's Asset (the data split's and the model's are nightly_promotion's): docs/concepts/assets.md.
SERVED_ASSET = Asset(name=f"{PIPELINE}.digits.served", uri=publishing.asset_uri(PIPELINE, "serving/digits"))
SCRIPTS = setting("scripts", DEFAULT_SCRIPTS)
#: The served model: the KServe InferenceService's name, and where the evaluation exports the TorchScript.
SERVICE = "digits"
MODEL_DIR = f"{ROOT}/models/digits/{VERSION}/model"
EXPORT_URI = f"{MODEL_DIR}/model.pt"
#: The final training's checkpoint directory, as its result names it (what ``evaluate`` scores).
FINAL_CHECKPOINTS = "{{ ti.xcom_pull(task_ids='train')['checkpoint'] }}"

#: A night that cannot start its preparation within this of 02:00 is skipped (a CronJob's startingDeadlineSeconds):
#: the pipeline would otherwise train into the day, beside the traffic it is kept away from. A scheduled run created
#: later (the DAG unpaused in the day) is skipped too, unless the Variable nightly_training_starting_deadline allows it.
STARTING_DEADLINE = timedelta(hours=4)
DEADLINE_SECONDS = int(STARTING_DEADLINE.total_seconds())
#: Batch stages belong on the CPU pool, at low priority, away from the GPU/spot nodes training needs.
CPU_POOL = Placement(node_selector={"airflow-elastic.io/capacity-type": "on-demand"}, priority_class="batch-low")
STAGE_RESOURCES = Resources(cpu="1", memory="1Gi")
TRAINER_RESOURCES = Resources(cpu="500m", memory="1Gi")
SPOT = Placement(spot=True)
#: A replica group of the final training: spot capacity, a node of its own (JobSet exclusive placement), so one
#: reclaim takes one replica group.
REPLICA_GROUP_PLACEMENT = Placement(spot=True, exclusive_topology="kubernetes.io/hostname")
LIGHTHOUSE_RESOURCES = Resources(cpu="100m", memory="256Mi")
#: The store port of each replica group's torchrun. torchrun's store binds every address, and on the local cluster
#: every address is the host's: not torchrun's conventional 29400, which other groups on the same machine may hold.
PORT = 29471
#: Default retries of every task: a lost worker or a failed try costs a retry, not the night.
RETRIES = 2
RETRY_DELAY = timedelta(seconds=30)


#: Each replica group runs the trainer as torchft's examples do, under torchrun within the replica group: its agent
#: on the replica group's pod 0 serves the store torchft's Manager joins (``MASTER_ADDR``/``MASTER_PORT``: that pod;
#: ``AE_RANK``/``AE_WORLD_SIZE``: within the replica group).
TORCHRUN = (
    "torchrun",
    "--nnodes=$(AE_WORLD_SIZE)",
    "--node-rank=$(AE_RANK)",
    "--nproc-per-node=1",
    "--master-addr=$(MASTER_ADDR)",
    "--master-port=$(MASTER_PORT)",
    f"{SCRIPTS}/train_digits_ft.py",
)


#: One sweep trial: a leader and a worker, both on spot (a reclaimed trial resumes from its own checkpoint).
trial = TrainingGroup(
    name="digits",
    image=DIGITS_IMAGE,
    roles=[Role("leader", resources=TRAINER_RESOURCES), Role("worker", resources=TRAINER_RESOURCES)],
    placement=SPOT,
    success=SuccessPolicy(roles=("leader",)),  # the leader's result is the trial's; the JobSet then stops the worker
    failure=FailurePolicy(max_failures=1, max_preemptions=5),
    checkpoint=Checkpointing(uri=f"{ROOT}/checkpoints/digits/{VERSION}/sweep", keep=2),
    env={"DATA_URI": DATA, "EPOCHS": setting("sweep_epochs", DEFAULT_SIZES["sweep_epochs"]), "PYTHONUNBUFFERED": "1"},
)

#: The final training: two torchft replica groups of one pod on spot, each on a node of its own, and the lighthouse
#: on on-demand capacity (its default placement). A reclaimed replica group drops out of the quorum after 2 s
#: (``heartbeat_timeout_ms``) while the other trains on; its Job replaces the pod, which heals from the live peer.
# [START howto_fault_tolerant_group]
final = TrainingGroup(
    name="digits-final",
    image=DIGITS_IMAGE,  # it has torchft: the trainer's Manager and the lighthouse's torchft_lighthouse
    roles=[Role("trainer", resources=TRAINER_RESOURCES, placement=REPLICA_GROUP_PLACEMENT, command=TORCHRUN)],
    fault_tolerance=FaultTolerance(
        2, heartbeat_timeout_ms=2000, join_timeout_ms=10_000, lighthouse_resources=LIGHTHOUSE_RESOURCES
    ),
    failure=FailurePolicy(max_failures=1, max_preemptions=5),
    checkpoint=Checkpointing(uri=f"{ROOT}/checkpoints/digits/{VERSION}/final", keep=3),  # if every group is lost
    env={
        "DATA_URI": DATA,
        "EPOCHS": setting("final_epochs", DEFAULT_SIZES["final_epochs"]),
        "STEP_SECONDS": setting("final_step_seconds", DEFAULT_STEP_SECONDS),
        "TRAIN_PARAMS": "{{ ti.xcom_pull(task_ids='sweep')['best_params'] | tojson }}",  # the sweep's best
        "PYTHONUNBUFFERED": "1",
    },
    coordinator_port=PORT,
)
# [END howto_fault_tolerant_group]


def fallback(what: str, name: str, default: object) -> str:
    """A param's description: what it is, and what an empty one falls back to."""
    return f"{what}; empty: Variable {VARIABLE_PREFIX}{name}, else {default}"


def stage(name: str, script: str, env: dict[str, str]) -> BatchStage:
    return BatchStage(
        name,
        image=DIGITS_IMAGE,
        command=["python", f"{SCRIPTS}/{script}"],
        env={**env, "PYTHONUNBUFFERED": "1"},
        resources=STAGE_RESOURCES,
        placement=CPU_POOL,
    )


with DAG(
    "nightly_training",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Amsterdam"),
    catchup=False,
    max_active_runs=1,
    user_defined_filters={
        "version": publishing.version_name,
        "location_uri": publishing.location_uri,
        **FILTERS,
    },
    # Every step is safe to retry: a retry adopts what its previous try started or finished.
    default_args={"retries": RETRIES, "retry_delay": RETRY_DELAY},
    params={
        "root": Param("", type="string", description=fallback("storage root", "root", DEFAULT_ROOT)),
        "scripts": Param("", type="string", description=fallback("the scripts' folder", "scripts", DEFAULT_SCRIPTS)),
        **{
            name: Param(
                None, type=["null", "integer"], minimum=1, description=fallback(what, name, DEFAULT_SIZES[name])
            )
            for name, what in (
                ("sweep_epochs", "epochs per sweep trial"),
                ("final_epochs", "epochs of the final training"),
                ("max_trials", "trials of the sweep"),
            )
        },
        "final_step_seconds": Param(
            None,
            type=["null", "number"],
            minimum=0,
            description=fallback("extra seconds per final training step", "final_step_seconds", DEFAULT_STEP_SECONDS),
        ),
        "starting_deadline": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            description=fallback("seconds a night may start late", "starting_deadline", DEADLINE_SECONDS),
        ),
        "tolerance": Param(0.0, type="number", minimum=0, description="test-accuracy drop still promoted"),
        "review_margin": Param(
            REVIEW_MARGIN, type="number", minimum=0, description="drop beyond the tolerance that waits for approval"
        ),
    },
    tags=["example", "airflow-elastic", "nightly", "pytorch"],
) as dag:

    @task
    def previous_sweep(params: dict[str, Any] | None = None) -> dict[str, Any] | str:
        """The sweep result of the last published run (``LAST_RUN.json`` names it); ``""`` on the first night
        (``None`` would store no XCom, and the sweep pulling a missing XCom logs an error)."""
        return read_previous_sweep(models_root(params or {})) or ""

    prepare = BatchStageOperator(
        task_id="prepare",
        stage=stage("prepare-digits", "prepare_digits.py", {"DATA_URI": DATA}),
        concurrency_policy="forbid",  # a previous night's preparation still running: skip, as a CronJob would
        outlets=[DATA_ASSET],  # a skipped preparation emits no event
        outlet_extra={"version": VERSION, "uri": DATA_URI},
        starting_deadline=setting("starting_deadline", DEADLINE_SECONDS),
        kubernetes_conn_id=CONN_ID,
        poll_interval=1,
    )
    sweep = HyperparameterSweepOperator(
        task_id="sweep",
        group=trial,
        space={
            "lr": loguniform(1e-3, 3e-1),
            "hidden": choice([32, 64, 128]),
            "dropout": uniform(0.0, 0.4),
            "layers": randint(1, 3),
        },
        objective="val_loss",
        mode="min",
        algorithm="tpe",
        max_trials=setting("max_trials", DEFAULT_SIZES["max_trials"]),
        max_parallel=2,
        max_failed_trials=2,
        seed=7,
        early_stopping="median",
        warm_start=previous_sweep(),
        report_uri=f"{ROOT}/reports/digits/{VERSION}/sweep",
        options=RunOptions(
            kubernetes_conn_id=CONN_ID,
            wait=WaitSettings(poll_interval=1),
        ),
    )
    # [START howto_training_group_operator_fault_tolerant]
    train = TrainingGroupOperator(
        task_id="train",
        group=final,
        lineage_inputs=[DATA],  # OpenLineage: the split -> its checkpoints (docs/concepts/lineage.md)
        options=RunOptions(
            kubernetes_conn_id=CONN_ID,
            wait=WaitSettings(poll_interval=1, startup_timeout=300),
        ),
    )
    # [END howto_training_group_operator_fault_tolerant]
    evaluate = BatchStageOperator(
        task_id="evaluate",
        stage=stage(
            "evaluate-digits",
            "evaluate_digits.py",
            {
                "DATA_URI": DATA,
                "MODEL_URI": FINAL_CHECKPOINTS,
                "EXPORT_URI": EXPORT_URI,
            },
        ),
        lineage_inputs=[DATA, FINAL_CHECKPOINTS],
        lineage_outputs=[MODEL_DIR],  # the version's served model
        kubernetes_conn_id=CONN_ID,
        poll_interval=1,
    )

    # [START howto_inference_service_operator]
    serve = InferenceServiceOperator(
        task_id="serve",
        name=SERVICE,
        storage_uri="{{ ti.xcom_pull(task_ids='publish')['locations']['model'] }}",  # the version, not latest/
        model_format="pytorch",
        min_replicas=1,
        max_replicas=2,
        scale_metric="cpu",
        scale_target=70,
        smoke_request="{{ ti.xcom_pull(task_ids='evaluate')['metrics']['smoke_request'] | tojson }}",
        rollback_on_failure=True,
        kubernetes_conn_id=CONN_ID,
        poll_interval=1,
        inlets=[MODEL_ASSET],
        outlets=[SERVED_ASSET],  # the operator adds the served URL and model to the event
    )
    # [END howto_inference_service_operator]

    prepare >> sweep >> train >> evaluate
    promotion_gate(sweep.output, train.output, evaluate.output) >> serve  # publish ... promoted: nightly_promotion
