"""Test DAGs: ``TrainingGroupOperator`` against the local cluster, run with ``airflow dags test``.

The test chooses the namespace (``--conf '{"namespace": ...}'``) and provides the connection
(``AIRFLOW_CONN_LOCAL_CLUSTER``). The session's local cluster has no image map, so every container names its
command: ``python`` is the cluster's interpreter, running the example trainer ``dags/scripts/train_tiny.py``.
Groups are kept (``on_finish_action="keep"``) so the test can read their outcome back from the cluster.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_elastic import FailurePolicy, Resources, Role, SuccessPolicy, TrainingGroup
from airflow_elastic.operators import TrainingGroupOperator

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["python", str(ROOT / "dags" / "scripts" / "train_tiny.py")]
IMAGE = "ghcr.io/airflow-elastic/tiny-trainer:0.1.0"  # recorded by the local cluster, never pulled
SLEEP = ["python", "-c", "import time; time.sleep(300)"]

PARAMS = {
    "namespace": Param("default", type="string"),
    "conn_id": Param("local_cluster", type="string"),
    "steps": Param(4, type="integer"),
}
COMMON = {
    "namespace": "{{ params.namespace }}",
    "kubernetes_conn_id": "{{ params.conn_id }}",
    "poll_interval": 0.5,
    "startup_timeout": 60,
}


def tiny(name: str) -> TrainingGroup:
    """The example tiny trainer (a leader and two workers), steps and a marker templated per run."""
    return TrainingGroup(
        name=name,
        image=IMAGE,
        roles=[Role("leader", command=TRAIN), Role("worker", replicas=2, command=TRAIN)],
        success=SuccessPolicy(roles=("leader",)),
        env={"TRAIN_STEPS": "{{ params.steps }}", "RUN_MARKER": "{{ dag.dag_id }}/{{ task.task_id }}"},
    )


# A finished group: success with metrics (deferrable and sync), the `any` success policy, a user's manifest.
with DAG("training_group_outcomes", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    TrainingGroupOperator(task_id="train_deferrable", group=tiny("tg-defer"), **COMMON)
    TrainingGroupOperator(task_id="train_sync", group=tiny("tg-sync"), deferrable=False, **COMMON)
    # Rank 0 of the workers finishes at once, rank 1 would sleep: `any` succeeds with the first and stops the rest.
    any_group = TrainingGroup(
        name="tg-any",
        image=IMAGE,
        roles=[
            Role(
                "worker",
                replicas=2,
                command=["python", "-c", "import os, time; time.sleep(0 if os.environ['AE_RANK'] == '0' else 300)"],
            )
        ],
        success=SuccessPolicy(mode="any"),
    )
    TrainingGroupOperator(task_id="train_any", group=any_group, **COMMON)
    TrainingGroupOperator(
        task_id="train_manifest",
        jobset="""
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: tg-manifest
spec:
  replicatedJobs:
    - name: main
      replicas: 1
      template:
        spec:
          backoffLimit: 0
          template:
            spec:
              restartPolicy: Never
              containers:
                - name: main
                  image: python:3.11-slim
                  env:
                    - {name: STEPS, value: "{{ params.steps }}"}
                  command:
                    - python
                    - -c
                    - |
                      import json, os
                      print("manifest ran with", os.environ["STEPS"], "steps")
                      with open(os.environ["LOCALCLUSTER_TERMINATION_LOG"], "w") as f:
                          json.dump({"steps": int(os.environ["STEPS"])}, f)
""",
        **COMMON,
    )


# Failures: a crashing leader (both modes), a group that cannot be scheduled, execution_timeout while waiting.
with DAG(
    "training_group_failures",
    schedule=None,
    catchup=False,
    params=PARAMS,
    default_args={"retries": 0},
    tags=["test"],
):
    crash = TrainingGroup(
        name="tg-crash",
        image=IMAGE,
        roles=[
            Role("leader", command=["python", "-c", "print('diverged at step 3'); raise SystemExit(3)"]),
            Role("worker", command=SLEEP),
        ],
        failure=FailurePolicy(max_failures=0),
    )
    TrainingGroupOperator(task_id="crash_deferrable", group=crash, **COMMON)
    TrainingGroupOperator(task_id="crash_sync", group=crash, deferrable=False, **COMMON)
    greedy = TrainingGroup(
        name="tg-greedy", image=IMAGE, roles=[Role("leader", command=SLEEP, resources=Resources(gpu=1000))]
    )
    TrainingGroupOperator(task_id="unschedulable", group=greedy, **{**COMMON, "startup_timeout": 3})
    slow = TrainingGroup(name="tg-slow", image=IMAGE, roles=[Role("leader", command=SLEEP)])
    TrainingGroupOperator(task_id="deadline_deferrable", group=slow, execution_timeout=timedelta(seconds=6), **COMMON)
    TrainingGroupOperator(
        task_id="deadline_sync", group=slow, deferrable=False, execution_timeout=timedelta(seconds=6), **COMMON
    )


# A create whose reply was lost: `precreate` creates the JobSet `train_adopt` will derive, with its labels, so
# `train_adopt`'s create gets 409 and it must adopt that group instead of failing or starting a second one.
# The trainer waits a few seconds first, so the group is still running when `train_adopt` finds it (a finished
# group is never adopted: the task would train again under the next name).
LATE_TRAIN = [
    "python",
    "-c",
    "import runpy, sys, time; time.sleep(6); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
    TRAIN[1],
]
with DAG("training_group_adoption", schedule=None, catchup=False, params=PARAMS, tags=["test"]):
    adopt_group = tiny("tg-adopt").with_changes(
        roles=(Role("leader", command=LATE_TRAIN), Role("worker", replicas=2, command=LATE_TRAIN))
    )

    @task
    def precreate(**context) -> str:
        from airflow_elastic.hooks.jobset import JobSetHook
        from airflow_elastic.operators.identity import TaskIdentity
        from airflow_elastic.training.render import render_jobset
        from airflow_elastic.training.templating import render_group

        ti = context["ti"]
        owner = TaskIdentity(ti.dag_id, "train_adopt", ti.run_id)
        group = render_group(adopt_group, lambda value: context["task"].render_template(value, context))
        namespace = context["params"]["namespace"]
        manifest = render_jobset(
            group,
            name=owner.name(group.name, 0),
            namespace=namespace,
            labels=owner.labels(),
            ttl_seconds_after_finished=86400,
        )
        created = JobSetHook(context["params"]["conn_id"]).create_jobset(namespace, manifest)
        return created["metadata"]["uid"]

    precreate() >> TrainingGroupOperator(task_id="train_adopt", group=adopt_group, **COMMON)
