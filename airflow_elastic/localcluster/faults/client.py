"""The Python API of failure injection, mixed into :class:`~airflow_elastic.localcluster.LocalCluster`.

Every call asks the running server (its ``/debug`` endpoints) and returns at once; the injected sequence then
runs on the cluster's own timescale, so tests observe it through ordinary clients (watches, gets, events).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster.errors import ApiError


class FaultInjection:
    """Methods of :class:`LocalCluster` that disrupt nodes and pods and make the API misbehave."""

    url: str
    token: str
    state_dir: Path

    def _debug(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        context = ssl.create_default_context(cafile=str(self.state_dir / "server.crt"))
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            status = json.loads(err.read() or b"{}")
            failure = ApiError(status.get("message", str(err)), details=status.get("details"))
            failure.code, failure.reason = err.code, status.get("reason", "")
            raise failure from None

    # -------------------------------------------------------------------------------------------- disruptions

    def preempt_node(self, node: str, style: str = "gke", **options: Any) -> dict[str, Any]:
        """Reclaim ``node`` like a cloud would: ``style`` ``gke`` (options ``grace_seconds``, ``delete_after``,
        ``replace_after``), ``eks`` (``notice_seconds``, ``retry_seconds``, ``delete_after``, ``replace_after``),
        ``karpenter`` (``deadline_seconds``, ``retry_seconds``, ``replace_after``) or ``vanish``
        (``unreachable_after``, ``delete_after``, ``replace_after``).

        Returns the node, style and the pods on it; raises ``ApiError`` (404) for an unknown node."""
        return self._debug("POST", f"/debug/disruptions/nodes/{node}", {"style": style, **options})

    def add_node(self, pool: str) -> str:
        """Register a new node in ``pool`` (as an autoscaler would); returns its name."""
        return self._debug("POST", f"/debug/disruptions/pools/{pool}", {})["node"]

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Evict through the Eviction API (``pods/{name}/eviction``); ``ApiError`` 429 when a PDB forbids it."""
        options = {} if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self._debug("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", {**body, "deleteOptions": options})

    def preempt_pod(self, namespace: str, name: str, preemptor: str | None = None) -> dict[str, Any]:
        """Scheduler preemption of a pod (``preemptor``: ``namespace/name`` of the higher-priority pod, optional)."""
        return self._debug("POST", f"/debug/disruptions/pods/{namespace}/{name}", {"preemptor": preemptor})

    def pressure_evict(self, namespace: str, name: str, **options: Any) -> dict[str, Any]:
        """Kubelet node-pressure eviction (options ``resource``, ``grace_seconds``, ``pressure_seconds``)."""
        return self._debug("POST", f"/debug/disruptions/pods/{namespace}/{name}", {"action": "pressure", **options})

    def revoke_best_effort(self, namespace: str, name: str) -> dict[str, Any]:
        """Revoke an ACS BestEffort pod (labelled ``alibabacloud.com/compute-qos: best-effort``)."""
        return self._debug("POST", f"/debug/disruptions/pods/{namespace}/{name}", {"action": "best-effort"})

    def koordlet_evict(
        self, namespace: str, name: str, feature: str = "BEMemoryEvict", by_api: bool = False
    ) -> dict[str, Any]:
        """Koordinator's koordlet takes the pod back for ``feature`` (``BEMemoryEvict``, ``BECPUEvict``...): its
        containers SIGKILLed in place (koordlet's default), or with ``by_api`` through the Eviction API with an
        ``evictPodSuccess`` event."""
        body = {"action": "koordlet", "feature": feature, "by_api": by_api}
        return self._debug("POST", f"/debug/disruptions/pods/{namespace}/{name}", body)

    def suspend_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """Kueue-style preemption: ``spec.suspend=true`` on the JobSet."""
        return self._debug("POST", f"/debug/disruptions/jobsets/{namespace}/{name}", {"action": "suspend"})

    def start_preemptions(self, mean_seconds: dict[str, float], **options: Any) -> dict[str, Any]:
        """Start a seeded random schedule: ``mean_seconds`` maps pool → mean time between preemptions (options
        ``seed``, ``style``, ``replace_after``, ``options`` for the style)."""
        return self._debug("POST", "/debug/disruptions/schedule", {"mean_seconds": mean_seconds, **options})

    def stop_preemptions(self) -> dict[str, Any]:
        """Stop the random schedule; returns what it did (``history``)."""
        return self._debug("DELETE", "/debug/disruptions/schedule")

    # -------------------------------------------------------------------------------------------- API faults

    def inject_api_fault(self, kind: str = "error", **rule: Any) -> dict[str, Any]:
        """Add an API fault rule (``kind`` ``error``/``latency``/``gone``; ``code``, ``verb``, ``resource``,
        ``namespace``, ``count``, ``seconds``, ``retry_after``, ``latency``); returns it with its ``id``."""
        return self._debug("POST", "/debug/faults", {"kind": kind, **rule})

    def drop_watches(self, resource: str | None = None, namespace: str | None = None) -> int:
        """Break open watch connections; returns how many."""
        return self._debug("POST", "/debug/faults/drop-watches", {"resource": resource, "namespace": namespace})[
            "dropped"
        ]

    def expire_token(self) -> str:
        """Replace the cluster's bearer token (the old one now gets 401); the kubeconfig holds the new one."""
        self._debug("POST", "/debug/faults/expire-token", {})
        self.token = (self.state_dir / "token").read_text().strip()
        return self.token

    def configure_node_lifecycle(
        self, *, podgc_quarantine_seconds: float | None = None, default_toleration_seconds: float | None = None
    ) -> dict[str, float]:
        """Control-plane timings: PodGC's quarantine of pods on vanished nodes (40 s upstream) and the
        not-ready/unreachable toleration pods get when they declare none (300 s, DefaultTolerationSeconds)."""
        body = {
            "podgc_quarantine_seconds": podgc_quarantine_seconds,
            "default_toleration_seconds": default_toleration_seconds,
        }
        return self._debug("POST", "/debug/faults/node-lifecycle", {k: v for k, v in body.items() if v is not None})

    def clear_faults(self) -> None:
        """Remove every API fault rule and stop the random preemption schedule."""
        self._debug("DELETE", "/debug/faults")
        self._debug("DELETE", "/debug/disruptions/schedule")
