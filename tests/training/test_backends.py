"""What each backend can express: check_backend refuses the rest at parse time, naming the field; the TrainJob CRD
probe tells a v2.2+ Trainer from an older one."""

from __future__ import annotations

import copy
import json

import pytest

from airflow_elastic import Elastic, Placement, Role, SpecError, SuccessPolicy, TrainingGroup
from airflow_elastic.kube import schemas
from airflow_elastic.training.backends import (
    BACKENDS,
    TRAINER_VERSION,
    check_backend,
    is_torchrun,
    trainjob_crd_problem,
)
from tests.support.builders import group

TORCH = ["python", "train.py"]


def single(**role: object) -> TrainingGroup:
    return group(roles=[Role("trainer", **{"replicas": 2, "command": TORCH, **role})])


def paths(err: pytest.ExceptionInfo[SpecError]) -> list[str]:
    return [path for path, _ in err.value.problems]


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_homogeneous_group_is_valid_for_every_backend(backend):
    check_backend(single(), backend)
    check_backend(single(replicas=1), backend)  # a PyTorchJob of a Master only


def test_a_leader_and_a_worker_role_run_as_a_jobset_or_a_pytorchjob():
    two = group(roles=[Role("leader", command=TORCH), Role("w", command=TORCH)])
    check_backend(two, "jobset")
    check_backend(two, "pytorchjob")


def test_unknown_backend_and_a_runtime_for_another_backend_are_refused():
    with pytest.raises(SpecError, match="unknown backend 'kubeflow'; choose one of jobset, trainjob, pytorchjob"):
        check_backend(single(), "kubeflow")
    with pytest.raises(SpecError) as err:
        check_backend(group(), "jobset", runtime="torch-distributed")
    assert paths(err) == ["runtime"]
    with pytest.raises(SpecError) as err:
        check_backend(single(), "trainjob", runtime="Not A Name")
    assert paths(err) == ["runtime"]


@pytest.mark.parametrize(
    ("changes", "path", "reason"),
    [
        ({"roles": [Role("leader", command=TORCH), Role("worker", command=TORCH)]}, "roles", "one homogeneous role"),
        ({"success": SuccessPolicy(mode="any")}, "success.mode", "one Indexed Job"),
        ({"elastic": Elastic(1, 2)}, "elastic", "no elastic training"),
        ({"coordinator_port": 29400}, "coordinator_port", "29500"),
        ({"env": {"PET_MAX_RESTARTS": "3"}}, "env['PET_MAX_RESTARTS']", "torchrun's flags"),
        ({"placement": Placement(priority_class="high")}, "placement.priority_class", "priorityClassName"),
        (
            {"placement": Placement(exclusive_topology="kubernetes.io/hostname")},
            "placement.exclusive_topology",
            "all nodes as one Job",
        ),
        ({"pod_overrides": {"spec": {"hostNetwork": True}}}, "pod_overrides.spec.hostNetwork", "PodSpecPatch"),
        (
            {"pod_overrides": {"spec": {"containers": [{"name": "sidecar", "image": "x"}]}}},
            "pod_overrides.spec.containers[0].name",
            "runtime's containers",
        ),
        (
            {"pod_overrides": {"spec": {"containers": [{"name": "trainer", "workingDir": "/w"}]}}},
            "pod_overrides.spec.containers[0].workingDir",
            "ContainerPatch",
        ),
        (
            {"pod_overrides": {"spec": {"initContainers": [{"name": "init", "image": "x"}]}}},
            "pod_overrides.spec.initContainers",
            "runtime's own containers",
        ),
    ],
)
def test_trainjob_refuses_what_the_trainer_cannot_express(changes, path, reason):
    spec = single().with_changes(**changes)
    with pytest.raises(SpecError) as err:
        check_backend(spec, "trainjob")
    assert path in paths(err)
    assert reason in dict(err.value.problems)[path]
    assert str(err.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("command", "path", "reason"),
    [
        ((), "roles[0].command", "needs a command"),
        (("deepspeed", "train.py"), "roles[0].command", "launcher of its own"),
        (("torchrun", "--nnodes=$(NNODES)", "train.py"), "roles[0].command", "$(NNODES) is not set on trainjob pods"),
        (("torchrun", "--master-addr=$(MASTER_ADDR)", "t.py"), "roles[0].command", "use $(PET_MASTER_ADDR)"),
    ],
)
def test_trainjob_commands_must_run_under_torchrun(command, path, reason):
    with pytest.raises(SpecError) as err:
        check_backend(single().with_changes(roles=[Role("trainer", command=command)]), "trainjob")
    assert reason in dict(err.value.problems)[path]


