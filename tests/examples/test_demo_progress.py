"""`make demo`'s progress lines (`tools/demo_progress.py`) from `airflow dags test` output as Airflow prints it."""

from __future__ import annotations

import sys

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from demo_progress import Progress

T = "2026-12-01T13:47:41.531991Z"
TRIGGER = "[airflow_elastic.triggers.training_group.TrainingGroupTrigger] loc=logs.py:201"
OPERATOR = "[airflow.task.operators.airflow_elastic.sweeps.operator.HyperparameterSweepOperator] loc=operator.py:1"
STATE = "[airflow.api_fastapi.execution_api.routes.task_instances] correlation_id=1 loc=task_instances.py:485"


def lines(*messages: str) -> list[str]:
    return [f"{T} [info     ] {m}" for m in messages]


def test_progress_shows_each_task_and_only_the_lines_that_say_how_far_it_got():
    shown: list[str] = []
    clock = iter(range(0, 1000, 5))
    progress = Progress(["prepare", "sweep", "train"], emit=shown.append, clock=lambda: next(clock))
    output = [
        *lines("[DAG TEST] starting task_id=prepare map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501"),
        *lines(f"[prepare-digits-abc-0-x1] wrote train 1077 rows, val 360 rows to /d [x] {TRIGGER}"),
        *lines(f"[prepare-digits-abc-0-x1] importing numpy {TRIGGER}"),
        *lines(f"Task instance state updated    {STATE} new_state=success rows_affected=1"),
        *lines("[DAG TEST] end task task_id=prepare map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1563"),
        *lines("[DAG TEST] starting task_id=sweep map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501"),
        *lines(f"Task instance state updated    {STATE} new_state=deferred rows_affected=1"),
        *lines(f"trial 3/6 done: val_loss=0.41, best 0.38 (trial 1); 2 running {OPERATOR}"),
        *lines(f"[trial 4] [digits-t4-x-leader-0-0-y] step 1: val_loss=0.5 {TRIGGER}"),  # a trial's log
        *lines("[DAG TEST] starting task_id=sweep map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501"),
        *lines(f"trial 3/6 done: val_loss=0.41, best 0.38 (trial 1); 2 running {OPERATOR}"),  # re-run after resume
        f"{T} [error    ] Task failed with exception [task] loc=task_runner.py:1",
        "a traceback line without the log format",
        *lines(f"Task instance state updated    {STATE} new_state=success rows_affected=1"),
        *lines("[DAG TEST] end task task_id=sweep map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1563"),
    ]
    for line in output:
        progress.feed(line)
    assert shown == [
        "[prepare] started (task 1/3)",
        "[prepare] wrote train 1077 rows, val 360 rows to /d [x]",  # brackets in a message are the message's
        "[prepare] success after 5 s",
        "[sweep] started (task 2/3)",
        "[sweep] trial 3/6 done: val_loss=0.41, best 0.38 (trial 1); 2 running",
        "[sweep] error: Task failed with exception",
        "[sweep] success after 5 s",
    ]


def test_the_final_training_shows_every_25th_epoch_and_its_quorum():
    shown: list[str] = []
    progress = Progress(["train"], emit=shown.append, clock=lambda: 0.0)
    pod = "[digits-final-abc-trainer-0-0-x]"
    torchft = "2026-12-02T12:37:40.1 [INFO] [torchft::manager] - [Replica train_digits_ft_0]"
    output = [
        *lines("[DAG TEST] starting task_id=train map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501"),
        *lines(f"{pod} replica group 0: of 2, training epochs 1..200 (16 steps each) with {{}} {TRIGGER}"),
        *lines(f"{pod} {torchft} Finished quorum for group_rank 0 {TRIGGER}"),  # torchft's own chatter
        *lines(f"{pod} replica group 0: step 2: quorum of 2 replica group(s) {TRIGGER}"),
        *(lines(f"{pod} step {n}: val_loss=0.123456 {TRIGGER}")[0] for n in range(1, 51)),
        *lines(f"{pod} replica group 0: step 129: quorum of 1 replica group(s) {TRIGGER}"),
        *lines(f"{pod} replica group 0: healed from a live peer at step 110 (epoch 6) {TRIGGER}"),
        *lines(f"{pod} resumed from epoch 10 (/c/step-000000010) {TRIGGER}"),  # a whole-group restart
        *lines(f"{pod} step 25: val_loss=0.123456 {TRIGGER}"),  # again
    ]
    for line in output:
        progress.feed(line)
    assert shown == [
        "[train] started (task 1/1)",
        "[train] replica group 0: of 2, training epochs 1..200 (16 steps each) with {}",
        "[train] replica group 0: step 2: quorum of 2 replica group(s)",
        "[train] epoch 25: val_loss=0.1235",
        "[train] epoch 50: val_loss=0.1235",
        "[train] replica group 0: step 129: quorum of 1 replica group(s)",
        "[train] replica group 0: healed from a live peer at step 110 (epoch 6)",
        "[train] resumed from epoch 10 (/c/step-000000010)",
    ]


def test_the_rollout_shows_each_awaited_step_once_and_the_smoke_answer():
    shown: list[str] = []
    progress = Progress(["serve"], emit=shown.append, clock=lambda: 0.0)
    trigger = "[airflow_elastic.triggers.inference_service.InferenceServiceTrigger] loc=inference_service.py:1"
    operator = "[airflow.task.operators.airflow_elastic.operators.inference_service.InferenceServiceOperator] loc=x:1"
    smoke = "Smoke request to digits answered: predicted classes [1, 0]; raw reply {'predictions': [[0, 5], [3, 1]]}"
    output = [
        *lines("[DAG TEST] starting task_id=serve map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501"),
        *lines(f"Created InferenceService default/digits serving /m/v1/model {operator}"),
        *lines(f"waiting for digits to serve /m/v1/model: the InferenceService is not Ready {trigger}"),
        *lines(f"waiting for digits to serve /m/v1/model: the InferenceService is not Ready {trigger}"),
        *lines(f"{smoke} {operator}"),
        *lines(f"InferenceService default/digits serves /m/v1/model (1 replicas) at http://x {operator}"),
        *lines(f"Task instance state updated    {STATE} new_state=success rows_affected=1"),
        *lines("[DAG TEST] end task task_id=serve map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1563"),
    ]
    for line in output:
        progress.feed(line)
    assert shown == [
        "[serve] started (task 1/1)",
        "[serve] Created InferenceService default/digits serving /m/v1/model",
        "[serve] waiting for digits to serve /m/v1/model: the InferenceService is not Ready",
        f"[serve] {smoke}",
        "[serve] InferenceService default/digits serves /m/v1/model (1 replicas) at http://x",
        "[serve] success after 0 s",
    ]
