"""``v1 Endpoints`` and ``discovery.k8s.io/v1 EndpointSlices`` as kube-controller-manager writes them.

Upstream: ``pkg/controller/endpoint/endpoints_controller.go`` (``syncService``, ``addEndpointSubset``),
``pkg/api/v1/endpoints/util.go`` (``RepackSubsets``), ``staging/src/k8s.io/endpointslice/reconciler.go`` and
``utils.go`` (``podToEndpoint``, ``getEndpointPorts``, ``setEndpointSliceLabels``, the placeholder slice),
``pkg/printers/internalversion/printers.go`` (``formatEndpoints``, ``formatDiscoveryEndpoints``).
"""

from __future__ import annotations

import copy
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.localcluster.api.printers import endpoints_cells, endpointslice_cells
from airflow_elastic.localcluster.controllers.serviceendpoints import EndpointsController, EndpointSliceController
from airflow_elastic.localcluster.resources import ENDPOINTS, ENDPOINTSLICES, PODS, SERVICES
from airflow_elastic.localcluster.store import Obj
from tests.support import inprocess
from tests.support.inprocess import NS, Cluster
from tests.support.waiting import wait_for

SERVICE = {
    "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
    "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
}
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
MANAGED = {
    "kubernetes.io/service-name": "web",
    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
}


def running() -> AbstractAsyncContextManager[Cluster]:
    return inprocess.running(EndpointsController, EndpointSliceController)


def _pod(cluster: Cluster, name: str, ip: str | None, *, ready: bool = True, port: str = "http", **spec: Any) -> Obj:
    container = {"name": "c", "image": "x", "ports": [{"name": port, "containerPort": 8080}]}
    spec |= {"nodeName": "local-0", "containers": [container]}
    pod = cluster.create(PODS, {"metadata": {"name": name, "labels": {"app": "web"}}, "spec": spec})
    set_ready(cluster, name, ready, ip=ip)
    return pod


def set_ready(cluster: Cluster, name: str, ready: bool, *, ip: str | None = None, stamp: str = "") -> None:
    current = cluster.store.get(PODS, NS, name)
    status = current.get("status") or {"phase": "Running"}
    status["phase"] = status.get("phase") or "Running"
    if ip:
        status |= {"podIP": ip, "podIPs": [{"ip": ip}]}
    condition = {"type": "Ready", "status": str(ready)} | ({"lastTransitionTime": stamp} if stamp else {})
    status["conditions"] = [condition]
    cluster.store.update(PODS, {**current, "status": status}, subresource="status")


def terminate(cluster: Cluster, name: str) -> None:
    """A deletion held by a finalizer: the pod stays, terminating."""
    current = cluster.store.get(PODS, NS, name)
    current["metadata"]["finalizers"] = ["test/hold"]
    cluster.store.update(PODS, current)
    cluster.store.delete(PODS, NS, name)


def slices(cluster: Cluster, service: str = "web") -> list[Obj]:
    found = cluster.store.list(ENDPOINTSLICES, NS)[0]
    return [s for s in found if s["metadata"]["labels"].get("kubernetes.io/service-name") == service]


def ref(pod: Obj) -> dict[str, str]:
    meta = pod["metadata"]
    return {"kind": "Pod", "namespace": NS, "name": meta["name"], "uid": meta["uid"]}


pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_endpoints_and_slice_of_ready_not_ready_and_terminating_pods() -> None:
    async with running() as cluster:
        service = cluster.create(SERVICES, SERVICE)
        ready = _pod(cluster, "a-ready", "127.1.0.1")
        waiting = _pod(cluster, "b-waiting", "127.1.0.2", ready=False)
        _pod(cluster, "c-going", "127.1.0.3")
        _pod(cluster, "d-no-ip", None)
        _pod(cluster, "e-done", "127.1.0.5")
        cluster.store.update(
            PODS, {**cluster.store.get(PODS, NS, "e-done"), "status": {"phase": "Succeeded"}}, subresource="status"
        )
        terminate(cluster, "c-going")
        await cluster.settle()

        ep = cluster.get(ENDPOINTS, "web")
        assert ep is not None and ep["metadata"]["labels"] == {"app": "web", "tier": "front"}
        assert ep["metadata"]["annotations"][TRIGGER] == service["metadata"]["creationTimestamp"]
        address = {"ip": "127.1.0.1", "nodeName": "local-0", "targetRef": ref(ready)}
        not_ready = {"ip": "127.1.0.2", "nodeName": "local-0", "targetRef": ref(waiting)}
        port = {"name": "http", "port": 8080, "protocol": "TCP"}
        assert ep["subsets"] == [{"addresses": [address], "notReadyAddresses": [not_ready], "ports": [port]}]

        (eps,) = slices(cluster)
        assert eps["metadata"]["name"].startswith("web-") and eps["addressType"] == "IPv4"
        assert eps["metadata"]["labels"] == {"app": "web", "tier": "front", **MANAGED}
        (owner,) = eps["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "v1",
            "kind": "Service",
            "name": "web",
            "uid": service["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert eps["ports"] == [port]
        conditions = {e["targetRef"]["name"]: e["conditions"] for e in eps["endpoints"]}
        assert conditions == {
            "a-ready": {"ready": True, "serving": True, "terminating": False},
            "b-waiting": {"ready": False, "serving": False, "terminating": False},
            "c-going": {"ready": False, "serving": True, "terminating": True},  # in the slice, not in Endpoints
        }
        assert eps["endpoints"][0] == {
            "addresses": ["127.1.0.1"],
            "conditions": conditions["a-ready"],
            "targetRef": ref(ready),
            "nodeName": "local-0",
        }

        # Readiness flips: the address moves, the trigger time is the pod's Ready transition.
        set_ready(cluster, "b-waiting", True, stamp="2099-01-01T00:00:00Z")
        set_ready(cluster, "a-ready", False, stamp="2099-01-01T00:00:05Z")
        await cluster.settle()
        ep = cluster.get(ENDPOINTS, "web")
        assert [a["ip"] for a in ep["subsets"][0]["addresses"]] == ["127.1.0.2"]
        assert [a["ip"] for a in ep["subsets"][0]["notReadyAddresses"]] == ["127.1.0.1"]
        assert ep["metadata"]["annotations"][TRIGGER] == "2099-01-01T00:00:00Z"  # the earliest change
        (eps,) = slices(cluster)
        assert {e["targetRef"]["name"]: e["conditions"]["ready"] for e in eps["endpoints"]} == {
            "a-ready": False,
            "b-waiting": True,
            "c-going": False,
        }
        assert eps["metadata"]["annotations"][TRIGGER] == "2099-01-01T00:00:00Z"


async def test_service_deleted_takes_its_endpoints_and_slices() -> None:
    async with running() as cluster:
        cluster.create(SERVICES, SERVICE)
        _pod(cluster, "a", "127.1.0.1")
        await cluster.settle()
        assert cluster.get(ENDPOINTS, "web") is not None and len(slices(cluster)) == 1
        cluster.store.delete(ENDPOINTS, NS, "web")  # deleted by hand: written again
        (held,) = slices(cluster)
        held["metadata"]["finalizers"] = ["test/hold"]
        cluster.store.update(ENDPOINTSLICES, held)
        cluster.store.delete(ENDPOINTSLICES, NS, held["metadata"]["name"])  # pending deletion: replaced
        await cluster.settle()
        assert cluster.get(ENDPOINTS, "web") is not None
        fresh = [s for s in slices(cluster) if not s["metadata"].get("deletionTimestamp")]
        assert [e["addresses"] for e in fresh[0]["endpoints"]] == [["127.1.0.1"]] and len(fresh) == 1
        held = cluster.store.get(ENDPOINTSLICES, NS, held["metadata"]["name"])
        held["metadata"]["finalizers"] = []
        cluster.store.update(ENDPOINTSLICES, held)
        cluster.store.delete(SERVICES, NS, "web")
        await cluster.settle()
        assert cluster.get(ENDPOINTS, "web") is None  # the endpoints controller deletes it
        assert slices(cluster) == []  # the garbage collector, through the ownerReference


async def test_headless_service_without_ports_and_the_placeholder_slice() -> None:
    async with running() as cluster:
        headless = copy.deepcopy(SERVICE)
        headless["spec"] = {"clusterIP": "None", "selector": {"app": "web"}}
        cluster.create(SERVICES, headless)
        await cluster.settle()
        ep = cluster.get(ENDPOINTS, "web")
        assert ep is not None and "subsets" not in ep
        assert ep["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
        (placeholder,) = slices(cluster)
        assert (placeholder["ports"], placeholder["endpoints"]) == ([], [])
        assert placeholder["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
        pod = _pod(cluster, "a", "127.1.0.1", hostname="a", subdomain="web")
        await cluster.settle()
        (subset,) = cluster.get(ENDPOINTS, "web")["subsets"]
        address = {"ip": "127.1.0.1", "hostname": "a", "nodeName": "local-0", "targetRef": ref(pod)}
        assert subset == {"addresses": [address]}
        (eps,) = slices(cluster)
        assert eps["metadata"]["name"] == placeholder["metadata"]["name"]  # the placeholder is filled in
        assert [(e["addresses"], e["hostname"]) for e in eps["endpoints"]] == [(["127.1.0.1"], "a")]


async def test_ports_resolved_differently_are_repacked_and_sliced_apart() -> None:
    """A named targetPort only some pods have: Endpoints repack by port set, slices are one per port set."""
    async with running() as cluster:
        two_ports = copy.deepcopy(SERVICE)
        two_ports["spec"]["ports"].append({"name": "metrics", "port": 9090, "targetPort": 9090})
        cluster.create(SERVICES, two_ports)
        _pod(cluster, "a", "127.1.0.1")
        _pod(cluster, "b", "127.1.0.2", port="other")
        await cluster.settle()
        subsets = cluster.get(ENDPOINTS, "web")["subsets"]
        by_ports = {tuple(p["port"] for p in s["ports"]): [a["ip"] for a in s["addresses"]] for s in subsets}
        assert by_ports == {(9090,): ["127.1.0.1", "127.1.0.2"], (8080,): ["127.1.0.1"]}
        by_slice = {
            tuple(p["port"] for p in s["ports"]): [e["addresses"][0] for e in s["endpoints"]] for s in slices(cluster)
        }
        assert by_slice == {(8080, 9090): ["127.1.0.1"], (9090,): ["127.1.0.2"]}


def test_printers_cut_at_three_as_upstream() -> None:
    meta = {"name": "web", "creationTimestamp": "2020-01-01T00:00:00Z"}
    addresses = [{"ip": f"10.0.0.{i}"} for i in range(1, 5)]
    ep = {"metadata": meta, "subsets": [{"addresses": addresses, "ports": [{"port": 80}, {"port": 81}]}]}
    assert endpoints_cells(ep)[:2] == ["web", "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 5 more..."]
    assert endpoints_cells({"metadata": meta})[1] == "<none>"
    assert endpoints_cells({"metadata": meta, "subsets": [{"addresses": addresses[:1]}]})[1] == "10.0.0.1"
    eps = {
        "metadata": meta,
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80}],
        "endpoints": [{"addresses": [a["ip"]]} for a in addresses],
    }
    assert endpointslice_cells(eps)[:4] == ["web", "IPv4", "80", "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..."]
    empty = {"metadata": meta, "addressType": "IPv4", "ports": [], "endpoints": []}
    assert endpointslice_cells(empty)[:4] == ["web", "IPv4", "<unset>", "<unset>"]


def test_real_clients_read_endpoints_and_slices(core, api_client, kubectl, namespace, tmp_path: Path) -> None:
    """A pod behind a Service through the ``kubernetes`` client and kubectl: not ready, ready, terminating, gone."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    discovery = client.DiscoveryV1Api(api_client)
    flag = tmp_path / "ready"
    hold = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    container = {
        "name": "web",
        "image": "python:3.12-slim",
        "command": [sys.executable, "-c", hold],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"exec": {"command": ["test", "-f", str(flag)]}, "periodSeconds": 1},
    }
    pod = {
        "metadata": {"name": "web-0", "labels": {"app": "web"}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 60},
    }
    core.create_namespaced_service(namespace, SERVICE)
    core.create_namespaced_pod(namespace, pod)

    def endpoints() -> Any:
        return core.read_namespaced_endpoints("web", namespace)

    def endpoint() -> Any:
        (eps,) = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=web"
        ).items
        return eps.endpoints[0] if eps.endpoints else None

    wait_for(lambda: endpoints().subsets and endpoints().subsets[0].not_ready_addresses, what="a not-ready address")
    ip = core.read_namespaced_pod("web-0", namespace).status.pod_ip
    assert endpoints().subsets[0].ports[0].port == 8080 and endpoints().subsets[0].addresses is None
    flag.touch()
    wait_for(lambda: endpoints().subsets[0].addresses, what="the pod ready")
    assert endpoints().subsets[0].addresses[0].ip == ip
    assert endpoints().subsets[0].addresses[0].target_ref.name == "web-0"
    assert endpoint().conditions.to_dict() == {"ready": True, "serving": True, "terminating": False}
    assert endpoint().addresses == [ip] and endpoint().node_name

    table = kubectl("get", "endpoints,endpointslices", "-n", namespace).stdout
    assert f"endpoints/web   {ip}:8080" in table, table
    assert any(line.split()[1:4] == ["IPv4", "8080", ip] for line in table.splitlines()), table
    assert kubectl("get", "ep", "web", "-n", namespace, "-o", "jsonpath={.subsets[0].addresses[0].ip}").stdout == ip

    core.delete_namespaced_pod("web-0", namespace)  # SIGTERM ignored: terminating for the grace period
    wait_for(lambda: endpoint() and endpoint().conditions.terminating, what="the endpoint terminating")
    assert endpoint().conditions.to_dict() == {"ready": False, "serving": True, "terminating": True}
    assert endpoints().subsets is None  # terminating pods are not in Endpoints
    core.delete_namespaced_pod("web-0", namespace, grace_period_seconds=0)
    core.delete_namespaced_service("web", namespace)

    def gone() -> bool:
        try:
            endpoints()
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, what="the Endpoints deleted")
    wait_for(lambda: not discovery.list_namespaced_endpoint_slice(namespace).items, what="the slices deleted")
