"""``TrainingGroupSensor`` against the local cluster: poke mode with the blocking hook, and the deferrable path
(``execute`` raises ``TaskDeferred`` with the trigger; the trigger's event goes to ``execute_complete``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.hooks import JobSetHook
from airflow_elastic.sensors import TrainingGroupSensor
from airflow_elastic.training.render import render_jobset
from airflow_elastic.triggers.training_group import TrainingGroupTrigger
from tests.support.cluster import CONN_ID

METRICS = "import json, os; open(os.environ['LOCALCLUSTER_TERMINATION_LOG'], 'w').write(json.dumps({'acc': 0.9}))"


def submit(hook: JobSetHook, namespace: str, name: str, code: str) -> dict[str, Any]:
    group = TrainingGroup("sense", [Role("leader", command=["python", "-c", code])], image="python:3")
    return hook.create_jobset(namespace, render_jobset(group, name=name, namespace=namespace))


def sensor(**kwargs: Any) -> TrainingGroupSensor:
    return TrainingGroupSensor(task_id="wait", kubernetes_conn_id=CONN_ID, poke_interval=0.2, timeout=60, **kwargs)


def test_poke_mode_waits_for_success(hook, connection, namespace):
    created = submit(hook, namespace, "poked", f"import time; time.sleep(1); {METRICS}")
    result = sensor(name="poked", deferrable=False, metrics_role="leader").execute({})
    assert result == {
        "name": "poked",
        "namespace": namespace,  # from the connection
        "uid": created["metadata"]["uid"],
        "phase": "Succeeded",
        "restarts": 0,
        "metrics": {"acc": 0.9},
    }


def test_poke_mode_fails_clearly(hook, connection, namespace):
    submit(hook, namespace, "broken", "import sys; print('nan loss', file=sys.stderr); sys.exit(7)")
    with pytest.raises(AirflowFailException) as failed:
        sensor(name="broken", deferrable=False).execute({})
    message = str(failed.value)
    assert f"JobSet {namespace}/broken failed" in message
    assert "role leader" in message and "exit code 7" in message and "nan loss" in message


def test_poke_mode_soft_fail_skips(hook, connection, namespace):
    submit(hook, namespace, "broken", "import sys; sys.exit(1)")
    with pytest.raises(AirflowSkipException):
        sensor(name="broken", deferrable=False, soft_fail=True).execute({})


def test_missing_group_fails(connection, namespace):
    with pytest.raises(AirflowFailException, match=f"JobSet {namespace}/nothing does not exist"):
        sensor(name="nothing", deferrable=False).execute({})


def test_deferrable_defers_to_the_trigger_and_completes(hook, connection, namespace):
    created = submit(hook, namespace, "deferred", f"import time; time.sleep(2); {METRICS}")
    task = sensor(name="deferred", metrics_role="leader")
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        task.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, TrainingGroupTrigger)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_elastic.triggers.training_group.TrainingGroupTrigger"
    assert (kwargs["name"], kwargs["namespace"], kwargs["kubernetes_conn_id"]) == ("deferred", namespace, CONN_ID)
    wait = kwargs["wait"]
    assert (kwargs["on_kill_action"], wait["metrics_role"], wait["poll_interval"]) == ("keep", "leader", 0.2)
    assert kwargs["connection_extras"]["namespace"] == namespace
    assert before + 60 <= wait["deadline"] <= time.time() + 60
    assert deferred.value.timeout.total_seconds() >= 60

    async def fire() -> dict[str, Any]:
        (payload,) = [event.payload async for event in trigger.run()]
        return payload

    event = asyncio.run(asyncio.wait_for(fire(), 120))
    result = task.execute_complete({}, event=event)
    assert (result["uid"], result["phase"], result["metrics"]) == (
        created["metadata"]["uid"],
        "Succeeded",
        {"acc": 0.9},
    )


def test_deferrable_returns_at_once_when_already_done(hook, connection, namespace):
    submit(hook, namespace, "done", "pass")
    poke = sensor(name="done", deferrable=False)
    poke.execute({})  # wait for it to finish
    assert sensor(name="done").execute({})["phase"] == "Succeeded"
