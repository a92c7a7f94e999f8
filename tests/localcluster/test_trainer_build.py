"""The pure parts of the local Kubeflow Trainer: the JobSet a TrainJob becomes and its status (kubeflow/trainer
v2.3 ``plugins/jobset/builder.go``, ``plugins/torch/torch.go``, ``controller/trainjob_controller.go``)."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from typing import Any

import pytest

from airflow_elastic.localcluster.api.humanize import parse_time
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.controllers.trainjob import install
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.images import PYTORCH
from airflow_elastic.localcluster.kubelet.env import command_line
from airflow_elastic.localcluster.resources import JOBSETS, TRAINJOBS
from airflow_elastic.localcluster.trainer.build import BuildError, build_jobset
from airflow_elastic.localcluster.trainer.status import deadline_left, mirror_jobset, set_condition, set_failed
from tests.support.inprocess import NS, Cluster, condition

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def runtime(*containers: dict[str, Any], policy: dict[str, Any] | None = None, extra=()) -> dict[str, Any]:
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {ANCESTOR: "trainer"}},
            "spec": {"template": {"spec": {"containers": list(containers)}}},
        },
    }
    spec = {"mlPolicy": {"torch": {}} if policy is None else policy, "template": {"spec": {"replicatedJobs": [node]}}}
    spec["template"]["spec"]["replicatedJobs"] += list(extra)
    return {"kind": "ClusterTrainingRuntime", "spec": spec}


def trainjob(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "tj", "namespace": "ns", "uid": "u1"}, "spec": {"runtimeRef": {}, **spec}}


def node_container(js: dict[str, Any], rjob: int = 0) -> dict[str, Any]:
    return js["spec"]["replicatedJobs"][rjob]["template"]["spec"]["template"]["spec"]["containers"][0]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


@pytest.mark.parametrize(
    ("trainer", "nproc"),
    [
        ({}, "1"),
        ({"resourcesPerNode": {"requests": {"cpu": "1500m"}}}, "2"),
        ({"resourcesPerNode": {"limits": {"cpu": "3"}}}, "3"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}}, "auto"),
        ({"numProcPerNode": 4, "resourcesPerNode": {"requests": {"cpu": "8"}}}, "4"),
    ],
)
def test_processes_per_node_follow_the_torch_plugin(trainer, nproc):
    js = build_jobset(trainjob(trainer=trainer), runtime({"name": "node", "image": "img"}))
    assert env(node_container(js))["PET_NPROC_PER_NODE"] == nproc


def test_env_is_runtime_then_trainer_then_pet_and_ports_are_upserted():
    base = {
        "name": "node",
        "image": "img",
        "env": [{"name": "A", "value": "runtime"}, {"name": "B", "value": "runtime"}],
        "ports": [{"name": "metrics", "containerPort": 9090}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    trainer = {
        "numNodes": 3,
        "image": "mine",
        "args": ["--epochs", "2"],
        "env": [{"name": "B", "value": "trainer"}, {"name": "C", "value": "trainer"}],
        "resourcesPerNode": {"requests": {"cpu": "2"}},
    }
    js = build_jobset(trainjob(trainer=trainer, suspend=True), runtime(base))
    node = node_container(js)
    assert [e["name"] for e in node["env"]][:3] == ["A", "B", "C"]
    assert env(node)["B"] == "trainer" and env(node)["PET_NNODES"] == "3"
    assert (node["image"], node["args"]) == ("mine", ["--epochs", "2"])
    assert node["resources"] == {"requests": {"cpu": "2", "memory": "1Gi"}}  # merged per key
    assert node["ports"] == [{"name": "metrics", "containerPort": 9090}, {"containerPort": 29500}]
    rjob = js["spec"]["replicatedJobs"][0]
    assert (rjob["replicas"], rjob["template"]["spec"]["parallelism"], js["spec"]["suspend"]) == (1, 3, True)


def test_patches_merge_in_order_and_a_new_replicated_job_sorts_with_the_first():
    def patch(manager: str, rjob: str, pod: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
        rjobs = [{"name": rjob, "template": {"spec": {"template": {"spec": pod}}}}]
        template = {"metadata": {"labels": labels}, "spec": {"replicatedJobs": rjobs}}
        return {"manager": manager, "trainingRuntimeSpec": {"template": template}}

    mount = {"containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}
    patches = [
        patch("a.io/one", "node", {"nodeSelector": {"pool": "a"}, **mount}, {"team": "one"}),
        patch("b.io/two", "node", {"nodeSelector": {"pool": "b"}}, {"team": "two", "cost": "x"}),
        patch("c.io/three", "sidecar", {"containers": [{"name": "side"}]}, {}),
    ]
    evaluator = {"name": "evaluator", "template": {"spec": {"template": {"spec": {"containers": [{"name": "e"}]}}}}}
    js = build_jobset(trainjob(runtimePatches=patches), runtime({"name": "node", "image": "img"}, extra=[evaluator]))
    assert js["metadata"]["labels"] == {"team": "two", "cost": "x"}
    # Strategic merge appends the unknown "sidecar"; the order restored by index puts it with index 0 (stable).
    assert [r["name"] for r in js["spec"]["replicatedJobs"]] == ["node", "sidecar", "evaluator"]
    node = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node["nodeSelector"] == {"pool": "b"}
    assert node["containers"][0]["image"] == "img" and node["containers"][0]["volumeMounts"][0]["name"] == "data"


def test_initializers_get_their_storage_uri_and_one_replica():
    initializer = {
        "name": "dataset-initializer",
        "replicas": 1,
        "template": {
            "metadata": {"labels": {ANCESTOR: "dataset-initializer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}},
        },
    }
    spec = {"dataset": {"storageUri": "hf://data", "secretRef": {"name": "token"}}}
    js = build_jobset(trainjob(initializer=spec), runtime({"name": "node", "image": "img"}, extra=[initializer]))
    container = node_container(js, 1)
    assert env(container) == {"STORAGE_URI": "hf://data"}
    assert container["envFrom"] == [{"secretRef": {"name": "token"}}]
    assert js["spec"]["replicatedJobs"][1]["template"]["spec"]["completions"] == 1


def test_what_the_local_cluster_cannot_build_is_a_build_error():
    with pytest.raises(BuildError, match=r"mlPolicy\.mpi is not supported"):
        build_jobset(trainjob(), runtime({"name": "node"}, policy={"mpi": {}}))
    with pytest.raises(BuildError, match="torchtune"):
        build_jobset(trainjob(trainer={"command": ["tune", "run"]}), runtime({"name": "node"}))


def test_status_keeps_positions_transition_times_and_the_deadline_failure():
    status: dict[str, Any] = {}
    set_condition(status, {"type": "Suspended", "status": "True", "reason": "Suspended", "message": "m"})
    first = status["conditions"][0]["lastTransitionTime"]
    set_condition(status, {"type": "Suspended", "status": "True", "reason": "Suspended", "message": "again"})
    assert status["conditions"][0]["lastTransitionTime"] == first and status["conditions"][0]["message"] == "again"
    set_failed(status, "DeadlineExceeded", "TrainJob exceeded its active deadline")
    js_failed = {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "x", "lastTransitionTime": "t"}
    jobset = {"status": {"conditions": [js_failed], "replicatedJobsStatus": [{"name": "node", "active": 2}]}}
    mirrored = mirror_jobset(status, jobset)
    assert [c["reason"] for c in mirrored["conditions"]] == ["Suspended", "DeadlineExceeded"]
    assert mirrored["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}
    ]


def test_the_deadline_counts_from_the_last_resume():
    resumed = {"type": "Suspended", "status": "False", "lastTransitionTime": "2026-01-01T00:10:00Z"}
    tj = trainjob(activeDeadlineSeconds=60)
    tj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    at = parse_time("2026-01-01T00:10:30Z")
    assert deadline_left(tj, at) == -570
    tj["status"] = {"conditions": [resumed]}
    assert deadline_left(tj, at) == 30
    assert deadline_left({**tj, "spec": {**tj["spec"], "suspend": True}}, at) is None
    assert deadline_left(tj, at + timedelta(seconds=31)) == -1


def test_the_runtime_image_runs_its_args_as_the_command_even_with_strict_images():
    argv = command_line(
        {"image": PYTORCH, "args": ["python3", "-c", "print('ran')"]}, ClusterConfig(strict_images=True), {}
    )
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == "ran\n"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_runtime_kind_the_trainer_does_not_know_fails_the_trainjob(anyio_backend):
    # Unreachable through the API (the webhook refuses such a TrainJob), so the TrainJob is stored without admission.
    cluster = Cluster()
    install(cluster.store, cluster.manager, Recorder(cluster.store))
    del cluster.store.admission[TRAINJOBS.key]
    cluster.manager.start()
    try:
        body = {"metadata": {"name": "odd"}, "spec": {"runtimeRef": {"name": "x", "apiGroup": "example.com"}}}
        body["spec"]["runtimeRef"]["kind"] = "Runtime"
        cluster.store.create(TRAINJOBS, NS, body)
        await cluster.settle()
        failed = condition(cluster.store.get(TRAINJOBS, NS, "odd"), "Failed")
        assert failed["reason"] == "TrainingRuntimeNotSupported"
        assert failed["message"] == "unsupported runtime: Runtime.example.com"
        assert cluster.get(JOBSETS, "odd") is None
    finally:
        await cluster.manager.stop()
