"""RayJobOperator with a fake RayJob hook: one RayJob per task instance (adopted on retry, never a second), the sync
wait and the deferral round trip, the result, and failures that name KubeRay's statuses and the driver log's tail.

The RayJob statuses are KubeRay v1.7.0's (``ray-operator/apis/ray/v1/rayjob_types.go``, set by
``rayjob_controller.go``); the submitter pod is labelled as the Job controller labels the pods of the submitter Job
KubeRay names after the RayJob.
"""

from __future__ import annotations

import copy
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_elastic import SpecError
from airflow_elastic.hooks.errors import NotFound
from airflow_elastic.operators import RayJobOperator
from airflow_elastic.operators.ray import waiting
from airflow_elastic.ray import RayCluster, RayJob
from airflow_elastic.ray.render import render_rayjob
from airflow_elastic.ray.status import RayJobEvent, verdict
from airflow_elastic.ray.tune import TuneSweep
from tests.support.operator_fakes import StateStore, TaskInstance

CLUSTER = RayCluster("tune")
T0, T1 = "2026-12-02T10:00:00Z", "2026-12-02T10:01:40Z"


class FakeRayHook:
    """``RayJobHookProtocol`` over a dict of RayJobs; the driver's log as the submitter pod's."""

    def __init__(self) -> None:
        self.rayjobs: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.pods: list[dict[str, Any]] = []
        self.log = ""
        self.looks = 0
        self.on_look: Any = None  # called with the look number, to move the RayJob along

    def get_namespace(self) -> str | None:
        return None

    def get_connection_extras(self) -> dict[str, Any]:
        return {}

    def create_rayjob(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        obj["metadata"]["uid"] = str(uuid.uuid4())
        self.rayjobs[obj["metadata"]["name"]] = obj
        self.created.append(obj["metadata"]["name"])
        return copy.deepcopy(obj)

    def get_rayjob(self, namespace: str, name: str) -> dict[str, Any]:
        self.looks += 1
        if self.on_look is not None:
            self.on_look(self.looks)
        if name not in self.rayjobs:
            raise NotFound(404, "NotFound", f"rayjobs {name} not found")
        return copy.deepcopy(self.rayjobs[name])

    def list_rayjobs(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(r) for r in self.rayjobs.values()]

    def delete_rayjob(self, namespace: str, name: str, propagation: str = "Foreground") -> dict[str, Any] | None:
        self.deleted.append(name)
        return self.rayjobs.pop(name, None)

    def get_raycluster(self, namespace: str, name: str) -> dict[str, Any]:
        raise NotFound(404, "NotFound", name)

    def get_node(self, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}}

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)

    def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        return []

    def read_pod_log(self, namespace: str, pod: str, *args: Any, **kwargs: Any) -> str:
        return self.log

    def read_pod_log_chunk(self, namespace: str, pod: str, container: str, request: Any) -> str:
        text, self.log = self.log, ""
        return text

    def finish(self, name: str, deployment: str, job: str, reason: str = "", message: str = "") -> None:
        """Set the status KubeRay would, with its submitter pod and the driver's log."""
        self.rayjobs[name]["status"] = {
            "jobDeploymentStatus": deployment,
            "jobStatus": job,
            "jobId": f"{name}-abcde",
            "rayClusterName": f"{name}-kd8s2",
            "startTime": T0,
            "endTime": T1,
            "reason": reason,
            "message": message,
        }
        phase = "Succeeded" if job == "SUCCEEDED" else "Failed"
        self.pods = [
            {
                "metadata": {
                    "name": f"{name}-q7w8e",
                    "uid": "pod-1",
                    "labels": {"batch.kubernetes.io/job-name": name},
                    "creationTimestamp": T0,
                },
                "spec": {"containers": [{"name": "ray-job-submitter"}]},
                "status": {"phase": phase},
            }
        ]


def context(hook: FakeRayHook, ti: TaskInstance | None = None, store: StateStore | None = None) -> dict[str, Any]:
    return {"ti": ti or TaskInstance(task_id="tune"), "task_state_store": store if store is not None else StateStore()}


