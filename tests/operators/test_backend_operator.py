"""``TrainingGroupOperator(backend="trainjob" | "pytorchjob")`` without a cluster: parse-time refusals, the cluster
checks before the first create, and submit / resubmit / finish through the same code as JobSets."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_elastic import Checkpointing, FailurePolicy, Role, SpecError, TrainingGroup, contract
from airflow_elastic.hooks.errors import NotFound
from airflow_elastic.kube import schemas
from airflow_elastic.localcluster.patch import merge_patch
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators.training.backend_io import BackendHook, BackendUnavailable
from airflow_elastic.runtime import save_checkpoint
from airflow_elastic.runtime.context import Context as PodContext
from airflow_elastic.training.state import GroupEvent
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

NODES = TrainingGroup("tj", [Role("node", replicas=2, command=["torchrun", "train.py"])], image="x")
PREEMPTED = {"attempt": 0, "pod": "w", "cause": "spot_reclaim", "budget": "preemption", "step": 7}


def trainjob_crd(**spec_changes: Any) -> dict[str, Any]:
    schema = copy.deepcopy(schemas.load(schemas.TRAINJOBS))
    schema["properties"]["spec"]["properties"].update(spec_changes)
    return {"spec": {"versions": [{"name": "v1alpha1", "served": True, "schema": {"openAPIV3Schema": schema}}]}}


class TrainingJobHook(FakeHook):
    """``FakeHook`` plus ``TrainingJobHookProtocol``: TrainJobs and PyTorchJobs in a dict, CRDs and runtimes given."""

    def __init__(self, crds: Mapping[str, Any] | None = None, runtimes: Mapping[str, Any] | None = None, **kw: Any):
        super().__init__(**kw)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.crds = dict(crds or {})
        self.runtimes = dict(runtimes or {})  # (kind, name) -> runtime

    def create_training_job(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append((f"create {plural}", body["metadata"]["name"]))
        obj = copy.deepcopy(dict(body))
        obj["metadata"]["uid"] = str(uuid.uuid4())
        self.objects[(plural, namespace, obj["metadata"]["name"])] = obj
        return copy.deepcopy(obj)

    def get_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if (plural, namespace, name) not in self.objects:
            raise NotFound(404, "NotFound", f"{plural} {name} not found")
        return copy.deepcopy(self.objects[(plural, namespace, name)])

    def patch_training_job(self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        key = (plural, namespace, name)
        self.objects[key] = merge_patch(self.objects[key], dict(patch))
        return copy.deepcopy(self.objects[key])

    def delete_training_job(self, plural: str, namespace: str, name: str, propagation: str = "Foreground") -> Any:
        self.calls.append((f"delete {plural}", name))
        return self.objects.pop((plural, namespace, name), None)

    def get_training_runtime(self, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
        return self.runtimes.get((kind, name))

    def get_crd(self, name: str) -> dict[str, Any] | None:
        return self.crds.get(name)


def cluster(cls: type[TrainingJobHook] = TrainingJobHook, **kw: Any) -> TrainingJobHook:
    """A cluster with Trainer v2.3's CRD and the default cluster runtime."""
    crds = {"trainjobs.trainer.kubeflow.org": trainjob_crd(), "pytorchjobs.kubeflow.org": {"spec": {}}}
    runtimes = {("ClusterTrainingRuntime", "torch-distributed"): {"kind": "ClusterTrainingRuntime"}}
    return cls(crds=kw.pop("crds", crds), runtimes=kw.pop("runtimes", runtimes), **kw)


def operator(hook: TrainingJobHook, group: TrainingGroup = NODES, **kwargs: Any) -> TrainingGroupOperator:
    op = TrainingGroupOperator(task_id="train", group=group, namespace="ns", backend="trainjob", **kwargs)
    op.hook = lambda: BackendHook(hook, op.backend, op._roles)  # type: ignore[method-assign]
    return op


