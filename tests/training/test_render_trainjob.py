"""Rendering a single-role TrainingGroup as a Kubeflow Trainer v2 TrainJob: trainer fields, runtime patches (never
the runtime), torchrun, Kueue, and validity against the packaged Trainer v2.3 CRD schema."""

from __future__ import annotations

import pytest

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Resources, Role, SpecError, TrainingGroup
from airflow_elastic.kube.schema import trainjob_schema_errors
from airflow_elastic.training.render import render_trainjob
from tests.support.builders import group


def ddp(**changes: object) -> TrainingGroup:
    role = Role(
        "trainer",
        replicas=2,
        command=["python", "train.py"],
        args=["--lr=0.1"],
        resources=Resources(cpu="4", memory="8Gi", gpu=1),
    )
    return group(roles=[role], checkpoint=Checkpointing(uri="s3://ckpt/run"), env={"SEED": "1"}).with_changes(**changes)


def env(manifest: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in manifest["spec"]["trainer"]["env"]}


def node_pod(manifest: dict) -> dict:
    (patch,) = manifest["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    return rjob["template"]["spec"]["template"]


def test_trainer_fields_come_from_the_one_role():
    manifest = render_trainjob(ddp(), name="train-abc123", namespace="ml")
    assert manifest["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and manifest["kind"] == "TrainJob"
    assert manifest["metadata"]["name"] == "train-abc123" and manifest["metadata"]["namespace"] == "ml"
    assert manifest["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    trainer = manifest["spec"]["trainer"]
    assert trainer["image"] == "example/trainer:1" and trainer["numNodes"] == 2
    # Always explicit: unset, the Trainer derives it from the CPU request (4 processes here).
    assert trainer["numProcPerNode"] == 1
    assert trainer["args"] == ["--lr=0.1"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    assert "suspend" not in manifest["spec"] and trainjob_schema_errors(manifest) == []


def test_a_program_runs_under_torchrun_and_torchrun_is_left_alone():
    assert render_trainjob(ddp())["spec"]["trainer"]["command"] == ["torchrun", "--no-python", "python", "train.py"]
    own = ddp(roles=[Role("trainer", command=["torchrun", "--nproc-per-node=2", "train.py"], processes_per_pod=2)])
    trainer = render_trainjob(own)["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "--nproc-per-node=2", "train.py"] and trainer["numProcPerNode"] == 2


def test_environment_contract_reads_the_pods_index_and_sets_no_pet_names():
    found = env(render_trainjob(ddp(), name="train-abc123"))
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert found["AE_RANK"] == found["AE_ROLE_RANK"] == index
    assert found["AE_JOBSET"] == "train-abc123" and found["AE_WORLD_SIZE"] == "2"
    assert found["AE_COORDINATOR_ADDR"] == "train-abc123-node-0-0.train-abc123"  # the Trainer's PET_MASTER_ADDR
    assert found["AE_CHECKPOINT_URI"] == "s3://ckpt/run" and found["SEED"] == "1"
    assert not [name for name in found if name.startswith("PET_") or name in ("MASTER_ADDR", "RANK", "WORLD_SIZE")]


def test_labels_reach_the_trainjob_its_jobset_and_its_pods_through_the_runtime_patch():
    manifest = render_trainjob(ddp(), labels={"airflow-elastic.io/dag-id": "d"})
    ours = {
        "app.kubernetes.io/managed-by": "airflow-elastic",
        "airflow-elastic.io/group": "train",
        "airflow-elastic.io/dag-id": "d",
    }
    assert manifest["metadata"]["labels"] == ours
    (patch,) = manifest["spec"]["runtimePatches"]
    assert patch["manager"] == "airflow-elastic.io/operator"
    assert patch["trainingRuntimeSpec"]["template"]["metadata"]["labels"] == ours
    assert node_pod(manifest)["metadata"]["labels"] == {**ours, "airflow-elastic.io/role": "trainer"}
    assert "labels" not in manifest["spec"]  # removed in Trainer v2.2


def test_placement_and_overrides_go_through_the_pod_spec_patch():
    manifest = render_trainjob(
        ddp(
            placement=Placement(spot=True, node_selector={"pool": "a100"}),
            pod_overrides={
                "metadata": {"annotations": {"team": "ml"}},
                "spec": {
                    "serviceAccountName": "trainer",
                    "terminationGracePeriodSeconds": 120,
                    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                    "containers": [{"name": "trainer", "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}],
                },
            },
        )
    )
    pod = node_pod(manifest)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"airflow-elastic.io/capacity-type": "spot", "pool": "a100"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["serviceAccountName"] == "trainer" and spec["terminationGracePeriodSeconds"] == 120
    assert spec["containers"] == [{"name": "node", "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}]
    assert pod["metadata"]["annotations"] == {"kubectl.kubernetes.io/default-container": "node", "team": "ml"}
    assert "priorityClassName" not in spec and trainjob_schema_errors(manifest) == []


def test_kueue_queues_the_trainjob_suspended_not_its_jobset():
    manifest = render_trainjob(ddp(placement=Placement(queue="team-a")))
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert manifest["spec"]["suspend"] is True
    assert (
        "kueue.x-k8s.io/queue-name"
        not in manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]["labels"]
    )


def test_a_namespaced_runtime():
    ref = render_trainjob(ddp(), runtime="my-torch", runtime_kind="TrainingRuntime")["spec"]["runtimeRef"]
    assert ref == {"name": "my-torch", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"name": "x" * 49}, "name"),  # <name>-node-0-1-xxxxx: 64
        ({"runtime_kind": "Runtime"}, "runtime_kind"),
        ({"namespace": "NS"}, "namespace"),
        ({"labels": {"airflow-elastic.io/group": "x"}}, "labels['airflow-elastic.io/group']"),
    ],
)
def test_render_arguments_are_validated(kwargs, path):
    with pytest.raises(SpecError) as err:
        render_trainjob(ddp(), **kwargs)
    assert path in [p for p, _ in err.value.problems]


def test_a_group_the_trainer_cannot_run_is_refused_by_the_renderer_too():
    with pytest.raises(SpecError, match=r"^roles: trainjob runs one homogeneous role"):
        render_trainjob(group())


def test_the_schema_check_catches_a_broken_manifest():
    manifest = render_trainjob(ddp())
    manifest["spec"]["trainer"]["numNodes"] = "two"
    del manifest["spec"]["runtimeRef"]["name"]
    errors = trainjob_schema_errors(manifest)
    assert any("trainer.numNodes" in e for e in errors) and any("runtimeRef" in e and "name" in e for e in errors)


def test_node_pods_tolerate_node_loss_for_the_failure_policys_seconds():
    """The runtime patch carries the group's unreachable/not-ready tolerations to every node pod."""
    unreachable = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    manifest = render_trainjob(ddp(failure=FailurePolicy(node_loss_toleration_seconds=45)))
    assert node_pod(manifest)["spec"]["tolerations"] == [
        gpu,
        {**unreachable, "tolerationSeconds": 45},
        {**not_ready, "tolerationSeconds": 45},
    ]
    assert trainjob_schema_errors(manifest) == []
    mine = {**unreachable, "tolerationSeconds": 600}
    spec = node_pod(render_trainjob(ddp(placement=Placement(tolerations=[mine]))))["spec"]
    assert spec["tolerations"] == [gpu, mine, {**not_ready, "tolerationSeconds": 30}]  # the placement's wins
    spec = node_pod(render_trainjob(ddp(failure=FailurePolicy(node_loss_toleration_seconds=None))))["spec"]
    assert spec["tolerations"] == [gpu]
