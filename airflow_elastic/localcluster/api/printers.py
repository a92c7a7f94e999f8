"""Server-side ``Table`` columns, as the API server's printers compute them.

Ported rule by rule from kubernetes ``pkg/printers/internalversion/printers.go`` (``printPod``, ``printNode``,
``printJob``, ``printEvent``, ``printService``, ...) and ``apimachinery/pkg/util/duration.HumanDuration``. The
server always prints the wide columns (``GenerateOptions{Wide: true}``); kubectl hides those of priority 1 unless
``-o wide``. Resources without a printer get upstream's default columns (Name, Age). JobSet follows its CRD's
``additionalPrinterColumns``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_elastic.localcluster.api.humanize import NONE, age, human_duration, parse_time, since
from airflow_elastic.localcluster.api.podprinter import pod_cells, pod_row_conditions
from airflow_elastic.localcluster.resources import (
    CONFIGMAPS,
    CRONJOBS,
    CUSTOMRESOURCEDEFINITIONS,
    DEPLOYMENTS,
    ENDPOINTS,
    ENDPOINTSLICES,
    EVENTS,
    HORIZONTALPODAUTOSCALERS,
    INFERENCESERVICES,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODS,
    PYTORCHJOBS,
    RAYCLUSTERS,
    RAYJOBS,
    REPLICASETS,
    SECRETS,
    SERVICES,
    TRAINJOBS,
    Resource,
)
from airflow_elastic.localcluster.store import Obj


@dataclass(frozen=True)
class Column:
    """A ``TableColumnDefinition``."""

    name: str
    type: str = "string"
    priority: int = 0

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": "name" if self.name == "Name" else "",
            "description": "",
            "priority": self.priority,
        }


def node_cells(node: Obj) -> list[Any]:
    """``printNode``: NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION RUNTIME."""
    meta, status = node["metadata"], node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    states = [] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    states = states or ["Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.removeprefix("node-role.kubernetes.io/"):
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a["address"] for a in status.get("addresses") or [] if a.get("type") == kind), NONE)

    return [
        meta["name"],
        ",".join(states),
        ",".join(sorted(roles)) or NONE,
        age(node),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _containers(template: Obj) -> list[str]:
    """``layoutContainerCells``: container names and images, comma-separated."""
    containers = (template.get("spec") or {}).get("containers") or []
    return [",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)]


def _selector(selector: Obj | None) -> str:
    """``metav1.FormatLabelSelector``."""
    if not selector:
        return NONE
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        op, values = req.get("operator"), ",".join(req.get("values") or [])
        key = req.get("key", "")
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key}.get(op, f"!{key}")
        )
    return ",".join(parts) or NONE


def job_cells(job: Obj) -> list[Any]:
    """``printJob``: NAME STATUS COMPLETIONS DURATION AGE | CONTAINERS IMAGES SELECTOR."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    duration = ""
    if status.get("startTime"):
        end = parse_time(status["completionTime"]) if status.get("completionTime") else datetime.now(UTC)
        duration = human_duration((end - parse_time(status["startTime"])).total_seconds())
    conditions = status.get("conditions") or []
    # hasJobCondition looks at the first condition of a type only
    first = {c.get("type"): c.get("status") == "True" for c in reversed(conditions)}
    if first.get("Complete"):
        state = "Complete"
    elif first.get("Failed"):
        state = "Failed"
    elif job["metadata"].get("deletionTimestamp"):
        state = "Terminating"
    elif first.get("Suspended"):
        state = "Suspended"
    elif first.get("FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    template = spec.get("template") or {}
    return [
        job["metadata"]["name"],
        state,
        completions,
        duration,
        age(job),
        *_containers(template),
        _selector(spec.get("selector")),
    ]


def cronjob_cells(cj: Obj) -> list[Any]:
    """``printCronJob``: NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE | CONTAINERS IMAGES SELECTOR."""
    spec, status = cj.get("spec") or {}, cj.get("status") or {}
    suspend = spec.get("suspend")
    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return [
        cj["metadata"]["name"],
        spec.get("schedule", ""),
        NONE if spec.get("timeZone") is None else spec["timeZone"],
        "<unset>" if suspend is None else str(bool(suspend)),  # printBoolPtr
        len(status.get("active") or []),
        since(status["lastScheduleTime"]) if status.get("lastScheduleTime") else NONE,
        age(cj),
        *_containers(job_spec.get("template") or {}),
        _selector(job_spec.get("selector")),
    ]


def event_cells(event: Obj) -> list[Any]:
    """``printEvent``: LAST SEEN TYPE REASON OBJECT | SUBOBJECT SOURCE | MESSAGE | FIRST SEEN COUNT NAME."""
    first = since(event.get("firstTimestamp")) if event.get("firstTimestamp") else since(event.get("eventTime"))
    last = since(event.get("lastTimestamp")) if event.get("lastTimestamp") else first
    count = event.get("count") or 1
    if event.get("series"):
        last, count = since(event["series"].get("lastObservedTime")), event["series"].get("count", count)
    involved = event.get("involvedObject") or {}
    kind = (involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        (event.get("message") or "").strip(),
        first,
        count,
        event["metadata"]["name"],
    ]


def service_cells(service: Obj) -> list[Any]:
    """``printService``: NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE | SELECTOR."""
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"  # what the API server defaults
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    external = ",".join(spec.get("externalIPs") or [])
    if kind == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        balancers = sorted({i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")})
        shown = ",".join(balancers)
        external = ",".join(filter(None, [shown, external])) or "<pending>"
    elif kind == "ExternalName":
        external = spec.get("externalName", "")
    elif kind not in ("ClusterIP", "NodePort"):
        external = "<unknown>"
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol", "TCP")
        node_port = port.get("nodePort")
        ports.append(f"{port['port']}:{node_port}/{protocol}" if node_port else f"{port['port']}/{protocol}")
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        service["metadata"]["name"],
        kind,
        cluster_ips[0] if cluster_ips else NONE,
        external or NONE,
        ",".join(ports) or NONE,
        age(service),
        selector or NONE,
    ]


def _more(shown: list[str], count: int, empty: str) -> str:
    """``listWithMoreString``: at most 3 entries, then `` + N more...``."""
    text = ",".join(shown[:3])
    return f"{text} + {count - 3} more..." if count > 3 else text or empty


def endpoints_cells(ep: Obj) -> list[Any]:
    """``printEndpoints``/``formatEndpoints``: NAME ENDPOINTS AGE, the ready ``IP:port`` of every subset port (the
    IP alone without ports)."""
    subsets = ep.get("subsets") or []
    shown = [
        f"{_host(address['ip'])}:{port['port']}" if port else address["ip"]
        for subset in subsets
        for port in subset.get("ports") or [None]
        for address in subset.get("addresses") or []
    ]
    return [ep["metadata"]["name"], _more(shown, len(shown), "") if subsets else NONE, age(ep)]


def _host(ip: str) -> str:
    """``net.JoinHostPort``'s host: an IPv6 address in brackets."""
    return f"[{ip}]" if ":" in ip else ip


def endpointslice_cells(eps: Obj) -> list[Any]:
    """``printEndpointSlice``: NAME ADDRESSTYPE PORTS ENDPOINTS AGE (``formatDiscoveryPorts``/``Endpoints``)."""
    ports = [str(p["port"]) if p.get("port") is not None else p.get("name") or "*" for p in eps.get("ports") or []]
    addresses = [a for endpoint in eps.get("endpoints") or [] for a in endpoint.get("addresses") or []]
    return [
        eps["metadata"]["name"],
        eps.get("addressType", ""),
        _more(ports, len(ports), "<unset>"),
        _more(addresses, len(addresses), "<unset>"),
        age(eps),
    ]


def deployment_cells(d: Obj) -> list[Any]:
    """``printDeployment``: NAME READY UP-TO-DATE AVAILABLE AGE | CONTAINERS IMAGES SELECTOR."""
    spec, status = d.get("spec") or {}, d.get("status") or {}
    return [
        d["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        age(d),
        *_containers(spec.get("template") or {}),
        _selector(spec.get("selector")),
    ]


def replicaset_cells(rs: Obj) -> list[Any]:
    """``printReplicaSet``: NAME DESIRED CURRENT READY AGE | CONTAINERS IMAGES SELECTOR."""
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    return [
        rs["metadata"]["name"],
        spec.get("replicas", 0),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        age(rs),
        *_containers(spec.get("template") or {}),
        _selector(spec.get("selector")),
    ]


def _hpa_metric(spec: Obj, current: Obj | None) -> str:
    """One metric of ``formatHPAMetrics``: ``<name>: <current>/<target>`` (``<unknown>`` before a reading)."""
    kind = spec.get("type", "")
    source = spec.get(kind[:1].lower() + kind[1:]) or {}
    now = (current or {}).get(kind[:1].lower() + kind[1:]) or {}
    target, reading = source.get("target") or {}, now.get("current") or {}
    if target.get("type") == "Utilization":
        shown = f"{reading['averageUtilization']}%" if "averageUtilization" in reading else "<unknown>"
        wanted = f"{target.get('averageUtilization')}%"
    else:
        field = "value" if target.get("type") == "Value" else "averageValue"
        shown, wanted = str(reading.get(field, "<unknown>")), str(target.get(field, ""))
    name = source.get("name") or (source.get("metric") or {}).get("name", "")
    if kind == "ContainerResource":
        name = f"{name} of container {source.get('container', '')}"
    return f"{name}: {shown}/{wanted}"


def hpa_cells(hpa: Obj) -> list[Any]:
    """``printHorizontalPodAutoscaler``: NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE (one metric shown,
    then ``+ N more...``)."""
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    metrics, readings = spec.get("metrics") or [], status.get("currentMetrics") or []
    shown = [_hpa_metric(m, readings[i] if i < len(readings) else None) for i, m in enumerate(metrics)]
    targets = shown[0] + (f" + {len(shown) - 1} more..." if len(shown) > 1 else "") if shown else NONE
    low = spec.get("minReplicas")
    return [
        hpa["metadata"]["name"],
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        targets,
        "<unset>" if low is None else low,
        spec.get("maxReplicas", 0),
        status.get("currentReplicas", 0),
        age(hpa),
    ]


def _printed(value: Any) -> str | None:
    """A CRD printer column of type string: the JSONPath result printed, or null when the path finds nothing."""
    if value is None:
        return None
    return json.dumps(value) if isinstance(value, bool) else str(value)


def jobset_cells(obj: Obj) -> list[Any]:
    """The JobSet CRD's ``additionalPrinterColumns`` (all of type string; Age follows)."""
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    completed = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Completed"), None)
    return [
        obj["metadata"]["name"],
        _printed(status.get("terminalState")),
        _printed(status.get("restarts")),
        _printed(completed),
        _printed(spec.get("suspend")),
        age(obj),
    ]


def trainjob_cells(obj: Obj) -> list[Any]:
    """The TrainJob CRD's ``additionalPrinterColumns``: State (``.status.conditions[-1:].type``) and Age."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [obj["metadata"]["name"], _printed(conditions[-1].get("type")) if conditions else None, age(obj)]


def raycluster_cells(obj: Obj) -> list[Any]:
    """The RayCluster CRD's ``additionalPrinterColumns`` (KubeRay v1.7.0 ``ray.io_rayclusters.yaml``)."""
    status = obj.get("status") or {}
    head = status.get("head") or {}
    return [
        obj["metadata"]["name"],
        status.get("desiredWorkerReplicas"),
        status.get("availableWorkerReplicas"),
        _printed(status.get("desiredCPU")),
        _printed(status.get("desiredMemory")),
        _printed(status.get("desiredGPU")),
        _printed(status.get("desiredTPU")),
        _printed(status.get("state")),
        age(obj),
        _printed(head.get("podIP")),
        _printed(head.get("serviceIP")),
    ]


def rayjob_cells(obj: Obj) -> list[Any]:
    """The RayJob CRD's ``additionalPrinterColumns`` (KubeRay v1.7.0 ``ray.io_rayjobs.yaml``)."""
    status = obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        *(_printed(status.get(k)) for k in ("jobStatus", "jobDeploymentStatus", "rayClusterName")),
        *(_printed(status.get(k)) for k in ("startTime", "endTime")),
        age(obj),
    ]


def isvc_cells(obj: Obj) -> list[Any]:
    """The InferenceService CRD's ``additionalPrinterColumns`` (KServe v0.20): URL, Ready, then the predictor's
    Knative traffic (Prev/Latest percent and revision; empty in Standard mode), Age."""
    status = obj.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    traffic = ((status.get("components") or {}).get("predictor") or {}).get("traffic") or []
    prev: Obj = next((t for t in traffic if t.get("tag") == "prev"), {})
    latest: Obj = next((t for t in traffic if t.get("latestRevision") is True), {})
    return [
        obj["metadata"]["name"],
        _printed(status.get("url")),
        _printed(ready),
        prev.get("percent"),
        latest.get("percent"),
        _printed(prev.get("revisionName")),
        _printed(latest.get("revisionName")),
        age(obj),
    ]


def _columns(names: str) -> tuple[Column, ...]:
    """Columns from ``"Name, Age, +IP"``: ``+`` marks a wide column (priority 1), ``Data:integer`` a type."""
    columns = []
    for name in names.split(", "):
        name, _, kind = name.partition(":")
        columns.append(Column(name.removeprefix("+"), kind or "string", 1 if name.startswith("+") else 0))
    return tuple(columns)


#: resource key -> (columns, cells); the columns as upstream's ``*ColumnDefinitions``.
PRINTERS: dict[str, tuple[tuple[Column, ...], Callable[[Obj], list[Any]]]] = {
    PODS.key: (
        _columns("Name, Ready, Status, Restarts, Age, +IP, +Node, +Nominated Node, +Readiness Gates"),
        pod_cells,
    ),
    NODES.key: (
        _columns(
            "Name, Status, Roles, Age, Version, +Internal-IP, +External-IP, +OS-Image, +Kernel-Version, "
            "+Container-Runtime"
        ),
        node_cells,
    ),
    JOBS.key: (
        _columns("Name, Status, Completions, Duration, Age, +Containers, +Images, +Selector"),
        job_cells,
    ),
    CRONJOBS.key: (
        _columns(
            "Name, Schedule, Timezone, Suspend:boolean, Active:integer, Last Schedule:date, Age:date, +Containers, "
            "+Images, +Selector"
        ),
        cronjob_cells,
    ),
    EVENTS.key: (
        _columns("Last Seen, Type, Reason, Object, +Subobject, +Source, Message, +First Seen, +Count, +Name"),
        event_cells,
    ),
    SERVICES.key: (
        _columns("Name, Type, Cluster-IP, External-IP, Port(s), Age, +Selector"),
        service_cells,
    ),
    ENDPOINTS.key: (_columns("Name, Endpoints, Age"), endpoints_cells),
    ENDPOINTSLICES.key: (_columns("Name, AddressType, Ports, Endpoints, Age"), endpointslice_cells),
    NAMESPACES.key: (
        _columns("Name, Status, Age"),
        lambda ns: [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""), age(ns)],
    ),
    CONFIGMAPS.key: (
        _columns("Name, Data:integer, Age"),
        lambda cm: [cm["metadata"]["name"], len(cm.get("data") or {}) + len(cm.get("binaryData") or {}), age(cm)],
    ),
    SECRETS.key: (
        _columns("Name, Type, Data, Age"),
        lambda s: [s["metadata"]["name"], s.get("type", "Opaque"), len(s.get("data") or {}), age(s)],
    ),
    JOBSETS.key: (_columns("Name, TerminalState, Restarts, Completed, Suspended, Age"), jobset_cells),
    DEPLOYMENTS.key: (
        _columns("Name, Ready, Up-to-date:integer, Available:integer, Age, +Containers, +Images, +Selector"),
        deployment_cells,
    ),
    REPLICASETS.key: (
        _columns("Name, Desired:integer, Current:integer, Ready:integer, Age, +Containers, +Images, +Selector"),
        replicaset_cells,
    ),
    HORIZONTALPODAUTOSCALERS.key: (
        _columns("Name, Reference, Targets, MinPods, MaxPods:integer, Replicas:integer, Age"),
        hpa_cells,
    ),
    TRAINJOBS.key: (_columns("Name, State, Age:date"), trainjob_cells),
    PYTORCHJOBS.key: (_columns("Name, State, Age:date"), trainjob_cells),  # the PyTorchJob CRD's columns too
    RAYCLUSTERS.key: (
        _columns(
            "Name, desired workers:integer, available workers:integer, cpus, memory, gpus, +tpus, status, age:date, "
            "+head pod IP, +head service IP"
        ),
        raycluster_cells,
    ),
    RAYJOBS.key: (
        _columns("Name, job status, deployment status, ray cluster name, start time, end time, age:date"),
        rayjob_cells,
    ),
    INFERENCESERVICES.key: (
        _columns(
            "Name, URL, Ready, Prev:integer, Latest:integer, PrevRolledoutRevision, LatestReadyRevision, Age:date"
        ),
        isvc_cells,
    ),
    # No printer of its own upstream: the apiserver's default table (kubernetes/kubernetes
    # staging/src/k8s.io/apiserver/pkg/registry/rest/table.go, defaultTableConvertor): name and RFC 3339 creation time.
    CUSTOMRESOURCEDEFINITIONS.key: (
        _columns("Name, Created At:date"),
        lambda crd: [crd["metadata"]["name"], crd["metadata"].get("creationTimestamp", "")],
    ),
}
_DEFAULT = (_columns("Name, Age"), lambda obj: [obj["metadata"]["name"], age(obj)])


def table(res: Resource, objs: list[Obj], include: str, list_meta: dict[str, Any]) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objs`` (``includeObject``: ``None``, ``Metadata`` (default) or ``Object``)."""
    columns, cells = PRINTERS.get(res.key, _DEFAULT)
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": cells(obj)}
        if res is PODS and (conditions := pod_row_conditions(obj)):
            row["conditions"] = conditions
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [c.definition() for c in columns],
        "rows": rows,
    }