def operator(hook: FakeRayHook, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> RayJobOperator:
    kwargs = {"poll_interval": 0, **kwargs}
    op = RayJobOperator(task_id="tune", cluster=CLUSTER, entrypoint="python tune.py", **kwargs)
    monkeypatch.setattr(RayJobOperator, "hook", lambda self: hook)
    monkeypatch.setattr(waiting.time, "sleep", lambda s: None)  # the sync wait's polls
    return op


def log_lines(*lines: str) -> str:
    return "".join(f"2026-12-02T10:00:{i:02d}.000000000Z {line}\n" for i, line in enumerate(lines))


def test_sync_success_returns_the_job_id_status_timings_and_the_reported_result(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False)

    def move(look: int) -> None:
        if look == 2:  # the first look is the adoption check, before the create
            name = hook.created[0]
            hook.finish(name, "Complete", "SUCCEEDED")
            hook.log = log_lines("trial 1 done", 'AE_RESULT {"best_accuracy": 0.97}', "bye")

    hook.on_look = move
    result = op.execute(context(hook))
    assert len(hook.created) == 1 and hook.created[0].startswith("tune-") and len(hook.created[0]) == len("tune-") + 6
    assert result["job_id"] == f"{hook.created[0]}-abcde" and result["job_status"] == "SUCCEEDED"
    assert result["deployment_status"] == "Complete" and result["duration"] == 100.0
    assert result["reported"] == {"best_accuracy": 0.97}


def test_sync_failure_names_the_upstream_statuses_and_the_log_tail(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False)

    def move(look: int) -> None:
        if look == 2:
            hook.finish(
                hook.created[0], "Failed", "FAILED", "AppFailed", "Job entrypoint command failed with exit code 1"
            )
            hook.log = log_lines("Traceback (most recent call last):", "ValueError: learning rate must be positive")

    hook.on_look = move
    with pytest.raises(AirflowException) as raised:
        op.execute(context(hook))
    text = str(raised.value)
    assert "jobDeploymentStatus=Failed" in text and "jobStatus=FAILED" in text and "reason=AppFailed" in text
    assert "exit code 1" in text and "(app_failed)" in text and "ValueError: learning rate must be positive" in text


def test_a_retry_adopts_the_running_rayjob_instead_of_creating_a_second(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch)
    store = StateStore()
    with pytest.raises(TaskDeferred):
        op.execute(context(hook, TaskInstance(task_id="tune", try_number=1), store))
    with pytest.raises(TaskDeferred) as deferred:  # the worker died; try 2 runs execute again
        op.execute(context(hook, TaskInstance(task_id="tune", try_number=2), store))
    assert len(hook.created) == 1 and list(hook.rayjobs) == hook.created
    assert deferred.value.trigger.name == hook.created[0] and store["rayjob"]["name"] == hook.created[0]


def test_a_retry_after_a_failed_rayjob_runs_a_new_one(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch)
    store = StateStore()
    with pytest.raises(TaskDeferred):
        op.execute(context(hook, TaskInstance(task_id="tune", try_number=1), store))
    hook.finish(hook.created[0], "Failed", "FAILED", "AppFailed", "exit code 1")
    with pytest.raises(TaskDeferred):
        op.execute(context(hook, TaskInstance(task_id="tune", try_number=2), store))
    assert len(hook.created) == 2 and hook.created[0] != hook.created[1]


def test_deferral_round_trip_success_and_failure(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch)
    ctx = context(hook)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    assert type(trigger).__name__ == "RayJobTrigger" and deferred.value.method_name == "execute_complete"
    assert trigger.uid == hook.rayjobs[trigger.name]["metadata"]["uid"]
    hook.finish(trigger.name, "Complete", "SUCCEEDED")
    done = verdict(hook.rayjobs[trigger.name])
    event = RayJobEvent.from_payload({**done.to_payload(), "reported": {"score": 1.5}})
    result = op.execute_complete(ctx, event.to_payload())
    assert result["job_status"] == "SUCCEEDED" and result["reported"] == {"score": 1.5}

    hook.finish(
        trigger.name, "Failed", "RUNNING", "DeadlineExceeded", "The RayJob has passed the activeDeadlineSeconds."
    )
    failed = verdict(hook.rayjobs[trigger.name])
    payload = {**failed.to_payload(), "log_tail": ["[p] epoch 3/10"]}
    with pytest.raises(AirflowException, match=r"(?s)deadline_exceeded.*activeDeadlineSeconds.*epoch 3/10"):
        op.execute_complete(context(hook), payload)


def test_a_lost_cluster_without_its_pod_named_is_still_charged_and_resubmitted(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch)
    event = RayJobEvent(
        "failed",
        "tune-abcdef",
        "default",
        deployment_status="Failed",
        reason="SubmissionFailed",
        failure={"kind": "cluster_lost", "preemption": True, "description": "the Ray head pod h was lost: spot"},
    )
    store = StateStore()
    store.set("rayjob", {"name": "tune-abcdef", "namespace": "default", "epoch": 0, "uid": "u"})
    with pytest.raises(TaskDeferred):
        op.execute_complete(context(hook, store=store), event.to_payload())
    assert len(hook.created) == 1 and [p["cause"] for p in store["rayjob"]["preemptions"]] == ["cluster_lost"]


def test_the_rayjob_fields_pass_through_and_the_entrypoint_is_templated(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, active_deadline_seconds=600, ttl_seconds_after_finished=60, suspend=True)
    assert {"entrypoint", "runtime_env"} <= set(op.template_fields)
    op.entrypoint, op.runtime_env = "python tune.py --date 2026-12-02", {"env_vars": {"RUN": "x"}}
    with pytest.raises(TaskDeferred):
        op.execute(context(hook))
    spec = next(iter(hook.rayjobs.values()))["spec"]
    assert spec["entrypoint"] == "python tune.py --date 2026-12-02" and '"RUN": "x"' in spec["runtimeEnvYAML"]
    assert (spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"], spec["suspend"]) == (600, 60, True)
    labels = next(iter(hook.rayjobs.values()))["metadata"]["labels"]
    assert labels["airflow-elastic.io/task-id"] == "tune"


def test_job_or_cluster_and_entrypoint():
    job = RayJob(CLUSTER, "python a.py")
    assert RayJobOperator(task_id="t", job=job).entrypoint == "python a.py"
    with pytest.raises(SpecError, match="either job= or cluster="):
        RayJobOperator(task_id="t", job=job, cluster=CLUSTER)
    with pytest.raises(SpecError, match="cluster"):
        RayJobOperator(task_id="t", entrypoint="python a.py")
    with pytest.raises(SpecError, match="entrypoint"):
        RayJobOperator(task_id="t", cluster=CLUSTER)
    assert render_rayjob(job)["kind"] == "RayJob"


# ------------------------------------------------------------------------------------------------ preemptions

RECLAIM = "Pod was terminated in response to imminent node shutdown."  # a GKE spot reclaim: graceful node shutdown


def ray_pod(hook: FakeRayHook, rayjob: str, name: str, node_type: str, how: str) -> dict[str, Any]:
    """A pod of ``rayjob``'s cluster (as ``finish`` names it): ``running``, ``reclaimed`` or ``failed`` (exit 1)."""
    status: dict[str, Any] = {"phase": "Running"}
    if how != "running":
        reason = {"reason": "Terminated", "message": RECLAIM} if how == "reclaimed" else {}
        ended = {"exitCode": 143 if how == "reclaimed" else 1, "reason": "Error", "finishedAt": T1}
        status = {"phase": "Failed", **reason, "containerStatuses": [{"name": "ray", "state": {"terminated": ended}}]}
    pod = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"ray.io/cluster": f"{rayjob}-kd8s2", "ray.io/node-type": node_type},
        },
        "spec": {"nodeName": f"node-{name}"},
        "status": status,
    }
    hook.pods.append(pod)
    return pod


