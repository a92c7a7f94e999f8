"""Pure pieces of the batch/v1 Job controller: index interval strings, pod failure and success policies, the pod
failure back-off.

Kept apart from the controller so each rule can be read next to upstream's (``pkg/controller/job``) and
tested without a store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
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


# ------------------------------------------------------------------------------------ pod failure back-off
# pkg/controller/job/backoff_utils.go: after failed pods, the controller waits before it creates their replacements,
# DefaultJobPodFailureBackOff (10 s) doubled per failure since the last success, at most MaxJobPodFailureBackOff
# (10 min; job_controller.go), counted from the last failure's finish time.

#: ``DefaultJobPodFailureBackOff`` and ``MaxJobPodFailureBackOff`` (job_controller.go).
DEFAULT_POD_FAILURE_BACKOFF = 10.0
MAX_POD_FAILURE_BACKOFF = 600.0


def _epoch(stamp: Any) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def finished_at(pod: Obj) -> float:
    """``getFinishedTime``: the latest ``finishedAt`` once every container terminated; else the ``Ready=False``
    condition's transition; else ``deletionTimestamp`` minus the grace period; else the creation time (seconds)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ends = [_epoch(((s.get("state") or {}).get("terminated") or {}).get("finishedAt")) for s in statuses]
    if statuses and all(end is not None for end in ends):
        return max(end for end in ends if end is not None)
    ready = condition(pod, "Ready")
    if ready is not None and ready.get("status") == "False" and (at := _epoch(ready.get("lastTransitionTime"))):
        return at
    meta = pod.get("metadata") or {}
    if deleted := _epoch(meta.get("deletionTimestamp")):
        return deleted - float(meta.get("deletionGracePeriodSeconds") or 0)
    return _epoch(meta.get("creationTimestamp")) or 0.0


@dataclass(frozen=True)
class Backoff:
    """``backoffRecord``: failures since the last success, and when the last of them finished (seconds)."""

    failures: int = 0
    last_failure: float | None = None

    def after(self, succeeded: Iterable[Obj], failed: Iterable[Obj]) -> Backoff:
        """``newBackoffRecord``: this record with the pods counted since (sorted by finish time)."""
        wins = sorted(finished_at(p) for p in succeeded)
        losses = sorted(finished_at(p) for p in failed)
        if not wins:
            return Backoff(self.failures + len(losses), losses[-1]) if losses else self
        later = [t for t in losses if t > wins[-1]]
        return Backoff(len(later), later[-1] if later else None)

    def remaining(self, now: float, base: float = DEFAULT_POD_FAILURE_BACKOFF) -> float:
        """``getRemainingTimeForFailuresCount``: seconds before a replacement may be created (0: now). The cap
        scales with ``base`` (upstream's 10 min for 10 s)."""
        if self.failures == 0 or self.last_failure is None:
            return 0.0
        cap = base * MAX_POD_FAILURE_BACKOFF / DEFAULT_POD_FAILURE_BACKOFF
        delay = min(base * 2 ** (self.failures - 1), cap)
        return max(delay - (now - self.last_failure), 0.0)
