"""``TrainingGroupSensor`` without a cluster: cheap import, templating, and how trigger events end the task."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import jinja2
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_elastic.sensors import TrainingGroupSensor
from airflow_elastic.training.state import GroupEvent

SCRIPT = """
import sys
import airflow.sdk
before = set(sys.modules)
import airflow_elastic.sensors, airflow_elastic.triggers
from airflow_elastic.sensors import TrainingGroupSensor
TrainingGroupSensor(task_id="w", name="g")
new = sorted(m for m in set(sys.modules) - before
             if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio", "aiohttp")
             or m.startswith(("airflow.providers.cncf.kubernetes.hooks", "airflow_elastic.hooks.jobset",
                              "airflow_elastic.hooks.async_jobset", "airflow_elastic.triggers.training_group")))
print(",".join(new))
"""


def test_importing_the_sensor_loads_no_kubernetes_client():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"loaded at import: {out.stdout.strip()}"


class _TI:
    def xcom_pull(self, task_ids: str) -> dict[str, Any]:
        return {"train": {"name": "train-abc123", "namespace": "ml"}}[task_ids]


def test_name_and_namespace_come_from_the_operators_xcom():
    task = TrainingGroupSensor(
        task_id="wait",
        name="{{ ti.xcom_pull(task_ids='train')['name'] }}",
        namespace="{{ ti.xcom_pull(task_ids='train')['namespace'] }}",
    )
    task.render_template_fields({"ti": _TI()}, jinja2.Environment())
    assert (task.name, task.namespace) == ("train-abc123", "ml")


def event(status: str, **fields: Any) -> dict[str, Any]:
    return GroupEvent(status, "g", "ml", **fields).to_payload()  # type: ignore[arg-type]


def test_succeeded_event_is_the_result():
    result = TrainingGroupSensor(task_id="w", name="g").execute_complete(
        {}, event=event("succeeded", uid="u", phase="Succeeded", restarts=1, metrics={"loss": 1.0})
    )
    assert result == {
        "name": "g",
        "namespace": "ml",
        "uid": "u",
        "phase": "Succeeded",
        "restarts": 1,
        "metrics": {"loss": 1.0},
    }


@pytest.mark.parametrize(
    ("status", "exception", "text"),
    [
        ("timeout", AirflowSensorTimeout, "Sensor has timed out: JobSet ml/g"),
        ("missing", AirflowFailException, "JobSet ml/g does not exist"),
        ("failed", AirflowFailException, "JobSet ml/g failed: FailedJobs"),
        ("error", AirflowException, "Could not watch JobSet ml/g: boom"),
    ],
)
def test_other_events_raise(status, exception, text):
    failure = {"pod": "g-leader-0-0-x", "role": "leader", "reason": "Error", "exit_code": 2, "message": "oom"}
    payload = event(status, reason="FailedJobs", message="boom", failures=(failure,))
    with pytest.raises(exception, match=text) as raised:
        TrainingGroupSensor(task_id="w", name="g").execute_complete({}, event=payload)
    if status == "failed":
        assert "pod g-leader-0-0-x (role leader, attempt 0) Error (exit code 2): oom" in str(raised.value)
