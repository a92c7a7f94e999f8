"""Pod status as the kubelet reports it: container statuses, phase (kubelet ``getPhase``) and conditions."""

from __future__ import annotations

import contextlib
import copy
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster.quantity import qos_class
from airflow_elastic.localcluster.store import Obj, now

#: Conditions this kubelet owns; others (PodScheduled, DisruptionTarget, readiness gates) are kept as found.
OWNED = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
TERMINAL = ("Succeeded", "Failed")
MAX_MESSAGE = 4096
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048


def image_id(image: str) -> str:
    """A stable fake digest: images are recorded, never pulled."""
    repo = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


@dataclass
class ContainerRecord:
    """What the kubelet knows about one container of the pod."""

    name: str
    image: str
    init: bool = False
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    container_id: str = ""

    def terminated(self) -> dict[str, Any] | None:
        return self.state.get("terminated")

    def succeeded(self) -> bool:
        term = self.terminated()
        return term is not None and term.get("exitCode") == 0

    def to_status(self) -> Obj:
        status: Obj = {
            "name": self.name,
            "state": copy.deepcopy(self.state),
            "lastState": copy.deepcopy(self.last_state),
            "ready": self.ready,
            "restartCount": self.restart_count,
            "image": self.image,
            "imageID": image_id(self.image) if self.container_id else "",
            "started": self.started,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


def phase(records: list[ContainerRecord], restart_policy: str, previous: str | None) -> str:
    """The kubelet's phase rules; a terminal phase never changes."""
    if previous in TERMINAL:
        return previous
    init = [r for r in records if r.init]
    main = [r for r in records if not r.init]
    if not all(r.succeeded() for r in init):
        failed_init = any(r.terminated() and not r.succeeded() for r in init)
        return "Failed" if failed_init and restart_policy == "Never" else "Pending"
    waiting = running = stopped = succeeded = 0
    for r in main:
        if "running" in r.state:
            running += 1
        elif "terminated" in r.state:
            stopped += 1
            succeeded += r.succeeded()
        elif r.last_state.get("terminated"):
            stopped += 1  # waiting to restart after a crash
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Running" if restart_policy == "OnFailure" else "Failed"


def _condition(kind: str, ok: bool, reason: str | None, message: str | None, old: dict[str, Obj]) -> Obj:
    status = "True" if ok else "False"
    previous = old.get(kind)
    cond: Obj = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": previous["lastTransitionTime"]
        if previous and previous.get("status") == status and previous.get("lastTransitionTime")
        else now(),
    }
    if reason and not ok:
        cond["reason"] = reason
    if message and not ok:
        cond["message"] = message
    return cond


def build_status(
    pod: Obj,
    records: list[ContainerRecord],
    *,
    sandbox_ready: bool,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    terminal: str | None = None,
    reason: str | None = None,
    message: str | None = None,
) -> Obj:
    """The pod's next status; ``terminal`` forces the phase (a pod stopped by the kubelet)."""
    current = copy.deepcopy(pod.get("status") or {})
    old = {c["type"]: c for c in current.get("conditions") or []}
    policy = pod["spec"].get("restartPolicy", "Always")
    previous = current.get("phase")
    new_phase = previous if previous in TERMINAL else terminal or phase(records, policy, previous)
    init = [r for r in records if r.init]
    main = [r for r in records if not r.init]
    pending_init = [r.name for r in init if not r.succeeded()]
    unready = [r.name for r in main if not r.ready]
    done = new_phase in TERMINAL
    conditions = [
        _condition("PodReadyToStartContainers", sandbox_ready and not done, None, None, old),
        _condition(
            "Initialized",
            not pending_init,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]",
            old,
        ),
        _condition(
            "Ready",
            not unready and not done,
            "PodCompleted" if done else "ContainersNotReady",
            None if done else f"containers with unready status: [{' '.join(unready)}]",
            old,
        ),
        _condition(
            "ContainersReady",
            not unready and not done,
            "PodCompleted" if done else "ContainersNotReady",
            None if done else f"containers with unready status: [{' '.join(unready)}]",
            old,
        ),
    ]
    conditions += [c for c in current.get("conditions") or [] if c["type"] not in OWNED]
    current.update(
        {
            "phase": new_phase,
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": start_time,
            "qosClass": qos_class(pod),
            "containerStatuses": [r.to_status() for r in main],
        }
    )
    if init:
        current["initContainerStatuses"] = [r.to_status() for r in init]
    if reason:
        current["reason"] = reason
    if message:
        current["message"] = message
    return current


def go_duration(seconds: float) -> str:
    """``10s``, ``2m40s``, ``5m0s``, ``50ms``: how Go prints the back-off in messages."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def termination_message(path: Path, log: Path, policy: str, code: int) -> str:
    """The file the container wrote, or with ``FallbackToLogsOnError`` the tail of its log after a failure."""
    with contextlib.suppress(OSError):
        text = path.read_bytes()[:MAX_MESSAGE].decode("utf-8", "replace")
        if text:
            return text
    if policy != "FallbackToLogsOnError" or code == 0:
        return ""
    with contextlib.suppress(OSError):
        tail = b"".join(log.read_bytes().splitlines(keepends=True)[-FALLBACK_LINES:])[-FALLBACK_BYTES:]
        return tail.decode("utf-8", "replace")
    return ""
