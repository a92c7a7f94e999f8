"""JobSet's RestartJob feature gate in the local cluster: only the failed child Job is recreated (upstream
``pkg/controllers/failure_policy.go``), counted or not; without the gate the webhook refuses the actions."""

from __future__ import annotations

import pytest

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.resources import JOBSETS
from tests.support.inprocess import running
from tests.support.jobset_objects import finish, jobset, rjob

pytestmark = pytest.mark.anyio
J = "jobset.sigs.k8s.io/"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def policy(action: str, max_restarts: int = 1) -> dict:
    return {
        "maxRestarts": max_restarts,
        "rules": [{"name": "PerJob", "action": action, "targetReplicatedJobs": ["rg"]}],
    }


async def test_restart_job_recreates_only_the_failed_job_and_counts_it() -> None:
    async with running(restart_job=True) as cluster:
        cluster.create(
            JOBSETS, jobset("ft", rjob("lighthouse"), rjob("rg", replicas=3), failurePolicy=policy("RestartJob"))
        )
        await cluster.settle()
        before = {j["metadata"]["name"]: j["metadata"]["uid"] for j in cluster.jobs()}
        assert {cluster.job("ft-rg-1")["metadata"]["labels"][J + "job-restart-attempt"]} == {"0"}
        await finish(cluster, "ft-rg-1", "Failed")
        await cluster.settle()
        js = cluster.jobset("ft")
        assert js["status"]["restarts"] == 0  # the set was not restarted
        rg = next(s for s in js["status"]["replicatedJobsStatus"] if s["name"] == "rg")
        assert (rg["jobRestarts"], rg["jobRestartsCountTowardsMax"]) == ([0, 1, 0], [0, 1, 0])
        after = {j["metadata"]["name"]: j["metadata"]["uid"] for j in cluster.jobs()}
        assert set(after) == set(before)
        assert [n for n in after if after[n] != before[n]] == ["ft-rg-1"]  # only that Job is new
        assert cluster.job("ft-rg-1")["metadata"]["labels"][J + "job-restart-attempt"] == "1"
        message = "applying RestartJob failure policy action (first failed job: ft-rg-1)"
        assert [e["message"] for e in cluster.events("RestartJobFailurePolicyAction")] == [message]

        await finish(cluster, "ft-rg-2", "Failed")  # a second counted restart is over maxRestarts=1
        await cluster.settle()
        failed = next(c for c in cluster.jobset("ft")["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "ReachedMaxRestarts"


async def test_restart_job_and_ignore_max_restarts_is_not_counted() -> None:
    async with running(restart_job=True) as cluster:
        body = jobset("ft", rjob("rg", replicas=2), failurePolicy=policy("RestartJobAndIgnoreMaxRestarts", 0))
        cluster.create(JOBSETS, body)
        await cluster.settle()
        for _ in range(2):
            await finish(cluster, "ft-rg-0", "Failed")
            await cluster.settle()
        js = cluster.jobset("ft")
        rg = js["status"]["replicatedJobsStatus"][0]
        assert rg["jobRestarts"] == [2, 0] and not rg.get("jobRestartsCountTowardsMax")
        assert not any(c["type"] == "Failed" for c in js["status"].get("conditions") or [])
        assert cluster.job("ft-rg-0")["metadata"]["labels"][J + "job-restart-attempt"] == "2"


async def test_without_the_gate_the_webhook_refuses_the_actions() -> None:
    async with running() as cluster:
        with pytest.raises(errors.Invalid, match="RestartJob feature gate is disabled"):
            cluster.create(JOBSETS, jobset("ft", rjob("rg", replicas=2), failurePolicy=policy("RestartJob")))


def test_cluster_up_takes_jobsets_feature_gate_flag() -> None:
    from airflow_elastic.localcluster.cli import _restart_job_gate
    from airflow_elastic.localcluster.cluster import ClusterError

    assert _restart_job_gate("RestartJob=true") and not _restart_job_gate("RestartJob=false")
    with pytest.raises(ClusterError, match="only RestartJob"):
        _restart_job_gate("InPlaceRestart=true")


def test_a_cluster_started_with_the_gate_admits_the_actions(tmp_path) -> None:
    from kubernetes import client, config

    from airflow_elastic.localcluster import LocalCluster
    from airflow_elastic.localcluster.config import ClusterConfig

    body = jobset("ft", rjob("rg", replicas=2), failurePolicy=policy("RestartJob"))
    with LocalCluster(tmp_path / "cluster", config=ClusterConfig(jobset_restart_job=True)) as cluster:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        created = client.CustomObjectsApi(api).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", body
        )
        api.close()
    assert created["spec"]["failurePolicy"]["rules"][0]["action"] == "RestartJob"
