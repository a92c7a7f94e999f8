"""Rendering an elastic role: replaced pods instead of group restarts, max_replicas pods, the elastic env."""

from __future__ import annotations

from airflow_elastic import Elastic, Role, SuccessPolicy
from airflow_elastic.kube.schema import schema_errors
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.render.elastic import node_range, rendered_pods
from tests.support.builders import group
from tests.support.jobset_expand import env_of, expand
from tests.support.jobset_webhook import webhook_errors

DISRUPTION = [{"type": "DisruptionTarget", "status": "True"}]


def elastic_group(**changes):
    fields = {
        "roles": [Role("leader"), Role("worker", replicas=4), Role("evaluator")],
        "elastic": Elastic(2, 3, role="worker"),
    }
    return group(**{**fields, **changes})


def job_spec(manifest: dict, role: str) -> dict:
    (found,) = [r for r in manifest["spec"]["replicatedJobs"] if r["name"] == role]
    return found["template"]["spec"]


def test_elastic_role_ignores_disruptions_and_replaces_pods_when_terminal():
    manifest = render_jobset(elastic_group())
    worker = job_spec(manifest, "worker")
    assert worker["podFailurePolicy"] == {"rules": [{"action": "Ignore", "onPodConditions": DISRUPTION}]}
    assert worker["podReplacementPolicy"] == "Failed"
    assert worker["backoffLimit"] == 0  # a genuine failure still fails the Job: the group restarts, counted
    for role in ("leader", "evaluator"):  # the other roles keep the host-maintenance pattern
        other = job_spec(manifest, role)
        assert other["podFailurePolicy"] == {"rules": [{"action": "FailJob", "onPodConditions": DISRUPTION}]}
        assert "podReplacementPolicy" not in other
    # The JobSet rules are unchanged: only FailJob messages restart without counting.
    assert [r["name"] for r in manifest["spec"]["failurePolicy"]["rules"]] == ["RestartOnDisruption", "CountFailure"]


def test_elastic_role_renders_max_replicas_and_ranks_follow():
    manifest = render_jobset(elastic_group(), name="train-abc123")
    assert [(r["name"], r["replicas"]) for r in manifest["spec"]["replicatedJobs"]] == [
        ("leader", 1),
        ("worker", 3),
        ("evaluator", 1),
    ]
    envs = [env_of(p) for p in expand(manifest)]
    assert [e["AE_RANK"] for e in envs] == ["0", "1", "2", "3", "4"]
    assert {e["AE_WORLD_SIZE"] for e in envs} == {"5"}
    assert [e["AE_ROLE_REPLICAS"] for e in envs] == ["1", "3", "3", "3", "1"]
    assert rendered_pods(elastic_group()) == 5


def test_every_pod_learns_the_bounds_and_torchrun_gets_a_node_range():
    envs = [env_of(p) for p in expand(render_jobset(elastic_group()))]
    assert {(e["AE_ELASTIC_ROLE"], e["AE_ELASTIC_MIN"], e["AE_ELASTIC_MAX"]) for e in envs} == {("worker", "2", "3")}
    # The whole group runs under one torchrun rendezvous: 5 pods, of which the worker role may lose one.
    assert {(e["NNODES"], e["NPROC_PER_NODE"], e["WORLD_SIZE"]) for e in envs} == {("4:5", "1", "5")}
    assert [e["NODE_RANK"] for e in envs] == ["0", "1", "2", "3", "4"]
    assert all("RANK" not in e for e in envs)  # torchrun assigns ranks at each rendezvous
    assert node_range(elastic_group()) == (4, 5)


def test_single_role_group_with_several_processes_per_pod():
    g = group(roles=[Role("node", replicas=4, processes_per_pod=8)], elastic=Elastic(2, 4))
    envs = [env_of(p) for p in expand(render_jobset(g))]
    assert {(e["NNODES"], e["NPROC_PER_NODE"], e["WORLD_SIZE"]) for e in envs} == {("2:4", "8", "32")}
    assert job_spec(render_jobset(g), "node")["podFailurePolicy"]["rules"][0]["action"] == "Ignore"


def test_fixed_bounds_render_a_plain_node_count():
    g = group(roles=[Role("node", replicas=3)], elastic=Elastic(3, 3))
    assert {env_of(p)["NNODES"] for p in expand(render_jobset(g))} == {"3"}


def test_groups_without_elastic_are_unchanged():
    envs = [env_of(p) for p in expand(render_jobset(group()))]
    assert not any(k.startswith("AE_ELASTIC_") for e in envs for k in e)
    assert all("NNODES" not in e for e in envs)


def test_elastic_manifests_are_valid():
    for g in (elastic_group(), elastic_group(success=SuccessPolicy(mode="any", roles=("evaluator",)))):
        manifest = render_jobset(g, name="train-abc123", namespace="ml")
        assert schema_errors(manifest) == []
        assert webhook_errors(manifest) == []
