"""Narrow Kubernetes API errors that keep the server's evidence (status, reason, message, body).

Both hooks translate what their client raised into one of these with :func:`from_api_exception` (an
``ApiException`` of ``kubernetes`` or ``kubernetes_asyncio``) or :func:`unreachable` (the request or its reply
was lost). Callers decide on the class: 409 ``AlreadyExists`` means "adopt", 404 ``NotFound`` "it is gone",
410 ``Gone`` "re-list", 429 ``Throttled`` "wait ``retry_after``".

This module imports neither Kubernetes client: it reads the exception's ``status``, ``reason``, ``body`` and
``headers`` attributes, which both clients' ``ApiException`` carry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from types import SimpleNamespace
from typing import Any

__all__ = [
    "TRANSIENT_ERRORS",
    "AlreadyExists",
    "ApiUnreachable",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubernetesApiError",
    "NotFound",
    "ServerError",
    "Throttled",
    "Unauthorized",
    "from_api_exception",
    "parse_retry_after",
    "unreachable",
]

#: Longest server message or raw body kept in an error (a misbehaving proxy can answer with a whole HTML page).
MAX_MESSAGE = 4000


class KubernetesApiError(Exception):
    """The Kubernetes API refused a request, or could not be reached.

    Attributes:
        status: HTTP status code (``None`` when no reply arrived).
        reason: the Kubernetes ``Status.reason`` (``AlreadyExists``, ``NotFound``, ``Invalid``...), else the HTTP
            reason phrase.
        message: the server's explanation (``Status.message``), else the raw body.
        body: the decoded ``Status`` object when the body was JSON, else the body text (or ``None``).
        operation: what was being done, e.g. ``create jobsets ns/name`` (set by the hooks).
    """

    #: What the user can do about it; appended to the message.
    hint = ""

    def __init__(
        self,
        status: int | None,
        reason: str,
        message: str,
        body: Mapping[str, Any] | str | None = None,
        *,
        operation: str = "",
    ) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.operation = operation

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep every attribute (retry_after, causes, operation...) across pickling, e.g. into a subprocess.
        return (type(self).__new__, (type(self), *self.args), self.__dict__)

    def __str__(self) -> str:
        where = f"{self.operation}: " if self.operation else ""
        code = f"{self.status} " if self.status is not None else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}{code}{self.reason}: {self.message}{hint}"


class BadRequest(KubernetesApiError):
    """400: the server could not decode the request, e.g. an unknown field under ``fieldValidation=Strict``."""

    hint = "an unknown field usually means the cluster runs an older JobSet/Kubernetes than the manifest needs"


class Unauthorized(KubernetesApiError):
    """401: the connection's credentials were not accepted."""

    hint = "check the credentials of the Kubernetes connection (token, client certificate, exec plugin)"


class Forbidden(KubernetesApiError):
    """403: authenticated, but RBAC does not allow this verb on this resource."""

    hint = "grant the connection's user or service account this verb on this resource (Role/RoleBinding)"


class NotFound(KubernetesApiError):
    """404: the object (or its namespace, or the resource type, e.g. JobSet CRD not installed) does not exist."""


class AlreadyExists(KubernetesApiError):
    """409 ``AlreadyExists``: an object with that name exists; a caller that made the name usually adopts it."""


class Conflict(KubernetesApiError):
    """409 other than ``AlreadyExists``: e.g. a stale ``resourceVersion``; re-read and try again."""


class Gone(KubernetesApiError):
    """410: the ``resourceVersion`` asked for is too old; re-list."""


