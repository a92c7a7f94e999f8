"""``BatchStage`` -> batch/v1 Job (pure).

One container (named ``trainer`` as in a group's pods, so ``pod_overrides`` address it the same way) with
``restartPolicy: Never``: the Job controller, not the kubelet, retries a failed pod (``backoff_limit``), and a pod
stopped by a disruption (eviction, preemption, node loss: condition ``DisruptionTarget``) is retried without
counting (``podFailurePolicy`` ``Ignore``). ``completions > 1`` makes an Indexed Job: each pod's ``AE_RANK`` is its
completion index (the ``batch.kubernetes.io/job-completion-index`` annotation the Job controller sets), and index 0
reports the stage's metrics through its termination message, as a group's leader does.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from airflow_elastic import contract
from airflow_elastic.kube import names
from airflow_elastic.kube.labels import COMPLETION_INDEX_LABEL, MANAGED_BY_LABEL, MANAGER, QUEUE_LABEL
from airflow_elastic.kube.labels import STAGE_LABEL as STAGE_LABEL
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.render.jobset import call_problems
from airflow_elastic.training.render.pod import single_container_pod
from airflow_elastic.training.spec import SpecError

API_VERSION = "batch/v1"
KIND = "Job"
COMPLETION_INDEX = COMPLETION_INDEX_LABEL  # its name here before kube.labels


def render_job(
    stage: BatchStage,
    *,
    name: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    ttl_seconds_after_finished: int | None = None,
) -> dict[str, Any]:
    """Render ``stage`` as a batch/v1 Job manifest.

    Args:
        stage: a validated batch stage.
        name: the Job's name (the operator passes ``<stage>-<6 chars>`` per run); defaults to the stage's name.
        namespace: target namespace.
        labels: extra labels for the Job and its pods (the operator adds dag/task/run identity).
        ttl_seconds_after_finished: the Job's TTL when the stage sets none (``stage.ttl_after_finished`` wins).

    Returns:
        A dict ready for ``create_namespaced_job`` / ``kubectl apply``; its ``spec`` is what a CronJob's
        ``jobTemplate.spec`` holds.

    Raises:
        SpecError: if ``name``, ``namespace``, ``labels`` or the TTL is invalid for this stage.
    """
    job = name if name is not None else stage.name
    _check_call(stage, job, namespace, labels, ttl_seconds_after_finished)
    common = {MANAGED_BY_LABEL: MANAGER, STAGE_LABEL: stage.name, **(labels or {})}
    if stage.placement.queue:
        common[QUEUE_LABEL] = stage.placement.queue
    ttl = stage.ttl_after_finished if stage.ttl_after_finished is not None else ttl_seconds_after_finished
    spec: dict[str, Any] = {
        "parallelism": stage.parallelism,
        "completions": stage.completions,
        "completionMode": "Indexed" if stage.indexed else "NonIndexed",
        "backoffLimit": stage.backoff_limit,
        "podFailurePolicy": {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
    }
    if stage.active_deadline is not None:
        spec["activeDeadlineSeconds"] = _whole_seconds(stage.active_deadline)
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = _whole_seconds(ttl)
    spec["template"] = pod_template(stage, labels=common)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job, "namespace": namespace, "labels": dict(common)},
        "spec": spec,
    }


def _whole_seconds(value: float | datetime.timedelta) -> int:
    """Whole seconds of a duration (a spec holds seconds once built; the type also admits a ``timedelta``)."""
    return int(value.total_seconds() if isinstance(value, datetime.timedelta) else value)


def stage_env(stage: BatchStage) -> list[dict[str, Any]]:
    """The part of the environment contract that applies to a stage: its name (``AE_GROUP``), namespace, rank and
    world size (completion index and ``completions``; 0 and 1 for a single pod) and where metrics go."""
    rank: dict[str, Any] = (
        {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_LABEL}']"}}}
        if stage.indexed
        else {"value": "0"}
    )
    count = {"value": str(stage.completions)}
    return [
        {"name": contract.GROUP, "value": stage.name},
        {"name": contract.NAMESPACE, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": contract.RANK, **rank},
        {"name": contract.ROLE_RANK, **rank},
        {"name": contract.WORLD_SIZE, **count},
        {"name": contract.ROLE_REPLICAS, **count},
        {"name": contract.METRICS_PATH, "value": contract.TERMINATION_MESSAGE_PATH},
    ]


def pod_template(stage: BatchStage, *, labels: Mapping[str, str]) -> dict[str, Any]:
    """The Job's pod template: the container, the contract's env, resources, placement, then ``pod_overrides``."""
    return single_container_pod(
        image=stage.image,
        command=stage.command,
        args=stage.args,
        env=stage_env(stage) + [{"name": k, "value": v} for k, v in (stage.env or {}).items()],
        res=stage.resources,
        placement=stage.placement,
        labels=labels,
        overrides=(stage.pod_overrides,),
    )


def _check_call(stage: BatchStage, job: str, namespace: str, labels: Mapping[str, str] | None, ttl: int | None) -> None:
    problems = []
    longest = len(job) + (1 + len(str(stage.completions - 1)) if stage.indexed else 0)
    if not names.is_dns1035_label(job):
        problems.append(("name", f"{job!r} must be a DNS-1035 label (lowercase letters, digits, '-')"))
    elif longest > names.MAX_LABEL:
        problems.append(
            (
                "name",
                f"Job name {job!r} is too long: pod hostnames <job>-<index> would have {longest} characters, "
                f"over {names.MAX_LABEL}",
            )
        )
    problems += call_problems(namespace, labels, ttl, owned=(MANAGED_BY_LABEL, STAGE_LABEL, QUEUE_LABEL))
    if problems:
        raise SpecError(problems)
