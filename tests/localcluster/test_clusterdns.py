"""The cluster DNS of mode ``netns`` (:mod:`airflow_elastic.localcluster.clusterdns`), against the records that the
Kubernetes DNS specification and CoreDNS's ``kubernetes`` plugin give
(https://github.com/kubernetes/dns/blob/master/docs/specification.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dns.message
import dns.rcode

from airflow_elastic.localcluster.clusterdns import ClusterDNS
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.network import Network
from airflow_elastic.localcluster.podnet import resolv_conf, subnet
from airflow_elastic.localcluster.resources import PODS, SERVICES
from airflow_elastic.localcluster.store import Store

PEERS = {"selector": {"app": "web"}, "clusterIP": "None", "ports": [{"port": 8080}]}


def _pod(store: Store, name: str, ip: str, *, ready: bool = True, **spec: Any) -> None:
    body = {"containers": [{"name": "c", "image": "x"}], **spec}
    store.create(PODS, "default", {"metadata": {"name": name, "labels": {"app": "web"}}, "spec": body})
    status = {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]}
    store.update(PODS, {"metadata": {"name": name, "namespace": "default"}, "status": status}, subresource="status")


def _server(tmp_path: Path) -> tuple[Store, ClusterDNS, Network]:
    store = Store()
    bootstrap(store)
    network = Network(store, tmp_path, subnet(0), lambda ns, name: "10.128.0.2" if name == "web" else None)
    return store, ClusterDNS(store, network), network


def test_services_resolve_to_a_virtual_ip_or_to_their_ready_endpoints(tmp_path) -> None:
    store, server, _ = _server(tmp_path)
    store.create(SERVICES, "default", {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}}})
    store.create(SERVICES, "default", {"metadata": {"name": "peers"}, "spec": PEERS})
    assert server.addresses("web.default.svc.cluster.local") == ["10.128.0.2"]
    assert server.addresses("peers.default.svc.cluster.local") == []  # no endpoint yet: the name, no address
    _pod(store, "a", "10.128.1.1")
    _pod(store, "b", "10.128.1.2", ready=False)
    assert server.addresses("peers.default.svc.cluster.local.") == ["10.128.1.1"]
    store.update(
        SERVICES, {**store.get(SERVICES, "default", "peers"), "spec": {**PEERS, "publishNotReadyAddresses": True}}
    )
    assert server.addresses("PEERS.default.svc.cluster.local") == ["10.128.1.1", "10.128.1.2"]
    for missing in (
        "nope.default.svc.cluster.local",
        "web.other.svc.cluster.local",
        "pypi.org",
        "default.svc.cluster.local",
    ):
        assert server.addresses(missing) is None, missing


def test_pods_resolve_by_hostname_in_a_subdomain_and_by_dashed_ip(tmp_path) -> None:
    store, server, network = _server(tmp_path)
    store.create(SERVICES, "default", {"metadata": {"name": "peers"}, "spec": PEERS})
    # As the kubelet's rewrite: the identity's IP, whether or not the pod runs yet.
    assert server.addresses("w-0.peers.default.svc.cluster.local") == [network.ip_for("default/w-0.peers")]
    _pod(store, "x", "10.128.1.3", hostname="x-0", subdomain="own")  # a pod subdomain without a Service
    assert server.addresses("x-0.own.default.svc.cluster.local") == [network.ip_for("default/x-0.own")]
    assert server.addresses("w-0.nosuch.default.svc.cluster.local") is None
    assert server.addresses("10-128-1-3.default.pod.cluster.local") == ["10.128.1.3"]
    assert server.addresses("not-an-ip.default.pod.cluster.local") is None


def test_answers_in_wire_format_a_records_nxdomain_and_empty_aaaa(tmp_path) -> None:
    store, server, _ = _server(tmp_path)
    store.create(SERVICES, "default", {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}}})

    def ask(name: str, kind: str) -> dns.message.Message:
        query = dns.message.make_query(name, kind)
        answer = server.reply(query.to_wire())
        assert answer is not None
        return dns.message.from_wire(answer)

    found = ask("web.default.svc.cluster.local", "A")
    assert found.rcode() == dns.rcode.NOERROR and [r.address for r in found.answer[0]] == ["10.128.0.2"]
    assert ask("web.default.svc.cluster.local", "AAAA").answer == []  # IPv4 pods: the name, no AAAA
    assert ask("web.svc.cluster.local", "A").rcode() == dns.rcode.NXDOMAIN  # a search-path miss
    assert server.reply(b"\x00garbage") is None


def test_resolv_conf_is_the_kubelets_cluster_first() -> None:
    assert resolv_conf("team", "10.128.0.1").splitlines() == [
        "search team.svc.cluster.local svc.cluster.local cluster.local",
        "nameserver 10.128.0.1",
        "options ndots:5",
    ]
