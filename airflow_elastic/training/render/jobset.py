"""``TrainingGroup`` -> ``jobset.x-k8s.io/v1alpha2`` JobSet (pure).

Mapping: each role is one replicated Job with ``replicas`` = the role's pods and one pod per Job (Indexed,
completions = parallelism = 1). So JobSet's ``job-index`` label is the rank within the role, and
``job-global-index`` the rank within the group; hostnames are ``<jobset>-<role>-<i>-0``; exclusive placement
gives each *pod* a topology domain of its own. An elastic role differs (see
:mod:`airflow_elastic.training.render.elastic`).
See docs/concepts/training-groups.md#how-a-group-becomes-a-jobset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_elastic.kube import names
from airflow_elastic.kube.labels import EXCLUSIVE_TOPOLOGY_ANNOTATION, GROUP_ROLE_LABEL
from airflow_elastic.kube.labels import GROUP_LABEL as GROUP_LABEL
from airflow_elastic.kube.labels import MANAGED_BY_LABEL as MANAGED_BY_LABEL
from airflow_elastic.kube.labels import MANAGER as MANAGER
from airflow_elastic.kube.labels import QUEUE_LABEL as QUEUE_LABEL
from airflow_elastic.training.render import elastic, fault_tolerance
from airflow_elastic.training.render.pod import pod_template
from airflow_elastic.training.spec import Role, SpecError, TrainingGroup
from airflow_elastic.training.validation import is_label_key, is_label_value

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
# Keys under the names this module exported before they moved to kube.labels.
ROLE_LABEL = GROUP_ROLE_LABEL
EXCLUSIVE_TOPOLOGY = EXCLUSIVE_TOPOLOGY_ANNOTATION

#: JobSet failure-policy rule names (explicit, so the manifest needs no webhook defaulting).
DISRUPTION_RULE = "RestartOnDisruption"
FAILURE_RULE = "CountFailure"
#: Matches the Job controller's podFailurePolicy message for our FailJob rule:
#: ``Pod <ns>/<pod> has condition DisruptionTarget matching FailJob rule at index 0``.
DISRUPTION_MESSAGE_PATTERN = "has condition DisruptionTarget matching FailJob rule"


def render_jobset(
    group: TrainingGroup,
    *,
    name: str | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    ttl_seconds_after_finished: int | None = None,
) -> dict[str, Any]:
    """Render ``group`` as a JobSet manifest.

    Args:
        group: a validated training group.
        name: JobSet name (the operator passes a per-run name from ``names.run_name``); defaults to the
            group's name. It is checked against the same name budget as at parse time.
        namespace: target namespace.
        labels: extra labels for the JobSet and its pods (the operator adds dag/task/run identity).
        ttl_seconds_after_finished: delete the JobSet this long after it finished.

    Returns:
        A dict ready for ``create_namespaced_custom_object`` / ``kubectl apply``.

    Raises:
        SpecError: if ``name``, ``namespace``, ``labels`` or the TTL is invalid for this group.
    """
    jobset = name if name is not None else group.name
    _check_call(group, jobset, namespace, labels, ttl_seconds_after_finished)
    common = {MANAGED_BY_LABEL: MANAGER, GROUP_LABEL: group.name, **(labels or {})}
    metadata: dict[str, Any] = {"name": jobset, "namespace": namespace, "labels": dict(common)}
    if group.placement.queue:
        metadata["labels"][QUEUE_LABEL] = group.placement.queue
    if group.placement.exclusive_topology:
        metadata["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: group.placement.exclusive_topology}
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": jobset},
        "coordinator": {"replicatedJob": group.leader.name, "jobIndex": 0, "podIndex": 0},
        "successPolicy": _success_policy(group),
        "failurePolicy": _failure_policy(group),
        "replicatedJobs": [_replicated_job(group, role, jobset, common) for role in group.roles],
    }
    if group.fault_tolerance is not None:  # the lighthouse and the replica groups (render/fault_tolerance.py)
        rules = (DISRUPTION_RULE, DISRUPTION_MESSAGE_PATTERN, FAILURE_RULE)
        spec |= fault_tolerance.jobset_parts(
            group, jobset=jobset, namespace=namespace, labels=common, role_label=ROLE_LABEL, rules=rules
        )
    if ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = ttl_seconds_after_finished
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _check_call(
    group: TrainingGroup, jobset: str, namespace: str, labels: Mapping[str, str] | None, ttl: int | None
) -> None:
    problems = []
    if not names.is_dns1035_label(jobset):
        problems.append(("name", f"{jobset!r} must be a DNS-1035 label (lowercase letters, digits, '-')"))
    else:
        roles = [(role.name, role.replicas) for role in group.roles]
        problems += [
            ("name", f"JobSet name {jobset!r} is too long: {p}")
            for p in names.budget_problems(len(jobset), roles, group.leader.name)
        ]
    problems += call_problems(
        namespace, labels, ttl, owned=(MANAGED_BY_LABEL, GROUP_LABEL, GROUP_ROLE_LABEL, QUEUE_LABEL)
    )
    if problems:
        raise SpecError(problems)


def call_problems(
    namespace: str, labels: Mapping[str, str] | None, ttl: int | None, *, owned: tuple[str, ...]
) -> list[tuple[str, str]]:
    """What is wrong with a render call's namespace, extra labels (``owned`` keys are the renderer's) and TTL."""
    problems = []
    if not names.is_dns1123_label(namespace):
        problems.append(("namespace", f"{namespace!r} must be a DNS-1123 label"))
    for key, value in (labels or {}).items():
        if not is_label_key(key):
            problems.append((f"labels[{key!r}]", "is not a valid label key"))
        elif not is_label_value(value):
            problems.append((f"labels[{key!r}]", f"{value!r} is not a valid label value"))
        elif key in owned:
            problems.append((f"labels[{key!r}]", "is set by airflow-elastic"))
    if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0):
        problems.append(("ttl_seconds_after_finished", f"must be an integer >= 0, got {ttl!r}"))
    return problems


def _success_policy(group: TrainingGroup) -> dict[str, Any]:
    policy: dict[str, Any] = {"operator": "All" if group.success.mode == "all" else "Any"}
    if group.success.roles:
        policy["targetReplicatedJobs"] = list(group.success.roles)
    return policy


def _failure_policy(group: TrainingGroup) -> dict[str, Any]:
    """The host-maintenance pattern: a disruption fails the child Job through its podFailurePolicy and restarts
    the group without counting; any other Job failure counts against ``maxRestarts`` = ``max_failures``.
    The cluster cannot bound the free restarts: the operator enforces ``max_preemptions``."""
    return {
        "maxRestarts": group.failure.max_failures,
        "restartStrategy": "Recreate",
        "rules": [
            {
                "name": DISRUPTION_RULE,
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [DISRUPTION_MESSAGE_PATTERN],
            },
            {"name": FAILURE_RULE, "action": "RestartJobSet"},
        ],
    }


def _replicated_job(group: TrainingGroup, role: Role, jobset: str, common: dict[str, str]) -> dict[str, Any]:
    labels = {**common, GROUP_ROLE_LABEL: role.name}
    template_meta: dict[str, Any] = {"labels": dict(labels)}
    role_topology = role.placement.exclusive_topology if role.placement else None
    if role_topology:
        template_meta["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: role_topology}
    job: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": 1,
        "parallelism": 1,
        # Gang semantics: one failed pod fails its Job at once, and the JobSet policy decides.
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [_disruption_rule(group, role)]},
    }
    if elastic.is_elastic(group, role):
        # The replacement starts once the disrupted pod is terminal: never two pods for one index.
        job["podReplacementPolicy"] = "Failed"
    job["template"] = pod_template(group, role, jobset=jobset, labels=labels)
    return {
        "name": role.name,
        "replicas": elastic.rendered_replicas(group, role),
        "template": {"metadata": template_meta, "spec": job},
    }


def _disruption_rule(group: TrainingGroup, role: Role) -> dict[str, Any]:
    """``FailJob`` on ``DisruptionTarget`` (the JobSet's RestartOnDisruption rule restarts the group), or
    ``Ignore`` for the elastic role: the Job replaces the disrupted pod and the framework re-rendezvouses."""
    return {
        "action": "Ignore" if elastic.is_elastic(group, role) else "FailJob",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
