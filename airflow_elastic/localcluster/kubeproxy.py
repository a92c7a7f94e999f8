"""Service virtual IPs where pods have network namespaces (mode ``netns``): a userspace kube-proxy.

On a cluster a Service's name resolves (cluster DNS) to its cluster IP, and kube-proxy sends each new connection
to that IP and a Service port to one of the Service's ready endpoints *at connect time*: a client that keeps a
Service's address reaches whichever pods are its endpoints now. Without it, the kubelet would have to write an
endpoint's pod IP into a container's command and env when the container starts (what mode ``loopback`` does,
:mod:`.endpoints`), and a client started while a lost pod was still an endpoint would keep the dead address (a
KubeRay submitter waiting for the GCS of a head that vanished with its node).

This is kube-proxy's ``userspace`` mode (kubernetes ``pkg/proxy/userspace/proxier.go`` and ``proxysocket.go``,
removed in 1.26; the iptables and nftables modes that replaced it do the same per connection in the kernel):

* **A virtual IP per Service** that is not headless, from the cluster's ``x.y.0.2`` … ``x.y.0.254`` (the gateway's
  ``/24``, where no pod IP is assigned), added to the cluster's bridge as a ``/32``: pods reach it on their link,
  and it goes with the bridge. Given when the Service appears and released when it goes. The cluster DNS answers
  it for the Service's name (:mod:`.clusterdns`), and the kubelet writes it for that name in commands and env
  (:mod:`.network`), keeping the port, as a resolver would. The local API server allocates
  no ``spec.clusterIP`` (:mod:`.admission.service`), so the object does not show it.
* **A listener per Service port** (TCP) on that IP and the Service's port; ports added to or removed from the
  Service are opened or closed.
* **Each connection** goes to the next ready endpoint, round robin (``LoadBalancerRR.NextEndpoint``), computed as the
  endpoints controller does (:func:`.endpoints.addresses`) when the connection arrives. A dial that fails or times
  out moves to the next endpoint with the next of ``EndpointDialTimeouts`` (250 ms, 500 ms, 1 s, 2 s:
  ``TryConnectEndpoints``); with no endpoint, or after the last timeout, the client's connection is closed. Bytes
  are then copied both ways, each direction half-closed when its source ends (``ProxyTCP``/``copyBytes``).

Session affinity and UDP are not implemented.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable

from airflow_elastic.localcluster import endpoints
from airflow_elastic.localcluster.controller import Controller, Key, own_key
from airflow_elastic.localcluster.resources import SERVICES
from airflow_elastic.localcluster.store import Obj, Store

log = logging.getLogger(__name__)

#: ``proxysocket.go`` ``EndpointDialTimeouts``: one dial per entry, each to the next endpoint.
DIAL_TIMEOUTS = (0.25, 0.5, 1.0, 2.0)
_CHUNK = 64 * 1024


def _headless(service: Obj) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == "None"


def _tcp_ports(service: Obj) -> set[int]:
    ports = (service.get("spec") or {}).get("ports") or []
    return {int(p["port"]) for p in ports if p.get("protocol", "TCP") == "TCP" and p.get("port")}


class Proxier(Controller):
    """Virtual IPs and listeners for the cluster's Services (see the module docstring)."""

    name = "kube-proxy"

    def __init__(
        self,
        store: Store,
        subnet: ipaddress.IPv4Network,
        add_address: Callable[[str], None],
        remove_address: Callable[[str], None],
    ):
        super().__init__(store)
        self.watches = {SERVICES.key: own_key}
        gateway_block = ipaddress.IPv4Network((subnet.network_address, 24))
        self._free = [str(ip) for ip in gateway_block.hosts()][1:]  # .1 is the gateway
        self._add_address, self._remove_address = add_address, remove_address
        self._vips: dict[Key, str] = {}
        self._listeners: dict[Key, dict[int, asyncio.Task[None]]] = {}
        self._next: dict[tuple[Key, int], int] = {}

    def vip(self, namespace: str, name: str) -> str | None:
        """The virtual IP of a Service that is not headless (served from now on), else None."""
        key = (namespace, name)
        service = self.store.find(SERVICES, namespace, name)
        if service is None or _headless(service):
            return None
        self._sync(key, service)
        return self._vips.get(key)

    async def reconcile(self, key: Key) -> float | None:
        service = self.store.find(SERVICES, *key)
        if service is None or _headless(service):
            self._release(key)
        else:
            self._sync(key, service)
        return None

    def _sync(self, key: Key, service: Obj) -> None:
        vip = self._vips.get(key)
        if vip is None:
            if not self._free:
                log.warning("no virtual IP left for Service %s/%s: %d Services have one", *key, len(self._vips))
                return
            vip = self._free[0]
            try:
                self._add_address(vip)
            except OSError as err:
                log.warning("Service %s/%s: cannot add its virtual IP: %s", *key, err)
                return
            self._vips[key] = self._free.pop(0)
        listeners = self._listeners.setdefault(key, {})
        wanted = _tcp_ports(service)
        for port in set(listeners) - wanted:
            listeners.pop(port).cancel()
        for port in wanted - set(listeners):
            try:
                sock = socket.create_server((vip, port), reuse_port=False)
            except OSError as err:
                log.warning("Service %s/%s: cannot listen on %s:%d: %s", *key, vip, port, err)
                continue
            listeners[port] = asyncio.get_running_loop().create_task(self._serve(key, port, sock))

    def _release(self, key: Key) -> None:
        for task in self._listeners.pop(key, {}).values():
            task.cancel()
        for pair in [pair for pair in self._next if pair[0] == key]:
            del self._next[pair]
        vip = self._vips.pop(key, None)
        if vip is not None:
            self._remove_address(vip)
            self._free.append(vip)

    def close(self) -> None:
        """Stop every listener (at server stop; the addresses go with the bridge)."""
        for tasks in self._listeners.values():
            for task in tasks.values():
                task.cancel()
        self._listeners.clear()

    async def _serve(self, key: Key, port: int, sock: socket.socket) -> None:
        try:
            server = await asyncio.start_server(lambda r, w: self._proxy(key, port, r, w), sock=sock)
            await server.serve_forever()  # cancelled: the server closes
        finally:
            sock.close()

    async def _proxy(self, key: Key, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await self._connect(key, port)
            if upstream is None:
                return
            up_reader, up_writer = upstream
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()

    async def _connect(self, key: Key, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """``TryConnectEndpoints``: the next ready endpoint per dial timeout, the endpoints read anew each time."""
        for timeout in DIAL_TIMEOUTS:
            service = self.store.find(SERVICES, *key)
            port_spec = endpoints.service_port(service, port) if service else None
            found = endpoints.addresses(self.store, service, port_spec) if service and port_spec else []
            if not found:
                log.debug("Service %s/%s port %d: no endpoint", *key, port)
                return None
            turn = self._next.get((key, port), 0) % len(found)
            self._next[(key, port)] = turn + 1
            pod, target = found[turn]
            ip = pod["status"]["podIP"]
            try:
                return await asyncio.wait_for(asyncio.open_connection(ip, target), timeout)
            except (OSError, TimeoutError) as err:
                log.debug("Service %s/%s port %d: dial %s:%d failed: %r", *key, port, ip, target, err)
        return None


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until ``source`` ends, then half-close ``sink``; a reset on either side ends the copy."""
    with contextlib.suppress(OSError):
        while chunk := await source.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
