"""The upstream Kubeflow Python SDKs against the local cluster, as users call them: Kubeflow Trainer v2.3's
``TrainerClient`` (``kubeflow==0.4.0``) and training-operator v1.9's ``TrainingClient`` (``kubeflow-training==1.9.3``).

Both are given the cluster's kubeconfig as a ``client_configuration`` of their own (with only a ``config_file`` they
load it into the kubernetes client's process-wide default, which the other tests of the session share).
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_elastic.localcluster import storeport
from tests.support.processes import free_port
from tests.support.waiting import wait_for

MANIFESTS = Path(__file__).parents[1] / "data" / "manifests"


def text(log: str) -> str:
    """A pod log as the server sent it. kubernetes 36's ``read_namespaced_pod_log`` returns the ``repr`` of the
    body's bytes (``"b'...'"``; kubernetes-client/python#2596), and both SDKs pass that on."""
    return ast.literal_eval(log).decode() if log.startswith(("b'", 'b"')) else log


def gone(read) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


@pytest.fixture(scope="module")
def configuration(local_cluster):  # -> kubernetes.client.Configuration
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(local_cluster.kubeconfig), client_configuration=cfg)
    return cfg


def all_reduce():
    """The training function the TrainerClient ships to every node (its source, run by the runtime's torchrun)."""
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    pet = " ".join(f"{k}={os.environ[k]}" for k in ("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE"))
    print(f"RANK {dist.get_rank()} WORLD_SIZE {dist.get_world_size()} SUM {total.item():g} {pet}", flush=True)
    dist.destroy_process_group()


