"""The elastic role's below-``min_replicas`` timeout on the local cluster, through the operator in sync mode.

Three elastic workers (``min_replicas=2``) run on the spot nodes. The test cordons the spot nodes and evicts two
workers: their replacements stay Pending, one worker is left, and after ``below_min_timeout`` the operator's sync
waiter ends the attempt (``elastic_below_min``); the operator deletes the group and submits the next JobSet from
the latest checkpoint, charged to ``max_preemptions``. Once that JobSet exists the test uncordons the nodes, the
next attempt trains, and the task succeeds with both attempts recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_elastic import Checkpointing, Elastic, FailurePolicy, Placement, Role, TrainingGroup, contract
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.runtime import save_checkpoint
from airflow_elastic.runtime.context import Context as PodContext
from tests.support.elastic import MOUNT, SCRIPT, Progress
from tests.support.jobsets import GROUP, PLURAL, VERSION, J, JobSets
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.waiting import wait_for

CONN_ID = "elastic_timeout"
SPOT = "airflow-elastic.io/capacity-type=spot"


@pytest.fixture
def connection(local_cluster: LocalCluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    extra = {"kube_config_path": str(local_cluster.kubeconfig), "namespace": namespace}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return CONN_ID


@pytest.fixture
def spot_nodes(core: client.CoreV1Api) -> Iterator[list[str]]:
    """The spot nodes' names; whatever the test does, they are schedulable again afterwards."""
    names = [n.metadata.name for n in core.list_node(label_selector=SPOT).items]
    yield names
    cordon(core, names, False)


def cordon(core: client.CoreV1Api, nodes: list[str], on: bool) -> None:
    for node in nodes:
        core.patch_node(node, {"spec": {"unschedulable": on}})


def group(progress: Path, checkpoint: Path) -> TrainingGroup:
    """Three spot workers that may shrink to two, and restart after 2 s below two."""
    return TrainingGroup(
        name="elmin",
        roles=[Role("worker", replicas=3, command=["python", str(SCRIPT)])],
        image="python:3.11-slim",
        placement=Placement(
            spot=True, tolerations=[{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"}]
        ),
        elastic=Elastic(min_replicas=2, max_replicas=3, below_min_timeout=2),
        failure=FailurePolicy(max_failures=0, max_preemptions=1),
        checkpoint=Checkpointing(str(checkpoint)),
        env={"PYTHONPATH": str(Path(SCRIPT).parents[3]), "PROGRESS": MOUNT},
        pod_overrides={
            "spec": {
                "volumes": [{"name": "progress", "hostPath": {"path": str(progress), "type": "DirectoryOrCreate"}}],
                "containers": [{"name": "trainer", "volumeMounts": [{"name": "progress", "mountPath": MOUNT}]}],
            }
        },
    )


def run_in_thread(op: TrainingGroupOperator, ctx: dict[str, Any]) -> Future:
    future: Future = Future()

    def target() -> None:
        try:
            future.set_result(op.execute(ctx))
        except BaseException as error:  # handed to the test through the future
            future.set_exception(error)

    threading.Thread(target=target, daemon=True).start()
    return future


def listed(jobsets: JobSets) -> list[dict[str, Any]]:
    """The namespace's JobSets that are not being deleted."""
    items = jobsets.custom.list_namespaced_custom_object(GROUP, VERSION, jobsets.ns, PLURAL)["items"]
    return [js for js in items if not js["metadata"].get("deletionTimestamp")]


def resume_env(jobset: dict[str, Any]) -> str | None:
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}.get(contract.RESUME_FROM)


def test_below_min_for_too_long_restarts_the_group_from_the_checkpoint(
    local_cluster: LocalCluster,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    connection: str,
    spot_nodes: list[str],
    tmp_path: Path,
) -> None:
    progress = Progress(tmp_path / "progress")
    checkpoint = tmp_path / "ckpt"
    save_checkpoint(4, files={"w": "4"}, uri=str(checkpoint), ctx=PodContext())
    jobsets = JobSets(api_client, namespace)
    op = TrainingGroupOperator(
        task_id="train",
        group=group(progress.dir, checkpoint),
        kubernetes_conn_id=connection,
        deferrable=False,
        poll_interval=0.2,
        startup_timeout=60,
    )
    done = run_in_thread(op, {"ti": TaskInstance(), "task_state_store": StateStore()})
    try:
        wait_for(lambda: progress.running(range(3), 0, step=2, hosts=3), 40, what="three workers seeing three hosts")
        (first,) = wait_for(lambda: listed(jobsets), 10, what="the first JobSet")
        first_name = first["metadata"]["name"]

        cordon(core, spot_nodes, True)  # no room for replacements
        for index in (1, 2):
            (victim,) = jobsets.live_pods(f"{J}jobset-name={first_name},{J}job-index={index}")
            local_cluster.evict_pod(namespace, victim.metadata.name)

        second = wait_for(
            lambda: [js for js in listed(jobsets) if js["metadata"]["name"] != first_name],
            30,
            what="the operator to submit the next JobSet",
        )[0]
        cordon(core, spot_nodes, False)
        name = second["metadata"]["name"]
        assert resume_env(second) == f"{checkpoint}/step-000000004", second
        wait_for(
            lambda: [p for p in progress.all() if p["pod"].startswith(name) and p["step"] >= 1],
            40,
            what="the next attempt to train",
        )
        progress.finish_soon()
        result = done.result(timeout=40)
    finally:
        if not done.done():  # let the workers (and with them the operator) finish
            (progress.dir / "target").write_text("0")
    first_attempt, last = result["attempts"]
    assert (first_attempt["outcome"], first_attempt["cause"], first_attempt["name"]) == (
        "resubmit",
        "elastic_below_min",
        first_name,
    )
    assert (last["outcome"], last["name"], result["state"]) == ("succeeded", name, "Succeeded"), result
    assert (result["preemptions"], result["failures"]) == (1, 0), result
    assert not jobsets.exists(first_name) or jobsets.get(first_name)["metadata"].get("deletionTimestamp")
