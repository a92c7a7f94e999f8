"""Rendering a TrainingGroup as a training-operator v1 PyTorchJob: Master/Worker, restart and run policies from the
failure policy, elasticPolicy from Elastic, and validity against the packaged v1.9 CRD schema."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_elastic import Elastic, FailurePolicy, Placement, Resources, Role, SpecError, TrainingGroup
from airflow_elastic.kube.schema import pytorchjob_schema_errors
from airflow_elastic.training.render import render_pytorchjob
from airflow_elastic.waiting.logfollow import training_container
from tests.support.builders import group


def replica(manifest: dict, kind: str) -> dict:
    return manifest["spec"]["pytorchReplicaSpecs"][kind]


def container(manifest: dict, kind: str) -> dict:
    (found,) = replica(manifest, kind)["template"]["spec"]["containers"]
    return found


def env(manifest: dict, kind: str) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(manifest, kind)["env"]}


def test_leader_is_the_master_and_the_other_role_the_workers():
    manifest = render_pytorchjob(group(), name="train-abc123", namespace="ml")
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    assert replica(manifest, "Master")["replicas"] == 1 and replica(manifest, "Worker")["replicas"] == 2
    for kind in ("Master", "Worker"):
        assert container(manifest, kind)["name"] == "pytorch"
        assert container(manifest, kind)["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500}]
        assert "restartPolicy" not in replica(manifest, kind)["template"]["spec"]  # the operator's to set
        assert training_container(replica(manifest, kind)["template"]) == "pytorch"  # the log follower's
    assert manifest["spec"]["nprocPerNode"] == "1"
    assert pytorchjob_schema_errors(manifest) == []


def test_environment_contract_leaves_the_workers_group_rank_to_the_operator():
    manifest = render_pytorchjob(group(), name="train-abc123")
    master, worker = env(manifest, "Master"), env(manifest, "Worker")
    assert master["AE_RANK"] == master["AE_ROLE_RANK"] == "0"
    assert worker["AE_ROLE_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}
    }
    assert "AE_RANK" not in worker  # index + 1: the runtime reads the operator's PET_NODE_RANK
    assert master["AE_COORDINATOR_ADDR"] == worker["AE_COORDINATOR_ADDR"] == "train-abc123-master-0"
    assert master["AE_WORLD_SIZE"] == "3" and worker["AE_ROLE_REPLICAS"] == "2"
    assert not {"MASTER_ADDR", "RANK", "WORLD_SIZE"} & set(master)  # appended by the operator


@pytest.mark.parametrize(("max_failures", "policy"), [(0, "ExitCode"), (2, "OnFailure")])
def test_restart_and_run_policy_follow_the_failure_policy(max_failures, policy):
    manifest = render_pytorchjob(group(failure=FailurePolicy(max_failures=max_failures)), ttl_seconds_after_finished=60)
    assert {replica(manifest, k)["restartPolicy"] for k in ("Master", "Worker")} == {policy}
    assert manifest["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "backoffLimit": max_failures,
        "ttlSecondsAfterFinished": 60,
    }


def test_elastic_bounds_are_torchruns_node_range():
    spec = group(
        roles=[Role("leader", command=["torchrun", "t.py"]), Role("worker", replicas=3, command=["torchrun", "t.py"])],
        elastic=Elastic(1, 2, role="worker"),
        failure=FailurePolicy(max_failures=3),
    )
    manifest = render_pytorchjob(spec)
    assert manifest["spec"]["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 3,
        "rdzvBackend": "c10d",
        "maxRestarts": 3,
    }
    assert replica(manifest, "Worker")["replicas"] == 2  # max_replicas, as the JobSet renders
    assert pytorchjob_schema_errors(manifest) == []


def test_a_leader_alone_is_a_master_only_job():
    manifest = render_pytorchjob(group(roles=[Role("leader")]))
    assert list(manifest["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_one_role_of_n_pods_is_a_master_and_n_minus_1_workers_of_that_role():
    node = Role("node", replicas=4, command=["python", "t.py"], env={"A": "1"}, resources=Resources(cpu="2"))
    manifest = render_pytorchjob(group(roles=[node]), name="train-abc123")
    assert [(k, r["replicas"]) for k, r in manifest["spec"]["pytorchReplicaSpecs"].items()] == [
        ("Master", 1),
        ("Worker", 3),
    ]
    master, worker = container(manifest, "Master"), container(manifest, "Worker")
    assert {k: v for k, v in master.items() if k != "env"} == {k: v for k, v in worker.items() if k != "env"}
    assert master["command"] == ["python", "t.py"] and master["resources"]["requests"]["cpu"] == "2"
    for kind in ("Master", "Worker"):
        assert replica(manifest, kind)["template"]["metadata"]["labels"]["airflow-elastic.io/role"] == "node"
        assert env(manifest, kind)["A"] == "1" and env(manifest, kind)["AE_ROLE"] == "node"
        assert env(manifest, kind)["AE_ROLE_REPLICAS"] == env(manifest, kind)["AE_WORLD_SIZE"] == "4"
    assert env(manifest, "Master")["AE_ROLE_RANK"] == env(manifest, "Master")["AE_RANK"] == "0"
    # Worker i is pod i + 1 of the role and of the group: the runtime reads the operator's PET_NODE_RANK.
    assert not {"AE_ROLE_RANK", "AE_RANK"} & set(env(manifest, "Worker"))
    assert pytorchjob_schema_errors(manifest) == []
    twelve = group(roles=[replace(node, replicas=12)])
    render_pytorchjob(twelve, name="n" * 53)
    with pytest.raises(SpecError, match=r"'n{54}-worker-10' exceed 63"):  # its Master's 'n...-master-0' fits
        render_pytorchjob(twelve, name="n" * 54)


def test_one_elastic_role_scales_its_workers_within_the_groups_node_range():
    node = Role("node", replicas=3, command=["torchrun", "t.py"])
    manifest = render_pytorchjob(group(roles=[node], elastic=Elastic(1, 3)))
    assert replica(manifest, "Worker")["replicas"] == 2
    assert (manifest["spec"]["elasticPolicy"]["minReplicas"], manifest["spec"]["elasticPolicy"]["maxReplicas"]) == (
        1,
        3,
    )
    assert pytorchjob_schema_errors(manifest) == []


def test_labels_queue_and_placement():
    manifest = render_pytorchjob(
        group(placement=Placement(spot=True, queue="team-a")), labels={"airflow-elastic.io/dag-id": "d"}
    )
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert manifest["spec"]["runPolicy"]["suspend"] is True
    pod = replica(manifest, "Worker")["template"]
    assert pod["metadata"]["labels"]["airflow-elastic.io/role"] == "worker"
    assert pod["metadata"]["labels"]["airflow-elastic.io/dag-id"] == "d"
    assert pod["spec"]["nodeSelector"] == {"airflow-elastic.io/capacity-type": "spot"}


def test_refusals_and_bad_arguments():
    with pytest.raises(SpecError, match=r"^roles\[0\]\.replicas: of two roles the leader becomes"):
        render_pytorchjob(group(roles=[Role("leader", replicas=2), Role("worker")]))
    with pytest.raises(SpecError) as err:
        render_pytorchjob(group(), name="x" * 60, ttl_seconds_after_finished=-1)
    assert [p for p, _ in err.value.problems] == ["name", "ttl_seconds_after_finished"]


def test_the_schema_check_catches_a_broken_manifest():
    manifest = render_pytorchjob(group())
    replica(manifest, "Worker")["replicas"] = "two"
    container(manifest, "Master")["ports"][0]["containerPort"] = "x"
    errors = pytorchjob_schema_errors(manifest)
    assert any("Worker.replicas" in e for e in errors) and any("Master.template" in e for e in errors)


def test_render_does_not_change_the_group():
    spec: TrainingGroup = group(pod_overrides={"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}})
    before = repr(spec)
    render_pytorchjob(spec)
    assert repr(spec) == before


@pytest.mark.parametrize("roles", [1, 2])
def test_master_and_workers_tolerate_node_loss_for_the_failure_policys_seconds(roles):
    unreachable = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    g = group(failure=FailurePolicy(node_loss_toleration_seconds=20))
    if roles == 1:
        g = g.with_changes(roles=[Role("node", replicas=3)])
    manifest = render_pytorchjob(g)
    for kind in ("Master", "Worker"):
        assert replica(manifest, kind)["template"]["spec"]["tolerations"] == [
            {**unreachable, "tolerationSeconds": 20},
            {**not_ready, "tolerationSeconds": 20},
        ]
    assert pytorchjob_schema_errors(manifest) == []
    manifest = render_pytorchjob(g.with_changes(failure=FailurePolicy(node_loss_toleration_seconds=None)))
    assert all("tolerations" not in replica(manifest, kind)["template"]["spec"] for kind in ("Master", "Worker"))
