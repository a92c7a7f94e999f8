"""The endpoints and EndpointSlice controllers: a Service's ``v1 Endpoints`` and ``discovery.k8s.io/v1
EndpointSlices``, written from the pods :mod:`..endpoints` finds for it.

Endpoints follow kubernetes ``pkg/controller/endpoint/endpoints_controller.go`` ``syncService``: one object named as
the Service, with its labels (plus ``service.kubernetes.io/headless`` for a headless one), each member an address
(ready, or not ready unless ``publishNotReadyAddresses``) per Service port it resolves (``addEndpointSubset``;
a headless Service without ports gets port-less subsets), repacked into subsets of the same port set
(``pkg/api/v1/endpoints/util.go`` ``RepackSubsets``), the ``endpoints.kubernetes.io/last-change-trigger-time``
annotation (``staging/src/k8s.io/endpointslice/util/trigger_time_tracker.go``), and deleted by this controller when
the Service goes. Terminating pods are not addresses (only with ``publishNotReadyAddresses``).

EndpointSlices follow ``pkg/controller/endpointslice/endpointslice_controller.go`` and
``staging/src/k8s.io/endpointslice/reconciler.go``/``utils.go``: named ``<svc>-<random>``, labelled
``kubernetes.io/service-name`` and ``endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`` over the
Service's labels, owned by the Service (the garbage collector deletes them with it), ``addressType: IPv4``, one
slice per set of resolved ports, each endpoint with ``conditions`` ready/serving/terminating (terminating pods stay
in, not ready), ``nodeName``, ``zone``, ``hostname`` and a ``targetRef``; an empty placeholder slice when there is
no endpoint. Simplified where upstream's complexity is about scale: no 100-endpoints-per-slice packing (every
endpoint of a port set goes into one slice, and local clusters have far fewer pods), no 1,000-address cap on
Endpoints, no batching period, no topology hints. Pod IPs are IPv4, so there are no IPv6 slices. The local cluster
allocates no cluster IP (:mod:`..admission.service`), so "headless" means ``clusterIP: None`` here.
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

from airflow_elastic.localcluster import endpoints, errors
from airflow_elastic.localcluster.controller import Controller, Key, own_key
from airflow_elastic.localcluster.controllers import namespaces
from airflow_elastic.localcluster.controllers.replicaset import owner_ref
from airflow_elastic.localcluster.resources import ENDPOINTS, ENDPOINTSLICES, NODES, PODS, SERVICES
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj, Store

HEADLESS = "service.kubernetes.io/headless"
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER = "endpointslice-controller.k8s.io"
ZONE = "topology.kubernetes.io/zone"


def _is_headless(service: Obj) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == "None"


def _ready_since(pod: Obj) -> str:
    """``getPodTriggerTime``: when the pod's Ready condition last changed ("" without one)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c.get("lastTransitionTime") or "" for c in conditions if c.get("type") == "Ready"), "")


class TriggerTimeTracker:
    """``TriggerTimeTracker.ComputeEndpointLastChangeTriggerTime``: the earliest change (a pod's Ready transition,
    the Service's creation) since the Service's last sync; its creation time on the first sync; "" for none."""

    def __init__(self) -> None:
        self._states: dict[Key, tuple[str, dict[str, str]]] = {}

    def compute(self, key: Key, service: Obj, pods: list[Obj]) -> str:
        known = self._states.get(key)
        last_service, last_pods = known or ("", {})
        times = {p["metadata"]["name"]: t for p in pods if (t := _ready_since(p))}
        created = service["metadata"].get("creationTimestamp", "")
        changed = [t for name, t in times.items() if t > last_pods.get(name, "")]
        changed += [created] if created > last_service else []
        self._states[key] = (created, times)
        if known is None:
            return created
        return min(changed, default="")

    def forget(self, key: Key) -> None:
        self._states.pop(key, None)


