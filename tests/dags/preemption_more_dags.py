"""Test DAGs: a preemption budget spent by resubmissions, and a genuine failure retried by Airflow (local cluster,
``airflow dags test``; ``tests/preemption/test_preemption_more.py`` disrupts them at observed steps).

Both train ``scripts/train_ckpt.py`` (``preemption_dags.group``: leader on-demand, one worker on spot, a complete
checkpoint every step under ``{{ params.base }}/<group>``).

* ``training_group_preemption_budget``: ``FailurePolicy(max_failures=0, max_preemptions=1)`` with the pods annotated
  ``karpenter.sh/do-not-disrupt``, so a Karpenter raw delete is labelled by nothing and fails the JobSet: the first one
  is resubmitted from the checkpoint, the second exhausts the budget and fails the task.
* ``training_group_failure_retry``: ``max_failures=0``, ``retries=1``. The worker runs the trainer under a watcher that
  makes it exit 3 (a genuine failure) as soon as the file ``{{ params.base }}/fail-now`` appears, removing the file
  first, so only the try during which the test creates it fails; Airflow's retry resumes from the checkpoint.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from airflow.sdk import DAG

from airflow_elastic import FailurePolicy, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from tests.dags.preemption_dags import COMMON, PARAMS, TRAIN, group

#: Runs the script given as its first argument, and exits 3 once ``$FAIL_MARKER`` exists (removing it first).
FAIL_ON_MARKER = """\
import os, runpy, sys, threading, time

def watch(marker):
    while not os.path.exists(marker):
        time.sleep(0.05)
    os.remove(marker)
    print(f"failing on {marker}", flush=True)
    os._exit(3)

threading.Thread(target=watch, args=(os.environ["FAIL_MARKER"],), daemon=True).start()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def with_worker_command(training: TrainingGroup, command: list[str]) -> TrainingGroup:
    """``training`` whose worker role runs ``command``."""
    roles = [replace(r, command=command) if r.name == "worker" else r for r in training.roles]
    return training.with_changes(roles=roles)


budget_group = group(
    "pm-budget",
    failure=FailurePolicy(max_failures=0, max_preemptions=1),
    pod_overrides={"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}},
)
retry_group = with_worker_command(
    group("pm-retry", failure=FailurePolicy(max_failures=0), worker_env={"FAIL_MARKER": "{{ params.base }}/fail-now"}),
    ["python", "-c", FAIL_ON_MARKER, *TRAIN[1:]],
)

with DAG("training_group_preemption_budget", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    # 40 steps: the group is still training when the test disrupts it the second time.
    TrainingGroupOperator(
        task_id="budget",
        group=budget_group.with_changes(env={**budget_group.env, "TRAIN_STEPS": "40"}),
        **COMMON,
    )

with DAG("training_group_failure_retry", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    TrainingGroupOperator(
        task_id="retried",
        group=retry_group,
        **{**COMMON, "retries": 1, "retry_delay": timedelta(seconds=1)},
    )
