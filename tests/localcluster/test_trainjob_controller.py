"""The local Kubeflow Trainer (TrainJob, ClusterTrainingRuntime, TrainingRuntime) against upstream v2.3 semantics,
through the kubernetes client and kubectl only. Manifests are adapted from kubeflow/trainer ``examples/yaml``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_elastic.localcluster import LocalCluster, storeport
from tests.support.jobsets import condition
from tests.support.waiting import wait_for

MANIFESTS = Path(__file__).parents[1] / "data" / "manifests"
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
RANK_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def trainjob(name: str, runtime: str = "torch-distributed", **spec: Any) -> dict[str, Any]:
    body_spec = {"runtimeRef": {"name": runtime}, **spec}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": {"name": name}, "spec": body_spec}


def get(custom, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)


def jobset(custom, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def finished(custom, namespace: str, name: str) -> dict[str, Any] | None:
    tj = get(custom, namespace, name)
    done = condition(tj, "Complete") or condition(tj, "Failed")
    return tj if done and done["status"] == "True" else None


def logs(core, namespace: str, name: str, prefix: str) -> list[str]:
    """The lines starting with ``prefix`` of the TrainJob's pods' logs (torchrun also logs its own warnings)."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
    raw = (core.read_namespaced_pod_log(p.metadata.name, namespace, _preload_content=False) for p in pods)
    return sorted(line for r in raw for line in r.data.decode().splitlines() if line.startswith(prefix))


def rejected(custom, namespace: str, body: dict[str, Any]) -> tuple[int, str]:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", body)
    return caught.value.status, caught.value.body


def test_kubectl_serves_the_kinds_and_the_default_runtime(kubectl):
    resources = kubectl("api-resources", "--api-group=trainer.kubeflow.org", "--no-headers").stdout.split("\n")
    scopes = {line.split()[0]: line.split()[-2] for line in resources if line}
    assert scopes == {"clustertrainingruntimes": "false", "trainingruntimes": "true", "trainjobs": "true"}
    runtime = yaml.safe_load(kubectl("get", "clustertrainingruntime", "torch-distributed", "-o", "yaml").stdout)
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node["containers"][0]["image"] == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert kubectl("get", "clustertrainingruntimes").stdout.split()[:3] == ["NAME", "AGE", "torch-distributed"]


def expected_port(cluster: LocalCluster, port: str) -> bool:
    """Whether a rendezvous port seen in the pods is right: 29500 as declared in pods with their own network
    namespace; on the host's network moved off it (torch's store binds every interface of the one host: storeport)."""
    if cluster.network["mode"] == "netns":
        return port == "29500"
    return int(port) in storeport.PORTS