def head_lost(hook: FakeRayHook, name: str) -> None:
    """KubeRay's verdict once the head pod was reclaimed: the submitter lost the head, ``SubmissionFailed``."""
    hook.finish(
        name, "Failed", "RUNNING", "SubmissionFailed", "Job submission has failed. Reason: BackoffLimitExceeded"
    )
    ray_pod(hook, name, f"{name}-head", "head", "reclaimed")


def drive(hook: FakeRayHook, *steps: Any) -> None:
    """Each RayJob created gets the next step once it is looked at: a function of the hook and its name, or a list
    of them (one per look; the last is the verdict)."""
    looks: dict[str, int] = {}

    def move(look: int) -> None:
        for index, name in enumerate(hook.created):
            status = (hook.rayjobs.get(name) or {"status": {"jobDeploymentStatus": "Failed"}}).get("status") or {}
            if status.get("jobDeploymentStatus") in ("Complete", "Failed") or index >= len(steps):
                continue
            step = steps[index]
            if isinstance(step, list):
                looks[name] = looks.get(name, 0) + 1
                step[min(looks[name], len(step)) - 1](hook, name)
            else:
                step(hook, name)

    hook.on_look = move


def succeed(hook: FakeRayHook, name: str) -> None:
    hook.finish(name, "Complete", "SUCCEEDED")


