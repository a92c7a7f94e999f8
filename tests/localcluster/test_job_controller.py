"""The batch/v1 Job controller against upstream behaviour: pods, counters, policies and conditions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import JOBS, PODS
from tests.support.inprocess import NS, Cluster, condition, job_body, running

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _failed(cluster: Cluster, name: str) -> dict:
    job = cluster.job(name)
    target, failed = condition(job, "FailureTarget"), condition(job, "Failed")
    assert target is not None and failed is not None, job.get("status")
    assert (target["reason"], target["message"]) == (failed["reason"], failed["message"])
    return failed


async def test_indexed_job_runs_each_index_and_completes() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("idx", completions=3, parallelism=2, completionMode="Indexed"))
        await cluster.settle()
        pods = cluster.pods("idx")
        assert [p["metadata"]["generateName"] for p in pods] == ["idx-0-", "idx-1-"]
        first = pods[0]
        assert first["metadata"]["name"].startswith("idx-0-") and len(first["metadata"]["name"]) == len("idx-0-") + 5
        assert first["spec"]["hostname"] == "idx-0"
        assert first["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
        assert first["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
        assert first["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0"
        env = first["spec"]["containers"][0]["env"]
        assert env == [
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            }
        ]
        owner = first["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["controller"], owner["blockOwnerDeletion"]) == ("Job", True, True)

        await cluster.run_all("idx", ready=True)
        status = cluster.job("idx")["status"]
        assert (status["active"], status["ready"], status["succeeded"]) == (2, 2, 0)
        assert status["startTime"]

        cluster.set_status(pods[0], "Succeeded", exit_code=0)
        await cluster.settle()
        status = cluster.job("idx")["status"]
        assert status["completedIndexes"] == "0" and status["succeeded"] == 1
        assert [p["metadata"]["generateName"] for p in cluster.pods("idx")] == ["idx-1-", "idx-2-"]
        # a counted pod keeps existing but loses the tracking finalizer
        assert not cluster.get(PODS, pods[0]["metadata"]["name"])["metadata"].get("finalizers")

        await cluster.run_all("idx", "Succeeded", exit_code=0)
        job = cluster.job("idx")
        assert job["status"]["completedIndexes"] == "0-2"
        assert job["status"]["succeeded"] == 3 and job["status"]["active"] == 0
        for kind in ("SuccessCriteriaMet", "Complete"):
            cond = condition(job, kind)
            assert (cond["status"], cond["reason"], cond["message"]) == (
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            )
        assert job["status"]["completionTime"]
        assert [e["message"] for e in cluster.events("Completed")] == ["Job completed"]
        assert len(cluster.events("SuccessfulCreate")) == 3


async def test_backoff_limit_exceeded_after_replacements() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("flaky", backoffLimit=1))
        await cluster.settle()
        assert len(cluster.pods("flaky")) == 1
        await cluster.run_all("flaky", "Failed", exit_code=1)
        assert cluster.job("flaky")["status"]["failed"] == 1
        assert len(cluster.pods("flaky")) == 1  # replacement
        await cluster.run_all("flaky", "Failed", exit_code=1)
        failed = _failed(cluster, "flaky")
        assert (failed["reason"], failed["message"]) == (
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        assert cluster.job("flaky")["status"]["failed"] == 2
        assert cluster.pods("flaky") == []
        assert cluster.events("BackoffLimitExceeded")[0]["type"] == "Warning"


async def test_a_failed_pod_is_replaced_after_the_pod_failure_backoff_doubling_per_failure() -> None:
    """``backoff_utils.go`` (``getRemainingTimeForFailuresCount``): the replacement of the first failure waits the
    base back-off, of the second twice that, counted from the failed pod's ``finishedAt``; a success resets the
    count. The base is 2 s here (10 s on a cluster, ``ClusterConfig.job_pod_failure_backoff_seconds``); a finish
    time is a whole second, as on a cluster, so each wait may come out up to a second short."""
    base = 2.0
    async with running(pod_failure_backoff=base) as cluster:
        cluster.create(JOBS, job_body("slow", backoffLimit=3, completions=2, parallelism=1))
        await cluster.settle()
        waited = []
        for _ in range(2):
            failed_at = time.monotonic()
            await cluster.run_all("slow", "Failed", exit_code=1)
            assert cluster.pods("slow") == []  # not replaced yet: the back-off holds it
            await wait_until(lambda: len(cluster.pods("slow")) == 1, cluster)
            waited.append(time.monotonic() - failed_at)
        assert base - 1 <= waited[0] < 2 * base - 1, waited  # 1 failure: the base
        assert 2 * base - 1 <= waited[1], waited  # 2 failures: twice the base
        await cluster.run_all("slow", "Succeeded", exit_code=0)
        assert len(cluster.pods("slow")) == 1  # a success resets the count: the next pod at once
        assert cluster.job("slow")["status"]["failed"] == 2


async def wait_until(check: Callable[[], bool], cluster: Cluster, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
        await cluster.settle()


async def test_on_failure_container_restarts_count_against_backoff_limit() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("crashy", backoffLimit=0, restartPolicy="OnFailure"))
        await cluster.settle()
        await cluster.run_all("crashy", "Running", restarts=1)
        assert _failed(cluster, "crashy")["reason"] == "BackoffLimitExceeded"


async def test_pod_failure_policy_fail_job_on_exit_code_terminates_other_pods() -> None:
    policy = {
        "rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]
    }
    async with running() as cluster:
        cluster.create(
            JOBS, job_body("pfp", completions=2, parallelism=2, completionMode="Indexed", podFailurePolicy=policy)
        )
        await cluster.settle()
        first, second = cluster.pods("pfp")
        cluster.set_status(first, "Failed", exit_code=42)
        await cluster.settle()
        failed = _failed(cluster, "pfp")
        assert failed["reason"] == "PodFailurePolicy"
        assert failed["message"] == (
            f"Container main for pod {NS}/{first['metadata']['name']} failed with exit code 42 matching FailJob "
            "rule at index 0"
        )
        assert cluster.get(PODS, second["metadata"]["name"]) is None  # terminated and released
        assert cluster.job("pfp")["spec"]["podReplacementPolicy"] == "Failed"


async def test_pod_failure_policy_ignore_disruption_then_count_exit_code() -> None:
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}},
        ]
    }
    async with running() as cluster:
        cluster.create(JOBS, job_body("pre", backoffLimit=0, podFailurePolicy=policy))
        await cluster.settle()
        disruption = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        await cluster.run_all("pre", "Failed", exit_code=143, conditions=[disruption])
        status = cluster.job("pre")["status"]
        assert status["failed"] == 0 and condition(cluster.job("pre"), "Failed") is None
        assert len(cluster.pods("pre")) == 1  # replaced without counting
        await cluster.run_all("pre", "Failed", exit_code=3)
        assert _failed(cluster, "pre")["reason"] == "BackoffLimitExceeded"


async def test_pod_failure_policy_fail_job_on_disruption_target() -> None:
    policy = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    async with running() as cluster:
        cluster.create(JOBS, job_body("maint", podFailurePolicy=policy))
        await cluster.settle()
        (pod,) = cluster.pods("maint")
        disruption = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
        cluster.set_status(pod, "Failed", exit_code=143, conditions=[disruption])
        await cluster.settle()
        failed = _failed(cluster, "maint")
        assert (failed["reason"], failed["message"]) == (
            "PodFailurePolicy",
            f"Pod {NS}/{pod['metadata']['name']} has condition DisruptionTarget matching FailJob rule at index 0",
        )


async def test_active_deadline_seconds() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("slow", activeDeadlineSeconds=1))
        await cluster.settle()
        await cluster.run_all("slow")
        for _ in range(40):
            await asyncio.sleep(0.1)
            await cluster.settle()
            if condition(cluster.job("slow"), "Failed"):
                break
        failed = _failed(cluster, "slow")
        assert (failed["reason"], failed["message"]) == (
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        )
        assert cluster.pods("slow") == []


async def test_success_policy_succeeded_indexes_terminates_the_rest() -> None:
    async with running() as cluster:
        cluster.create(
            JOBS,
            job_body(
                "leader",
                completions=3,
                parallelism=3,
                completionMode="Indexed",
                successPolicy={"rules": [{"succeededIndexes": "0"}]},
            ),
        )
        await cluster.settle()
        leader, *workers = cluster.pods("leader")
        await cluster.run_all("leader")
        cluster.set_status(leader, "Succeeded", exit_code=0)
        await cluster.settle()
        job = cluster.job("leader")
        for kind in ("SuccessCriteriaMet", "Complete"):
            cond = condition(job, kind)
            assert (cond["reason"], cond["message"]) == ("SuccessPolicy", "Matched rules at index 0")
        assert job["status"]["failed"] == 0  # pods stopped by success are not failures
        assert all(cluster.get(PODS, w["metadata"]["name"]) is None for w in workers)


async def test_suspend_deletes_pods_and_resume_restarts_clock() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("sus", completions=2, parallelism=2, completionMode="Indexed"))
        await cluster.settle()
        await cluster.run_all("sus", ready=True)
        job = cluster.job("sus")
        job["spec"]["suspend"] = True
        cluster.store.update(JOBS, job)
        await cluster.settle()
        job = cluster.job("sus")
        cond = condition(job, "Suspended")
        assert (cond["status"], cond["reason"], cond["message"]) == ("True", "JobSuspended", "Job suspended")
        assert cluster.pods("sus") == [] and job["status"]["failed"] == 0 and job["status"]["active"] == 0
        job["spec"]["suspend"] = False
        cluster.store.update(JOBS, job)
        await cluster.settle()
        job = cluster.job("sus")
        cond = condition(job, "Suspended")
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "JobResumed", "Job resumed")
        assert len(cluster.pods("sus")) == 2 and job["status"]["startTime"]
        assert {e["reason"] for e in cluster.events()} >= {"Suspended", "Resumed", "SuccessfulDelete"}


async def test_pod_deleted_while_running_counts_as_failed() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("gone"))
        await cluster.settle()
        await cluster.run_all("gone")
        (pod,) = cluster.pods("gone")
        cluster.store.delete(PODS, NS, pod["metadata"]["name"], grace_seconds=0)
        await cluster.settle()
        assert cluster.get(PODS, pod["metadata"]["name"]) is None  # finalizer released after counting
        assert cluster.job("gone")["status"]["failed"] == 1
        assert len(cluster.pods("gone")) == 1


async def test_ttl_after_finished_deletes_job_and_pods() -> None:
    async with running() as cluster:
        cluster.create(JOBS, job_body("short", ttlSecondsAfterFinished=0))
        await cluster.settle()
        await cluster.run_all("short", "Succeeded", exit_code=0)
        await cluster.settle()
        assert cluster.get(JOBS, "short") is None
        assert cluster.pods("short", live=False) == []


async def test_job_whose_pod_hostnames_are_no_dns_labels_is_refused() -> None:
    """Upstream ``ValidateJob`` refuses an Indexed Job whose last pod hostname ``<name>-<completions-1>`` is no DNS
    label, instead of creating a Job that can never create a pod."""
    name = "j" * 62  # a valid Job name, but hostname "<name>-0" is longer than a DNS label
    async with running() as cluster:
        with pytest.raises(errors.Invalid) as refused:
            cluster.create(JOBS, job_body(name, completions=1, completionMode="Indexed"))
        assert refused.value.details["causes"] == [
            errors.cause(
                "metadata.name",
                f'Invalid value: "{name}": will not able to create pod with invalid DNS label: {name}-0',
            )
        ]
        await cluster.settle()
        assert cluster.jobs() == [] and cluster.pods(name, live=False) == []
