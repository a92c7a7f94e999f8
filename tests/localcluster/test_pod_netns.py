"""Per-pod network identity (:mod:`airflow_elastic.localcluster.podnet`), through the ``kubernetes`` client.

Upstream, each pod has its own network namespace, shared by its containers (the pod sandbox: kubelet
``pkg/kubelet/kuberuntime/kuberuntime_sandbox.go``; the CNI ``bridge`` plugin gives it an interface and an IP,
containernetworking/plugins ``plugins/main/bridge/bridge.go``): two pods may both bind ``0.0.0.0:8080`` and each is
reached at its own pod IP, so a Deployment whose server binds ``0.0.0.0`` rolls out (the new pod serves while the
old one terminates). The fallback (mode ``loopback``: pods share the host's network) cannot do either.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from airflow_elastic.localcluster import LocalCluster, podnet
from airflow_elastic.localcluster.config import ClusterConfig
from tests.support.waiting import wait_for

NETNS = pytest.mark.skipif(podnet.unavailable() is not None, reason=f"no pod namespaces: {podnet.unavailable()}")

# A stock server: binds 0.0.0.0:8080 and answers with its pod's name; on SIGTERM it keeps serving 3 s (a drain).
SERVER = """
import os, signal, socket, threading, time, http.server as h
class Reply(h.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{os.environ['POD']} {socket.gethostname()}".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
server = h.ThreadingHTTPServer(("0.0.0.0", 8080), Reply)
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=lambda: (time.sleep(3), server.shutdown())).start())
server.serve_forever()
"""


def server_container(version: str = "1") -> dict:
    return {
        "name": "server",
        "image": "python:3.11",
        "command": ["python", "-c", SERVER],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "VERSION", "value": version},
        ],
        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
    }


def get(ip: str) -> str:
    with urllib.request.urlopen(f"http://{ip}:8080/", timeout=3) as response:
        return response.read().decode()


def answer(ip: str) -> str:
    with contextlib.suppress(OSError):
        return get(ip)
    return ""


@contextlib.contextmanager
def cluster(network: str) -> Iterator[tuple[LocalCluster, client.CoreV1Api, client.AppsV1Api]]:
    with LocalCluster(config=ClusterConfig(network=network)) as running:
        api = config.new_client_from_config(config_file=str(running.kubeconfig))
        try:
            yield running, client.CoreV1Api(api), client.AppsV1Api(api)
        finally:
            api.close()


def running_pod(core: client.CoreV1Api, name: str) -> client.V1Pod:
    def ready() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase == "Running" and all(c.ready for c in pod.status.container_statuses) else None

    return wait_for(ready, 60, what=f"pod {name} ready")


@NETNS
def test_two_stock_servers_on_one_port_each_at_its_pod_ip() -> None:
    with cluster("auto") as (running, core, _):
        assert running.network["mode"] == "netns"
        for name in ("left", "right"):
            core.create_namespaced_pod(
                "default", {"metadata": {"name": name}, "spec": {"containers": [server_container()]}}
            )
        pods = {name: running_pod(core, name) for name in ("left", "right")}
        ips = {name: pod.status.pod_ip for name, pod in pods.items()}
        assert ips["left"] != ips["right"]
        for name, ip in ips.items():
            assert ipaddress.ip_address(ip) in ipaddress.ip_network(running.network["subnet"])
            # The pod's server answers at its IP; its hostname (UTS namespace) is that IP too.
            assert get(ip) == f"{name} {ip}"
            assert pods[name].status.container_statuses[0].restart_count == 0


@NETNS
def test_rolling_update_of_a_server_binding_all_interfaces() -> None:
    with cluster("auto") as (_, core, apps):
        labels = {"app": "web"}
        deployment = {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [server_container("1")]}},
            },
        }
        apps.create_namespaced_deployment("default", deployment)

        def pods() -> list[client.V1Pod]:
            return core.list_namespaced_pod("default", label_selector="app=web").items

        (old,) = wait_for(
            lambda: [p for p in pods() if p.status.phase == "Running" and p.status.container_statuses[0].ready], 60
        )
        assert answer(old.status.pod_ip).startswith(old.metadata.name)
        apps.patch_namespaced_deployment(
            "web", "default", {"spec": {"template": {"spec": {"containers": [server_container("2")]}}}}
        )

        # While the old pod terminates (it drains 3 s after SIGTERM), the new one already serves: both answer.
        def overlap() -> tuple[client.V1Pod, client.V1Pod] | None:
            listed = {p.metadata.name: p for p in pods()}
            leaving = listed.get(old.metadata.name)
            new = [p for p in listed.values() if p.metadata.name != old.metadata.name and p.status.pod_ip]
            if leaving is None or leaving.metadata.deletion_timestamp is None or not new:
                return None
            if answer(new[0].status.pod_ip).startswith(new[0].metadata.name) and answer(old.status.pod_ip):
                return leaving, new[0]
            return None

        _, new = wait_for(overlap, 60, what="the new pod serving while the old one terminates", interval=0.1)
        wait_for(lambda: [p.metadata.name for p in pods()] == [new.metadata.name], 60, what="the old pod gone")
        status = apps.read_namespaced_deployment("web", "default").status
        assert (status.updated_replicas, status.ready_replicas) == (1, 1)
        assert core.read_namespaced_pod(new.metadata.name, "default").status.container_statuses[0].restart_count == 0


def test_fallback_shares_the_hosts_ports_as_before() -> None:
    with cluster("loopback") as (running, core, _):
        assert running.network["mode"] == "loopback"
        assert running.network["reason"].startswith("pods share the host's network, each with a loopback IP")
        spec = {"restartPolicy": "Never", "containers": [server_container()]}
        core.create_namespaced_pod("default", {"metadata": {"name": "first"}, "spec": spec})
        first = running_pod(core, "first")
        assert first.status.pod_ip.startswith("127.")
        core.create_namespaced_pod("default", {"metadata": {"name": "second"}, "spec": spec})

        def failed() -> client.V1Pod | None:
            pod = core.read_namespaced_pod("second", "default")
            return pod if pod.status.phase == "Failed" else None

        # The documented limitation: the second 0.0.0.0:8080 finds the port taken on the one host.
        wait_for(failed, 60, what="the second server to fail")
        assert "Address already in use" in core.read_namespaced_pod_log("second", "default")
        assert get(first.status.pod_ip).startswith("first ")


@NETNS
def test_bridges_do_not_collide_and_are_removed_at_stop_and_after_a_crash(tmp_path) -> None:
    with cluster("netns") as (one, _, _), cluster("netns") as (two, _, _):
        assert one.network["bridge"] != two.network["bridge"]
        assert one.network["subnet"] != two.network["subnet"]
        bridge = one.network["bridge"]
    assert podnet.wait_gone(bridge)

    crashed = LocalCluster(tmp_path / "crashed", config=ClusterConfig(network="netns")).start()
    stale = crashed.network["bridge"]
    assert crashed.process is not None
    os.kill(crashed.process.pid, signal.SIGKILL)
    crashed.process.wait()
    crashed.process = None
    assert subprocess.run(["ip", "link", "show", stale], capture_output=True).returncode == 0  # left behind
    with LocalCluster(tmp_path / "crashed", config=ClusterConfig(network="netns")) as again:
        assert again.network["mode"] == "netns"
        # The crashed server's bridge is gone: whatever has its name now belongs to the new server.
        owners = {name: info.get("pid") for name, info in podnet._bridges().items()}
        assert owners.get(stale) in (None, (again.ready_info() or {})["pid"])
        assert owners[again.network["bridge"]] == (again.ready_info() or {})["pid"]


# From a pod's network namespace: connect to the gateway (the host side, where the API server listens for pods).
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()"


@NETNS
def test_a_pod_reaches_the_gateway_right_after_the_pod_with_the_lowest_mac_leaves(tmp_path) -> None:
    """The bridge keeps its MAC as pods come and go. The kernel gives a bridge whose MAC was never set its lowest
    port's (net/bridge/br_stp_if.c, br_stp_recalculate_bridge_id): without a fixed one, when that pod's veth goes, a
    pod that cached the gateway's MAC cannot reach the gateway until its ARP entry expires (about 25 s, measured):
    the timeouts full test runs in this mode saw now and then."""
    import socket

    net = podnet.PodNetwork.up(tmp_path)
    ips = [str(net.subnet.network_address + i) for i in (2, 3)]
    stay, leave = net.attach(ips[0]), net.attach(ips[1])
    listener = socket.create_server((net.gateway, 0))
    port = str(listener.getsockname()[1])
    try:
        bridge_mac = podnet.mac(net.gateway)
        # The leaving pod's host-side veth gets the lowest MAC there is: a bridge without a fixed MAC would take it.
        subprocess.run(["ip", "link", "set", leave.veth, "address", "02:00:00:00:00:01"], check=True)

        def reach() -> None:
            subprocess.run(
                [*stay.enter(tmp_path), sys.executable, "-c", CONNECT, net.gateway, port], check=True, timeout=30
            )
            listener.accept()[0].close()

        reach()  # the pod's ARP cache now holds the gateway's MAC
        net.detach(ips[1], leave)
        assert podnet.wait_gone(leave.veth)
        reach()  # at once: 5 s connect timeout, where a changed MAC takes ~25 s
        assert link_mac(net.bridge) == bridge_mac
    finally:
        listener.close()
        net.down()


def link_mac(name: str) -> str:
    shown = subprocess.run(["ip", "-o", "link", "show", name], capture_output=True, text=True, check=True).stdout
    return shown.split("link/ether ")[1].split()[0]


def test_the_mode_is_chosen_and_explained() -> None:
    assert podnet.choose("loopback")[0] == "loopback"
    mode, reason = podnet.choose(ClusterConfig().network)  # auto, the default
    assert (mode == "netns") == (podnet.unavailable() is None)
    assert reason
    with pytest.raises(ValueError, match="not one of"):
        podnet.choose("bridge")


# A client that keeps one Service address (from its env, as a program reads it) and asks it every 0.2 s.
CLIENT = """
import os, time, urllib.request
print("URL", os.environ["URL"], flush=True)
while True:
    try:
        with urllib.request.urlopen(os.environ["URL"], timeout=3) as response:
            print("ANSWER", response.read().decode().split()[0], flush=True)
    except OSError as err:
        print("ERROR", err, flush=True)
    time.sleep(0.2)
