"""A Ray node's fixed ports on one host: moved per cluster or per pod, because Ray binds some of them on every address.

Only where pods share the host's network (mode ``loopback``); with a network namespace per pod (mode ``netns``,
:mod:`.podnet`) each pod has its own ports and its own address, as on a cluster, and nothing here applies.

On a real cluster KubeRay starts every Ray node with the same fixed ports (``ray-project/kuberay``
``ray-operator/controllers/ray/common/pod.go``, ``setMissingRayStartParams``/``generateRayStartCommand``; defaults in
``utils/constant.go``): GCS 6379, Ray client server 10001, dashboard 8265, dashboard agent 52365, metrics export 8080.
``ray start`` (Ray 2.60) binds the GCS on ``*:6379``, the metrics exporter on ``0.0.0.0``, the dashboard agent and the
client server on ``127.0.0.1`` *and* the node IP, the dashboard on ``--dashboard-host`` (KubeRay: ``0.0.0.0``); every
other port is random or bound on the node IP only. Without ``--node-ip-address`` a node on this host picks
``127.0.0.1``. So two Ray pods on one host (a head and its worker; two clusters) collide unless the kubelet, before a
container of a Ray pod (labels ``ray.io/cluster`` and ``ray.io/node-type``) starts, rewrites its ``ray start``:

* ``--node-ip-address=<pod IP>`` is added (unless given), so the node's own servers bind its pod IP;
* ``--dashboard-host=0.0.0.0`` becomes ``--dashboard-host=<pod IP>``: the dashboard stays on 8265, alone on its
  address, so the head Service's ``dashboard`` port, the API server's service proxy and a RayJob's dashboard URL
  reach it unchanged;
* the GCS port moves per cluster: the head's ``--port`` (default 6379) is set to a port derived from the cluster
  (its state dir), the namespace, the ``ray.io/cluster`` label and the port (:func:`.storeport.store_port`), and in
  every container of the cluster's pods ``<FQ_RAY_IP>:<port>`` (a worker's ``--address``, the ``wait-gcs-ready``
  init container's ``ray health-check --address``) and the ``RAY_ADDRESS``/``RAY_PORT`` values holding that port
  follow. The head Service keeps its ``gcs-server`` port 6379, which therefore does not reach the GCS from outside
  the pods;
* per pod: the client server's ``--ray-client-server-port`` (head only; default 10001), the dashboard agent's
  ``--dashboard-agent-listen-port`` (52365) and ``--metrics-export-port`` (8080) move to ports derived from the pod's
  name. The container's readiness and liveness probes on one of those ports follow (KubeRay probes the agent's
  ``/api/healthz`` on 52365).

Only the command line and env values are rewritten, before DNS names are (:mod:`.network`); the pod object keeps its
spec. Ports written elsewhere (a program's own ``ray.init(_node_ip_address=...)``) are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_elastic.localcluster.store import Obj
from airflow_elastic.localcluster.storeport import store_port

CLUSTER_LABEL, NODE_TYPE_LABEL = "ray.io/cluster", "ray.io/node-type"
#: ``ray start`` flags moved per pod, with Ray's (and KubeRay's) defaults; the client server runs on the head only.
PER_POD = {"dashboard-agent-listen-port": 52365, "metrics-export-port": 8080}
CLIENT_PORT, GCS_PORT = ("ray-client-server-port", 10001), 6379
_START = re.compile(r"\bray start\b(?P<head> --head\b)?")
_FLAG = r"--{name}[= ](?P<value>\S+)"


@dataclass
class RayPorts:
    """What the rewrite moved: ``{port as declared: port used}`` (probes follow it)."""

    moved: dict[int, int] = field(default_factory=dict)


def is_ray_pod(pod: Obj) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return bool(labels.get(CLUSTER_LABEL)) and labels.get(NODE_TYPE_LABEL) in ("head", "worker")


def _flag(command: str, name: str) -> str | None:
    found = re.search(_FLAG.format(name=re.escape(name)), command)
    return found["value"] if found else None


def _set_flag(command: str, name: str, value: str) -> str:
    """``command`` with ``--name=value``, replacing the flag's value or adding it right after ``ray start``."""
    pattern = re.compile(_FLAG.format(name=re.escape(name)))
    if pattern.search(command):
        return pattern.sub(lambda _: f"--{name}={value}", command, count=1)
    return _START.sub(lambda m: f"{m[0]} --{name}={value}", command, count=1)


