"""Mapping of Kubernetes API failures to the narrow errors (pure: no cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from kubernetes.client import ApiException as SyncApiException
from kubernetes_asyncio.client import ApiException as AsyncApiException

from airflow_elastic.hooks import errors
from airflow_elastic.hooks.errors import (
    AlreadyExists,
    ApiUnreachable,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubernetesApiError,
    NotFound,
    ServerError,
    Throttled,
    Unauthorized,
    from_api_exception,
    parse_retry_after,
    unreachable,
)


class Reply:
    """What both clients' ``ApiException(http_resp=...)`` read from a reply."""

    def __init__(self, status: int, body: bytes | str | None, headers: dict[str, str] | None = None, reason: str = ""):
        self.status, self.data, self.reason, self._headers = status, body, reason or "Reason", headers or {}

    def getheaders(self) -> dict[str, str]:
        return self._headers


def status_body(code: int, reason: str, message: str, **details: object) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    body["message"] = message
    if details:
        body["details"] = details
    return json.dumps(body).encode()


@pytest.fixture(params=[SyncApiException, AsyncApiException], ids=["kubernetes", "kubernetes_asyncio"])
def api_exception(request):
    """Builds an ApiException of either client from a status, a body and headers."""

    def make(status: int, body: bytes | str | None = None, headers: dict[str, str] | None = None, reason: str = ""):
        return request.param(http_resp=Reply(status, body, headers, reason))

    return make


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (400, "BadRequest", BadRequest),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", Throttled),
        (500, "InternalError", ServerError),
        (502, "", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (504, "Timeout", ServerError),
        (405, "MethodNotAllowed", KubernetesApiError),
        (415, "UnsupportedMediaType", KubernetesApiError),
    ],
)
def test_every_status_maps_to_its_class(api_exception, status, reason, expected):
    error = from_api_exception(api_exception(status, status_body(status, reason, f"boom {status}")), "get jobsets a/b")
    assert type(error) is expected
    assert error.status == status
    assert error.message == f"boom {status}"
    assert error.operation == "get jobsets a/b"
    assert isinstance(error.body, dict) and error.body["code"] == status


def test_409_already_exists_is_told_from_other_conflicts(api_exception):
    exists = from_api_exception(
        api_exception(409, status_body(409, "AlreadyExists", 'jobsets.jobset.x-k8s.io "t" already exists'))
    )
    stale = from_api_exception(
        api_exception(409, status_body(409, "Conflict", "the object has been modified; please apply your changes"))
    )
    assert isinstance(exists, AlreadyExists) and not isinstance(exists, Conflict)
    assert isinstance(stale, Conflict) and not isinstance(stale, AlreadyExists)
    assert exists.reason == "AlreadyExists" and "already exists" in exists.message


def test_message_and_evidence_are_carried(api_exception):
    body = status_body(400, "BadRequest", 'strict decoding error: unknown field "spec.replicatedJobz"')
    error = from_api_exception(api_exception(400, body, reason="Bad Request"), "create jobsets ns/t")
    assert error.reason == "BadRequest"
    assert error.message == 'strict decoding error: unknown field "spec.replicatedJobz"'
    assert error.body["kind"] == "Status"
    text = str(error)
    assert text.startswith('create jobsets ns/t: 400 BadRequest: strict decoding error: unknown field "spec.')
    assert "JobSet" in text  # the hint says what to do


def test_invalid_carries_causes(api_exception):
    causes = [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.replicatedJobs"}]
    error = from_api_exception(
        api_exception(422, status_body(422, "Invalid", "JobSet.jobset.x-k8s.io is invalid", causes=causes))
    )
    assert isinstance(error, Invalid)
    assert error.causes == causes


def test_throttled_reads_retry_after_header_in_any_case(api_exception):
    error = from_api_exception(
        api_exception(429, status_body(429, "TooManyRequests", "slow down"), {"retry-after": "3"})
    )
    assert isinstance(error, Throttled)
    assert error.retry_after == 3.0


def test_throttled_falls_back_to_status_details(api_exception):
    body = status_body(429, "TooManyRequests", "slow down", retryAfterSeconds=7)
    assert from_api_exception(api_exception(429, body)).retry_after == 7.0


def test_throttled_without_advice(api_exception):
    assert from_api_exception(api_exception(429, b"")).retry_after is None


def test_body_that_is_not_a_status_is_kept_as_text(api_exception):
    error = from_api_exception(api_exception(502, b"<html>bad gateway</html>", reason="Bad Gateway"))
    assert isinstance(error, ServerError)
    assert error.reason == "Bad Gateway"
    assert error.message == "<html>bad gateway</html>"
    assert error.body == "<html>bad gateway</html>"


def test_huge_bodies_are_truncated_in_the_message(api_exception):
    error = from_api_exception(api_exception(500, b"x" * (errors.MAX_MESSAGE * 3)))
    assert len(error.message) == errors.MAX_MESSAGE


def test_status_zero_means_no_reply():
    # The kubernetes client reports TLS failures as ApiException(status=0, reason="SSLError ...").
    error = from_api_exception(SyncApiException(status=0, reason="SSLError\ncertificate verify failed"))
    assert isinstance(error, ApiUnreachable)
    assert error.status is None
    assert "certificate verify failed" in error.message


def test_transport_failures_are_unreachable():
    error = unreachable(ConnectionResetError("Connection reset by peer"), "get jobsets a/b")
    assert isinstance(error, ApiUnreachable)
    assert error.reason == "ConnectionResetError"
    assert str(error).startswith("get jobsets a/b: ConnectionResetError: Connection reset by peer")


def test_errors_pickle_roundtrip():
    # Errors cross process boundaries (Airflow task runner); they must keep their evidence.
    import pickle

    error = Throttled(429, "TooManyRequests", "slow down", {"code": 429}, retry_after=2.0, operation="list pods")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is Throttled
    assert (copy.status, copy.retry_after, copy.operation, copy.body) == (429, 2.0, "list pods", {"code": 429})
    assert str(copy) == str(error)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", 3.0), (" 10 ", 10.0), ("0", 0.0), ("-5", 0.0), ("1.5", 1.5), (4, 4.0), (None, None), ("soon", None)],
)
def test_parse_retry_after_seconds(value, expected):
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date():
    now = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 10, 21, 7, 28, 30, tzinfo=UTC), usegmt=True)
    earlier = format_datetime(datetime(2026, 10, 21, 7, 27, 0, tzinfo=UTC), usegmt=True)
    assert parse_retry_after(later, now=now.timestamp()) == 30.0
    assert parse_retry_after(earlier, now=now.timestamp()) == 0.0
