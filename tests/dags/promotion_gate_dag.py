"""The DAGs of ``tests/deployment/test_real_processes.py``'s promotion test: the flagship's promotion gate, fed
evaluations as the run's input, and a DAG scheduled on the model Asset the gate emits.

* ``promotion_gate``: ``nightly_promotion.promotion_gate`` (``dags/nightly_promotion.py``, the very tasks
  ``nightly_training`` runs: ``publish``, ``under_review``, ``approve``, ``adopt``, ``promoted``), then ``serve``, an
  ``EmptyOperator`` standing for the flagship's rollout (skipped unless the version was promoted). Each run's conf
  gives what ``sweep``, ``train`` and ``evaluate`` would have returned (rendered as native objects), and a storage
  ``root`` of its own whose ``latest/`` holds the incumbent.
* ``promotion_consumer``: scheduled on ``nightly_training.digits.model``, as ``example_batch_scoring`` is; its one
  ``EmptyOperator`` needs no worker, so a run is cheap proof that a promotion's event started it.

It runs in a DAGs folder of its own, beside a symlink to ``dags/nightly_promotion.py`` (imported as the flagship
imports it).
"""

from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param
from nightly_promotion import FILTERS, MODEL_ASSET, REVIEW_MARGIN, promotion_gate

GATE_DAG_ID = "promotion_gate"
CONSUMER_DAG_ID = "promotion_consumer"

with DAG(
    GATE_DAG_ID,
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,  # "{{ params.evaluation }}" is the dict, as evaluate's XCom would be
    user_defined_filters=FILTERS,
    params={
        "root": Param("/nonexistent", type="string"),
        "tolerance": Param(0.0, type="number", minimum=0),
        "review_margin": Param(REVIEW_MARGIN, type="number", minimum=0),
        "sweep": Param({}, type="object"),
        "train": Param({}, type="object"),
        "evaluation": Param({}, type="object"),
    },
    tags=["test"],
):
    promoted = promotion_gate("{{ params.sweep }}", "{{ params.train }}", "{{ params.evaluation }}")
    promoted >> EmptyOperator(task_id="serve")

with DAG(CONSUMER_DAG_ID, schedule=[MODEL_ASSET], catchup=False, tags=["test"]):
    EmptyOperator(task_id="score")
