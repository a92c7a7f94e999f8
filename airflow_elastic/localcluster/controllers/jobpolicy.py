"""Pure pieces of the batch/v1 Job controller: index interval strings, pod failure and success policies.

Kept apart from the controller so each rule can be read next to upstream's (``pkg/controller/job``) and
tested without a store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_elastic.localcluster.store import Obj

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


def parse_intervals(text: str | None) -> set[int]:
    """``"1,3-5"`` → ``{1, 3, 4, 5}`` (the format of ``completedIndexes`` and ``succeededIndexes``)."""
    found: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def format_intervals(indexes: Iterable[int]) -> str:
    """``{1, 3, 4, 5}`` → ``"1,3-5"``."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def completion_index(pod: Obj) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    return int(value) if value is not None and value.isdigit() else None


def condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def condition_true(obj: Obj, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def pod_failure_policy_match(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """The first matching rule's ``(action, message)``, as ``matchPodFailurePolicy`` (None: no rule matched)."""
    policy = job["spec"].get("podFailurePolicy")
    if not policy:
        return None
    ns, name = pod["metadata"].get("namespace"), pod["metadata"]["name"]
    status = pod.get("status") or {}
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if codes := rule.get("onExitCodes"):
            for stat in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                if codes.get("containerName") and codes["containerName"] != stat.get("name"):
                    continue
                terminated = (stat.get("state") or {}).get("terminated")
                if not terminated or terminated.get("exitCode", 0) == 0:
                    continue
                code = terminated["exitCode"]
                in_values = code in (codes.get("values") or [])
                if in_values == (codes.get("operator") == "In"):
                    return action, (
                        f"Container {stat.get('name')} for pod {ns}/{name} failed with exit code {code} matching "
                        f"{action} rule at index {index}"
                    )
        for want in rule.get("onPodConditions") or []:
            for cond in status.get("conditions") or []:
                if cond.get("type") == want.get("type") and cond.get("status") == want.get("status", "True"):
                    return action, (
                        f"Pod {ns}/{name} has condition {want['type']} matching {action} rule at index {index}"
                    )
    return None


def success_policy_match(job: Obj, completed: set[int]) -> int | None:
    """Index of the first ``successPolicy`` rule the completed indexes satisfy."""
    for index, rule in enumerate((job["spec"].get("successPolicy") or {}).get("rules") or []):
        wanted = parse_intervals(rule.get("succeededIndexes")) if rule.get("succeededIndexes") else None
        matched = completed & wanted if wanted is not None else completed
        if wanted is not None and not wanted <= completed and rule.get("succeededCount") is None:
            continue
        if rule.get("succeededCount") is not None and len(matched) < rule["succeededCount"]:
            continue
        return index
    return None


def past_backoff_on_failure(job: Obj, pods: Iterable[Obj]) -> bool:
    """With ``restartPolicy: OnFailure`` container restarts of running pods count against ``backoffLimit``."""
    if job["spec"]["template"]["spec"].get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase", "Pending") in ("Pending", "Running"):
            for stat in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                restarts += stat.get("restartCount", 0)
    limit = job["spec"].get("backoffLimit", 6)
    return restarts > 0 if limit == 0 else restarts >= limit


def pod_generate_name(job_name: str, index: int | None) -> str:
    """``<job>-<index>-`` (Indexed) or ``<job>-``, shortened so the generated name stays ≤ 63 characters."""
    suffix = "-" if index is None else f"-{index}-"
    limit = 58  # 63 minus the 5 random characters
    return job_name[: limit - len(suffix)] + suffix if len(job_name) + len(suffix) > limit else job_name + suffix
