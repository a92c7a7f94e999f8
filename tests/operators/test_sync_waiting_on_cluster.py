"""Sync mode on the local cluster: the waiter watches the group's pods between looks, so a pod that failed and was
deleted by its JobSet's restart between two looks is judged by its final state (as the trigger's watched cache
judges it), not by the ``Running`` copy the last look listed."""

from __future__ import annotations

from airflow_elastic import FailurePolicy, Role, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator
from tests.support.operator_fakes import StateStore, TaskInstance

#: Fails in the first attempt only; JobSet restarts the group within milliseconds of the exit.
FAIL_ONCE = "import os, sys, time; time.sleep(1.5); sys.exit(3 if os.environ['AE_RESTART_ATTEMPT'] == '0' else 0)"


def test_a_failure_the_jobset_restarted_at_once_is_named_between_two_looks(local_cluster, namespace, connection):
    leader = Role("leader", command=["python", "-c", "import time; time.sleep(4)"])
    worker = Role("worker", command=["python", "-c", FAIL_ONCE])
    group = TrainingGroup("syncfail", [leader, worker], image="python:3.11-slim", failure=FailurePolicy(max_failures=1))
    op = TrainingGroupOperator(
        task_id="train", group=group, kubernetes_conn_id=connection, deferrable=False, poll_interval=3.0
    )
    result = op.execute({"ti": TaskInstance(), "task_state_store": StateStore()})
    assert (result["restarts"], result["failures"]) == (1, 1), result
    [attempt] = result["attempts"]
    # Without the watch the worker's pod was gone by the next look: 'group_restart', the JobSet's own deletion.
    assert attempt["restart_causes"] == {"0": "user_error"}, attempt
