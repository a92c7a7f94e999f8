"""The ``services/proxy`` subresource: ``/api/v1/namespaces/{ns}/services/[scheme:]{name}[:port]/proxy/{path}``.

As kube-apiserver serves it (``pkg/registry/core/service/storage/storage.go`` ``ResourceLocation``,
``apimachinery/pkg/util/net`` ``SplitSchemeNamePort``): a numeric port is mapped to the Service port's name, the
Service's endpoints (:mod:`..endpoints`: ready, not terminating) are looked up, and the request goes to a random
endpoint address that has that port; without one the answer is 503 ``no endpoints available for service
"<id>"``. The client's ``Authorization`` header is not forwarded (the authentication filter removes it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from airflow_elastic.localcluster import endpoints, errors
from airflow_elastic.localcluster.resources import SERVICES
from airflow_elastic.localcluster.store import Store

_FORWARDED = ("Content-Type", "Accept", "Accept-Encoding", "User-Agent")
#: HTTP method -> the RBAC verb of the request (``services/proxy`` is authorised per verb, like any resource).
VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class ServiceUnavailable(errors.ApiError):
    code, reason = 503, "ServiceUnavailable"


@dataclass(frozen=True)
class ProxyTarget:
    namespace: str
    service_id: str  # [scheme:]name[:port], as in the URL
    path: str  # the path after .../proxy, with its leading slash


def parse(path: str) -> ProxyTarget | None:
    """A services/proxy URL, or ``None`` for any other path."""
    parts = path.split("/")
    # "", "api", "v1", "namespaces", ns, "services", id, "proxy", ...rest
    if len(parts) < 8 or parts[1:4] != ["api", "v1", "namespaces"] or parts[5] != "services" or parts[7] != "proxy":
        return None
    return ProxyTarget(parts[4], parts[6], "/" + "/".join(parts[8:]))


def split_scheme_name_port(service_id: str) -> tuple[str, str, str]:
    """``SplitSchemeNamePort``: ``name``, ``name:port`` or ``scheme:name:port`` (scheme ``http``/``https``)."""
    parts = service_id.split(":")
    if len(parts) > 3:
        raise errors.BadRequest(f'invalid service request "{service_id}"')
    scheme, name, port = parts if len(parts) == 3 else ["", *parts, ""][:3]
    if not name or scheme not in ("", "http", "https"):
        raise errors.BadRequest(f'invalid service request "{service_id}"')
    return scheme, name, port


def location(store: Store, target: ProxyTarget) -> tuple[str, str, int]:
    """``ResourceLocation``: (scheme, ip, port) of one ready endpoint of the Service."""
    scheme, name, port = split_scheme_name_port(target.service_id)
    service = store.find(SERVICES, target.namespace, name)
    ports = ((service or {}).get("spec") or {}).get("ports") or []
    if port.isdigit():
        if service is None:
            raise errors.NotFound.of("services", name)
        match = next((p for p in ports if p.get("port") == int(port)), None)
        if match is None:
            raise ServiceUnavailable(f'no service port {port} found for service "{name}"')
        port = match.get("name") or ""
    if service is None or not (service.get("spec") or {}).get("selector"):
        raise errors.NotFound.of("endpoints", name)  # the endpoints controller writes them only for a selector
    if not endpoints.has_subsets(store, service):
        raise ServiceUnavailable(f'no endpoints available for service "{name}"')
    service_port = next((p for p in ports if (p.get("name") or "") == port), None)
    found = endpoints.addresses(store, service, service_port) if service_port else []
    if not found:
        raise ServiceUnavailable(f'no endpoints available for service "{target.service_id}"')
    pod, number = random.choice(found)
    return scheme or "http", pod["status"]["podIP"], number


class ServiceProxy:
    """Forwards requests to endpoints over one shared HTTP client session."""

    def __init__(self, store: Store):
        self.store = store
        self._session: aiohttp.ClientSession | None = None

    async def serve(self, request: web.Request, target: ProxyTarget) -> web.Response:
        if request.method not in VERBS:
            raise errors.MethodNotAllowed(f"{request.method} is not supported on services/proxy")
        scheme, ip, port = location(self.store, target)
        path = target.path
        if path == "/" and request.query.get("path"):  # connect_*_namespaced_service_proxy(path=...)
            path = "/" + request.query["path"].lstrip("/")
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=300))
        headers = {h: request.headers[h] for h in _FORWARDED if h in request.headers}
        headers["X-Forwarded-For"] = request.remote or ""
        url = f"{scheme}://{ip}:{port}{path}"
        body: Any = await request.read() if request.can_read_body else None
        try:
            async with self._session.request(
                request.method, url, params=request.query, data=body, headers=headers, ssl=False, allow_redirects=False
            ) as reply:
                content = await reply.read()
                kept = {h: reply.headers[h] for h in ("Content-Type", "Content-Encoding") if h in reply.headers}
                return web.Response(body=content, status=reply.status, headers=kept)
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise ServiceUnavailable(f"error trying to reach service: {err}") from err

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
