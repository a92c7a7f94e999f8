"""JobSet scenarios end to end, modelled on the upstream examples (``tests/data/manifests``).

Everything goes through real clients against the session's local cluster: the ``kubernetes`` client
(CustomObjectsApi, CoreV1Api, BatchV1Api) and ``kubectl``. Expected conditions, reasons and messages are
upstream's (docs/jobset.md §3); waits poll or watch with a timeout and never judge wall-clock durations.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import urllib3
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.support.jobsets import GROUP, VERSION, J, JobSets, assert_condition, condition
from tests.support.waiting import wait_for

MANIFESTS = Path(__file__).parents[1] / "data" / "manifests"
T = TypeVar("T")


# ------------------------------------------------------------------------------------------------ helpers


def manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((MANIFESTS / name).read_text())


@pytest.fixture
def jobsets(api_client: client.ApiClient, namespace: str) -> JobSets:
    return JobSets(api_client, namespace)


class JobWatch:
    """Records the watch events of a namespace's Jobs in order (one stream, so ordered as the server saw them)."""

    def __init__(self, batch: client.BatchV1Api, namespace: str):
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._watch = watch.Watch()
        self._stopped = False
        resource_version = batch.list_namespaced_job(namespace).metadata.resource_version
        self._thread = threading.Thread(
            target=self._run, args=(batch, namespace, resource_version), daemon=True, name="job-watch"
        )
        self._thread.start()

    def _run(self, batch: client.BatchV1Api, namespace: str, resource_version: str) -> None:
        stream = self._watch.stream(
            batch.list_namespaced_job, namespace, resource_version=resource_version, timeout_seconds=60
        )
        try:
            for event in stream:
                self.events.append((event["type"], event["raw_object"]))
        except urllib3.exceptions.HTTPError:
            if not self._stopped:
                raise  # stop() closes the response under the stream, which ends it this way

    def stop(self) -> list[tuple[str, dict[str, Any]]]:
        self._stopped = True
        self._watch.stop()
        return list(self.events)

    def wait(self, predicate: Callable[[str, dict[str, Any]], bool], what: str) -> None:
        wait_for(lambda: any(predicate(kind, job) for kind, job in list(self.events)), what=f"a Job event: {what}")

    def first(self, predicate: Callable[[str, dict[str, Any]], bool]) -> int:
        """Index of the first recorded event matching ``predicate`` (fails if there is none)."""
        found = next((i for i, (kind, job) in enumerate(self.events) if predicate(kind, job)), None)
        assert found is not None, f"no such Job event among {[(k, j['metadata']['name']) for k, j in self.events]}"
        return found


@pytest.fixture
def job_watch(jobsets: JobSets) -> Iterator[JobWatch]:
    recorder = JobWatch(jobsets.batch, jobsets.ns)
    yield recorder
    recorder.stop()


def added(name: str) -> Callable[[str, dict[str, Any]], bool]:
    return lambda kind, job: kind == "ADDED" and job["metadata"]["name"] == name


def job_condition(name: str, kind: str) -> Callable[[str, dict[str, Any]], bool]:
    def check(_: str, job: dict[str, Any]) -> bool:
        conditions = (job.get("status") or {}).get("conditions") or []
        return job["metadata"]["name"] == name and any(c["type"] == kind and c["status"] == "True" for c in conditions)

    return check


def job_ready(name: str) -> Callable[[str, dict[str, Any]], bool]:
    def check(_: str, job: dict[str, Any]) -> bool:
        status = job.get("status") or {}
        return job["metadata"]["name"] == name and status.get("ready", 0) + status.get("succeeded", 0) >= 1

    return check


def rjob_status(js: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in js["status"]["replicatedJobsStatus"] if s["name"] == name)


def counts(js: dict[str, Any]) -> dict[str, tuple[int, int, int, int, int]]:
    """``{rjob: (ready, succeeded, failed, active, suspended)}``."""
    keys = ("ready", "succeeded", "failed", "active", "suspended")
    return {s["name"]: tuple(s[k] for k in keys) for s in js["status"]["replicatedJobsStatus"]}


def first_job_failure(jobsets: JobSets, job: str) -> dict[str, Any]:
    found = jobsets.batch.read_namespaced_job(job, jobsets.ns)
    return next(c for c in found.status.conditions if c.type == "Failed").to_dict()


# --------------------------------------------------------------------------------------------- success


