"""The Ray cluster and job descriptions validate themselves when built, naming each broken field by its path."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_elastic.ray import RayCluster, RayHead, RayJob, SpecError, WorkerGroup
from airflow_elastic.training.spec import Placement, Resources


def problems(build: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        build()
    return dict(err.value.problems)


def cluster(**changes: Any) -> RayCluster:
    fields: dict[str, Any] = {
        "name": "tune",
        "worker_groups": [WorkerGroup("cpu", replicas=2, min_replicas=1, max_replicas=4)],
    }
    return RayCluster(**{**fields, **changes})


def test_a_valid_cluster_is_frozen_and_resolves_its_defaults():
    built = cluster(env={"A": "1"}, runtime_env={"pip": ["optuna"]})
    assert built.ray_image == "rayproject/ray:2.60.0"
    assert built.head.placement.spot is False  # the head is on-demand unless told otherwise
    assert built.worker_group("cpu").bounds == (1, 4)
    assert WorkerGroup("g", replicas=3).bounds == (3, 3)
    assert isinstance(built.worker_groups, tuple)
    with pytest.raises(AttributeError):
        built.name = "other"  # type: ignore[misc]
    with pytest.raises(KeyError):
        built.worker_group("gpu")


def test_cluster_names_are_checked_against_kuberays_rayjob_name_limit():
    assert "DNS-1035" in problems(lambda: cluster(name="Tune"))["name"]
    assert "at most 40" in problems(lambda: cluster(name="t" * 41))["name"]
    cluster(name="t" * 40)


def test_worker_groups_name_their_broken_field():
    found = problems(
        lambda: cluster(
            worker_groups=[
                WorkerGroup("cpu", replicas=5, min_replicas=1, max_replicas=4),
                WorkerGroup("cpu"),
                WorkerGroup("Bad_Name"),
                WorkerGroup("neg", replicas=-1),
                WorkerGroup("inv", replicas=2, min_replicas=3, max_replicas=2),
            ]
        )
    )
    assert found == {
        "worker_groups[0].replicas": "5 is outside min_replicas..max_replicas (1..4)",
        "worker_groups[1].name": "duplicate worker group 'cpu' (also worker_groups[0])",
        "worker_groups[2].name": "'Bad_Name' must be a DNS-1035 label (lowercase letters, digits, '-')",
        "worker_groups[3].replicas": "must be an integer >= 0, got -1",
        "worker_groups[4].min_replicas": "3 is above max_replicas 2",
    }


def test_ray_start_params_kuberay_owns_are_refused():
    found = problems(
        lambda: cluster(
            head=RayHead(ray_start_params={"block": "true", "--num-cpus": "0", "labels": "a=b"}),
            worker_groups=[WorkerGroup("cpu", ray_start_params={"address": "x:6379", "num-cpus": object()})],
        )
    )
    assert set(found) == {
        "head.ray_start_params['block']",
        "head.ray_start_params['--num-cpus']",
        "head.ray_start_params['labels']",
        "worker_groups[0].ray_start_params['address']",
        "worker_groups[0].ray_start_params['num-cpus']",
    }
    assert "without the leading '--'" in found["head.ray_start_params['--num-cpus']"]
    cluster(head=RayHead(ray_start_params={"num-cpus": 0, "include-dashboard": True}))


def test_pods_are_judged_by_the_training_groups_rules_with_ray_paths():
    found = problems(
        lambda: cluster(
            head=RayHead(resources=Resources(cpu="lots"), placement=Placement(spot_platform="moon")),
            worker_groups=[
                WorkerGroup("cpu", resources=Resources(gpu_vendor="acme")),
                WorkerGroup("spot", placement=Placement(spot=True, tolerations=[{"operator": "Maybe"}])),
            ],
            env={"AE_RANK": "1"},
        )
    )
    assert set(found) == {
        "head.resources.cpu",
        "head.placement.spot_platform",
        "worker_groups[0].resources.gpu_vendor",
        "worker_groups[1].placement.tolerations[0].operator",
        "env['AE_RANK']",
    }


def test_cluster_field_types_and_values():
    found = problems(
        lambda: cluster(
            head=RayHead(placement=Placement(queue="q")), worker_groups=[WorkerGroup("a", resources="2 cpus")]
        )
    )
    assert found == {
        "head.placement.queue": "Kueue admits the whole RayJob: set RayJob(queue=...)",
        "worker_groups[0].resources": "expected Resources or None, got str",
    }
    found = problems(lambda: cluster(ray_version="latest", image="", runtime_env={"pip": {1, 2}}))
    assert set(found) == {"ray_version", "image", "runtime_env"}
    assert "a Ray release like '2.60.0'" in found["ray_version"]
    assert problems(lambda: cluster(node_loss_toleration_seconds=-1)) == {
        "node_loss_toleration_seconds": "must be an integer >= 0 or None, got -1"
    }


def job(**changes: Any) -> RayJob:
    return RayJob(**{"cluster": cluster(), "entrypoint": "python tune.py", **changes})


def test_a_valid_job_merges_its_runtime_env_over_the_clusters():
    built = job(cluster=cluster(runtime_env={"pip": ["optuna"], "env_vars": {"A": "1"}}), runtime_env={"pip": ["x"]})
    assert built.effective_runtime_env == {"pip": ["x"], "env_vars": {"A": "1"}}
    assert built.name == "tune"
    assert built.shutdown_after_job_finishes is True and built.submission_mode == "K8sJobMode"


def test_job_fields_follow_kuberays_rayjob_validation():
    assert problems(lambda: job(entrypoint=" ")) == {"entrypoint": "must be a non-empty shell command, got ' '"}
    assert "did you mean 'HTTPMode'" in problems(lambda: job(submission_mode="HttpMode"))["submission_mode"]
    assert problems(lambda: job(submission_mode="HTTPMode", submitter=Resources(cpu="1")))["submitter"].startswith(
        "HTTPMode has no submitter pod"
    )
    assert set(problems(lambda: job(submitter=Resources(cpu="-1")))) == {"submitter.cpu"}
    assert problems(lambda: job(ttl_seconds_after_finished=60, shutdown_after_job_finishes=False)) == {
        "ttl_seconds_after_finished": "deletes the cluster only with shutdown_after_job_finishes=True (KubeRay)"
    }
    job(ttl_seconds_after_finished=0, shutdown_after_job_finishes=False)
    assert set(problems(lambda: job(suspend=True, queue="gpu", shutdown_after_job_finishes=False))) == {
        "suspend",
        "queue",
    }
    assert set(problems(lambda: job(active_deadline_seconds=0, ttl_seconds_after_finished=-1, queue=""))) == {
        "active_deadline_seconds",
        "ttl_seconds_after_finished",
        "queue",
    }
    assert problems(lambda: job(cluster="tune")) == {"cluster": "expected RayCluster, got str"}
