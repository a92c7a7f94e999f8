"""``TrainingGroupOperator`` without a cluster: arguments, the trigger's verdicts, kill and finish actions."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout, TaskDeferred

from airflow_elastic import SpecError
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.identity import Submission
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook
from tests.support.operators import GROUP, context, operator

FAILURE = {
    "pod": "tg-abc-leader-0-0-xyz12",
    "role": "leader",
    "reason": "Error",
    "exit_code": 3,
    "message": "diverged",
    "attempt": 0,
}


def resume(op: TrainingGroupOperator, status: str, hook: FakeHook, **fields):
    """Create the group through ``execute`` (it defers), then resume with a trigger event."""
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    event = GroupEvent(status, trigger.name, trigger.namespace, uid=trigger.uid, **fields)
    return trigger, op.execute_complete(ctx, event.to_payload())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "group"),
        ({"group": GROUP, "jobset": {"kind": "JobSet"}}, "group"),
        ({"group": GROUP, "on_kill_action": "explode"}, "on_kill_action"),
        ({"group": GROUP, "on_finish_action": "archive"}, "on_finish_action"),
        ({"group": GROUP, "log_role": "chief"}, "log_role"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs, field):
    with pytest.raises(SpecError) as raised:
        TrainingGroupOperator(task_id="t", **kwargs)
    assert raised.value.problems[0][0] == field


def test_execute_submits_pushes_identity_and_defers_with_deadlines():
    hook = FakeHook()
    op = operator(hook, namespace="ns", execution_timeout=timedelta(minutes=5), startup_timeout=60, poll_interval=2)
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger, timeout = deferred.value.trigger, deferred.value.timeout
    assert deferred.value.method_name == "execute_complete" and not deferred.value.kwargs
    assert ctx["ti"].xcoms == {"jobset_name": trigger.name, "jobset_namespace": "ns"}
    assert (trigger.settings.metrics_role, trigger.log_role, trigger.on_kill_action) == ("leader", "leader", "delete")
    assert trigger.settings.deadline is not None and trigger.settings.startup_deadline is not None
    assert timeout > timedelta(minutes=5)  # past the trigger's own deadline, so its "timeout" event comes first
    [jobset] = hook.jobsets.values()
    assert jobset["spec"]["ttlSecondsAfterFinished"] == 86400
    assert jobset["metadata"]["labels"]["airflow-elastic.io/task-id"] == "train"


def test_success_returns_the_result():
    hook = FakeHook()
    trigger, result = resume(
        operator(hook, namespace="ns"),
        "succeeded",
        hook,
        phase="Succeeded",
        restarts=3,
        restarts_counted=1,
        metrics={"loss": 0.1},
    )
    attempts = result.pop("attempts")
    assert {
        k: v for k, v in result.items() if k not in ("gpu_hours", "spot_share", "lost_steps", "lost_gpu_hours")
    } == {
        "name": trigger.name,
        "namespace": "ns",
        "uid": trigger.uid,
        "backend": "jobset",
        "state": "Succeeded",
        "restarts": 3,
        "preemptions": 2,
        "failures": 1,
        "checkpoint": "memory://bucket/tg",
        "metrics": {"loss": 0.1},
    }
    assert [(a["uid"], a["outcome"], a["preemptions"], a["failures"]) for a in attempts] == [
        (trigger.uid, "succeeded", 2, 1)
    ]
    assert (result["gpu_hours"], result["lost_steps"], result["lost_gpu_hours"]) == (0, None, None)
    assert ("delete", trigger.name) not in hook.calls  # kept: the TTL removes it


@pytest.mark.parametrize(("action", "deleted"), [("keep", False), ("delete", True), ("delete_succeeded", True)])
def test_on_finish_action_after_success(action, deleted):
    hook = FakeHook()
    trigger, _ = resume(operator(hook, namespace="ns", on_finish_action=action), "succeeded", hook)
    assert (("delete", trigger.name) in hook.calls) is deleted


def test_failure_names_pod_role_reason_and_exit_code():
    hook = FakeHook(events=[{"type": "Warning", "reason": "BackOff", "involvedObject": {"name": "tg-x"}}])
    op = operator(hook, namespace="ns", on_finish_action="delete_succeeded")
    with pytest.raises(AirflowException) as raised:
        resume(op, "failed", hook, reason="FailedJobs", message="jobset failed", failures=(FAILURE,))
    message = str(raised.value)
    assert "failed (FailedJobs: jobset failed)" in message
    assert "pod tg-abc-leader-0-0-xyz12 (role leader, attempt 0) Error (exit code 3): diverged" in message
    assert not [c for c in hook.calls if c[0] == "delete"]  # failed groups stay for inspection


def test_timeout_deletes_the_group_and_times_out():
    hook = FakeHook()
    with pytest.raises(AirflowTaskTimeout):
        resume(operator(hook, namespace="ns", execution_timeout=timedelta(seconds=1)), "timeout", hook)
    assert hook.jobsets == {}


def test_startup_timeout_deletes_the_group_and_gives_the_diagnosis():
    hook = FakeHook()
    with pytest.raises(AirflowException, match=r"did not start within 60 s.*Unschedulable: 0/4 nodes"):
        resume(
            operator(hook, namespace="ns", startup_timeout=60),
            "startup_timeout",
            hook,
            message="pod p is Unschedulable: 0/4 nodes are available",
        )
    assert hook.jobsets == {}


def test_missing_and_error_fail():
    hook = FakeHook()
    with pytest.raises(AirflowException, match="disappeared"):
        resume(operator(hook, namespace="ns"), "missing", hook)
    hook = FakeHook()
    op = operator(hook, namespace="ns")
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    hook.finish("ns", deferred.value.trigger.name)  # no longer running: no re-deferral
    event = GroupEvent("error", deferred.value.trigger.name, "ns", message="403 Forbidden")
    with pytest.raises(AirflowException, match="403 Forbidden"):
        op.execute_complete(ctx, event.to_payload())


def test_an_erring_trigger_is_redeferred_while_the_group_runs():
    hook = FakeHook()
    op = operator(hook, namespace="ns")
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    event = GroupEvent("error", deferred.value.trigger.name, "ns", message="connection reset")
    with pytest.raises(TaskDeferred):
        op.execute_complete(ctx, event.to_payload())


@pytest.mark.parametrize(("action", "deleted"), [("delete", True), ("keep", False)])
def test_on_kill(action, deleted):
    hook = FakeHook()
    op = operator(hook, namespace="ns", on_kill_action=action, deferrable=False)
    op._current = Submission("tg-abcdef", "ns", 0)
    op.on_kill()
    assert (("delete", "tg-abcdef") in hook.calls) is deleted


def test_a_users_manifest_gets_a_run_name_and_labels():
    hook = FakeHook()
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "mine", "labels": {"team": "ml"}},
        "spec": {"replicatedJobs": [{"name": "main", "replicas": 1, "template": {"spec": {"template": {}}}}]},
    }
    op = TrainingGroupOperator(task_id="t", jobset=manifest, namespace="ns")
    op.hook = lambda: hook  # type: ignore[method-assign]
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    assert deferred.value.trigger.settings.metrics_role == "main"
    [jobset] = hook.jobsets.values()
    assert jobset["metadata"]["name"].startswith("mine-") and jobset["metadata"]["namespace"] == "ns"
    assert jobset["metadata"]["labels"]["team"] == "ml"
    pod_labels = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["airflow-elastic.io/task-id"] == "train"  # the task instance's
    assert manifest["metadata"]["name"] == "mine"  # the user's dict is not modified


def test_importing_the_operators_loads_no_kubernetes_client():
    code = (
        "import sys\n"
        "from airflow_elastic.operators import TrainingGroupOperator\n"
        "from airflow_elastic import Role, TrainingGroup\n"
        "TrainingGroupOperator(task_id='t', group=TrainingGroup('t', [Role('a', command=['x'])], image='i'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kubernetes_asyncio')\n"
        "      or m.startswith('airflow.providers.cncf.kubernetes.hooks')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_every_waits_output_reaches_the_workers_log_however_often_the_task_defers(monkeypatch):
    """The triggerer's log file of a wait is overwritten by the next wait of the try; each wait's lines come back
    in its event and the resumed operator writes them (under a header) to the worker's log, which is appended."""
    import asyncio

    from airflow_elastic.hooks.errors import Forbidden
    from airflow_elastic.waiting import trigger_output
    from tests.support.operator_fakes import Logger
    from tests.support.trigger_fakes import FakeHook as Cluster
    from tests.support.trigger_fakes import condition, jobset, pod

    def in_the_triggerer(trigger, log: str, last_list: int, end) -> dict:
        """Run the deferred ``trigger`` against a cluster whose leader logged ``log``, as another process."""
        cluster = Cluster()
        cluster.jobsets = {trigger.name: jobset(trigger.name, uid=trigger.uid)}
        leader = pod(trigger.name, "leader", phase="Running")
        cluster.pods, cluster.logs = [leader], {leader["metadata"]["name"]: log}
        cluster.on_list = lambda n: end(cluster) if n == last_list else None
        trigger.hook, trigger.poll_interval = cluster, 0.01

        async def first():
            async for event in trigger.run():
                return event.payload

        boot = trigger_output._BOOT
        monkeypatch.setattr(trigger_output, "_BOOT", "the triggerer")
        try:
            return asyncio.run(asyncio.wait_for(first(), 20))
        finally:
            monkeypatch.setattr(trigger_output, "_BOOT", boot)

    def refused(cluster) -> None:  # the trigger fails while the group runs: the operator waits again
        cluster.list_errors.append(Forbidden(403, "Forbidden", "jobsets is forbidden"))

    def completed(cluster) -> None:
        [(name, found)] = cluster.jobsets.items()
        cluster.jobsets[name] = jobset(name, uid=found["metadata"]["uid"], conditions=[condition("Completed")])

    hook = FakeHook()
    op = operator(hook, namespace="ns")
    op._cached_logger = Logger()
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    first = in_the_triggerer(deferred.value.trigger, "epoch 1\nepoch 2\n", 4, refused)
    assert first["status"] == "error"
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete(ctx, first)
    hook.finish("ns", deferred.value.trigger.name)
    second = in_the_triggerer(deferred.value.trigger, "epoch 1\nepoch 2\nepoch 3\n", 3, completed)
    assert op.execute_complete(ctx, second)["state"] == "Succeeded"
    lines = op._cached_logger.lines
    headers = [i for i, line in enumerate(lines) if line.startswith("Output shown while the task was deferred")]
    assert len(headers) == 2, lines
    pod_name = f"{deferred.value.trigger.name}-leader-0-0-abcde"
    one, two = (lines[i + 1 : i + 1 + n] for i, n in zip(headers, (2, 3), strict=True))
    assert one == [f"[{pod_name}] epoch 1", f"[{pod_name}] epoch 2"]
    assert two == [f"[{pod_name}] epoch {i}" for i in (1, 2, 3)]
