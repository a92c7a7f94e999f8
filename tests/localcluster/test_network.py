"""One-host networking: per-pod loopback IPs and cluster DNS names rewritten for the processes."""

from __future__ import annotations

import ipaddress
import socket
import textwrap
from pathlib import Path

import pytest

from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.network import Network, identity
from airflow_elastic.localcluster.resources import PODS, SERVICES
from airflow_elastic.localcluster.store import Store
from tests.support.kubelet_helpers import NodeSide, pod_body

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def headless(name: str, selector: dict[str, str]) -> dict:
    return {"metadata": {"name": name}, "spec": {"clusterIP": "None", "selector": selector}}


def test_pod_ips_are_deterministic_loopback_and_persistent(tmp_path: Path) -> None:
    store = Store()
    bootstrap(store)
    net = Network(store, tmp_path)
    ips = {net.ip_for(f"default/w-{i}.grp") for i in range(200)}
    assert len(ips) == 200
    for ip in ips:
        addr = ipaddress.IPv4Address(ip)
        assert addr in ipaddress.IPv4Network("127.0.0.0/8") and addr not in ipaddress.IPv4Network("127.0.0.0/24")
    pod = {"metadata": {"name": "w-0-abcde", "namespace": "default"}, "spec": {"hostname": "w-0", "subdomain": "grp"}}
    assert identity(pod) == "default/w-0.grp"
    assert Network(store, tmp_path).pod_ip(pod) == net.ip_for("default/w-0.grp")  # kept across restarts
    with socket.socket() as s:  # the address is usable on this host
        s.bind((net.pod_ip(pod), 0))


def test_rewrites_dns_names_and_headless_services(tmp_path: Path) -> None:
    store = Store()
    bootstrap(store)
    store.create(SERVICES, "default", headless("grp", {"group": "a"}))
    pod = store.create(
        PODS,
        "default",
        {
            "metadata": {"name": "w-1-xyz", "labels": {"group": "a"}},
            "spec": {"hostname": "w-1", "subdomain": "grp", "containers": [{"name": "m", "image": "x"}]},
        },
    )
    net = Network(store, tmp_path)
    rewrite = net.rewriter(pod)
    w0 = net.ip_for("default/w-0.grp")
    for name in ("w-0.grp", "w-0.grp.default", "w-0.grp.default.svc", "w-0.grp.default.svc.cluster.local"):
        assert rewrite(f"{name}:29500") == f"{w0}:29500"
    assert rewrite("--master=tcp://w-0.grp:1 --peer w-1.grp") == f"--master=tcp://{w0}:1 --peer {net.pod_ip(pod)}"
    for untouched in ("w-0.grp.example.com", "w-0.other", "my-w-0.grpx", "file.grp.txt"):
        assert rewrite(untouched) == untouched
    # A headless Service resolves to its first selected pod; bare names only as host:port or a URL host.
    assert rewrite("grp:8080") == f"{net.pod_ip(pod)}:8080"
    assert rewrite("grp") == "grp"  # a bare name is usually just the group's name
    # ... except as the whole value of an address variable (MASTER_ADDR=<job>-master-0 of training-operator v1).
    assert rewrite("grp", address=True) == rewrite("grp.default", address=True) == net.pod_ip(pod)
    assert rewrite("nosuchsvc", address=True) == "nosuchsvc"
    assert rewrite("http://grp.default.svc.cluster.local:8080/x") == f"http://{net.pod_ip(pod)}:8080/x"
    assert rewrite("grp is a word") == "grp is a word"


async def test_concurrent_groups_share_a_port_and_talk_by_dns_name(tmp_path: Path) -> None:
    """Two groups each run a server on the same port on its own pod IP, and a client that reaches its group's
    server by DNS name; neither sees the other group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = textwrap.dedent(
        f"""
        import os, socket
        srv = socket.create_server((os.environ["MY_IP"], {port}))
        while True:
            conn, _ = srv.accept()
            conn.sendall(os.environ["GROUP"].encode())
            conn.close()
        """
    )
    client = textwrap.dedent(
        """
        import socket, sys, time
        host, port = sys.argv[1].rsplit(":", 1)
        for _ in range(200):
            try:
                with socket.create_connection((host, int(port)), timeout=1) as c:
                    print(sys.argv[1], c.recv(100).decode())
                    break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit(1)
        """
    )
    side = NodeSide(tmp_path)
    try:
        for group in ("g1", "g2"):
            side.create(SERVICES, headless(group, {"group": group}))
            srv = pod_body(f"{group}-server", server, hostname="server", subdomain=group)
            srv["metadata"]["labels"] = {"group": group}
            srv["spec"]["containers"][0]["env"] = [
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "GROUP", "value": group},
            ]
            srv["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 1}
            side.create(PODS, srv)
            cli = pod_body(f"{group}-client", client, hostname="client", subdomain=group)
            cli["spec"]["containers"][0]["args"] = [f"server.{group}.default.svc.cluster.local:{port}"]
            side.create(PODS, cli)
        for group in ("g1", "g2"):
            done = await side.wait_phase(f"{group}-client", "Succeeded", "Failed")
            server_ip = side.pod(f"{group}-server")["status"]["podIP"]
            assert side.log(done) == f"{server_ip}:{port} {group}\n"
            await side.wait_pod(
                f"{group}-server",
                lambda p: any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]),
            )
        assert side.pod("g1-server")["status"]["podIP"] != side.pod("g2-server")["status"]["podIP"]
    finally:
        await side.close()
