"""FaultTolerance (torchft replica groups): the parse-time rules, each naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic import Elastic, FaultTolerance, Placement, Resources, Role, SpecError, SuccessPolicy, TrainingGroup
from airflow_elastic.training.backends import check_backend
from airflow_elastic.training.fault_tolerance import replica_role, requested_gpus


def ft_group(ft: Any = None, **changes: Any) -> TrainingGroup:
    fields: dict[str, Any] = {
        "name": "ddp",
        "image": "example/trainer:1",
        "roles": [Role("trainer", command=["python", "train.py"])],
        "fault_tolerance": FaultTolerance(3) if ft is None else ft,
    }
    fields.update(changes)
    return TrainingGroup(**fields)


def problems(**kw: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        ft_group(**kw)
    return dict(info.value.problems)


def test_a_valid_group_and_its_replicated_role():
    group = ft_group(FaultTolerance(3, min_replica_groups=2, role="trainer"))
    assert replica_role(group) is group.roles[0]
    assert group.fault_tolerance is not None and group.fault_tolerance.lighthouse_placement == Placement()


def test_the_top_level_package_exports_it():
    import airflow_elastic

    assert "FaultTolerance" in airflow_elastic.__all__


@pytest.mark.parametrize(
    ("ft", "changes", "path", "fragment"),
    [
        (FaultTolerance(1), {}, "fault_tolerance.replica_groups", "at least 2"),
        (FaultTolerance(True), {}, "fault_tolerance.replica_groups", "at least 2"),
        (FaultTolerance(3, min_replica_groups=0), {}, "fault_tolerance.min_replica_groups", "1 <= min_replica_groups"),
        (FaultTolerance(3, min_replica_groups=4), {}, "fault_tolerance.min_replica_groups", "replica_groups (3)"),
        (FaultTolerance(3, role="worker"), {}, "fault_tolerance.role", "no role named 'worker'"),
        (
            FaultTolerance(3),
            {"roles": [Role("trainer"), Role("data")]},
            "fault_tolerance.role",
            "name the replicated role",
        ),
        (FaultTolerance(3, role="trainer"), {"roles": [Role("trainer"), Role("data")]}, "roles", "exactly one role"),
        (FaultTolerance(3), {"roles": [Role("lighthouse")]}, "roles[0].name", "lighthouse job"),
        (FaultTolerance(3), {"elastic": Elastic(1, 1)}, "fault_tolerance", "elastic"),
        (FaultTolerance(3, quorum_tick_ms=0), {}, "fault_tolerance.quorum_tick_ms", "milliseconds"),
        (FaultTolerance(3, join_timeout_ms=1.5), {}, "fault_tolerance.join_timeout_ms", "milliseconds"),
        (FaultTolerance(3, heartbeat_timeout_ms=-1), {}, "fault_tolerance.heartbeat_timeout_ms", "milliseconds"),
        (FaultTolerance(3, quorum_retries=-1), {}, "fault_tolerance.quorum_retries", ">= 0"),
        (FaultTolerance(3, quorum_lost_timeout=0), {}, "fault_tolerance.quorum_lost_timeout", "positive"),
        (FaultTolerance(3, quorum_lost_timeout="5m"), {}, "fault_tolerance.quorum_lost_timeout", "positive"),
        (FaultTolerance(3, lighthouse_port=0), {}, "fault_tolerance.lighthouse_port", "TCP port"),
        (FaultTolerance(3, manager_port=29500), {}, "fault_tolerance.manager_port", "coordinator_port"),
        (FaultTolerance(3, lighthouse_placement=None), {}, "fault_tolerance.lighthouse_placement", "Placement"),
        (
            FaultTolerance(3, lighthouse_placement=Placement(spot=True, spot_platform="moon")),
            {},
            "fault_tolerance.lighthouse_placement.spot_platform",
            "'moon'",
        ),
        (FaultTolerance(3, lighthouse_resources={"cpu": 1}), {}, "fault_tolerance.lighthouse_resources", "Resources"),
        (FaultTolerance(3, lighthouse_image=""), {}, "fault_tolerance.lighthouse_image", "non-empty"),
        (FaultTolerance(3, restart_job="yes"), {}, "fault_tolerance.restart_job", "True or False"),
        (FaultTolerance(3), {"success": SuccessPolicy(roles=("lighthouse",))}, "success.roles", "never completes"),
        (
            FaultTolerance(999_999),
            {"name": "a" * 30, "roles": [Role("trainer-role", replicas=9)]},
            "name",
            "pod names of the replica groups would be 65 characters",
        ),
        ({"replica_groups": 3}, {}, "fault_tolerance", "expected FaultTolerance"),
    ],
)
def test_each_rule_names_its_field(ft, changes, path, fragment):
    found = problems(ft=ft, **changes)
    assert path in found, found
    assert fragment in found[path]


@pytest.mark.parametrize("backend", ["trainjob", "pytorchjob"])
def test_other_backends_refuse_it_and_say_which_to_use(backend):
    with pytest.raises(SpecError) as info:
        check_backend(ft_group(), backend)
    assert "backend='jobset'" in dict(info.value.problems)["fault_tolerance"]


def test_the_jobset_backend_takes_it_and_checkpointing_stays_allowed():
    from airflow_elastic import Checkpointing

    check_backend(ft_group(checkpoint=Checkpointing("/tmp/ckpt")), "jobset")


def test_lighthouse_resources_may_be_given():
    group = ft_group(FaultTolerance(2, lighthouse_resources=Resources(cpu="100m", memory="128Mi")))
    assert group.fault_tolerance is not None and group.fault_tolerance.lighthouse_resources is not None


def test_the_quorum_lost_bound_defaults_to_the_lighthouses_timeouts_plus_a_replacement():
    assert FaultTolerance(3).quorum_lost_seconds == 5 + 60 + 240
    assert FaultTolerance(3, heartbeat_timeout_ms=2000, join_timeout_ms=5000).quorum_lost_seconds == 247
    assert FaultTolerance(3, quorum_lost_timeout=30).quorum_lost_seconds == 30.0


def test_the_gpus_requested_count_every_replica_group_and_no_lighthouse():
    trainer = Role("trainer", command=["python", "train.py"], replicas=2, resources=Resources(gpu=4))
    assert requested_gpus(ft_group(FaultTolerance(3), roles=[trainer])) == 3 * 2 * 4
    assert requested_gpus(ft_group(roles=[trainer], fault_tolerance=None)) == 2 * 4