class _ServiceEndpoints(Controller):
    """Keys are (namespace, Service name), enqueued by the Service, by pods it selects (before or after a change)
    and by the controller's own objects."""

    def __init__(self, store: Store):
        super().__init__(store)
        self.tracker = TriggerTimeTracker()
        self.watches = {SERVICES.key: own_key, PODS.key: self._pod_keys}

    def _pod_keys(self, pod: Obj) -> list[Key]:
        """``GetServicesToUpdateOnPodChange``: the Services whose selector matches the pod's labels."""
        ns, labels = pod["metadata"].get("namespace", ""), pod["metadata"].get("labels") or {}
        return [
            (ns, svc["metadata"]["name"])
            for svc in self.store.items(SERVICES, ns)
            if (selector := (svc.get("spec") or {}).get("selector"))
            and match_label_selector({"matchLabels": selector}, labels)
        ]

    def _service(self, key: Key) -> Obj | None:
        """The Service to sync, or ``None`` (its objects' state forgotten) when it is gone."""
        service = self.store.find(SERVICES, *key)
        if service is None:
            self.tracker.forget(key)
        return service

    @staticmethod
    def _served(service: Obj) -> bool:
        """ExternalName Services and those without a selector get nothing from the controllers."""
        spec = service.get("spec") or {}
        return spec.get("type") != "ExternalName" and bool(spec.get("selector"))

    def _accepting(self, namespace: str) -> bool:
        """Creating in a terminating namespace is refused (403): the item is dropped, as upstream does."""
        try:
            namespaces.check_accepting(self.store, namespace)
        except errors.ApiError:
            return False
        return True


# --------------------------------------------------------------------------------------------- Endpoints


def _address(pod: Obj, service: Obj) -> dict[str, Any]:
    """``podToEndpointAddressForService`` (+ the hostname of ``ShouldSetHostname``)."""
    spec = pod.get("spec") or {}
    address: dict[str, Any] = {"ip": pod["status"]["podIP"]}
    if endpoints.should_set_hostname(pod, service):
        address["hostname"] = spec["hostname"]
    if spec.get("nodeName"):
        address["nodeName"] = spec["nodeName"]
    address["targetRef"] = _target_ref(pod)
    return address


def _target_ref(pod: Obj) -> dict[str, str]:
    meta = pod["metadata"]
    return {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}


def _endpoint_port(port: Obj, number: int, *, empty_name: bool = False) -> dict[str, Any]:
    """``endpointPortFromServicePort`` (an empty ``name`` omitted as the Go type serialises it, unless
    ``empty_name``: a slice's port name is a pointer, always set)."""
    found = {"name": port.get("name", ""), "port": number, "protocol": port.get("protocol", "TCP")}
    found |= {"appProtocol": port["appProtocol"]} if port.get("appProtocol") else {}
    return found if found["name"] or empty_name else {k: v for k, v in found.items() if k != "name"}


