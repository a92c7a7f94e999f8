"""The JobSet controller against upstream behaviour (docs/jobset.md §3, §5, §6), modelled on the upstream examples."""

from __future__ import annotations

import hashlib

import pytest

from airflow_elastic.localcluster.resources import JOBS, JOBSETS, PODS, SERVICES
from tests.support.inprocess import NS, condition, running
from tests.support.jobset_objects import finish, jobset, rjob

pytestmark = pytest.mark.anyio
J = "jobset.sigs.k8s.io/"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def assert_condition(obj: dict, kind: str, status: str, reason: str, message: str | None = None) -> None:
    cond = condition(obj, kind)
    assert cond is not None, f"no {kind} in {obj.get('status')}"
    assert (cond["status"], cond["reason"]) == (status, reason)
    if message is not None:
        assert cond["message"] == message


async def test_simple_jobset_creates_labelled_jobs_service_and_completes() -> None:
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("js", rjob("leader"), rjob("workers", replicas=2, pods=2)))
        await cluster.settle()
        js = cluster.jobset("js")
        assert sorted(j["metadata"]["name"] for j in cluster.jobs()) == ["js-leader-0", "js-workers-0", "js-workers-1"]
        job = cluster.job("js-workers-1")
        expected = {
            J + "jobset-name": "js",
            J + "jobset-uid": js["metadata"]["uid"],
            J + "replicatedjob-name": "workers",
            J + "replicatedjob-replicas": "2",
            J + "global-replicas": "3",
            J + "job-index": "1",
            J + "job-global-index": "2",
            J + "restart-attempt": "0",
            J + "job-key": hashlib.sha1(b"default/js-workers-1").hexdigest(),
            J + "group-name": "default",
            J + "group-replicas": "3",
            J + "job-group-index": "2",
        }
        template = job["spec"]["template"]
        for meta in (
            job["metadata"]["labels"],
            job["metadata"]["annotations"],
            template["metadata"]["labels"],
            template["metadata"]["annotations"],
        ):
            assert expected.items() <= meta.items()
        assert job["spec"]["completionMode"] == "Indexed" and template["spec"]["restartPolicy"] == "OnFailure"
        assert template["spec"]["subdomain"] == "js"
        owner = job["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("JobSet", "js", True)
        service = cluster.get(SERVICES, "js")
        assert service["spec"] == {
            "clusterIP": "None",
            "selector": {J + "jobset-name": "js"},
            "publishNotReadyAddresses": True,
            "type": "ClusterIP",  # the API server's Service defaults
            "sessionAffinity": "None",
        }
        assert {p["spec"]["hostname"] for p in cluster.pods()} == {
            "js-leader-0-0",
            "js-workers-0-0",
            "js-workers-0-1",
            "js-workers-1-0",
            "js-workers-1-1",
        }

        for name in ("js-leader-0", "js-workers-0", "js-workers-1"):
            await cluster.run_all(name, ready=True)
        statuses = {s["name"]: s for s in cluster.jobset("js")["status"]["replicatedJobsStatus"]}
        assert statuses["workers"] == {
            "name": "workers",
            "ready": 2,
            "succeeded": 0,
            "failed": 0,
            "active": 2,
            "suspended": 0,
        }
        for name in ("js-leader-0", "js-workers-0", "js-workers-1"):
            await finish(cluster, name)
        js = cluster.jobset("js")
        assert_condition(js, "Completed", "True", "AllJobsCompleted", "jobset completed successfully")
        assert js["status"]["terminalState"] == "Completed"
        assert cluster.events("AllJobsCompleted")


async def test_success_policy_any_on_workers_deletes_the_leader() -> None:
    spec = {"successPolicy": {"operator": "Any", "targetReplicatedJobs": ["workers"]}}
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("sp", rjob("leader"), rjob("workers", replicas=2), **spec))
        await cluster.settle()
        await cluster.run_all("sp-leader-0")
        await finish(cluster, "sp-workers-1")
        await cluster.settle()
        assert_condition(cluster.jobset("sp"), "Completed", "True", "AllJobsCompleted")
        assert cluster.get(JOBS, "sp-leader-0") is None and cluster.get(JOBS, "sp-workers-0") is None
        assert cluster.pods("sp-leader-0", live=False) == []


async def test_without_failure_policy_first_job_failure_fails_jobset() -> None:
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("nofp", rjob("workers", replicas=2)))
        await cluster.settle()
        await finish(cluster, "nofp-workers-1", "Failed")
        js = cluster.jobset("nofp")
        assert_condition(
            js,
            "Failed",
            "True",
            "FailedJobs",
            "jobset failed due to one or more job failures (first failed job: nofp-workers-1)",
        )
        assert js["status"]["terminalState"] == "Failed"
        assert cluster.get(JOBS, "nofp-workers-0") is None  # remaining active Jobs deleted


