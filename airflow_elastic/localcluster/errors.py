"""API errors as the Kubernetes API server reports them (``metav1.Status``)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error with an HTTP code, a ``Status`` reason, a message and optional details."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(kind: str | None, name: str | None, group: str = "") -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    return details


class BadRequest(ApiError):
    code, reason = 400, "BadRequest"


class Unauthorized(ApiError):
    code, reason = 401, "Unauthorized"


class NotFound(ApiError):
    code, reason = 404, "NotFound"

    @classmethod
    def of(cls, resource: str, name: str, group: str = "") -> NotFound:
        qualified = f"{resource}.{group}" if group else resource
        return cls(f'{qualified} "{name}" not found', details=_details(resource, name, group))


class MethodNotAllowed(ApiError):
    code, reason = 405, "MethodNotAllowed"


class AlreadyExists(ApiError):
    code, reason = 409, "AlreadyExists"

    @classmethod
    def of(cls, resource: str, name: str, group: str = "") -> AlreadyExists:
        qualified = f"{resource}.{group}" if group else resource
        return cls(f'{qualified} "{name}" already exists', details=_details(resource, name, group))


class Conflict(ApiError):
    code, reason = 409, "Conflict"

    @classmethod
    def stale(cls, resource: str, name: str, group: str = "") -> Conflict:
        qualified = f"{resource}.{group}" if group else resource
        return cls(
            f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            details=_details(resource, name, group),
        )


class Gone(ApiError):
    code, reason = 410, "Expired"


class Invalid(ApiError):
    """422 with ``details.causes`` (``{reason, message, field}``), as the API server and webhooks return."""

    code, reason = 422, "Invalid"

    @classmethod
    def of(cls, kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> Invalid:
        qualified = f"{kind}.{group}" if group else kind
        # apierrors.NewInvalid prints an aggregate: one error as is, several as "[a, b]", repeats once.
        listed = list(
            dict.fromkeys(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
        )
        summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
        details = {**_details(kind, name, group), "causes": causes}
        return cls(f'{qualified} "{name}" is invalid: {summary}', details=details)


class TooManyRequests(ApiError):
    code, reason = 429, "TooManyRequests"


class UnsupportedMediaType(ApiError):
    code, reason = 415, "UnsupportedMediaType"


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}
