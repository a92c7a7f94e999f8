"""Deployment arithmetic, ported from kubernetes ``pkg/controller/deployment/util/deployment_util.go`` and
``pkg/controller/controller_utils.go`` (``ComputeHash``): surge/unavailable fenceposts, the new ReplicaSet's
size, revisions, proportions, and the ReplicaSet/Deployment conditions. Pure: plain dicts in, values out."""

from __future__ import annotations

import copy
import json
import math
from datetime import datetime
from typing import Any

from airflow_elastic.localcluster.clock import format_time, parse_time
from airflow_elastic.localcluster.store import Obj

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
#: Annotations a Deployment does not copy to its ReplicaSets (``annotationsToSkip``).
SKIPPED = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION,
        REVISION_HISTORY,
        DESIRED_REPLICAS,
        MAX_REPLICAS,
        "deprecated.deployment.rollback.to",
    }
)
#: Progressing reasons (``deployment_util.go`` constants).
NEW_RS_CREATED, FOUND_NEW_RS, RS_UPDATED = "NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"
NEW_RS_AVAILABLE, TIMED_OUT = "NewReplicaSetAvailable", "ProgressDeadlineExceeded"
PAUSED, RESUMED = "DeploymentPaused", "DeploymentResumed"
MIN_AVAILABLE, MIN_UNAVAILABLE = "MinimumReplicasAvailable", "MinimumReplicasUnavailable"
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery util/rand SafeEncodeString


def replicas(obj: Obj | None) -> int:
    """``*spec.replicas`` (defaulted to 1 by admission)."""
    return int(((obj or {}).get("spec") or {}).get("replicas", 1)) if obj else 0


def status_of(obj: Obj | None, field: str) -> int:
    return int(((obj or {}).get("status") or {}).get(field) or 0)