class Invalid(KubernetesApiError):
    """422: the object fails validation. ``causes`` lists ``{"reason", "message", "field"}`` per problem."""

    def __init__(self, *args: Any, causes: list[dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.causes = causes or []


class Throttled(KubernetesApiError):
    """429: the server shed the request before processing it; ``retry_after`` is its advice in seconds."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


class ServerError(KubernetesApiError):
    """5xx: the server (or a proxy in front of it) failed; a write may or may not have happened."""


class ApiUnreachable(KubernetesApiError):
    """No reply: connection refused or reset, TLS failure, timeout. A write may or may not have happened."""

    hint = "check the connection's server address and that the API server is up"


#: What a waiter rides out for its ``api_outage_tolerance`` (each already retried by the hook): the next look may work.
#: Permission, authentication and "no such resource" errors do not go away by waiting.
TRANSIENT_ERRORS: tuple[type[KubernetesApiError], ...] = (ServerError, Throttled, ApiUnreachable, Gone, Conflict)


_BY_STATUS: dict[int, type[KubernetesApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    410: Gone,
    422: Invalid,
    429: Throttled,
}


def watch_event(line: str | bytes, operation: str = "") -> dict[str, Any] | None:
    """One line of a watch stream as its ``{"type", "object"}`` event (``None`` for a blank line); an in-stream
    ``ERROR`` event (e.g. 410 Expired) raises as the HTTP status it carries would."""
    if not line.strip():
        return None
    event: dict[str, Any] = json.loads(line)
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise from_api_exception(
            SimpleNamespace(status=status.get("code"), reason="", body=json.dumps(status)), operation
        )
    return event


def from_api_exception(exc: object, operation: str = "") -> KubernetesApiError:
    """Translate a Kubernetes client's ``ApiException`` into the narrow error for its status.

    Args:
        exc: a ``kubernetes.client.ApiException`` or ``kubernetes_asyncio.client.ApiException`` (anything with
            ``status``, ``reason``, ``body`` and ``headers``).
        operation: what was being done, for the message (``create jobsets ns/name``).

    Returns:
        The matching :class:`KubernetesApiError` subclass, carrying the server's status, reason, message, decoded
        body, and for 422 the ``causes``, for 429 the ``retry_after`` seconds. Status 0 (the ``kubernetes`` client
        reports TLS failures that way) becomes :class:`ApiUnreachable`.
    """
    status = getattr(exc, "status", None)
    http_reason = str(getattr(exc, "reason", "") or "")
    raw = getattr(exc, "body", None)
    status_obj = _decode_status(raw)
    body: Mapping[str, Any] | str | None = status_obj if status_obj is not None else _text(raw)
    reason = str((status_obj or {}).get("reason") or http_reason or "Unknown")
    message = str((status_obj or {}).get("message") or _text(raw) or http_reason or "no message")[:MAX_MESSAGE]
    details = (status_obj or {}).get("details") or {}
    common: dict[str, Any] = {"operation": operation}

    if not status:
        return ApiUnreachable(None, "ConnectionError", http_reason or message, body, **common)
    if status == 409:
        kind = AlreadyExists if reason == "AlreadyExists" else Conflict
        return kind(status, reason, message, body, **common)
    if status == 422:
        return Invalid(status, reason, message, body, causes=list(details.get("causes") or []), **common)
    if status == 429:
        retry_after = parse_retry_after(_header(getattr(exc, "headers", None), "Retry-After"))
        if retry_after is None and isinstance(details.get("retryAfterSeconds"), int | float):
            retry_after = float(details["retryAfterSeconds"])
        return Throttled(status, reason, message, body, retry_after=retry_after, **common)
    if status >= 500:
        return ServerError(status, reason, message, body, **common)
    return _BY_STATUS.get(status, KubernetesApiError)(status, reason, message, body, **common)


def unreachable(exc: BaseException, operation: str = "") -> ApiUnreachable:
    """Wrap a transport failure (no HTTP reply) of either client.

    Args:
        exc: the ``urllib3``/``aiohttp``/socket/timeout exception.
        operation: what was being done, for the message.

    Returns:
        An :class:`ApiUnreachable` naming the exception type and its text.
    """
    text = str(exc) or type(exc).__name__
    return ApiUnreachable(None, type(exc).__name__, text[:MAX_MESSAGE], None, operation=operation)


def parse_retry_after(value: str | float | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value.

    Args:
        value: delay-seconds (``"3"``) or an HTTP date (``"Wed, 21 Oct 2026 07:28:00 GMT"``).
        now: the current time as a Unix timestamp (default: the clock), for dates.

    Returns:
        The delay in seconds (never negative), or ``None`` when the value is missing or unreadable.
    """
    if value is None:
        return None
    if isinstance(value, int | float):
        return max(0.0, float(value))
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _decode_status(raw: Any) -> dict[str, Any] | None:
    """The body as a JSON object (normally a ``kind: Status``), or ``None`` when it is not one."""
    if isinstance(raw, Mapping):
        return dict(raw)
    text = _text(raw)
    if not text:
        return None
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, bytes | bytearray):
        return bytes(raw).decode("utf-8", errors="replace")
    return str(raw)


def _header(headers: Any, name: str) -> str | None:
    """A header from urllib3's ``HTTPHeaderDict``, aiohttp's ``CIMultiDictProxy`` or a plain dict, any case."""
    if not headers:
        return None
    value = headers.get(name)
    if value is None and hasattr(headers, "items"):
        value = next((v for k, v in headers.items() if str(k).lower() == name.lower()), None)
    return None if value is None else str(value)
