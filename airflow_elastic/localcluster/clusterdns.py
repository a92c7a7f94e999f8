"""Cluster DNS where pods have network namespaces (mode ``netns``): names resolved when a program looks them up.

On a cluster a pod's ``/etc/resolv.conf`` points at the cluster's DNS server and searches its namespace (kubelet
``pkg/kubelet/network/dns/dns.go``, ``ClusterFirst``: ``search <ns>.svc.cluster.local svc.cluster.local
cluster.local``, ``options ndots:5``), and the server (CoreDNS's ``kubernetes`` plugin, after the `DNS-based service
discovery specification <https://github.com/kubernetes/dns/blob/master/docs/specification.md>`_) answers from the API:

* ``<svc>.<ns>.svc.cluster.local``: a Service's cluster IP (here its virtual IP, :mod:`.kubeproxy`); for a headless
  Service the IPs of its ready endpoints (every endpoint with ``publishNotReadyAddresses``), so a client that
  looks the name up again finds the endpoints of the moment: a KubeRay submitter that waits for a head which
  vanished with its node reaches the replacement head once it is an endpoint;
* ``<hostname>.<subdomain>.<ns>.svc.cluster.local``: a pod's IP (its hostname in a headless Service's subdomain);
  here the IP of that DNS identity, as :mod:`.network` assigns it, so before the pod runs as well;
* ``<a-b-c-d>.<ns>.pod.cluster.local``: the IP ``a.b.c.d``.

Anything else is ``NXDOMAIN``: pods reach nothing beyond the host (:mod:`.podnet`), so there is no upstream to
forward to. ``A`` queries only carry addresses (IPv4 pods); others get an empty answer for a name that exists.
The server listens on the gateway (UDP port 53); each pod's sandbox bind-mounts its namespace's ``resolv.conf``
on ``/etc/resolv.conf`` in a mount namespace of its own (:class:`.podnet.Sandbox`). The kubelet still writes
names whose answer never changes (a pod's identity, a Service's virtual IP) into commands and env before a
container starts (:mod:`.network`); a headless Service's name, whose answer changes, is left to this server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

from airflow_elastic.localcluster import endpoints
from airflow_elastic.localcluster.network import Network
from airflow_elastic.localcluster.podnet import DOMAIN
from airflow_elastic.localcluster.resources import SERVICES
from airflow_elastic.localcluster.store import Store

log = logging.getLogger(__name__)

#: CoreDNS's default TTL for the ``kubernetes`` plugin (``ttl``, 5 s).
TTL = 5
PORT = 53


class ClusterDNS(asyncio.DatagramProtocol):
    """Answers the cluster's names from the store (see the module docstring)."""

    def __init__(self, store: Store, network: Network):
        self.store, self.network = store, network
        self.transport: asyncio.DatagramTransport | None = None
        self.starting: asyncio.Task[object] | None = None  # the endpoint's creation (the socket is bound already)

    def addresses(self, name: str) -> list[str] | None:
        """The IPv4 addresses of ``name`` (no trailing dot); None if it does not exist."""
        labels = name.lower().rstrip(".").split(".")
        if labels[-2:] != DOMAIN.split(".") or len(labels) < 5:
            return None
        kind, namespace, head = labels[-3], labels[-4], labels[:-4]
        if kind == "pod" and len(head) == 1:
            try:
                return [str(ipaddress.IPv4Address(head[0].replace("-", ".")))]
            except ValueError:
                return None
        if kind != "svc":
            return None
        if len(head) == 1:
            return self._service(namespace, head[0])
        if len(head) == 2 and self.network.has_subdomain(namespace, head[1]):
            return [self.network.ip_for(f"{namespace}/{head[0]}.{head[1]}")]
        return None

    def _service(self, namespace: str, name: str) -> list[str] | None:
        service = self.store.find(SERVICES, namespace, name)
        if service is None:
            return None
        if (service.get("spec") or {}).get("clusterIP") != "None":
            vip = self.network.vip(namespace, name) if self.network.vip else None
            return [vip] if vip else []
        return [pod["status"]["podIP"] for pod, ready in endpoints.members(self.store, service) if ready]

    def reply(self, wire: bytes) -> bytes | None:
        """The response to a query in wire format (None for what is not a query)."""
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException:
            return None
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        for question in query.question:
            found = self.addresses(question.name.to_text(omit_final_dot=True))
            if found is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype in (dns.rdatatype.A, dns.rdatatype.ANY) and found:
                response.answer.append(dns.rrset.from_text_list(question.name, TTL, "IN", "A", found))
        return response.to_wire()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        try:
            answer = self.reply(data)
        except Exception:  # a server that answers nothing is worse than one that answers SERVFAIL
            log.exception("cluster DNS: cannot answer a query from %s", addr)
            return
        if answer is not None and self.transport is not None:
            self.transport.sendto(answer, addr)


def serve(store: Store, network: Network, address: str) -> ClusterDNS | None:
    """Start the cluster's DNS server on ``address`` (UDP port 53); None, with a warning, where the port cannot be
    had (pods then resolve no cluster name, and the kubelet writes every one as an IP, as in mode ``loopback``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((address, PORT))
    except OSError as err:
        sock.close()
        log.warning("no cluster DNS (%s:%d: %s): names are written as IPs when containers start", address, PORT, err)
        return None
    server = ClusterDNS(store, network)
    log.info("cluster DNS on %s:%d (pods resolve cluster names through it)", address, PORT)
    loop = asyncio.get_running_loop()
    server.starting = loop.create_task(loop.create_datagram_endpoint(lambda: server, sock=sock))
    return server