def test_a_lost_head_resubmits_in_the_same_try_and_the_result_lists_the_preemption(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False, max_preemptions=3)
    drive(hook, head_lost, succeed)
    store = StateStore()
    result = op.execute(context(hook, store=store))
    first, second = hook.created
    assert result["name"] == second and hook.deleted == []
    (charged,) = result["preemptions"]
    assert (charged["rayjob"], charged["role"], charged["pod"]) == (first, "head", f"{first}-head")
    assert charged["cause"] == "spot_reclaim" and charged["at"] == T1
    assert store["rayjob"]["preemptions"] == result["preemptions"] and store["rayjob"]["ended"]


def test_past_the_budget_the_task_fails_naming_it_and_every_preemption(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False, max_preemptions=1)
    drive(hook, head_lost, head_lost, succeed)
    with pytest.raises(AirflowFailException) as raised:
        op.execute(context(hook))
    text = str(raised.value)
    first, second = hook.created
    assert "max_preemptions=1" in text and "2 preemption(s)" in text
    assert f"RayJob {first}: head pod {first}-head lost to spot_reclaim" in text
    assert f"RayJob {second}: head pod {second}-head lost to spot_reclaim" in text


def test_deferred_a_lost_head_defers_on_the_next_rayjob_and_a_restart_never_resubmits_twice(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, max_preemptions=3)
    store = StateStore()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context(hook, TaskInstance(task_id="tune", try_number=1), store))
    first = deferred.value.trigger.name
    head_lost(hook, first)
    lost = verdict(hook.rayjobs[first], hook.pods).to_payload()
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(context(hook, TaskInstance(task_id="tune", try_number=1), store), lost)
    second = again.value.trigger.name
    assert second != first and hook.created == [first, second]
    assert again.value.trigger.max_preemptions == 2 and again.value.trigger.counted == [f"uid-{first}-head"]
    # The worker restarts (a retry runs execute) and the event is delivered again: neither submits a third RayJob.
    with pytest.raises(TaskDeferred) as retried:
        op.execute(context(hook, TaskInstance(task_id="tune", try_number=2), store))
    with pytest.raises(TaskDeferred):
        op.execute_complete(context(hook, TaskInstance(task_id="tune", try_number=2), store), lost)
    assert retried.value.trigger.name == second and hook.created == [first, second]
    assert len(store["rayjob"]["preemptions"]) == 1
    succeed(hook, second)
    result = op.execute_complete(context(hook, store=store), verdict(hook.rayjobs[second], hook.pods).to_payload())
    assert [p["rayjob"] for p in result["preemptions"]] == [first]


def running(hook: FakeRayHook, name: str) -> None:
    hook.rayjobs[name]["status"] = {"jobDeploymentStatus": "Running", "rayClusterName": f"{name}-kd8s2"}


def losing(**workers: str) -> Any:
    """A step: the RayJob runs, and its cluster's worker pods (name=how) stopped."""

    def step(hook: FakeRayHook, name: str) -> None:
        running(hook, name)
        for pod, how in workers.items():
            ray_pod(hook, name, pod, "worker", how)

    return step


def test_lost_workers_are_absorbed_counted_once_each_and_a_failed_worker_is_not_charged(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False, max_preemptions=3)

    drive(hook, [running, losing(w1="reclaimed", w2="failed"), running, running, succeed])
    result = op.execute(context(hook))
    assert len(hook.created) == 1
    assert [(p["pod"], p["role"], p["cause"]) for p in result["preemptions"]] == [("w1", "worker", "spot_reclaim")]


