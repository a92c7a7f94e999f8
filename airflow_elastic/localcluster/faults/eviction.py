"""The Eviction API (``pods/{name}/eviction``) as the API server's eviction registry implements it.

A running pod is checked against the PodDisruptionBudgets selecting it (429 when the budget allows no
disruption), gets ``DisruptionTarget`` (``EvictionByEvictionAPI``, "Eviction API: evicting") and is then deleted
gracefully. There is no disruption controller: a budget's allowance is computed from the pods at eviction time
(expected pods = the non-terminal pods it selects) and ``status`` of the budget is not written.
"""

from __future__ import annotations

import math
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controllers.jobpolicy import condition_true
from airflow_elastic.localcluster.faults.nodelifecycle import disruption_condition, set_pod_status
from airflow_elastic.localcluster.resources import PODDISRUPTIONBUDGETS, PODS
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj, Store

EVICTION_MESSAGE = "Eviction API: evicting"
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


class BudgetExceeded(errors.TooManyRequests):
    """429 from the eviction subresource: callers (drains) retry later."""


def _count(value: Any, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * expected / 100)
    return int(value)


def _healthy(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and condition_true(pod, "Ready")


def check_budgets(store: Store, pod: Obj) -> None:
    """Raise :class:`BudgetExceeded` if evicting ``pod`` would violate the PodDisruptionBudget selecting it."""
    namespace, labels = pod["metadata"]["namespace"], pod["metadata"].get("labels") or {}
    budgets = [
        b
        for b in store.items(PODDISRUPTIONBUDGETS, namespace)
        if match_label_selector(b["spec"].get("selector"), labels)
    ]
    if not budgets:
        return
    if len(budgets) > 1:
        raise errors.ApiError(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
    budget = budgets[0]
    selected = [
        p
        for p in store.items(PODS, namespace)
        if match_label_selector(budget["spec"].get("selector"), p["metadata"].get("labels") or {})
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    expected, healthy = len(selected), sum(1 for p in selected if _healthy(p))
    spec = budget["spec"]
    if "minAvailable" in spec:
        desired = _count(spec["minAvailable"], expected)
    else:
        desired = expected - _count(spec.get("maxUnavailable", 0), expected)
    if not _healthy(pod):
        policy = spec.get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or healthy >= desired:
            return
    elif healthy - desired > 0:
        return
    name = budget["metadata"]["name"]
    cause = {
        "reason": "DisruptionBudget",
        "message": f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently",
    }
    raise BudgetExceeded(BUDGET_MESSAGE, details={"causes": [cause]})


def evict(store: Store, namespace: str, name: str, options: dict[str, Any] | None = None) -> None:
    """Evict a pod: budget check, ``DisruptionTarget`` condition, graceful delete (``options``: DeleteOptions).

    Pods that are already terminal, pending or terminating are deleted without a budget check, as upstream.
    """
    options = options or {}
    pod = store.get(PODS, namespace, name)
    phase = (pod.get("status") or {}).get("phase")
    running = phase not in ("Succeeded", "Failed", "Pending", None) and not pod["metadata"].get("deletionTimestamp")
    if running:
        check_budgets(store, pod)
    dry_run = bool(options.get("dryRun"))
    if phase not in ("Succeeded", "Failed") and not dry_run:
        set_pod_status(store, pod, condition=disruption_condition("EvictionByEvictionAPI", EVICTION_MESSAGE))
    preconditions = options.get("preconditions") or {}
    store.delete(
        PODS,
        namespace,
        name,
        grace_seconds=options.get("gracePeriodSeconds"),
        uid=preconditions.get("uid"),
        resource_version=preconditions.get("resourceVersion"),
        dry_run=dry_run,
    )