def context() -> dict[str, Any]:
    return {"ti": TaskInstance(), "task_state_store": StateStore()}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"jobset": {"kind": "JobSet", "metadata": {"name": "x"}}, "backend": "trainjob"}, "backend"),
        ({"group": NODES, "runtime": "mine"}, "runtime"),  # a runtime means nothing to a JobSet
        ({"group": NODES, "backend": "mpijob"}, "backend"),
        ({"group": NODES.with_changes(roles=[*NODES.roles, Role("w", command=["x"])]), "backend": "trainjob"}, "roles"),
    ],
)
def test_what_a_backend_cannot_run_is_refused_when_the_dag_is_parsed(kwargs, field):
    with pytest.raises(SpecError) as raised:
        TrainingGroupOperator(task_id="t", **kwargs)
    assert field in [path for path, _ in raised.value.problems], raised.value.problems


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        (cluster(crds={}), "no TrainJob CRD (trainjobs.trainer.kubeflow.org); install Kubeflow Trainer v2.3"),
        (
            cluster(crds={"trainjobs.trainer.kubeflow.org": trainjob_crd(labels={"type": "object"})}),
            "spec.labels exists (Trainer before v2.2); airflow-elastic targets Kubeflow Trainer v2.3",
        ),
        (cluster(runtimes={}), "runtime='torch-distributed': no TrainingRuntime ns/torch-distributed and no Cluster"),
    ],
)
def test_the_cluster_is_checked_before_anything_is_created(hook, message):
    with pytest.raises(BackendUnavailable) as raised:
        operator(hook).execute(context())
    assert message in str(raised.value)
    assert not hook.objects and not hook.calls


def test_a_preempted_trainjob_is_deleted_and_resubmitted_from_the_checkpoint_in_the_same_try(tmp_path):
    uri = str(tmp_path / "ckpt")
    save_checkpoint(4, files={"w": "4"}, uri=uri, ctx=PodContext())
    # The namespace's own runtime of that name wins over the cluster's.
    hook = cluster(
        runtimes={("TrainingRuntime", "torch-distributed"): {}, ("ClusterTrainingRuntime", "torch-distributed"): {}}
    )
    group = NODES.with_changes(checkpoint=Checkpointing(uri), failure=FailurePolicy(max_preemptions=2))
    op, ctx = operator(hook, group), context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    first = deferred.value.trigger
    assert (first.backend, first.settings.max_preemptions, first.settings.metrics_role) == ("trainjob", 2, "node")
    [(_, _, name)] = hook.objects
    assert hook.objects[("trainjobs", "ns", name)]["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    failed = GroupEvent("failed", first.name, "ns", uid=first.uid, phase="Failed", evidence=(PREEMPTED,))
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(ctx, failed.to_payload())
    second = again.value.trigger
    assert ("delete trainjobs", first.name) in hook.calls and second.name != first.name
    trainer = hook.objects[("trainjobs", "ns", second.name)]["spec"]["trainer"]
    assert {e["name"]: e.get("value") for e in trainer["env"]}[contract.RESUME_FROM] == f"{uri}/step-000000004"
    done = GroupEvent("succeeded", second.name, "ns", uid=second.uid, phase="Succeeded")
    result = op.execute_complete(ctx, done.to_payload())
    assert (result["backend"], result["name"], result["preemptions"], len(result["attempts"])) == (
        "trainjob",
        second.name,
        1,
        2,
    )


def test_a_build_error_event_ends_the_sync_wait_with_its_message():
    """The Trainer reports a TrainJob it cannot build only with an Event: the wait fails with it at once."""
    event = {
        "type": "Warning",
        "reason": "TrainJobResourcesCreationFailed",
        "message": "TrainJob resources reconciliation failed: admission webhook denied the JobSet",
        "involvedObject": {"kind": "TrainJob"},
    }

    class Events(TrainingJobHook):
        def list_events(self, namespace: str, field_selector: str | None = None) -> list[dict[str, Any]]:
            named = [name for (_, _, name) in self.objects]
            return [{**event, "involvedObject": {"kind": "TrainJob", "name": n}} for n in named]

    hook = cluster(Events)
    op = operator(hook, deferrable=False, poll_interval=0.01, startup_timeout=3)
    with pytest.raises(AirflowException, match=r"TrainJob ns/tj-.* failed \(TrainJobResourcesCreationFailed: .*denied"):
        op.execute(context())


def test_a_pytorchjob_runs_with_its_roles_and_checks_its_crd():
    group = TrainingGroup(
        "pt", [Role("leader", command=["python"]), Role("worker", replicas=2, command=["python"])], image="x"
    )
    hook = cluster()
    op = TrainingGroupOperator(task_id="train", group=group, namespace="ns", backend="pytorchjob")
    op.hook = lambda: BackendHook(hook, op.backend, op._roles)  # type: ignore[method-assign]
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    trigger = deferred.value.trigger
    assert (trigger.backend, trigger.roles, trigger.settings.metrics_role) == (
        "pytorchjob",
        ["leader", "worker"],
        "leader",
    )
    [(plural, _, _)] = hook.objects
    assert plural == "pytorchjobs"
    hook.crds.clear()
    with pytest.raises(BackendUnavailable, match=r"no PyTorchJob CRD .*training-operator v1"):
        op.execute(context())