def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int, or a percentage of ``total`` rounded up or down."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    if not value.endswith("%") or not value[:-1].isdigit():
        raise ValueError(f"invalid value for IntOrString: invalid value {value!r}")
    exact = int(value[:-1]) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def fenceposts(deployment: Obj) -> tuple[int, int]:
    """``ResolveFenceposts``: (maxSurge rounded up, maxUnavailable rounded down); both 0 ⇒ unavailable 1."""
    rolling = ((deployment["spec"].get("strategy") or {}).get("rollingUpdate")) or {}
    desired = replicas(deployment)
    surge = scaled_value(rolling.get("maxSurge"), desired, True)
    unavailable = scaled_value(rolling.get("maxUnavailable"), desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # validation forbids 0/0; this keeps a rollout moving anyway
    return surge, unavailable


def rolling(deployment: Obj) -> bool:
    return (deployment["spec"].get("strategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"


def max_surge(deployment: Obj) -> int:
    """``MaxSurge``: 0 unless RollingUpdate."""
    return fenceposts(deployment)[0] if rolling(deployment) else 0


def max_unavailable(deployment: Obj) -> int:
    """``MaxUnavailable``: 0 unless RollingUpdate with replicas; never more than the replicas."""
    if not rolling(deployment) or replicas(deployment) == 0:
        return 0
    return min(fenceposts(deployment)[1], replicas(deployment))


def total_spec(rss: list[Obj]) -> int:
    """``GetReplicaCountForReplicaSets``."""
    return sum(replicas(rs) for rs in rss)


def total_status(rss: list[Obj], field: str) -> int:
    """``GetActualReplicaCountForReplicaSets`` / ``Ready…`` / ``Available…`` (sum of a status field)."""
    return sum(status_of(rs, field) for rs in rss)


def counted_available(rss: list[Obj]) -> int:
    """Available pods of ``rss``, each ReplicaSet's count capped at its ``spec.replicas``. Upstream sums
    ``status.availableReplicas``; a ReplicaSet scaled down a moment ago still reports pods it is about to delete,
    and a second sync in that window would scale down twice. (Simplification: deviates only in that window.)"""
    return sum(min(status_of(rs, "availableReplicas"), replicas(rs)) for rs in rss)


def new_rs_replicas(deployment: Obj, all_rss: list[Obj], new_rs: Obj) -> int:
    """``NewRSNewReplicas``: how far the new ReplicaSet may grow now."""
    if not rolling(deployment):
        return replicas(deployment)
    current = total_spec(all_rss)
    ceiling = replicas(deployment) + max_surge(deployment)
    if current >= ceiling:
        return replicas(new_rs)
    return replicas(new_rs) + min(ceiling - current, max(replicas(deployment) - replicas(new_rs), 0))


def template_hash(template: Obj, collision_count: int | None) -> str:
    """``controller.ComputeHash``: a 32-bit FNV-1a of the template (and collision count), safe-encoded. The bytes
    hashed are the template's canonical JSON (upstream hashes Go's object dump), so values differ from upstream's
    but have the same form and stability."""
    data = json.dumps(semantic(template), sort_keys=True, separators=(",", ":")).encode()
    if collision_count is not None:
        data += int(collision_count).to_bytes(4, "little")
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in str(value))


def semantic(value: Any) -> Any:
    """``value`` as apimachinery's ``Semantic.DeepEqual`` compares it: null, empty maps and empty lists are absent
    (a client that sends ``resources: {}`` or ``creationTimestamp: null`` means the same template)."""
    if isinstance(value, dict):
        kept = {k: semantic(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def without_hash(template: Obj) -> Obj:
    found = semantic(copy.deepcopy(template or {}))
    labels = (found.get("metadata") or {}).get("labels")
    if labels:
        labels.pop(HASH_LABEL, None)
    return found


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    """``EqualIgnoreHash``: templates semantically equal but for the ``pod-template-hash`` label."""
    return without_hash(a) == without_hash(b)


def revision(obj: Obj) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def by_creation(rss: list[Obj]) -> list[Obj]:
    """``ReplicaSetsByCreationTimestamp`` (oldest first, then by name)."""
    return sorted(rss, key=lambda rs: (rs["metadata"].get("creationTimestamp", ""), rs["metadata"]["name"]))


def find_new(deployment: Obj, rss: list[Obj]) -> Obj | None:
    """``FindNewReplicaSet``: the oldest ReplicaSet whose template equals the Deployment's."""
    template = deployment["spec"]["template"]
    return next((rs for rs in by_creation(rss) if equal_ignore_hash(rs["spec"]["template"], template)), None)


def active(rss: list[Obj]) -> list[Obj]:
    """``FilterActiveReplicaSets``: those with replicas."""
    return [rs for rs in rss if replicas(rs) > 0]


def active_or_latest(new_rs: Obj | None, old_rss: list[Obj]) -> Obj | None:
    """``FindActiveOrLatest``: the one active ReplicaSet, else the newest when none is active."""
    if new_rs is None and not old_rss:
        return None
    newest_first = sorted(
        old_rss, key=lambda rs: (rs["metadata"].get("creationTimestamp", ""), rs["metadata"]["name"]), reverse=True
    )
    live = active(newest_first + ([new_rs] if new_rs else []))
    if not live:
        return new_rs or newest_first[0]
    return live[0] if len(live) == 1 else None


def saturated(deployment: Obj, rs: Obj | None) -> bool:
    """``IsSaturated``: the ReplicaSet runs all the Deployment's replicas, available, for the current size."""
    if rs is None:
        return False
    desired = (rs["metadata"].get("annotations") or {}).get(DESIRED_REPLICAS, "")
    want = replicas(deployment)
    return (
        desired.isdigit()
        and replicas(rs) == want
        and int(desired) == want
        and status_of(rs, "availableReplicas") == want
    )


def proportion(rs: Obj, deployment: Obj, to_add: int, added: int) -> int:
    """``GetProportion`` with ``getReplicaSetFraction``: this ReplicaSet's share of a scaling event."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    if replicas(deployment) == 0:
        fraction = -replicas(rs)
    else:
        size = replicas(deployment) + max_surge(deployment)
        annotated = (rs["metadata"].get("annotations") or {}).get(MAX_REPLICAS, "")
        base = int(annotated) if annotated.isdigit() else status_of(deployment, "replicas")
        fraction = (round_half_away(replicas(rs) * size / base) if base else 0) - replicas(rs)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def proportional_sizes(deployment: Obj, live: list[Obj]) -> list[tuple[Obj, int]]:
    """``scale``'s rolling case: the active ReplicaSets resized so that together they hold ``replicas + maxSurge``,
    each by its ``proportion``; the leftover goes to the first (largest: ``ReplicaSetsBySizeNewer`` when growing,
    ``BySizeOlder`` when shrinking)."""
    allowed = replicas(deployment) + max_surge(deployment) if replicas(deployment) > 0 else 0
    to_add = allowed - total_spec(live)
    if to_add > 0:
        live = sorted(live, key=lambda rs: (replicas(rs), rs["metadata"].get("creationTimestamp", "")), reverse=True)
    elif to_add < 0:
        live = sorted(live, key=lambda rs: (-replicas(rs), rs["metadata"].get("creationTimestamp", "")))
    sizes, added = [], 0
    for rs in live:
        share = proportion(rs, deployment, to_add, added) if to_add else 0
        sizes.append(replicas(rs) + share)
        added += share
    if sizes and to_add:
        sizes[0] = max(sizes[0] + to_add - added, 0)
    return list(zip(live, sizes, strict=True))


def round_half_away(value: float) -> int:
    """``integer.RoundToInt32`` (math.Round: halves away from zero)."""
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


# ------------------------------------------------------------------------------------------------ conditions


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def set_condition(status: dict[str, Any], kind: str, state: str, reason: str, message: str, now: datetime) -> None:
    """``SetDeploymentCondition``: unchanged status and reason keep the condition (and both times); a new reason
    with the same status keeps ``lastTransitionTime``."""
    stamp = format_time(now)
    current = condition(status, kind)
    if current is not None and current.get("status") == state and current.get("reason") == reason:
        return
    new = {
        "type": kind,
        "status": state,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }
    if current is not None and current.get("status") == state:
        new["lastTransitionTime"] = current.get("lastTransitionTime", stamp)
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != kind] + [new]


def remove_condition(status: dict[str, Any], kind: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    if not status["conditions"]:
        del status["conditions"]


def complete(deployment: Obj, status: dict[str, Any]) -> bool:
    """``DeploymentComplete``: every replica updated and available, and the latest spec observed."""
    want = replicas(deployment)
    return (
        status.get("updatedReplicas", 0) == want
        and status.get("replicas", 0) == want
        and status.get("availableReplicas", 0) == want
        and status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 1)
    )


def progressing(deployment: Obj, status: dict[str, Any]) -> bool:
    """``DeploymentProgressing``: more updated/ready/available replicas, or fewer old ones, than last seen."""
    old = deployment.get("status") or {}
    old_old = old.get("replicas", 0) - old.get("updatedReplicas", 0)
    new_old = status.get("replicas", 0) - status.get("updatedReplicas", 0)
    return (
        status.get("updatedReplicas", 0) > old.get("updatedReplicas", 0)
        or new_old < old_old
        or status.get("readyReplicas", 0) > old.get("readyReplicas", 0)
        or status.get("availableReplicas", 0) > old.get("availableReplicas", 0)
    )


def deadline(deployment: Obj) -> int | None:
    """``progressDeadlineSeconds`` unless unset or ``math.MaxInt32`` (``HasProgressDeadline``)."""
    seconds = deployment["spec"].get("progressDeadlineSeconds")
    return None if seconds is None or seconds == 2**31 - 1 else int(seconds)


def timed_out(deployment: Obj, status: dict[str, Any], now: datetime) -> bool:
    """``DeploymentTimedOut``: the Progressing condition was last updated longer ago than the deadline."""
    seconds, cond = deadline(deployment), condition(status, "Progressing")
    if seconds is None or cond is None or cond.get("reason") == NEW_RS_AVAILABLE:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    return (now - parse_time(cond["lastUpdateTime"])).total_seconds() > seconds
