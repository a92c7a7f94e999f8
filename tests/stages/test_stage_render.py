"""render_job: a BatchStage as a batch/v1 Job, valid against the Job schema, with the stage's part of the contract."""

from __future__ import annotations

import pytest

from airflow_elastic import BatchStage, Placement, Resources, SpecError, contract
from airflow_elastic.kube.schema import batch_schema_errors
from airflow_elastic.stages.job import COMPLETION_INDEX, STAGE_LABEL, render_job

CPU_POOL = Placement(
    node_selector={"pool": "cpu"},
    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
    priority_class="batch-low",
)


def stage(**changes) -> BatchStage:
    return BatchStage(**{"name": "prepare", "image": "trainer:1", "command": ["python", "-m", "prep"], **changes})


def env(job: dict) -> dict:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }


def test_single_pod_job_is_valid_and_never_restarts_in_place():
    job = render_job(stage(args=["--day", "2025-01-01"]), name="prepare-abc123", namespace="ml", labels={"a/b": "c"})
    assert batch_schema_errors(job) == []
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]) == (
        "batch/v1",
        "Job",
        "prepare-abc123",
        "ml",
    )
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"], spec["backoffLimit"]) == (
        1,
        1,
        "NonIndexed",
        0,
    )
    pod = spec["template"]
    assert pod["spec"]["restartPolicy"] == "Never"
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "prep"] and container["args"] == ["--day", "2025-01-01"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    for labels in (job["metadata"]["labels"], pod["metadata"]["labels"]):
        assert labels[STAGE_LABEL] == "prepare" and labels["a/b"] == "c"
        assert labels["app.kubernetes.io/managed-by"] == "airflow-elastic"
    # Disruptions are retried without counting against backoffLimit.
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["action"] == "Ignore" and rule["onPodConditions"][0]["type"] == "DisruptionTarget"


def test_indexed_job_ranks_pods_by_completion_index():
    job = render_job(stage(parallelism=2, completions=4), name="prepare-abc123")
    assert batch_schema_errors(job) == []
    assert (job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == ("Indexed", 4, 2)
    values = env(job)
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}
    assert values[contract.RANK] == values[contract.ROLE_RANK] == index
    assert values[contract.WORLD_SIZE] == "4"


def test_stage_env_contract_and_user_env():
    values = env(render_job(stage(env={"DAY": "2025-01-01"})))
    assert values[contract.GROUP] == "prepare"
    assert values[contract.RANK] == "0" and values[contract.WORLD_SIZE] == "1"
    assert values[contract.METRICS_PATH] == contract.TERMINATION_MESSAGE_PATH
    assert values[contract.NAMESPACE] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert values["DAY"] == "2025-01-01"
    assert not any(name in values for name in (contract.MASTER_ADDR, contract.JOBSET, contract.COORDINATOR_ADDR))


def test_cpu_pool_placement_resources_and_deadlines():
    built = stage(
        resources=Resources(cpu="2", memory="4Gi"), placement=CPU_POOL, active_deadline=600, ttl_after_finished=60
    )
    job = render_job(built, ttl_seconds_after_finished=86400)
    assert batch_schema_errors(job) == []
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == [dict(CPU_POOL.tolerations[0])]
    assert pod["priorityClassName"] == "batch-low"
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"memory": "4Gi"},
    }
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["ttlSecondsAfterFinished"] == 60  # the stage's own TTL wins over the operator's default


def test_operator_ttl_applies_when_the_stage_sets_none():
    assert render_job(stage(), ttl_seconds_after_finished=120)["spec"]["ttlSecondsAfterFinished"] == 120
    assert "ttlSecondsAfterFinished" not in render_job(stage())["spec"]


def test_queue_label_and_pod_overrides():
    overrides = {"spec": {"serviceAccountName": "batch", "volumes": [{"name": "data", "emptyDir": {}}]}}
    job = render_job(stage(placement=Placement(queue="cpu-queue"), pod_overrides=overrides))
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "cpu-queue"
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "batch"
    assert batch_schema_errors(job) == []


def test_a_schema_violation_is_reported():
    job = render_job(stage())
    job["spec"]["completions"] = "four"
    assert any(e.startswith("job.spec.completions") for e in batch_schema_errors(job))


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"namespace": "Bad NS"}, "namespace"),
        ({"labels": {STAGE_LABEL: "other"}}, f"labels[{STAGE_LABEL!r}]"),
        ({"labels": {"k": "bad value"}}, "labels['k']"),
        ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
    ],
)
def test_call_arguments_are_checked(kwargs, path):
    with pytest.raises(SpecError) as raised:
        render_job(stage(), **kwargs)
    assert path in dict(raised.value.problems)


def test_a_long_name_is_refused_for_indexed_hostnames():
    with pytest.raises(SpecError, match="hostnames"):
        render_job(stage(completions=10, parallelism=1), name="a" * 62)