def test_two_nodes_run_a_gloo_all_reduce_under_torchrun(custom, core, kubectl, namespace, local_cluster):
    manifest = yaml.safe_load((MANIFESTS / "trainjob-multi-node.yaml").read_text())
    kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(manifest))
    tj = wait_for(lambda: finished(custom, namespace, "multi-node"), timeout=120, what="the TrainJob to finish")
    assert [c["type"] for c in tj["status"]["conditions"]] == ["Complete"]
    complete = tj["status"]["conditions"][0]
    assert (complete["reason"], complete["message"]) == ("AllJobsCompleted", "jobset completed successfully")
    assert tj["status"]["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    node = jobset(custom, namespace, "multi-node")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert node["spec"]["containers"][0]["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PET_NNODES", "value": "2"},
        {"name": "PET_NPROC_PER_NODE", "value": "1"},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": RANK_FIELD}}},
        {"name": "PET_MASTER_ADDR", "value": "multi-node-node-0-0.multi-node"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
    ]
    # The leader's DNS name reaches the processes rewritten to its pod IP (the local cluster's DNS), and the port
    # the same for both nodes (see expected_port).
    leader = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-completion-index=0")
    [port] = {line.split("PET_MASTER_PORT=")[1].split()[0] for line in logs(core, namespace, "multi-node", "RANK ")}
    assert expected_port(local_cluster, port), port
    pet = f"PET_MASTER_ADDR={leader.items[0].status.pod_ip} PET_MASTER_PORT={port} PET_NNODES=2 PET_NODE_RANK={{}}"
    assert logs(core, namespace, "multi-node", "RANK ") == [
        f"RANK {i} WORLD_SIZE 2 SUM 3 {pet.format(i)} PET_NPROC_PER_NODE=1" for i in (0, 1)
    ]
    table = kubectl("get", "trainjobs", "-n", namespace).stdout.split()
    assert table[:5] == ["NAME", "STATE", "AGE", "multi-node", "Complete"]


def test_snapshot_patches_suspend_and_resume(custom, core, kubectl, namespace, local_cluster):
    kubectl("apply", "-n", namespace, "-f", str(MANIFESTS / "trainjob-runtime-patches.yaml"))
    name = "runtime-patches"
    js = wait_for(lambda: jobset(custom, namespace, name), what="the JobSet")
    assert js["spec"]["suspend"] is True
    assert js["metadata"]["labels"] == {"runtime-label": "from-runtime", "team": "ml-platform"}
    assert js["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    owner = js["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"], owner["blockOwnerDeletion"]) == ("TrainJob", True, True)
    rjob = js["spec"]["replicatedJobs"][0]
    assert (rjob["replicas"], rjob["template"]["spec"]["parallelism"], rjob["template"]["spec"]["completions"]) == (
        1,
        2,
        2,
    )
    wait_for(lambda: condition(get(custom, namespace, name), "Suspended"), what="the Suspended condition")
    assert kubectl("get", "trainjob", name, "-n", namespace, "--no-headers").stdout.split()[1] == "Suspended"

    # The runtime as first read is kept in the snapshot: editing the runtime now changes nothing for this TrainJob.
    snapshot = core.read_namespaced_config_map(f"{name}-runtime-snapshot", namespace)
    assert snapshot.metadata.owner_references[0].kind == "TrainJob"
    runtime = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", "printenv")
    assert yaml.safe_load(snapshot.data["runtime"])["spec"] == runtime["spec"]
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container["containers"][0]["env"][0]["value"] = "v2"
    custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", "printenv", runtime)

    # While suspended, runtimePatches may change and the JobSet is re-applied.
    patches = get(custom, namespace, name)["spec"]["runtimePatches"]
    assert patches[0]["time"]  # set by the mutating webhook
    patches[0]["trainingRuntimeSpec"]["template"]["metadata"]["labels"]["stage"] = "resumed"
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", name, {"spec": {"runtimePatches": patches, "suspend": False}}
    )
    tj = wait_for(lambda: finished(custom, namespace, name), timeout=60, what="the TrainJob to finish")
    assert [(c["type"], c["status"], c["reason"]) for c in tj["status"]["conditions"]] == [
        ("Suspended", "False", "Resumed"),
        ("Complete", "True", "AllJobsCompleted"),
    ]
    assert jobset(custom, namespace, name)["metadata"]["labels"]["stage"] == "resumed"
    printed = [re.sub(r"PET_MASTER_ADDR=\S+ ", "", line) for line in logs(core, namespace, name, "RUNTIME_")]
    [port] = {re.search(r"PET_MASTER_PORT=(\d+)", line)[1] for line in printed}  # alike (see expected_port)
    assert expected_port(local_cluster, port), printed
    pet = f"PET_MASTER_PORT={port} PET_NNODES=2 PET_NODE_RANK={{}} PET_NPROC_PER_NODE=2"
    assert printed == [f"RUNTIME_VERSION=v1 CUSTOM_VAR=custom-value {pet.format(i)}" for i in (0, 1)]
    pods = core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
    assert {p.spec.node_selector["airflow-elastic.io/capacity-type"] for p in pods} == {"on-demand"}
    assert kubectl("get", "trainjob", name, "-n", namespace, "--no-headers").stdout.split()[1] == "Complete"

    from kubernetes.client.exceptions import ApiException

    patches[0]["trainingRuntimeSpec"]["template"]["metadata"]["labels"]["stage"] = "late"
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs", name, {"spec": {"runtimePatches": patches}}
        )
    assert caught.value.status == 403
    assert (
        "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before "
        "or after the update"
    ) in caught.value.body
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs", name, {"spec": {"trainer": {"numNodes": 3}}}
        )
    assert caught.value.status == 422
    assert 'spec.trainer: Invalid value: \\"object\\": field is immutable' in caught.value.body

    # Deleting the TrainJob collects its JobSet (and that its pods) and the snapshot.
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
    wait_for(lambda: jobset(custom, namespace, name) is None, what="the JobSet to be collected")
    wait_for(lambda: not core.list_namespaced_config_map(namespace).items, what="the snapshot to be collected")