def test_processes_per_pod_without_a_command_names_the_reason():
    with pytest.raises(SpecError, match="to start processes_per_pod=2"):
        check_backend(single().with_changes(roles=[Role("trainer", processes_per_pod=2)]), "trainjob")
    check_backend(single(processes_per_pod=2), "trainjob")  # wrapped: torchrun --no-python starts them


def test_torchrun_is_recognised_in_both_spellings():
    assert is_torchrun(["/usr/bin/torchrun", "t.py"])
    assert is_torchrun(["python3", "-m", "torch.distributed.run", "t.py"])
    assert not is_torchrun(["python", "-m", "train"]) and not is_torchrun([])


@pytest.mark.parametrize(
    ("changes", "path", "reason"),
    [
        ({"roles": [Role("leader", replicas=2), Role("w")]}, "roles[0].replicas", "exactly 1 replica"),
        ({"roles": [Role("leader"), Role("a"), Role("b")]}, "roles", "one Worker replica type"),
        ({"roles": [Role("node", replicas=3)], "success": SuccessPolicy(mode="any")}, "success.mode", "pod 0"),
        ({"success": SuccessPolicy(roles=("worker",))}, "success", "succeeds when its Master succeeds"),
        ({"success": SuccessPolicy(mode="any")}, "success", "succeeds when its Master succeeds"),
        ({"elastic": Elastic(1, 1, role="leader")}, "elastic.role", "scales the Workers"),
        ({"roles": [Role("leader")], "elastic": Elastic(1, 1)}, "elastic.max_replicas", "needs Workers"),
        (
            {"placement": Placement(exclusive_topology="kubernetes.io/hostname")},
            "placement.exclusive_topology",
            "JobSet",
        ),
        (
            {"roles": [Role("leader", processes_per_pod=2), Role("w", processes_per_pod=2)]},
            "roles[0].processes_per_pod",
            "torchrun",
        ),
        (
            {"roles": [Role("leader", command=["torchrun", "--node-rank=$(NODE_RANK)", "t.py"])]},
            "roles[0].command",
            "PET_NODE_RANK",
        ),
    ],
)
def test_pytorchjob_refuses_what_the_training_operator_cannot_express(changes, path, reason):
    with pytest.raises(SpecError) as err:
        check_backend(group().with_changes(**changes), "pytorchjob")
    assert reason in dict(err.value.problems)[path]


def test_pytorchjob_runs_one_elastic_role_as_master_and_elastic_workers():
    check_backend(
        group(roles=[Role("node", replicas=3, command=["torchrun", "t.py"])], elastic=Elastic(2, 3)), "pytorchjob"
    )


def crd() -> dict:
    """The installed CRD object as the API returns it, around the packaged v2.3 schema."""
    return {
        "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
        "spec": {
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "schema": {"openAPIV3Schema": copy.deepcopy(schemas.load(schemas.TRAINJOBS))},
                }
            ]
        },
    }


def test_the_v2_3_crd_has_the_shape_we_render_for():
    assert trainjob_crd_problem(crd()) is None


def v2_0(found: dict) -> dict:
    """What v2.0/v2.1 looked like: spec.labels, no runtimePatches, an IntOrString numProcPerNode."""
    spec = found["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del spec["runtimePatches"]
    spec["labels"] = {"type": "object", "additionalProperties": {"type": "string"}}
    spec["trainer"]["properties"]["numProcPerNode"] = {
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    }
    return found


def test_an_older_trainer_crd_is_named_with_what_differs():
    problem = trainjob_crd_problem(v2_0(crd()))
    assert problem is not None and "\n" not in problem
    for part in (
        "spec.runtimePatches is missing",
        "spec.labels exists",
        "numProcPerNode is not an integer",
        TRAINER_VERSION,
    ):
        assert part in problem


def test_a_crd_without_v1alpha1_is_named():
    found = crd()
    found["spec"]["versions"][0]["name"] = "v1beta1"
    assert "serves no v1alpha1 (versions: v1beta1)" in trainjob_crd_problem(found)
    assert json.dumps(crd())  # the fixture is plain JSON, as the API returns it