def test_trainer_client_trains_on_the_default_runtime(configuration, core, custom, namespace, caplog):
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import CustomTrainer, TrainerClient
    from kubeflow.trainer.options import Name

    with caplog.at_level(logging.WARNING, logger="kubeflow.trainer"):
        trainer = TrainerClient(KubernetesBackendConfig(namespace=namespace, client_configuration=configuration))
    # verify_backend reads the version the Trainer's install publishes (it only warns when that is missing).
    assert not [r.getMessage() for r in caplog.records if "control-plane version" in r.getMessage()]
    public = core.read_namespaced_config_map("kubeflow-trainer-public", "kubeflow-system")
    assert public.data == {"kubeflow_trainer_version": "v2.3.0"}

    runtimes = {r.name: r for r in trainer.list_runtimes()}
    runtime = runtimes["torch-distributed"]
    assert (runtime.trainer.framework, runtime.trainer.num_nodes) == ("torch", 1)
    assert runtime.trainer.image == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert runtime.trainer.command[:2] == ("bash", "-c") and "torchrun" in runtime.trainer.command[2]

    # The runtime's torchrun rendezvous on PET_MASTER_PORT (29500), and torch's store binds every interface of this
    # one host, where other tests' torchruns may be listening on it: the rendezvous endpoint (PET_RDZV_ENDPOINT,
    # not a reserved variable) moves it to a free port. The leader's DNS name is rewritten to its pod IP.
    name = "sdk-train"
    endpoint = {"PET_RDZV_ENDPOINT": f"{name}-node-0-0.{name}:{free_port()}"}
    job = CustomTrainer(func=all_reduce, num_nodes=2, env={"PYTHONUNBUFFERED": "1", **endpoint})
    assert trainer.train(runtime=runtime, trainer=job, options=[Name(name)]) == name

    # Running (both node pods running, no condition yet) or already Complete; the followed log of node-0 ends when
    # its container exits.
    assert trainer.wait_for_job_status(name, {"Running", "Complete"}, timeout=60, polling_interval=0.2).num_nodes == 2
    followed = [text(line) for line in trainer.get_job_logs(name, follow=True)]
    assert "RANK 0 WORLD_SIZE 2 SUM 3 PET_NNODES=2 PET_NODE_RANK=0 PET_NPROC_PER_NODE=1" in followed

    done = trainer.wait_for_job_status(name, timeout=120, polling_interval=1)
    assert (done.status, done.num_nodes, done.runtime.name) == ("Complete", 2, "torch-distributed")
    steps = sorted(trainer.get_job(name).steps, key=lambda s: s.name)
    assert [(s.name, s.status, s.device_count) for s in steps] == [
        ("node-0", "Succeeded", "1"),
        ("node-1", "Succeeded", "1"),
    ]
    assert all(s.pod_name.startswith(f"{name}-node-0-{i}-") for i, s in enumerate(steps))
    assert [j.name for j in trainer.list_jobs()] == [name]

    for rank in (0, 1):
        lines = [line for log in trainer.get_job_logs(name, step=f"node-{rank}") for line in text(log).splitlines()]
        pet = f"PET_NNODES=2 PET_NODE_RANK={rank} PET_NPROC_PER_NODE=1"
        assert f"RANK {rank} WORLD_SIZE 2 SUM 3 {pet}" in lines
    events = {(e.involved_object_kind, e.reason) for e in trainer.get_job_events(name)}
    assert {("Pod", "Scheduled"), ("Pod", "Started"), ("JobSet", "AllJobsCompleted")} <= events

    trainer.delete_job(name)
    args = ("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", name)
    wait_for(lambda: gone(lambda: custom.get_namespaced_custom_object(*args)), what="the TrainJob to go")
    jobset = ("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
    wait_for(lambda: gone(lambda: custom.get_namespaced_custom_object(*jobset)), what="its JobSet to go")


def pytorchjob(client, body: dict[str, Any]):  # -> kubeflow.training.models.KubeflowOrgV1PyTorchJob
    """``body`` as the SDK's own model, read by its own deserializer (as its ``get_job`` reads a job)."""
    from kubeflow.training.utils.utils import FakeResponse

    return client.api_client.deserialize(FakeResponse(body), "KubeflowOrgV1PyTorchJob")


def test_training_client_runs_a_pytorchjob(configuration, core, namespace, local_cluster):
    """A Master and a Worker all-reducing over gloo. What the SDK cannot read is its own, not the cluster's:
    ``KubeflowOrgV1PyTorchJobSpec`` requires ``runPolicy`` (the CRD does not, and upstream writes none back either:
    release-1.9 ``pytorchjob_controller.go`` defaults its own copy and updates only the status), and its ``ApiClient``
    parses only ``dict(k, v)`` type names while kubernetes 36's models declare ``dict[str, str]``: a job whose pod
    templates carry labels, annotations, resources or a nodeSelector cannot be read back at all, which includes every
    job ``create_job(train_func=...)`` builds (it annotates ``sidecar.istio.io/inject``). So the job is created from a
    manifest without those."""
    from kubeflow.training import TrainingClient

    training = TrainingClient(client_configuration=configuration, namespace=namespace)
    body = yaml.safe_load((MANIFESTS / "pytorchjob-allreduce.yaml").read_text())
    body["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}  # as the SDK's own templates set it
    port = free_port()  # torch's store binds every interface of the one host: no two jobs may share a port
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = port
    name = body["metadata"]["name"]
    training.create_job(job=pytorchjob(training, body))

    done = training.wait_for_job_conditions(name, timeout=120, polling_interval=1)
    assert done.status.replica_statuses["Master"].succeeded == 1
    assert done.status.replica_statuses["Worker"].succeeded == 1
    conditions = training.get_job_conditions(name)
    assert [(c.type, c.status) for c in conditions] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    assert training.is_job_succeeded(name) and not training.is_job_failed(name) and not training.is_job_running(name)
    assert [j.metadata.name for j in training.list_jobs()] == [name]

    master, worker = f"{name}-master-0", f"{name}-worker-0"
    assert sorted(training.get_job_pod_names(name)) == [master, worker]
    assert training.get_job_pod_names(name, is_master=True) == [master]
    assert training.get_job_pod_names(name, replica_type="worker", replica_index=0) == [worker]

    logs, events = training.get_job_logs(name, is_master=False, verbose=True)
    for pod, rank in ((master, 0), (worker, 1)):
        assert f"all-reduce 3 on rank {rank} of 2" in text(logs[pod]).splitlines()
    shown = ast.literal_eval(text(logs[worker]).splitlines()[0])  # the env the operator set, as printed
    assert (shown["RANK"], shown["WORLD_SIZE"]) == ("1", "2")
    # The operator set the Master's port; pods with their own network namespace keep it, on the host's network the
    # local kubelet moves it per rendezvous, alike in both pods (storeport).
    on_master = ast.literal_eval(text(logs[master]).splitlines()[0])
    assert shown["MASTER_PORT"] == on_master["MASTER_PORT"], shown
    if local_cluster.network["mode"] == "netns":
        assert shown["MASTER_PORT"] == str(port), shown
    else:
        assert int(shown["MASTER_PORT"]) in storeport.PORTS, shown
    assert any(f"Created pod: {master}" in event for event in events[f"pytorchjob/{name}"])

    training.delete_job(name)
    wait_for(
        lambda: gone(
            lambda: training.custom_api.get_namespaced_custom_object(
                "kubeflow.org", "v1", namespace, "pytorchjobs", name
            )
        ),
        what="the PyTorchJob to go",
    )
    wait_for(lambda: not training.get_job_pod_names(name), timeout=60, what="its pods to go")