def subsets(store: Store, service: Obj) -> list[dict[str, Any]]:
    """The Service's subsets as ``syncService`` builds them, then repacked."""
    spec = service.get("spec") or {}
    found = []
    for pod, ready in endpoints.members(store, service, terminating=bool(spec.get("publishNotReadyAddresses"))):
        field = "addresses" if ready else "notReadyAddresses"
        address = _address(pod, service)
        if not spec.get("ports"):
            if _is_headless(service):  # a headless Service may have no ports
                found.append({field: [address]})
            continue
        for port, number in endpoints.endpoint_ports(pod, service):
            found.append({field: [address], "ports": [_endpoint_port(port, number)]})
    return repack(found)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def repack(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``RepackSubsets``: one subset per set of addresses (with their readiness) offering the same ports; an address
    not ready for a port in any subset is not ready for it. Addresses sorted by IP then pod UID
    (``LessEndpointAddress``); ports and subsets in a fixed order (upstream's is by a hash of each)."""
    addresses: dict[tuple[str, str], dict[str, Any]] = {}
    by_port: dict[str, dict[tuple[str, str], bool]] = {}
    for subset in found:
        for port in subset.get("ports") or [None]:
            readiness = by_port.setdefault(_canonical(port) if port else "", {})
            for field, ready in (("addresses", True), ("notReadyAddresses", False)):
                for address in subset.get(field) or []:
                    key = (address["ip"], (address.get("targetRef") or {}).get("uid", ""))
                    addresses.setdefault(key, address)
                    readiness[key] = readiness.get(key, True) and ready
    ports_of: dict[tuple[tuple[tuple[str, str], bool], ...], list[str]] = {}
    for port, readiness in by_port.items():
        ports = ports_of.setdefault(tuple(sorted(readiness.items())), [])
        if port:
            ports.append(port)
    packed = []
    for shared_readiness, ports in ports_of.items():
        repacked: dict[str, Any] = {}
        for field, wanted in (("addresses", True), ("notReadyAddresses", False)):
            if chosen := [addresses[key] for key, ready in shared_readiness if ready is wanted]:
                repacked[field] = chosen
        if ports:
            repacked["ports"] = [json.loads(p) for p in sorted(ports)]
        packed.append(repacked)
    return sorted(packed, key=_canonical)


def _set_trigger_time(obj: Obj, trigger: str) -> None:
    """The last-change-trigger-time annotation set, or cleared when there is no new trigger time."""
    meta = obj["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != TRIGGER_TIME}
    annotations |= {TRIGGER_TIME: trigger} if trigger else {}
    meta.pop("annotations", None)
    meta |= {"annotations": annotations} if annotations else {}


def _labels(service: Obj) -> dict[str, str]:
    labels = dict(service["metadata"].get("labels") or {})
    labels.pop(HEADLESS, None)
    return labels | ({HEADLESS: ""} if _is_headless(service) else {})


class EndpointsController(_ServiceEndpoints):
    """Writes each Service's ``v1 Endpoints``; also enqueued when its Endpoints change or are deleted."""

    name = "endpoint-controller"

    def __init__(self, store: Store):
        super().__init__(store)
        self.watches[ENDPOINTS.key] = own_key

    async def reconcile(self, key: Key) -> float | None:
        service = self._service(key)
        if service is None:
            with contextlib.suppress(errors.NotFound):  # the Service was deleted: so are its Endpoints
                self.store.delete(ENDPOINTS, *key)
            return None
        if not self._served(service):
            return None
        trigger = self.tracker.compute(key, service, endpoints.selected(self.store, service))
        wanted = subsets(self.store, service)
        current = self.store.find(ENDPOINTS, *key)
        labelled = current is not None and (current["metadata"].get("labels") or {}) == _labels(service)
        if labelled and current is not None and (current.get("subsets") or []) == wanted:
            return None
        if current is None and not self._accepting(key[0]):
            return None
        updated: Obj = copy.deepcopy(current) if current else {"metadata": {"name": key[1], "namespace": key[0]}}
        updated["metadata"]["labels"] = _labels(service)
        _set_trigger_time(updated, trigger)
        updated.pop("subsets", None)
        updated |= {"subsets": wanted} if wanted else {}
        if current is None:
            self.store.create(ENDPOINTS, key[0], {"apiVersion": "v1", "kind": "Endpoints", **updated})
        else:
            self.store.update(ENDPOINTS, updated)
        return None


# --------------------------------------------------------------------------------------------- EndpointSlices


def _slice_endpoint(store: Store, pod: Obj, service: Obj) -> dict[str, Any]:
    """``podToEndpoint``: ready only when serving and not terminating (always with ``publishNotReadyAddresses``)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    serving, terminating = endpoints.is_ready(pod), bool(meta.get("deletionTimestamp"))
    ready = bool((service.get("spec") or {}).get("publishNotReadyAddresses")) or (serving and not terminating)
    ips = [ip.get("ip") for ip in (pod.get("status") or {}).get("podIPs") or []] or [pod["status"]["podIP"]]
    endpoint: dict[str, Any] = {
        "addresses": [ip for ip in ips if ip and ":" not in ip],  # IPv4 only
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": _target_ref(pod),
    }
    if spec.get("nodeName"):
        endpoint["nodeName"] = spec["nodeName"]
        node = store.find(NODES, None, spec["nodeName"])
        if zone := ((node or {}).get("metadata", {}).get("labels") or {}).get(ZONE):
            endpoint["zone"] = zone
    if endpoints.should_set_hostname(pod, service):
        endpoint["hostname"] = spec["hostname"]
    return endpoint


def _slice_ports(pod: Obj, service: Obj) -> list[dict[str, Any]]:
    """``getEndpointPorts``: every resolved port, its name always set ("" when the Service port has none)."""
    found = [_endpoint_port(port, number, empty_name=True) for port, number in endpoints.endpoint_ports(pod, service)]
    return sorted(found, key=_canonical)  # NewPortMapKey sorts them


def desired_slices(store: Store, service: Obj) -> dict[str, tuple[list[Obj], list[Obj]]]:
    """Port map key -> (ports, endpoints by pod name) of every pod ``ShouldPodBeInEndpoints(pod, true)`` keeps
    (``reconcileByAddressType``), or one empty placeholder."""
    groups: dict[str, tuple[list[Obj], list[Obj]]] = {}
    for pod, _ in endpoints.members(store, service, terminating=True):
        endpoint = _slice_endpoint(store, pod, service)
        if endpoint["addresses"]:
            ports = _slice_ports(pod, service)
            groups.setdefault(_canonical(ports), (ports, []))[1].append(endpoint)
    return groups or {_canonical([]): ([], [])}


def _slice_labels(service: Obj) -> dict[str, str]:
    """``setEndpointSliceLabels``: the Service's labels but the reserved ones, which the controller sets."""
    reserved = (SERVICE_NAME, MANAGED_BY, HEADLESS)
    labels = {k: v for k, v in (service["metadata"].get("labels") or {}).items() if k not in reserved}
    labels |= {HEADLESS: ""} if _is_headless(service) else {}
    return labels | {SERVICE_NAME: service["metadata"]["name"], MANAGED_BY: SLICE_CONTROLLER}


def _slice_key(obj: Obj) -> list[Key]:
    """``ServiceControllerKey``: the Service a slice this controller manages belongs to."""
    labels = obj["metadata"].get("labels") or {}
    if labels.get(MANAGED_BY) != SLICE_CONTROLLER or not labels.get(SERVICE_NAME):
        return []
    return [(obj["metadata"].get("namespace", ""), labels[SERVICE_NAME])]


class EndpointSliceController(_ServiceEndpoints):
    """Writes each Service's ``discovery.k8s.io/v1 EndpointSlices``; also enqueued by the slices it manages."""

    name = "endpointslice-controller"

    def __init__(self, store: Store):
        super().__init__(store)
        self.watches[ENDPOINTSLICES.key] = _slice_key

    async def reconcile(self, key: Key) -> float | None:
        service = self._service(key)
        if service is None or not self._served(service):
            return None  # a deleted Service's slices go with it (ownerReferences, the garbage collector)
        trigger = self.tracker.compute(key, service, endpoints.selected(self.store, service))
        uid = service["metadata"]["uid"]
        existing = [  # dropEndpointSlicesPendingDeletion
            s
            for s in self.store.items(ENDPOINTSLICES, key[0])
            if _slice_key(s) == [key] and not s["metadata"].get("deletionTimestamp")
        ]
        owned = [s for s in existing if any(r.get("uid") == uid for r in s["metadata"].get("ownerReferences") or [])]
        stale = [s for s in existing if s not in owned]  # left by an earlier Service of that name
        by_ports = {_canonical(s.get("ports") or []): s for s in owned}
        labels, unchanged, writes = _slice_labels(service), [], []
        for ports_key, (ports, wanted) in desired_slices(self.store, service).items():
            current = by_ports.pop(ports_key, None)
            if (
                current is not None
                and current.get("endpoints") == wanted
                and current["metadata"].get("labels") == labels
            ):
                unchanged.append(current)
                continue
            writes.append((current, ports, wanted))
        taken = {s["metadata"]["name"] for s in unchanged} | {c["metadata"]["name"] for c, _, _ in writes if c}
        spare = [s for s in owned if s["metadata"]["name"] not in taken]
        for current, ports, wanted in writes:
            # finalize: a create becomes an update of a slice that would otherwise be deleted
            base = current or (spare.pop() if spare else None)
            self._write(service, base, ports, wanted, labels, trigger)
        for obj in [*spare, *stale]:
            with contextlib.suppress(errors.NotFound):
                self.store.delete(ENDPOINTSLICES, key[0], obj["metadata"]["name"])
        return None

    def _write(
        self, service: Obj, base: Obj | None, ports: list[Obj], wanted: list[Obj], labels: dict[str, str], trigger: str
    ) -> None:
        ns = service["metadata"]["namespace"]
        if base is None and (service["metadata"].get("deletionTimestamp") or not self._accepting(ns)):
            return  # no new slice for a Service being deleted (a race with the garbage collector)
        body: Obj = (
            copy.deepcopy(base)
            if base
            else {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "generateName": f"{service['metadata']['name']}-",
                    "ownerReferences": [owner_ref(service)],
                },
                "addressType": "IPv4",
            }
        )
        body["metadata"]["labels"] = labels
        _set_trigger_time(body, trigger)
        body |= {"ports": ports, "endpoints": wanted}
        if base is None:
            self.store.create(ENDPOINTSLICES, ns, body)
        else:
            self.store.update(ENDPOINTSLICES, body)
