"""The local cluster's API server: an aiohttp application over the store, on the process's one event loop.

Requests are authenticated with a bearer token, routed by the Kubernetes URL layout, and recorded (verb,
resource, client) so tests and benchmarks can count what clients really sent. Errors are ``metav1.Status``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

from aiohttp import web

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.api import handlers, metrics, openapi, proxy, scale, streams
from airflow_elastic.localcluster.api.handlers import Target, respond
from airflow_elastic.localcluster.clock import Clock
from airflow_elastic.localcluster.components import install
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.controller import Manager
from airflow_elastic.localcluster.faults.injector import PREFIXES as FAULT_PATHS
from airflow_elastic.localcluster.faults.injector import Faults
from airflow_elastic.localcluster.kubelet import Kubelet
from airflow_elastic.localcluster.podnet import PodNetwork
from airflow_elastic.localcluster.resources import PODS, lookup
from airflow_elastic.localcluster.store import Store

log = logging.getLogger(__name__)

#: Readable without a token, as ``system:public-info-viewer`` allows on a real cluster.
PUBLIC = frozenset({"/healthz", "/readyz", "/livez", "/version"})


class RequestLog:
    """The last requests the server answered (bounded), for :meth:`LocalCluster.requests`."""

    def __init__(self, size: int = 100_000):
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)
        self.total = 0

    def add(self, entry: dict[str, Any]) -> None:
        self.total += 1
        self.entries.append({"seq": self.total, **entry})

    def since(self, seq: int) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["seq"] > seq]


def parse_target(path: str) -> Target | None:
    """Map ``/api/v1/...`` or ``/apis/<group>/<version>/...`` to a resource, namespace, name and subresource."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        res = lookup(group, version, rest[2])
        if res is not None and res.namespaced:
            namespace, rest = rest[1], rest[2:]
    res = lookup(group, version, rest[0])
    if res is None or len(rest) > 3 or (namespace is None and res.namespaced and len(rest) > 1):
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in res.subresources | ({"binding"} if res is PODS else set()) | {"finalize"}:
        return None
    return Target(res, namespace, name, sub)


def _verb(request: web.Request, target: Target) -> str:
    method, watching = request.method, handlers.flag(request, "watch")
    if method == "GET":
        if watching:
            return "watch"
        return "get" if target.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    raise errors.MethodNotAllowed(f"the server does not allow this method on the requested resource: {method}")


def _body_bytes(response: web.StreamResponse) -> int:
    body = getattr(response, "body", None)  # a web.Response's; a StreamResponse has none
    if isinstance(body, bytes):
        return len(body)
    return response.sent if isinstance(response, streams.Stream) else response.body_length


def _status_response(err: errors.ApiError) -> web.Response:
    body = json.dumps(err.status()).encode()
    return web.Response(body=body, status=err.code, content_type="application/json", headers=err.headers or None)


