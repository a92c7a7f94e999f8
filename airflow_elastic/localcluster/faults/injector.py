"""Wiring of failure injection into the API server: controllers, and the token-protected debug endpoints.

Endpoints (JSON bodies; all answer JSON, errors as ``metav1.Status``):

* ``POST /debug/disruptions/nodes/{node}`` ``{"style": "gke|eks|karpenter|vanish", ...options}``
* ``POST /debug/disruptions/pools/{pool}`` — register a new node in the pool
* ``POST /debug/disruptions/pods/{namespace}/{name}`` ``{"action": "preempt|pressure|best-effort|koordlet", ...}``
* ``POST /debug/disruptions/jobsets/{namespace}/{name}`` ``{"action": "suspend"}``
* ``GET|POST|DELETE /debug/disruptions/schedule`` — the random preemption schedule
* ``GET|POST|DELETE /debug/faults`` — API fault rules; ``POST /debug/faults/drop-watches``,
  ``POST /debug/faults/expire-token``, ``POST /debug/faults/node-lifecycle`` (PodGC quarantine, default
  not-ready/unreachable toleration)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.controller import Manager
from airflow_elastic.localcluster.credentials import expire_token
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.faults.api_faults import ApiFaults
from airflow_elastic.localcluster.faults.disruptions import Disruptions
from airflow_elastic.localcluster.faults.nodelifecycle import PodGC, TaintManager
from airflow_elastic.localcluster.faults.schedule import PreemptionSchedule
from airflow_elastic.localcluster.kubelet import Kubelet
from airflow_elastic.localcluster.store import Store

PREFIXES = ("/debug/disruptions", "/debug/faults")


class Faults:
    """Failure injection of one API server (create it before the server's controllers start).

    ``state_dir`` holds the server's credentials; ``on_token`` is called with the new token when it expires.
    """

    def __init__(
        self, store: Store, manager: Manager, recorder: Recorder, state_dir: Path, on_token: Callable[[str], None]
    ):
        self.state_dir, self.on_token = state_dir, on_token
        self.taint_manager = TaintManager(store, recorder)
        self.podgc = PodGC(store)
        for controller in (self.taint_manager, self.podgc):
            manager.add(controller)
        self.podgc.resync()
        kubelet = next(c for c in manager.controllers if isinstance(c, Kubelet))
        self.api = ApiFaults()
        self.disruptions = Disruptions(store, recorder, kubelet.config, kubelet, self.taint_manager)
        self.schedule = PreemptionSchedule(self.disruptions)
        manager.shutdown_hooks.append(self.stop)

    async def stop(self) -> None:
        self.schedule.stop()
        await self.disruptions.cancel()

    async def handle(self, request: web.Request, path: str) -> Any:
        """Serve a ``/debug/disruptions/...`` or ``/debug/faults/...`` request: the JSON body of the answer."""
        parts = [p for p in path.split("/") if p][1:]
        body: dict[str, Any] = {}
        if request.method == "POST" and request.can_read_body:
            body = await request.json()
            if not isinstance(body, dict):
                raise errors.BadRequest("the body must be a JSON object")
        try:
            if parts[0] == "faults":
                return self._faults(request.method, parts[1:], body)
            return self._disruptions(request.method, parts[1:], body)
        except TypeError as err:  # an option the injection does not take
            raise errors.BadRequest(f"invalid options: {err}") from err

    def _faults(self, method: str, rest: list[str], body: dict[str, Any]) -> Any:
        if rest == ["drop-watches"] and method == "POST":
            return {"dropped": self.api.drop_watches(body.get("resource"), body.get("namespace"))}
        if rest == ["node-lifecycle"] and method == "POST":
            quarantine = body.get("podgc_quarantine_seconds", self.podgc.quarantine_seconds)
            toleration = body.get("default_toleration_seconds", self.taint_manager.default_toleration_seconds)
            self.podgc.quarantine_seconds, self.taint_manager.default_toleration_seconds = quarantine, toleration
            return {"podgc_quarantine_seconds": quarantine, "default_toleration_seconds": toleration}
        if rest == ["expire-token"] and method == "POST":
            self.on_token(expire_token(self.state_dir))
            return {"expired": True}
        if rest:
            raise errors.NotFound(f"no fault endpoint {'/'.join(rest)}")
        if method == "POST":
            return self.api.add(body).public()
        if method == "DELETE":
            self.api.clear()
        return {"items": [r.public() for r in self.api.rules]}

    def _disruptions(self, method: str, rest: list[str], body: dict[str, Any]) -> Any:
        target = rest[0] if rest else ""
        if target == "schedule":
            if method == "POST":
                return self.schedule.start(**body)
            return self.schedule.stop() if method == "DELETE" else self.schedule.describe()
        if method != "POST":
            raise errors.MethodNotAllowed(f"{method} is not supported on /debug/disruptions/{target}")
        if target == "nodes" and len(rest) == 2:
            return self.disruptions.preempt_node(rest[1], body.pop("style", "gke"), **body)
        if target == "pools" and len(rest) == 2:
            return {"node": self.disruptions.add_node(rest[1])}
        if target in ("pods", "jobsets") and len(rest) == 3:
            action = body.pop("action", "preempt" if target == "pods" else "suspend")
            handlers: dict[tuple[str, str], Callable[..., Any]] = {
                ("pods", "preempt"): self.disruptions.preempt_pod,
                ("pods", "pressure"): self.disruptions.pressure_evict,
                ("pods", "best-effort"): self.disruptions.revoke_best_effort,
                ("pods", "koordlet"): self.disruptions.koordlet_evict,
                ("jobsets", "suspend"): self.disruptions.suspend_jobset,
            }
            if (target, action) not in handlers:
                raise errors.BadRequest(f"unknown action {action!r} for {target}")
            return handlers[(target, action)](rest[1], rest[2], **body)
        raise errors.NotFound(f"no disruption endpoint {'/'.join(rest)}")