def test_admission_rejects_as_upstream(custom, namespace):
    status, body = rejected(custom, namespace, trainjob("no-runtime", "missing"))
    assert status == 403
    assert (
        'admission webhook \\"validator.trainjob.trainer.kubeflow.org\\" denied the request: spec.RuntimeRef: '
        'Invalid value: v1alpha1.RuntimeRef{Name:\\"missing\\"'
    ) in body
    assert (
        'clustertrainingruntimes.trainer.kubeflow.org \\"missing\\" not found: specified clusterTrainingRuntime '
        "must be created before the TrainJob is created"
    ) in body
    reserved = trainjob("reserved", trainer={"env": [{"name": "PET_NODE_RANK", "value": "1"}]})
    status, body = rejected(custom, namespace, reserved)
    assert status == 403
    assert "must not have reserved envs, invalid envs configured: [PET_NODE_RANK]" in body
    status, body = rejected(custom, namespace, trainjob("1-starts-with-a-digit"))
    assert status == 422
    assert "metadata.name must match RFC 1035 DNS label format" in body
    status, body = rejected(custom, namespace, trainjob("a" * 64))
    assert status == 422
    assert "metadata.name must be no more than 63 characters" in body
    status, body = rejected(custom, namespace, trainjob("other-manager", managedBy="example.com/mine"))
    assert status == 422
    assert "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set" in body
    pod = {"spec": {"containers": [{"name": "node", "env": [{"name": "X"}]}]}}
    rjob = {"name": "node", "template": {"spec": {"template": pod}}}
    patch_spec = {"template": {"spec": {"replicatedJobs": [rjob]}}}
    env_patch = {"manager": "example.io/team", "trainingRuntimeSpec": patch_spec}
    status, body = rejected(custom, namespace, trainjob("env-patch", runtimePatches=[env_patch]))
    assert status == 403
    assert "must not have envs for the dataset-initializer, model-initializer, node containers" in body
    status, body = rejected(custom, namespace, trainjob("bad-manager", runtimePatches=[{"manager": "example.io/"}]))
    assert status == 403
    assert 'spec.runtimePatches.manager: Invalid value: \\"example.io/\\": must be a domain-prefixed path' in body
    status, body = rejected(
        custom, namespace, trainjob("needs-data", initializer={"dataset": {"storageUri": "hf://d"}})
    )
    assert status == 403
    assert "must have dataset-initializer job when trainJob is configured with input datasetConfig" in body
    status, body = rejected(custom, namespace, trainjob("bad-uri", initializer={"model": {"storageUri": "no-scheme"}}))
    assert status == 422
    assert "storageUri may be empty, or it must be a valid URI (scheme://...)" in body
    # Upstream checks patch targets against the template with the patches already merged in, so a patch naming a
    # replicatedJob the runtime lacks passes (the JobSet then carries it).
    ghost_pod = {"spec": {"containers": [{"name": "ghost", "image": "busybox"}]}}
    ghost_rjobs = [{"name": "ghost", "template": {"spec": {"template": ghost_pod}}}]
    ghost = {"manager": "example.io/g", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": ghost_rjobs}}}}
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", trainjob("ghost", runtimePatches=[ghost], suspend=True)
    )


