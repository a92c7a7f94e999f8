"""API faults: what a loaded, flaky or restarting API server does to clients, injected per verb and resource.

A rule matches requests by ``verb`` (get, list, watch, create, update, patch, delete, deletecollection),
``resource`` (a plural or key, e.g. ``pods`` or ``jobsets.jobset.x-k8s.io``) and ``namespace`` (each optional), for
``count`` requests and/or ``seconds`` (a window; neither: until cleared). Kinds:

* ``error`` — a ``metav1.Status`` with ``code`` 429 (``Retry-After`` and ``details.retryAfterSeconds``), 500,
  503 (``Retry-After``), 504 or 401, as the real server words them;
* ``latency`` — the response is delayed by ``latency`` seconds (or uniformly within ``[low, high]``, seeded);
* ``gone`` — a matching watch gets an in-stream ``ERROR`` event with a 410 ``Expired`` Status (a compacted
  resourceVersion), so clients must relist.

Besides rules: :meth:`ApiFaults.drop_watches` breaks open watch (and followed log) connections (TCP abort, as a
load balancer dropping them), and :func:`airflow_elastic.localcluster.credentials.expire_token` replaces the cluster's
token (old one → 401, the new one is in the ``token`` file and the kubeconfig), so clients must reload their
credentials.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from airflow_elastic.localcluster import errors

KINDS = ("error", "latency", "gone")
_ERRORS: dict[int, tuple[str, str]] = {
    401: ("Unauthorized", "Unauthorized"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing"),
}


@dataclass
class Rule:
    """One injected API fault (see the module docstring)."""

    kind: str
    code: int = 500
    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    count: int | None = None
    seconds: float | None = None
    retry_after: int = 1
    latency: float | list[float] = 0.0
    id: int = 0
    hits: int = 0
    expires: float | None = field(default=None, repr=False)

    def matches(self, verb: str, resource: str, namespace: str) -> bool:
        if self.verb and self.verb != verb:
            return False
        if self.resource and self.resource not in (resource, resource.split(".", 1)[0]):
            return False
        return not (self.namespace and self.namespace != namespace)

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "expires" and v is not None}


def status_error(code: int, retry_after: int) -> errors.ApiError:
    if code not in _ERRORS:
        raise errors.BadRequest(f"unsupported fault code {code}: use one of {sorted(_ERRORS)}")
    reason, message = _ERRORS[code]
    err = errors.ApiError(message)
    err.code, err.reason = code, reason
    if code in (429, 503):
        err.headers = {"Retry-After": str(retry_after)}
        err.details = {"retryAfterSeconds": retry_after}
    return err


class ApiFaults:
    """The rules in force, applied by the API server around every resource request."""

    def __init__(self, seed: int | None = None):
        self.rules: list[Rule] = []
        self._ids = itertools.count(1)
        self._random = random.Random(seed)
        self._watches: set[tuple[str, str, asyncio.Transport]] = set()

    def add(self, spec: dict[str, Any]) -> Rule:
        known = {"kind", "code", "verb", "resource", "namespace", "count", "seconds", "retry_after", "latency"}
        unknown = set(spec) - known
        if unknown:
            raise errors.BadRequest(f"unknown fault fields {sorted(unknown)}: use {sorted(known)}")
        rule = Rule(**spec)
        if rule.kind not in KINDS:
            raise errors.BadRequest(f"unknown fault kind {rule.kind!r}: use one of {', '.join(KINDS)}")
        if rule.kind == "error":
            status_error(rule.code, rule.retry_after)  # validates the code now rather than at the first request
        rule.id = next(self._ids)
        if rule.seconds is not None:
            rule.expires = asyncio.get_running_loop().time() + rule.seconds
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def _take(self, verb: str, resource: str, namespace: str) -> Rule | None:
        """The first live rule matching the request (counted as hit); expired or used-up rules are dropped."""
        now = asyncio.get_running_loop().time()
        self.rules = [
            r for r in self.rules if (r.expires is None or r.expires > now) and (r.count is None or r.hits < r.count)
        ]
        for rule in self.rules:
            if rule.kind == "gone" and verb != "watch":
                continue
            if rule.matches(verb, resource, namespace):
                rule.hits += 1
                return rule
        return None

    async def serve(
        self, request: web.Request, audit: dict[str, Any], handler: Callable[[], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Run ``handler`` for a resource request unless a rule interferes; remembers open watches."""
        verb, resource, namespace = audit["verb"], audit["resource"], audit.get("namespace", "")
        rule = self._take(verb, resource, namespace)
        if rule is not None and rule.kind == "error":
            raise status_error(rule.code, rule.retry_after)
        if rule is not None and rule.kind == "latency":
            low, high = rule.latency if isinstance(rule.latency, list) else (rule.latency, rule.latency)
            await asyncio.sleep(self._random.uniform(low, high))
        if rule is not None and rule.kind == "gone":
            return await _gone(request)
        if audit.get("subresource") == "log" and request.query.get("follow") in ("true", "1"):
            resource = f"{resource}/log"  # a followed log streams like a watch, and drops like one
        elif verb != "watch":
            return await handler()
        if request.transport is None:
            return await handler()
        entry = (resource, namespace, request.transport)
        self._watches.add(entry)
        try:
            return await handler()
        finally:
            self._watches.discard(entry)

    def drop_watches(self, resource: str | None = None, namespace: str | None = None) -> int:
        """Abort the connections of open watches and followed logs (``resource="pods/log"``), matching
        ``resource``/``namespace``; returns how many."""
        dropped = 0
        for res, ns, transport in list(self._watches):
            if (resource and resource not in (res, res.split(".", 1)[0])) or (namespace and namespace != ns):
                continue
            transport.abort()
            dropped += 1
        return dropped


async def _gone(request: web.Request) -> web.StreamResponse:
    """What a watch from a compacted resourceVersion gets: 200, then one ERROR event with a 410 Status."""
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    await response.prepare(request)
    since = request.query.get("resourceVersion") or "0"
    status = errors.Gone(f"too old resource version: {since} ({int(since) + 1 if since.isdigit() else 1})").status()
    await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
    await response.write_eof()
    return response
