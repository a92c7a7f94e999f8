"""Pod IPs on one host and cluster DNS names rewritten to those IPs.

Where pods cannot have network namespaces (mode ``loopback``, see :mod:`.podnet`) there is neither a pod network
nor a cluster DNS, so the local cluster makes two explicit, documented substitutions (with namespaces, pods also
have a cluster DNS, :mod:`.clusterdns`, and the second one shrinks to names whose answer never changes):

* **Pod IPs.** Each pod gets its own address (``status.podIP``): with pod network namespaces (mode ``netns``) in
  the cluster's subnet (:mod:`.podnet`; ``x.y.0.*`` is left to the gateway), else a loopback address in
  ``127.0.0.0/8`` outside ``127.0.0.0/24`` (Linux routes the whole /8 to ``lo``). The address is derived from the
  pod's DNS identity,
  ``<namespace>/<hostname>.<subdomain>`` (hostname defaults to the pod name), by hashing; collisions move to the
  next hash. Assignments are kept in ``<state_dir>/network.json``, so a recreated pod with the same hostname and
  subdomain (a restarted JobSet worker) gets the same IP, also across cluster restarts (two pods with one
  identity alive at once, e.g. a replacement starting while its predecessor terminates, share the IP). The IP of
  a pod without ``spec.hostname`` is released when the pod is deleted; assignments of another subnet (a previous
  run in another mode or subnet) are forgotten. In mode ``loopback`` a server that binds its pod IP never collides
  with another pod's server on the same port; a server binding ``0.0.0.0`` shares the host's port space with every
  other pod and with the host itself (torchrun's rendezvous port is therefore moved per rendezvous,
  :mod:`.storeport`). In mode ``netns`` each pod has its own ports.
* **DNS names.** Before a container starts, the kubelet rewrites, in its command, args and env values:

  - ``<hostname>.<subdomain>`` and the same followed by ``.<ns>``, ``.<ns>.svc`` or ``.<ns>.svc.cluster.local``,
    where ``<subdomain>`` is a headless Service or a pod subdomain of that namespace, to the IP of that hostname
    (computed from the name, so a pod that is not scheduled yet is reachable once it starts);
  - headless Service names: ``<svc>.<ns>.svc[.cluster.local]`` anywhere, and a bare ``<svc>`` or ``<svc>.<ns>``
    only as a whole value of the form ``<svc>:<port>`` or as a URL host (``scheme://<svc>[:port][/...]``) — a
    plain ``<svc>`` is left alone, since it is often just the group's name — to the IP of the first selected,
    non-terminal pod (ready ones first, then by hostname); a Service without such a pod is left unresolved, like
    a name without endpoints. Not where pods have the cluster DNS (mode ``netns``, :mod:`.clusterdns`), which
    answers with the Service's endpoints of the moment when the name is looked up;
  - in env values only (and without the cluster DNS), also a bare ``<svc>`` or ``<svc>.<ns>`` that is the whole
    value of a variable named ``*_ADDR`` or ``*_HOST`` (an address by its name): training-operator v1 sets
    ``MASTER_ADDR=<job>-master-0``, the name of the master's own headless Service;
  - names of non-headless Services: to their virtual IP (mode ``netns``, :mod:`.kubeproxy`), else with a port to a
    ready endpoint's ``<IP>:<targetPort>`` (:mod:`.endpoints`).

  Names a program builds at run time (e.g. from ``HOSTNAME``) or reads from files are not rewritten, and
  ``socket.gethostname()`` returns the host's name (mode ``loopback``) or the pod's IP (mode ``netns``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Callable
from pathlib import Path

from airflow_elastic.localcluster import endpoints
from airflow_elastic.localcluster.resources import PODS, SERVICES
from airflow_elastic.localcluster.selectors import match_label_selector
from airflow_elastic.localcluster.store import Obj, Store

#: The fallback's pod addresses (network mode ``loopback``); with pod namespaces, the cluster's subnet (:mod:`.podnet`).
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_END = r"(?![\w-]|\.[\w-])"
#: Env variables whose whole value may be a bare headless Service name (see the module docstring).
ADDRESS_SUFFIXES = ("_ADDR", "_HOST")


def identity(pod: Obj) -> str:
    """``<namespace>/<hostname>[.<subdomain>]``: what a pod's IP is derived from."""
    spec = pod.get("spec") or {}
    host = spec.get("hostname") or pod["metadata"]["name"]
    sub = spec.get("subdomain")
    return f"{pod['metadata']['namespace']}/{host}.{sub}" if sub else f"{pod['metadata']['namespace']}/{host}"