def test_build_error_is_only_an_event_and_multikueue_jobs_are_skipped(custom, core, namespace):
    # 50 characters: admitted (RFC 1035, <= 63), but the JobSet's pod names would exceed 63 characters.
    long = "n" * 50
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", trainjob("elsewhere", managedBy="kueue.x-k8s.io/multikueue")
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", trainjob(long))

    def event() -> Any:
        found = core.list_namespaced_event(namespace, field_selector="reason=TrainJobResourcesCreationFailed").items
        return found[0] if found else None

    found = wait_for(event, what="the TrainJobResourcesCreationFailed event")
    assert (found.type, found.involved_object.kind, found.involved_object.name) == ("Warning", "TrainJob", long)
    assert found.message.startswith(
        'TrainJob resources reconciliation failed: admission webhook "vjobset.kb.io" denied the request: '
    )
    assert "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters" in found.message
    assert jobset(custom, namespace, long) is None
    assert not (get(custom, namespace, long).get("status") or {}).get("conditions")
    # The multikueue TrainJob, created first, was reconciled before the event above (one queue, in order).
    assert jobset(custom, namespace, "elsewhere") is None
    assert not get(custom, namespace, "elsewhere").get("status")


def test_active_deadline_fails_the_trainjob_and_deletes_its_jobset(custom, core, namespace):
    # args alone: the runtime's image has no entrypoint, so they run as the command.
    sleeper = {"numNodes": 1, "args": ["python3", "-c", "import time; time.sleep(120)"]}
    name = "deadline"
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", trainjob(name, trainer=sleeper, activeDeadlineSeconds=2)
    )
    phases = lambda: [p.status.phase for p in core.list_namespaced_pod(namespace).items if p.status]  # noqa: E731
    wait_for(lambda: "Running" in phases(), what="the sleeper to run")
    tj = wait_for(lambda: finished(custom, namespace, name), timeout=30, what="the deadline")
    failed = condition(tj, "Failed")
    assert (failed["reason"], failed["message"]) == ("DeadlineExceeded", "TrainJob exceeded its active deadline")
    wait_for(lambda: jobset(custom, namespace, name) is None, what="the JobSet to be deleted")


def test_a_failed_jobset_fails_the_trainjob_with_its_reason(custom, namespace):
    pod = {"restartPolicy": "Never", "containers": [{"name": "node", "image": "python:3.11", "command": ["false"]}]}
    rjob = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"backoffLimit": 0, "template": {"spec": pod}},
        },
    }
    runtime = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRuntime",
        "metadata": {"name": "fails-fast"},
        "spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {"replicatedJobs": [rjob]}}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", runtime)
    body = trainjob("fails", "fails-fast", trainer={"numNodes": 2})
    body["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", body)
    tj = wait_for(lambda: finished(custom, namespace, "fails"), timeout=30, what="the TrainJob to fail")
    assert [(c["type"], c["reason"]) for c in tj["status"]["conditions"]] == [("Failed", "FailedJobs")]
    assert tj["status"]["conditions"][0]["message"] == (
        "jobset failed due to one or more job failures (first failed job: fails-node-0)"
    )
    assert tj["status"]["jobsStatus"][0]["failed"] == 1


def test_runtime_admission_as_upstream(custom):
    from kubernetes.client.exceptions import ApiException

    def create(spec: dict[str, Any]) -> tuple[int, str]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterTrainingRuntime", "metadata": {"name": "bad"}}
        with pytest.raises(ApiException) as caught:
            custom.create_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", {**body, "spec": spec})
        return caught.value.status, caught.value.body

    labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    pod = {"spec": {"containers": [{"name": "main", "image": "img"}]}}
    rjob = {"name": "node", "replicas": 2, "template": {"metadata": {"labels": labels}, "spec": {"template": pod}}}
    status, body = create({"template": {"spec": {"replicatedJobs": [rjob]}}})
    assert status == 403
    assert 'admission webhook \\"validator.clustertrainingruntime.trainer.kubeflow.org\\" denied the request' in body
    assert "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1" in body
    assert "must contain the required container for the ancestor: trainer" in body
    status, body = create({"mlPolicy": {"torch": {}, "mpi": {}}, "template": {"spec": {"replicatedJobs": []}}})
    assert status == 422
    assert "Only one of the policy can be configured" in body
