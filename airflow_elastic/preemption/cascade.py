"""Node-loss cascades (pure): the survivors' errors after a peer's node vanished are the node's loss, not theirs.

When a node vanishes without warning, nothing marks its pods for a while: the node still looks ``Ready`` until the
node controller's grace period passes (``--node-monitor-grace-period``, 50 s since Kubernetes 1.32, 40 s before), and
its pods keep their last status (``Running``). Their peers' collectives fail at once, so the *survivors* exit 1
first and the JobSet fails on a survivor's Job: judged pod by pod, that is a user error. So before a failure charged
to the failure budget becomes the verdict, :class:`~airflow_elastic.waiting.watch.Watch` holds it for a bounded settle
window and looks at the whole attempt:

* a pod of the attempt that never reported how it ended (still present, phase neither ``Succeeded`` nor ``Failed``:
  its kubelet is silent) is *unaccounted*; the verdict waits while one exists and the window lasts;
* an unaccounted pod whose node is gone, not ``Ready``, tainted unreachable / not-ready, or being deleted is the
  *root cause*: the attempt ended in node loss (preemption budget), and the record names that pod and node;
* once every pod is accounted for (each reported its own exit, or is gone: deletion completes only once its kubelet
  confirmed it, or its node is gone, which the node lookup shows), or the window passed, the failure stands.

A genuine failure is held only as long as the JobSet takes to stop the other pods (their grace period).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_elastic.kube.labels import NODE_LOSS_TAINTS, REPLICATED_JOB_LABEL, RESTART_ATTEMPT_LABEL

Obj = Mapping[str, Any]
#: How long a failure may be held to see whether a peer's node was lost (``settle_seconds``): the node-monitor
#: grace period (50 s) plus time for a few polls.
SETTLE_SECONDS = 90.0
NODE_DOWN_TAINTS = NODE_LOSS_TAINTS  # its name here before kube.labels
RULE = "node-loss-cascade"


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def attempt_pods(pods: Iterable[Obj], attempt: int) -> list[Obj]:
    """The pods of restart attempt ``attempt`` (older attempts' pods linger while the JobSet deletes them)."""
    return [p for p in pods if int((_meta(p).get("labels") or {}).get(RESTART_ATTEMPT_LABEL, "0") or 0) == attempt]


def unaccounted(pods: Iterable[Obj]) -> list[Obj]:
    """The pods that never reported how they ended (their kubelet may be gone with their node)."""
    return [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def node_of(pod: Obj) -> str:
    """The node ``pod`` was scheduled to (``""`` before scheduling)."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def node_down(node: Obj | None) -> str | None:
    """Why ``node`` (``None``: it no longer exists) is lost, else ``None``."""
    if node is None:
        return "is gone"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return f"is Ready={condition.get('status')} ({condition.get('reason') or 'no reason'})"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") in NODE_LOSS_TAINTS:
            return f"is tainted {taint['key']}"
    return "is being deleted" if _meta(node).get("deletionTimestamp") else None


def root_cause(
    pods: Iterable[Obj], nodes: Mapping[str, Obj | None], attempt: int, failed: Iterable[str]
) -> dict[str, Any] | None:
    """The evidence record of the first unaccounted pod whose node is lost (a node missing from ``nodes`` could not
    be read: unknown, not lost), naming the pods whose failures followed; ``None``: no lost node."""
    for pod in unaccounted(pods):
        node = node_of(pod)
        why = node_down(nodes[node]) if node and node in nodes else None
        if why is None:
            continue
        others = ", ".join(sorted(failed)) or "the other pods"
        return {
            "attempt": attempt,
            "pod": _meta(pod).get("name", ""),
            "role": (_meta(pod).get("labels") or {}).get(REPLICATED_JOB_LABEL, ""),
            "node": node,
            "cause": "node_loss",
            "budget": "preemption",
            "rule": RULE,
            "evidence": [
                f"node {node} {why} while the pod never reported its end; the failures of {others} followed the "
                "loss of their peer (a cascade, not their own fault)"
            ],
            "step": None,
        }
    return None