def rewrite(
    pod: Obj, argv: list[str], env: Mapping[str, str], *, pod_ip: str, cluster: str
) -> tuple[list[str], dict[str, str], RayPorts]:
    """``argv`` and ``env`` of one container of the Ray pod ``pod`` with its ports moved (see the module docstring)."""
    meta = pod["metadata"]
    namespace, name, ray_cluster = meta["namespace"], meta["name"], meta["labels"][CLUSTER_LABEL]
    head = meta["labels"][NODE_TYPE_LABEL] == "head"
    ports = RayPorts()
    out_env = dict(env)
    gcs = env.get("RAY_PORT", "")
    declared_gcs = int(gcs) if gcs.isdigit() else GCS_PORT
    out_argv = []
    for arg in argv:
        if _START.search(arg):
            if head and (given := _flag(arg, "port")) is not None and given.isdigit():
                declared_gcs = int(given)
            arg = _rewrite_start(
                arg, head=head, pod_ip=pod_ip, cluster=cluster, namespace=namespace, pod=name, ports=ports
            )
        out_argv.append(arg)
    moved_gcs = store_port(cluster, namespace, f"raycluster/{ray_cluster}", declared_gcs)
    ports.moved[declared_gcs] = moved_gcs
    if head:
        out_argv = [_set_flag(a, "port", str(moved_gcs)) if _START.search(a) else a for a in out_argv]
    fqdn = env.get("FQ_RAY_IP", "")
    if fqdn:
        out_argv = [a.replace(f"{fqdn}:{declared_gcs}", f"{fqdn}:{moved_gcs}") for a in out_argv]
    address = env.get("RAY_ADDRESS", "")
    if address.endswith(f":{declared_gcs}"):
        out_env["RAY_ADDRESS"] = f"{address.rpartition(':')[0]}:{moved_gcs}"
    if gcs == str(declared_gcs):
        out_env["RAY_PORT"] = str(moved_gcs)
    return out_argv, out_env, ports


def _rewrite_start(
    command: str, *, head: bool, pod_ip: str, cluster: str, namespace: str, pod: str, ports: RayPorts
) -> str:
    """One ``ray start`` command line with the node IP, the dashboard host and the per-pod ports set."""
    if _flag(command, "node-ip-address") is None:
        command = _set_flag(command, "node-ip-address", pod_ip)
    if _flag(command, "dashboard-host") == "0.0.0.0":
        command = _set_flag(command, "dashboard-host", pod_ip)
    per_pod = dict(PER_POD)
    if head:
        per_pod[CLIENT_PORT[0]] = CLIENT_PORT[1]
    for flag, default in per_pod.items():
        given = _flag(command, flag)
        declared = int(given) if given and given.isdigit() else default
        moved = store_port(cluster, namespace, f"{pod}#ray-{flag}", declared)
        ports.moved[declared] = moved
        command = _set_flag(command, flag, str(moved))
    return command


def moved_probe(probe: Obj, ports: RayPorts) -> Obj:
    """``probe`` with an ``httpGet``/``tcpSocket`` port number that was moved replaced by where it moved."""
    out = dict(probe)
    for kind in ("httpGet", "tcpSocket"):
        spec = probe.get(kind)
        if spec and isinstance(spec.get("port"), int) and spec["port"] in ports.moved:
            out[kind] = {**spec, "port": ports.moved[spec["port"]]}
    return out