def _candidate(ident: str, attempt: int, space: ipaddress.IPv4Network = LOOPBACK) -> str | None:
    digest = hashlib.sha256(f"{ident}#{attempt}".encode()).digest()
    offset = int.from_bytes(digest[:4], "big") % space.num_addresses
    ip = space.network_address + offset
    octets = ip.packed
    if space == LOOPBACK and octets[1] == 0 and octets[2] == 0:  # 127.0.0.0/24 belongs to the host
        return None
    if octets[3] in (0, 255) or (space != LOOPBACK and offset < 256):  # a pod subnet's x.y.0.* is the gateway's
        return None
    return str(ip)


class Network:
    """Pod IP assignment (persistent) and DNS-name rewriting for the processes of pods."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        space: ipaddress.IPv4Network = LOOPBACK,
        vip: endpoints.VirtualIPs | None = None,
    ):
        self.store = store
        self.space = space
        self.vip = vip  # Services' virtual IPs (mode netns: .kubeproxy)
        #: Pods look names up in the cluster DNS (mode netns, :mod:`.clusterdns`): headless Service names, whose
        #: answer changes with the Service's endpoints, are left to it.
        self.cluster_dns = False
        self._path = state_dir / "network.json"
        self._by_identity: dict[str, str] = {}
        if self._path.exists():
            saved = json.loads(self._path.read_text())
            if "ips" not in saved:  # before pod namespaces: identities and loopback IPs only
                saved = {"space": str(LOOPBACK), "ips": saved}
            if saved["space"] == str(space):  # another subnet (or mode) than last run: the IPs are new
                self._by_identity = saved["ips"]
        self._taken = set(self._by_identity.values())

    def ip_for(self, ident: str) -> str:
        """The IP of a DNS identity (assigned on first use, then fixed)."""
        if ident in self._by_identity:
            return self._by_identity[ident]
        attempt = 0
        while True:
            ip = _candidate(ident, attempt, self.space)
            attempt += 1
            if ip is not None and ip not in self._taken:
                break
        self._by_identity[ident] = ip
        self._taken.add(ip)
        self._save()
        return ip

    def _save(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"space": str(self.space), "ips": self._by_identity}, indent=0, sort_keys=True))
        tmp.replace(self._path)

    def pod_ip(self, pod: Obj) -> str:
        return self.ip_for(identity(pod))

    def release(self, pod: Obj) -> None:
        """Forget the IP of a deleted pod that had no ``spec.hostname`` (its identity, the pod name, will not come
        back); hostname-based identities keep their IP for the pod's successors."""
        if (pod.get("spec") or {}).get("hostname"):
            return
        ip = self._by_identity.pop(identity(pod), None)
        if ip is not None:
            self._taken.discard(ip)
            self._save()

    # ------------------------------------------------------------------------------------------ DNS names

    def _subdomains(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for svc in self.store.items(SERVICES):
            if (svc.get("spec") or {}).get("clusterIP") == "None":
                found.setdefault(svc["metadata"]["namespace"], set()).add(svc["metadata"]["name"])
        for pod in self.store.items(PODS):
            if sub := (pod.get("spec") or {}).get("subdomain"):
                found.setdefault(pod["metadata"]["namespace"], set()).add(sub)
        return found

    def has_subdomain(self, namespace: str, name: str) -> bool:
        """Whether ``name`` is a headless Service or a pod subdomain in ``namespace``: its hosts resolve."""
        return name in self._subdomains().get(namespace, set())

    def _service_ip(self, namespace: str, name: str) -> str | None:
        svc = self.store.find(SERVICES, namespace, name)
        if svc is None or (svc.get("spec") or {}).get("clusterIP") != "None":
            return None
        selector = (svc.get("spec") or {}).get("selector")
        if not selector:
            return None
        pods = [
            p
            for p in self.store.items(PODS, namespace)
            if match_label_selector({"matchLabels": selector}, p["metadata"].get("labels") or {})
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        if not pods:
            return None

        def order(p: Obj) -> tuple[bool, str, str]:
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p.get("status", {}).get("conditions") or []
            )
            return (not ready, p["spec"].get("hostname") or p["metadata"]["name"], p["metadata"]["name"])

        return self.pod_ip(min(pods, key=order))

    def rewriter(self, pod: Obj) -> Callable[..., str]:
        """A function rewriting the cluster DNS names in a string for a container of ``pod``."""
        own_ns = pod["metadata"]["namespace"]
        subdomains = self._subdomains()
        subdomains.setdefault(own_ns, set())
        if sub := (pod.get("spec") or {}).get("subdomain"):
            subdomains[own_ns].add(sub)
        all_subs = sorted({s for subs in subdomains.values() for s in subs}, key=len, reverse=True)
        services = {
            (svc["metadata"]["namespace"], svc["metadata"]["name"])
            for svc in self.store.items(SERVICES)
            if (svc.get("spec") or {}).get("clusterIP") == "None"
        }
        host_re = (
            re.compile(
                rf"(?<![\w.-])({_LABEL})\.({'|'.join(map(re.escape, all_subs))})"
                rf"(?:\.({_LABEL})(?:\.svc(?:\.cluster\.local)?)?)?{_END}"
            )
            if all_subs
            else None
        )
        svc_re = re.compile(rf"(?<![\w.-])({_LABEL})\.({_LABEL})\.svc(?:\.cluster\.local)?{_END}")
        url_re = re.compile(rf"^([a-z][a-z0-9+.-]*://)({_LABEL})(?:\.({_LABEL}))?(?=$|:\d|/)")
        host_port_re = re.compile(rf"^()({_LABEL})(?:\.({_LABEL}))?(?=:\d+$)")
        bare_re = re.compile(rf"^()({_LABEL})(?:\.({_LABEL}))?$")

        def host(m: re.Match[str]) -> str:
            ns = m.group(3) or own_ns
            if m.group(2) not in subdomains.get(ns, ()):
                return m.group(0)
            return self.ip_for(f"{ns}/{m.group(1)}.{m.group(2)}")

        def service(m: re.Match[str], name_group: int, ns_group: int) -> str:
            ns = m.group(ns_group) or own_ns
            if (ns, m.group(name_group)) not in services:
                return m.group(0)
            ip = self._service_ip(ns, m.group(name_group))
            if ip is None:
                return m.group(0)
            return m.group(0)[: m.start(name_group) - m.start(0)] + ip

        cluster_ip = endpoints.cluster_ip_rewriter(self.store, own_ns, self.vip)

        def rewrite(text: str, *, address: bool = False) -> str:
            """``address``: ``text`` is the value of an address variable (a bare Service name resolves too)."""
            text = cluster_ip(text)
            if host_re is not None:
                text = host_re.sub(host, text)
            if self.cluster_dns:
                return text
            text = svc_re.sub(lambda m: service(m, 1, 2), text)
            text = url_re.sub(lambda m: service(m, 2, 3), text, count=1)
            if address:
                text = bare_re.sub(lambda m: service(m, 2, 3), text, count=1)
            return host_port_re.sub(lambda m: service(m, 2, 3), text, count=1)

        return rewrite