async def test_restart_jobset_recreates_jobs_until_max_restarts() -> None:
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("rs", rjob("workers", replicas=2), failurePolicy={"maxRestarts": 1}))
        await cluster.settle()
        first_uids = {j["metadata"]["uid"] for j in cluster.jobs()}
        await finish(cluster, "rs-workers-0", "Failed")
        await cluster.settle()
        js = cluster.jobset("rs")
        assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (1, 1)
        message = "applying RestartJobSet failure policy action (first failed job: rs-workers-0)"
        assert_condition(js, "RestartingJobSet", "True", "DefaultFailurePolicy", message)
        assert [e["message"] for e in cluster.events("RestartJobSetFailurePolicyAction")] == [message]
        jobs = cluster.jobs()
        assert sorted(j["metadata"]["name"] for j in jobs) == ["rs-workers-0", "rs-workers-1"]
        assert not first_uids & {j["metadata"]["uid"] for j in jobs}
        assert {j["metadata"]["labels"][J + "restart-attempt"] for j in jobs} == {"1"}
        assert {p["metadata"]["labels"][J + "restart-attempt"] for p in cluster.pods()} == {"1"}

        for job in jobs:
            await cluster.run_all(job["metadata"]["name"], ready=True)
        assert_condition(cluster.jobset("rs"), "RestartingJobSet", "False", "JobsReady", "all jobs are ready")
        await finish(cluster, "rs-workers-1", "Failed")
        js = cluster.jobset("rs")
        assert_condition(
            js,
            "Failed",
            "True",
            "ReachedMaxRestarts",
            "jobset failed due to reaching max number of restarts (first failed job: rs-workers-1)",
        )
        assert_condition(js, "RestartingJobSet", "False", "JobSetFailed", "jobset failed")
        assert js["status"]["restarts"] == 1


async def test_blocking_recreate_waits_for_every_old_job() -> None:
    policy = {"maxRestarts": 2, "restartStrategy": "BlockingRecreate"}
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("br", rjob("workers", replicas=2), failurePolicy=policy))
        await cluster.settle()
        await cluster.run_all("br-workers-0")
        # keep one old pod terminating: it is on a node, so deletion waits for the (absent) kubelet
        (pod,) = cluster.pods("br-workers-1")
        cluster.store.update(PODS, {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}, subresource="binding")
        await finish(cluster, "br-workers-0", "Failed")
        await cluster.settle()
        assert cluster.jobset("br")["status"]["restarts"] == 1
        assert {j["metadata"]["name"] for j in cluster.jobs() if not j["metadata"].get("deletionTimestamp")} == set()
        cluster.store.delete(PODS, NS, pod["metadata"]["name"], grace_seconds=0)  # the kubelet finishes
        await cluster.settle()
        assert {j["metadata"]["labels"][J + "restart-attempt"] for j in cluster.jobs()} == {"1"}
        assert len(cluster.jobs()) == 2


HOST_MAINTENANCE = {
    "maxRestarts": 0,
    "rules": [
        {
            "name": "disruptions",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": ["DisruptionTarget"],
        },
        {"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"], "targetReplicatedJobs": ["workers"]},
    ],
}
POD_FAILURE_POLICY = {
    "rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
    ]
}


async def test_host_maintenance_model_restarts_on_disruption_and_fails_on_errors() -> None:
    workers = rjob(
        "workers", replicas=1, pods=2, job={"podFailurePolicy": POD_FAILURE_POLICY}, pod={"restartPolicy": "Never"}
    )
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("hm", workers, failurePolicy=HOST_MAINTENANCE))
        await cluster.settle()
        assert cluster.jobset("hm")["spec"]["failurePolicy"]["rules"][1]["name"] == "failurePolicyRule1"
        pod = cluster.pods("hm-workers-0")[0]
        disruption = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
        cluster.set_status(pod, "Failed", exit_code=143, conditions=[disruption])
        await cluster.settle()
        js = cluster.jobset("hm")
        assert (js["status"]["restarts"], js["status"].get("restartsCountTowardsMax", 0)) == (1, 0)
        assert_condition(js, "RestartingJobSet", "True", "FailurePolicy_disruptions")
        assert cluster.events("RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction")
        assert cluster.job("hm-workers-0")["metadata"]["labels"][J + "restart-attempt"] == "1"

        pod = cluster.pods("hm-workers-0")[0]
        cluster.set_status(pod, "Failed", exit_code=1)
        await cluster.settle()
        assert_condition(
            cluster.jobset("hm"),
            "Failed",
            "True",
            "FailJobSetFailurePolicyAction",
            "applying FailJobSet failure policy action (first failed job: hm-workers-0)",
        )