def test_paralleljobs_complete_with_labelled_jobs_service_and_pod_hostnames(jobsets: JobSets) -> None:
    created = jobsets.create(manifest("paralleljobs.yaml"))
    uid, ns = created["metadata"]["uid"], jobsets.ns
    # The mutating webhook's defaults are visible in the created object.
    assert created["spec"]["successPolicy"] == {"operator": "All"}
    assert created["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert created["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"

    js = jobsets.wait_terminal("paralleljobs")
    assert js["status"]["terminalState"] == "Completed"
    assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
    assert condition(js, "Failed") is None
    assert (js["status"]["restarts"], js["status"].get("restartsCountTowardsMax", 0)) == (0, 0)
    assert counts(js) == {"workers": (0, 1, 0, 0, 0), "driver": (0, 1, 0, 0, 0)}

    jobs = jobsets.jobs()
    assert sorted(jobs) == ["paralleljobs-driver-0", "paralleljobs-workers-0"]
    driver = jobs["paralleljobs-driver-0"]
    assert driver.metadata.owner_references[0].uid == uid
    expected = {
        J + "jobset-name": "paralleljobs",
        J + "jobset-uid": uid,
        J + "replicatedjob-name": "driver",
        J + "replicatedjob-replicas": "1",
        J + "global-replicas": "2",
        J + "job-index": "0",
        J + "job-global-index": "1",
        J + "restart-attempt": "0",
        J + "job-key": hashlib.sha1(f"{ns}/paralleljobs-driver-0".encode()).hexdigest(),
        J + "group-name": "default",
        J + "group-replicas": "2",
        J + "job-group-index": "1",
    }
    assert expected.items() <= driver.metadata.labels.items()
    assert expected.items() <= driver.metadata.annotations.items()
    assert expected.items() <= driver.spec.template.metadata.labels.items()

    service = jobsets.core.read_namespaced_service("paralleljobs", ns)
    assert service.spec.cluster_ip == "None"
    assert service.spec.selector == {J + "jobset-name": "paralleljobs"}
    assert service.spec.publish_not_ready_addresses is True
    assert service.metadata.owner_references[0].uid == uid

    pods = jobsets.pods(f"{J}replicatedjob-name=workers")
    assert sorted(p.spec.hostname for p in pods) == [f"paralleljobs-workers-0-{i}" for i in range(4)]
    assert {p.spec.subdomain for p in pods} == {"paralleljobs"}
    assert {p.status.phase for p in pods} == {"Succeeded"}
    for pod in pods:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert pod.metadata.name.startswith(f"paralleljobs-workers-0-{index}-")


def test_network_example_with_kubectl_apply_workers_reach_the_leader_by_dns_name(kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", str(MANIFESTS / "jobset-with-network.yaml"))

    def terminal() -> dict[str, Any] | None:
        js = json.loads(kubectl("get", "jobset", "network-jobset", "-n", namespace, "-o", "json").stdout)
        return js if (js.get("status") or {}).get("terminalState") else None

    js = wait_for(terminal, what="network-jobset to finish")
    assert js["status"]["terminalState"] == "Completed"
    assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")

    service = json.loads(kubectl("get", "service", "example", "-n", namespace, "-o", "json").stdout)
    assert service["spec"]["clusterIP"] == "None"
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    assert sorted(p["spec"]["hostname"] for p in pods) == [
        "network-jobset-leader-0-0",
        "network-jobset-workers-0-0",
        "network-jobset-workers-0-1",
    ]
    assert {p["spec"]["subdomain"] for p in pods} == {"example"}
    worker = next(p["metadata"]["name"] for p in pods if "workers" in p["spec"]["hostname"])
    assert kubectl("logs", "-n", namespace, worker).stdout.strip() == "leader is up"
    # The CRD's printer columns (spec.suspend is unset, so SUSPENDED is blank).
    header, row = kubectl("get", "jobset", "-n", namespace).stdout.splitlines()
    assert header.split() == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    assert row.split()[:4] == ["network-jobset", "Completed", "0", "True"]


def test_success_policy_targets_workers_and_deletes_the_running_leader(jobsets: JobSets) -> None:
    jobsets.create(manifest("success-policy.yaml"))
    js = jobsets.wait_terminal("success-policy")
    assert js["status"]["terminalState"] == "Completed"
    assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
    wait_for(lambda: "success-policy-leader-0" not in jobsets.jobs(), what="the leader Job to be deleted")
    assert sorted(jobsets.jobs()) == ["success-policy-workers-0"]
    wait_for(lambda: not jobsets.pods(f"{J}replicatedjob-name=leader"), what="the leader pod to go")


def test_leader_decides_with_success_policy_any_and_coordinator_label(jobsets: JobSets) -> None:
    jobsets.create(manifest("leader-decides.yaml"))
    coordinator = "leader-decides-leader-0-0.leader-decides"
    running = wait_for(lambda: len(jobsets.pods(f"{J}replicatedjob-name=workers")) == 2 and jobsets.pods())
    for pod in running:
        assert pod.metadata.labels[J + "coordinator"] == coordinator
        assert pod.metadata.annotations[J + "coordinator"] == coordinator
    for job in jobsets.jobs().values():
        assert job.metadata.labels[J + "coordinator"] == coordinator

    js = jobsets.wait_terminal("leader-decides")
    assert js["status"]["terminalState"] == "Completed"
    assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
    wait_for(lambda: sorted(jobsets.jobs()) == ["leader-decides-leader-0"], what="the worker Jobs to be deleted")
    wait_for(lambda: not jobsets.pods(f"{J}replicatedjob-name=workers"), what="the worker pods to go")


# --------------------------------------------------------------------------------------------- failure


def test_job_failure_without_failure_policy_fails_the_jobset(jobsets: JobSets) -> None:
    jobsets.create(manifest("failed-jobs.yaml"))
    js = jobsets.wait_terminal("failed-jobs")
    assert js["status"]["terminalState"] == "Failed"
    assert_condition(
        js,
        "Failed",
        "True",
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: failed-jobs-leader-0)",
    )
    assert js["status"]["restarts"] == 0
    assert rjob_status(js, "leader")["failed"] == 1
    # restartPolicy defaults to OnFailure: the container's restart counts against backoffLimit 0.
    assert first_job_failure(jobsets, "failed-jobs-leader-0")["reason"] == "BackoffLimitExceeded"
    # The remaining (active) Jobs are deleted once the JobSet is finished.
    wait_for(lambda: sorted(jobsets.jobs()) == ["failed-jobs-leader-0"], what="the workers Job to be deleted")


def test_failure_policy_restarts_up_to_max_restarts_then_fails(jobsets: JobSets) -> None:
    jobsets.create(manifest("failure-policy.yaml"))
    js = jobsets.wait_terminal("failure-policy")
    assert js["status"]["terminalState"] == "Failed"
    assert_condition(
        js,
        "Failed",
        "True",
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: failure-policy-leader-0)",
    )
    assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (3, 3)
    assert_condition(js, "RestartingJobSet", "False", "JobSetFailed")
    leader = jobsets.batch.read_namespaced_job("failure-policy-leader-0", jobsets.ns)
    assert leader.metadata.labels[J + "restart-attempt"] == "3"  # the Jobs of the last attempt
    restarts = [e for e in jobsets.events("failure-policy") if e.reason == "RestartJobSetFailurePolicyAction"]
    assert sum(e.count or 1 for e in restarts) == 3
    assert {e.message for e in restarts} == {
        "applying RestartJobSet failure policy action (first failed job: failure-policy-leader-0)"
    }


