"""Which failed requests the hooks try again (pure policy, then both hooks through their real clients against a
scripted HTTP server that answers 429/5xx/401/dropped connections on demand)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.hooks import (
    ApiUnreachable,
    AsyncJobSetHook,
    BadRequest,
    JobSetHook,
    NotFound,
    RetryPolicy,
    ServerError,
    Throttled,
    Unauthorized,
)
from airflow_elastic.hooks.errors import Conflict, Forbidden, Gone, Invalid
from airflow_elastic.hooks.retry import Step

# ---------------------------------------------------------------------------------------------- the policy

POLICY = RetryPolicy(attempts=4, base_delay=1.0, max_delay=5.0, max_retry_after=30.0)


def err(kind: type, status: int | None = 500, **kw: Any):
    return kind(status, kind.__name__, "m", **kw)


@pytest.mark.parametrize("kind", [ServerError, ApiUnreachable])
def test_repeatable_requests_retry_on_server_errors_and_lost_replies(kind):
    assert POLICY.next_step(err(kind), attempt=1, repeatable=True, refreshed=False) is not None
    assert POLICY.next_step(err(kind), attempt=1, repeatable=False, refreshed=False) is None


@pytest.mark.parametrize("kind", [BadRequest, NotFound, Forbidden, Conflict, Gone, Invalid])
def test_other_client_errors_are_never_retried(kind):
    assert POLICY.next_step(err(kind, 400), attempt=1, repeatable=True, refreshed=False) is None


def test_throttling_is_retried_even_for_creates_and_honours_retry_after():
    step = POLICY.next_step(err(Throttled, 429, retry_after=7.0), attempt=1, repeatable=False, refreshed=False)
    assert step is not None and 7.0 <= step.delay <= 7.0 + POLICY.base_delay
    capped = POLICY.next_step(err(Throttled, 429, retry_after=600.0), attempt=1, repeatable=True, refreshed=False)
    assert capped.delay <= POLICY.max_retry_after + POLICY.base_delay
    unadvised = POLICY.next_step(err(Throttled, 429), attempt=2, repeatable=True, refreshed=False, rng=lambda: 0.0)
    assert unadvised == Step(POLICY.backoff(2, lambda: 0.0))


def test_unauthorized_refreshes_credentials_once():
    assert POLICY.next_step(err(Unauthorized, 401), attempt=1, repeatable=False, refreshed=False) == Step(
        0.0, refresh=True
    )
    assert POLICY.next_step(err(Unauthorized, 401), attempt=2, repeatable=False, refreshed=True) is None


def test_attempts_are_bounded():
    assert POLICY.next_step(err(ServerError), attempt=3, repeatable=True, refreshed=False) is not None
    assert POLICY.next_step(err(ServerError), attempt=4, repeatable=True, refreshed=False) is None
    assert RetryPolicy(attempts=1).next_step(err(ServerError), attempt=1, repeatable=True, refreshed=False) is None


def test_backoff_doubles_with_jitter_and_is_capped():
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (10, 5.0)]:
        assert POLICY.backoff(attempt, lambda: 0.0) == ceiling / 2
        assert POLICY.backoff(attempt, lambda: 0.999999) == pytest.approx(ceiling, rel=1e-5)


def test_policy_refuses_nonsense():
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="negative"):
        RetryPolicy(base_delay=-1)


# ------------------------------------------------------------------------------- the hooks, end to end

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02)
DROP = "drop"  # close the connection without answering


@dataclass
class Scripted:
    """A fake API server: answers each request with the next scripted reply, then 200 with ``default``."""

    replies: list[Any]
    default: dict[str, Any]
    seen: list[tuple[str, str, str]]  # method, path with query, content type


def status(
    code: int, reason: str, message: str = "scripted", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    return (
        code,
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message},
        headers or {},
    )


def methods(script: Scripted) -> list[str]:
    return [method for method, _, _ in script.seen]


@pytest.fixture
def server() -> Iterator[tuple[Scripted, str]]:
    script = Scripted([], {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "x"}}, [])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            script.seen.append((self.command, self.path, self.headers.get("Content-Type", "")))
            reply = script.replies.pop(0) if script.replies else (200, script.default, {})
            if reply == DROP:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            code, body, headers = reply
            data = json.dumps(body).encode()
            self.send_response(code)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield script, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def conn_id(server, tmp_path: Path, monkeypatch) -> str:
    _, url = server
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "fake", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig))
    extra = {"kube_config_path": str(path)}
    monkeypatch.setenv("AIRFLOW_CONN_SCRIPTED", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return "scripted"


def call(conn_id: str, flavour: str, method: str, *args: Any) -> Any:
    """Run one hook method through the sync or the async hook."""
    if flavour == "sync":
        hook = JobSetHook(conn_id, retry=FAST)
        try:
            return getattr(hook, method)(*args)
        finally:
            hook.close()
    return asyncio.run(getattr(AsyncJobSetHook(conn_id, retry=FAST), method)(*args))


BODY = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "x"}, "spec": {}}
both = pytest.mark.parametrize("flavour", ["sync", "async"])


@both
def test_reads_retry_through_throttling_and_server_errors(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(429, "TooManyRequests", headers={"Retry-After": "0"}), status(503, "ServiceUnavailable")]
    assert call(conn_id, flavour, "get_jobset", "ns", "x")["metadata"]["name"] == "x"
    assert methods(script) == ["GET", "GET", "GET"]


@both
def test_reads_give_up_after_the_last_attempt(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(500, "InternalError")] * 10
    with pytest.raises(ServerError):
        call(conn_id, flavour, "list_pods", "ns", None)
    assert len(script.seen) == FAST.attempts


@both
def test_creates_are_not_retried_after_server_errors_or_lost_replies(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(500, "InternalError")]
    with pytest.raises(ServerError):
        call(conn_id, flavour, "create_jobset", "ns", BODY)
    script.replies = [DROP]
    with pytest.raises(ApiUnreachable):
        call(conn_id, flavour, "create_jobset", "ns", BODY)
    assert methods(script) == ["POST", "POST"]
    assert "fieldValidation=Strict" in script.seen[0][1]


@both
def test_creates_are_retried_when_throttled(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(429, "TooManyRequests", headers={"Retry-After": "0"})]
    call(conn_id, flavour, "create_jobset", "ns", BODY)
    assert methods(script) == ["POST", "POST"]


@both
def test_bad_requests_are_not_retried(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(400, "BadRequest", 'strict decoding error: unknown field "spec.x"')]
    with pytest.raises(BadRequest, match="unknown field"):
        call(conn_id, flavour, "create_jobset", "ns", BODY)
    assert len(script.seen) == 1


@both
def test_unauthorized_rebuilds_the_client_once(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(401, "Unauthorized")]
    assert call(conn_id, flavour, "get_jobset", "ns", "x")["kind"] == "JobSet"
    script.replies = [status(401, "Unauthorized")] * 3
    with pytest.raises(Unauthorized):
        call(conn_id, flavour, "get_jobset", "ns", "x")
    assert len(script.seen) == 4


@both
def test_delete_whose_reply_was_lost_finds_the_object_gone(server, conn_id, flavour):
    script, _ = server
    script.replies = [status(503, "ServiceUnavailable"), status(404, "NotFound")]
    assert call(conn_id, flavour, "delete_jobset", "ns", "x") is None
    assert methods(script) == ["DELETE", "DELETE"]
    assert "propagationPolicy=Foreground" in script.seen[0][1]


@both
def test_patch_is_a_merge_patch(server, conn_id, flavour):
    script, _ = server
    call(conn_id, flavour, "patch_jobset", "ns", "x", {"spec": {"suspend": True}})
    assert script.seen == [
        ("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/x", "application/merge-patch+json")
    ]
