"""A pod's row in ``kubectl get pods``: ``printPod`` of kubernetes ``pkg/printers/internalversion/printers.go``.

STATUS is the pod's reason or phase, overridden by init containers while initializing and then by the main
containers' waiting/terminated reasons (``ContainerCreating``, ``ImagePullBackOff``, ``CrashLoopBackOff``,
``Completed``, ``Error``, ...), and ``Terminating`` while a live pod is being deleted.
"""

from __future__ import annotations

from typing import Any

from airflow_elastic.localcluster.api.humanize import NONE, age, condition_true, since
from airflow_elastic.localcluster.store import Obj


def _restartable(container: Obj | None) -> bool:
    return (container or {}).get("restartPolicy") == "Always"  # a sidecar: an init container that keeps running


def _init_reason(statuses: list[Obj], init_specs: dict[str, Obj], total: int) -> tuple[str | None, int]:
    """The init-container part of ``printPod``: the reason while initializing (None once done), ready sidecars."""
    ready = 0
    for i, status in enumerate(statuses):
        state = status.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if _restartable(init_specs.get(status.get("name", ""))) and status.get("started"):
            ready += 1 if status.get("ready") else 0
            continue
        if terminated:
            if terminated.get("reason"):
                return "Init:" + terminated["reason"], ready
            if terminated.get("signal"):
                return f"Init:Signal:{terminated['signal']}", ready
            return f"Init:ExitCode:{terminated.get('exitCode', 0)}", ready
        if waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return "Init:" + waiting["reason"], ready
        return f"Init:{i}/{total}", ready
    return None, ready


def _last_restart(statuses: list[Obj]) -> str:
    finished = [
        s["lastState"]["terminated"].get("finishedAt", "")
        for s in statuses
        if (s.get("lastState") or {}).get("terminated")
    ]
    return max(finished, default="")


def pod_cells(pod: Obj) -> list[Any]:
    """``printPod``: NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED-NODE READINESS-GATES."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    init_specs = {c["name"]: c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in init_specs.values() if _restartable(c))
    phase = status.get("phase", "")
    reason = status.get("reason") or phase
    conditions = status.get("conditions") or []
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    init_statuses = status.get("initContainerStatuses") or []
    init_reason, ready = _init_reason(init_statuses, init_specs, len(init_specs))
    sidecars = [s for s in init_statuses if _restartable(init_specs.get(s.get("name", "")))]
    restarts = sum(s.get("restartCount", 0) for s in init_statuses)
    last = _last_restart(init_statuses)
    if init_reason is not None:
        reason = init_reason
    if init_reason is None or condition_true(conditions, "Initialized"):
        main = status.get("containerStatuses") or []
        restarts = sum(s.get("restartCount", 0) for s in sidecars + main)
        last = _last_restart(sidecars + main)
        running = False
        for container in reversed(main):
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                signal = terminated.get("signal")
                reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
            elif container.get("ready") and "running" in state:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if condition_true(conditions, "Ready") else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    shown = f"{restarts} ({since(last)} ago)" if restarts and last else str(restarts)
    ips = status.get("podIPs") or ([{"ip": status["podIP"]}] if status.get("podIP") else [])
    gates = spec.get("readinessGates") or []
    gated = NONE
    if gates:
        by_type = {c.get("type"): c.get("status") for c in conditions}
        gated = f"{sum(1 for g in gates if by_type.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    return [
        meta["name"],
        f"{ready}/{total}",
        reason,
        shown,
        age(pod),
        (ips[0].get("ip") if ips else "") or NONE,
        spec.get("nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        gated,
    ]


def pod_row_conditions(pod: Obj) -> list[Obj] | None:
    """``podSuccessConditions`` / ``podFailedConditions`` of a finished pod's row."""
    phase = (pod.get("status") or {}).get("phase")
    message = {"Succeeded": "The pod has completed successfully.", "Failed": "The pod failed."}.get(phase or "")
    return [{"type": "Completed", "status": "True", "reason": phase, "message": message}] if message else None