@pytest.mark.parametrize("by_reason", [False, True], ids=["upstream", "by-reason"])
def test_failjobset_rule_fails_at_once(jobsets: JobSets, by_reason: bool) -> None:
    body = manifest("failjobset-action.yaml")
    if by_reason:
        body["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"] = ["BackoffLimitExceeded"]
    created = jobsets.create(body)
    assert created["spec"]["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"  # webhook default
    js = jobsets.wait_terminal("failjobset-action-example")
    assert js["status"]["terminalState"] == "Failed"
    assert_condition(
        js,
        "Failed",
        "True",
        "FailJobSetFailurePolicyAction",
        "applying FailJobSet failure policy action (first failed job: failjobset-action-example-leader-0)",
    )
    assert (js["status"]["restarts"], js["status"].get("restartsCountTowardsMax", 0)) == (0, 0)


def disrupt(jobsets: JobSets, pod: client.V1Pod) -> None:
    """What a node-lifecycle controller does for host maintenance: mark the pod ``DisruptionTarget``, delete it."""
    mark = {
        "status": {
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": "Pod was terminated in response to imminent host maintenance.",
                }
            ]
        }
    }
    jobsets.core.patch_namespaced_pod_status(pod.metadata.name, jobsets.ns, mark)
    jobsets.core.delete_namespaced_pod(pod.metadata.name, jobsets.ns)


