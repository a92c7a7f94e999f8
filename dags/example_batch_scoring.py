"""Batch scoring on each promoted model: a DAG scheduled on the nightly pipeline's model Asset.

``nightly_training``'s ``publish`` emits an event of the Asset ``nightly_training.digits.model`` only when it
promotes a version (docs/concepts/assets.md); each event starts a run of this DAG, whose ``score`` stage scores the
held-out test split of the data that version was trained on, on the CPU pool, with the promoted checkpoint
(``scripts/evaluate_digits.py``). What to score comes from the triggering event's extra: ``checkpoints`` (the
final training's step directories) and ``data`` (URIs). A refused version emits no event, so nothing is scored for it.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset

from airflow_elastic import BatchStage, Placement, Resources
from airflow_elastic.operators import BatchStageOperator
from airflow_elastic.serving import publishing

#: The nightly pipeline's model Asset: the same name and URI as ``nightly_training.MODEL_ASSET`` (the contract).
MODEL_ASSET = Asset(
    name="nightly_training.digits.model", uri=publishing.asset_uri("nightly_training", "models/digits/latest")
)
#: The extra of the newest event that started this run.
EVENT = "(triggering_asset_events.values() | first | last).extra"
SCRIPTS = "{{ var.value.get('nightly_training_scripts', '/workspace/scripts') }}"

with DAG(
    "example_batch_scoring",
    schedule=[MODEL_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "airflow-elastic", "assets"],
) as dag:
    BatchStageOperator(
        task_id="score",
        stage=BatchStage(
            "score-digits",
            image="ghcr.io/airflow-elastic/digits-trainer:0.1.0",
            command=["python", f"{SCRIPTS}/evaluate_digits.py"],
            env={
                "MODEL_URI": f"{{{{ {EVENT}['checkpoints'] }}}}",  # evaluates the newest complete step
                "DATA_URI": f"{{{{ {EVENT}['data'] }}}}",
                "PYTHONUNBUFFERED": "1",
            },
            resources=Resources(cpu="1", memory="1Gi"),
            placement=Placement(node_selector={"airflow-elastic.io/capacity-type": "on-demand"}),
        ),
        inlets=[MODEL_ASSET],
        kubernetes_conn_id="local_cluster",
        poll_interval=1,
    )
