"""A sweep resumed only from its stored history, as after a worker or triggerer restart, in this process against the
local cluster: a second ``execute`` of a fresh operator judges the groups its trials ran (which finished while nobody
watched), every wait runs on a trigger rebuilt from its serialized form, and no trial's group is created twice
(counted from the cluster's request log)."""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_elastic import Checkpointing, Role, TrainingGroup
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.training.state import group_status
from tests.support.airflow_env import kubernetes_connection
from tests.support.paths import ROOT
from tests.support.training_group_helpers import JOBSET_RESOURCE, JOBSETS

CONN_ID = "sweep_reentry"


class StateStore(dict):
    """``task_state_store`` as the Task SDK keeps it: JSON values."""

    def set(self, key: str, value: Any, **_: Any) -> None:
        self[key] = json.loads(json.dumps(value))


class TaskInstance:
    dag_id, task_id, run_id, map_index, try_number, start_date = "reentry", "sweep", "run-1", -1, 1, None


def operator(namespace: str, checkpoints: Path) -> Any:
    """A fresh operator instance, as a new worker process builds it from the DAG file."""
    from airflow_elastic.sweeps import HyperparameterSweepOperator, uniform

    group = TrainingGroup(
        name="sw-re",
        image="python:3.11-slim",
        roles=[Role("leader", command=["python", str(ROOT / "tests" / "data" / "scripts" / "train_sweep.py")])],
        checkpoint=Checkpointing(str(checkpoints)),
        env={"PYTHONPATH": str(ROOT), "EPOCHS": "2", "EPOCH_SECONDS": "0.1"},
    )
    return HyperparameterSweepOperator(
        task_id="sweep",
        group=group,
        space={"x": uniform(0.0, 1.0)},
        objective="loss",
        algorithm="random",
        seed=1,
        max_trials=4,
        max_parallel=2,
        namespace=namespace,
        kubernetes_conn_id=CONN_ID,
        poll_interval=0.2,
    )


def event_of(trigger: Any) -> dict[str, Any]:
    """Run the trigger the task deferred on as a (restarted) triggerer does: rebuilt from ``serialize()``."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))

    async def first() -> dict[str, Any]:
        async for event in rebuilt.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(first(), 120))


def finished_unwatched(api_client: Any, namespace: str, count: int) -> None:
    """Wait (bounded) until ``count`` JobSets of the namespace have finished."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    for _ in range(600):
        items = api.list_namespaced_custom_object(*JOBSETS[:2], namespace, JOBSETS[2])["items"]
        done = [js for js in items if group_status(js).terminal]
        if len(done) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{count} JobSets did not finish: {[js['metadata']['name'] for js in items]}")


def test_a_resumed_sweep_adopts_its_running_trials_and_reruns_no_finished_one(
    local_cluster: LocalCluster, namespace: str, api_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    connection = kubernetes_connection(local_cluster.kubeconfig, namespace)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    context = {"ti": TaskInstance(), "task_state_store": StateStore()}
    mark = local_cluster.request_count()

    def created() -> int:
        return len(local_cluster.requests(since=mark, verb="create", resource=JOBSET_RESOURCE, namespace=namespace))

    with pytest.raises(TaskDeferred):
        operator(namespace, tmp_path).execute(context)
    assert created() == 2  # max_parallel trials, recorded before their groups were created
    # The worker died while deferred, and both trials finished while nobody watched; the next try runs execute()
    # again from the stored history only: it must judge those groups, not train the trials again.
    finished_unwatched(api_client, namespace, 2)
    with pytest.raises(TaskDeferred) as deferred:
        operator(namespace, tmp_path).execute(context)
    assert created() == 2, "a resumed sweep must judge its trials' groups, not create them again"
    trigger, resumptions = deferred.value.trigger, 0
    while True:
        resumptions += 1
        try:
            result = operator(namespace, tmp_path).execute_complete(context, event_of(trigger))
            break
        except TaskDeferred as again:
            trigger = again.trigger
    assert [t["state"] for t in result["trials"]] == ["complete"] * 4, result["trials"]
    assert created() == 4 and len({t["jobset"] for t in result["trials"]}) == 4
    assert resumptions >= 2