def test_host_maintenance_restarts_do_not_count_towards_max_restarts(jobsets: JobSets, job_watch: JobWatch) -> None:
    name = "host-maintenance-event-model"
    jobsets.create(manifest("host-maintenance-event-model.yaml"))
    for attempt in (1, 2):
        selector = f"{J}replicatedjob-name=leader,{J}restart-attempt={attempt - 1}"
        pods = wait_for(lambda s=selector: len(jobsets.live_pods(s)) == 2 and jobsets.live_pods(s), what="leaders")
        disrupt(jobsets, pods[0])
        js = jobsets.wait(name, lambda js, a=attempt: js["status"].get("restarts") == a, f"restart {attempt}")
        assert js["status"].get("restartsCountTowardsMax", 0) == 0  # maxRestarts is 0, and it is not failed
        assert condition(js, "Failed") is None
    # The disrupted pod failed its Job through the Job's podFailurePolicy, which the first JobSet rule matches.
    failed = job_watch.events[job_watch.first(job_condition(f"{name}-leader-0", "Failed"))][1]
    cond = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert cond["reason"] == "PodFailurePolicy"
    assert "has condition DisruptionTarget matching FailJob rule at index 0" in cond["message"]
    events = [e for e in jobsets.events(name) if e.reason == "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"]
    assert sum(e.count or 1 for e in events) == 2
    assert {e.message for e in events} == {
        f"applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: {name}-leader-0)"
    }


# ------------------------------------------------------------------------------------- ordering, suspend


def test_depends_on_creates_each_replicated_job_after_its_dependency(jobsets: JobSets, job_watch: JobWatch) -> None:
    jobsets.create(manifest("depends-on.yaml"))
    js = jobsets.wait_terminal("depends-on")
    assert js["status"]["terminalState"] == "Completed"
    assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
    job_watch.wait(job_condition("depends-on-worker-0", "Complete"), "the worker Job completed")
    job_watch.stop()
    initializer_done = job_watch.first(job_condition("depends-on-initializer-0", "Complete"))
    launcher_created = job_watch.first(added("depends-on-launcher-0"))
    launcher_ready = job_watch.first(job_ready("depends-on-launcher-0"))
    worker_created = job_watch.first(added("depends-on-worker-0"))
    assert initializer_done < launcher_created < launcher_ready < worker_created


def test_startup_policy_in_order(jobsets: JobSets, job_watch: JobWatch) -> None:
    jobsets.create(manifest("startup-policy.yaml"))
    js = jobsets.wait_terminal("startup-policy")
    assert js["status"]["terminalState"] == "Completed"
    assert_condition(js, "StartupPolicyCompleted", "True", "InOrderStartupPolicyCompleted")
    assert_condition(js, "StartupPolicyInProgress", "False", "InOrderStartupPolicyInProgress")
    job_watch.wait(job_condition("startup-policy-workers-1", "Complete"), "the last worker Job completed")
    job_watch.stop()
    leader_ready = job_watch.first(job_ready("startup-policy-leader-0"))
    assert job_watch.first(added("startup-policy-leader-0")) < leader_ready
    assert leader_ready < job_watch.first(added("startup-policy-workers-0"))
    assert leader_ready < job_watch.first(added("startup-policy-workers-1"))


