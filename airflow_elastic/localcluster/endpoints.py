"""A Service's endpoints, as the endpoints controller computes them, and how non-headless Service names reach them.

Endpoints (``pkg/controller/endpoint/endpoints_controller.go`` ``syncService``, ``podutil.FindPort``,
``endpointsliceutil.ShouldPodBeInEndpoints``): the pods the selector matches that have an IP, are not terminal and
not terminating; Ready ones are addresses (not-ready ones too with ``publishNotReadyAddresses``); each Service
port's ``targetPort`` is a number or the name of a container port of the pod. The API server's service proxy
(:mod:`.api.proxy`) sends to one of them; the endpoints and EndpointSlice controllers
(:mod:`.controllers.serviceendpoints`) write them as ``Endpoints`` and ``EndpointSlices`` objects.

How a container reaches a non-headless Service by name: its ``<svc>.<ns>.svc[.cluster.local]``, and a bare
``<svc>[.<ns>]`` as a URL host or a whole ``<svc>:<port>`` value, in the container's command, args and env,
become

* with pod network namespaces (mode ``netns``), the Service's virtual IP, the port kept: kube-proxy
  (:mod:`.kubeproxy`) picks a ready endpoint for each connection, as on a cluster;
* where pods share the host's network (mode ``loopback``: no virtual IPs), ``<ready pod IP>:<targetPort>`` with a
  port (``:80``, or the scheme's default port in a URL): what a connection to the Service's port reaches *when the
  container starts*. A name without a ready endpoint, or a port the Service does not have, is left alone (a
  connection would fail on a real cluster too).

Headless Services resolve as before (:mod:`.network`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from airflow_elastic.localcluster.resources import PODS, SERVICES
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj, Store

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_END = r"(?![\w-]|\.[\w-])"
_SCHEME_PORTS = {"http": 80, "https": 443}
#: A Service's virtual IP by namespace and name (:class:`.kubeproxy.Proxier.vip`).
VirtualIPs = Callable[[str, str], "str | None"]
_FQDN = re.compile(
    rf"(?<![\w.-])(?:([a-z][a-z0-9+.-]*)://)?({_LABEL})\.({_LABEL})\.svc(?:\.cluster\.local)?(?::(\d+))?{_END}"
)
_URL = re.compile(rf"^([a-z][a-z0-9+.-]*)://({_LABEL})(?:\.({_LABEL}))?(?::(\d+))?(?=$|/)")
_HOST_PORT = re.compile(rf"^()({_LABEL})(?:\.({_LABEL}))?:(\d+)$")


def is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def target_port(pod: Obj, service_port: Obj) -> int | None:
    """``podutil.FindPort``: a numeric targetPort as is, a named one from the pod's container ports (sidecars'
    too: init containers with ``restartPolicy: Always``)."""
    wanted = service_port.get("targetPort", service_port.get("port"))
    if isinstance(wanted, int) or (isinstance(wanted, str) and wanted.isdigit()):
        return int(wanted)
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or []), *sidecars]:
        for port in container.get("ports") or []:
            if port.get("name") == wanted and port.get("protocol", "TCP") == service_port.get("protocol", "TCP"):
                return int(port["containerPort"])
    return None


def endpoint_ports(pod: Obj, service: Obj) -> list[tuple[Obj, int]]:
    """(Service port, the pod's port number for it) of each Service port ``FindPort`` resolves on ``pod``, in the
    Service's order (``syncService``'s port loop; ``getEndpointPorts`` of
    ``staging/src/k8s.io/endpointslice/utils.go``)."""
    found = [(port, target_port(pod, port)) for port in (service.get("spec") or {}).get("ports") or []]
    return [(port, number) for port, number in found if number is not None]


def should_set_hostname(pod: Obj, service: Obj) -> bool:
    """``ShouldSetHostname``: a pod with a hostname in the Service's subdomain is named in its endpoints."""
    spec = pod.get("spec") or {}
    return (
        bool(spec.get("hostname"))
        and spec.get("subdomain") == service["metadata"]["name"]
        and pod["metadata"].get("namespace") == service["metadata"].get("namespace")
    )


def selected(store: Store, service: Obj) -> list[Obj]:
    """Every pod of the Service's namespace its selector matches (none without a selector: those Services'
    endpoints are written by hand), by name."""
    selector = (service.get("spec") or {}).get("selector")
    if not selector:
        return []
    pods = [
        pod
        for pod in store.items(PODS, service["metadata"]["namespace"])
        if match_label_selector({"matchLabels": selector}, pod["metadata"].get("labels") or {})
    ]
    return sorted(pods, key=lambda pod: pod["metadata"]["name"])


def members(store: Store, service: Obj, *, terminating: bool = False) -> list[tuple[Obj, bool]]:
    """(pod, counts as ready) of every pod in the Service's endpoints, ready or not, by pod name: selected, with an
    IP, not terminal and not terminating (``ShouldPodBeInEndpoints``; ``terminating`` keeps terminating pods, as
    EndpointSlices do). ``publishNotReadyAddresses`` makes every one ready."""
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    found = []
    for pod in selected(store, service):
        status = pod.get("status") or {}
        if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if terminating or not pod["metadata"].get("deletionTimestamp"):
            found.append((pod, is_ready(pod) or publish))
    return found


def addresses(store: Store, service: Obj, port: Obj) -> list[tuple[Obj, int]]:
    """(pod, target port) of each ready endpoint address of ``service`` for its port ``port``, by pod name."""
    found = [(pod, target_port(pod, port)) for pod, ready in members(store, service) if ready]
    return [(pod, number) for pod, number in found if number is not None]


def has_subsets(store: Store, service: Obj) -> bool:
    """Whether the Service's Endpoints have any subset: some member, ready or not, with a port it resolves."""
    return any(endpoint_ports(pod, service) for pod, _ in members(store, service))


def service_port(service: Obj, number: int) -> Obj | None:
    """The Service's port numbered ``number``, if it has one."""
    return next((p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == number), None)


def cluster_ip_rewriter(store: Store, own_ns: str, vip: VirtualIPs | None = None) -> Callable[[str], str]:
    """Rewrites names of non-headless Services in a string for a container in ``own_ns`` (module docstring).
    With ``vip`` (mode ``netns``: :class:`.kubeproxy.Proxier`), a name becomes its Service's virtual IP, the port
    kept, as a resolver gives a cluster IP."""

    def resolve(m: re.Match[str], scheme: str | None, name: str, ns: str | None, port: str | None) -> str:
        service = store.find(SERVICES, ns or own_ns, name)
        if service is None or (service.get("spec") or {}).get("clusterIP") == "None":
            return m.group(0)
        if vip is not None:
            address = vip(ns or own_ns, name)
            if address is None:
                return m.group(0)
            return (f"{scheme}://" if scheme else "") + address + (f":{port}" if port else "")
        number = int(port) if port else _SCHEME_PORTS.get(scheme or "")
        port_spec = service_port(service, number) if number else None
        found = addresses(store, service, port_spec) if port_spec else []
        if not found:
            return m.group(0)
        pod, target = found[0]
        prefix = f"{scheme}://" if scheme else ""
        return f"{prefix}{pod['status']['podIP']}:{target}"

    def rewrite(text: str) -> str:
        text = _FQDN.sub(lambda m: resolve(m, m.group(1), m.group(2), m.group(3), m.group(4)), text)
        text = _URL.sub(lambda m: resolve(m, m.group(1), m.group(2), m.group(3), m.group(4)), text, count=1)
        return _HOST_PORT.sub(lambda m: resolve(m, None, m.group(2), m.group(3), m.group(4)), text, count=1)

    return rewrite