class ApiServer:
    """The API server of one local cluster: store, controllers and the HTTP application."""

    def __init__(
        self,
        state_dir: Path,
        token: str,
        config: ClusterConfig | None = None,
        *,
        history: int = 20000,
        bookmark_seconds: float = 60.0,
        pod_network: PodNetwork | None = None,
    ):
        self.state_dir = state_dir
        self.pod_network = pod_network
        self.token = token
        self.bookmark_seconds = bookmark_seconds
        self.store = Store(state_dir / "state.db", history=history)
        self.manager = Manager(self.store)
        self.clock = Clock(state_dir)
        self.recorder = install(
            self.store,
            self.manager,
            config or ClusterConfig(),
            state_dir,
            api_address=lambda: self.pod_address or self.address,
            clock=self.clock,
            pod_network=pod_network,
        )
        self.faults = Faults(self.store, self.manager, self.recorder, state_dir, on_token=self._replace_token)
        kubelet = next(c for c in self.manager.controllers if isinstance(c, Kubelet))
        assert kubelet.stats is not None
        self.metrics = metrics.MetricsApi(self.store, kubelet.stats)
        self.service_proxy = proxy.ServiceProxy(self.store)
        self.requests = RequestLog()
        self.address = "127.0.0.1:0"
        #: Where pods in their own network namespaces reach the server (its address on the cluster's bridge).
        self.pod_address = ""
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    def _replace_token(self, token: str) -> None:
        self.token = token

    async def start(self) -> None:
        self.manager.start()
        self.metrics.scraper.start()

    async def stop(self) -> None:
        """Stop controllers (their shutdown hooks first), end watches and close the store."""
        self.store.close_watches()
        await self.manager.stop()
        await self.service_proxy.close()
        self.store.close()

    # --------------------------------------------------------------------------------------------- middleware

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        start = time.monotonic()
        request["audit"] = {"verb": request.method.lower(), "resource": "", "path": request.path}
        try:
            if request.path not in PUBLIC:
                self._authenticate(request)
            response = await handler(request)
        except asyncio.CancelledError:
            # The client closed a watch or followed log (handler_cancellation): it was still sent, and got its bytes.
            if (stream := request.get(streams.STREAM)) is not None:
                self._record(request, start, stream, closed=True)
            raise
        except errors.ApiError as err:
            response = _status_response(err)
        except ValueError as err:  # malformed query parameters or bodies
            response = _status_response(errors.BadRequest(f"the request could not be processed: {err}"))
        except Exception as err:
            log.exception("%s %s failed", request.method, request.path_qs)
            response = _status_response(errors.ApiError(f"an error on the server ({err!r}) has prevented the request"))
        if request.path.startswith("/debug/"):
            return response  # reading the log does not count as a request
        self._record(request, start, response)
        return response

    def _record(self, request: web.Request, start: float, response: web.StreamResponse, closed: bool = False) -> None:
        """Log one answered request; ``closed``: a stream the client closed before the server ended it."""
        entry = request["audit"]
        entry |= {
            "method": request.method,
            "query": request.query_string,
            "code": response.status,
            # A plain reply's body, or what a stream (watch, followed log) wrote so far.
            "bytes": _body_bytes(response),
            "user_agent": request.headers.get("User-Agent", ""),
            "seconds": round(time.monotonic() - start, 6),
            "closed_by_client": closed,
        }
        self.requests.add(entry)

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.token.encode()):
            raise errors.Unauthorized("Unauthorized")

    # ---------------------------------------------------------------------------------------------- routing

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        if path.startswith("/debug/requests"):
            since = int(request.query.get("since") or 0)
            return respond({"total": self.requests.total, "items": self.requests.since(since)})
        if path.startswith(FAULT_PATHS):
            return respond(await self.faults.handle(request, path))
        if path == "/debug/clock":
            body = await request.json() if request.method == "POST" and request.can_read_body else {}
            return respond(self.clock.handle(request.method, body if isinstance(body, dict) else {}))
        if (proxied := proxy.parse(path)) is not None:
            return await self._proxy(request, proxied)
        if (measured := metrics.parse(path)) is not None:
            plural, namespace, name = measured
            audit = request["audit"]
            resource = f"{plural}.metrics.k8s.io"
            audit |= {
                "verb": "get" if name else "list",
                "resource": resource,
                "namespace": namespace or "",
                "name": name or "",
            }
            return await self.faults.api.serve(request, audit, lambda: self._metrics(request, measured))
        target = parse_target(path)
        if target is None:
            return self._non_resource(request, path.rstrip("/") or "/")
        audit = request["audit"]
        audit |= {
            "verb": _verb(request, target),
            "resource": target.res.key,
            "subresource": target.subresource or "",
            "namespace": target.namespace or "",
            "name": target.name or "",
        }
        return await self.faults.api.serve(request, audit, lambda: self._resource(request, target, audit["verb"]))

    async def _proxy(self, request: web.Request, target: proxy.ProxyTarget) -> web.StreamResponse:
        """``services/{name}/proxy``: audited and fault-injected like a resource request."""
        audit = request["audit"]
        audit |= {
            "verb": proxy.VERBS.get(request.method, request.method.lower()),
            "resource": "services",
            "subresource": "proxy",
            "namespace": target.namespace,
            "name": target.service_id,
        }
        return await self.faults.api.serve(request, audit, lambda: self.service_proxy.serve(request, target))

    async def _metrics(self, request: web.Request, measured: tuple[str, str | None, str | None]) -> web.StreamResponse:
        return self.metrics.serve(request, *measured)

    async def _resource(self, request: web.Request, target: Target, verb: str) -> web.StreamResponse:
        store, sub = self.store, target.subresource
        if sub == "log":
            if verb != "get":
                raise errors.MethodNotAllowed(f"{verb} is not supported on pods/log")
            return await streams.logs(request, store, target, self.state_dir)
        if sub in ("eviction", "binding"):
            if verb != "create":
                raise errors.MethodNotAllowed(f"{verb} is not supported on pods/{sub}")
            return await handlers.pod_action(request, store, target)
        if sub and verb not in ("get", "update", "patch"):
            raise errors.MethodNotAllowed(f"{verb} is not supported on {target.res.plural}/{sub}")
        if sub == "scale":
            return await scale.serve(request, store, target, verb)
        return await self._verb(request, target, verb)

    async def _verb(self, request: web.Request, target: Target, verb: str) -> web.StreamResponse:
        """A resource, or a subresource served like one (``status``), by verb."""
        store = self.store
        if verb == "watch":
            return await streams.watch(request, store, target, self.bookmark_seconds)
        if verb == "get":
            return handlers.get(request, store, target)
        if verb == "list":
            return handlers.list_(request, store, target)
        if verb == "create":
            if target.name:
                raise errors.MethodNotAllowed("POST is not allowed on a named resource")
            return await handlers.create(request, store, target)
        if verb == "update":
            return await handlers.update(request, store, target)
        if verb == "patch":
            if not target.name:
                raise errors.MethodNotAllowed("PATCH is not allowed on a collection")
            return await handlers.patch_(request, store, target)
        if verb == "delete":
            return await handlers.delete(request, store, target)
        return await handlers.delete_collection(request, store, target)

    def _non_resource(self, request: web.Request, path: str) -> web.StreamResponse:
        if request.method != "GET":
            raise errors.MethodNotAllowed(f"the server does not allow this method on {path}")
        request["audit"] |= {"verb": "get", "resource": path}
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        parts = [p for p in path.split("/") if p]
        body: Any = None
        if path == "/version":
            body = openapi.KUBERNETES_VERSION
        elif path == "/api":
            body = openapi.api_versions(self.address)
        elif path == "/apis":
            body = openapi.api_group_list()
        elif parts[0] == "api" and len(parts) == 2:
            body = openapi.resource_list("", parts[1])
        elif parts[0] == "apis" and len(parts) == 2:
            body = openapi.api_group(parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            body = openapi.resource_list(parts[1], parts[2])
        elif path == "/openapi/v3":
            body = openapi.root_document()
        elif parts[:2] == ["openapi", "v3"] and len(parts) in (4, 5):
            document = openapi.document(parts[3] if len(parts) == 5 else "", parts[-1])
            if document is not None:
                return web.Response(body=document, content_type="application/json")
        if body is None:
            raise errors.NotFound("the server could not find the requested resource", details={})
        return respond(body)