async def test_depends_on_creates_jobs_after_dependency_completes() -> None:
    async with running() as cluster:
        cluster.create(
            JOBSETS,
            jobset("dep", rjob("init"), rjob("train", replicas=2, dependsOn=[{"name": "init", "status": "Complete"}])),
        )
        await cluster.settle()
        assert [j["metadata"]["name"] for j in cluster.jobs()] == ["dep-init-0"]
        await cluster.run_all("dep-init-0", ready=True)
        assert len(cluster.jobs()) == 1  # Ready is not Complete
        await finish(cluster, "dep-init-0")
        assert sorted(j["metadata"]["name"] for j in cluster.jobs()) == ["dep-init-0", "dep-train-0", "dep-train-1"]


async def test_in_order_startup_policy_waits_for_ready_jobs() -> None:
    spec = {"startupPolicy": {"startupPolicyOrder": "InOrder"}}
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("io", rjob("leader"), rjob("workers", replicas=2), **spec))
        await cluster.settle()
        assert [j["metadata"]["name"] for j in cluster.jobs()] == ["io-leader-0"]
        assert_condition(
            cluster.jobset("io"),
            "StartupPolicyInProgress",
            "True",
            "InOrderStartupPolicyInProgress",
            "in order startup policy is in progress",
        )
        await cluster.run_all("io-leader-0", ready=True)
        assert len(cluster.jobs()) == 3
        for name in ("io-workers-0", "io-workers-1"):
            await cluster.run_all(name, ready=True)
        js = cluster.jobset("io")
        assert_condition(
            js,
            "StartupPolicyCompleted",
            "True",
            "InOrderStartupPolicyCompleted",
            "in order startup policy has completed",
        )
        assert condition(js, "StartupPolicyInProgress")["status"] == "False"


async def test_suspend_and_resume() -> None:
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("sus", rjob("workers", replicas=2), suspend=True))
        await cluster.settle()
        assert all(j["spec"]["suspend"] for j in cluster.jobs()) and len(cluster.jobs()) == 2
        assert cluster.pods() == []
        js = cluster.jobset("sus")
        assert_condition(js, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
        js["spec"]["suspend"] = False
        cluster.store.update(JOBSETS, js)
        await cluster.settle()
        assert_condition(cluster.jobset("sus"), "Suspended", "False", "ResumeJobs", "jobset is resumed")
        assert len(cluster.pods()) == 2
        assert {p["spec"]["nodeSelector"]["pool"] for p in cluster.pods()} == {"a"}  # Kueue's change merged
        await cluster.run_all("sus-workers-0", ready=True)
        js = cluster.jobset("sus")
        js["spec"]["suspend"] = True
        cluster.store.update(JOBSETS, js)
        await cluster.settle()
        assert cluster.pods() == [] and cluster.jobset("sus")["status"]["restarts"] == 0
        assert condition(cluster.job("sus-workers-0"), "Failed") is None


async def test_ttl_after_finished_deletes_jobset_and_children() -> None:
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("ttl", rjob("workers"), ttlSecondsAfterFinished=0))
        await cluster.settle()
        await finish(cluster, "ttl-workers-0")
        await cluster.settle()
        assert cluster.get(JOBSETS, "ttl") is None
        assert cluster.jobs() == [] and cluster.get(SERVICES, "ttl") is None


async def test_coordinator_and_exclusive_topology_annotation() -> None:
    exclusive = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    spec = {"coordinator": {"replicatedJob": "workers", "jobIndex": 0, "podIndex": 0}, "annotations": exclusive}
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("co", rjob("workers", pods=2), **spec))
        await cluster.settle()
        job = cluster.job("co-workers-0")
        pod = cluster.pods("co-workers-0")[0]
        for meta in (job["metadata"], pod["metadata"]):
            assert meta["labels"][J + "coordinator"] == "co-workers-0-0.co"
            assert meta["annotations"][J + "coordinator"] == "co-workers-0-0.co"
            assert meta["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "cloud.google.com/gke-nodepool"
            assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in meta["labels"]


async def test_foreign_managed_by_is_skipped() -> None:
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("mk", rjob("workers"), managedBy="kueue.x-k8s.io/multikueue"))
        await cluster.settle()
        assert cluster.jobs() == [] and "status" not in cluster.jobset("mk")


async def test_job_creation_failure_is_an_event() -> None:
    bad = rjob("workers", pod={"containers": [{"name": "Bad_Name", "image": "busybox"}]})
    async with running() as cluster:
        cluster.create(JOBSETS, jobset("bad", bad))
        await cluster.settle()
        (event,) = cluster.events("JobCreationFailed")
        assert event["type"] == "Warning"
        assert event["message"].startswith('job "bad-workers-0" creation failed with error: Job.batch "bad-workers-0"')
        assert cluster.jobs() == []
