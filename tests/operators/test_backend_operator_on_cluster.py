"""``TrainingGroupOperator(backend="trainjob" | "pytorchjob")`` against the local cluster's Trainer and
training-operator, deferrable (the trigger rebuilt from its serialized kwargs, as the triggerer does) and sync.

A spot reclaim mid-run (the VM's graceful shutdown) fails the TrainJob / PyTorchJob (no
in-cluster retry: the test's runtime has ``backoffLimit: 0``; a PyTorchJob with ``max_failures=0`` has
``runPolicy.backoffLimit: 0``); the operator deletes it and creates the next one from the latest complete checkpoint,
in the same Airflow try. A
TrainJob the Trainer cannot build ends the wait with its event's message; a CRD of another Trainer version fails the
task before anything is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kubernetes import client

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, TrainingGroup, contract
from airflow_elastic.contract import checkpoints
from airflow_elastic.localcluster import LocalCluster
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.training.backend_io import BackendUnavailable
from airflow_elastic.training import backends
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.paths import ROOT

MANIFESTS = Path(__file__).parents[1] / "data" / "manifests"
SCRIPT = ROOT / "tests" / "data" / "scripts" / "train_ckpt.py"
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
PYTORCH = ("kubeflow.org", "v1")
STEPS = 8


def group(name: str, roles: list[Role], checkpoint: Path, **changes: Any) -> TrainingGroup:
    return TrainingGroup(
        name,
        roles,
        image="python:3.11-slim",
        checkpoint=Checkpointing(str(checkpoint)),
        failure=FailurePolicy(max_failures=0, max_preemptions=2),
        env={"PYTHONPATH": str(ROOT), "TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.4"},
        **changes,
    )


def operator(connection: str, grp: TrainingGroup, backend: str, **kwargs: Any) -> TrainingGroupOperator:
    return TrainingGroupOperator(
        task_id="train",
        group=grp,
        backend=backend,
        kubernetes_conn_id=connection,
        **{"poll_interval": 0.2, "startup_timeout": 60, **kwargs},
    )


def context() -> dict[str, Any]:
    return {"ti": TaskInstance(), "task_state_store": StateStore()}


def run_deferred(op: TrainingGroupOperator, ctx: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """``execute``, then each deferral's trigger (rebuilt from ``serialize()``) to its event and ``execute_complete``,
    as the triggerer and a worker would; returns the result and the triggers."""
    triggers = []
    try:
        return op.execute(ctx), triggers
    except TaskDeferred as deferred:
        current = deferred
    while True:
        path, kwargs = current.trigger.serialize()
        module, _, cls = path.rpartition(".")
        trigger = getattr(importlib.import_module(module), cls)(**kwargs)
        triggers.append(trigger)

        async def fire(t: Any = trigger) -> dict[str, Any]:
            (payload,) = [event.payload async for event in t.run()]
            return payload

        event = asyncio.run(asyncio.wait_for(fire(), 120))
        try:
            return op.execute_complete(ctx, event), triggers
        except TaskDeferred as again:
            current = again


def step_reached(checkpoint: Path) -> int:
    found = checkpoints.latest_complete(None, str(checkpoint))
    return found.step if found else 0


def disrupt_when(checkpoint: Path, step: int, disrupt: Callable[[], None]) -> threading.Thread:
    """Call ``disrupt`` once the group checkpointed ``step``, from a thread: the wait runs meanwhile."""

    def run() -> None:
        deadline = time.monotonic() + 90
        while step_reached(checkpoint) < step and time.monotonic() < deadline:
            time.sleep(0.1)
        disrupt()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def reclaim(cluster: LocalCluster, core: client.CoreV1Api, namespace: str, selector: str) -> None:
    """Shut down the spot VM of the pod ``selector`` names (its pod ends ``Failed``, a backoff limit of 0 is hit); the
    pool gets a new node at once and loses the old one soon, so later tests see two spot nodes again."""
    [pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
    cluster.preempt_node(pod.spec.node_name, style="gke", grace_seconds=1, delete_after=0.5, replace_after=0.2)


def test_a_trainjob_whose_trainer_fails_in_place_until_the_backoff_limit_names_that_failure(
    custom, namespace, connection, tmp_path
):
    apply_runtime(custom, namespace, "trainingruntime-one-retry.yaml")
    failing = Role("node", command=["python", "-c", "import sys; sys.exit('trainer broke: bad batch')"])
    op = operator(connection, group("tjloop", [failing], tmp_path, coordinator_port=29500), "trainjob")
    with pytest.raises(AirflowException) as failed:
        run_deferred(op, context())
    # The Job controller deleted the pod it had restarted in place; its last failure is what the task reports.
    message = str(failed.value)
    assert "no failed pod was left to inspect" not in message, message
    assert re.search(r"pod tjloop-\w+-node-0-0-\w+ \(role node, attempt 0\) Error \(restarted in place 1 time\(s\)\) "
                     r"\(exit code 1\)", message), message  # fmt: skip


@pytest.fixture
def coordinator_elsewhere() -> Iterator[None]:
    """Another group's coordinator listening on 29500 at its own pod IP meanwhile (any JobSet group's default
    ``coordinator_port``, in this cluster or another one on the host): torch's store, which binds all interfaces,
    must not need the Trainer's port free on the whole host. A port someone already holds is that situation too."""
    with socket.socket() as listener:
        with contextlib.suppress(OSError):
            listener.bind(("127.250.0.1", backends.TRAINER_PORT))
            listener.listen()
        yield


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def apply_runtime(custom: client.CustomObjectsApi, namespace: str, manifest: str) -> None:
    body = yaml.safe_load((MANIFESTS / manifest).read_text())
    custom.create_namespaced_custom_object(*TRAINER, namespace, "trainingruntimes", body)


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_a_spot_reclaimed_trainjob_is_resubmitted_from_its_checkpoint(
    deferrable, local_cluster, core, custom, namespace, connection, tmp_path, coordinator_elsewhere
):
    apply_runtime(custom, namespace, "trainingruntime-no-retries.yaml")  # wins over the cluster's torch-distributed
    ckpt = tmp_path / "ckpt"
    node = Role("node", command=["python", str(SCRIPT)], placement=Placement(spot=True))
    op = operator(connection, group("tjop", [node], ckpt, coordinator_port=29500), "trainjob", deferrable=deferrable)
    disrupter = disrupt_when(ckpt, 3, lambda: reclaim(local_cluster, core, namespace, "jobset.sigs.k8s.io/jobset-name"))
    result, triggers = run_deferred(op, ctx := context())
    disrupter.join(5)
    assert [t.backend for t in triggers] == (["trainjob"] * 2 if deferrable else [])
    second = result["name"]
    assert (result["backend"], result["state"]) == ("trainjob", "Succeeded")
    assert result["metrics"]["step"] == STEPS and result["metrics"]["resumed_from"] >= 3, result["metrics"]
    assert result["preemptions"] == 1 and ctx["ti"].try_number == 1
    assert [(a["outcome"], a["cause"]) for a in result["attempts"]] == [
        ("resubmit", "spot_reclaim"),
        ("succeeded", "succeeded"),
    ]
    trainjobs = custom.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")["items"]
    assert [t["metadata"]["name"] for t in trainjobs if not t["metadata"].get("deletionTimestamp")] == [second]
    [tj] = [t for t in trainjobs if t["metadata"]["name"] == second]
    assert tj["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert env_of(tj["spec"]["trainer"])[contract.RESUME_FROM].startswith(f"{ckpt}/step-")


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_spot_reclaimed_pytorchjob_is_resubmitted_from_its_checkpoint(
    deferrable, local_cluster, core, custom, namespace, connection, tmp_path
):
    ckpt = tmp_path / "ckpt"
    worker = Role("worker", command=["python", str(SCRIPT)], placement=Placement(spot=True))
    leader = Role("leader", command=["python", str(SCRIPT)])
    op = operator(connection, group("ptop", [leader, worker], ckpt), "pytorchjob", deferrable=deferrable)
    selector = "training.kubeflow.org/replica-type=worker"

    disrupter = disrupt_when(ckpt, 3, lambda: reclaim(local_cluster, core, namespace, selector))
    result, triggers = run_deferred(op, context())
    disrupter.join(5)
    assert [t.backend for t in triggers] == (["pytorchjob"] * 2 if deferrable else [])
    assert (result["backend"], result["state"], result["preemptions"]) == ("pytorchjob", "Succeeded", 1)
    assert result["attempts"][0]["cause"] == "spot_reclaim", result["attempts"]
    assert result["metrics"]["step"] == STEPS and result["metrics"]["resumed_from"] >= 3, result["metrics"]
    assert [a["outcome"] for a in result["attempts"]] == ["resubmit", "succeeded"]
    jobs = custom.list_namespaced_custom_object(*PYTORCH, namespace, "pytorchjobs")["items"]
    [job] = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
    assert job["metadata"]["name"] == result["name"]
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert env_of(master)[contract.RESUME_FROM].startswith(f"{ckpt}/step-")


def test_a_trainjob_the_trainer_cannot_build_ends_the_wait_with_the_event(custom, namespace, connection, tmp_path):
    apply_runtime(custom, namespace, "trainingruntime-unbuildable.yaml")
    grp = group("tjbad", [Role("node", command=["python", "-c", "pass"])], tmp_path, coordinator_port=29500)
    op = operator(connection, grp, "trainjob", runtime="unbuildable", startup_timeout=120)
    started = time.monotonic()
    with pytest.raises(AirflowException, match=r"TrainJob .* failed \(TrainJobResourcesCreationFailed: .*too long"):
        run_deferred(op, context())
    assert time.monotonic() - started < 60  # the event ended it, not the startup timeout


@pytest.fixture
def trainer_v20_crd(api_client: client.ApiClient) -> Iterator[None]:
    """The TrainJob CRD as Trainer v2.0 had it (``spec.labels``, no ``runtimePatches``), restored afterwards."""
    crds = client.ApiextensionsV1Api(api_client)
    name = "trainjobs.trainer.kubeflow.org"
    original = api_client.sanitize_for_serialization(crds.read_custom_resource_definition(name))
    older = copy.deepcopy(original)
    spec = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec.pop("runtimePatches")
    spec["labels"] = {"type": "object", "additionalProperties": {"type": "string"}}
    crds.replace_custom_resource_definition(name, older)
    try:
        yield
    finally:
        current = crds.read_custom_resource_definition(name)
        original["metadata"]["resourceVersion"] = current.metadata.resource_version
        crds.replace_custom_resource_definition(name, original)


def test_a_crd_of_another_trainer_version_fails_before_anything_is_created(
    trainer_v20_crd, custom, namespace, connection, tmp_path
):
    grp = group("tjold", [Role("node", command=["python", "-c", "pass"])], tmp_path, coordinator_port=29500)
    with pytest.raises(BackendUnavailable, match=r"spec\.runtimePatches is missing .* targets Kubeflow Trainer v2\.3"):
        operator(connection, grp, "trainjob", deferrable=False).execute(context())
    assert custom.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")["items"] == []