def test_lost_workers_past_the_budget_delete_the_rayjob_and_fail(monkeypatch):
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False, max_preemptions=1)

    drive(hook, [running, losing(w1="reclaimed", w2="reclaimed")])
    with pytest.raises(AirflowFailException, match=r"(?s)preemption_budget_exhausted.*max_preemptions=1.*w1.*w2"):
        op.execute(context(hook))
    assert hook.deleted == hook.created


class WatchingRayHook(FakeRayHook):
    """:class:`FakeRayHook` that can watch pods: the final states ``deleted`` holds come as ``DELETED`` events."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted_pods: list[dict[str, Any]] = []

    def list_pods_versioned(self, namespace: str, label_selector: str | None = None) -> tuple[list[Any], str]:
        return self.list_pods(namespace, label_selector), "1"

    def watch_pods(self, namespace: str, label_selector: str | None, resource_version: str, timeout_seconds: float):
        while self.deleted_pods:
            yield {"type": "DELETED", "object": self.deleted_pods.pop(0)}


def reclaimed_and_deleted(hook: WatchingRayHook, name: str) -> None:
    """The RayJob runs; a worker was reclaimed and its pod deleted before the next look could list it."""
    running(hook, name)
    hook.deleted_pods.append(ray_pod(hook, name, "w1", "worker", "reclaimed"))
    hook.pods.remove(hook.deleted_pods[-1])


def test_sync_a_worker_deleted_between_two_looks_is_judged_by_its_final_state(monkeypatch):
    hook = WatchingRayHook()
    op = operator(hook, monkeypatch, deferrable=False, max_preemptions=3, poll_interval=1)  # a wait: it watches

    drive(hook, [reclaimed_and_deleted, running, succeed])
    result = op.execute(context(hook))
    assert [(p["pod"], p["role"], p["cause"]) for p in result["preemptions"]] == [("w1", "worker", "spot_reclaim")]


def test_max_preemptions_is_validated():
    with pytest.raises(SpecError, match="max_preemptions"):
        RayJobOperator(task_id="t", cluster=CLUSTER, entrypoint="python a.py", max_preemptions=-1)


# ------------------------------------------------------------------------------------------------ Ray Tune

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "tune" / "digits-probe"


def test_tune_adds_the_sweep_result_and_writes_the_report_after_a_resubmission(monkeypatch, tmp_path):
    experiment = tmp_path / "ray" / "digits-probe"
    shutil.copytree(FIXTURE, experiment)
    hook = FakeRayHook()
    op = operator(hook, monkeypatch, deferrable=False, tune=TuneSweep("{{ unrendered }}", objective="val_loss"))
    op.tune_experiment = str(experiment)  # as Airflow renders the templated field
    assert "tune_experiment" in op.template_fields and "tune_report_uri" in op.template_fields
    drive(hook, head_lost, succeed)  # the resubmitted RayJob restores the experiment: one experiment in the end
    result = op.execute(context(hook))
    sweep = result["sweep"]
    assert len(result["preemptions"]) == 1 and len(hook.created) == 2
    assert sweep["best_trial"] == 1 and sweep["best_params"]["lr"] == 0.01
    assert sweep["best_value"] == pytest.approx(0.0125)
    assert [t["state"] for t in sweep["trials"]] == ["complete", "pruned", "pruned", "failed"]
    report = experiment / "report"
    assert sweep["report"] == {k: str(report / f"sweep.{k}") for k in ("csv", "json", "png")}
    assert all((report / f"sweep.{k}").stat().st_size > 0 for k in ("csv", "json", "png"))


def test_tune_without_an_experiment_fails_naming_where_it_looked(monkeypatch, tmp_path):
    hook = FakeRayHook()
    missing = str(tmp_path / "nothing")
    op = operator(hook, monkeypatch, deferrable=False, tune=TuneSweep(missing, objective="val_loss"))
    drive(hook, succeed)
    with pytest.raises(AirflowException, match=f"Ray Tune experiment '{missing}' could not be read"):
        op.execute(context(hook))
