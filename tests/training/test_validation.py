"""Every validation rule, with bad inputs that name the field and the rule; and proof each rule is needed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from airflow_elastic import (
    Checkpointing,
    Elastic,
    FailurePolicy,
    FaultTolerance,
    Placement,
    Resources,
    Role,
    SpecError,
    SuccessPolicy,
    TrainingGroup,
)
from airflow_elastic.training import validation
from tests.support.builders import group


@dataclass(frozen=True)
class Bad:
    rule: str
    build: Callable[[], object]
    path: str
    fragment: str


def res(**kw) -> list[Role]:
    return [Role("leader", resources=Resources(**kw)), Role("worker", replicas=2)]


def place(**kw) -> list[Role]:
    return [Role("leader"), Role("worker", replicas=2, placement=Placement(**kw))]


CASES = {
    "success-not-a-policy": Bad("types", lambda: group(success=("leader",)), "success", "expected SuccessPolicy"),
    "resources-as-dict": Bad(
        "types",
        lambda: group(roles=[Role("leader", resources={"cpu": 1})]),
        "roles[0].resources",
        "Resources",
    ),
    "group-name-uppercase": Bad("group-name", lambda: group(name="Train_1"), "name", "DNS-1035"),
    "group-name-too-long": Bad("group-name", lambda: group(name="a" * 60), "name", "room for the run suffix"),
    "no-roles": Bad("roles-present", lambda: group(roles=[]), "roles", "non-empty"),
    "role-not-a-role": Bad("roles-present", lambda: group(roles=[Role("leader"), "worker"]), "roles[1]", "Role"),
    "role-name-uppercase": Bad(
        "role-name",
        lambda: group(roles=[Role("leader"), Role("Worker")]),
        "roles[1].name",
        "'Worker' must be a DNS-1035 label (lowercase letters, digits, '-')",
    ),
    "duplicate-role": Bad(
        "role-unique",
        lambda: group(roles=[Role("worker"), Role("worker")]),
        "roles[1].name",
        "duplicate role",
    ),
    "zero-replicas": Bad(
        "replicas", lambda: group(roles=[Role("leader", replicas=0)]), "roles[0].replicas", "positive"
    ),
    "float-replicas": Bad(
        "replicas",
        lambda: group(roles=[Role("leader", replicas=2.5)]),
        "roles[0].replicas",
        "positive integer",
    ),
    "coordinator-too-long": Bad(
        "name-budget", lambda: group(name="g" * 27, roles=[Role("leader")]), "name", "coordinator address"
    ),
    "pod-name-too-long": Bad(
        "name-budget",
        lambda: group(name="g" * 20, roles=[Role("l"), Role("w" * 33, replicas=100)]),
        "name",
        "pod names of role",
    ),
    "command-as-string": Bad(
        "command-args",
        lambda: group(roles=[Role("leader", command="python train.py")]),
        "roles[0].command",
        "['python', 'train.py']",
    ),
    "args-with-number": Bad(
        "command-args",
        lambda: group(roles=[Role("leader", args=["--lr", 0.1])]),
        "roles[0].args",
        "list of strings",
    ),
    "no-image": Bad("image", lambda: group(image=None), "roles[0].image", "has no image"),
    "empty-role-image": Bad("image", lambda: group(roles=[Role("leader", image=" ")]), "roles[0].image", "non-empty"),
    "zero-processes": Bad(
        "processes-per-pod",
        lambda: group(roles=[Role("leader", processes_per_pod=0)]),
        "roles[0].processes_per_pod",
        "positive integer",
    ),
    "uneven-processes": Bad(
        "processes-per-pod",
        lambda: group(roles=[Role("leader"), Role("worker", processes_per_pod=8)]),
        "roles",
        "must be equal across roles",
    ),
    "cpu-not-quantity": Bad("quantities", lambda: group(roles=res(cpu="two")), "roles[0].resources.cpu", "quantity"),
    "negative-memory": Bad(
        "quantities", lambda: group(roles=res(memory="-1Gi")), "roles[0].resources.memory", "positive"
    ),
    "limit-below-request": Bad(
        "limits",
        lambda: group(roles=res(memory="8Gi", memory_limit="4Gi")),
        "roles[0].resources.memory_limit",
        "below the request",
    ),
    "negative-gpu": Bad("gpu", lambda: group(roles=res(gpu=-1)), "roles[0].resources.gpu", "whole number"),
    "unknown-vendor": Bad(
        "gpu-vendor",
        lambda: group(roles=res(gpu=1, gpu_vendor="nvidai")),
        "roles[0].resources.gpu_vendor",
        "nvidia",
    ),
    "unqualified-extended": Bad(
        "extended-resources",
        lambda: group(roles=res(extended={"rdma": 1})),
        "roles[0].resources.extended['rdma']",
        "domain-qualified",
    ),
    "success-mode": Bad("success-mode", lambda: group(success=SuccessPolicy(mode="majority")), "success.mode", "'all'"),
    "success-unknown-role": Bad(
        "success-roles",
        lambda: group(success=SuccessPolicy(roles=("lead",))),
        "success.roles[0]",
        "did you mean 'leader'",
    ),
    "negative-failures": Bad(
        "budgets", lambda: group(failure=FailurePolicy(max_failures=-1)), "failure.max_failures", ">= 0"
    ),
    "transient-code-out-of-range": Bad(
        "transient-exit-codes",
        lambda: group(failure=FailurePolicy(transient_exit_codes=[0, 42])),
        "failure.transient_exit_codes[0]",
        "1..255",
    ),
    "transient-codes-not-a-list": Bad(
        "transient-exit-codes",
        lambda: group(failure=FailurePolicy(transient_exit_codes=42)),
        "failure.transient_exit_codes",
        "list of exit codes",
    ),
    "fallback-zero": Bad(
        "on-demand-fallback",
        lambda: group(failure=FailurePolicy(fallback_to_on_demand_after=0)),
        "failure.fallback_to_on_demand_after",
        ">= 1",
    ),
    "fallback-without-spot": Bad(
        "on-demand-fallback",
        lambda: group(failure=FailurePolicy(fallback_to_on_demand_after=2)),
        "failure.fallback_to_on_demand_after",
        "no placement",
    ),
    "node-loss-toleration-negative": Bad(
        "node-loss-toleration",
        lambda: group(failure=FailurePolicy(node_loss_toleration_seconds=-1)),
        "failure.node_loss_toleration_seconds",
        "integer >= 0 (or None), got -1",
    ),
    "node-loss-toleration-bool": Bad(
        "node-loss-toleration",
        lambda: group(failure=FailurePolicy(node_loss_toleration_seconds=True)),
        "failure.node_loss_toleration_seconds",
        "got True",
    ),
    "node-loss-toleration-float": Bad(
        "node-loss-toleration",
        lambda: group(failure=FailurePolicy(node_loss_toleration_seconds=2.5)),
        "failure.node_loss_toleration_seconds",
        "got 2.5",
    ),
    "unknown-platform": Bad(
        "spot-platform",
        lambda: group(roles=place(spot=True, spot_platform="gcp")),
        "roles[1].placement.spot_platform",
        "'gke'",
    ),
    "bad-selector-value": Bad(
        "node-selector",
        lambda: group(placement=Placement(node_selector={"pool": "a b"})),
        "placement.node_selector['pool']",
        "label value",
    ),
    "spot-contradiction": Bad(
        "spot-selector",
        lambda: group(
            roles=place(spot=True, spot_platform="gke", node_selector={"cloud.google.com/gke-spot": "false"})
        ),
        "roles[1].placement.node_selector['cloud.google.com/gke-spot']",
        "contradicts spot=True",
    ),
    "toleration-operator": Bad(
        "tolerations",
        lambda: group(placement=Placement(tolerations=[{"key": "x", "operator": "Exist"}])),
        "placement.tolerations[0].operator",
        "'Exists' or 'Equal'",
    ),
    "exclusive-topology": Bad(
        "exclusive-topology",
        lambda: group(placement=Placement(exclusive_topology="not a key!")),
        "placement.exclusive_topology",
        "node label key",
    ),
    "role-queue": Bad(
        "queue", lambda: group(roles=place(queue="gpus")), "roles[1].placement.queue", "group's placement"
    ),
    "priority-class": Bad(
        "priority-class",
        lambda: group(placement=Placement(priority_class="High_Priority")),
        "placement.priority_class",
        "DNS-1123",
    ),
    "relative-checkpoint": Bad(
        "checkpoint", lambda: group(checkpoint=Checkpointing("ckpt/run")), "checkpoint.uri", "absolute path"
    ),
    "keep-zero": Bad(
        "checkpoint",
        lambda: group(checkpoint=Checkpointing("/ckpt", keep=0)),
        "checkpoint.keep",
        "at least 1",
    ),
    "checkpoint-write-seconds": Bad(
        "checkpoint",
        lambda: group(checkpoint=Checkpointing("/ckpt", write_seconds=-1)),
        "checkpoint.write_seconds",
        "seconds > 0",
    ),
    "log-role-unknown": Bad("report-roles", lambda: group(log_role="workr"), "log_role", "not a role"),
    "metrics-role-unknown": Bad("report-roles", lambda: group(metrics_role="ps"), "metrics_role", "not a role"),
    "budgets-not-budgets": Bad("types", lambda: group(budgets={"max_gpu_hours": 1}), "budgets", "expected Budgets"),
    "checkpoint-conn-id": Bad(
        "checkpoint",
        lambda: group(checkpoint=Checkpointing("gs://b/run", conn_id="")),
        "checkpoint.conn_id",
        "connection id",
    ),
    "elastic-min-zero": Bad(
        "elastic", lambda: group(elastic=Elastic(0, 2, role="worker")), "elastic", "1 <= min_replicas"
    ),
    "elastic-above-replicas": Bad(
        "elastic",
        lambda: group(elastic=Elastic(1, 5, role="worker")),
        "elastic",
        "<= replicas of 'worker' (2)",
    ),
    "elastic-timeout": Bad(
        "elastic-timeout",
        lambda: group(elastic=Elastic(1, 2, role="worker", below_min_timeout=0)),
        "elastic.below_min_timeout",
        "positive number of seconds",
    ),
    "fault-tolerance-one-group": Bad(  # the rest: tests/training/test_fault_tolerance.py
        "fault-tolerance",
        lambda: group(fault_tolerance=FaultTolerance(1, role="worker")),
        "fault_tolerance.replica_groups",
        "at least 2",
    ),
    "elastic-which-role": Bad("elastic", lambda: group(elastic=Elastic(1, 1)), "elastic.role", "several"),
    "reserved-env": Bad("env", lambda: group(env={"RANK": "0"}), "env['RANK']", "set by airflow-elastic"),
    "reserved-prefix-env": Bad(
        "env",
        lambda: group(roles=[Role("leader", env={"AE_ROLE": "x"})]),
        "roles[0].env['AE_ROLE']",
        "airflow-elastic",
    ),
    "non-string-env": Bad("env", lambda: group(env={"LR": 0.1}), "env['LR']", "must be a string"),
    "port": Bad("coordinator-port", lambda: group(coordinator_port=70000), "coordinator_port", "1-65535"),
    "unknown-podspec-field": Bad(
        "overrides-shape",
        lambda: group(pod_overrides={"spec": {"volumez": []}}),
        "pod_overrides.spec.volumez",
        "did you mean 'volumes'",
    ),
    "override-status": Bad(
        "overrides-shape", lambda: group(pod_overrides={"status": {}}), "pod_overrides.status", "'metadata'"
    ),
    "override-restart-policy": Bad(
        "overrides-owned",
        lambda: group(roles=[Role("leader", pod_overrides={"spec": {"restartPolicy": "OnFailure"}})]),
        "roles[0].pod_overrides.spec.restartPolicy",
        "set by airflow-elastic",
    ),
    "override-trainer-image": Bad(
        "overrides-owned",
        lambda: group(pod_overrides={"spec": {"containers": [{"name": "trainer", "image": "x"}]}}),
        "pod_overrides.spec.containers[0].image",
        "use image",
    ),
    "override-jobset-label": Bad(
        "overrides-owned",
        lambda: group(pod_overrides={"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": "x"}}}),
        "pod_overrides.metadata.labels['jobset.sigs.k8s.io/jobset-name']",
        "set by airflow-elastic or JobSet",
    ),
}


def problems_of(case: Bad) -> list[tuple[str, str]]:
    try:
        case.build()
    except SpecError as err:
        return err.problems
    return []


def reports(case: Bad) -> bool:
    return any(path == case.path and case.fragment in message for path, message in problems_of(case))


def test_enough_distinct_bad_inputs():
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_names_field_and_rule(case: Bad):
    with pytest.raises(SpecError) as info:
        case.build()
    assert reports(case), f"expected {case.path}: …{case.fragment}…, got {info.value.problems}"
    assert f"{case.path}: " in str(info.value)


@pytest.mark.parametrize("rule", list(validation.RULES))
def test_every_rule_is_needed(rule: str, monkeypatch: pytest.MonkeyPatch):
    """Removing any single rule makes at least one of its bad inputs go unreported."""
    mine = [case for case in CASES.values() if case.rule == rule]
    assert mine, f"rule {rule!r} has no bad-input case"
    monkeypatch.delitem(validation.RULES, rule)
    missed = []
    for case in mine:
        try:
            missed.append(not reports(case))
        except Exception:  # without the rule, the bad input crashes later: also a missed report
            missed.append(True)
    assert any(missed), f"every case of {rule!r} is still reported without the rule"


def test_all_problems_reported_at_once():
    with pytest.raises(SpecError) as info:
        TrainingGroup("x", [Role("Bad", replicas=0)], image=None)
    paths = [p for p, _ in info.value.problems]
    assert paths == ["roles[0].name", "roles[0].replicas", "roles[0].image"]


@pytest.mark.parametrize("seconds", [0, 30, 3600, None])
def test_node_loss_toleration_accepts_zero_and_up_or_none(seconds):
    assert group(failure=FailurePolicy(node_loss_toleration_seconds=seconds)).failure.node_loss_toleration_seconds == (
        seconds
    )


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)
