"""The resource metrics API, ``metrics.k8s.io/v1beta1``, as metrics-server serves it: read-only, computed, not stored.

Shapes follow kubernetes-sigs/metrics-server ``pkg/api/pod.go`` and ``node.go`` (``getPodMetrics``: only Running pods
with samples; metadata name, namespace, labels and a ``creationTimestamp`` of now; ``timestamp`` and ``window`` of the
samples; a get of a pod without samples is NotFound on ``pods.metrics.k8s.io``) and ``pkg/storage`` (CPU as
``resource.NewScaledQuantity(nanocores, -9)``, memory as a binary-SI quantity of the working set). Node usage is the
sum of the node's pods: every node of the local cluster is this one host, so there is no node-level reading of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.api.handlers import respond
from airflow_elastic.localcluster.clock import format_time
from airflow_elastic.localcluster.kubelet.stats import PodUsage, Scraper
from airflow_elastic.localcluster.quantity import decimal_quantity
from airflow_elastic.localcluster.resources import NODEMETRICS, NODES, PODMETRICS, PODS
from airflow_elastic.localcluster.selectors import parse_label_selector
from airflow_elastic.localcluster.store import Obj, Store

_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def cpu_quantity(nanocores: int) -> str:
    """``NewScaledQuantity(n, -9).String()``, as metrics-server writes CPU usage."""
    return decimal_quantity(nanocores, "n")


def memory_quantity(size: int) -> str:
    """A ``BinarySI`` quantity's canonical string (``12288Ki``, ``3Mi``, ``1000``)."""
    index = 0
    while size and index < len(_BINARY) - 1 and size % 1024 == 0:
        size //= 1024
        index += 1
    return f"{size}{_BINARY[index]}"


def go_duration(seconds: float) -> str:
    """``time.Duration.String()`` for the window (``15.002s``, ``1m0s``)."""
    minutes, rest = divmod(round(seconds, 9), 60)
    text = f"{rest:.9f}".rstrip("0").rstrip(".") + "s"
    if minutes >= 60:
        hours, minutes = divmod(int(minutes), 60)
        return f"{hours}h{minutes}m{text}"
    return f"{int(minutes)}m{text}" if minutes else text


def _stamp(moment: datetime) -> str:
    return format_time(moment)


def pod_metrics(pod: Obj, measured: PodUsage) -> Obj:
    meta = pod["metadata"]
    return {
        "kind": "PodMetrics",
        "apiVersion": PODMETRICS.api_version,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "creationTimestamp": _stamp(datetime.now(UTC)),
            "labels": dict(meta.get("labels") or {}),
        },
        "timestamp": _stamp(measured.timestamp),
        "window": go_duration(measured.window_seconds),
        "containers": [
            {"name": c.name, "usage": {"cpu": cpu_quantity(c.nanocores), "memory": memory_quantity(c.memory_bytes)}}
            for c in measured.containers
        ],
    }


class MetricsApi:
    """Serves ``/apis/metrics.k8s.io/v1beta1/...`` from the kubelet's scrapes."""

    def __init__(self, store: Store, scraper: Scraper):
        self.store, self.scraper = store, scraper

    def pod_usages(self, namespace: str | None, selector: str | None = None) -> list[tuple[Obj, PodUsage]]:
        """Running pods with samples (``getPodMetrics``), ordered by namespace and name."""
        matches = parse_label_selector(selector)
        found = []
        pods = sorted(
            self.store.items(PODS, namespace), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
        )
        for pod in pods:
            if (pod.get("status") or {}).get("phase") != "Running" or not matches(pod["metadata"].get("labels") or {}):
                continue
            if (measured := self.scraper.pod(pod["metadata"]["uid"])) is not None:
                found.append((pod, measured))
        return found

    def _node_metrics(self, node: Obj) -> Obj | None:
        name = node["metadata"]["name"]
        usages = [u for p, u in self.pod_usages(None) if (p.get("spec") or {}).get("nodeName") == name]
        now = datetime.now(UTC)
        cpu = sum(c.nanocores for u in usages for c in u.containers)
        memory = sum(c.memory_bytes for u in usages for c in u.containers)
        return {
            "kind": "NodeMetrics",
            "apiVersion": NODEMETRICS.api_version,
            "metadata": {
                "name": name,
                "creationTimestamp": _stamp(now),
                "labels": dict(node["metadata"].get("labels") or {}),
            },
            "timestamp": _stamp(max((u.timestamp for u in usages), default=now)),
            "window": go_duration(max((u.window_seconds for u in usages), default=self.scraper.resolution)),
            "usage": {"cpu": cpu_quantity(cpu), "memory": memory_quantity(memory)},
        }

    def serve(self, request: web.Request, plural: str, namespace: str | None, name: str | None) -> web.Response:
        if request.method != "GET" or request.query.get("watch") in ("1", "true", "True"):
            raise errors.MethodNotAllowed(f"the server does not allow this method on the requested resource ({plural})")
        selector = request.query.get("labelSelector")
        res = PODMETRICS if plural == "pods" else NODEMETRICS
        if plural == "pods":
            items = [pod_metrics(pod, u) for pod, u in self.pod_usages(namespace, selector)]
        else:
            matches = parse_label_selector(selector)
            nodes = [n for n in self.store.items(NODES) if matches(n["metadata"].get("labels") or {})]
            items = [m for n in sorted(nodes, key=lambda n: n["metadata"]["name"]) if (m := self._node_metrics(n))]
        if name is not None:
            found = [i for i in items if i["metadata"]["name"] == name]
            if not found:  # metrics-server names a pod "namespace/name" here
                shown = f"{namespace}/{name}" if namespace else name
                raise errors.NotFound(
                    f'{res.plural}.{res.group} "{shown}" not found',
                    details={"name": shown, "group": res.group, "kind": res.plural},
                )
            return respond(found[0])
        for item in items:  # list items of a built-in-like API carry no apiVersion/kind
            item.pop("kind")
            item.pop("apiVersion")
        return respond({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": {}, "items": items})


def parse(path: str) -> tuple[str, str | None, str | None] | None:
    """``(plural, namespace, name)`` of a metrics path, or None for any other path."""
    parts = [p for p in path.split("/") if p]
    if parts[:3] != ["apis", PODMETRICS.group, PODMETRICS.version] or len(parts) < 4:
        return None
    rest, namespace = parts[3:], None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] == "pods":
        namespace, rest = rest[1], rest[2:]
    if rest[0] not in ("pods", "nodes") or len(rest) > 2:
        return None
    return rest[0], namespace, rest[1] if len(rest) == 2 else None