"""


def web_server(core: client.CoreV1Api, name: str) -> None:
    """A stock server labelled ``app=web``, gone at once when deleted."""
    spec = {"containers": [server_container()], "terminationGracePeriodSeconds": 0}
    core.create_namespaced_pod("default", {"metadata": {"name": name, "labels": {"app": "web"}}, "spec": spec})
    running_pod(core, name)


class Client:
    """A pod that asks ``url`` (kept in its env, as a program keeps an address) every 0.2 s."""

    def __init__(self, core: client.CoreV1Api, url: str):
        self.core = core
        container = {"name": "client", "image": "python:3.11", "command": ["python", "-c", CLIENT]}
        container["env"] = [{"name": "URL", "value": url}]
        core.create_namespaced_pod("default", {"metadata": {"name": "client"}, "spec": {"containers": [container]}})

    def log(self) -> list[str]:  # raw: this client version gives a str of the bytes for a text/plain log
        return self.core.read_namespaced_pod_log("client", "default", _preload_content=False).data.decode().splitlines()

    def answers(self, after: int = 0) -> list[str]:
        return [line.split()[1] for line in self.log()[after:] if line.startswith("ANSWER ")]

    def wait_answer(self, *servers: str, timeout: float = 60) -> None:
        """Until each of ``servers`` answered (since this call)."""
        seen = len(self.log())
        wait_for(
            lambda: set(servers) <= set(self.answers(seen)),
            timeout,
            what=lambda: f"answers from {servers}; the client's log ends:\n" + "\n".join(self.log()[-5:]),
        )

    def restarts(self) -> int:
        return self.core.read_namespaced_pod("client", "default").status.container_statuses[0].restart_count


@NETNS
def test_a_service_address_reaches_the_services_endpoints_of_the_moment() -> None:
    """kube-proxy picks an endpoint per connection (kubernetes ``pkg/proxy/userspace/proxysocket.go``
    ``TryConnectEndpoints``, round robin: ``roundrobin.go``): a client started when ``web-a`` was the only endpoint
    reaches ``web-b`` once ``web-a`` vanished without a goodbye, then both ``web-b`` and ``web-c``; its container
    never restarts. Rewriting the name to ``web-a``'s IP when the client started would keep the dead address."""
    with cluster("auto") as (running, core, _):
        service = {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
        core.create_namespaced_service("default", {"metadata": {"name": "web"}, "spec": service})
        web_server(core, "web-a")
        asker = Client(core, "http://web.default.svc.cluster.local/")
        asker.wait_answer("web-a")
        core.delete_namespaced_pod("web-a", "default", grace_period_seconds=0)
        web_server(core, "web-b")
        asker.wait_answer("web-b")
        web_server(core, "web-c")
        asker.wait_answer("web-b", "web-c", timeout=30)
        assert asker.restarts() == 0
        url = asker.log()[0].split()[1]
        vip = ipaddress.ip_address(url.removeprefix("http://").rstrip("/"))
        gateway_block = next(ipaddress.ip_network(running.network["subnet"]).subnets(new_prefix=24))
        assert vip in gateway_block and str(vip) != running.network["gateway"], url  # a virtual IP, not web-a's


@NETNS
def test_a_headless_service_name_is_looked_up_in_the_cluster_dns_when_used() -> None:
    """A headless Service's name answers with its ready endpoints at each lookup (the DNS specification:
    https://github.com/kubernetes/dns/blob/master/docs/specification.md; the pod's ``resolv.conf`` searches its
    namespace, kubelet ``pkg/kubelet/network/dns/dns.go``): a client that kept the short name ``peers`` reaches
    ``web-b`` after ``web-a`` vanished. The name is not rewritten in its env; the host's ``/etc/resolv.conf`` is
    untouched."""
    host_resolv = Path("/etc/resolv.conf").read_text()
    with cluster("auto") as (running, core, _):
        service = {"selector": {"app": "web"}, "clusterIP": "None", "ports": [{"port": 8080}]}
        core.create_namespaced_service("default", {"metadata": {"name": "peers"}, "spec": service})
        web_server(core, "web-a")
        asker = Client(core, "http://peers:8080/")
        asker.wait_answer("web-a")
        core.delete_namespaced_pod("web-a", "default", grace_period_seconds=0)
        web_server(core, "web-b")
        asker.wait_answer("web-b")
        assert asker.restarts() == 0
        assert asker.log()[0] == "URL http://peers:8080/"
        assert running.network["mode"] == "netns"
    assert Path("/etc/resolv.conf").read_text() == host_resolv