def test_suspend_deletes_pods_and_resume_recreates_them(jobsets: JobSets) -> None:
    jobsets.create(manifest("suspend.yaml"))
    running = wait_for(
        lambda: len([p for p in jobsets.live_pods() if p.status.phase == "Running"]) == 3 and jobsets.live_pods(),
        what="three running pods",
    )
    before = {p.metadata.uid for p in running}

    jobsets.patch("suspend", {"spec": {"suspend": True}})
    js = jobsets.wait("suspend", lambda js: condition(js, "Suspended"), "Suspended")
    assert_condition(js, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
    wait_for(lambda: not jobsets.pods(), what="pods to be deleted while suspended")
    assert all(job.spec.suspend for job in jobsets.jobs().values())
    js = jobsets.wait("suspend", lambda js: rjob_status(js, "workers")["suspended"] == 1, "suspended counts")
    assert counts(js) == {"workers": (0, 0, 0, 0, 1), "driver": (0, 0, 0, 0, 1)}

    jobsets.patch("suspend", {"spec": {"suspend": False}})
    js = jobsets.wait("suspend", lambda js: condition(js, "Suspended")["status"] == "False", "resume")
    assert_condition(js, "Suspended", "False", "ResumeJobs", "jobset is resumed")
    resumed = wait_for(lambda: len(jobsets.live_pods()) == 3 and jobsets.live_pods(), what="pods after resume")
    assert not before & {p.metadata.uid for p in resumed}
    assert not any(job.spec.suspend for job in jobsets.jobs().values())
    assert jobsets.get("suspend")["status"]["restarts"] == 0  # suspension is not a restart


def test_ttl_seconds_after_finished_deletes_the_jobset_and_its_jobs(jobsets: JobSets) -> None:
    body = manifest("paralleljobs.yaml")
    body["spec"]["ttlSecondsAfterFinished"] = 1
    jobsets.create(body)
    wait_for(lambda: not jobsets.exists("paralleljobs"), what="the JobSet to be deleted after its TTL")
    wait_for(lambda: not jobsets.jobs(), what="the child Jobs to be garbage-collected")


# ----------------------------------------------------------------------------------------------- admission


def test_invalid_jobset_is_rejected_with_422(jobsets: JobSets) -> None:
    body = manifest("paralleljobs.yaml")
    name = "a" * 56  # "<name>-workers-0" has 66 characters
    body["metadata"]["name"] = name
    with pytest.raises(ApiException) as raised:
        jobsets.create(body)
    assert raised.value.status == 422
    status = json.loads(raised.value.body)
    assert (status["reason"], status["details"]["kind"], status["details"]["name"]) == ("Invalid", "JobSet", name)
    prefix = f'admission webhook "vjobset.kb.io" denied the request: JobSet.jobset.x-k8s.io "{name}" is invalid: '
    assert status["message"].startswith(prefix)
    assert (
        "spec.replicatedJobs[0].name",
        f'Invalid value: "{name}-workers-0": JobSet name is too long, pod names generated for this JobSet will '
        "exceed 63 characters",
    ) in [(c["field"], c["message"]) for c in status["details"]["causes"]]
    assert not jobsets.exists(name)


def rjob_of(name: str, replicas: int, pod: dict[str, Any], **job: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {"spec": {**job, "template": {"spec": pod}}}}


def test_a_child_job_that_cannot_be_created_is_a_job_creation_failed_warning(jobsets: JobSets) -> None:
    """Upstream ``createJobs``: one warning per replicatedJob, joining each Job's error; later ones wait."""
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}
    broken = {**pod, "containers": [{"name": "main", "image": "", "command": ["true"]}]}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": "broken"},
        "spec": {"replicatedJobs": [rjob_of("first", 2, broken), rjob_of("second", 1, pod)]},
    }
    jobsets.create(body)

    def warning() -> client.CoreV1Event | None:
        return next((e for e in jobsets.events("broken") if e.reason == "JobCreationFailed"), None)

    event = wait_for(warning, what="a JobCreationFailed event")
    assert (event.type, event.involved_object.kind) == ("Warning", "JobSet")
    assert event.message.splitlines() == [
        f'job "broken-first-{i}" creation failed with error: Job.batch "broken-first-{i}" is invalid: '
        "spec.template.spec.containers[0].image: Required value"
        for i in (0, 1)
    ]
    wait_for(lambda: (warning().count or 1) > 1, what="the warning to repeat on the retry")
    assert jobsets.jobs() == {}


def test_exit_code_rule_with_empty_pod_conditions_is_accepted(jobsets: JobSets) -> None:
    """Upstream counts only a non-empty ``onPodConditions``: this Job template is valid and its Job is created."""
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}, "onPodConditions": []}]}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": "exit-codes"},
        "spec": {"replicatedJobs": [rjob_of("workers", 1, pod, podFailurePolicy=policy)]},
    }
    jobsets.create(body)
    assert jobsets.wait_terminal("exit-codes")["status"]["terminalState"] == "Completed"
    assert not [e for e in jobsets.events("exit-codes") if e.reason == "JobCreationFailed"]


def test_gated_restartjob_action_is_rejected_by_kubectl(kubectl, namespace: str) -> None:
    result = kubectl("apply", "-n", namespace, "-f", str(MANIFESTS / "restartjob-action.yaml"), check=False)
    assert result.returncode != 0
    assert (
        "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when "
        "RestartJob feature gate is disabled"
    ) in result.stderr
